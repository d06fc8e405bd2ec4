;; * Why

"The whole agent is one coroutine, step, from a signal to the signals it emits.
step perceives, reasons, acts and carries out what the task says comes next: a
reply to the person, or the result of an action going back to reason (the agent
loop). It names no gate, no actuator and no gateway; those arrive through the
registry and through the daemon's services (services.org), which it is given.
The runner (runner.org) feeds it, one session's signals in order."

;; * The agent loop and its limits

(import asyncio logging time
        passepartout.proto [proto-get proto-put proto-merge proto-print]
        passepartout.context [context-for context-limit context-data context-runtime]
        passepartout.perceive [perceive as-signal reply-signal sensor-of]
        passepartout.reason [reason refusal-text]
        passepartout.validators [review-reply]
        passepartout.history [step-history cone-figures]
        passepartout.memory [prepare-recall]
        passepartout.prompt [signal-text]
        passepartout.journal [context-record]
        passepartout.task [task-state after-outcome after-act is-answer refused-again refusal-lines
                           not-approvable finish stop intent cut-off cut-off-text event-record
                           write-records unrun-result unrun-record presenting is-next-step]
        passepartout.act [act]
        passepartout.runner [doing stop-mark stopped-since]
        passepartout.budget [ZERO usage-add usage-tokens over-budget budget-limits day-usage day-record])

(setv log (logging.getLogger "passepartout.loop"))

;; * What a step writes

