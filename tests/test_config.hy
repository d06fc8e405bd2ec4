;; Tests of passepartout/config.hy: defaults, the TOML file, the environment, secrets.

(import os stat
        pathlib [Path]
        pytest
        passepartout.config [load-config config-file config-secrets ensure-dirs ConfigError]
        passepartout.daemon [boot]
        steps [expect :as check])

(defn home-env [tmp-path #** more]
  "An environment with nothing but a HOME in TMP-PATH (and MORE)."
  (| {"HOME" (str (/ tmp-path "home"))} (dfor [k v] (.items more) k v)))

(defn write-config [tmp-path text [name "config.toml"]]
  (setv path (/ tmp-path name))
  (.write-text path text :encoding "utf-8")
  path)

;; * Defaults

(defn test-defaults-with-no-file-and-no-environment [tmp-path]
  (setv home (/ tmp-path "home")
        data (str (/ home ".local/share/passepartout"))
        cfg (load-config :env (home-env tmp-path)))
  (check (get cfg "data_dir") data "data_dir")
  (check (get cfg "workspace") (os.path.join data "workspace") "workspace")
  (check (get cfg "runtime_dir") (os.path.join data "run") "runtime_dir")
  (check (get cfg "limits") {"step_budget" 8 "attempts" 3 "shell_timeout" 30
                             "output_limit" 16000 "model_concurrency" 4
                             "file_size" "4 GiB" "workspace_quota" "8 GiB" "keep_free" "1 GiB"
                             "processes" 512 "memory" "50%" "cpu_time" 3600 "cgroup" "auto"} "limits")
  (check (get cfg "undo") {"enabled" True "keep" 20 "max_bytes" "4 GiB" "max_file" "256 MiB"} "undo")
  (check (get cfg "cascade") {"cooldown" 60 "failure_threshold" 3} "cascade")
  (check (get cfg "providers") [] "providers")
  (check (get cfg "skills") {"dirs" [(os.path.join data "skills")] "disabled" [] "immutable" []} "skills")
  (check (get cfg "gateways") {"terminal" {"enabled" True}} "gateways")
  (check (get cfg "config_file") None "no file read"))

(defn test-xdg-directories [tmp-path]
  (setv cfg (load-config :env (home-env tmp-path :XDG_DATA_HOME (str (/ tmp-path "xdata"))
                                        :XDG_RUNTIME_DIR (str (/ tmp-path "xrun"))
                                        :XDG_CONFIG_HOME (str (/ tmp-path "xconf")))))
  (check (get cfg "data_dir") (str (/ tmp-path "xdata/passepartout")) "XDG_DATA_HOME")
  (check (get cfg "runtime_dir") (str (/ tmp-path "xrun/passepartout")) "XDG_RUNTIME_DIR")
  (check (config-file :env (home-env tmp-path :XDG_CONFIG_HOME (str (/ tmp-path "xconf"))))
         #((str (/ tmp-path "xconf/passepartout/config.toml")) False) "XDG_CONFIG_HOME")
  ;; relative XDG values are to be ignored
  (check (get (load-config :env (home-env tmp-path :XDG_DATA_HOME "rel")) "data_dir")
         (str (/ tmp-path "home/.local/share/passepartout")) "relative XDG_DATA_HOME"))

(defn test-the-default-config-file-is-read [tmp-path]
  (setv conf (/ tmp-path "home/.config/passepartout/config.toml"))
  (.mkdir conf.parent :parents True)
  (.write-text conf "[limits]\nattempts = 5\n")
  (setv cfg (load-config :env (home-env tmp-path)))
  (check (get cfg "limits" "attempts") 5 "from the default file")
  (check (get cfg "config_file") (str conf) "config_file"))

;; * The file

(defn test-file-merges-over-defaults [tmp-path]
  (setv path (write-config tmp-path #[toml[
data_dir = "~/pp"
[limits]
step_budget = 12
shell_timeout = 2.5

[[providers]]
model = "openai/gpt-4o-mini"
api_key_env = "OPENAI_API_KEY"

[[providers]]
model = "ollama/llama3"
api_base = "http://127.0.0.1:11434"

[skills]
dirs = ["skills", "/abs/skills"]

[gateways.telegram]
enabled = true
token_env = "MY_BOT_TOKEN"
allowed_users = [42]
]toml])
        cfg (load-config path (home-env tmp-path))
        data (str (/ tmp-path "home/pp")))
  (check (get cfg "data_dir") data "~ expanded")
  (check (get cfg "workspace") (os.path.join data "workspace") "workspace follows data_dir")
  (check (get cfg "runtime_dir") (os.path.join data "run") "runtime_dir follows data_dir")
  (check (get cfg "limits") {"step_budget" 12 "attempts" 3 "shell_timeout" 2.5
                             "output_limit" 16000 "model_concurrency" 4
                             "file_size" "4 GiB" "workspace_quota" "8 GiB" "keep_free" "1 GiB"
                             "processes" 512 "memory" "50%" "cpu_time" 3600 "cgroup" "auto"} "limits merged")
  (check (lfor p (get cfg "providers") (get p "model")) ["openai/gpt-4o-mini" "ollama/llama3"])
  (check (get cfg "skills" "dirs") [(str (/ tmp-path "skills")) "/abs/skills"]
         "relative paths are relative to the file")
  (check (get cfg "skills" "disabled") [] "skills.disabled kept")
  (check (get cfg "gateways")
         {"terminal" {"enabled" True}
          "telegram" {"enabled" True "token_env" "MY_BOT_TOKEN" "allowed_users" [42]}} "gateways merged")
  (check (get cfg "config_file") (str path) "config_file"))

