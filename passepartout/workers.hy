;; * Why

"What a workflow did and is doing, as the store keeps it: the rows of each
workflow and its workers, which waiting workers may start and which can no
longer run, where a session stands for the workflow gate, and the text a
person and a later spawn are shown of it. Everything here is a function of
the store; the runtime that moves workflows on (background.org) and the
routines (routines.org) write and read through it, and the shape a plan may
have is workflow.org's."

(import graphlib
        passepartout.proto [proto-get])

;; * The workflows in the store

(import uuid
        passepartout.records [data-print data-read])

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

;; * What the person sees

(setv SHOWN-WORKFLOWS 5)

(defn session-spent [store session]
  "#(actions tokens cost) of SESSION's thread of the journal."
  (setv [[calls] [tokens cost]]
        [(get (.query store "SELECT COUNT(*) FROM events WHERE session = ? AND kind = 'result'" #(session)) 0)
         (get (.query store "SELECT COALESCE(SUM(tokens), 0), COALESCE(SUM(cost), 0.0) FROM events
                             WHERE session = ?" #(session)) 0)])
  #(calls tokens cost))

(defn shorten [text n]
  "TEXT on one line, cut to N characters with an ellipsis."
  (setv text (.join " " (.split (str (or text "")))))
  (if (> (len text) n) (+ (cut text (- n 1)) "…") text))

(defn _worker-line [store w by-id now indent]
  (setv state (proto-get w ':state)
        running (= state "running")
        [calls tokens cost] (if running
                                (session-spent store (worker-session (proto-get w ':id)))
                                #((proto-get w ':tool-calls) (proto-get w ':tokens) (proto-get w ':cost)))
        started (proto-get w ':started)
        took (when started (- (or (proto-get w ':finished) now) started))
        waits (lfor d (proto-get w ':depends-on)
                    :if (!= (proto-get (.get by-id d []) ':state) "done")
                    (proto-get (.get by-id d [:step d]) ':step)))
  (+ indent "- " (proto-get w ':step) " [" state "] " (shorten (proto-get w ':objective) 60)
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
                         (+ f"- {(proto-get w ':id)} ({(shorten (proto-get w ':objective) 60)}): "
                            (proto-get w ':state)
                            (if (proto-get w ':started)
                                f" in {(round (- (proto-get w ':finished) (proto-get w ':started)) 1)} s"
                                "")
                            f", {(proto-get w ':tool-calls)} actions"
                            (if held f", validators: {(.join ", " held)}" "")))))))
