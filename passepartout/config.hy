;; * Why

"Passepartout runs with no configuration at all: a data dir under
~/.local/share, the terminal gateway, the default limits. A TOML file adds
to that, and environment variables override both, so a service manager or a
test can move the data dir without writing a file."

(import copy os re tomllib
        pathlib [Path]
        passepartout.settings [SCHEMA schema-section config-problems])

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

(defn check-config [raw file]
  "Check the table RAW read from FILE against the schema: a ConfigError that
   names every mistake, one line each, when there is any."
  (setv problems (config-problems raw))
  (when problems
    (raise (ConfigError (.join "\n" (gfor p problems f"{file}: {p}"))))))

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