(defn test-relative-paths-in-the-file-are-relative-to-the-file [tmp-path]
  (setv sub (/ tmp-path "conf"))
  (.mkdir sub)
  (setv path (write-config sub "data_dir = \"state\"\nworkspace = \"../ws\"\n")
        cfg (load-config path (home-env tmp-path)))
  (check (get cfg "data_dir") (str (/ sub "state")) "data_dir")
  (check (get cfg "workspace") (str (/ tmp-path "ws")) "workspace, normalised"))

(defn test-wrong-types-are-refused [tmp-path]
  (for [[text name] [["[limits]\nstep_budget = \"8\"\n" "limits.step_budget"]
                     ["limits = 3\n" "limits"]
                     ["providers = \"openai\"\n" "providers"]
                     ["data_dir = 7\n" "data_dir"]
                     ["[gateways]\nterminal = true\n" "gateways.terminal"]
                     ["[skills]\ndirs = [1]\n" "skills.dirs"]
                     ["[limits]\nattempts = true\n" "limits.attempts"]]]
    (setv path (write-config tmp-path text))
    (with [e (pytest.raises ConfigError)]
      (load-config path (home-env tmp-path)))
    (assert (in name (str e.value)) f"{text !r}: {e.value}")
    (assert (in (str path) (str e.value)) f"{text !r}: {e.value}")))

(defn test-the-validators-table-is-checked-and-read [tmp-path]
  (setv config (load-config (write-config tmp-path "[validators]\npremature-completion = true\nempty-promise = false\n")
                            (home-env tmp-path)))
  (check (get config "validators") {"premature-completion" True "empty-promise" False} "the [validators] table")
  (for [[text name] [["[validators]\nhallucinated-action = \"yes\"\n" "validators.hallucinated-action"]
                     ["[validators]\nhallucinated-actions = false\n" "hallucinated-action"]]]
    (setv path (write-config tmp-path text))
    (with [e (pytest.raises ConfigError)]
      (load-config path (home-env tmp-path)))
    (assert (in name (str e.value)) f"{text !r}: {e.value}")))

(defn test-explicit-missing-file-is-an-error [tmp-path]
  (setv missing (/ tmp-path "nope.toml"))
  (with [e (pytest.raises ConfigError)]
    (load-config missing (home-env tmp-path)))
  (assert (in (str missing) (str e.value)) (str e.value))
  (with [e (pytest.raises ConfigError)]
    (load-config :env (home-env tmp-path :PASSEPARTOUT_CONFIG (str missing))))
  (assert (in (str missing) (str e.value)) (str e.value)))

