(import asyncio fcntl importlib logging logging.handlers os queue re signal sys threading time
        pathlib [Path]
        passepartout.config [ConfigError]
        passepartout.proto [ProtoError kw proto-get proto-put]
        passepartout.perceive [normalize-signal]
        passepartout.loop [Runner]
        passepartout.store [inbox-add inbox-done inbox-pending inbox-count inbox-prune kv-put])

(setv log (logging.getLogger "passepartout.gateway"))

(setv _gateways {}
      _name-re (re.compile r"[a-z][a-z0-9_]*\Z"))

(defn register-gateway [name factory [headless True]]
  "Make the gateway NAME available: (FACTORY section env) builds it."
  (setv (get _gateways name) {"factory" factory "headless" headless})
  factory)

(defn gateway-factories [[headless False]]
  "NAME → factory of every registered gateway (with HEADLESS, those a daemon can run)."
  (dfor [n g] (.items _gateways)
        :if (or (not headless) (get g "headless"))
        n (get g "factory")))

(defn _import-gateway [name]
  "Import passepartout.gateways.NAME if there is such a module."
  (setv module f"passepartout.gateways.{name}")
  (try
    (importlib.import-module module)
    (except [e ModuleNotFoundError]
      (when (!= e.name module) (raise)))))

(defn configured-gateways [env]
  "The gateways the config of ENV enables and a daemon can run, built."
  (setv sections (.get (get env "config") "gateways" {})
        out [])
  (when (not (isinstance sections dict))
    (raise (ConfigError "gateways should be a table of gateway tables")))
  (for [[name section] (.items sections)]
    (when (not (isinstance section dict))
      (raise (ConfigError f"gateways.{name} should be a table")))
    (when (not (.get section "enabled" True))
      (continue))
    (when (_name-re.match name)
      (_import-gateway name))
    (setv g (.get _gateways name))
    (cond
      (is g None) (.info log "gateways.%s: no such gateway here; left out" name)
      (not (get g "headless")) (.info log "gateways.%s needs a terminal; the daemon leaves it out" name)
      True (.append out ((get g "factory") section env))))
  out)

(defn _settle [done result error]
  (when (not (.done done))
    (if (is error None)
        (.set-result done result)
        (.set-exception done error))))

