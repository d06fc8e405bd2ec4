(import os re tomllib
        pathlib [Path])

(defclass ConfigError [Exception]
  "A configuration that cannot be used, and why.")

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

(setv _secret-key-re (re.compile
                       r"(?:^|_)(?:api_?key|(?:secret|private|access)_?key|token|password|passwd|passphrase|secret|credentials?)\Z"))

(defn _tables [v]
  "True when V is a table or an array of tables: something to look inside."
  (or (isinstance v dict)
      (and (isinstance v list) (all (gfor x v (isinstance x dict))))))

(defn _secret-keys [tree [prefix ""]]
  "The dotted names of the keys in TREE whose values look like secrets."
  (setv found [])
  (cond
    (isinstance tree dict)
    (for [[k v] (.items tree)]
      (setv name (if prefix f"{prefix}.{k}" k))
      (if (and (_secret-key-re.search (.replace (.lower k) "-" "_")) (not (_tables v)))
          (.append found name)
          (.extend found (_secret-keys v name))))
    (isinstance tree list)
    (for [[i v] (enumerate tree)]
      (.extend found (_secret-keys v f"{prefix}[{i}]"))))
  found)

(defn _example-var [name]
  "A variable name to suggest for the secret at the dotted NAME."
  (setv parts (lfor p (.split name ".") (.upper (.replace p "-" "_")))
        leaf (get parts -1))
  (cond (= leaf "API_KEY") "OPENAI_API_KEY"
        (and (> (len parts) 1) (.isidentifier (get parts -2))) f"{(get parts -2)}_{leaf}"
        True leaf))

(defn _refuse-secrets [tree path]
  (setv names (_secret-keys tree))
  (when names
    (setv name (get names 0)
          leaf (get (.split name ".") -1))
    (raise (ConfigError
             (+ f"{path}: {(.join ", " names)} "
                (if (> (len names) 1) "look" "looks")
                " like a secret, and secrets are never read from the config file: "
                "name an environment variable that holds it instead, e.g. "
                f"{leaf}_env = \"{(_example-var name)}\"")))))

(defn _kind [v]
  (cond (isinstance v bool) "a boolean"
        (isinstance v #(int float)) "a number"
        (isinstance v str) "a string"
        (isinstance v list) "an array"
        (isinstance v dict) "a table"
        True (. (type v) __name__)))

(defn _merge [defaults over where [prefix ""]]
  "DEFAULTS with OVER laid on top, as a new dict."
  (setv out (dict defaults))
  (for [[k v] (.items over)]
    (setv name (if prefix f"{prefix}.{k}" k))
    (if (in k defaults)
        (do (setv d (get defaults k))
            (when (!= (_kind d) (_kind v))
              (raise (ConfigError f"{where}: {name} should be {(_kind d)}, not {(_kind v)}")))
            (setv (get out k) (if (isinstance d dict) (_merge d v where name) v)))
        (setv (get out k) v)))
  out)

(defn _defaults [data-dir]
  {"limits" {"step_budget" 8
             "attempts" 3
             "shell_timeout" 30
             "output_limit" 16000
             "model_concurrency" 4}
   "cascade" {"cooldown" 60
              "failure_threshold" 3}
   "budget" {"task_tokens" 200000
             "task_cost" 1.0
             "day_tokens" 2000000
             "day_cost" 10.0}
   "providers" []
   "skills" {"dirs" [(os.path.join data-dir "skills")]
             "disabled" []
             "immutable" []}
   "sandbox" {"mode" "auto"
              "network" "policy"
              "bwrap" ""
              "home_paths" []}
   "gateways" {"terminal" {"enabled" True}}})

(setv _sandbox-choices {"mode" #("auto" "bubblewrap" "off")
                        "network" #("off" "policy" "on")})

(defn _sandbox [section file env]
  "The [sandbox] SECTION checked, with its paths absolute."
  (for [[key choices] (.items _sandbox-choices)]
    (when (not (in (get section key) choices))
      (raise (ConfigError (+ f"{file}: sandbox.{key} should be one of "
                             (.join ", " (gfor c choices f"\"{c}\""))
                             f", not {(get section key) !r}")))))
  (setv paths (get section "home_paths"))
  (when (not (all (gfor p paths (and (isinstance p str) p))))
    (raise (ConfigError f"{file}: sandbox.home_paths should be an array of paths")))
  (| section
     {"home_paths" (lfor p paths (_expand p env (_home env)))
      "bwrap" (if (get section "bwrap") (_expand (get section "bwrap") env (os.path.dirname file)) "")}))

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
  (_refuse-secrets raw file)
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
                          k v)
                    file))
  (setv dirs (get cfg "skills" "dirs"))
  (when (not (all (gfor d dirs (isinstance d str))))
    (raise (ConfigError f"{file}: skills.dirs should be an array of strings")))
  (setv (get cfg "skills") (| (get cfg "skills")
                              {"dirs" (lfor d dirs (_expand d env (os.path.dirname file)))})
        (get cfg "sandbox") (_sandbox (get cfg "sandbox") file env))
  (| cfg {"data_dir" data-dir
          "workspace" workspace
          "runtime_dir" runtime-dir
          "config_path" file
          "config_file" (if (os.path.isfile file) file None)}))

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

(defn ensure-dirs [cfg]
  "Create the data dir, workspace and runtime dir of CFG; their paths."
  (lfor [key private] [["data_dir" True] ["workspace" False] ["runtime_dir" True]]
        :setv p (Path (get cfg key))
        (do (when (not (.is-dir p))
              (.mkdir p :parents True :exist-ok True)
              (when private (os.chmod p 0o700)))
            p)))