(defn test-passepartout-config-names-the-file [tmp-path]
  (setv path (write-config tmp-path "[cascade]\ncooldown = 5\n" "other.toml")
        cfg (load-config :env (home-env tmp-path :PASSEPARTOUT_CONFIG (str path))))
  (check (get cfg "cascade" "cooldown") 5)
  (check (get (load-config (write-config tmp-path "" "arg.toml")
                           (home-env tmp-path :PASSEPARTOUT_CONFIG (str path)))
              "cascade" "cooldown")
         60 "an argument beats the variable"))

(defn test-malformed-toml-names-the-file-and-the-line [tmp-path]
  (setv path (write-config tmp-path "[limits]\nattempts = 3\nstep_budget = \n"))
  (with [e (pytest.raises ConfigError)]
    (load-config path (home-env tmp-path)))
  (setv msg (str e.value))
  (assert (in (str path) msg) msg)
  (assert (in "line 3" msg) msg))

(defn test-unreadable-files-are-config-errors [tmp-path]
  (with [e (pytest.raises ConfigError)]
    (load-config tmp-path (home-env tmp-path)))
  (assert (in (str tmp-path) (str e.value)) (str e.value))
  (setv path (/ tmp-path "latin1.toml"))
  (.write-bytes path b"name = \"caf\xe9\"\n")
  (with [e (pytest.raises ConfigError)]
    (load-config path (home-env tmp-path)))
  (assert (in "UTF-8" (str e.value)) (str e.value)))

;; * Environment overrides

(defn test-environment-overrides-the-file [tmp-path]
  (setv path (write-config tmp-path "data_dir = \"/from/file\"\nworkspace = \"/ws/file\"\n")
        cfg (load-config path (home-env tmp-path
                                        :PASSEPARTOUT_DATA_DIR (str (/ tmp-path "envdata"))
                                        :PASSEPARTOUT_RUNTIME_DIR "~/run")))
  (check (get cfg "data_dir") (str (/ tmp-path "envdata")) "data_dir from env")
  (check (get cfg "workspace") "/ws/file" "workspace from the file")
  (check (get cfg "runtime_dir") (str (/ tmp-path "home/run")) "runtime_dir from env, ~ expanded")
  (setv cfg (load-config path (home-env tmp-path :PASSEPARTOUT_WORKSPACE "/ws/env")))
  (check (get cfg "workspace") "/ws/env" "workspace from env"))

(defn test-only-the-data-dir-moves-the-rest [tmp-path]
  (setv d (str (/ tmp-path "d"))
        cfg (load-config :env (home-env tmp-path :PASSEPARTOUT_DATA_DIR d)))
  (check (get cfg "workspace") (os.path.join d "workspace") "workspace")
  (check (get cfg "runtime_dir") (os.path.join d "run") "runtime_dir")
  (check (get cfg "skills" "dirs") [(os.path.join d "skills")] "skills"))

(defn test-relative-environment-paths-are-made-absolute [tmp-path monkeypatch]
  (.chdir monkeypatch tmp-path)
  (setv cfg (load-config :env (home-env tmp-path :PASSEPARTOUT_DATA_DIR "rel/data"
                                        :PASSEPARTOUT_WORKSPACE "")))
  (check (get cfg "data_dir") (str (/ tmp-path "rel/data")) "relative to the working directory")
  (check (get cfg "workspace") (str (/ tmp-path "rel/data/workspace")) "an empty variable is unset"))

;; * Secrets

