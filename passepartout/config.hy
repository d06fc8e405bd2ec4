;; * Why

"Passepartout runs with no configuration at all: a data dir under
~/.local/share, the terminal gateway, the default limits. A TOML file adds
to that, and environment variables override both, so a service manager or a
test can move the data dir without writing a file."

(import copy difflib importlib.util os re tomllib
        pathlib [Path])

(defclass ConfigError [Exception]
  "A configuration that cannot be used, and why.")

;; * Where things are

(defn _env [env name]
  "The value of NAME in ENV, or None when it is unset or empty."
  (setv v (.get env name))
  (if v v None))

(defn _home [env]
  (or (_env env "HOME") (str (Path.home))))

(defn _expand [p env [base None]]
  "P as an absolute path: ~ expanded, relative to BASE (the working directory)."
  (setv p (str p))
  (cond (or (= p "~") (.startswith p "~/")) (setv p (+ (_home env) (cut p 1 None)))
        (.startswith p "~") (setv p (os.path.expanduser p)))
  (os.path.abspath (os.path.join (or base (os.getcwd)) p)))

(defn _xdg [env name fallback]
  "The XDG directory NAME from ENV, or FALLBACK (below HOME) when it is not usable."
  (setv v (_env env name))
  (if (and v (os.path.isabs v))
      v
      (os.path.join (_home env) fallback)))

(defn config-file [[path None] [env None]]
  "The config file to read, and whether it was named (by PATH or
   $PASSEPARTOUT_CONFIG) rather than found at the default place."
  (setv env (if (is env None) os.environ env))
  (cond (is-not path None) #((_expand path env) True)
        (_env env "PASSEPARTOUT_CONFIG") #((_expand (_env env "PASSEPARTOUT_CONFIG") env) True)
        True #((os.path.join (_xdg env "XDG_CONFIG_HOME" ".config") "passepartout" "config.toml")
               False)))

;; * Reading the file