(defclass GroupWriter []
  "A thread that runs (WRITE store #* args) for each call, in one store transaction
   for all the calls waiting when it comes round."

  (defn __init__ [self store]
    (setv self.store store
          self.queue (queue.SimpleQueue)
          self.thread (threading.Thread :target self._run :name "passepartout-inbox" :daemon True))
    (.start self.thread))

  (defn :async call [self write #* args]
    "The value of (WRITE store #* args), written in the next commit."
    (setv loop (asyncio.get-running-loop)
          done (.create-future loop))
    (.put self.queue #(write args loop done))
    (await done))

  (defn close [self]
    "Write what is queued, then end the thread."
    (.put self.queue None)
    (.join self.thread 30))

  (defn _run [self]
    (setv going True)
    (while going
      (setv batch [(.get self.queue)])
      (while (not (.empty self.queue))
        (.append batch (.get self.queue)))
      (setv going (not (in None batch))
            batch (lfor item batch :if (is-not item None) item))
      (try
        (with [_ (.transaction self.store)]
          (setv outcomes (lfor [write args _ _] batch #((write self.store #* args) None))))
        (except [Exception]
          (setv outcomes (lfor [write args _ _] batch (self._alone write args)))))
      (for [[[_ _ loop done] [result error]] (zip batch outcomes)]
        (try
          (.call-soon-threadsafe loop _settle done result error)
          (except [RuntimeError])))))

  (defn _alone [self write args]
    (try
      (with [_ (.transaction self.store)]
        #((write self.store #* args) None))
      (except [e Exception] #(None e)))))

(defn _gateway-of [source]
  (setv g (proto-get source ':gateway))
  (if (isinstance g hy.models.Keyword) g.name (str g)))

(defn _kind-of [reply]
  (setv k (proto-get (proto-get reply ':payload []) ':kind))
  (if (isinstance k hy.models.Keyword) k.name (str k)))

(defclass Hub []
  "Between the gateways and the runner: what comes in is persisted before it
   is queued, and each reply goes to the gateway of its chat."

  (defn __init__ [self env gateways [concurrency 4]]
    (setv self.env env
          self.store (get env "store")
          self.gateways (dfor g gateways (get g "name") g)
          self.runner (Runner env self.deliver :concurrency concurrency)
          self.writer (GroupWriter self.store)
          self.accepting True
          self.outstanding {}
          self.watchers {}))

  (defn :async receive [self gateway key signal]
    "Persist SIGNAL, received by GATEWAY under KEY, then queue it. False when
     KEY was received before (a redelivery): it is neither stored nor queued again."
    (setv id (await (.call self.writer inbox-add gateway key signal)))
    (when (is id None)
      (return False))
    (when self.accepting
      (await (self._submit id signal)))
    True)

  (defn :async claim [self gateway key [note "answered by the gateway"]]
    "Record KEY of GATEWAY as received and done; False when it was received before."
    (is-not (await (.call self.writer inbox-add gateway key [:note note] True)) None))

  (defn :async resume [self]
    "Queue again what was received and not answered before the last stop; how many."
    (setv rows (await (asyncio.to-thread inbox-pending self.store)))
    (for [row rows]
      (await (self._submit (proto-get row ':id) (proto-get row ':signal))))
    (len rows))

  (defn :async _submit [self id signal]
    (try
      (setv signal (normalize-signal signal)
            signal (proto-put signal ':source (proto-put (proto-get signal ':source) ':inbox id))
            session (await (.submit self.runner signal)))
      (except [e ProtoError]
        (.error log "inbox row %s holds a signal that cannot be handled (%s); it is set aside" id e)
        (await (.call self.writer inbox-done id))
        (return)))
    (.add (.setdefault self.outstanding session (set)) id)
    (when (not (in session self.watchers))
      (setv (get self.watchers session) (asyncio.create-task (self._watch session)))))

  (defn _quiet [self session]
    (and (.empty (get self.runner.queues session))
         (not (in session self.runner.busy))))

  (defn :async _watch [self session]
    "Mark the rows of SESSION done whenever it has nothing left to do."
    (try
      (while (.get self.outstanding session)
        (await (.idle self.runner session))
        (when (self._quiet session)
          (setv ids (.pop self.outstanding session))
          (for [id ids]
            (await (.call self.writer inbox-done id)))))
      (finally
        (.pop self.watchers session None))))

  (defn :async deliver [self reply]
    "Send REPLY through the gateway of its source, then mark what it answered done."
    (setv source (proto-get reply ':source [])
          session (proto-get reply ':session)
          name (_gateway-of source)
          gateway (.get self.gateways name))
    (if gateway
        (try
          (await ((get gateway "deliver") reply))
          (except [asyncio.CancelledError] (raise))
          (except [Exception]
            (.exception log "gateway %s could not deliver a reply to %s" name session)))
        (.warning log "a reply to %s has no running gateway to go to (%s): %s"
                  session name (cut (str (proto-get (proto-get reply ':payload []) ':text "")) 200)))
    (setv id (proto-get source ':inbox))
    (when (and (is-not id None) (!= (_kind-of reply) "trace"))
      (await (.call self.writer inbox-done id))
      (.discard (.get self.outstanding session (set)) id)))

  (defn sessions [self]
    "The sessions the runner has seen."
    (list self.runner.queues))

  (defn :async drain [self [timeout None]]
    "Take no more input and wait, at most TIMEOUT seconds, until every session
     has finished; True when they all did."
    (setv self.accepting False)
    (defn :async all-done []
      (while (not (all (gfor s (list self.runner.queues) (self._quiet s))))
        (for [s (list self.runner.queues)]
          (await (.idle self.runner s))))
      ;; the watchers mark the last rows done once their sessions are quiet
      (await (asyncio.gather #* (list (.values self.watchers)))))
    (try
      (await (asyncio.wait-for (all-done) timeout))
      True
      (except [asyncio.TimeoutError] False)))

  (defn :async close [self]
    (for [t (list (.values self.watchers))] (.cancel t))
    (await (asyncio.gather #* (.values self.watchers) :return-exceptions True))
    (await (.close self.runner))
    (await (asyncio.to-thread self.writer.close))))

(defclass DaemonRunning [Exception]
  "Another daemon holds the pid file.")

(defn _read-pid [fd]
  (setv text (.decode (os.pread fd 200 0) "utf-8" "replace"))
  (try (int (get (.split text) 0)) (except [#(ValueError IndexError)] None)))

(defn _same-file [fd path]
  (try
    (= (. (os.fstat fd) st-ino) (. (os.stat path) st-ino))
    (except [FileNotFoundError] False)))

(defn claim-pid-file [path data-dir]
  "Hold the pid file PATH for this process; its descriptor. DaemonRunning
   when a live daemon holds it."
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
    (.warning log "took over the pid file %s of pid %s, which is no longer running" path old))
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

(setv DAEMON-DEFAULTS {"heartbeat" 60
                       "shutdown_grace" 10
                       "inbox_keep" 172800
                       "log_max_bytes" (* 5 1024 1024)
                       "log_backups" 5})

(defn daemon-settings [config]
  "The [daemon] settings of CONFIG with defaults, and model_concurrency; a
   ConfigError for a value that is not a positive number."
  (setv table (.get config "daemon" {}))
  (when (not (isinstance table dict))
    (raise (ConfigError "daemon should be a table")))
  (setv out (| DAEMON-DEFAULTS table
               {"model_concurrency" (.get (.get config "limits" {}) "model_concurrency" 4)}))
  (for [k (+ (list DAEMON-DEFAULTS) ["model_concurrency"])]
    (setv v (get out k))
    (when (or (isinstance v bool) (not (isinstance v #(int float))) (< v 0)
              (and (= v 0) (!= k "log_backups")))
      (raise (ConfigError f"daemon.{k} should be a positive number, not {v !r}"))))
  (when (not (isinstance (get out "model_concurrency") int))
    (raise (ConfigError "limits.model_concurrency should be a whole number")))
  out)

(defn setup-logging [config [settings None]]
  "Log to DATA_DIR/logs/daemon.log (rotated) and warnings to stderr; the handlers added."
  (setv settings (or settings (daemon-settings config))
        folder (/ (Path (get config "data_dir")) "logs"))
  (.mkdir folder :parents True :exist-ok True :mode 0o700)
  (setv file (logging.handlers.RotatingFileHandler (/ folder "daemon.log")
                                                   :maxBytes (int (get settings "log_max_bytes"))
                                                   :backupCount (int (get settings "log_backups"))
                                                   :encoding "utf-8")
        err (logging.StreamHandler sys.stderr)
        root (logging.getLogger))
  (.setFormatter file (logging.Formatter "%(asctime)s %(levelname)s %(name)s: %(message)s"))
  (.setFormatter err (logging.Formatter "passepartout daemon: %(levelname)s %(name)s: %(message)s"))
  (.setLevel err logging.WARNING)
  (.setLevel root logging.INFO)
  (.setLevel (logging.getLogger "httpx") logging.WARNING)
  (.setLevel (logging.getLogger "httpcore") logging.WARNING)
  (.setLevel (logging.getLogger "LiteLLM") logging.WARNING)
  (.addHandler root file)
  (.addHandler root err)
  [file err])

(setv HEARTBEAT-KEY "daemon:heartbeat")

(defn :async _heartbeat [env hub settings started]
  (setv store (get env "store"))
  (while True
    (try
      (setv now (time.time)
            pending (await (asyncio.to-thread inbox-count store))
            sessions (len (.sessions hub)))
      (await (asyncio.to-thread kv-put store HEARTBEAT-KEY
                                [:time now :pid (os.getpid) :started started
                                 :sessions sessions :pending pending]))
      (await (asyncio.to-thread inbox-prune store (- now (get settings "inbox_keep"))))
      (.info log "alive: pid %s, %s sessions, %s signals pending" (os.getpid) sessions pending)
      (except [asyncio.CancelledError] (raise))
      (except [Exception]
        (.exception log "the heartbeat failed")))
    (await (asyncio.sleep (get settings "heartbeat")))))

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

(defn _report-end [name]
  (fn [task]
    (cond
      (.cancelled task) None
      (.exception task)
      (.error log "gateway %s failed and stopped: %r" name (.exception task)
              :exc-info (.exception task))
      True (.info log "gateway %s stopped" name))))

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

(defn :async serve [env [gateways None] [services None] [stop None]]
  "Run the daemon on ENV until SIGTERM, SIGINT or the asyncio.Event STOP; 0.
   GATEWAYS default to the configured ones; SERVICES are (fn :async [env runner])."
  (setv config (get env "config")
        settings (daemon-settings config)
        gateways (if (is gateways None) (configured-gateways env) (list gateways))
        stop (or stop (asyncio.Event))
        hurry (asyncio.Event)
        loop (asyncio.get-running-loop)
        handled []
        held [])
  (try
    (for [path (pid-files config)]
      (.append held #(path (claim-pid-file path (get config "data_dir")))))
    (setv hub (Hub env gateways :concurrency (get settings "model_concurrency"))
          handled (_install-signals loop stop hurry)
          started (time.time)
          resumed (await (.resume hub))
          tasks [])
    (.info log "daemon started: pid %s, data dir %s, gateways: %s; %s unfinished signals queued again"
           (os.getpid) (get config "data_dir")
           (or (.join ", " (gfor g gateways (get g "name"))) "none") resumed)
    (for [g gateways]
      (setv t (asyncio.create-task ((get g "run") hub)))
      (.add-done-callback t (_report-end (get g "name")))
      (.append tasks t))
    (setv others (lfor s (or services []) (asyncio.create-task (s env hub.runner)))
          beat (asyncio.create-task (_heartbeat env hub settings started)))
    (await (.wait stop))
    (.info log "stopping: no more input")
    (for [t others] (.cancel t))
    (await (_stop-all gateways tasks (get settings "shutdown_grace")))
    (setv hurried (asyncio.create-task (.wait hurry))
          drained (asyncio.create-task (.drain hub (get settings "shutdown_grace"))))
    (await (asyncio.wait [hurried drained] :return-when asyncio.FIRST-COMPLETED))
    (.cancel hurried)
    (setv left (await (asyncio.to-thread inbox-count (get env "store"))))
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
      (for [[path fd] held]
        (release-pid-file path fd)))))

(defn :async _watch-skills [env runner]
  (await (hy.I.passepartout/repl.watch-skills env)))

(defn daemon-services []
  "The services every daemon runs: the REPL socket, hot reload of skill files,
   and the approvals (expiry, answers given on the host, stored notices)."
  (import passepartout.repl [serve-repl]
          passepartout.hitl [approvals-service])
  [serve-repl _watch-skills approvals-service])

(defn start-banner [env]
  "What a person starting the daemon is told: what runs, where to reach it, where it logs."
  (import passepartout.repl [socket-path]
          passepartout.sandbox [sandbox-summary])
  (setv config (get env "config")
        names (lfor [name section] (.items (.get config "gateways" {}))
                    :if (and (isinstance section dict) (.get section "enabled" True))
                    name))
  (.join "\n" [f"passepartout daemon: started (pid {(os.getpid)})"
               f"  gateways: {(if names (.join ", " names) "none configured (see README, Configuration)")}"
               f"  REPL socket: {(socket-path config)}"
               f"  log: {(/ (Path (get config "data_dir")) "logs" "daemon.log")}"
               f"  protection: {(sandbox-summary (get env "sandbox"))}"]))

(defn cmd-daemon [args]
  "Run the headless daemon; the exit status."
  (import passepartout.daemon [boot shutdown skill-failures]
          passepartout.sandbox [sandbox-summary])
  (setv env (boot :config-path args.config :workspace (getattr args "workspace" None))
        handlers (setup-logging (get env "config")))
  (for [line (skill-failures env)]
    (.error log "%s" line))
  ;; Said at every start, and on stderr when shell actions run with less than the sandbox.
  (.log log (if (= (proto-get (get env "sandbox") ':kind) "bubblewrap") logging.INFO logging.WARNING)
        "protection: %s" (sandbox-summary (get env "sandbox")))
  (print (start-banner env) :flush True)
  (try
    (asyncio.run (serve env :services (daemon-services)))
    (except [e DaemonRunning]
      (print f"passepartout daemon: {e}" :file sys.stderr)
      1)
    (finally
      (shutdown env)
      (for [h handlers]
        (.removeHandler (logging.getLogger) h)
        (.close h)))))