(defn test-a-secret-in-the-file-is-refused [tmp-path]
  (for [[text name] [["api_key = \"sk-live-123\"\n" "api_key"]
                     ["[[providers]]\nmodel = \"m\"\napi_key = \"sk-1\"\n" "[[providers]] #1 api_key"]
                     ["[gateways.telegram]\ntoken = \"123:ABC\"\n" "gateways.telegram.token"]
                     ["[gateways.telegram]\nbot_token = \"123:ABC\"\n" "gateways.telegram.bot_token"]
                     ["[signal]\npassword = \"hunter2\"\n" "signal.password"]
                     ["[x.y]\nclient_secret = \"s\"\n" "x.y.client_secret"]
                     ["secret = \"s\"\n" "secret"]
                     ["[gateways.telegram]\ntoken = [\"a\", \"b\"]\n" "gateways.telegram.token"]]]
    (setv path (write-config tmp-path text))
    (with [e (pytest.raises ConfigError)]
      (load-config path (home-env tmp-path)))
    (setv msg (str e.value))
    (assert (in name msg) f"{text !r}: {msg}")
    (assert (in "environment variable" msg) msg)
    (assert (in "_env = " msg) msg)
    (for [value ["sk-live-123" "sk-1" "123:ABC" "hunter2"]]
      (assert (not (in value msg)) f"the message shows the secret: {msg}")))
  (setv path (write-config tmp-path "api_key = \"sk\"\n"))
  (with [e (pytest.raises ConfigError)]
    (load-config path (home-env tmp-path)))
  (assert (in "api_key_env = \"OPENAI_API_KEY\"" (str e.value)) (str e.value)))

(defn test-names-of-secrets-are-allowed [tmp-path]
  (setv path (write-config tmp-path #[toml[
[[providers]]
model = "openai/gpt-4o"
api_key_env = "OPENAI_API_KEY"
max_tokens = 1024
[gateways.telegram]
token_env = "TELEGRAM_BOT_TOKEN"
[gateways.signal]
number = "+15550001111"
]toml])
        cfg (load-config path (home-env tmp-path)))
  (check (get cfg "providers" 0 "max_tokens") 1024)
  ;; keys that only sound like secrets are judged by the schema, not refused as secrets
  (for [text ["[gateways.signal]\npassword_file = \"~/signal-pass\"\n"
              "[secrets]\nnote = \"a table called secrets holds no value itself\"\n"]]
    (with [e (pytest.raises ConfigError)]
      (load-config (write-config tmp-path text) (home-env tmp-path)))
    (assert (in "unknown" (str e.value)) f"{text !r}: {e.value}")
    (assert (not (in "secret, and" (str e.value))) f"{text !r}: {e.value}")))

(defn test-config-secrets [tmp-path]
  (setv path (write-config tmp-path #[toml[
[[providers]]
model = "openai/gpt-4o"
api_key_env = "OPENAI_API_KEY"
[[providers]]
model = "other"
api_key_env = "UNSET_KEY"
[[providers]]
model = "third"
api_key_env = "EMPTY_KEY"
[gateways.telegram]
enabled = true
[gateways.signal]
number = "+100"
]toml])
        env (home-env tmp-path
                      :OPENAI_API_KEY "sk-openai-0123456789"
                      :EMPTY_KEY ""
                      :TELEGRAM_BOT_TOKEN "123456:telegram-secret"
                      :SIGNAL_A "signal-a-value"
                      :SIGNAL_B "b"
                      :GITHUB_TOKEN "ghp_abcdefghijkl"
                      :SHORT_TOKEN "1"
                      :PATH "/usr/bin:/bin"
                      :EDITOR "vi")
        cfg (load-config path env))
  ;; an *_env key may name several variables; config-secrets reads any such key
  (setv (get cfg "gateways" "signal" "auth_env") ["SIGNAL_A" "SIGNAL_B"])
  (check (config-secrets cfg env)
         ["123456:telegram-secret" "sk-openai-0123456789" "ghp_abcdefghijkl" "signal-a-value" "b"]
         "named, conventional and credential-looking variables, longest first")
  (check (config-secrets (load-config :env (home-env tmp-path)) (home-env tmp-path)) []
         "no secrets at all")
  ;; without a Telegram gateway, TELEGRAM_BOT_TOKEN is only guessed from its name
  (check (config-secrets (load-config :env (home-env tmp-path :TELEGRAM_BOT_TOKEN "x"))
                         (home-env tmp-path :TELEGRAM_BOT_TOKEN "x"))
         [] "a short guessed value is skipped")
  (setv tg-only (write-config tmp-path "[gateways.telegram]\nenabled = true\n" "tg.toml"))
  (check (config-secrets (load-config tg-only (home-env tmp-path))
                         (home-env tmp-path :TELEGRAM_BOT_TOKEN "x"))
         ["x"] "the Telegram token is named by the gateway, whatever its length"))

