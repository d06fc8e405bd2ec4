;; * Why

(import datetime graphlib
        hy.models [Keyword]
        passepartout.proto [literal-keywords :as hy proto-get is-plist])

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
         (lfor a (id-list tools) :if (not (in a actions)) a))
    (+ ":tools lists actions there are not: "
       (.join ", " (lfor a (id-list tools) :if (not (in a actions)) a)))
    (and (is-not mode None) (not (in (_name mode) MODES)))
    (+ f":mode {mode !r} is not one of " (.join ", " MODES))
    True None))

(defn spawn-problem [action workers profiles actions]
  "Why the :spawn ACTION may not run for a session standing as WORKERS, or None."
  (setv deps (id-list (proto-get action ':depends-on))
        known (list (proto-get workers ':known [])))
  (cond
    (_depth-problem workers) (_depth-problem workers)
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
        passepartout.store [data-print data-read])

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
   :id :step :objective :depends-on :not-before :tools :mode), all waiting."
  (with [conn (.transaction store)]
    (.execute conn "INSERT INTO workflows (id, title, session, task, depth, state, created)
                    VALUES (?, ?, ?, ?, ?, 'running', ?)"
              #((proto-get workflow ':id) (proto-get workflow ':title) (proto-get workflow ':session)
                (str (proto-get workflow ':task)) (proto-get workflow ':depth) now))
    (for [w workers]
      (.execute conn "INSERT INTO workers (id, workflow, step, objective, depends_on, not_before,
                                           tools, mode, depth, state, created)
                      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'waiting', ?)"
                #((proto-get w ':id) (proto-get workflow ':id) (proto-get w ':step)
                  (proto-get w ':objective) (data-print (list (proto-get w ':depends-on [])))
                  (proto-get w ':not-before)
                  (when (is-not (proto-get w ':tools) None) (data-print (list (proto-get w ':tools))))
                  (or (proto-get w ':mode) "objective")
                  (+ (proto-get workflow ':depth) 1) now)))))

(setv _WORKER-COLUMNS "id, workflow, step, objective, depends_on, not_before, tools, mode, depth,
                       state, result, tool_calls, tokens, cost, continuations, created, started, finished")

(defn _worker [row]
  (setv [id workflow step objective deps not-before tools mode depth state result
         calls tokens cost continuations created started finished] row)
  [:id id :workflow workflow :step step :objective objective :depends-on (data-read deps)
   :not-before not-before :tools (when tools (data-read tools)) :mode mode :depth depth
   :state state :result result :tool-calls calls :tokens tokens :cost cost
   :continuations continuations :created created :started started :finished finished])

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
  "Keep SIGNAL as what takes the spawner of workflow ID on when it is over."
  (.write store "UPDATE workflows SET resume = ? WHERE id = ?" #((data-print signal) id)))

(defn worker-start [store id now]
  "Mark the waiting worker ID running; True when it was waiting."
  (with [conn (.transaction store)]
    (= 1 (. (.execute conn "UPDATE workers SET state = 'running', started = ?
                            WHERE id = ? AND state = 'waiting'" #(now id))
            rowcount))))

(defn worker-end [store id state result now [calls 0] [tokens 0] [cost 0.0]]
  "Mark the worker ID finished in STATE with RESULT (text); True when it had
   not finished before."
  (with [conn (.transaction store)]
    (= 1 (. (.execute conn "UPDATE workers SET state = ?, result = ?, finished = ?,
                                               tool_calls = tool_calls + ?, tokens = ?, cost = ?
                            WHERE id = ? AND state IN ('waiting', 'running')"
                      #(state result now calls tokens cost id))
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

(defn session-view [store session]
  "The :workers plist of SESSION's context."
  (setv known (lfor [id] (.query store "SELECT w.id FROM workers w JOIN workflows f ON w.workflow = f.id
                                        WHERE f.session = ? ORDER BY w.rowid DESC LIMIT ?"
                                 #(session KNOWN-KEPT))
                    id)
        id (session-worker-id session)
        me (when id (worker-get store id)))
  (if me
      [:id id :depth (proto-get me ':depth) :tools (proto-get me ':tools) :known known]
      [:depth 0 :known known]))
