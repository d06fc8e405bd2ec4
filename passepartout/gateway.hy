;; * Why

(import asyncio importlib logging queue re threading uuid
        passepartout.config [ConfigError]
        passepartout.proto [ProtoError kw proto-get proto-put is-plist]
        passepartout.perceive [normalize-signal session-name]
        passepartout.loop [Runner]
        passepartout.task [ends-task]
        passepartout.store [inbox-add inbox-done inbox-pending])

(setv log (logging.getLogger "passepartout.gateway"))

;; * The registry

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

;; * The hub

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
  (cond (is g None) None
        (isinstance g hy.models.Keyword) g.name
        True (str g)))

(defclass Hub []
  "Between the gateways and the runner: what comes in is persisted before it
   is queued, and each reply goes to the gateway of its chat."

  (defn __init__ [self env gateways [concurrency 4] [fallback None]]
    "FALLBACK, if given, delivers the replies whose gateway is not running
     (the terminal chat shows them all)."
    (setv self.env env
          self.store (get env "store")
          self.gateways (dfor g gateways (get g "name") g)
          self.fallback fallback
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

  (defn :async submit [self signal [key None]]
    "Persist SIGNAL under KEY (a fresh one when None) for the gateway of its
     source, then queue it; its session. The way in for what has no service
     to redeliver: the terminal, the REPL, the approvals service."
    (setv name (or (_gateway-of (or (proto-get signal ':source) [])) "repl"))
    (await (.receive self name (or key (+ "local-" (. (uuid.uuid4) hex))) signal))
    (when (is-plist signal)
      (setv source (proto-get signal ':source))
      (or (proto-get signal ':session) (when (is-plist source) (session-name source)))))

  (defn :async emit [self signal [key None]]
    "Deliver SIGNAL if it is a reply, else submit it under KEY (a service's output)."
    (if (= (proto-get signal ':type) (kw "reply"))
        (await (self.deliver signal))
        (await (self.submit signal key))))

  (defn :async idle [self session]
    (await (.idle self.runner session)))

  (defn :async stop [self session]
    (await (.stop self.runner session)))

  (defn [property] busy [self] self.runner.busy)

  (defn [property] queues [self] self.runner.queues)

  (defn :async claim [self gateway key [note "answered by the gateway"]]
    "Record KEY of GATEWAY as received and done; False when it was received before."
    (is-not (await (.call self.writer inbox-add gateway key [:note note] True)) None))

  (defn :async resume [self [gateway None]]
    "Queue again what was received and not answered before the last stop (of
     GATEWAY only, if given); how many."
    (setv rows (await (asyncio.to-thread inbox-pending self.store gateway)))
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
          gateway (.get self.gateways name (when self.fallback {"deliver" self.fallback})))
    (if gateway
        (try
          (await ((get gateway "deliver") reply))
          (except [asyncio.CancelledError] (raise))
          (except [Exception]
            (.exception log "gateway %s could not deliver a reply to %s" name session)))
        (.warning log "a reply to %s has no running gateway to go to (%s): %s"
                  session name (cut (str (proto-get (proto-get reply ':payload []) ':text "")) 200)))
    (setv id (proto-get source ':inbox))
    (when (and (is-not id None) (ends-task reply))
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