;; * Folders

(defn test-ensure-dirs [tmp-path]
  (setv cfg (load-config :env (home-env tmp-path
                                        :PASSEPARTOUT_DATA_DIR (str (/ tmp-path "d"))
                                        :PASSEPARTOUT_RUNTIME_DIR (str (/ tmp-path "r/run"))))
        made (ensure-dirs cfg))
  (check made [(/ tmp-path "d") (/ tmp-path "d/workspace") (/ tmp-path "r/run")])
  (for [p made] (assert (.is-dir p) f"{p} missing"))
  (check (stat.S-IMODE (. (os.stat (/ tmp-path "d")) st-mode)) 0o700 "data dir private")
  (check (stat.S-IMODE (. (os.stat (/ tmp-path "r/run")) st-mode)) 0o700 "runtime dir private")
  (check (ensure-dirs cfg) made "a second call is harmless"))

;; * The schema

(defn test-a-misspelt-key-says-what-was-meant [tmp-path]
  (for [[text where key want]
        [["data_dri = \"x\"\n" "" "data_dri" "data_dir"]
         ["[limits]\nstep_budgte = 3\n" "[limits] " "step_budgte" "step_budget"]
         ["[budget]\nday_cots = 1.0\n" "[budget] " "day_cots" "day_cost"]
         ["[cascade]\ncooldwn = 5\n" "[cascade] " "cooldwn" "cooldown"]
         ["[skills]\ndisable = []\n" "[skills] " "disable" "disabled"]
         ["[sandbox]\nnetwrok = \"off\"\n" "[sandbox] " "netwrok" "network"]
         ["[approvals]\napprover = []\n" "[approvals] " "approver" "approvers"]
         ["[daemon]\nheartbeet = 5\n" "[daemon] " "heartbeet" "heartbeat"]
         ["[[providers]]\nmodel = \"a\"\n[[providers]]\nmodel = \"b\"\ntimeot = 9\n"
          "[[providers]] #2 " "timeot" "timeout"]
         ["[gateways.terminal]\nenabeld = false\n" "[gateways.terminal] " "enabeld" "enabled"]
         ["[gateways.telegram]\nallowed_user = [1]\n" "[gateways.telegram] " "allowed_user" "allowed_users"]
         ["[gateways.telegram]\nallow = [1]\n" "[gateways.telegram] " "allow" "allowed_users"]
         ["[gateways.signal]\nnumbr = \"+1\"\n" "[gateways.signal] " "numbr" "number"]]]
    (setv path (write-config tmp-path text))
    (with [e (pytest.raises ConfigError)]
      (load-config path (home-env tmp-path)))
    (check (str e.value) f"{path}: {where}{key} — unknown key; did you mean {want}?" text)))

(defn test-config-errors-name-each-place-one-way-and-all-at-once [tmp-path]
  ;; a provider is [[providers]] #N in every message: an unknown key, a wrong type, a secret
  (setv path (write-config tmp-path (+ "[[providers]]\nmodel = \"a\"\n"
                                       "[[providers]]\nmodel = \"b\"\napi_key = \"sk-9\"\ntimout = 3\nmax_tokens = \"x\"\n"
                                       "[[providers]]\nname = \"c\"\n"
                                       "[limts]\nattempts = 3\n"
                                       "[telegram]\ntoken_env = \"T\"\n"
                                       "[[provider]]\nmodel = \"c\"\n"
                                       "[gateways.telegram]\ntoken = \"123:ABC\"\n")))
  (with [e (pytest.raises ConfigError)]
    (load-config path (home-env tmp-path)))
  (setv lines (.splitlines (str e.value)))
  (check lines
         [f"{path}: [[providers]] #2 api_key, gateways.telegram.token look like a secret, and secrets are never read from the config file: name an environment variable that holds it instead, e.g. api_key_env = \"OPENAI_API_KEY\""
          f"{path}: [[providers]] #2 timout — unknown key; did you mean timeout?"
          f"{path}: [[providers]] #2 max_tokens should be a whole number, not 'x'"
          f"{path}: [[providers]] #3 has no model, which it needs; e.g. model = \"openai/gpt-4o-mini\""
          f"{path}: [limts] — unknown section; did you mean [limits]?"
          f"{path}: [telegram] — unknown section; did you mean [gateways.telegram]?"
          f"{path}: [[provider]] — unknown section; did you mean [[providers]]?"]
         "every problem, one line each, a provider named one way, a section called a section")
  (assert (not (in "providers[" (str e.value))) (str e.value))
  ;; the variable suggested for a gateway's token is the one the gateway reads by default
  (with [e (pytest.raises ConfigError)]
    (load-config (write-config tmp-path "[gateways.telegram]\ntoken = \"123:ABC\"\n") (home-env tmp-path)))
  (assert (in "token_env = \"TELEGRAM_BOT_TOKEN\"" (str e.value)) (str e.value))
  ;; a value the cascade refuses names the provider the same way
  (with [e (pytest.raises ConfigError)]
    (boot (write-config tmp-path "[[providers]]\nmodel = \"m\"\n[[providers]]\nmodel = \"n\"\ntimeout = -3\n")
          :environ (home-env tmp-path)))
  (assert (in "[[providers]] #2 timeout must be a positive number" (str e.value)) (str e.value)))

