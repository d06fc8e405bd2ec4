;; * Why

"passepartout doctor checks, without starting anything, the config, the
folders, the protection of shell actions, the gateways and each model, and says
which protection is in force, so that a person learns what is missing before
the first message rather than from it."

(import os re
        pathlib [Path]
        passepartout.config [ConfigError])

;; * doctor

(defn _folder-check [path private]
  "#(status detail) for the folder PATH, which should be PRIVATE (0700)."
  (setv p (Path path))
  (cond
    (not (.exists p))
    (do (setv parent (next (gfor a p.parents :if (.exists a) a)))
        (if (os.access parent os.W-OK)
            #("ok" f"{p} (made at the first start)")
            #("fail" f"{p} does not exist and {parent} is not writable")))
    (not (.is-dir p)) #("fail" f"{p} is not a folder")
    True
    (do (setv st (.stat p))
        (cond (!= st.st-uid (os.getuid)) #("fail" f"{p} belongs to uid {st.st-uid}, not to this user")
              (not (os.access p os.W-OK)) #("fail" f"{p} is not writable")
              (and private (& st.st-mode 0o077)) #("warn" f"{p} is open to others (mode {(oct (& st.st-mode 0o777))}); chmod 700")
              True #("ok" (str p))))))

(defn _socket-check [config]
  (import socket
          passepartout.console [socket-path])
  (setv path (socket-path config)
        [status detail] (_folder-check (get config "runtime_dir") True))
  (when (= status "fail")
    (return #(status detail)))
  (when (not (os.path.exists path))
    (return #(status f"{path}: no daemon listens (none running)")))
  (with [s (socket.socket socket.AF-UNIX socket.SOCK-STREAM)]
    (.settimeout s 1.0)
    (try
      (.connect s path)
      (return #(status f"{path}: a daemon listens"))
      (except [OSError]
        (return #(status f"{path}: left by a daemon that is gone"))))))

(setv _e164-re (re.compile r"\+[1-9][0-9]{6,14}\Z"))

(defn _fetch [url [secrets #()]]
  "#(status json None) for a GET of URL (5 s at most), or #(None None why):
   why in words, naming the host, with SECRETS (a token in the URL) redacted."
  (import httpx urllib.parse [urlsplit]
          passepartout.secrets [redact-text])
  (setv host (or (. (urlsplit url) netloc) url))
  (try
    (setv r (httpx.get url :timeout 5.0))
    (except [e httpx.ConnectError]
      (return #(None None f"nothing answers at {host} ({(get (redact-text (str e) secrets) 0)})")))
    (except [e httpx.TimeoutException]
      (return #(None None f"{host} did not answer within 5 s")))
    (except [e httpx.HTTPError]
      (return #(None None f"{host}: {(get (redact-text (str e) secrets) 0)}"))))
  (try
    (setv body (.json r))
    (except [ValueError] (setv body None)))
  #(r.status-code body None))

(defn _telegram-check [s]
  "#(status detail) for the Telegram settings S: the token is asked to getMe."
  (setv var (get s "token_env")
        token (.get os.environ (or var "")))
  (when (not token)
    (return #("fail" f"the bot token is missing: the environment variable {var} is not set")))
  (setv [code body why] (_fetch f"{(get s "api_base")}{token}/getMe" #(token))
        host (or (. (hy.I.urllib/parse.urlsplit (get s "api_base")) netloc) (get s "api_base")))
  (cond
    why #("fail" f"the Bot API could not be reached: {why}")
    (in code #(401 404)) #("fail" f"the Bot API at {host} refused the token in {var} ({code}): it is not a valid bot token")
    (or (!= code 200) (not (isinstance body dict)) (not (.get body "ok")))
    #("fail" f"the Bot API at {host} answered getMe with an error ({code})")
    (not (get s "allowed_users"))
    #("warn" f"@{(.get (.get body "result" {}) "username")} (token in {var}); allowed_users is empty, so nobody is answered")
    True #("ok" f"@{(.get (.get body "result" {}) "username")} (token in {var}); {(len (get s "allowed_users"))} allowed user(s)")))

(defn _signal-check [s]
  "#(status detail) for the Signal settings S: the numbers are E.164, the
   server answers /v1/about, and it holds the account."
  (setv number (get s "number"))
  (when (not number) (return #("fail" "no number: set [gateways.signal] number")))
  (defn plain [n] (re.sub r"[\s().-]" "" n))
  ;; a UUID in allowed_numbers is a sender who hides their number
  (setv bad (lfor n (+ [number] (list (get s "allowed_numbers")))
                  :if (and (isinstance n str) (not (re.match r"[0-9a-fA-F-]{36}\Z" (.strip n)))
                           (not (_e164-re.match (plain n))))
                  n)
        number (plain number))
  (when bad
    (return #("fail" (+ "not E.164 numbers (+, a country code, at most 15 digits): " (.join ", " bad)))))
  (setv url (get s "url")
        [code body why] (_fetch f"{url}/v1/about"))
  (cond
    why (return #("fail" f"signal-cli-rest-api: {why}"))
    (!= code 200) (return #("fail" f"signal-cli-rest-api at {url} answered /v1/about with {code}")))
  (setv [code accounts why] (_fetch f"{url}/v1/accounts"))
  (cond
    (and (= code 200) (isinstance accounts list) (not (in number accounts)))
    #("fail" f"signal-cli-rest-api at {url} has no account {number} (it has: {(or (.join ", " (map str accounts)) "none")})")
    (not (get s "allowed_numbers"))
    #("warn" f"{number} through {url}; allowed_numbers is empty, so nobody is answered")
    True #("ok" f"{number} through {url}; {(len (get s "allowed_numbers"))} allowed sender(s)")))

(defn _gateway-check [name section]
  "#(status detail) for the gateway NAME configured by SECTION (its defaults filled in)."
  (import passepartout.settings [schema-section])
  (setv keys (get (.get (get (schema-section "gateways") "tables") name {"keys" {}}) "keys")
        s (| (dfor [k spec] (.items keys) k (get spec "default")) section))
  (cond
    (= name "terminal") #("ok" "the chat of `passepartout chat`")
    (= name "telegram") (_telegram-check s)
    (= name "signal") (_signal-check s)
    True #("ok" "turned on; doctor knows no check for it")))

(defn _model-checks [config]
  "Rows #(check status detail), one per provider of CONFIG, asked all at once."
  (import asyncio
          passepartout.providers [providers-from-config]
          passepartout.cascade [check-provider])
  (try
    (setv providers (providers-from-config config))
    (except [e ValueError]
      (return [#("models" "fail" (str e))])))
  (defn :async check-all []
    (await (asyncio.gather #* (gfor p providers (check-provider p)))))
  (setv found (asyncio.run (check-all)))
  (lfor [p [status detail]] (zip providers found)
        #(f"model {(get p "name")}" status detail)))

(defn _limits-check [config]
  "The limits of a shell action: a warning where processes are not limited at
   all (root, with no cgroup to count them)."
  (import passepartout.limits [cgroup-setup limits-summary])
  (setv summary (limits-summary config)
        setup (cgroup-setup (get config "limits" "cgroup")))
  #("limits"
    (if (and (= (os.geteuid) 0) (not (in "pids" (.get setup "dirs" {})))) "warn" "ok")
    summary))

(defn _undo-check [config]
  (import passepartout.checkpoint [undo-settings])
  (setv s (undo-settings config))
  (if (get s "enabled")
      #("undo" "ok" (+ f"a checkpoint before every action that may write, in "
                       f"{(os.path.join (get config "data_dir") "checkpoints")}; the last {(get s "keep")} kept"))
      #("undo" "warn" "no checkpoints ([undo] enabled = false): /undo has nothing to restore")))

(defn _memory-check [config]
  "The row that says how memory is recalled (=memory.org=)."
  (import passepartout.store [store-open store-path-for]
          passepartout.memory [recall-summary embedding-settings])
  (setv path (store-path-for (get config "data_dir")))
  (if (.exists path)
      (with [store (store-open path)]
        #("memory" "ok" (recall-summary store config)))
      #("memory" "ok" (+ (if (embedding-settings config)
                             "by words and meaning"
                             "by words; no embedding model is configured")
                         " (there is no store yet)"))))

(defn doctor-checks [config-path]
  "Rows #(check status detail) about the machine and the config at CONFIG-PATH."
  (import passepartout.config [load-config config-file]
          passepartout.proto [proto-get]
          passepartout.sandbox [sandbox-status sandbox-summary])
  (setv [file _] (config-file config-path))
  (try
    (setv config (load-config config-path))
    (except [e ConfigError]
      (return (lfor line (.splitlines (str e)) #("config" "fail" line)))))
  (setv status (sandbox-status config)
        kind (proto-get status ':kind)
        gateways (lfor [name section] (.items (.get config "gateways" {}))
                       :if (and (isinstance section dict) (.get section "enabled" True))
                       name))
  [#("config" "ok" (if (get config "config_file") file f"{file} (absent: the defaults)"))
   #("data dir" #* (_folder-check (get config "data_dir") True))
   #("REPL socket" #* (_socket-check config))
   #("sandbox" (if (and (= kind "bubblewrap") (!= (proto-get status ':network) "on")
                        (or (!= (proto-get status ':network) "policy") (proto-get status ':relay)))
                   "ok" "warn")
     (+ (sandbox-summary status)
        f"; [sandbox] mode = {(proto-get status ':mode)}"
        f", network = {(get config "sandbox" "network")}"))
   (_limits-check config)
   (_undo-check config)
   (_memory-check config)
   #("gateways" (if gateways "ok" "warn") (if gateways (.join ", " gateways) "none is turned on"))
   #* (lfor name gateways #(f"gateway {name}" #* (_gateway-check name (get config "gateways" name))))
   #* (_model-checks config)])

(defn cmd-doctor [args]
  (setv rows (doctor-checks args.config)
        width (max (gfor r rows (len (get r 0)))))
  (for [[check status detail] rows]
    (print f"{check :<{width}}  {status :<4}  {detail}"))
  (if (any (gfor r rows (= (get r 1) "fail"))) 1 0))
