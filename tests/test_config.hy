;; Tests of passepartout/config.hy: defaults, the TOML file, the environment, secrets.

(import os stat
        pathlib [Path]
        pytest
        passepartout.config [load-config config-file config-secrets ensure-dirs ConfigError])

(defn check [got want [what ""]]
  (assert (= got want) f"{what}\n got:  {got !r}\n want: {want !r}"))

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
                             "output_limit" 16000 "model_concurrency" 4} "limits")
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
allow = [42]

[extra]
anything = "kept"
]toml])
        cfg (load-config path (home-env tmp-path))
        data (str (/ tmp-path "home/pp")))
  (check (get cfg "data_dir") data "~ expanded")
  (check (get cfg "workspace") (os.path.join data "workspace") "workspace follows data_dir")
  (check (get cfg "runtime_dir") (os.path.join data "run") "runtime_dir follows data_dir")
  (check (get cfg "limits") {"step_budget" 12 "attempts" 3 "shell_timeout" 2.5
                             "output_limit" 16000 "model_concurrency" 4} "limits merged")
  (check (lfor p (get cfg "providers") (get p "model")) ["openai/gpt-4o-mini" "ollama/llama3"])
  (check (get cfg "skills" "dirs") [(str (/ tmp-path "skills")) "/abs/skills"]
         "relative paths are relative to the file")
  (check (get cfg "skills" "disabled") [] "skills.disabled kept")
  (check (get cfg "gateways")
         {"terminal" {"enabled" True}
          "telegram" {"enabled" True "token_env" "MY_BOT_TOKEN" "allow" [42]}} "gateways merged")
  (check (get cfg "extra") {"anything" "kept"} "unknown sections pass through")
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
                     ["[[providers]]\nmodel = \"m\"\napi_key = \"sk-1\"\n" "providers[0].api_key"]
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
password_file = "~/signal-pass"
[secrets]
note = "a table called secrets holds no value itself"
]toml])
        cfg (load-config path (home-env tmp-path)))
  (check (get cfg "providers" 0 "max_tokens") 1024))

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
auth_env = ["SIGNAL_A", "SIGNAL_B"]
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