(defn test-an-unknown-gateway-says-what-was-meant [tmp-path]
  (setv path (write-config tmp-path "[gateways.telegarm]\nenabled = true\n"))
  (with [e (pytest.raises ConfigError)]
    (load-config path (home-env tmp-path)))
  (check (str e.value) f"{path}: [gateways] telegarm — unknown gateway; did you mean telegram?")
  (setv path (write-config tmp-path "[gateways.irc]\nenabled = true\n"))
  (with [e (pytest.raises ConfigError)]
    (load-config path (home-env tmp-path)))
  (assert (in "irc — unknown gateway; the gateways are terminal, telegram, signal" (str e.value))
          (str e.value)))

(defn test-a-misspelt-word-says-what-was-meant [tmp-path]
  (setv path (write-config tmp-path "[sandbox]\nmode = \"of\"\n"))
  (with [e (pytest.raises ConfigError)]
    (load-config path (home-env tmp-path)))
  (assert (in "sandbox.mode" (str e.value)) (str e.value))
  (assert (in "did you mean \"off\"?" (str e.value)) (str e.value)))

(defn test-a-full-valid-config-loads [tmp-path]
  (setv path (write-config tmp-path #[toml[
data_dir = "data"
workspace = "ws"
runtime_dir = "run"

[[providers]]
model = "openai/gpt-4o-mini"
name = "mini"
api_key_env = "OPENAI_API_KEY"
timeout = 20
max_tokens = 2048

[[providers]]
model = "ollama_chat/llama3.2"
api_base = "http://127.0.0.1:11434"
probe = true

[limits]
step_budget = 10
attempts = 2
shell_timeout = 15.5
output_limit = 8000
model_concurrency = 2

[budget]
task_tokens = 100000
task_cost = 0.5
day_tokens = 0
day_cost = 5

[cascade]
cooldown = 30
failure_threshold = 2

[skills]
dirs = ["skills"]
disabled = ["memory"]
immutable = ["shell-safety"]

[sandbox]
mode = "bubblewrap"
network = "off"
bwrap = "/usr/bin/bwrap"
home_paths = [".gitconfig"]

[approvals]
approvers = ["telegram:123456789", "signal:+15550002222", "terminal:local"]
required = ["telegram:123456789"]
strategy = "all"
separate_duties = true
expiry_minutes = 5
max_grant_minutes = 60

[daemon]
heartbeat = 30
shutdown_grace = 5
inbox_keep = 3600
log_max_bytes = 1048576
log_backups = 2

[gateways.terminal]
enabled = false

[gateways.telegram]
enabled = true
token_env = "TELEGRAM_BOT_TOKEN"
allowed_users = [123456789]
api_base = "https://api.telegram.org/bot"
poll_timeout = 30
poll_limit = 50
max_input = 8000
show_traces = true

[gateways.signal]
enabled = true
number = "+15550001111"
allowed_numbers = ["+15550002222"]
url = "http://127.0.0.1:8080"
allow_remote = false
poll_interval = 1.0
receive_timeout = 1
retry_delay = 1.0
max_input_chars = 8000
show_traces = false
]toml])
        cfg (load-config path (home-env tmp-path)))
  (check (get cfg "workspace") (str (/ tmp-path "ws")) "workspace")
  (check (get cfg "limits" "shell_timeout") 15.5 "limits")
  (check (get cfg "approvals" "strategy") "all" "approvals pass through")
  (check (get cfg "gateways" "terminal") {"enabled" False} "terminal")
  (check (get cfg "gateways" "signal" "number") "+15550001111" "signal")
  (check (get cfg "sandbox" "home_paths") [(str (/ tmp-path "home/.gitconfig"))] "home_paths")
  (import passepartout.providers [providers-from-config]
          passepartout.approvals.hitl [approvals-config]
          passepartout.daemon [daemon-settings])
  (check (lfor p (providers-from-config cfg {}) (get p "name")) ["mini" "ollama_chat/llama3.2" "symbolic"]
         "the providers are usable")
  (check (get (approvals-config cfg) "max_grant_minutes") 60 "the approvals are usable")
  (check (get (daemon-settings cfg) "log_backups") 2 "the daemon settings are usable"))

