;; * Why

"Every way of running Passepartout (the terminal chat, the headless daemon, a
test) needs the same parts put together in the same order: the config, the
store, the skills, the cascade. boot does it once and returns the env dict
that loop.step runs on; the workers that run steps only read it, so what a
daemon keeps between steps, such as the recent turns of each session
(env[\"histories\"], see loop.org), is made here too. It needs no
configuration at all: with none, the data lives in the default data dir, the
workspace beside it, and the cascade ends in the symbolic provider, so a fresh
machine can chat at once."

(import asyncio fcntl logging logging.handlers os signal sys time
        pathlib [Path]
        passepartout.config [ConfigError load-config ensure-dirs config-secrets config-defaults]
        passepartout.store [store-open store-path-for store-close store-unwell]
        passepartout.mailbox [inbox-count inbox-prune outbox-prune]
        passepartout.records [kv-put HEARTBEAT-KEY]
        passepartout.proto [proto-get]
        passepartout.skills [Registry load-skills set-immutable-skills]
        passepartout.cascade [make-cascade]
        passepartout.providers [providers-from-config]
        passepartout.llm [warm-litellm]
        passepartout.approvals.hitl [escalate approvals-boot]
        passepartout.sandbox [sandbox-status]
        passepartout.services [Services]
        passepartout.gatekeeper [ProcessGates]
        passepartout.gateways.hub [Hub configured-gateways]
        passepartout.backoff [growing-pause]
        passepartout.secrets [redact-text secret-tuple])

(setv log (logging.getLogger "passepartout.daemon"))

;; * Boot

(defn _providers [config environ]
  (try
    (providers-from-config config environ)
    (except [e ValueError]
      (raise (ConfigError f"{(or (.get config "config_path") "providers")}: {e}")))))

(defn boot [[config-path None] [workspace None] [environ None] [providers None] [gates "inline"]
            [warm False]]
  "The services of a running daemon (=services.org=). PROVIDERS, when given,
   replaces the configured cascade. GATES \"process\" judges proposals in a
   gate process of the daemon's own (=gatekeeper.org=), started by
   start-services; \"inline\" in this process. WARM starts importing LiteLLM in
   the background when a model is configured (a daemon or a chat that serves)."
  (setv environ (if (is environ None) os.environ environ)
        config (load-config config-path environ))
  (when workspace
    (setv (get config "workspace") (str (.resolve (.expanduser (Path workspace))))))
  (ensure-dirs config)
  (setv store (store-open (store-path-for (get config "data_dir")))
        skills (.get config "skills" {})
        registry (Registry)
        report (load-skills registry :folders (.get skills "dirs" []) :disabled (.get skills "disabled" []))
        _ (set-immutable-skills registry (.get skills "immutable" []))
        cascade-cfg (| (config-defaults "cascade") (.get config "cascade" {}))
        cascade (make-cascade (if (is providers None) (_providers config environ) providers)
                              :cooldown (get cascade-cfg "cooldown")
                              :failure-threshold (get cascade-cfg "failure_threshold")
                              :store store))
  (for [r report]
    (when (proto-get r ':error)
      (.error log "skill file %s failed to load: %s"
              (proto-get r ':file)
              (proto-get r ':error))))
  (setv services (Services config store registry cascade
                          :escalate escalate
                          :secrets (config-secrets config environ)
                          :skill-report report
                          :sandbox (sandbox-status config)
                          :environ environ))
  (when (= gates "process")
    (setv services.gates (ProcessGates services)))
  (when warm
    (warm-litellm (get cascade "providers")))
  (approvals-boot services)
  services)

(defn :async start-services [services]
  "Start what of SERVICES runs beside the event loop (the gate process)."
  (when (hasattr services.gates "start")
    (for [p (await (.start services.gates))]
      (.error log "the gate process: %s" p))))

(defn :async stop-services [services]
  "Stop what start-services started."
  (when (hasattr services.gates "close")
    (await (.close services.gates))))

(defn skill-failures [env]
  "Lines describing every skill file that failed to load."
  (lfor r env.skill-report
        :if (proto-get r ':error)
        (+ "skill file " (proto-get r ':file) " failed to load: "
           (proto-get r ':error))))

(defn shutdown [env]
  "Release what boot acquired."
  (when (hasattr env.checkpoints "close")
    (.close env.checkpoints))
  (store-close env.store))

;; * One daemon per data dir

(defclass DaemonRunning [Exception]
  "Another daemon holds the pid file.")

(defn _read-pid [fd]
  (setv text (.decode (os.pread fd 200 0) "utf-8" "replace"))
  (try (int (get (.split text) 0)) (except [#(ValueError IndexError)] None)))

(defn _same-file [fd path]
  (try
    (= (. (os.fstat fd) st-ino) (. (os.stat path) st-ino))
    (except [FileNotFoundError] False)))

(defn claim-pid-file [path data-dir [notes None]]
  "Hold the pid file PATH for this process; its descriptor. DaemonRunning
   when a live daemon holds it. What is worth logging is appended to NOTES
   when given (the log is not set up yet), else logged."
  (setv path (Path path))
  (.mkdir path.parent :parents True :exist-ok True :mode 0o700)
  (for [_ (range 5)]
    (setv fd (os.open path (| os.O-RDWR os.O-CREAT) 0o600))
    (try
      (fcntl.flock fd (| fcntl.LOCK-EX fcntl.LOCK-NB))
      (except [BlockingIOError]
        (setv pid (_read-pid fd))
        (os.close fd)
        (raise (DaemonRunning (+ f"another daemon (pid {pid}) is running on {data-dir}"
                                 f" (pid file {path})")))))
    (if (_same-file fd path)
        (break)
        (os.close fd))
    (else
      (raise (DaemonRunning f"the pid file {path} keeps being replaced; is another daemon starting?"))))
  (setv old (_read-pid fd))
  (when (and old (!= old (os.getpid)))
    (setv note f"took over the pid file {path} of pid {old}, which is no longer running")
    (if (is notes None) (.warning log "%s" note) (.append notes note)))
  (os.ftruncate fd 0)
  (os.pwrite fd (.encode f"{(os.getpid)}\n{data-dir}\n") 0)
  fd)

(defn release-pid-file [path fd]
  "Give up the pid file PATH held through FD."
  (try (os.unlink path) (except [FileNotFoundError]))
  (os.close fd))

(defn pid-files [config]
  "The pid files of the daemon that CONFIG describes."
  (setv paths [(/ (Path (get config "runtime_dir")) "daemon.pid")
               (/ (Path (get config "data_dir")) "daemon.pid")])
  (if (= (get paths 0) (get paths 1)) (cut paths 1) paths))

;; * Settings

(setv DAEMON-DEFAULTS (config-defaults "daemon"))

(defn daemon-settings [config]
  "The [daemon] settings of CONFIG with defaults, and model_concurrency; a
   ConfigError for a value that is not a positive number."
  (setv table (.get config "daemon" {}))
  (when (not (isinstance table dict))
    (raise (ConfigError "daemon should be a table")))
  (setv out (| DAEMON-DEFAULTS table
               {"model_concurrency" (.get (.get config "limits" {}) "model_concurrency"
                                          (get (config-defaults "limits") "model_concurrency"))}))
  (for [k (+ (list DAEMON-DEFAULTS) ["model_concurrency"])]
    (setv v (get out k))
    (when (or (isinstance v bool) (not (isinstance v #(int float))) (< v 0)
              (and (= v 0) (!= k "log_backups")))
      (raise (ConfigError f"daemon.{k} should be a positive number, not {v !r}"))))
  (when (not (isinstance (get out "model_concurrency") int))
    (raise (ConfigError "limits.model_concurrency should be a whole number")))
  out)

;; * The log

(defclass LogFile [logging.handlers.RotatingFileHandler]
  "The daemon's log file; a write (or flush) that fails is said in one line, once a minute."
  (setv said-at 0.0)
  (defn _say [self e]
    (setv now (time.monotonic))
    (when (> (- now self.said-at) 60)
      (setv self.said-at now)
      (try
        (.write sys.stderr f"passepartout daemon: the log file {self.baseFilename} cannot be written: {e}\n")
        (except [Exception] None))))
  (defn handleError [self record]
    (self._say (get (sys.exc-info) 1)))
  (defn flush [self]
    (try
      (.flush (super))
      (except [e OSError]
        (self._say e))))
  (defn close [self]
    (try
      (.close (super))
      (except [e OSError]
        (self._say e)))))

(defclass Redacting [logging.Filter]
  "Passes every record through the redaction the gates use: a secret the
   daemon holds, or one that looks like a key, a token or a password in a URL,
   is written as =[redacted: KIND]=, in the message and in a traceback."
  (defn __init__ [self [secrets None]]
    (.__init__ (super))
    (setv self.secrets (secret-tuple (list (or secrets [])))))
  (defn filter [self record]
    (try
      (setv text (.getMessage record)
            [shown n] (redact-text text self.secrets))
      (when n
        (setv record.msg shown
              record.args None))
      (when record.exc-info
        (setv [trace n] (redact-text (.formatException (logging.Formatter) record.exc-info) self.secrets))
        (setv record.exc-text trace
              record.exc-info None))
      (except [Exception] None))
    True))

(defn setup-logging [config [settings None] [secrets None]]
  "Log to DATA_DIR/logs/daemon.log (rotated) and warnings to stderr, each line
   redacted (SECRETS are the values the daemon holds); the handlers added."
  (setv settings (or settings (daemon-settings config))
        folder (/ (Path (get config "data_dir")) "logs"))
  (.mkdir folder :parents True :exist-ok True :mode 0o700)
  (setv file (LogFile (/ folder "daemon.log")
                      :maxBytes (int (get settings "log_max_bytes"))
                      :backupCount (int (get settings "log_backups"))
                      :encoding "utf-8")
        err (logging.StreamHandler sys.stderr)
        root (logging.getLogger))
  (.setFormatter file (logging.Formatter "%(asctime)s %(levelname)s %(name)s: %(message)s"))
  (.setFormatter err (logging.Formatter "passepartout daemon: %(levelname)s %(name)s: %(message)s"))
  (.setLevel err logging.WARNING)
  (setv redacting (Redacting secrets))
  (.addFilter file redacting)
  (.addFilter err redacting)
  (.setLevel root logging.INFO)
  (.setLevel (logging.getLogger "httpx") logging.WARNING)
  (.setLevel (logging.getLogger "httpcore") logging.WARNING)
  (.setLevel (logging.getLogger "LiteLLM") logging.WARNING)
  (.addHandler root file)
  (.addHandler root err)
  [file err])

;; * The heartbeat

(defn :async _heartbeat [env hub settings started [gateways None]]
  "GATEWAYS, when given, is a function of no arguments: the gateways' states."
  (setv store env.store)
  (while True
    (try
      (setv now (time.time)
            pending (inbox-count store)
            sessions (len (.sessions hub))
            states (if gateways (gateways) {})
            down (degraded states))
      (kv-put store HEARTBEAT-KEY
              [:time now :pid (os.getpid) :started started
               :sessions sessions :pending pending
               :gateways (lfor [k v] (.items states) x [k v] x)
               :degraded (bool down)])
      (inbox-prune store (- now (get settings "inbox_keep")))
      (outbox-prune store (- now (get settings "inbox_keep")))
      (if down
          (.warning log "alive but degraded: pid %s, %s sessions, %s signals pending; %s"
                    (os.getpid) sessions pending
                    (.join "; " (gfor n down f"{n}: {(get states n)}")))
          (.info log "alive: pid %s, %s sessions, %s signals pending" (os.getpid) sessions pending))
      (except [asyncio.CancelledError] (raise))
      (except [e Exception]
        (if (store-unwell e)
            (.warning log "the heartbeat could not be written: %s" e)
            (.exception log "the heartbeat failed"))))
    (await (asyncio.sleep (get settings "heartbeat")))))

;; * Serving

(defn _install-signals [loop stop hurry]
  "Set STOP on SIGTERM and SIGINT, HURRY on the second; the signals handled."
  (defn on-signal [signum]
    (if (.is-set stop)
        (do (.warning log "second %s: leaving without waiting for the work in flight"
                      (. (signal.Signals signum) name))
            (.set hurry))
        (do (.info log "%s received: stopping" (. (signal.Signals signum) name))
            (.set stop))))
  (setv installed [])
  (for [s [signal.SIGTERM signal.SIGINT]]
    (try
      (.add-signal-handler loop s on-signal s)
      (.append installed s)
      (except [#(NotImplementedError RuntimeError ValueError)])))
  installed)

(setv GATEWAY-OK #{"starting" "running" "polling" "receiving"})

(defn :async _supervise [g hub states stop]
  "Run the gateway G, started again with a growing pause whenever it fails,
   until it ends by itself or STOP is set; its state kept in STATES."
  (setv name (get g "name")
        failures 0)
  (while (not (.is-set stop))
    (setv (get states name) "running")
    (try
      (await ((get g "run") hub))
      (setv (get states name) "stopped")
      (.info log "gateway %s stopped" name)
      (return)
      (except [asyncio.CancelledError] (raise))
      (except [e Exception]
        (+= failures 1)
        (setv wait (growing-pause failures)
              (get states name) f"restarting after a failure ({(. (type e) __name__)}: {e})")
        (.error log "gateway %s failed (%s time(s)): %r; starting it again in %s s" name failures e wait
                :exc-info e)
        (try
          (await (asyncio.wait-for (.wait stop) wait))
          (except [asyncio.TimeoutError]))))))

(defn gateway-states [gateways states]
  "{name: one line} for each gateway: its own state when it has one."
  (dfor g gateways
        :setv name (get g "name")
        :setv own (.get g "state")
        :setv base (.get states name "starting")
        name (if (and own (= base "running")) (own) base)))

(defn degraded [states]
  "The gateways of STATES (from gateway-states) that are not working."
  (lfor [name state] (.items states) :if (not (in state GATEWAY-OK)) name))

(defn :async _stop-all [gateways tasks timeout]
  (for [g gateways]
    (try
      (await ((get g "stop")))
      (except [Exception]
        (.exception log "gateway %s failed to stop" (get g "name")))))
  (when tasks
    (setv [_ late] (await (asyncio.wait tasks :timeout timeout)))
    (for [t late] (.cancel t))
    (await (asyncio.gather #* tasks :return-exceptions True))))

(defn :async serve [env [gateways None] [services None] [stop None] [held None] [on-ready None]]
  "Run the daemon on ENV until SIGTERM, SIGINT or the asyncio.Event STOP; 0.
   GATEWAYS default to the configured ones; SERVICES are (fn :async [env hub]),
   given the hub, the one way in. HELD are the pid files already claimed
   (#(path fd) pairs), claimed here when None. ON-READY is called once with
   {gateway: state} when the gateways have started and the REPL socket listens."
  (setv config env.config
        settings (daemon-settings config)
        gateways (if (is gateways None) (configured-gateways env) (list gateways))
        stop (or stop (asyncio.Event))
        hurry (asyncio.Event)
        loop (asyncio.get-running-loop)
        handled []
        claim (is held None)
        held (list (or held [])))
  (try
    (when claim
      (for [path (pid-files config)]
        (.append held #(path (claim-pid-file path (get config "data_dir"))))))
    (await (start-services env))
    (setv hub (Hub env gateways :concurrency (get settings "model_concurrency"))
          handled (_install-signals loop stop hurry)
          started (time.time)
          resumed (await (.resume hub))
          tasks []
          states {})
    (.info log "daemon started: pid %s, data dir %s, gateways: %s; %s unfinished signals queued again"
           (os.getpid) (get config "data_dir")
           (or (.join ", " (gfor g gateways (get g "name"))) "none") resumed)
    (for [g gateways]
      (.append tasks (asyncio.create-task (_supervise g hub states stop))))
    (setv others (+ [(asyncio.create-task (.outbox-service hub (* 3600 (get settings "reply_max_hours"))))]
                    (lfor s (or services []) (asyncio.create-task (s env hub))))
          beat (asyncio.create-task (_heartbeat env hub settings started
                                                (fn [] (gateway-states gateways states)))))
    (when on-ready
      (.append others (asyncio.create-task (_when-ready env gateways states on-ready))))
    (await (.wait stop))
    (.info log "stopping: no more input")
    (for [t others] (.cancel t))
    (await (_stop-all gateways tasks (get settings "shutdown_grace")))
    (setv hurried (asyncio.create-task (.wait hurry))
          drained (asyncio.create-task (.drain hub (get settings "shutdown_grace"))))
    (await (asyncio.wait [hurried drained] :return-when asyncio.FIRST-COMPLETED))
    (.cancel hurried)
    (setv left (inbox-count env.store))
    (if (and (.done drained) (.result drained))
        (.info log "stopped: every signal received was answered")
        (.warning log "stopped with %s signals unfinished; they will be handled at the next start" left))
    (.cancel drained)
    (.cancel beat)
    (await (asyncio.gather beat drained #* others :return-exceptions True))
    (await (.close hub))
    0
    (finally
      (for [s handled] (.remove-signal-handler loop s))
      (for [g gateways]
        (when (in "close" g)
          (try
            (await ((get g "close")))
            (except [Exception]
              (.exception log "gateway %s failed to close" (get g "name"))))))
      (await (stop-services env))
      (for [[path fd] held]
        (release-pid-file path fd)))))

;; * Saying it has started

(setv READY-WAIT 30)

(defn :async _when-ready [env gateways states on-ready]
  (import passepartout.console [socket-path])
  (setv sock (socket-path env.config)
        deadline (+ (time.monotonic) READY-WAIT))
  (while (and (< (time.monotonic) deadline)
              (or (not (.exists (Path sock)))
                  (in "starting" (.values (gateway-states gateways states)))))
    (await (asyncio.sleep 0.05)))
  (on-ready (gateway-states gateways states) (.exists (Path sock))))

;; * The command

(defn :async _watch-skills [env runner]
  (await (hy.I.passepartout/reload.watch-skills env)))

(defn daemon-services []
  "The services every daemon runs: the REPL socket, hot reload of skill files,
   the approvals (expiry, answers given on the host, stored notices), and the
   agenda's periodic review (=agenda.org=; nothing unless [agenda] review asks),
   the journal's daily archive (=archive.org=; off when [journal] archive_after is),
   and memory's nightly dream (=memory.org=; off when [memory] dream_at is)."
  (import passepartout.console [serve-repl]
          passepartout.approvals.hitl [approvals-service]
          passepartout.agenda [agenda-review-service]
          passepartout.archive [archive-service]
          passepartout.memory [dream-service])
  [serve-repl _watch-skills approvals-service agenda-review-service archive-service dream-service])

(defn start-banner [env [states None] [listening True]]
  "What a person starting the daemon is told: what runs (STATES, {gateway:
   state}), where to reach it (the REPL socket, when LISTENING), where it logs."
  (import passepartout.console [socket-path]
          passepartout.limits [limits-summary]
          passepartout.sandbox [sandbox-summary])
  (setv config env.config
        states (or states {})
        running (lfor [name state] (.items states) f"{name} ({state})"))
  (.join "\n" [f"passepartout daemon: started (pid {(os.getpid)})"
               f"  gateways: {(if running (.join ", " running) "none (no [gateways] section enables one; see README, Configuration)")}"
               (if listening
                   f"  REPL socket: {(socket-path config)}"
                   f"  REPL socket: not listening (see the log)")
               f"  log: {(/ (Path (get config "data_dir")) "logs" "daemon.log")}"
               f"  protection: {(sandbox-summary env.sandbox)}"
               f"  limits: {(limits-summary config)}"]))

(defn cmd-daemon [args]
  "Run the headless daemon; the exit status."
  (import passepartout.sandbox [sandbox-summary])
  (setv config (load-config args.config)
        held []
        notes [])
  (try
    (for [path (pid-files config)]
      (.append held #(path (claim-pid-file path (get config "data_dir") notes))))
    (except [e DaemonRunning]
      (for [[path fd] held] (release-pid-file path fd))
      (print f"passepartout daemon: not started: {e}" :file sys.stderr)
      (return 1)))
  (setv env (boot :config-path args.config :workspace (getattr args "workspace" None) :gates "process"
                  :warm True)
        handlers (setup-logging env.config :secrets env.secrets))
  (for [note notes]
    (.warning log "%s" note))
  (for [line (skill-failures env)]
    (.error log "%s" line))
  ;; Said at every start, and on stderr when shell actions run with less than
  ;; the sandbox, or with the host's network.
  (.log log (if (and (= (proto-get env.sandbox ':kind) "bubblewrap")
                     (!= (proto-get env.sandbox ':network) "on"))
                logging.INFO
                logging.WARNING)
        "protection: %s" (sandbox-summary env.sandbox))
  (defn ready [states listening]
    (print (start-banner env states listening) :flush True))
  (try
    (setv status (asyncio.run (serve env :services (daemon-services) :held held :on-ready ready)))
    (print "passepartout daemon: stopped" :flush True)
    status
    (except [e DaemonRunning]
      (print f"passepartout daemon: {e}" :file sys.stderr)
      1)
    (finally
      (shutdown env)
      (for [h handlers]
        (.removeHandler (logging.getLogger) h)
        (.close h)))))
