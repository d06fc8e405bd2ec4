;; * Why

"One asyncio event loop owns every task of the daemon: each step of a
conversation is a coroutine on it, model calls are awaited on it, shell actions
are subprocesses it waits for. The runner is what feeds step (loop.org):
each session has its own queue, so the messages of one chat are handled in order
while different chats go on at the same time, and a few slots bound how many
steps talk to a model at once."

(import asyncio contextlib logging time
        passepartout.proto [proto-get]
        passepartout.backoff [growing-pause]
        passepartout.perceive [immediate as-signal reply-signal sensor-of]
        passepartout.task [ending]
        passepartout.store [store-unwell])

(setv log (logging.getLogger "passepartout.runner"))

;; * Stopping a session's task

(defclass Stops []
  "The stop registry of one daemon: the stop count of each session, what runs
   for it now (records of what and how to kill it), and who listens for stops."
  (defn __init__ [self]
    (setv self.marks {}
          self.doing {}
          self.listeners [])))

(defn stop-mark [stops session]
  "How many times SESSION's task has been stopped."
  (.get stops.marks session 0))

(defn stopped-since [stops session mark]
  "True when SESSION was stopped after its count was MARK (None: never)."
  (and (is-not mark None) (!= (stop-mark stops session) mark)))

(defn [contextlib.contextmanager] doing [stops session what [kill None] [mark None]]
  "While the block runs, SESSION is doing WHAT (\"the command `ls`\"); a stop
   calls KILL. Yields a dict whose \"stopped\" turns true when a stop came, or
   is true from the start if SESSION was stopped since MARK. WHAT None runs
   unnamed: the person is not told of it."
  (setv record {"what" what "kill" kill "stopped" (stopped-since stops session mark)})
  (.append (.setdefault stops.doing session []) record)
  (try
    (yield record)
    (finally
      (setv left (lfor r (.get stops.doing session []) :if (is-not r record) r))
      (if left
          (setv (get stops.doing session) left)
          (.pop stops.doing session None)))))