(defn test-config-defaults-are-the-schemas-defaults []
  (import passepartout.config [config-defaults]
          passepartout.settings [schema-section])
  (check (config-defaults "approvals")
         {"approvers" [] "required" [] "strategy" "any" "separate_duties" False
          "expiry_minutes" 10 "max_grant_minutes" 480}
         "the defaults of a table")
  (check (get (config-defaults "gateways" "telegram") "token_env") "TELEGRAM_BOT_TOKEN"
         "the defaults of one of the named tables")
  (assert (not (in "number" (config-defaults "gateways" "signal")))
          "a key with no default is left out")
  (.append (get (config-defaults "approvals") "approvers") "x:y")
  (check (get (config-defaults "approvals") "approvers") [] "each call gives a new dict")
  (check (get (schema-section "approvals") "keys" "approvers" "default") [] "the schema is untouched"))

(defn test-with-an-empty-config-each-module-uses-the-schemas-defaults []
  (import passepartout.config [config-defaults]
          passepartout.budget [budget-limits]
          passepartout.approvals.hitl [approvals-config]
          passepartout.daemon [daemon-settings]
          passepartout.sandbox [sandbox-settings]
          passepartout.context [make-context context-limit]
          passepartout.providers [providers-from-config]
          passepartout.gateways.telegram [_settings :as telegram-settings])
  (setv limits (config-defaults "limits"))
  (check (budget-limits {}) (config-defaults "budget") "budget")
  (check (approvals-config {}) (config-defaults "approvals") "approvals")
  (check (daemon-settings {})
         (| (config-defaults "daemon") {"model_concurrency" (get limits "model_concurrency")})
         "daemon")
  (check (sandbox-settings {}) (config-defaults "sandbox") "sandbox")
  (setv ctx (make-context))
  (check (dfor k limits k (context-limit ctx (.replace k "_" "-"))) limits "the limits of a context")
  (check (telegram-settings {}) (config-defaults "gateways" "telegram") "telegram")
  (setv provider (get (providers-from-config {"providers" [{"model" "openai/gpt-4o-mini"}]} {}) 0))
  (check (dfor k (config-defaults "providers") k (get provider k)) (config-defaults "providers")
         "a provider that sets nothing"))

(defn test-cascade-takes-its-keys-from-the-schema []
  (import passepartout.settings [schema-section]
          passepartout.providers [_provider-keys])
  (check (sorted _provider-keys) (sorted (get (schema-section "providers") "keys"))
         "cascade takes its keys from the schema"))

(defn test-provider-keys-may-be-written-with-dashes [tmp-path]
  (setv path (write-config tmp-path "[[providers]]\nmodel = \"m\"\napi-key-env = \"OPENAI_API_KEY\"\n"))
  (check (get (load-config path (home-env tmp-path)) "providers" 0 "api-key-env") "OPENAI_API_KEY"
         "a dashed provider key is kept for cascade to read"))
