;; * Why

"The command line is a contract: outside test suites drive passepartout verify
and the other commands exactly as DESIGN §12 writes them, so names, flags and
output shapes do not drift. Each command is a small function over the modules
that do the work."

(import argparse json os sys
        pathlib [Path]
        passepartout.config [ConfigError]
        passepartout.store [StoreError])

;; * verify

(import re
        hy.models [Keyword])

(setv _surrogate-re (re.compile "[\ud800-\udfff]"))

(defn _clean [s]
  "S with lone surrogates replaced, so that it encodes as UTF-8; other values as they are."
  (if (isinstance s str) (_surrogate-re.sub "\ufffd" s) s))

(defn _not-a-proposal [line reason]
  {"verdict" "reject" "gate" "proto"
   "reason" (_clean (+ "not a proposal: " reason))
   "action" (_clean (cut line 200))})

(setv _modules None
      _VERDICT (Keyword "verdict")
      _GATE (Keyword "gate")
      _REASON (Keyword "reason")
      _ACTION (Keyword "action")
      _CONFINED (Keyword "confined"))

(defn _verifying []
  "#(proto verify): the modules verify reads and judges with, imported on the
   first line (the other commands start without them), and only then: an import
   statement run for every line costs more than a gate's allow."
  (global _modules)
  (when (is _modules None)
    (import passepartout.proto passepartout.verify)
    (setv _modules #(passepartout.proto passepartout.verify)))
  _modules)

(defn _judge [action ctx n line]
  "The verdict dict for ACTION, read from LINE, the Nth."
  (setv [proto verify] (_verifying))
  (try
    (setv outcome (verify.verify action ctx))
    (| {"verdict" (. (proto.proto-get outcome _VERDICT) name)
        "gate" (_clean (proto.proto-get outcome _GATE))
        "reason" (_clean (proto.proto-get outcome _REASON))
        "action" (proto.proto-print (proto.proto-get outcome _ACTION))}
       (if (proto.proto-get outcome _CONFINED) {"confined" True} {}))
    (except [e Exception]
      {"verdict" "reject" "gate" "verify"
       "reason" (_clean (try f"the proposal on line {n} could not be judged: {(. (type e) __name__)}: {e}"
                             (except [Exception] f"the proposal on line {n} could not be judged")))
       "action" (_clean (cut line 200))})))

(defn input-lines [text]
  "The lines of TEXT: cut at each newline, a final newline ending the last line."
  (setv lines (.split text "\n"))
  (when (= (get lines -1) "")
    (.pop lines))
  (lfor l lines (.removesuffix l "\r")))

(defn verify-line [line n ctx]
  "The verdict dict for LINE, the Nth of the input."
  (setv [proto verify] (_verifying))
  (when (not (.strip line))
    (return (_not-a-proposal line f"line {n} is empty")))
  (try
    (setv action (verify.proposal-action (proto.proto-normalize (proto.proto-read line))))
    (except [e proto.ProtoError]
      (return (_not-a-proposal line f"line {n}: {e}")))
    (except [e Exception]
      (return (_not-a-proposal line (try f"line {n}: {(. (type e) __name__)}: {e}"
                                         (except [Exception] f"line {n} does not read"))))))
  (_judge action ctx n line))

(defn verify-text [text ctx]
  "One verdict dict per line of TEXT."
  (lfor [i line] (enumerate (input-lines text) 1) (verify-line line i ctx)))

(defn verify-lines [text ctx]
  "The output of verify for TEXT: one JSON line per input line."
  (import passepartout.display [json-line])
  (lfor v (verify-text text ctx) (json-line v)))

(defn _read-input [file]
  "The proposals in FILE (- for standard input) as text, invalid UTF-8 replaced."
  (setv data (if (in file #(None "-"))
                 (if (hasattr sys.stdin "buffer") (.read sys.stdin.buffer) (.read sys.stdin))
                 (.read-bytes (Path file))))
  (.removeprefix (if (isinstance data bytes) (.decode data "utf-8" "replace") data) "\ufeff"))

(defn _judged-sandbox [choice config]
  "The :sandbox of a context judged with --sandbox CHOICE (on, off, or None:
   what this machine has)."
  (import passepartout.sandbox [sandbox-status])
  (cond (= choice "on")
        [:kind "bubblewrap" :mode "stated" :network "policy"
         :why "judged as if the sandbox were in force (--sandbox on)"]
        (= choice "off")
        [:kind "off" :mode "off" :network "on"
         :why "judged as if no sandbox existed (--sandbox off)"]
        True (sandbox-status config)))

(defn _gate-context [args]
  "The config and a gate context for commands that judge without a daemon."
  (import passepartout.config [load-config config-secrets]
          passepartout.context [make-context]
          passepartout.skills [Registry load-skills]
          passepartout.proto [proto-get])
  (setv config (load-config args.config))
  (when (getattr args "workspace" None)
    (setv (get config "workspace") (str (.resolve (Path args.workspace)))))
  (setv skills (.get config "skills" {})
        registry (Registry))
  (for [r (load-skills registry :folders (.get skills "dirs" []) :disabled (.get skills "disabled" []))]
    (when (proto-get r ':error)
      (print f"passepartout: skill file {(proto-get r ':file)} failed to load: {(proto-get r ':error)}"
             :file sys.stderr)))
  (make-context :workspace (get config "workspace") :session "verify"
                :config config :secrets (config-secrets config) :skills registry
                :sandbox (_judged-sandbox (getattr args "sandbox" None) config)))

(defn cmd-verify [args]
  (setv ctx (_gate-context args)
        text (_read-input args.file)
        out (getattr sys.stdout "buffer" None))
  (.flush sys.stdout)
  (for [line (verify-lines text ctx)]
    (if out
        (.write out (.encode (+ line "\n") "utf-8" "replace"))
        (.write sys.stdout (+ line "\n"))))
  (if out (.flush out) (.flush sys.stdout))
  0)

;; * parse

(defn _arguments-text [a]
  (if (isinstance a str) a (json.dumps a)))

(defn parse-line [line n]
  "The dict parse prints for LINE, the Nth of its input."
  (import passepartout.extract [extract ACTIONS]
          passepartout.proto [ProtoError proto-get proto-has proto-to-data])
  (defn failed [why] {"action" None "error" why "unrun" 0})
  (try (setv value (json.loads line))
       (except [e ValueError]
         (return (failed f"line {n} is not a JSON-encoded string: {e}"))))
  (setv [text calls] (cond (isinstance value str) [value None]
                           (isinstance value dict)
                           [(.get value "text")
                            (lfor c (or (.get value "tool_calls") [])
                                  :if (isinstance c dict)
                                  [:name (.get c "name")
                                   :arguments (_arguments-text (.get c "arguments" "{}"))])]
                           True [None None]))
  (when (and (is text None) (not calls))
    (return (failed f"line {n} is neither a JSON string nor {{\"text\": …, \"tool_calls\": […]}}")))
  (try (setv r (extract text calls))
       (except [e ProtoError]
         (return (failed (str e))))
       (except [e Exception]
         (return (failed f"line {n}: {(. (type e) __name__)}: {e}"))))
  (if (proto-has r ':message)
      {"action" "message" "fields" {"text" (proto-get r ':message)} "unrun" 0}
      (do (setv p (proto-get r ':proposal)
                inner (proto-get p ':payload)
                action (if (and (isinstance inner list) (proto-get inner ':action)) inner p)
                data (proto-to-data action))
          (| {"action" (.pop data "action") "fields" data "unrun" (len (proto-get r ':unrun))}
             (if (proto-get r ':said) {"said" (proto-get r ':said)} {})))))

(defn cmd-parse [args]
  (import passepartout.display [json-line])
  (setv text (_read-input args.file)
        out (getattr sys.stdout "buffer" None))
  (.flush sys.stdout)
  (for [[i line] (enumerate (input-lines text) 1)]
    (setv row (+ (json-line (parse-line line i)) "\n"))
    (if out (.write out (.encode row "utf-8" "replace")) (.write sys.stdout row)))
  (if out (.flush out) (.flush sys.stdout))
  0)

;; * rules test

(defn cmd-rules [args]
  (import passepartout.proto [proto-get]
          passepartout.shell.judge [judge-command])
  (setv ctx (_gate-context args)
        v (judge-command args.cmd ctx)
        out {"verdict" (. (proto-get v ':verdict) name)
             "rule" (proto-get v ':rule)
             "reason" (proto-get v ':reason)
             "confined" (is (proto-get v ':confined) True)})
  (if args.json
      (print (json.dumps out :ensure-ascii False))
      (print (+ (get out "verdict") (if (get out "confined") " (confined)" "")
                " — rule " (str (get out "rule"))
                (if (get out "reason") (+ ": " (get out "reason")) ""))))
  0)

;; * chat

(defn :async _chat [env interactive]
  (import asyncio
          pathlib [Path]
          passepartout.gateways.hub [Hub]
          passepartout.daemon [start-services stop-services]
          passepartout.console [serve-repl]
          passepartout.reload [watch-skills]
          passepartout.approvals.hitl [approvals-service]
          passepartout.gateways.terminal [chat-terminal chat-lines format-reply progress-kept])
  (setv progress {})
  (defn :async show [r] (print (format-reply r) :flush True))
  (defn :async deliver [r]
    ;; a running workflow's progress goes to the status line of the full terminal
    (when (not (and interactive (progress-kept progress r)))
      (await (show r))))
  (setv hub (Hub env [{"name" "terminal" "deliver" deliver}] :fallback show
                 :concurrency (get env.config "limits" "model_concurrency"))
        background [(asyncio.create-task (serve-repl env hub))
                    (asyncio.create-task (watch-skills env))
                    (asyncio.create-task (approvals-service env hub))
                    (asyncio.create-task (.outbox-service hub))])
  (await (start-services env))
  (try
    ;; what was left unfinished is answered before the first prompt
    (when (await (.resume hub "terminal"))
      (for [s (.sessions hub)] (await (.idle hub s))))
    (if interactive
        (await (chat-terminal hub :history-path (/ (Path (get env.config "data_dir")) "chat_history")
                              :progress progress))
        (await (chat-lines hub)))
    ;; what is still held back in the outbox (behind a reply a chat killed
    ;; before it was marked shown) is shown before the chat goes
    (await (.settle-outbox hub))
    (finally
      (for [t background] (.cancel t))
      (await (asyncio.gather #* background :return-exceptions True))
      (await (.close hub))
      (await (stop-services env)))))

(defn cmd-chat [args]
  (import asyncio
          passepartout.daemon [boot shutdown skill-failures]
          passepartout.sandbox [sandbox-summary])
  (setv env (boot :config-path args.config :workspace args.workspace :gates "process" :warm True))
  (for [line (skill-failures env)] (print "passepartout:" line :file sys.stderr))
  (print (+ "Passepartout — workspace " (get env.config "workspace") ". Type /help for the commands, /quit or Ctrl-D to leave."))
  (print (+ "Protection: " (sandbox-summary env.sandbox) "."))
  (try
    (asyncio.run (_chat env (and (.isatty sys.stdin) (.isatty sys.stdout))))
    (except [KeyboardInterrupt] (print)))
  (shutdown env)
  0)

;; * daemon

(defn cmd-daemon [args]
  (import passepartout.daemon [cmd-daemon :as run-daemon])
  (run-daemon args))

;; * approvals

(defn cmd-approvals [args]
  (import passepartout.sandbox [inside-action])
  (setv why (inside-action))
  (when why
    (print (+ "passepartout approvals: refused: approvals are answered by people, "
              f"and this runs inside one of the agent's actions ({why})")
           :file sys.stderr)
    (return 1))
  (approvals-on-host args))

(defn _handed-over-text [store approval choice]
  "What the host is told after handing CHOICE on APPROVAL to the daemon."
  (import passepartout.proto [proto-get]
          passepartout.approvals.hitl [approvals-served])
  (setv pid (approvals-served store)
        session (proto-get approval ':session))
  (if (= choice "approve")
      (if pid
          f"Handed to the running daemon (pid {pid}), which runs it and continues the task in {session}."
          f"No daemon is running; it will be carried out when the daemon starts, and {session} told then.")
      (if pid
          f"The running daemon (pid {pid}) tells {session}."
          f"No daemon is running; {session} will be told when the daemon starts.")))

(defn approvals-on-host [args]
  "The approvals command once it is known to be a person's: ARGS has .action
   (list, approve, deny), .code, .duration (\"30m\"), .reason, .config."
  (import asyncio
          passepartout.daemon [boot shutdown]
          passepartout.proto [proto-get]
          passepartout.mailbox [notice-add]
          passepartout.approvals.grants [duration-minutes]
          passepartout.egress [host-word]
          passepartout.approvals.hitl [HOST-IDENTITY answer-approval find-approval pending-text]
          passepartout.display [display-text])
  (setv env (boot :config-path args.config))
  (try
    (setv store env.store
          action args.action
          duration (getattr args "duration" None)
          minutes (when duration (duration-minutes duration))
          hosts (or (getattr args "hosts" None) None))
    (cond
      (= action "list")
      (do (print (display-text (proto-get (pending-text env HOST-IDENTITY None :host True) ':text))) 0)
      (not (in action #("approve" "deny")))
      (do (print f"passepartout approvals: unknown action {action !r}" :file sys.stderr) 2)
      (not (getattr args "code" None))
      (do (print f"passepartout approvals {action}: give the code" :file sys.stderr) 2)
      (and duration (or (= action "deny") (not minutes)))
      (do (print f"passepartout approvals {action}: {duration !r} is not a duration such as 30m"
                 :file sys.stderr)
          2)
      (and hosts (not (all (gfor h hosts (host-word h)))))
      (do (print (+ f"passepartout approvals {action}: "
                    (.join ", " (gfor h hosts :if (not (host-word h)) (repr h)))
                    " is not a host such as github.com or 127.0.0.2:8080")
                 :file sys.stderr)
          2)
      True
      (do (setv r (asyncio.run (answer-approval env HOST-IDENTITY None args.code action
                                                :reason (getattr args "reason" None) :minutes minutes
                                                :host True :hosts hosts)))
          (for [s (proto-get r ':emit)]
            (notice-add store s (env.clock)))
          (print (display-text (if (proto-get r ':handed-over)
                                   (+ (proto-get r ':text) " "
                                      (_handed-over-text store (find-approval store args.code) action))
                                   (proto-get r ':text))))
          (if (proto-get r ':ok) 0 1)))
    (finally (shutdown env))))

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
          passepartout.cascade [providers-from-config check-provider])
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

;; * backup

(defn cmd-backup [args]
  (import passepartout.config [load-config]
          passepartout.store [store-open store-path-for]
          passepartout.backup [store-backup backup-path-for])
  (setv data-dir (get (load-config args.config) "data_dir")
        source (store-path-for data-dir)
        given (when args.path (.expanduser (Path args.path)))
        dest (cond (is given None) (backup-path-for data-dir)
                   (.is-dir given) (/ given (. (backup-path-for data-dir) name))
                   True given))
  (when (not (.exists source))
    (print f"passepartout backup: there is no store at {source} to back up" :file sys.stderr)
    (return 1))
  (with [store (store-open source)]
    (setv size (store-backup store dest)))
  (print f"wrote {dest} ({size} bytes)")
  0)

;; * tangle

(defn _project-root [start]
  "The nearest folder at or above START that holds org/ and passepartout/."
  (for [d (+ [start] (list start.parents))]
    (when (and (.is-dir (/ d "org")) (.is-dir (/ d "passepartout")))
      (return d)))
  None)

(defn cmd-tangle [args]
  (import passepartout.tools.tangle [tangle])
  (setv root (if args.root (Path args.root) (_project-root (.resolve (Path.cwd)))))
  (when (is root None)
    (print "passepartout tangle: no org/ folder here or above; use --root" :file sys.stderr)
    (return 2))
  (setv differ (tangle root :check args.check))
  (for [p differ]
    (print (if args.check f"differs from its org source: {(.relative-to p root)}"
                          f"tangled: {(.relative-to p root)}")))
  (if (and args.check differ) 1 0))

;; * bench

(defn cmd-bench [args]
  (import passepartout.tools.bench [run-benchmarks])
  (run-benchmarks :quick args.quick))

;; * journal

(defn _journal-store [args]
  "The store of the configured data dir, or None when there is none yet."
  (import passepartout.config [load-config]
          passepartout.store [store-open store-path-for])
  (setv path (store-path-for (get (load-config args.config) "data_dir")))
  (when (.exists path) (store-open path)))

(defn cmd-journal [args]
  (import passepartout.journal [journal-verify journal-export]
          passepartout.display [display-text json-visible]
          passepartout.proto [proto-get])
  (setv store (_journal-store args))
  (when (is store None)
    (when (= args.journal-command "verify")
      (print "the journal is empty: there is no store yet"))
    (return 0))
  (with [store store]
    (if (= args.journal-command "verify")
        (do (setv v (journal-verify store))
            (if (proto-get v ':ok)
                (do (print f"the journal's {(proto-get v ':turns)} turns are intact") 0)
                (do (print (proto-get v ':text)) 1)))
        (do (for [text (journal-export store :session args.session :fmt args.format)]
              (.write sys.stdout (if (= args.format "jsonl") (json-visible text) (display-text text))))
            (.flush sys.stdout)
            0))))

;; ** journal archive

(defn cmd-journal-archive [args]
  (import time
          passepartout.archive [archive-age configured-age archive-journal archive-text]
          passepartout.config [load-config]
          passepartout.store [store-open store-path-for])
  (setv config (load-config args.config)
        path (store-path-for (get config "data_dir")))
  (try (setv age (if args.older-than (archive-age args.older-than) (configured-age config)))
       (except [e ValueError]
         (print e :file sys.stderr)
         (return 2)))
  (when (is age None)
    (print "archiving is off ([journal] archive_after); give --older-than to archive now")
    (return 0))
  (when (not (.exists path))
    (print "the journal is empty: there is no store yet")
    (return 0))
  (with [store (store-open path)]
    (print (archive-text (archive-journal store (- (time.time) age)))))
  0)

;; * replay

(setv _ago-re (re.compile r"([0-9]{1,6})\s*(m|h|d)\Z" re.I))

(defn _since [text]
  "The time TEXT names, in seconds since the epoch; ValueError when it names none."
  (import datetime time)
  (setv text (.strip text)
        m (.match _ago-re text))
  (cond
    m (- (time.time) (* (int (.group m 1)) (get {"m" 60 "h" 3600 "d" 86400} (.lower (.group m 2)))))
    (.fullmatch (re.compile r"[0-9]+(\.[0-9]+)?") text) (float text)
    True (.timestamp (datetime.datetime.fromisoformat text))))

(defn cmd-replay [args]
  (import passepartout.journal [journal-replay change-text]
          passepartout.display [display-text]
          passepartout.proto [proto-get])
  (setv since None)
  (when args.since
    (try (setv since (_since args.since))
         (except [ValueError]
           (print f"passepartout replay: --since {args.since !r} is neither a time nor an age like 12h"
                  :file sys.stderr)
           (return 2))))
  (setv today (_gate-context args)
        store (_journal-store args))
  (when (is store None)
    (print "replayed 0 proposals: there is no store yet")
    (return 0))
  (with [store store]
    (setv r (journal-replay store today :since since :session args.session)))
  (setv changes (proto-get r ':changes))
  (for [c changes] (print (display-text (change-text c))))
  (print (+ f"replayed {(proto-get r ':judged)} proposals: {(len changes)} decisions would change"
            (if (proto-get r ':unjudged)
                f"; {(proto-get r ':unjudged)} had no recorded proposal or context to judge again"
                "")))
  (if changes 1 0))

;; * prompt

(defn cmd-prompt [args]
  (import passepartout.prompt [prompt-report report-text configured-model]
          passepartout.history [task-history history-budget]
          passepartout.proto [proto-get proto-put])
  (setv ctx (_gate-context args)
        runtime (proto-get ctx ':runtime)
        config (get runtime "config")
        store (_journal-store args)
        session args.session
        signal [:type :event :session session :source [:gateway :terminal]
                :payload [:sensor :user-input :text (.join " " args.text)]])
  (setv (get runtime "store") store
        ctx (proto-put ctx ':session session))
  (try
    (setv history (if store (get (task-history store session None :budget (history-budget config)) 0) []))
    (print (report-text (prompt-report signal ctx history :model (configured-model config))
                        :full (not args.brief)))
    (finally (when store (.close store))))
  0)

;; * memory

(defn cmd-memory [args]
  (import passepartout.memory [memory-history change-line memory-revert dream]
          passepartout.display [display-text]
          passepartout.proto [proto-get])
  (setv store (_journal-store args))
  (when (is store None)
    (print "memory is empty: there is no store yet")
    (return 0))
  (with [store store]
    (cond
      (= args.memory-command "history")
      (do (setv changes (memory-history store :limit args.limit))
          (when (not changes) (print "no memory changes yet"))
          (for [c changes] (print (display-text (change-line c))))
          0)
      (= args.memory-command "revert")
      (try (setv turn (memory-revert store args.turn))
           (print f"reverted turn {args.turn} (the revert is turn {turn})")
           0
           (except [e ValueError]
             (print f"passepartout memory revert: {e}" :file sys.stderr)
             1))
      True
      (do (setv r (dream store))
          (print f"{(proto-get r ':before)} notes before, {(proto-get r ':after)} after: {(proto-get r ':merged)} merged, {(proto-get r ':forgotten)} forgotten, {(proto-get r ':stale)} marked stale")
          0))))

;; * The parser

(defn _version []
  (import importlib.metadata)
  (try (importlib.metadata.version "passepartout")
       (except [importlib.metadata.PackageNotFoundError] "(not installed)")))

(defn _command [sub name #** kw]
  "The parser of the command NAME under SUB; it takes --config too, so the
   option may follow the command as well as precede it."
  (setv p (.add-parser sub name #** kw))
  (.add-argument p "--config" :default argparse.SUPPRESS
                 :help "config file (default ~/.config/passepartout/config.toml)")
  p)

(defn make-parser []
  (setv p (argparse.ArgumentParser
            :prog "passepartout"
            :description "A personal agent: the model proposes, deterministic code decides.")
        sub (.add-subparsers p :dest "command" :metavar "COMMAND"))
  (.add-argument p "--config" :help "config file (default ~/.config/passepartout/config.toml)")
  (.add-argument p "--version" :action "version" :version (+ "passepartout " (_version)))

  (setv c (_command sub "chat" :help "terminal chat with an in-process daemon"))
  (.add-argument c "--workspace" :help "the workspace folder")
  (.set-defaults c :func cmd-chat)

  (setv d (_command sub "daemon" :help "headless: the configured gateways and the REPL socket, until SIGTERM"))
  (.add-argument d "--workspace" :help "the workspace folder")
  (.set-defaults d :func cmd-daemon)

  (setv v (_command sub "verify" :help "run the gates over proposals, no model; one JSON line each"))
  (.add-argument v "file" :nargs "?" :default "-" :help "file of proposals, or - for stdin")
  (.add-argument v "--workspace" :help "the workspace the gates confine to")
  (.add-argument v "--sandbox" :choices ["on" "off"]
                 :help "judge as if the sandbox were in force or not (default: what this machine has)")
  (.set-defaults v :func cmd-verify)

  (setv pa (_command sub "parse" :help "read raw model answers (JSON strings, one a line) into proposals; one JSON line each"))
  (.add-argument pa "file" :nargs "?" :default "-" :help "file of answers, or - for stdin")
  (.set-defaults pa :func cmd-parse)

  (setv r (_command sub "rules" :help "try the shell rules")
        rsub (.add-subparsers r :dest "rules_command" :metavar "COMMAND" :required True)
        rt (_command rsub "test" :help "the verdict for one shell command and the rule that decided"))
  (.add-argument rt "cmd" :metavar "CMD" :help "the shell command, as one argument")
  (.add-argument rt "--workspace" :help "the workspace the rules judge paths against")
  (.add-argument rt "--json" :action "store_true" :help "print one JSON object")
  (.add-argument rt "--sandbox" :choices ["on" "off"]
                 :help "judge as if the sandbox were in force or not (default: what this machine has)")
  (.set-defaults rt :func cmd-rules)

  (setv a (_command sub "approvals" :help "pending approvals, answered from the host"))
  (.add-argument a "action" :choices ["list" "approve" "deny"])
  (.add-argument a "code" :nargs "?" :help "the approval's code or token")
  (.add-argument a "duration" :nargs "?"
                 :help "with approve: also allow this kind of action in that conversation for so long, e.g. 30m")
  (.add-argument a "hosts" :nargs "*" :metavar "HOST"
                 :help "with approve and a duration: let these hosts through the egress proxy instead, e.g. 1h github.com")
  (.add-argument a "--reason" :help "why it is denied")
  (.set-defaults a :func cmd-approvals)

  (setv dr (_command sub "doctor" :help "check the config, folders, sandbox, gateways and each model; say which protection is in force"))
  (.set-defaults dr :func cmd-doctor)

  (setv bk (_command sub "backup" :help "copy the store, also while the daemon runs, to a new file"))
  (.add-argument bk "path" :nargs "?" :metavar "PATH"
                 :help "the file, or a folder for it (default: DATA_DIR/backups/, named by the time)")
  (.set-defaults bk :func cmd-backup)

  (setv t (_command sub "tangle" :help "tangle org/ into the code, or check that they agree"))
  (.add-argument t "--check" :action "store_true" :help "write nothing; exit 1 if any file differs")
  (.add-argument t "--root" :help "the project folder (default: found from here)")
  (.set-defaults t :func cmd-tangle)

  (setv b (_command sub "bench" :help "the benchmarks, as figures"))
  (.add-argument b "--quick" :action "store_true" :help "fewer repetitions")
  (.set-defaults b :func cmd-bench)

  (setv j (_command sub "journal" :help "the journal of turns: check its hash chain, export it")
        jsub (.add-subparsers j :dest "journal_command" :metavar "COMMAND" :required True)
        jv (_command jsub "verify" :help "recompute the chain; name the first turn edited, inserted or removed")
        je (_command jsub "export" :help "the turns, one readable line each, as JSON lines (--raw) or an org outline"))
  (.set-defaults jv :func cmd-journal)
  (.add-argument je "--session" :help "only this session's turns")
  (.add-argument je "--format" :choices ["text" "jsonl" "org"] :default "text"
                 :help "text: one readable line a turn (the default); jsonl: every field, the content as plist text; org: an outline")
  (.add-argument je "--raw" :action "store_const" :dest "format" :const "jsonl"
                 :help "every field as it is stored: the same as --format jsonl")
  (.set-defaults je :func cmd-journal)
  (setv ja (.add-parser jsub "archive" :help "move the old turns into compressed segments beside the store now"))
  (.add-argument ja "--older-than" :help "archive what is older than this (7d, 12h); default [journal] archive_after")
  (.set-defaults ja :func cmd-journal-archive)

  (setv mm (_command sub "memory" :help "long-term memory: its changes, undoing one, consolidating it")
        msub (.add-subparsers mm :dest "memory_command" :metavar "COMMAND" :required True)
        mh (.add-parser msub "history" :help "the changes: forgotten, merged, marked stale, reverted")
        mr (.add-parser msub "revert" :help "undo the change of one turn")
        md (.add-parser msub "dream" :help "consolidate now: merge near-duplicates, drop what was forgotten, mark stale notes"))
  (.add-argument mh "--limit" :type int :default 50 :help "the last this many changes")
  (.add-argument mr "turn" :type int :metavar "TURN" :help "the turn's number, as history shows it")
  (for [x [mh mr md]] (.set-defaults x :func cmd-memory))

  (setv pr (_command sub "prompt" :help "the prompt a message would get, section by section with token counts"))
  (.add-argument pr "text" :nargs "*" :metavar "TEXT" :help "the message (its words find the memories)")
  (.add-argument pr "--session" :default "terminal:local" :help "the conversation (default terminal:local)")
  (.add-argument pr "--brief" :action "store_true" :help "the sections and their counts, not their text")
  (.set-defaults pr :func cmd-prompt)

  (setv rp (_command sub "replay" :help "today's gates over the journal's proposals: what would change (exit 1 if any)"))
  (.add-argument rp "--since" :help "from this time (2026-11-01, 2026-11-01T09:30) or this long ago (12h, 7d)")
  (.add-argument rp "--session" :help "only this session")
  (.set-defaults rp :func cmd-replay)
  p)

(defn main [[argv None]]
  "The passepartout command."
  (setv args (.parse-args (make-parser) argv))
  (when (is (getattr args "func" None) None)
    (.print-help (make-parser))
    (return 2))
  (try
    (setv code (args.func args))
    (except [e ConfigError]
      (print f"passepartout: {e}" :file sys.stderr)
      (setv code 2))
    (except [e StoreError]
      (print f"passepartout: {e}" :file sys.stderr)
      (setv code 1)))
  (sys.exit (or code 0)))