(defn stop-session [stops session]
  "Stop SESSION's task: count the stop, kill what runs for it, tell the
   listeners. What was interrupted: a list of (what killed) pairs, oldest first."
  (setv (get stops.marks session) (+ (stop-mark stops session) 1)
        records (lfor r (.get stops.doing session []) :if (not (get r "stopped")) r))
  (for [r records] (setv (get r "stopped") True))
  (for [r records :if (get r "kill")]
    (try ((get r "kill"))
         (except [Exception] None)))
  (for [f (list stops.listeners)]
    (try (f session)
         (except [Exception] None)))
  (lfor r records :if (get r "what") #((get r "what") (bool (get r "kill")))))

(defn stop-text [interrupted]
  "The sentence that tells the person what the (what killed) pairs INTERRUPTED were.
   (stop-text []) ⇒ \"Stopped: nothing was running.\""
  (setv killed (lfor [w k] interrupted :if k w)
        ended (lfor [w k] interrupted :if (not k) w)
        parts (+ (lfor w killed f"{w} was killed")
                 (lfor w ended f"{w} was stopped")))
  (if parts
      (+ "Stopped: " (.join "; " parts) ". Nothing more of that task will run.")
      "Stopped: nothing was running."))

(defn stop-task [stops session]
  "Stop SESSION's task now and say what was interrupted."
  (stop-text (stop-session stops session)))

;; * The runner

(defclass Runner []
  "Feeds signals to step on the event loop: in order within a session, sessions
   concurrently. SERVICES is the daemon's; DELIVER sends a reply."

  (defn __init__ [self services deliver [concurrency 4]]
    (setv self.services services
          self.stops services.stops
          self.deliver deliver
          self.queues {}
          self.arrivals 0
          self.workers {}
          self.running {}
          self.busy (set)
          self.sources {}
          self.store-failures {}
          self.loop None
          self.limit (asyncio.Semaphore concurrency))
    (.append self.stops.listeners self._heard-stop))

  (defn notify [self reply]
    "Deliver REPLY soon, without waiting for it to go out (a step's progress)."
    (setv loop self.loop)
    (when (and loop (not (.is-closed loop)))
      (.call-soon-threadsafe loop (fn [] (.create-task loop (self._emit reply))))))

  (defn _heard-stop [self session]
    "A stop of SESSION: cancel the step it is running, if any."
    (setv job (.get self.running session))
    (when (and job (not (.done job)))
      (.cancel job)))

  (defn _queue [self session]
    "The queue of SESSION, with its worker started on first use."
    (when (is self.loop None)
      (setv self.loop (asyncio.get-running-loop)))
    (when (not (in session self.queues))
      (setv (get self.queues session) (asyncio.PriorityQueue)
            (get self.workers session) (asyncio.create-task (self._work session))))
    (get self.queues session))

  (defn :async submit [self signal]
    "Queue SIGNAL on its session, or step it now when it must not wait (a stop)."
    (setv signal (as-signal signal)
          session (proto-get signal ':session))
    (self._queue session)
    (setv (get self.sources session) (proto-get signal ':source))
    (if (immediate signal self.services.skills)
        (await (self._now signal))
        (self._put session signal))
    session)

  (defn :async _now [self signal]
    "Step SIGNAL outside its session's queue; what it emitted."
    (setv emitted (await (hy.I.passepartout/loop.step signal self.services :notify self.notify)))
    (for [e emitted] (await (self._emit e)))
    emitted)

  (defn :async stop [self session]
    "Stop SESSION's task as a /stop said there would; what the person was told."
    (self._queue session)
    (setv signal [:type :event
                  :source (.get self.sources session [:gateway :repl])
                  :session session
                  :payload [:sensor :user-input :text "/stop"]])
    (if (immediate signal self.services.skills)
        (setv emitted (await (self._now signal)))
        ;; the /stop skill is disabled: stop all the same
        (do (setv emitted [(reply-signal signal (stop-task self.stops session) "notice")])
            (await (self._emit (get emitted 0)))))
    (.join "\n" (lfor e emitted :if (= (proto-get e ':type) ':reply)
                     (str (proto-get (proto-get e ':payload) ':text)))))

  (defn :async idle [self session]
    "Wait until SESSION has nothing left to do."
    (when (in session self.queues)
      (await (.join (get self.queues session)))))

  (defn :async emit [self signal [key None]]
    "Deliver SIGNAL if it is a reply, else queue it on its session (a service's
     output). KEY is for the hub's inbox; the runner keeps nothing."
    (await (self._emit signal)))

  (defn :async _emit [self signal [mark None]]
    (setv session (proto-get signal ':session))
    (if (= (proto-get signal ':type) ':reply)
        (do (setv r (self.deliver signal))
            (when (asyncio.iscoroutine r) (await r)))
        (self._put session signal mark)))

  (defn _put [self session signal [mark None]]
    "Queue SIGNAL: a task's own next step first, then by arrival. MARK is the
     stop count of the step that emitted it."
    (+= self.arrivals 1)
    (setv waiting None)
    (when (= (sensor-of signal) "tool-result")
      (setv held (doing self.stops session "the task's next step"
                        :mark (if (is mark None) (stop-mark self.stops session) mark))
            waiting #(held (.__enter__ held))))
    (.put-nowait (self._queue session)
                 #((if waiting 0 1) self.arrivals signal waiting)))

  (defn :async _step [self signal mark]
    "Step SIGNAL: perceive at once, and reason only once it holds a slot."
    (import passepartout.loop [perceive-step reason-step])
    (setv [done signal ctx] (await (perceive-step signal self.services mark self.notify)))
    (when (is-not done None)
      (return done))
    (with [:async self.limit]
      (await (reason-step signal self.services ctx))))

  (defn :async _work [self session]
    (setv queue (get self.queues session))
    (while True
      (setv [_ _ signal waiting] (await (.get queue)))
      (try
        ;; the count is read while a queued step is still registered: a stop
        ;; from then on either marks it or moves the count
        (setv mark (stop-mark self.stops session))
        (when waiting
          (setv [held record] waiting)
          (.__exit__ held None None None)
          (when (get record "stopped") (continue)))
        (.add self.busy session)
        (setv job (asyncio.ensure-future (self._step signal mark))
              (get self.running session) job)
        (try
          (setv emitted (await job))
          (except [asyncio.CancelledError]
            ;; the step was stopped, or the worker itself is being closed
            ;; (which cancels the step it awaits too, even one already stopped)
            (when (not (.cancelled job)) (raise))
            (when (or (not (stopped-since self.stops session mark))
                      (.cancelling (asyncio.current-task)))
              (raise))
            (setv emitted [])))
        (for [e emitted]
          (when (stopped-since self.stops session mark) (break))
          (await (self._emit e mark)))
        (.pop self.store-failures session None)
        (except [asyncio.CancelledError] (raise))
        (except [e Exception]
          (if (store-unwell e)
              (await (self._again-later session signal mark e))
              (await (self._failed session signal e))))
        (finally
          (.pop self.running session None)
          (.discard self.busy session)
          (.task-done queue)))))

  (defn :async _failed [self session signal e]
    "Tell SESSION its step failed with E, which ends the task."
    (.error log "step failed on session %s" session :exc-info e)
    (try
      (await (self._emit (ending (reply-signal signal f"Internal error: {(. (type e) __name__)}: {e}"
                                               "error"))))
      (except [asyncio.CancelledError] (raise))
      (except [Exception]
        (.exception log "the error reply to session %s could not be sent either" session))))

  (defn :async _again-later [self session signal mark e]
    "Queue SIGNAL again, first of SESSION's, after a pause: the store could not
     take what its step wrote (E). Not if the task was stopped meanwhile."
    (setv n (+ (.get self.store-failures session 0) 1)
          (get self.store-failures session) n
          pause (growing-pause n 30))
    (.warning log "the store could not write a step of %s (%s); it is tried again in %s s" session e pause)
    (await (asyncio.sleep pause))
    (if (stopped-since self.stops session mark)
        (.info log "a step of %s waiting for the store was stopped" session)
        (.put-nowait (get self.queues session) #(-1 (- n) signal None))))

  (defn :async close [self]
    "Stop every session worker and what its step awaits."
    (when (in self._heard-stop self.stops.listeners)
      (.remove self.stops.listeners self._heard-stop))
    (for [t (.values self.workers)] (.cancel t))
    (await (asyncio.gather #* (.values self.workers) :return-exceptions True))
    (for [queue (.values self.queues)]
      (while (not (.empty queue))
        (setv [_ _ _ waiting] (.get-nowait queue))
        (when waiting (.__exit__ (get waiting 0) None None None))))))
