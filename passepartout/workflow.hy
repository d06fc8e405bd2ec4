;; * Why

"A person asks for work that takes longer than a reply: \"research these three
options and compare them\", \"check the build, then if it passes tag a release\".
The model proposes it as data, like any action: :spawn starts one worker,
:plan a whole workflow of steps that depend on each other. A worker is a task
of its own, in a session of its own, with its own step budget and model calls,
and every one of its proposals passes the same gates as the conversation's."

(import datetime graphlib
        hy.models [Keyword]
        passepartout.proto [proto-get is-plist]
        passepartout.sandbox [READ-ONLY-SHELL])

;; * Limits

(setv MAX-DEPTH 2
      MAX-CONTINUATIONS 3
      MAX-STEPS 50
      MODES #("objective" "full"))

;; * What a session may do

(defn session-workers [ctx]
  "The =:workers= plist of CTX, or that of a conversation with no workers."
  (or (proto-get ctx ':workers) [:depth 0 :known []]))

;; * The graph of a plan

(defn _name [v]
  "V as text when it is an id (a string, a keyword or a whole number), else None."
  (cond (isinstance v str) (when (.strip v) (.strip v))
        (isinstance v Keyword) v.name
        (and (isinstance v int) (not (isinstance v bool))) (str v)
        True None))

(defn id-list [v]
  "V as a list of ids (one id alone is a list of one), or None when it is not one."
  (cond (is v None) []
        (is-not (_name v) None) [(_name v)]
        (isinstance v list) (do (setv ids (lfor x v (_name x)))
                                (if (in None ids) None ids))
        True None))

(defn plan-graph [steps]
  "#(graph None): GRAPH a dict from each step's id to the ids it depends on,
   in the steps' order; or #(None why) when STEPS cannot be a plan."
  (when (not (and (isinstance steps list) steps))
    (return #(None "a plan needs :steps, a list of steps such as (:id \"a\" :objective \"…\")")))
  (when (> (len steps) MAX-STEPS)
    (return #(None f"a plan may have at most {MAX-STEPS} steps; this one has {(len steps)}")))
  (setv graph {})
  (for [[i step] (enumerate steps 1)]
    (when (not (is-plist step))
      (return #(None f"step {i} of the plan is not a plist such as (:id \"a\" :objective \"…\")")))
    (setv id (_name (proto-get step ':id))
          objective (proto-get step ':objective)
          deps (id-list (proto-get step ':depends-on)))
    (cond
      (is id None)
      (return #(None f"step {i} of the plan has no :id; give every step a short id such as \"a\""))
      (in id graph)
      (return #(None f"two steps of the plan are called {id !r}; give each step an id of its own"))
      (not (and (isinstance objective str) (.strip objective)))
      (return #(None f"step {id !r} of the plan has no :objective: say what that worker is to do"))
      (is deps None)
      (return #(None f"step {id !r}: :depends-on must be a list of step ids")))
    (setv (get graph id) deps))
  (for [[id deps] (.items graph)
        d deps]
    (when (not (in d graph))
      (return #(None (+ f"step {id !r} depends on {d !r}, which is no step of this plan (its steps: "
                        (.join ", " graph) "); depend only on steps of the plan")))))
  #(graph None))

(defn graph-order [graph]
  "#(order None): the ids of GRAPH (id to dependency ids) each after what it
   depends on; or #(None why) when they depend on each other in a circle."
  (try
    #((list (.static-order (graphlib.TopologicalSorter graph))) None)
    (except [e graphlib.CycleError]
      (setv circle (get e.args 1))
      #(None (+ "the steps " (.join " → " (gfor c (reversed circle) (repr c)))
                " depend on each other in a circle, so none of them could ever start;"
                " drop one of these dependencies")))))

;; * Checking a proposal

(defn _depth-problem [workers]
  (setv depth (proto-get workers ':depth 0))
  (when (>= depth MAX-DEPTH)
    (+ f"this is a worker at depth {depth}, and workers may start workers only {MAX-DEPTH} levels deep:"
       " do the work with your own actions, or answer with what you have")))

(defn parse-time [text]
  "The POSIX time of the ISO 8601 TEXT (UTC when it names no zone), or None."
  (when (isinstance text str)
    (try
      (setv t (datetime.datetime.fromisoformat (.strip text)))
      (when (is t.tzinfo None)
        (setv t (.replace t :tzinfo datetime.timezone.utc)))
      (.timestamp t)
      (except [ValueError] None))))

(defn tool-action [tool]
  "The action a tool name allows: =shell= for =shell:read-only=, the name itself otherwise."
  (if (= tool READ-ONLY-SHELL) "shell" tool))

(defn tools-for [tools profiles]
  "The action names TOOLS allows: those of the profile it names in PROFILES,
   the list it is, or None (every action) when it is nil. A string naming no
   profile raises KeyError."
  (cond (is tools None) None
        (isinstance tools str) (list (get profiles tools))
        True (id-list tools)))

(defn _common-problem [action profiles actions]
  "What is wrong with the fields a spawn and a plan's steps share, or None."
  (setv tools (proto-get action ':tools)
        mode (proto-get action ':mode)
        not-before (proto-get action ':not-before))
  (cond
    (and (is-not not-before None) (is (parse-time not-before) None))
    f":not-before {not-before !r} is not a time; write it as ISO 8601, e.g. \"2030-01-31T09:00:00+00:00\""
    (and (isinstance tools str) (not (in tools profiles)))
    (+ f":tools {tools !r} is no tool profile; the profiles are "
       (if profiles (.join ", " (sorted profiles)) "none")
       ", or give a list of actions")
    (and (is-not tools None) (not (isinstance tools str)) (is (id-list tools) None))
    ":tools must name a profile or list actions, e.g. (\"read-file\" \"memory-search\")"
    (and (is-not tools None) (not (isinstance tools str))
         (lfor a (id-list tools) :if (not (in (tool-action a) actions)) a))
    (+ ":tools lists actions there are not: "
       (.join ", " (lfor a (id-list tools) :if (not (in (tool-action a) actions)) a)))
    (and (is-not mode None) (not (in (_name mode) MODES)))
    (+ f":mode {mode !r} is not one of " (.join ", " MODES))
    True None))

(defn continued-times [workers id]
  "How many times the worker ID (known to a session standing as WORKERS) was
   itself a continuation: 0 for a first worker."
  (next (gfor [w n] (proto-get workers ':continuations []) :if (= w id) n) 0))

(defn spawn-problem [action workers profiles actions]
  "Why the :spawn ACTION may not run for a session standing as WORKERS, or None."
  (setv deps (id-list (proto-get action ':depends-on))
        known (list (proto-get workers ':known []))
        continues (proto-get action ':continue))
  (cond
    (_depth-problem workers) (_depth-problem workers)
    (and (is-not continues None) (not (in continues known)))
    (+ f":continue {continues !r} is no worker of this conversation ("
       (if known (+ "its workers: " (.join ", " known)) "it has none") ")")
    (and (is-not continues None) (>= (continued-times workers continues) MAX-CONTINUATIONS))
    (+ f"the work of {continues} was continued {MAX-CONTINUATIONS} times already, the most it may be;"
       " answer with what the workers found, or give the task a new objective")
    (is deps None) ":depends-on must be a list of worker ids"
    (lfor d deps :if (not (in d known)) d)
    (+ "it depends on " (.join ", " (gfor d deps :if (not (in d known)) (repr d)))
       ", which " (if (= (len (lfor d deps :if (not (in d known)) d)) 1) "is" "are")
       " no worker of this conversation ("
       (if known (+ "its workers: " (.join ", " known)) "it has none")
       "); depend only on workers it started")
    True (_common-problem action profiles actions)))

(defn plan-problem [action workers profiles actions]
  "Why the :plan ACTION may not run for a session standing as WORKERS, or None."
  (setv depth-problem (_depth-problem workers))
  (when depth-problem (return depth-problem))
  (setv [graph why] (plan-graph (proto-get action ':steps)))
  (when why (return why))
  (setv [_ why] (graph-order graph))
  (when why (return why))
  (for [step (proto-get action ':steps)]
    (setv why (_common-problem step profiles actions))
    (when why (return f"step {(_name (proto-get step ':id)) !r}: {why}")))
  None)

;; * The workflows in the store

(import uuid
        passepartout.store [data-print data-read events inbox-pending outbox-sessions])

(defn new-id [prefix]
  "A fresh id such as \"w3f9a0c2b1d\"."
  (+ prefix (cut (. (uuid.uuid4) hex) 10)))

(defn worker-session [id]
  "The session of the worker ID."
  f"worker:{id}")

(defn session-worker-id [session]
  "The worker id of SESSION, or None when it is no worker's."
  (when (and (isinstance session str) (.startswith session "worker:"))
    (cut session 7 None)))

(setv _FINISHED #("done" "failed" "stopped" "cut-off"))

(defn finished-state [state]
  "True when STATE is one a worker does not leave."
  (in state _FINISHED))

(defn workflow-add [store workflow workers now]
  "Record WORKFLOW (:id :title :session :task :depth) and its WORKERS (each
   :id :step :objective :depends-on :not-before :tools :mode, and
   :continuations for one that goes on with another's work), all waiting."
  (with [conn (.transaction store)]
    (.execute conn "INSERT INTO workflows (id, title, session, task, depth, state, created)
                    VALUES (?, ?, ?, ?, ?, 'running', ?)"
              #((proto-get workflow ':id) (proto-get workflow ':title) (proto-get workflow ':session)
                (str (proto-get workflow ':task)) (proto-get workflow ':depth) now))
    (for [w workers]
      (.execute conn "INSERT INTO workers (id, workflow, step, objective, depends_on, not_before,
                                           tools, mode, depth, state, continuations, created)
                      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'waiting', ?, ?)"
                #((proto-get w ':id) (proto-get workflow ':id) (proto-get w ':step)
                  (proto-get w ':objective) (data-print (list (proto-get w ':depends-on [])))
                  (proto-get w ':not-before)
                  (when (is-not (proto-get w ':tools) None) (data-print (list (proto-get w ':tools))))
                  (or (proto-get w ':mode) "objective")
                  (+ (proto-get workflow ':depth) 1) (proto-get w ':continuations 0) now)))))

(setv _WORKER-COLUMNS "id, workflow, step, objective, depends_on, not_before, tools, mode, depth,
                       state, result, tool_calls, tokens, cost, continuations, checks, created, started, finished")

(defn _worker [row]
  (setv [id workflow step objective deps not-before tools mode depth state result
         calls tokens cost continuations checks created started finished] row)
  [:id id :workflow workflow :step step :objective objective :depends-on (data-read deps)
   :not-before not-before :tools (when tools (data-read tools)) :mode mode :depth depth
   :state state :result result :tool-calls calls :tokens tokens :cost cost
   :continuations continuations :checks (if checks (data-read checks) [])
   :created created :started started :finished finished])

(setv _WORKFLOW-COLUMNS "id, title, session, task, depth, state, resume, created, finished")

(defn _workflow [row]
  (setv [id title session task depth state resume created finished] row)
  [:id id :title title :session session :task task :depth depth :state state
   :resume (when resume (data-read resume)) :created created :finished finished])

(defn workflow-get [store id]
  "The workflow ID as a plist, or None."
  (setv rows (.query store f"SELECT {_WORKFLOW-COLUMNS} FROM workflows WHERE id = ?" #(id)))
  (when rows (_workflow (get rows 0))))

(defn workflows-of [store session [states None]]
  "The workflows SESSION started (in STATES only, when given), oldest first."
  (lfor row (.query store f"SELECT {_WORKFLOW-COLUMNS} FROM workflows WHERE session = ? ORDER BY created, rowid"
                    #(session))
        :setv w (_workflow row)
        :if (or (is states None) (in (proto-get w ':state) states))
        w))

(defn workflows-in [store states]
  "Every workflow in one of STATES, oldest first."
  (lfor row (.query store f"SELECT {_WORKFLOW-COLUMNS} FROM workflows ORDER BY created, rowid")
        :setv w (_workflow row)
        :if (in (proto-get w ':state) states)
        w))

(defn workflow-workers [store id]
  "The workers of the workflow ID, in the order they were made."
  (lfor row (.query store f"SELECT {_WORKER-COLUMNS} FROM workers WHERE workflow = ? ORDER BY rowid" #(id))
        (_worker row)))

(defn worker-get [store id]
  "The worker ID as a plist, or None."
  (setv rows (.query store f"SELECT {_WORKER-COLUMNS} FROM workers WHERE id = ?" #(id)))
  (when rows (_worker (get rows 0))))

(defn workflow-resume [store id signal]
  "Keep SIGNAL as what takes the spawner of workflow ID on when it is over
   (its payload names the spawner's task)."
  (.write store "UPDATE workflows SET resume = ?, task = ? WHERE id = ?"
          #((data-print signal) (str (or (proto-get (proto-get signal ':payload) ':task) "")) id)))

(defn worker-start [store id now]
  "Mark the waiting worker ID running; True when it was waiting."
  (with [conn (.transaction store)]
    (= 1 (. (.execute conn "UPDATE workers SET state = 'running', started = ?
                            WHERE id = ? AND state = 'waiting'" #(now id))
            rowcount))))

(defn worker-end [store id state result now [calls 0] [tokens 0] [cost 0.0] [checks None]]
  "Mark the worker ID finished in STATE with RESULT (text); True when it had
   not finished before. CHECKS are the reply validators' verdicts on its
   answers, in order."
  (with [conn (.transaction store)]
    (= 1 (. (.execute conn "UPDATE workers SET state = ?, result = ?, finished = ?,
                                               tool_calls = tool_calls + ?, tokens = ?, cost = ?, checks = ?
                            WHERE id = ? AND state IN ('waiting', 'running')"
                      #(state result now calls tokens cost (when checks (data-print checks)) id))
            rowcount))))

(defn workflow-end [store id state now]
  "Mark the running workflow ID over, in STATE; True when it was running."
  (with [conn (.transaction store)]
    (= 1 (. (.execute conn "UPDATE workflows SET state = ?, finished = ? WHERE id = ? AND state = 'running'"
                      #(state now id))
            rowcount))))

;; * What may start, and what can no longer

(defn worker-graph [workers]
  "The dict from each of WORKERS' ids to the ids it depends on."
  (dfor w workers (proto-get w ':id) (list (proto-get w ':depends-on []))))

(defn ready-ids [workers [now None]]
  "The ids of the waiting WORKERS whose dependencies are all done (and, given
   NOW, whose :not-before has passed), in topological order."
  (setv states (dfor w workers (proto-get w ':id) (proto-get w ':state))
        times (dfor w workers (proto-get w ':id) (proto-get w ':not-before))
        sorter (graphlib.TopologicalSorter (worker-graph workers))
        out [])
  (.prepare sorter)
  (while (.is-active sorter)
    (setv ready (.get-ready sorter)
          done (lfor n ready :if (= (.get states n "done") "done") n))
    (.extend out (lfor n ready
                       :if (and (= (.get states n) "waiting")
                                (or (is now None) (is (get times n) None) (<= (get times n) now)))
                       n))
    (when (not done) (break))
    (.done sorter #* done))
  out)

(defn doomed [workers]
  "#(id why) for each waiting worker of WORKERS that can no longer run: a
   worker it depends on, directly or not, failed, was stopped or was cut off."
  (setv by-id (dfor w workers (proto-get w ':id) w)
        graph (worker-graph workers)
        bad {}
        out [])
  (for [id (.static-order (graphlib.TopologicalSorter graph))]
    (setv w (.get by-id id))
    (when (is w None) (continue))
    (setv state (proto-get w ':state))
    (cond
      (in state #("failed" "stopped" "cut-off"))
      (setv (get bad id) f"{(proto-get w ':step)} {state}")
      (= state "waiting")
      (do (setv cause (next (gfor d (get graph id) :if (in d bad) d) None))
          (when cause
            (setv why (+ f"it depends on {(proto-get (get by-id cause) ':step)}, which "
                         (if (in (proto-get (get by-id cause) ':state) #("failed" "stopped" "cut-off"))
                             (proto-get (get by-id cause) ':state)
                             f"could not run ({(get bad cause)})"))
                  (get bad id) why)
            (.append out #(id why))))))
  out)

(defn workflow-result [workflow workers]
  "The tool result a finished WORKFLOW hands its spawner: every worker's
   step, objective, state and result; an error when any did not finish well."
  (setv failed (lfor w workers :if (!= (proto-get w ':state) "done") w))
  (+ [:status (if failed :error :ok)
      :workflow (proto-get workflow ':id)
      :title (proto-get workflow ':title)]
     (if failed
         [:error (.join "; " (gfor w failed (+ (proto-get w ':step) " " (proto-get w ':state)
                                               ": " (str (or (proto-get w ':result) "")))))]
         [])
     [:workers (lfor w workers
                     [:id (proto-get w ':id) :step (proto-get w ':step)
                      :objective (proto-get w ':objective) :state (proto-get w ':state)
                      :result (or (proto-get w ':result) "")])]))

;; * Where a session stands

(setv KNOWN-KEPT 50)

(defn conversation-of [store session]
  "The session that started the outermost workflow SESSION works for: SESSION
   itself when it is no worker's."
  (setv seen (set))
  (while (and (session-worker-id session) (not (in session seen)))
    (.add seen session)
    (setv w (worker-get store (session-worker-id session))
          f (when w (workflow-get store (proto-get w ':workflow))))
    (if f
        (setv session (proto-get f ':session))
        (break)))
  session)

(defn root-source [store session]
  "The source replies to the conversation of SESSION (see conversation-of)
   go out with: that of the signal its workflow takes it on with, without the
   inbox row it names; None when there is none."
  (setv root (conversation-of store session)
        rows (.query store "SELECT resume FROM workflows WHERE session = ? AND resume IS NOT NULL
                            ORDER BY created DESC, rowid DESC LIMIT 1" #(root)))
  (when rows
    (setv source (proto-get (data-read (get rows 0 0)) ':source))
    (lfor [k v] (zip (cut source None None 2) (cut source 1 None 2)) :if (!= k ':inbox) x [k v] x)))

(defn session-view [store session]
  "The :workers plist of SESSION's context."
  (setv rows (.query store "SELECT w.id, w.continuations FROM workers w JOIN workflows f ON w.workflow = f.id
                            WHERE f.session = ? ORDER BY w.rowid DESC LIMIT ?"
                     #(session KNOWN-KEPT))
        known (lfor [id _] rows id)
        continued (lfor [id n] rows :if n [id n])
        id (session-worker-id session)
        me (when id (worker-get store id)))
  (+ (if me
         [:id id :depth (proto-get me ':depth) :tools (proto-get me ':tools) :known known]
         [:depth 0 :known known])
     (if continued [:continuations continued] [])))

;; * The runtime

(import asyncio logging
        passepartout.proto [proto-put proto-merge proto-print]
        passepartout.runner [doing stop-session]
        passepartout.budget [usage-add ZERO])

(setv log (logging.getLogger "passepartout.workflow"))

(setv FULL-TURNS 10)

(defn _conversation-text [store session]
  "The last FULL-TURNS things said in SESSION, for a worker of mode \"full\"."
  (setv turns (events store :session session :kinds ["input" "answer"] :latest True :limit FULL-TURNS))
  (if turns
      (+ "\n\nThe conversation that asked for this, most recent last:\n"
         (.join "\n" (gfor e turns (+ (if (= (proto-get e ':kind) "input") "- said: " "- answered: ")
                                      (_short (proto-get (proto-get e ':data) ':text) 400)))))
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

(defn _spent [store session]
  "#(actions tokens cost) of SESSION's thread of the journal."
  (setv [[calls] [tokens cost]]
        [(get (.query store "SELECT COUNT(*) FROM events WHERE session = ? AND kind = 'result'" #(session)) 0)
         (get (.query store "SELECT COALESCE(SUM(tokens), 0), COALESCE(SUM(cost), 0.0) FROM events
                             WHERE session = ?" #(session)) 0)])
  #(calls tokens cost))

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
                           :mode (_name (proto-get action ':mode))
                           :continuations (if before (+ (proto-get before ':continuations) 1) 0)]])))

  (defn :async plan [self action ctx]
    "Carry out the :plan ACTION (allowed by the gates) in CTX."
    (setv steps (proto-get action ':steps)
          ids (dfor s steps (_name (proto-get s ':id)) (new-id "w")))
    (await (self._record ctx (proto-get action ':title)
                         (lfor s steps
                               :setv step (_name (proto-get s ':id))
                               [:id (get ids step) :step step :objective (proto-get s ':objective)
                                :depends-on (lfor d (id-list (proto-get s ':depends-on)) (get ids d))
                                :not-before (parse-time (proto-get s ':not-before))
                                :tools (self._tools (proto-get s ':tools))
                                :mode (_name (proto-get s ':mode))]))))

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
    (setv [calls tokens cost] (_spent store (worker-session id))
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
                                                      f"{(_short (proto-get worker ':objective) 80)}) asks:\n"
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

;; * What the person sees

(setv SHOWN-WORKFLOWS 5)

(defn _short [text n]
  (setv text (.join " " (.split (str (or text "")))))
  (if (> (len text) n) (+ (cut text (- n 1)) "…") text))

(defn _worker-line [store w by-id now indent]
  (setv state (proto-get w ':state)
        running (= state "running")
        [calls tokens cost] (if running
                                (_spent store (worker-session (proto-get w ':id)))
                                #((proto-get w ':tool-calls) (proto-get w ':tokens) (proto-get w ':cost)))
        started (proto-get w ':started)
        took (when started (- (or (proto-get w ':finished) now) started))
        waits (lfor d (proto-get w ':depends-on)
                    :if (!= (proto-get (.get by-id d []) ':state) "done")
                    (proto-get (.get by-id d [:step d]) ':step)))
  (+ indent "- " (proto-get w ':step) " [" state "] " (_short (proto-get w ':objective) 60)
     (if (is took None) "" f" — {(round took 1)} s")
     f", {calls} action{(if (= calls 1) "" "s")}, {tokens} tokens, ${(round cost 4)}"
     (if (and waits (= state "waiting")) (+ ", waits for " (.join ", " waits)) "")))

(defn _workflow-lines [store workflow now indent]
  (setv workers (workflow-workers store (proto-get workflow ':id))
        by-id (dfor w workers (proto-get w ':id) w)
        lines [(+ indent f"{(proto-get workflow ':title) !r} ({(proto-get workflow ':id)}): "
                  (proto-get workflow ':state))])
  (for [w workers]
    (.append lines (_worker-line store w by-id now (+ indent "  ")))
    (for [inner (workflows-of store (worker-session (proto-get w ':id)))]
      (.extend lines (_workflow-lines store inner now (+ indent "    ")))))
  lines)

(defn workers-text [store session now]
  "The live graph of SESSION's workflows, as text."
  (setv mine (cut (workflows-of store session) (- SHOWN-WORKFLOWS) None))
  (if mine
      (.join "\n" (+ ["Workflows of this conversation:"]
                     (lfor f mine line (_workflow-lines store f now "") line)))
      "No workflows have run in this conversation."))

;; * What later spawns are told

(setv OUTCOMES-SHOWN 5)

(defn workers-outcomes [store session]
  "The outcomes of SESSION's newest finished workers, as prompt text, or None."
  (setv rows (.query store f"SELECT {_WORKER-COLUMNS} FROM workers
                            WHERE workflow IN (SELECT id FROM workflows WHERE session = ?)
                              AND finished IS NOT NULL
                            ORDER BY finished DESC LIMIT ?"
                     #(session OUTCOMES-SHOWN)))
  (when rows
    (+ "Workers of this conversation that finished (newest first; :continue one that stopped early):\n"
       (.join "\n" (gfor row rows
                         :setv w (_worker row)
                         :setv held (lfor c (proto-get w ':checks) :if (!= c "deliver") c)
                         (+ f"- {(proto-get w ':id)} ({(_short (proto-get w ':objective) 60)}): "
                            (proto-get w ':state)
                            (if (proto-get w ':started)
                                f" in {(round (- (proto-get w ':finished) (proto-get w ':started)) 1)} s"
                                "")
                            f", {(proto-get w ':tool-calls)} actions"
                            (if held f", validators: {(.join ", " held)}" "")))))))
