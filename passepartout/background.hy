;; * Why

"A workflow written to the store does nothing by itself. Workflows is what
carries one out in a running daemon: it starts workers as sessions of their
own through the hub, hears each one's last reply, moves the workflow on when
a worker finishes or a time comes, stops it when the person stops its
spawner, and takes its spawner's task on when the last worker is done. What
a workflow may be is workflow.org's; the rows it keeps are workers.org's."

;; * The runtime

(import asyncio logging
        hy.models [Keyword]
        passepartout.proto [proto-get proto-put proto-merge proto-print]
        passepartout.runner [doing stop-session]
        passepartout.budget [usage-add ZERO]
        passepartout.records [events]
        passepartout.mailbox [inbox-pending outbox-sessions]
        passepartout.workflow [id-list id-name parse-time tools-for]
        passepartout.workers [new-id worker-session session-worker-id finished-state
                              workflow-add workflow-get workflows-of workflows-in workflow-workers
                              worker-get worker-start worker-end workflow-end ready-ids doomed
                              workflow-result conversation-of root-source session-view
                              shorten session-spent])

(setv log (logging.getLogger "passepartout.background"))

(setv FULL-TURNS 10)

(defn _conversation-text [store session]
  "The last FULL-TURNS things said in SESSION, for a worker of mode \"full\"."
  (setv turns (events store :session session :kinds ["input" "answer"] :latest True :limit FULL-TURNS))
  (if turns
      (+ "\n\nThe conversation that asked for this, most recent last:\n"
         (.join "\n" (gfor e turns (+ (if (= (proto-get e ':kind) "input") "- said: " "- answered: ")
                                      (shorten (proto-get (proto-get e ':data) ':text) 400)))))
      ""))

(defn _objective-text [workflow worker deps [conversation ""]]
  "What the worker's task is started with: its objective, DEPS (the workers
   it depends on) with their results, and CONVERSATION (for mode \"full\")."
  (+ f"You are a worker of the workflow {(proto-get workflow ':title) !r}, started in the background by "
     f"{(proto-get workflow ':session)}. Your objective:\n{(proto-get worker ':objective)}"
     conversation
     (if deps
         (+ "\n\nResults of the workers this one depends on:\n"
            (.join "\n" (gfor d deps (+ "- " (proto-get d ':step) " (" (proto-get d ':objective) "): "
                                        (str (or (proto-get d ':result) ""))))))
         "")
     "\n\nWork with your actions; when you are done, answer with (:action :message :text \"…\"): "
     "your answer is your result, and nobody else reads this conversation."))

(defn _end-state [reply]
  "The state a worker ends in after REPLY, the one that ends its task."
  (setv payload (proto-get reply ':payload))
  (cond (= (proto-get payload ':kind) ':answer) "done"
        (proto-get payload ':cut-off) "cut-off"
        True "failed"))

(defn _checks [store session]
  "The reply validators' verdicts on SESSION's answers, in order (\"deliver\", \"hold\", …)."
  (lfor e (events store :kind "validation" :session session :limit None)
        :setv v (proto-get (proto-get e ':data) ':verdict)
        (if (isinstance v Keyword) v.name (str v))))

(defclass Workflows []
  "The background work of one daemon: SERVICES are its parts, HUB the way
   signals come in and replies go out."

  (defn __init__ [self services hub]
    (setv self.services services
          self.hub hub
          self.locks {}
          self.timers {}
          self.holds {}
          self.tasks (set)
          ;; what ends a workflow that no spawner waits for, by the prefix of its task (=routines.org=)
          self.finishers {}
          services.workflows self
          (get hub.gateways "worker") {"name" "worker" "deliver" self.deliver}))

  (defn session-workers [self session]
    "The :workers plist of SESSION's context."
    (session-view self.services.store session))

  (defn conversation-of [self session]
    "The conversation that started what SESSION works for (see above)."
    (conversation-of self.services.store session))

  (defn _later [self coroutine]
    "Run COROUTINE on its own, kept until it ends."
    (setv task (asyncio.ensure-future coroutine))
    (.add self.tasks task)
    (.add-done-callback task self.tasks.discard)
    task)

  ;; ** Carrying out :spawn and :plan

  (defn :async _record [self ctx title workers]
    "Write a workflow of WORKERS for the session of CTX; the :waiting result.
     Its workers start once the step carrying it out is over."
    (setv session (proto-get ctx ':session)
          view (or (proto-get ctx ':workers) (self.session-workers session))
          id (new-id "f")
          workflow [:id id :title title :session session :task "" :depth (proto-get view ':depth 0)])
    (await (.call self.services.writer workflow-add workflow workers (proto-get ctx ':now)))
    (self._hold workflow (len workers))
    (setv job (.get self.hub.runner.running session))
    (self._later (self._after-step job id))
    [:status :waiting :workflow id
     :workers (lfor w workers [:id (proto-get w ':id) :step (proto-get w ':step)
                               :objective (proto-get w ':objective)])
     :note "the workers run in the background; their results come back to this task when they are done"])

  (defn :async _after-step [self job id]
    (when (and job (not (.done job)))
      (await (asyncio.wait [job])))
    (await (self.advance id)))

  (defn _tools [self value]
    (tools-for value (.get (.get self.services.config "workers" {}) "profiles" {})))

  (defn :async spawn [self action ctx]
    "Carry out the :spawn ACTION (allowed by the gates) in CTX."
    (setv id (new-id "w")
          before (when (proto-get action ':continue)
                   (worker-get self.services.store (proto-get action ':continue)))
          objective (proto-get action ':objective))
    (when before
      (setv objective (+ objective "\n\nThis goes on with the work of the worker " (proto-get before ':id)
                         " (" (proto-get before ':objective) "), which ended "
                         (proto-get before ':state) ": " (str (or (proto-get before ':result) "")))))
    (await (self._record ctx (cut (proto-get action ':objective) 80)
                         [[:id id :step id :objective objective
                           :depends-on (id-list (proto-get action ':depends-on))
                           :not-before (parse-time (proto-get action ':not-before))
                           :tools (if before
                                      (proto-get before ':tools)
                                      (self._tools (proto-get action ':tools)))
                           :mode (id-name (proto-get action ':mode))
                           :continuations (if before (+ (proto-get before ':continuations) 1) 0)]])))

  (defn :async plan [self action ctx]
    "Carry out the :plan ACTION (allowed by the gates) in CTX."
    (setv steps (proto-get action ':steps)
          ids (dfor s steps (id-name (proto-get s ':id)) (new-id "w")))
    (await (self._record ctx (proto-get action ':title)
                         (lfor s steps
                               :setv step (id-name (proto-get s ':id))
                               [:id (get ids step) :step step :objective (proto-get s ':objective)
                                :depends-on (lfor d (id-list (proto-get s ':depends-on)) (get ids d))
                                :not-before (parse-time (proto-get s ':not-before))
                                :tools (self._tools (proto-get s ':tools))
                                :mode (id-name (proto-get s ':mode))]))))

  (defn :async run-detached [self workflow count]
    "Hold WORKFLOW (of COUNT workers, written with its resume by another
     module in the commit that decided it) for /stop, and move it on."
    (self._hold workflow count)
    (await (self.advance (proto-get workflow ':id))))

  (defn _finisher [self workflow]
    "What ends WORKFLOW instead of taking a spawner on, or None."
    (.get self.finishers (get (.partition (str (or (proto-get workflow ':task) "")) ":") 0)))

  ;; ** Moving a workflow on

  (defn _lock [self id]
    (or (.get self.locks id) (.setdefault self.locks id (asyncio.Lock))))

  (defn :async advance [self id [finishing False]]
    "Move the workflow ID on: fail what can no longer run, start what may,
     and end it when nothing is left to do. FINISHING: a worker of it just
     finished (the person is told how far it is)."
    (with [:async (self._lock id)]
      (await (self._advance id finishing))))

  (defn :async _advance [self id [finishing False]]
    (setv store self.services.store
          writer self.services.writer
          workflow (workflow-get store id))
    (when (or (is workflow None) (!= (proto-get workflow ':state) "running"))
      (.pop self.locks id None)
      (return))
    (when (is (proto-get workflow ':resume) None)
      ;; the spawner's step ended without keeping its next step: nobody would take the results
      (self._release id)
      (await (.call writer _stop-rows id "the task that started it was stopped" (self.services.clock)))
      (return))
    (setv own (workflow-workers store id)
          mine (sfor w own (proto-get w ':id))
          outside (lfor d (sfor w own d (proto-get w ':depends-on) :if (not (in d mine)) d)
                        :setv row (worker-get store d) :if row row)
          everyone (+ own outside)
          now (self.services.clock))
    (for [[wid why] (doomed everyone) :if (in wid mine)]
      (await (.call writer worker-end wid "failed" f"not run: {why}" now)))
    (setv own (workflow-workers store id)
          everyone (+ own outside))
    (setv started (lfor wid (ready-ids everyone now) :if (in wid mine) wid))
    (for [wid started]
      (await (self._start workflow wid everyone)))
    (self._time-later id everyone now)
    (setv own (workflow-workers store id))
    (when (and (or started finishing) (not (self._finisher workflow)))
      (await (self._progress workflow own)))
    (when (all (gfor w own (finished-state (proto-get w ':state))))
      (await (self._conclude workflow own))))

  (defn :async _progress [self workflow workers]
    "Tell the conversation that started WORKFLOW how far it is: one reply of
     kind progress, keyed by the workflow, which a gateway that can edit a
     message shows in one message."
    (setv source (root-source self.services.store (proto-get workflow ':session)))
    (when (is source None) (return))
    (setv count (fn [state] (len (lfor w workers :if (= (proto-get w ':state) state) w)))
          parts (lfor state ["done" "running" "waiting" "failed" "stopped" "cut-off"]
                      :if (count state) f"{(count state)} {state}"))
    (await (.deliver self.hub
                     [:type :reply :session (conversation-of self.services.store (proto-get workflow ':session))
                      :source source
                      :payload [:kind :progress
                                :text (+ f"Workflow {(proto-get workflow ':title) !r}, {(len workers)} workers: "
                                         (.join ", " parts))
                                :progress-key f"workflow-{(proto-get workflow ':id)}"
                                :finished (not (or (count "running") (count "waiting")))]])))

  (defn _time-later [self id workers now]
    "A timer for the earliest :not-before still ahead among WORKERS' waiting ones."
    (setv ahead (lfor w workers
                      :if (and (= (proto-get w ':state) "waiting") (proto-get w ':not-before)
                               (> (proto-get w ':not-before) now))
                      (proto-get w ':not-before)))
    (setv old (.pop self.timers id None))
    (when old (.cancel old))
    (when ahead
      (setv (get self.timers id)
            (.call-later (asyncio.get-running-loop) (- (min ahead) now)
                         (fn [] (self._later (self.advance id)))))))

  (defn :async _start [self workflow wid workers]
    (setv by-id (dfor w workers (proto-get w ':id) w)
          worker (get by-id wid)
          deps (lfor d (proto-get worker ':depends-on) :if (in d by-id) (get by-id d)))
    (await (.receive-with self.hub "worker" wid
                          [:type :event :source [:gateway :worker :chat wid]
                           :payload [:sensor :worker-objective
                                     :text (_objective-text
                                             workflow worker deps
                                             (if (= (proto-get worker ':mode) "full")
                                                 (_conversation-text self.services.store
                                                                     (proto-get workflow ':session))
                                                 ""))]]
                          worker-start wid (self.services.clock))))

  (defn :async _conclude [self workflow workers]
    "End WORKFLOW, all of whose WORKERS finished, and take its spawner's task on
     (or hand it to its finisher, which ends it)."
    (setv finish (self._finisher workflow))
    (when finish
      (self._release (proto-get workflow ':id))
      (.pop self.locks (proto-get workflow ':id) None)
      (return (await (finish workflow workers))))
    (setv id (proto-get workflow ':id)
          resume (proto-get workflow ':resume)
          payload (proto-get resume ':payload)
          result (workflow-result workflow workers)
          spent [:prompt-tokens (sum (gfor w workers (proto-get w ':tokens)))
                 :completion-tokens 0
                 :cost (sum (gfor w workers (proto-get w ':cost)))]
          state (if (= (proto-get result ':status) ':ok) "done" "failed")
          signal (proto-put resume ':payload
                            (proto-merge payload [:result result
                                                  :usage (usage-add (or (proto-get payload ':usage) ZERO) spent)]))
          record [:action (proto-get payload ':action) :result result :workflow id
                  :task (proto-get payload ':task) :step (- (proto-get payload ':step 1) 1)])
    (defn end [store]
      ;; False when it was over already (stopped meanwhile): then nobody is taken on
      (setv ended (workflow-end store id state (self.services.clock)))
      (when ended
        (hy.I.passepartout/journal.journal-event store "result" (proto-get resume ':session) record))
      ended)
    (self._release id)
    (.pop self.locks id None)
    (await (.receive-with self.hub (or (_gateway-name (proto-get resume ':source)) "repl") f"workflow-{id}"
                          signal end)))

  ;; ** Stopping a workflow

  (defn _hold [self workflow count]
    "Register WORKFLOW (of COUNT workers) as what its spawner's session is
     doing, so that a stop there stops the workflow too."
    (setv id (proto-get workflow ':id)
          held (doing self.services.stops (proto-get workflow ':session)
                      f"the workflow {(proto-get workflow ':title) !r} ({count} worker{(if (= count 1) "" "s")})"
                      :kill (fn [] (self.stop-workflow id))))
    (.__enter__ held)
    (setv (get self.holds id) held))

  (defn _release [self id]
    (setv held (.pop self.holds id None))
    (when held (.__exit__ held None None None)))

  (defn stop-workflow [self id]
    "Stop the workflow ID now: every worker's step is stopped (their
     processes killed, their workflows stopped in turn), and the rows say so
     once the store has taken it. Nothing of it runs after this."
    (self._release id)
    (setv timer (.pop self.timers id None))
    (when timer (.cancel timer))
    (setv store self.services.store
          running (lfor w (workflow-workers store id) :if (= (proto-get w ':state) "running") w))
    ;; written at once, not queued: a worker about to start, or the workflow about
    ;; to take its spawner on, finds it stopped in the same commit and does nothing
    (with [_ (.transaction store)]
      (_stop-rows store id "stopped by the person" (self.services.clock)))
    (for [w running]
      (stop-session self.services.stops (worker-session (proto-get w ':id)))))

  ;; ** What the workers say

  (defn :async deliver [self reply]
    "The gateway =worker=: a worker's REPLY. The one that ends its task
     finishes the worker, and moves its workflows on."
    (setv id (session-worker-id (proto-get reply ':session))
          payload (or (proto-get reply ':payload) []))
    (when (and id (= (proto-get payload ':kind) ':approval))
      (return (await (self._ask-for id reply))))
    (when (or (is id None) (not (proto-get payload ':ends-task)))
      (return True))
    (setv store self.services.store
          worker (worker-get store id))
    (when (or (is worker None) (finished-state (proto-get worker ':state)))
      (return True))
    (setv [calls tokens cost] (session-spent store (worker-session id))
          text (str (or (proto-get (proto-get reply ':payload) ':text) "")))
    (when (await (.call self.services.writer worker-end id (_end-state reply) text (self.services.clock)
                        calls tokens cost (_checks store (worker-session id))))
      (setv workflow (workflow-get store (proto-get worker ':workflow)))
      ;; its own workflow, then the others of its spawner: a spawn may depend on this worker
      (await (self.advance (proto-get workflow ':id) :finishing True))
      (for [other (workflows-of store (proto-get workflow ':session) ["running"])
            :if (!= (proto-get other ':id) (proto-get workflow ':id))]
        (await (self.advance (proto-get other ':id)))))
    True)

  ;; ** Taking up where the last run stopped

  (defn :async resume [self]
    "Take up the workflows the last run left running (the hub's resume, after
     it queued again the inbox's pending rows, calls this)."
    (setv store self.services.store
          queued (sfor row (inbox-pending store "worker")
                       (str (proto-get (proto-get (proto-get row ':signal) ':source) ':chat)))
          unsent (set (outbox-sessions store "pending"))
          now (self.services.clock))
    (for [workflow (workflows-in store ["running"])]
      (setv id (proto-get workflow ':id)
            workers (workflow-workers store id))
      (when (not (in id self.holds))
        (self._hold workflow (len workers)))
      (for [w workers
            :if (and (= (proto-get w ':state) "running")
                     (not (in (proto-get w ':id) queued))
                     (not (in (worker-session (proto-get w ':id)) unsent)))]
        ;; nothing of its task is left to take up, and no answer of it waits to be sent
        (await (.call self.services.writer worker-end (proto-get w ':id) "cut-off"
                      "the daemon stopped while this worker ran, and nothing of its task was left to take up" now)))
      (await (self.advance id))))

  (defn :async _ask-for [self id reply]
    "Put the approval question REPLY of the worker ID to the conversation
     that started its workflow, naming the worker; the worker's task waits
     for the answer as any task does."
    (setv store self.services.store
          session (worker-session id)
          root (conversation-of store session)
          source (root-source store session)
          worker (worker-get store id)
          workflow (when worker (workflow-get store (proto-get worker ':workflow)))
          payload (proto-get reply ':payload))
    (when (or (is source None) (is workflow None))
      (return True))
    (await (.deliver self.hub
                     [:type :reply :session root :source source
                      :payload (proto-merge (lfor [k v] (zip (cut payload None None 2) (cut payload 1 None 2))
                                                  :if (!= k ':ends-task) x [k v] x)
                                            [:text (+ f"The worker {(proto-get worker ':step)} of the workflow "
                                                      f"{(proto-get workflow ':title) !r} (objective: "
                                                      f"{(shorten (proto-get worker ':objective) 80)}) asks:\n"
                                                      (str (proto-get payload ':text)))])]))
    True)

  (defn close [self]
    "Cancel the timers and what runs on its own; the workflows stay as they
     are in the store, for the next start to take up."
    (for [id (list self.holds)] (self._release id))
    (for [t (.values self.timers)] (.cancel t))
    (.clear self.timers)
    (for [t (list self.tasks)] (.cancel t))))

(defn _stop-rows [store id why now]
  "Mark the workflow ID stopped, with every worker of it not yet finished."
  (for [w (workflow-workers store id)]
    (worker-end store (proto-get w ':id) "stopped" why now))
  (workflow-end store id "stopped" now))

(defn _gateway-name [source]
  (setv g (proto-get (or source []) ':gateway))
  (cond (is g None) None
        (isinstance g Keyword) g.name
        True (str g)))
