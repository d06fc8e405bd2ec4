;; * The agent loop and its limits

(import asyncio hashlib logging threading time uuid
        collections [OrderedDict]
        concurrent.futures [ThreadPoolExecutor]
        passepartout.proto [literal-keywords :as hy proto-get proto-put proto-merge proto-print]
        passepartout.context [make-context context-limit context-data]
        passepartout.perceive [perceive immediate as-signal reply-signal sensor-of]
        passepartout.reason [reason refusal-text with-call]
        passepartout.validators [review-reply]
        passepartout.task [task-state after-action after-reply finish stop ending intent cut-off cut-off-text
                           fingerprint event-record write-records]
        passepartout.act [act add-stop-listener doing remove-stop-listener stop-mark stop-task
                          stopped-since]
        passepartout.budget [ZERO usage-add usage-tokens over-budget budget-limits day-usage day-record]
        passepartout.store [event-append events store-unwell])

(setv log (logging.getLogger "passepartout.loop"))

;; * Memory of a session: the task's causal cone

(setv HISTORY-TURNS 20
      HISTORY-KEEP 120
      HISTORY-KINDS ["input" "answer" "result"])

(defn _turn [e]
  "#(kind task message) for the event E."
  (setv data (proto-get e ':data [])
        kind (proto-get e ':kind)
        task (proto-get data ':task))
  #(kind (if (is task None) None (str task))
    (cond
      (= kind "input")
      {"role" "user" "content" (str (or (proto-get data ':text) ""))}
      (= kind "answer")
      {"role" "assistant" "content" (str (or (proto-get data ':text) ""))}
      True
      (with-call {"role" "user"
                  "content" (+ "Result of " (proto-print (proto-get data ':action []))
                               ":\n" (proto-print (proto-get data ':result [])))}
                 (proto-get data ':call)))))

(defn turns-since [store session since]
  "#(newest n turns): the id of the newest turn of SESSION after the id
   SINCE, how many turns came after SINCE, and the last HISTORY-KEEP of them."
  (setv new (events store :session session :kinds HISTORY-KINDS :since-id since
                    :limit HISTORY-KEEP :latest True)
        turns (lfor e new
                    :if (!= (proto-get (proto-get e ':data []) ':by) "fallback")
                    (_turn e)))
  (when (< (len new) HISTORY-KEEP)
    (return #((if new (proto-get (get new -1) ':id) since) (len new) turns)))
  (setv newest (proto-get (get new -1) ':id)
        kinds (.join ", " (* ["?"] (len HISTORY-KINDS))))
  #(newest
    (get (.query store f"SELECT count(*) FROM events WHERE session = ? AND id > ? AND id <= ? AND kind IN ({kinds})"
                 #(session since newest #* HISTORY-KINDS))
         0 0)
    turns))

(defn cone [turns task]
  "Of TURNS (#(kind task message), oldest first), those TASK depends on, as
   chat messages: its own, and the last HISTORY-TURNS said or answered."
  (setv kept []
        said 0)
  (for [[kind of message] (reversed turns)]
    (cond
      (and task (= of task)) (.append kept message)
      (and (!= kind "result") (< said HISTORY-TURNS)) (do (+= said 1)
                                                          (.append kept message))))
  (lfor m (reversed kept) (dict m)))

(defn task-history [store session task [histories None]]
  "#(messages size): the turns of SESSION that TASK depends on, as chat
   messages, oldest first, and how many turns the session has. HISTORIES, if
   given, remembers the session's turns between calls."
  (if (is histories None)
      (do (setv [_ size turns] (turns-since store session 0))
          #((cone turns task) size))
      (.cone histories store session task)))

(defclass SessionHistories []
  "The recent turns of the sessions served last, each with the id of the
   newest event it includes and how many turns its session has."

  (defn __init__ [self [sessions 1000]]
    (setv self.known (OrderedDict)
          self.sessions sessions
          self.lock (threading.Lock)))

  (defn cone [self store session task]
    (with [self.lock]
      (setv [last size turns] (.get self.known session #(0 0 []))))
    (setv [newest n new] (turns-since store session last)
          size (+ size n)
          turns (cut (+ turns new) (- HISTORY-KEEP) None))
    (with [self.lock]
      (setv (get self.known session) #(newest size turns))
      (.move-to-end self.known session)
      (while (> (len self.known) self.sessions)
        (.popitem self.known :last False)))
    #((cone turns task) size)))

;; * What a step writes

(defclass StepWrites []
  "The records and the spending of one step, written in one transaction by flush."

  (defn __init__ [self store now]
    (setv self.store store
          self.now now
          self.pending []
          self.spent ZERO
          self.day-before (day-usage store now)))

  (defn event [self kind session data]
    (.record self [(event-record kind session data)]))

  (defn record [self records]
    "Gather RECORDS (see =task.org=), each stamped with the time it was made."
    (setv ts (time.time))
    (for [r records]
      (.append self.pending (if (proto-get r ':event) (proto-put r ':ts ts) r))))

  (defn spend [self usage]
    (setv self.spent (usage-add self.spent usage)))

  (defn day [self]
    "The day's usage as this step sees it: what was recorded, plus its own."
    (usage-add self.day-before self.spent))

  (defn flush [self]
    "Write what was gathered, in one transaction."
    (setv pending self.pending
          spent self.spent
          self.pending []
          self.day-before (usage-add self.day-before spent)
          self.spent ZERO
          spending (or (usage-tokens spent) (proto-get spent ':cost)))
    (when (or pending spending)
      (with [_ (.transaction self.store)]
        (write-records self.store pending)
        (when spending
          (day-record self.store self.now spent))))))

;; * One step

(defn _not-approvable [signal action outcome ctx env]
  [(ending (reply-signal signal
                         (+ "This action needs a person's approval and approvals are not set up, so it was not run: "
                            (proto-print action) " — " (str (proto-get outcome ':reason)))
                         "approval"))])

(defn context-for [signal env]
  "The context of SIGNAL in ENV."
  (setv config (get env "config"))
  (make-context :workspace (.get config "workspace" ".")
                :session (proto-get signal ':session)
                :config config
                :store (get env "store")
                :secrets (.get env "secrets" [])
                :sandbox (.get env "sandbox")
                :cascade (.get env "cascade")
                :notify (_notifier signal env)
                :now ((.get env "clock" time.time))))

(defn _notifier [signal env]
  "A function telling the person of SIGNAL a TEXT at once, while the step goes
   on (a =:progress= reply, which ends nothing); None when nothing delivers."
  (setv deliver (.get env "notify"))
  (when deliver
    (fn [text [kind "progress"]]
      (deliver (reply-signal signal text kind)))))

(setv REFUSALS-TO-STOP 3)

(defn _refused-again [refused outcome]
  "REFUSED with the actions OUTCOME's attempts were refused for, and the action
   now refused REFUSALS-TO-STOP times, if any."
  (setv refused (list refused)
        repeated None)
  (for [attempt (proto-get outcome ':attempts [])]
    (when (= (proto-get attempt ':verdict) ':reject)
      (setv action (proto-get attempt ':action)
            mark (fingerprint action))
      (.append refused mark)
      (when (>= (.count refused mark) REFUSALS-TO-STOP)
        (setv repeated #(action (proto-get attempt ':gate) (proto-get attempt ':reason))))))
  #(refused repeated))

(defn _budget-check [env writes usage [spending ZERO]]
  "None while USAGE (the task's) and the day's usage, each with SPENDING (what
   the current model calls cost so far), are within budget, else why not."
  (over-budget (usage-add usage spending) (usage-add (.day writes) spending)
               (budget-limits (get env "config"))))

(defn _then [writes moved]
  "Gather the records of MOVED, a task's #(signals records); its signals."
  (setv [signals records] moved)
  (.record writes records)
  signals)

(defn _stopped [ctx]
  "True when the task of CTX's step was stopped since the step began."
  (stopped-since (proto-get ctx ':session) (proto-get ctx ':stop-mark)))

(defn step [signal env [mark None]]
  "The signals that SIGNAL leads to: replies for the person, the task's next
   step. MARK is the session's stop count when the step was handed out (the
   runner's); a stop after it ends the step at its next check."
  (setv [done signal ctx] (perceive-step signal env mark))
  (if (is-not done None)
      done
      (reason-step signal env ctx)))

(defn perceive-step [signal env [mark None]]
  "The first half of a step, which needs no model: #(EMITTED signal ctx), where
   EMITTED is what a handler answered (or [] for a signal ignored), or None
   when the signal goes on to reason-step with that context."
  (setv signal (as-signal signal)
        mark (if (is mark None) (stop-mark (proto-get signal ':session)) mark)
        ctx (proto-put (context-for signal env) ':stop-mark mark)
        seen (perceive signal ctx))
  #((cond (proto-get seen ':handled-by) (proto-get seen ':emit)
          (proto-get seen ':ignored) []
          True None)
    signal ctx))

(defn reason-step [signal env ctx]
  "The rest of a step: reason, then act or escalate, then continue."
  (setv writes (StepWrites (get env "store") (proto-get ctx ':now)))
  (try
    (_step signal env ctx writes)
    (finally (.flush writes))))

(defn _step [signal env ctx writes]
  (setv session (proto-get signal ':session)
        payload (proto-get signal ':payload)
        tool-result (= (sensor-of signal) "tool-result")
        state (task-state signal)
        [history size] (task-history (get env "store") session (proto-get state ':task) (.get env "histories"))
        figures (_cone-figures history size)
        interrupted (cut-off (get env "store") signal state))
  (when interrupted
    (return (_then writes (finish signal state (cut-off-text interrupted) "notice"))))
  ;; A tool result is already the last turn of the history; the signal presents it.
  (if tool-result
      (setv history (cut history 0 -1))
      (.event writes "input" session [:text (proto-get payload ':text) :task (proto-get state ':task)]))
  (setv spent-before (proto-get state ':usage)
        why (_budget-check env writes spent-before))
  (when why
    (return (_then writes (stop signal state (+ why ".")))))
  (when (_stopped ctx)
    (return []))
  (with [_ (doing session "the model call")]
    (setv outcome (reason signal ctx (get env "complete") history
                          :attempts (context-limit ctx "attempts" 3)
                          :guard (fn [spent] (_budget-check env writes spent-before spent)))))
  (setv v (. (proto-get outcome ':verdict) name)
        spent (or (proto-get outcome ':usage) ZERO))
  (.spend writes spent)
  (setv [refused repeated] (_refused-again (proto-get state ':refused) outcome)
        state (proto-merge state [:usage (usage-add spent-before spent) :refused refused]))
  ;; the context the gates saw goes with their decisions, so that replay judges alike
  (.event writes "outcome" session (proto-merge outcome [:task (proto-get state ':task)
                                                         :context (context-data ctx)
                                                         :cone figures]))
  ;; stopped while the model thought: its cost is counted, its answer dropped
  (when (_stopped ctx)
    (return []))
  (+ (_decisions signal outcome v) (_next signal env ctx writes outcome v state repeated)))

(defn _cone-figures [history size]
  "(:turns K :history N :compression C) for a model given HISTORY of a session of SIZE turns."
  (setv k (len history))
  [:turns k :history size :compression (if (> size 0) (round (- 1 (/ (min k size) size)) 3) 0.0)])

(defn _decisions [signal outcome v]
  "One line per proposal a gate refused on the way to OUTCOME (a refusal lists them itself)."
  (if (= v "refused")
      []
      (lfor a (proto-get outcome ':attempts [])
            :if (= (proto-get a ':verdict) ':reject)
            (reply-signal signal (+ "gate " (str (proto-get a ':gate)) " refused "
                                    (proto-print (or (proto-get a ':action) [])) ": "
                                    (str (proto-get a ':reason)))
                          "decision"))))

(defn _next [signal env ctx writes outcome v state repeated]
  "What follows OUTCOME: a reply, an approval request, or the action and the task going on."
  (cond
    (= v "refused")
    (_then writes (finish signal state (refusal-text outcome) "refusal"))
    repeated
    (_then writes (stop signal state
                        (+ f"the gates refused the same action {REFUSALS-TO-STOP} times in this task: "
                           (proto-print (get repeated 0)) " — " (str (get repeated 1)) ": "
                           (str (get repeated 2)))))
    (= v "stopped")
    (_then writes (stop signal state (+ (str (proto-get outcome ':reason)) ".")))
    (= v "failed")
    (_then writes (finish signal state (+ "No model could answer: " (str (proto-get outcome ':reason)))
                          "error"))
    (= v "escalate")
    (do (.flush writes)
        ((.get env "escalate" _not-approvable) signal (proto-get outcome ':action)
                                               (proto-merge outcome [:task-state state]) ctx env))
    True
    (_carry-out signal env ctx writes outcome state)))

(defn _carry-out [signal env ctx writes outcome state]
  "Act on an allowed OUTCOME; what follows is the task's to say."
  (setv action (proto-get outcome ':action)
        name (. (proto-get action ':action) name)
        why (_budget-check env writes (proto-get state ':usage)))
  (when why
    (return (_then writes (stop signal state (+ "before " (proto-print action) ": " why ".")))))
  (when (_stopped ctx)
    (return []))
  ;; a message only becomes the answer; anything else may touch the world, so
  ;; its intent is on disk before it runs
  (when (!= name "message")
    (.record writes [(intent signal action state)])
    (.flush writes))
  (setv result (act action ctx)
        moved (if (and (= name "message") (= (proto-get result ':status) ':ok))
                  ;; the answer is checked against what the task ran before it goes out
                  (after-reply signal action result state
                               (review-reply (proto-get result ':reply) ctx state))
                  (after-action signal action result state (context-limit ctx "step-budget" 8)
                                :extra (when (proto-get outcome ':note) [:note (proto-get outcome ':note)])
                                :call (proto-get outcome ':call))))
  (setv moved (_marked-fallback moved outcome))
  (when (_stopped ctx)
    ;; the result is history all the same; the task goes no further
    (.record writes (lfor r (get moved 1) :if (proto-get r ':event) r))
    (return []))
  (_then writes moved))

(defn _marked-fallback [moved outcome]
  "MOVED with its answer marked as the fallback's when the symbolic provider
   gave it: the history never shows a model those words as its own."
  (setv [signals records] moved)
  (if (!= (proto-get outcome ':provider) "symbolic")
      moved
      #(signals (lfor r records
                      (if (= (proto-get r ':event) "answer")
                          (proto-put r ':data (proto-put (proto-get r ':data) ':by "fallback"))
                          r)))))

;; * The runner

(defn growing-pause [n [most 60]]
  "Seconds to wait before try N+1 after N failures in a row: 1, 2, 4, … at most
   MOST. A step the store could not take, the hub's retries of a reply, the
   daemon's restarts of a gateway and a gateway's own retries all wait this way."
  (min most (** 2 (min 30 (max 0 (- n 1))))))

(defn _abandoned [job]
  "Log what an abandoned step raised, if anything."
  (when (and (not (.cancelled job)) (.exception job))
    (.warning log "a stopped task's step failed: %s" (.exception job))))

(defclass Runner []
  "Feeds signals to step: in order within a session, sessions concurrently."

  (defn __init__ [self env deliver [concurrency 4]]
    (setv self.env env
          self.deliver deliver
          self.queues {}
          self.arrivals 0
          self.workers {}
          self.busy (set)
          self.sources {}
          self.wakes {}
          self.store-failures {}
          self.loop None
          self.limit (asyncio.Semaphore concurrency)
          ;; enough threads that steps waiting for a slot, or abandoned in a
          ;; hung model call, never keep a command from running
          self.threads (ThreadPoolExecutor :max-workers (+ (* 4 concurrency) 16)
                                           :thread-name-prefix "passepartout-step"))
    (setv (get env "notify") self.notify)
    (add-stop-listener self._heard-stop))

  (defn notify [self reply]
    "Deliver REPLY from any thread, without waiting for it to go out."
    (setv loop self.loop)
    (when (and loop (not (.is-closed loop)))
      (asyncio.run-coroutine-threadsafe (self._emit reply) loop)))

  (defn _heard-stop [self session]
    "A stop of SESSION, heard on any thread: wake its worker."
    (setv wake (.get self.wakes session)
          loop self.loop)
    (when (and wake loop (not (.is-closed loop)))
      (.call-soon-threadsafe loop wake.set)))

  (defn _queue [self session]
    "The queue of SESSION, with its worker started on first use."
    (when (is self.loop None)
      (setv self.loop (asyncio.get-running-loop)))
    (when (not (in session self.queues))
      (setv (get self.queues session) (asyncio.PriorityQueue)
            (get self.wakes session) (asyncio.Event)
            (get self.workers session) (asyncio.create-task (self._work session))))
    (get self.queues session))

  (defn :async submit [self signal]
    "Queue SIGNAL on its session, or step it now when it must not wait (a stop)."
    (setv signal (as-signal signal)
          session (proto-get signal ':session))
    (self._queue session)
    (setv (get self.sources session) (proto-get signal ':source))
    (if (immediate signal)
        (await (self._now signal))
        (self._put session signal))
    session)

  (defn :async _now [self signal]
    "Step SIGNAL outside its session's queue; what it emitted."
    (setv emitted (await (self._thread step signal self.env)))
    (for [e emitted] (await (self._emit e)))
    emitted)

  (defn :async stop [self session]
    "Stop SESSION's task as a /stop said there would; what the person was told."
    (self._queue session)
    (setv signal [:type :event
                  :source (.get self.sources session [:gateway :repl])
                  :session session
                  :payload [:sensor :user-input :text "/stop"]])
    (if (immediate signal)
        (setv emitted (await (self._now signal)))
        ;; the /stop skill is disabled: stop all the same
        (do (setv emitted [(reply-signal signal (await (asyncio.to-thread stop-task session)) "notice")])
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
      (setv held (doing session "the task's next step"
                        :mark (if (is mark None) (stop-mark session) mark))
            waiting #(held (.__enter__ held))))
    (.put-nowait (self._queue session)
                 #((if waiting 0 1) self.arrivals signal waiting)))

  (defn :async _thread [self f #* args]
    (await (.run-in-executor (asyncio.get-running-loop) self.threads (fn [] (f #* args)))))

  (defn :async _step [self signal mark]
    "Step SIGNAL on worker threads: perceive at once, and reason only once it
     holds a slot. Cancelled (its task was stopped), it gives the slot back at
     once; the thread finishes on its own."
    (setv [done signal ctx] (await (self._thread perceive-step signal self.env mark)))
    (when (is-not done None)
      (return done))
    (with [:async self.limit]
      (setv thread (asyncio.ensure-future (self._thread reason-step signal self.env ctx)))
      (try
        (await (asyncio.shield thread))
        (except [asyncio.CancelledError]
          (.add-done-callback thread _abandoned)
          (raise)))))

  (defn :async _unless-stopped [self session mark job]
    "What JOB emitted, or nothing as soon as SESSION is stopped (JOB then
     finishes on its own thread and its output is dropped)."
    (setv wake (get self.wakes session))
    (while True
      (setv waiter (asyncio.ensure-future (.wait wake)))
      (try
        (await (asyncio.wait [job waiter] :return-when asyncio.FIRST-COMPLETED))
        (finally (.cancel waiter)))
      (cond
        (stopped-since session mark) (do (.cancel job)
                                         (return []))
        (.done job) (return (.result job))
        True (.clear wake))))

  (defn :async _work [self session]
    (setv queue (get self.queues session)
          wake (get self.wakes session))
    (while True
      (setv [_ _ signal waiting] (await (.get queue)))
      (try
        ;; the count is read while a queued step is still registered: a stop
        ;; from then on either marks it or moves the count
        (.clear wake)
        (setv mark (stop-mark session))
        (when waiting
          (setv [held record] waiting)
          (.__exit__ held None None None)
          (when (get record "stopped") (continue)))
        (.add self.busy session)
        (setv emitted (await (self._unless-stopped session mark
                                                   (asyncio.ensure-future (self._step signal mark)))))
        (for [e emitted]
          (when (stopped-since session mark) (break))
          (await (self._emit e mark)))
        (.pop self.store-failures session None)
        (except [asyncio.CancelledError] (raise))
        (except [e Exception]
          (if (store-unwell e)
              (await (self._again-later session signal mark e))
              (await (self._failed session signal e))))
        (finally
          (.discard self.busy session)
          (.task-done queue)))))

  (defn :async _failed [self session signal e]
    "Tell SESSION its step failed with E, which ends the task."
    (.exception log "step failed on session %s" session)
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
    (if (stopped-since session mark)
        (.info log "a step of %s waiting for the store was stopped" session)
        (.put-nowait (get self.queues session) #(-1 (- n) signal None))))

  (defn :async close [self]
    "Stop every session worker."
    (remove-stop-listener self._heard-stop)
    (for [t (.values self.workers)] (.cancel t))
    (await (asyncio.gather #* (.values self.workers) :return-exceptions True))
    (for [queue (.values self.queues)]
      (while (not (.empty queue))
        (setv [_ _ _ waiting] (.get-nowait queue))
        (when waiting (.__exit__ (get waiting 0) None None None))))
    (.shutdown self.threads :wait False)))