(defn _read-toml [path explicit]
  "The table in the TOML file PATH; {} when it is absent and was not EXPLICIT."
  (try
    (with [f (open path "rb")]
      (tomllib.load f))
    (except [FileNotFoundError]
      (if explicit
          (raise (ConfigError f"{path}: no such config file"))
          {}))
    (except [e tomllib.TOMLDecodeError]
      (raise (ConfigError f"{path}: {e}") :from e))
    (except [e UnicodeDecodeError]
      (raise (ConfigError f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") :from e))
    (except [e OSError]
      (raise (ConfigError f"{path}: {(or e.strerror e)}") :from e))))

;; * Refusing secrets

(setv _secret-key-re (re.compile
                       r"(?:^|_)(?:api_?key|(?:secret|private|access)_?key|token|password|passwd|passphrase|secret|credentials?)\Z"))

(defn _tables [v]
  "True when V is a table or an array of tables: something to look inside."
  (or (isinstance v dict)
      (and (isinstance v list) (all (gfor x v (isinstance x dict))))))

(defn _secret-name [k v]
  "True when the key K, of the value V, looks like it holds a secret."
  (bool (and (_secret-key-re.search (.replace (.lower k) "-" "_")) (not (_tables v)))))

(defn _secret-keys [tree [where ""] [path #()]]
  "#(shown path) for each key in TREE whose value looks like a secret: SHOWN
   names it as the error messages name it (=[[providers]] #1 api_key=), PATH
   is its keys without the array positions."
  (setv found [])
  (cond
    (isinstance tree dict)
    (for [[k v] (.items tree)]
      (setv shown (cond (not where) k
                        (.startswith where "[[") f"{where} {k}"
                        True f"{where}.{k}"))
      (if (_secret-name k v)
          (.append found #(shown #(#* path k)))
          (.extend found (_secret-keys v shown #(#* path k)))))
    (isinstance tree list)
    (for [[i v] (enumerate tree)]
      (.extend found (_secret-keys v (if (isinstance v dict) f"[[{where}]] #{(+ i 1)}" f"{where}[{i}]")
                                   path))))
  found)

(defn _example-var [path]
  "A variable name to suggest for the secret at PATH (its keys): the default
   of the section's own =*_env= key where the schema gives one
   (=TELEGRAM_BOT_TOKEN=), else one made from the names."
  (setv leaf (.replace (get path -1) "-" "_")
        keys (_keys-at (cut path -1))
        spec (.get keys f"{leaf}_env" {})
        parts (lfor p path (.upper (.replace p "-" "_"))))
  (cond (isinstance (.get spec "default") str) (get spec "default")
        (= (get parts -1) "API_KEY") "OPENAI_API_KEY"
        (and (> (len parts) 1) (.isidentifier (get parts -2))) f"{(get parts -2)}_{(get parts -1)}"
        True (get parts -1)))

(defn _secret-problems [tree]
  "The problem (one line, or none) of the secrets written in TREE."
  (setv found (_secret-keys tree))
  (if (not found)
      []
      (do (setv [_ path] (get found 0))
          [(+ f"{(.join ", " (gfor [shown _] found shown))} "
              (if (> (len found) 1) "look" "looks")
              " like a secret, and secrets are never read from the config file: "
              "name an environment variable that holds it instead, e.g. "
              f"{(.replace (get path -1) "-" "_")}_env = \"{(_example-var path)}\"")])))

;; * The schema

(defn _key [kind default doc #** more]
  "One key of the schema: its KIND, its DEFAULT (None: none, or computed; SHOWN
   then says what it is) and what it means."
  (| {"kind" kind "default" default "doc" doc} more))

(setv _enabled (_key "boolean" True "false leaves this gateway out"))

(setv SCHEMA
  [{"name" "" "shape" "keys"
    "doc" (+ "The top level of the file says where things are. Relative paths are relative to the "
             "file's folder; `PASSEPARTOUT_DATA_DIR`, `PASSEPARTOUT_WORKSPACE` and "
             "`PASSEPARTOUT_RUNTIME_DIR` override them.")
    "keys" {"data_dir" (_key "path" None "the store, the logs, the skills folder"
                             :shown "`$XDG_DATA_HOME/passepartout`")
            "workspace" (_key "path" None "the folder the agent works in"
                              :shown "`DATA_DIR/workspace`")
            "runtime_dir" (_key "path" None "the REPL socket and the pid file"
                                :shown "`$XDG_RUNTIME_DIR/passepartout` or `DATA_DIR/run`")}}
   {"name" "providers" "shape" "array" "fill" True "default" [] "dashes" True
    "doc" (+ "The models to ask, in order; the symbolic provider is always last. The model string "
             "is LiteLLM's (`openai/gpt-4o-mini`, `anthropic/claude-3-5-haiku-latest`, "
             "`ollama_chat/llama3.2`). A key is never written here: `api_key_env` names the "
             "variable that holds it. `PASSEPARTOUT_MODELS=a,b` replaces this list. With no "
             "provider at all a local Ollama is tried, then the symbolic provider.")
    "keys" {"model" (_key "string" None "the LiteLLM model string" :shown "required"
                          :required True :example "model = \"openai/gpt-4o-mini\"")
            "name" (_key "string" None "the name shown in the chat and the log" :shown "the model")
            "api_base" (_key "string" None "the server's address, for local and compatible servers"
                             :shown "LiteLLM's; Ollama's local address for `ollama` models")
            "api_key_env" (_key "string" None "the environment variable that holds the key")
            "timeout" (_key "number" 60.0 "seconds one request may take"
                            :shown "`60.0`; `30.0` for `ollama` models")
            "probe" (_key "boolean" False "check first, in a quarter second, that the server answers"
                          :shown "`false`; `true` for `ollama` models")
            "max_tokens" (_key "whole number" 1024 "the longest answer asked for")
            "tools" (_key "boolean" None "send the actions as tool definitions and read tool calls"
                          :shown "as LiteLLM's model list says; `true` for a model it does not know")
            "tool_results" (_key "string" None
                                 (+ "how the conversation after a tool call is sent: `native` as tool "
                                    "messages, `text` as alternating user and assistant turns, which "
                                    "every chat template renders")
                                 :choices #("native" "text")
                                 :shown "`native` for a model LiteLLM's list says calls tools; `text` otherwise")}}
   {"name" "limits" "shape" "table" "fill" True
    "doc" "How far one task may go."
    "keys" {"step_budget" (_key "number" 8 "steps (each a model call and an action) one task may take")
            "attempts" (_key "number" 3 "tries the model gets in one step when its answer is unreadable or refused")
            "shell_timeout" (_key "number" 30 "seconds a shell command may run")
            "output_limit" (_key "number" 16000 "characters of an action's output the model is shown")
            "model_concurrency" (_key "whole number" 4 "steps the daemon runs at once")
            "file_size" (_key "size" "4 GiB" "the largest file one shell action may write (`RLIMIT_FSIZE`); `0`: no limit")
            "workspace_quota" (_key "size" "8 GiB" "bytes one shell action may write into the workspace, new and changed files counted whole; `0`: no limit")
            "keep_free" (_key "size or share" "1 GiB" "a shell action is stopped when the disk that holds the workspace gets less free than this (a size, or a share of the disk such as `\"5%\"`)")
            "processes" (_key "whole number" 512 "processes and threads one shell action may run at once (a cgroup's `pids.max`, else `RLIMIT_NPROC` above what runs already); `0`: no limit")
            "memory" (_key "size or share" "50%" "memory one shell action may use: all its processes together in a cgroup, else each process's data (`RLIMIT_DATA`); a share is of the machine's memory")
            "cpu_time" (_key "whole number" 3600 "seconds of CPU time one process of a shell action may use (`RLIMIT_CPU`); `0`: no limit")
            "cgroup" (_key "string" "auto" "`auto`: a cgroup for each shell action where the daemon may make one (see the README); `off`: limits by `rlimit` only; or the folder of a cgroup (v2) prepared for it")}}
   {"name" "undo" "shape" "table" "fill" True
    "doc" (+ "Checkpoints of the workspace, taken before every action that may write, which `/undo` "
             "restores and `/changes` shows (see `checkpoint.org`). They live in `DATA_DIR/checkpoints`, "
             "beside a copy of the workspace the checkpoints are taken from.")
    "keys" {"enabled" (_key "boolean" True "`false`: no checkpoints, and `/undo` has nothing to restore")
            "keep" (_key "whole number" 20 "checkpoints kept; the oldest go first")
            "max_bytes" (_key "size" "4 GiB" "what the kept checkpoints may hold together; the oldest go first, the last is always kept")
            "max_file" (_key "size" "256 MiB" "a larger file is not copied: its changes are listed, but `/undo` cannot bring back its content")}}
   {"name" "budget" "shape" "table" "fill" True
    "doc" "What the models may cost, per task and per calendar day; `0` means no limit."
    "keys" {"task_tokens" (_key "number" 200000 "tokens one task may use")
            "task_cost" (_key "number" 1.0 "dollars one task may spend")
            "day_tokens" (_key "number" 2000000 "tokens a day may use")
            "day_cost" (_key "number" 10.0 "dollars a day may spend")}}
   {"name" "workers" "shape" "table" "fill" True
    "doc" (+ "Background work (`:spawn`, `:plan`; see `workflow.org`). A tool profile names the "
             "actions a worker may take; a worker always may answer.")
    "keys" {"step_budget" (_key "number" 8 "steps one worker may take before it stops")
            "profiles" (_key "table of arrays of strings"
                             {"researcher" ["shell:read-only" "read-file" "memory-search"]
                              "file-worker" ["read-file" "write-file"]}
                             "tool profiles: a name and the actions it allows"
                             :shown "`researcher` (shell:read-only, read-file, memory-search), `file-worker` (read-file, write-file)")}}
   {"name" "agenda" "shape" "table" "fill" True
    "doc" "The agenda of open goals (`:agenda`, `/agenda`; see `agenda.org`)."
    "keys" {"review" (_key "string" "" (+ "how often a background task reviews the open items (`\"6h\"`, "
                                          "`\"every 2 days\"`, at least 10 minutes apart); empty or `off`: never"))
            "report_to" (_key "string" "" (+ "the session a review's changes are told to (`\"telegram:42\"`); "
                                             "empty: the conversations the changed items were added in"))}}
   {"name" "memory" "shape" "table" "fill" True
    "doc" (+ "What the model is given of its memory and its past (see `prompt.org` and `history.org`). "
             "The editable base prompt and persona are `DATA_DIR/prompt/base.md` and `persona.md`.")
    "keys" {"prompt_memories" (_key "whole number" 5 "notes of long-term memory put into each prompt, those that best match the message")
            "file_cap" (_key "whole number" 4000 "characters of the base prompt and of the persona used; the rest is cut, with a line saying so")
            "history_share" (_key "number" 0.5 "the share of the model's context a conversation's history may fill before its older turns are summarised")
            "context_tokens" (_key "whole number" 0 "the model's context in tokens; `0`: from LiteLLM's model list, else 8192")
            "keep_turns" (_key "whole number" 6 "the most recent turns never summarised")
            "compaction_model" (_key "string" "" "the model that summarises older turns (the `compaction` role): the name of a `[[providers]]` table, or a LiteLLM model string; empty, or when it fails: the configured models in order")
            "embedding_model" (_key "string" "" "the LiteLLM embedding model that lets memory be found by meaning (`openai/text-embedding-3-small`, `ollama/nomic-embed-text`); empty: by words alone")
            "embedding_api_base" (_key "string" "" "the embedding server's address, for local and compatible servers")
            "embedding_api_key_env" (_key "string" "" "the environment variable that holds the embedding server's key")
            "dream_at" (_key "string" "03:00" "the time of day (`\"03:00\"`, in `[routines] time_zone`) the daemon consolidates memory, once a night, as `/dream` does; a night it was down is made up once when it starts; empty or `off`: never")}}
   {"name" "routines" "shape" "table" "fill" True
    "doc" (+ "Routines and reminders (`:schedule`; see `routines.org`): the person's time zone, "
             "and how often a routine may run.")
    "keys" {"time_zone" (_key "string" "" "the IANA zone times are read and shown in, such as `Europe/Berlin`; empty: the machine's")
            "min_minutes" (_key "number" 5 "a routine may not run more often than this many minutes")
            "catch_up" (_key "string" "once" "what a routine that missed runs while the daemon was down does by default: `once` (runs once at start) or `skip`"
                             :choices #("once" "skip"))}}
   {"name" "journal" "shape" "table" "fill" True
    "doc" "The journal of turns (see `journal.org`, `archive.org`)."
    "keys" {"archive_after" (_key "string" "30d" (+ "how old turns are moved, once a day, into compressed segments "
                                                   "beside the store (`\"30d\"`, `\"2 weeks\"`); `off`: never"))}}
   {"name" "cascade" "shape" "table" "fill" True
    "doc" (+ "The circuit breaker in front of each provider. Its state is kept in the store, so a new process "
             "does not wait again for a model that just hung; a model that did not answer in time is skipped at "
             "once when a model behind it is healthy, and a rate limit's `retry-after` is waited (up to 5 s, the "
             "person told) or taken as the cool-down.")
    "keys" {"cooldown" (_key "number" 60 "seconds a provider that keeps failing is skipped")
            "failure_threshold" (_key "number" 3 "failures in a row that make it skipped")}}
   {"name" "skills" "shape" "table" "fill" True
    "doc" "Where skills come from."
    "keys" {"dirs" (_key "array of paths" None "folders of skill files, reloaded while the daemon runs"
                         :shown "`[\"DATA_DIR/skills\"]`")
            "disabled" (_key "array of strings" [] "skills not loaded")
            "immutable" (_key "array of strings" [] "skills the REPL and reloads may not replace")}}
   {"name" "sandbox" "shape" "table" "fill" True
    "doc" (+ "How shell commands are confined (bubblewrap). Where it does not work, every shell "
             "command is asked about, unless `mode = \"off\"`.")
    "keys" {"mode" (_key "string" "auto" "`auto` or `bubblewrap`: in bubblewrap, asked about where it does not work; `off`: no sandbox"
                         :choices #("auto" "bubblewrap" "off"))
            "network" (_key "string" "policy"
                            (+ "`policy`: only through the daemon's egress proxy, to the allowed hosts or "
                               "what a person allowed; `off`: none; `on`: the host's network, unfiltered")
                            :choices #("off" "policy" "on"))
            "allowed_hosts" (_key "array of strings"
                                  ["pypi.org" "files.pythonhosted.org" "registry.npmjs.org"
                                   "registry.yarnpkg.com" "crates.io" "static.crates.io" "index.crates.io"
                                   "proxy.golang.org" "sum.golang.org" "deb.debian.org"
                                   "security.debian.org" "github.com" "codeload.github.com"
                                   "objects.githubusercontent.com" "docs.python.org" "docs.rs"
                                   "doc.rust-lang.org" "developer.mozilla.org" "pkg.go.dev"]
                                  (+ "hosts a shell action may read from (GET) through the proxy: `NAME`, "
                                     "`*.DOMAIN`, `HOST:PORT`; uploads and other hosts are asked about")
                                  :shown "package registries and documentation (see `egress.org`)")
            "bwrap" (_key "path" "" "the bubblewrap program" :shown "found on `PATH`")
            "home_paths" (_key "array of paths" []
                               "parts of the home folder the sandbox shows, relative to it")}}
   {"name" "validators" "shape" "table"
    "doc" (+ "Which checks read the model's answer before it is delivered (see `validators.org`); "
             "a validator a skill declares is turned on and off in the skill.")
    "keys" {"hallucinated-action" (_key "boolean" True "an answer claiming an action this task did not run")
            "phantom-result" (_key "boolean" True "an answer showing output no action of this task produced")
            "empty-promise" (_key "boolean" True "an answer promising an action it does not take, and asking nothing")
            "premature-completion" (_key "boolean" False "an answer declaring the task done without its evidence")}}
   {"name" "approvals" "shape" "table"
    "doc" (+ "Who answers when a gate asks a person. An identity is the gateway and its user: "
             "`\"telegram:123456789\"`, `\"signal:+15550002222\"`, `\"terminal:local\"` (also who "
             "answers with `passepartout approvals` on the host). With no approvers, anyone in "
             "the conversation that asked may answer, and only there.")
    "keys" {"approvers" (_key "array of strings" [] "identities that may answer")
            "required" (_key "array of strings" [] "the set `all` and `majority` count; empty: the approvers")
            "strategy" (_key "string" "any" "how many of the required set must approve"
                             :choices #("any" "all" "majority"))
            "separate_duties" (_key "boolean" False "the person who asked may not approve")
            "expiry_minutes" (_key "number" 10 "how long a question waits")
            "max_grant_minutes" (_key "number" 480 "the longest grant an answer may create")}}
   {"name" "daemon" "shape" "table"
    "doc" "The headless daemon's own settings."
    "keys" {"heartbeat" (_key "number" 60 "seconds between two heartbeats")
            "shutdown_grace" (_key "number" 10 "seconds to finish the work in flight when asked to stop")
            "inbox_keep" (_key "number" 172800 "seconds a done inbox row (to recognise a redelivery) and a sent reply are kept")
            "log_max_bytes" (_key "number" 5242880 "size at which `daemon.log` is rotated")
            "log_backups" (_key "number" 5 "rotated logs kept")
            "reply_max_hours" (_key "number" 24 "hours a reply that cannot be sent is tried again before it is given up (its person is told)")}}
   {"name" "gateways" "shape" "named" "what" "gateway" "fill" True
    "default" {"terminal" {"enabled" True}}
    "doc" "Where people talk to the agent, one table per gateway; `passepartout daemon` runs the enabled ones that need no terminal."
    "tables"
    {"terminal" {"doc" "The chat of `passepartout chat`."
                 "keys" {"enabled" _enabled}}
     "telegram" {"doc" (+ "A Telegram bot. Create it with @BotFather and put its token in the "
                          "variable `token_env` names. Your user id is a number: message "
                          "@userinfobot, or send your bot a message and read `from.id` in "
                          "`https://api.telegram.org/bot<token>/getUpdates`.")
                 "keys" {"enabled" _enabled
                         "token_env" (_key "string" "TELEGRAM_BOT_TOKEN" "the variable that holds the bot token")
                         "allowed_users" (_key "array of whole numbers" []
                                               "user ids answered; empty: nobody")
                         "api_base" (_key "string" "https://api.telegram.org/bot" "the Bot API address")
                         "poll_timeout" (_key "number" 30 "seconds one getUpdates call waits")
                         "poll_limit" (_key "number" 100 "updates fetched at once")
                         "max_input" (_key "number" 16000 "characters of one message read")
                         "show_traces" (_key "boolean" False "show the \"ran … → ok\" lines")}}
     "signal" {"doc" (+ "Signal through a signal-cli-rest-api server. Numbers are in international "
                        "(E.164) form: `+`, the country code, then the number without its leading "
                        "0, e.g. `+4915123456789` for 0151 23456789 in Germany; an allowed sender "
                        "may also be a Signal UUID.")
               "keys" {"enabled" _enabled
                       "number" (_key "string" None "the account's number" :shown "required")
                       "allowed_numbers" (_key "array of strings" []
                                               "numbers or UUIDs answered; empty: nobody")
                       "url" (_key "string" "http://127.0.0.1:8080" "the signal-cli-rest-api server")
                       "allow_remote" (_key "boolean" False "allow a server that is not on this machine")
                       "poll_interval" (_key "number" 1.0 "seconds between two receive calls")
                       "receive_timeout" (_key "number" 1 "seconds one receive call waits")
                       "retry_delay" (_key "number" 1.0 "seconds before retrying a failed call")
                       "max_input_chars" (_key "number" 16000 "characters of one message read")
                       "show_traces" (_key "boolean" False "show the \"ran … → ok\" lines")}}}}])

(defn schema-section [name]
  "The section NAME of the schema (\"\" for the top level), or None."
  (next (gfor s SCHEMA :if (= (get s "name") name) s) None))

(defn schema-keys [name]
  "The keys the section NAME may hold, in the schema's order."
  (list (get (schema-section name) "keys")))

(defn config-defaults [name [table None]]
  "The defaults of the section NAME (of its table TABLE, for a section of named
   tables), as a new dict: each key that has one. A key whose default is None has
   none, or one computed where it is read.
   (config-defaults \"approvals\") ⇒ {\"approvers\" [] \"required\" [] … \"max_grant_minutes\" 480}"
  (setv section (schema-section name)
        keys (get (if table (get section "tables" table) section) "keys"))
  (dfor [k spec] (.items keys)
        :if (is-not (get spec "default") None)
        k (copy.deepcopy (get spec "default"))))

;; ** Checking a file against it

(defn _number [v]
  (and (isinstance v #(int float)) (not (isinstance v bool))))

(defn _whole [v]
  (and (isinstance v int) (not (isinstance v bool))))

(defn _path [v]
  (and (isinstance v str) (!= v "")))

(setv _size-re (re.compile r"\s*(\d+(?:\.\d+)?)\s*(?:([kmgt])(?:i?b)?|b|bytes?)?\s*\Z" re.I)
      _share-re (re.compile r"\s*(\d+(?:\.\d+)?)\s*%\s*\Z")
      _units {"k" 1024 "m" (** 1024 2) "g" (** 1024 3) "t" (** 1024 4)})

(defn parse-size [v [whole None]]
  "The bytes V means: a whole number of bytes, or text such as \"4 GiB\" or
   \"512M\" (units of 1024); with WHOLE, also a share of it such as \"50%\".
   None when V is none of these.
   (parse-size \"1.5 KiB\") ⇒ 1536, (parse-size \"50%\" 1000) ⇒ 500"
  (cond (_whole v) (if (>= v 0) v None)
        (not (isinstance v str)) None
        True
        (do (setv m (.match _size-re v))
            (if m
                (int (* (float (.group m 1)) (.get _units (.lower (or (.group m 2) "")) 1)))
                (do (setv m (.match _share-re v))
                    (if (and m (is-not whole None) (<= (float (.group m 1)) 100))
                        (int (* whole (/ (float (.group m 1)) 100)))
                        None))))))

(setv _kinds {"number" #(_number "a number")
              "whole number" #(_whole "a whole number")
              "boolean" #((fn [v] (isinstance v bool)) "true or false")
              "string" #((fn [v] (isinstance v str)) "a string")
              "path" #((fn [v] (isinstance v str)) "a path (a string)")
              "array of strings" #((fn [v] (and (isinstance v list) (all (gfor x v (isinstance x str)))))
                                   "an array of strings")
              "array of paths" #((fn [v] (and (isinstance v list) (all (map _path v))))
                                 "an array of paths")
              "array of whole numbers" #((fn [v] (and (isinstance v list) (all (map _whole v))))
                                         "an array of whole numbers")
              "size" #((fn [v] (is-not (parse-size v) None))
                       "a size (a whole number of bytes, or text such as \"4 GiB\")")
              "size or share" #((fn [v] (is-not (parse-size v 1) None))
                                "a size (a whole number of bytes, or text such as \"4 GiB\") or a share such as \"50%\"")
              "table of arrays of strings" #((fn [v] (and (isinstance v dict)
                                                          (all (gfor x (.values v)
                                                                     (and (isinstance x list)
                                                                          (all (gfor y x (isinstance y str))))))))
                                             "a table of arrays of strings")})

(defn _shown [v]
  "V for an error message: its kind for a table, else its value, cut short."
  (if (isinstance v dict)
      "a table"
      (do (setv r (repr v))
          (if (> (len r) 60) (+ (cut r 57) "...") r))))

(defn did-you-mean [name known [what "key"]]
  "What to say of NAME, which is not among KNOWN: the nearest, or all of them.
   (did-you-mean \"netwrok\" [\"mode\" \"network\"]) → \"did you mean network?\""
  (setv close (difflib.get-close-matches name (list known) :n 1 :cutoff 0.5))
  (if close
      f"did you mean {(get close 0)}?"
      (+ f"the {what}s are " (.join ", " known))))

(defn _unknown [where name known [what "key"]]
  "The problem of NAME, not among KNOWN, in the place WHERE."
  f"{where}{name} — unknown {what}; {(did-you-mean name known what)}")

(defn _check-value [shown spec v]
  "The problems of the value V of the key SHOWN."
  (setv [ok what] (get _kinds (get spec "kind"))
        choices (.get spec "choices"))
  (cond
    (not (ok v)) [f"{shown} should be {what}, not {(_shown v)}"]
    (and choices (not (in v choices)))
    (do (setv close (difflib.get-close-matches v choices :n 1))
        [(+ f"{shown} should be one of "
            (.join ", " (gfor c choices f"\"{c}\""))
            f", not {v !r}"
            (if close f"; did you mean \"{(get close 0)}\"?" ""))])
    True []))

(defn _check-table [where keys table [dashes False] [dotted None]]
  "The problems of TABLE, written as the header WHERE, against KEYS; a key's
   value is named DOTTED.KEY, or WHERE KEY without DOTTED. With DASHES, a-key
   is read as a_key."
  (setv problems [])
  (for [[k v] (.items table)]
    (when dashes
      (setv k (.replace k "-" "_")))
    (cond (in k keys)
          (.extend problems (_check-value (if dotted f"{dotted}.{k}" f"{where} {k}") (get keys k) v))
          ;; a secret is its own problem (=_secret-problems=), not also an unknown key
          (not (_secret-name k v))
          (.append problems (_unknown f"{where} " k keys))))
  (for [[k spec] (.items keys)]
    (when (and (.get spec "required") (not (in k table)))
      (.append problems f"{where} has no {k}, which it needs; e.g. {(get spec "example")}")))
  problems)

(defn _plugin-gateway [name]
  "True when NAME is no gateway of the schema but a module that may register one."
  (bool (and (re.match r"[a-z][a-z0-9_]*\Z" name)
             (importlib.util.find-spec f"passepartout.gateways.{name}"))))

(defn _check-section [section v]
  "The problems of V, the section SECTION of the schema."
  (setv name (get section "name")
        shape (get section "shape"))
  (when (and (in shape #("table" "named")) (not (isinstance v dict)))
    (return [f"{name} should be a table ([{name}]), not {(_shown v)}"]))
  (cond
    (= shape "table")
    (_check-table f"[{name}]" (get section "keys") v :dotted name)
    (= shape "array")
    (if (not (and (isinstance v list) (all (gfor e v (isinstance e dict)))))
        [f"{name} should be an array of tables ([[{name}]]), not {(_shown v)}"]
        (lfor [i entry] (enumerate v)
              problem (_check-table f"[[{name}]] #{(+ i 1)}" (get section "keys") entry
                                    (.get section "dashes" False))
              problem))
    (= shape "named")
    (do (setv known (get section "tables")
              problems [])
        (for [[sub table] (.items v)]
          (cond (not (isinstance table dict))
                (.append problems f"{name}.{sub} should be a table ([{name}.{sub}]), not {(_shown table)}")
                (in sub known)
                (.extend problems (_check-table f"[{name}.{sub}]" (get known sub "keys") table
                                                :dotted f"{name}.{sub}"))
                (not (_plugin-gateway sub))
                (.append problems (_unknown f"[{name}] " sub known (.get section "what" "table")))))
        problems)))

(defn _unknown-top [k v known]
  "The problem of the top-level name K, which the schema does not know: a
   section (a table) is called a section, by its header, and a gateway's table
   written without =gateways.= is pointed to its place."
  (defn header [name]
    (if (= (.get (schema-section name) "shape") "array") f"[[{name}]]" f"[{name}]"))
  (setv sections (lfor s SCHEMA :if (get s "name") (get s "name"))
        gateways (get (schema-section "gateways") "tables")
        written (if (isinstance v list) f"[[{k}]]" f"[{k}]")
        close (difflib.get-close-matches k sections :n 1 :cutoff 0.5))
  (cond (not (_tables v)) (_unknown "" k known)
        (in k gateways) f"{written} — unknown section; did you mean [gateways.{k}]?"
        close f"{written} — unknown section; did you mean {(header (get close 0))}?"
        True (+ f"{written} — unknown section; the sections are " (.join ", " (map header sections)))))

(defn _keys-at [path]
  "The keys of the schema at PATH (keys without array positions), or {}."
  (setv section (schema-section (if path (get path 0) "")))
  (cond (is section None) {}
        (<= (len path) 1) (.get section "keys" {})
        (and (= (len path) 2) (in (get path 1) (.get section "tables" {})))
        (get section "tables" (get path 1) "keys")
        True {}))

(defn config-problems [raw]
  "Every mistake of the table RAW against the schema, one line each, in the
   file's order; secrets written into it first."
  (setv top (get (schema-section "") "keys")
        known (+ (list top) (lfor s SCHEMA :if (get s "name") (get s "name")))
        problems (_secret-problems raw))
  (for [[k v] (.items raw)]
    (.extend problems
             (cond (in k top) (_check-value k (get top k) v)
                   (_secret-name k v) []
                   (not (in k known)) [(_unknown-top k v known)]
                   True (_check-section (schema-section k) v))))
  problems)

(defn check-config [raw file]
  "Check the table RAW read from FILE against the schema: a ConfigError that
   names every mistake, one line each, when there is any."
  (setv problems (config-problems raw))
  (when problems
    (raise (ConfigError (.join "\n" (gfor p problems f"{file}: {p}"))))))

;; ** The reference, printed from it

(defn _toml [v]
  (cond (isinstance v bool) (if v "true" "false")
        (isinstance v str) f"\"{v}\""
        (isinstance v list) (+ "[" (.join ", " (map _toml v)) "]")
        True (str v)))

(defn _reference-table [out header doc keys]
  (.extend out [(if header f"#### `{header}`" "#### The top level") "" doc "" "| key | type | default | meaning |" "|---|---|---|---|"])
  (for [[k spec] (.items keys)]
    (setv default (cond (in "shown" spec) (get spec "shown")
                        (is (get spec "default") None) "none"
                        True f"`{(_toml (get spec "default"))}`")
          kind (if (in "choices" spec)
                   (+ "one of " (.join ", " (gfor c (get spec "choices") f"`\"{c}\"`")))
                   (get spec "kind")))
    (.append out f"| `{k}` | {kind} | {default} | {(get spec "doc")} |"))
  (.append out ""))

(defn config-reference []
  "The schema as Markdown: per section a heading, what it is for and a table of its keys."
  (setv out [])
  (for [s SCHEMA]
    (setv name (get s "name")
          shape (get s "shape"))
    (cond (= shape "keys") (_reference-table out None (get s "doc") (get s "keys"))
          (= shape "array") (_reference-table out f"[[{name}]]" (get s "doc") (get s "keys"))
          (= shape "table") (_reference-table out f"[{name}]" (get s "doc") (get s "keys"))
          (= shape "named")
          (do (.extend out [f"#### `[{name}.NAME]`" "" (get s "doc") ""])
              (for [[sub t] (.items (get s "tables"))]
                (_reference-table out f"[{name}.{sub}]" (get t "doc") (get t "keys"))))))
  (.join "\n" out))

;; * Defaults and merging

(defn _kind [v]
  (cond (isinstance v bool) "a boolean"
        (isinstance v #(int float)) "a number"
        (isinstance v str) "a string"
        (isinstance v list) "an array"
        (isinstance v dict) "a table"
        True (. (type v) __name__)))

(defn _merge [defaults over]
  "DEFAULTS with OVER laid on top, as a new dict."
  (setv out (dict defaults))
  (for [[k v] (.items over)]
    (setv d (.get defaults k))
    (setv (get out k) (if (and (isinstance d dict) (isinstance v dict)) (_merge d v) v)))
  out)

(defn _defaults [data-dir]
  "The defaults of the sections the schema marks fill, for the data dir DATA-DIR."
  (setv out (dfor s SCHEMA :if (.get s "fill")
                  (get s "name")
                  (copy.deepcopy (if (= (get s "shape") "table")
                                     (dfor [k spec] (.items (get s "keys")) k (get spec "default"))
                                     (get s "default")))))
  (setv (get out "skills" "dirs") [(os.path.join data-dir "skills")])
  out)

(defn _sandbox [section file env]
  "The [sandbox] SECTION, checked already, with its paths absolute."
  (import passepartout.egress [split-host])
  (for [h (get section "allowed_hosts")]
    (when (is (split-host h :wildcard True) None)
      (raise (ConfigError (+ f"{file}: [sandbox] allowed_hosts: {h !r} is not a host "
                             "(write NAME, *.DOMAIN, HOST:PORT or [IPV6]:PORT)")))))
  (setv paths (get section "home_paths"))
  (| section
     {"home_paths" (lfor p paths (_expand p env (_home env)))
      "bwrap" (if (get section "bwrap") (_expand (get section "bwrap") env (os.path.dirname file)) "")}))

;; * Loading

(defn _file-path [raw key file env]
  "The path the file gives for KEY, absolute, or None."
  (when (in key raw)
    (setv v (get raw key))
    (when (not (isinstance v str))
      (raise (ConfigError f"{file}: {key} should be a string, not {(_kind v)}")))
    (_expand v env (os.path.dirname file))))

(defn _dir [env var raw key file default]
  (cond (_env env var) (_expand (_env env var) env)
        (in key raw) (_file-path raw key file env)
        True (default)))

(defn load-config [[path None] [env None]]
  "The configuration, as a dict: the defaults, the TOML file over them, the
   environment over both. A ConfigError when it cannot be used."
  (setv env (if (is env None) os.environ env)
        [file explicit] (config-file path env)
        raw (_read-toml file explicit))
  (check-config raw file)
  (setv data-dir (_dir env "PASSEPARTOUT_DATA_DIR" raw "data_dir" file
                       (fn [] (_expand (os.path.join (_xdg env "XDG_DATA_HOME" ".local/share")
                                                     "passepartout")
                                       env))))
  (setv workspace (_dir env "PASSEPARTOUT_WORKSPACE" raw "workspace" file
                        (fn [] (os.path.join data-dir "workspace")))
        runtime-dir (_dir env "PASSEPARTOUT_RUNTIME_DIR" raw "runtime_dir" file
                          (fn [] (if (and (_env env "XDG_RUNTIME_DIR")
                                          (os.path.isabs (_env env "XDG_RUNTIME_DIR")))
                                     (os.path.join (_env env "XDG_RUNTIME_DIR") "passepartout")
                                     (os.path.join data-dir "run")))))
  (setv cfg (_merge (_defaults data-dir)
                    (dfor [k v] (.items raw)
                          :if (not (in k #("data_dir" "workspace" "runtime_dir")))
                          k v)))
  (setv dirs (get cfg "skills" "dirs"))
  (setv (get cfg "skills") (| (get cfg "skills")
                              {"dirs" (lfor d dirs (_expand d env (os.path.dirname file)))})
        (get cfg "sandbox") (_sandbox (get cfg "sandbox") file env))
  (| cfg {"data_dir" data-dir
          "workspace" workspace
          "runtime_dir" runtime-dir
          "config_path" file
          "config_file" (if (os.path.isfile file) file None)}))

;; * The secrets the daemon holds

(setv _gateway-secret-vars {"telegram" ["TELEGRAM_BOT_TOKEN"]}
      _secret-var-re (re.compile
                       r"(?:^|_)(?:API_?KEY|(?:SECRET|PRIVATE|ACCESS)_?KEY|TOKEN|PASSWORD|PASSWD|PASSPHRASE|SECRET)\Z")
      _guessed-min-length 8)

(defn _env-names [tree]
  "The variable names given by *_env keys anywhere in TREE."
  (setv names [])
  (cond
    (isinstance tree dict)
    (for [[k v] (.items tree)]
      (cond (and (isinstance k str) (.endswith (.lower k) "_env") (isinstance v str))
            (.append names v)
            (and (isinstance k str) (.endswith (.lower k) "_env") (isinstance v list))
            (.extend names (gfor x v :if (isinstance x str) x))
            True (.extend names (_env-names v))))
    (isinstance tree list)
    (for [v tree] (.extend names (_env-names v))))
  names)

(defn config-secrets [cfg [env None]]
  "The secret values held in the environment that CFG and convention name."
  (setv env (if (is env None) os.environ env)
        gateways (.get cfg "gateways" {})
        named (+ (_env-names cfg)
                 (lfor g (if (isinstance gateways dict) gateways [])
                       v (.get _gateway-secret-vars g [])
                       v))
        values (sfor n named :if (_env env n) (_env env n)))
  (for [[name v] (.items env)]
    (when (and v (_secret-var-re.search (.upper name)) (>= (len v) _guessed-min-length))
      (.add values v)))
  (sorted values :key (fn [v] #((- (len v)) v))))

;; * Folders

(defn ensure-dirs [cfg]
  "Create the data dir, workspace and runtime dir of CFG; their paths."
  (lfor [key private] [["data_dir" True] ["workspace" False] ["runtime_dir" True]]
        :setv p (Path (get cfg key))
        (do (when (not (.is-dir p))
              (.mkdir p :parents True :exist-ok True)
              (when private (os.chmod p 0o700)))
            p)))
