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

(setv _workers-key ':workers _depth-key ':depth _known-key ':known)

(defn session-workers [ctx]
  "The =:workers= plist of CTX, or that of a conversation with no workers."
  (or (proto-get ctx _workers-key) [_depth-key 0 _known-key []]))

;; * The graph of a plan

(defn id-name [v]
  "V as text when it is an id (a string, a keyword or a whole number), else None."
  (cond (isinstance v str) (when (.strip v) (.strip v))
        (isinstance v Keyword) v.name
        (and (isinstance v int) (not (isinstance v bool))) (str v)
        True None))

(defn id-list [v]
  "V as a list of ids (one id alone is a list of one), or None when it is not one."
  (cond (is v None) []
        (is-not (id-name v) None) [(id-name v)]
        (isinstance v list) (do (setv ids (lfor x v (id-name x)))
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
    (setv id (id-name (proto-get step ':id))
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
    (and (is-not mode None) (not (in (id-name mode) MODES)))
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
    (when why (return f"step {(id-name (proto-get step ':id)) !r}: {why}")))
  None)