(defclass StepWrites []
  "The records and the spending of one step, written in one transaction by flush."

  (defn __init__ [self services now]
    (setv self.writer services.writer
          self.now now
          self.pending []
          self.spent ZERO
          self.day-before (day-usage services.store now)))

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

  (defn :async flush [self]
    "Write what was gathered, in one transaction of the store's writer."
    (setv pending self.pending
          spent self.spent
          self.pending []
          self.day-before (usage-add self.day-before spent)
          self.spent ZERO
          spending (or (usage-tokens spent) (proto-get spent ':cost)))
    (when (or pending spending)
      (await (.call self.writer _write-step pending (when spending spent) self.now)))))

(defn _write-step [store pending spent now]
  (write-records store pending)
  (when spent
    (day-record store now spent)))

;; * One step

(defn _notifier [signal notify stops mark]
  "A function telling the person of SIGNAL a TEXT at once, while the step goes
   on (a =:progress= reply, which ends nothing); None when nothing delivers.
   Once the session was stopped since MARK it tells nothing: what a dropped
   model call still says on its way out is not news of a task that goes on."
  (when notify
    (fn [text [kind "progress"]]
      (when (not (stopped-since stops (proto-get signal ':session) mark))
        (notify (reply-signal signal text kind))))))

(defn _budget-check [services writes usage [spending ZERO]]
  "None while USAGE (the task's) and the day's usage, each with SPENDING (what
   the current model calls cost so far), are within budget, else why not."
  (over-budget (usage-add usage spending) (usage-add (.day writes) spending)
               (budget-limits services.config)))

(defn _then [writes moved]
  "Gather the records of MOVED, a task's #(signals records); its signals."
  (setv [signals records] moved)
  (.record writes records)
  signals)

(defn _stopped [ctx]
  "True when the task of CTX's step was stopped since the step began."
  (stopped-since (context-runtime ctx "stops")
                 (proto-get ctx ':session) (proto-get ctx ':stop-mark)))

(defn :async step [signal services [mark None] [notify None]]
  "The signals that SIGNAL leads to in the daemon SERVICES: replies for the
   person, the task's next step. MARK is the session's stop count when the step
   was handed out (the runner's); NOTIFY delivers a reply at once."
  (setv [done signal ctx] (await (perceive-step signal services mark notify)))
  (if (is-not done None)
      done
      (await (reason-step signal services ctx))))

(defn :async perceive-step [signal services [mark None] [notify None]]
  "The first half of a step, which needs no model: #(EMITTED signal ctx), where
   EMITTED is what a handler answered (or [] for a signal ignored), or None
   when the signal goes on to reason-step with that context."
  (setv signal (as-signal signal)
        session (proto-get signal ':session)
        mark (if (is mark None) (stop-mark services.stops session) mark)
        ctx (proto-put (context-for services session
                                    :notify (_notifier signal notify services.stops mark)
                                    :task (proto-get (proto-get signal ':payload) ':task))
                       ':stop-mark mark)
        seen (await (perceive signal ctx)))
  #((cond (proto-get seen ':handled-by) (proto-get seen ':emit)
          (proto-get seen ':ignored) []
          True None)
    signal ctx))

(defn :async reason-step [signal services ctx]
  "The rest of a step: reason, then act or ask, then go on."
  (setv writes (StepWrites services (proto-get ctx ':now)))
  (try
    (await (_step signal services ctx writes))
    (finally (await (.flush writes)))))

(defn :async _step [signal services ctx writes]
  (setv session (proto-get signal ':session)
        payload (proto-get signal ':payload)
        tool-result (= (sensor-of signal) "tool-result")
        state (task-state signal)
        [history size] (await (step-history services session (proto-get state ':task)))
        _ (await (prepare-recall services.store services.config (signal-text signal)))
        figures (cone-figures history size)
        interrupted (cut-off services.store signal state))
  (when interrupted
    (return (_then writes (finish signal state (cut-off-text interrupted) "notice" [:cut-off True]))))
  ;; A tool result is already the last turn of the history; the signal presents it.
  (if tool-result
      (setv history (cut history 0 -1))
      (.event writes "input" session [:text (proto-get payload ':text) :task (proto-get state ':task)]))
  (setv spent-before (proto-get state ':usage)
        why (_budget-check services writes spent-before))
  (when why
    (return (_then writes (stop signal state (+ why ".")))))
  (when (_stopped ctx)
    (return []))
  (with [_ (doing services.stops session "the model call")]
    (setv outcome (await (reason signal ctx services.complete history
                                 :attempts (context-limit ctx "attempts" 3)
                                 :guard (fn [spent] (_budget-check services writes spent-before spent))
                                 :judge services.gates.verify))))
  (setv spent (or (proto-get outcome ':usage) ZERO))
  (.spend writes spent)
  (setv [refused repeated] (refused-again (proto-get state ':refused) outcome)
        state (proto-merge state [:usage (usage-add spent-before spent) :refused refused]))
  ;; the context the gates saw goes with their decisions (named, kept once), so
  ;; that replay judges alike
  (setv [context-hash context] (context-record (context-data ctx)))
  (.record writes [context])
  (.event writes "outcome" session (proto-merge outcome [:task (proto-get state ':task)
                                                         :context-hash context-hash
                                                         :now (proto-get ctx ':now)
                                                         :cone figures]))
  ;; stopped while the model thought: its cost is counted, its answer dropped
  (when (_stopped ctx)
    (return []))
  (setv after (after-outcome signal outcome state repeated (refusal-text outcome))
        then (proto-get after ':then))
  (+ (refusal-lines signal outcome)
     (cond
       (= then ':ask)
       (do (await (.flush writes))
           (await (_ask signal services ctx outcome state)))
       (= then ':act)
       (await (_carry-out signal services ctx writes outcome state))
       True
       (_then writes (proto-get after ':moved)))))

(defn :async _ask [signal services ctx outcome state]
  "The signals asking a person about the escalated action of OUTCOME."
  (setv action (proto-get outcome ':action))
  (if (is services.escalate None)
      (not-approvable signal action outcome)
      (await (services.escalate signal action (proto-merge outcome [:task-state state]) ctx services))))

(defn :async _settled [job]
  "What JOB (an act under way when its step was stopped) comes back with: the
   stop killed what it ran, so it ends at once; one that does not within a few
   seconds is cancelled."
  (setv [done _] (await (asyncio.wait [job] :timeout 5)))
  (when (not done)
    (.cancel job)
    (try (await job) (except [BaseException])))
  (cond
    (not (.done job)) [:status :error :error "stopped by the person" :stopped True]
    (.cancelled job) [:status :error :error "stopped by the person" :stopped True]
    (is (.exception job) None) (.result job)
    True (do (.warning log "a stopped action failed: %r" (.exception job))
             [:status :error :error "stopped by the person" :stopped True])))

(defn :async _carry-out [signal services ctx writes outcome state]
  "Act on an allowed OUTCOME (each allowed call of its =:batch=, when it has
   one); what follows is the task's to say."
  (when (proto-get outcome ':batch)
    (return (await (_carry-out-batch signal services ctx writes outcome state))))
  (setv [done moved] (await (_act-one signal services ctx writes outcome state)))
  (if (is done None) (_then writes moved) done))

(defn :async _act-one [signal services ctx writes outcome state]
  "Run the action of the allowed OUTCOME: #(None moved) with what follows it
   (#(signals records)), or #(signals None) when the step ends here (a budget
   reached, a stop) with SIGNALS."
  (setv action (proto-get outcome ':action)
        name (. (proto-get action ':action) name)
        budget (context-limit ctx "step-budget" 8)
        why (_budget-check services writes (proto-get state ':usage)))
  (when why
    (return #((_then writes (stop signal state (+ "before " (proto-print action) ": " why "."))) None)))
  (when (_stopped ctx)
    (return #([] None)))
  ;; a message only becomes the answer; anything else may touch the world, so
  ;; its intent is on disk before it runs
  (when (!= name "message")
    (.record writes [(intent signal action state)])
    (await (.flush writes)))
  (setv job (asyncio.ensure-future (act action ctx)))
  (try
    (setv result (await (asyncio.shield job)))
    (except [asyncio.CancelledError]
      (when (not (_stopped ctx))
        ;; not a person's stop: the daemon is going down
        (.cancel job)
        (try (await job) (except [BaseException]))
        (raise))
      (setv result (await (_settled job)))
      (.record writes (lfor r (get (after-act signal action result state outcome budget) 1)
                            :if (proto-get r ':event) r))
      (raise)))
  (setv review (when (and (is-answer action result)
                          ;; the built-in provider's own words claim nothing
                          (!= (proto-get outcome ':provider) "symbolic"))
                 ;; the answer is checked against what the task ran before it goes out
                 (review-reply (proto-get result ':reply) ctx state))
        moved (after-act signal action result state outcome budget review))
  (when (_stopped ctx)
    ;; the result is history all the same; the task goes no further
    (.record writes (lfor r (get moved 1) :if (proto-get r ':event) r))
    (return #([] None)))
  #(None moved))

;; * Several calls in one step

(defn :async _carry-out-batch [signal services ctx writes outcome state]
  "Carry out the calls of OUTCOME's =:batch= in order; the signals that follow."
  (setv shown []
        going None
        last None)
  (defn answered [entry result]
    (nonlocal last)
    (.record writes [(unrun-record signal state entry result)])
    (setv last #((proto-get entry ':action) result (proto-get entry ':call))))
  (setv entries (proto-get outcome ':batch))
  (for [[i entry] (enumerate entries)]
    (setv verdict (proto-get entry ':verdict))
    (cond
      (= verdict ':reject)
      (answered entry (unrun-result entry))
      (or (= verdict ':escalate)
          (= (proto-get (proto-get entry ':action) ':action) ':message))
      (do (for [e (cut entries i None)]
            (answered e (unrun-result e entry)))
          (break))
      True
      (do (setv [done moved] (await (_act-one signal services ctx writes
                                              (proto-merge entry [:provider (proto-get outcome ':provider)])
                                              state)))
          (when (is-not done None)
            (return (+ shown done)))
          (setv [signals records] moved
                goes-on (lfor s signals :if (is-next-step s) s))
          (.record writes records)
          (when (not goes-on)
            ;; the task ended here, or waits for its workers
            (return (+ shown signals)))
          (setv going (get goes-on 0)
                last None
                state (task-state going))
          (+= shown (lfor s signals :if (not (is-next-step s)) s)))))
  (when (and going last)
    (setv [going kept] (presenting going #* last))
    (.record writes kept))
  (+ shown (if going [going] [])))
