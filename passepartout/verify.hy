;; * Why

"verify runs a proposed action past every gate that judges it and says what
they decided: allowed, modified, escalated to a person or rejected, with every
gate's decision on record. It is a plain function of the action and its
context, so the daemon's gate process (gatekeeper.org), the command line's
verify and replay all judge the same way; the model's turn that asks for
the proposal and goes round again after a rejection is reason.org's."

(import time
        hy.models [Keyword]
        passepartout.proto [ProtoError kw proto-get proto-without is-plist Plist]
        passepartout.skills [actuator-for actuator-table gates-for]
        passepartout.context [context-runtime])

;; * Verdicts

(setv VERDICTS #{"allow" "modify" "reject" "escalate"}
      GATE-BUDGET 0.25
      GATE-WAIT 4
      GATE-MEMORY (* 256 1024 1024))

(setv _VERDICT (kw "verdict")
      _GATE (kw "gate")
      _REASON (kw "reason")
      _RULE (kw "rule")
      _CONFINED (kw "confined")
      _ACTION (kw "action")
      _PAYLOAD (kw "payload")
      _PROPOSED (kw "proposed")
      _STRIPPED (kw "stripped")
      _DECISIONS (kw "decisions")
      _KINDS (dfor k VERDICTS k (kw k)))

(defn verdict [kind [reason None] #** more]
  "A verdict plist: (verdict \"reject\" \"outside the workspace\")."
  (setv out [_VERDICT (kw kind)])
  (when reason (+= out [_REASON reason]))
  (for [[k v] (.items more)] (+= out [(kw (.replace k "_" "-")) v]))
  out)

(setv _ALLOWED #("allow" None None None False))

(defn _check-verdict [answer]
  "ANSWER as (kind reason new-action rule confined), or raise ValueError saying what is wrong."
  ;; Most answers are the plain allow: that one is known by its two names,
  ;; without a pass over its pairs.
  (when (and (is (type answer) list) (= (len answer) 2))
    (setv [k v] answer)
    (when (and (isinstance k Keyword) (isinstance v Keyword)
               (= k.name "verdict") (= v.name "allow"))
      (return _ALLOWED)))
  (when (not (is-plist answer))
    (raise (ValueError f"returned {(. (type answer) __name__)}, not a verdict plist")))
  ;; One pass over the pairs (the first of a repeated key wins, as in proto-get).
  (setv fields (dict (zip (gfor k (cut answer -2 None -2) k.name) (cut answer -1 None -2)))
        v (.get fields "verdict")
        kind (if (isinstance v Keyword) v.name v)
        reason (.get fields "reason")
        rule (.get fields "rule"))
  (when (not (in kind VERDICTS))
    (raise (ValueError f"returned verdict {v !r}")))
  (when (and (in kind #("reject" "escalate")) (not (and (isinstance reason str) (.strip reason))))
    (raise (ValueError f"returned {kind} without a reason")))
  (setv new (.get fields "action"))
  (when (and (= kind "modify") (not (and (is-plist new) (proto-get new _ACTION))))
    (raise (ValueError "returned modify without a new action")))
  #(kind reason new rule (and (in kind #("allow" "modify")) (is (.get fields "confined") True))))

;; * A proposal cannot approve itself

(setv AUTHORITY-FIELDS
      (sfor n ["approved" "approval" "approved-by" "approver" "hitl-token" "hitl-approved"
               "hitl" "authorized" "authorization" "pre-approved" "auto-approve"
               "skip-gates" "bypass-gates" "trusted" "verdict"]
            (kw n)))

(setv _authority-names (frozenset (gfor k AUTHORITY-FIELDS k.name)))

(defn strip-authority [action]
  "ACTION, a plist, without any field that claims approval, and the names of those removed."
  (setv found (lfor k (cut action None None 2) :if (in k.name _authority-names) k.name))
  #((if found (proto-without action AUTHORITY-FIELDS) action) found))

(setv MAX-PROPOSAL-BYTES 65536)

(defn proposal-action [proposal]
  "The action plist inside PROPOSAL: a (:type :request :payload ACTION) form or a bare action.
   Authority claimed on the envelope travels with the action, so that verify strips
   and records it like any other."
  (when (not (is-plist proposal))
    (raise (ProtoError "a proposal must be a plist")))
  (setv payload (proto-get proposal _PAYLOAD))
  (cond
    (and (is-plist payload) (proto-get payload _ACTION))
    (do (setv claims (lfor i (range 0 (len proposal) 2)
                           :if (in (. (get proposal i) name) _authority-names)
                           x [(get proposal i) (get proposal (+ i 1))]
                           x))
        (if claims (+ payload claims) payload))
    (proto-get proposal _ACTION) proposal
    True (raise (ProtoError "a proposal needs :action (or :type :request :payload (:action …))"))))

;; * The shape of an action

(setv _type-checks
      {"string" (fn [v] (isinstance v str))
       "integer" (fn [v] (and (isinstance v int) (not (isinstance v bool))))
       "number" (fn [v] (and (isinstance v #(int float)) (not (isinstance v bool))))
       "boolean" (fn [v] (isinstance v bool))
       "keyword" (fn [v] (isinstance v Keyword))
       "list" (fn [v] (isinstance v list))
       "plist" (fn [v] (is-plist v))
       "any" (fn [v] True)})

(setv _absent (object))

(defn check-schema [action registry]
  "None when ACTION fits the schema of its actuator in REGISTRY, else the reason it does not."
  (when (not (is-plist action))
    (return "an action must be a plist of keyword/value pairs"))
  (setv name (proto-get action _ACTION))
  (when (not (isinstance name Keyword))
    (return "the action has no :action keyword (e.g. :action :message)"))
  (setv spec (actuator-for registry name))
  (when (is spec None)
    (setv known (.join ", " (gfor a (sorted (actuator-table registry)) (+ ":" a))))
    (return f"unknown action :{name.name}; known actions: {known}"))
  ;; The action's fields by name, the first of a repeated key winning as in
  ;; proto-get: a Plist finds them itself, a list is read once.
  (setv fields action)
  (when (is-not (type action) Plist)
    (setv fields {})
    (for [i (range 0 (len action) 2)]
      (.setdefault fields (. (get action i) name) (get action (+ i 1)))))
  ;; the schema as the registry keeps it read: #(field type required) triples
  (for [[field t required] (get spec "fields")]
    (setv value (.get fields field _absent)
          present (is-not value _absent)
          value (if present value None))
    (cond
      (and (not present) required)
      (return f":{name.name} needs :{field} ({t})")
      (and present (not (and (is value None) (not required)))
           (not ((get _type-checks t) value)))
      (return f":{name.name} field :{field} must be {t}, got {(_type-name value)}")))
  None)

(defn _type-name [v]
  (cond (is v None) "nil"
        (isinstance v bool) "boolean"
        (isinstance v Keyword) "keyword"
        (isinstance v str) "string"
        (isinstance v int) "integer"
        (isinstance v float) "number"
        True "list"))

;; * Deadlines that interrupt

(defclass GateTimeout [BaseException]
  "Raised inside a gate, by the gate process, when the gate has used up its CPU budget.")

(defclass GateMemory [BaseException]
  "Raised inside a gate, by the gate process, when the process grew past its bound
   (the first argument, in bytes; GATE-MEMORY when not given).")

;; * Verify

(defn _decision [gate kind [reason None] [rule None] [confined False]]
  (setv d [_GATE gate _VERDICT (get _KINDS kind)])
  (when reason (.extend d [_REASON reason]))
  (when rule (.extend d [_RULE rule]))
  (when confined (.extend d [_CONFINED True]))
  d)

(defn _describe [e]
  "E as \"Type: message\", even when its message cannot be made."
  (try f"{(. (type e) __name__)}: {e}"
       (except [Exception] (. (type e) __name__))))

(defn _gate-failure [name error took budget]
  "Why the answer of gate NAME is refused, or None when it came in time and without error."
  (setv ms (round (* 1000 budget)))
  (cond
    (isinstance error GateTimeout) f"gate {name} did not answer within {ms} ms"
    (isinstance error GateMemory)
    (do (setv bound (if error.args (get error.args 0) GATE-MEMORY))
        f"gate {name} failed closed: the gate process grew by more than {(// bound 1048576)} MiB while it ran")
    error f"gate {name} failed closed: {(_describe error)}"
    (> took budget) f"gate {name} did not answer within {ms} ms (it took {(round (* 1000 took))} ms)"
    True None))

(defclass _Clocks []
  "The clocks of one run of gates: CLOCK, the thread's CPU clock, and the last
   reading of it, CPU, taken at WALL on the wall clock (see \"Verdicts\")."
  (setv __slots__ #("clock" "cpu" "wall"))
  (defn __init__ [self clock]
    (setv self.clock clock
          self.cpu (clock)
          self.wall (time.monotonic))))

(defn run-gate [name gate action ctx [clock time.thread-time] [budget None]]
  "Gate NAME's answer to ACTION in CTX as #(kind reason new-action rule confined),
   or #(\"fail\" why None None False) when it is refused: it raised, it came
   later than BUDGET seconds (GATE-BUDGET unless given), or its answer is no verdict."
  (_timed-gate name gate action ctx (_Clocks clock) (or budget GATE-BUDGET)))

(defn _timed-gate [name gate action ctx clocks budget]
  "run-gate's answer for a gate run with CLOCKS."
  (setv started (time.monotonic))
  (when (> (- started clocks.wall) (/ budget 8))
    (setv clocks.cpu (clocks.clock)
          clocks.wall started))
  (try
    (setv answer (gate action ctx)
          error None)
    (except [e #(Exception GateTimeout GateMemory)]
      (setv answer None
            error e)))
  (setv waited (- (time.monotonic) started)
        took 0.0)
  (when (> waited budget)
    ;; at most the gate's own CPU time plus an eighth of a budget
    (setv cpu (clocks.clock)
          took (- cpu clocks.cpu)
          clocks.cpu cpu
          clocks.wall (time.monotonic)))
  (when (or error (> took budget) (> waited (* GATE-WAIT budget)))
    (return #("fail" (_gate-failure name error (if (> waited (* GATE-WAIT budget)) waited took) budget)
              None None False)))
  (try
    (_check-verdict answer)
    (except [e Exception]
      #("fail" f"gate {name} failed closed: {(_describe e)}" None None False))))

(defn _action-kind [action]
  "The name of ACTION's :action, an action that passed the schema."
  (. (proto-get action _ACTION) name))

(defn _after [pairs every name]
  "The (name gate) PAIRS that come after the gate NAME in EVERY, all the gates in order."
  (setv names (lfor [n _] every n)
        later (set (cut names (+ (.index names name) 1) None)))
  (lfor p pairs :if (in (get p 0) later) p))

(defn _run-gates [select action ctx clock budget decisions]
  "Run the gates SELECT gives for ACTION's kind, appending each decision to
   DECISIONS. #(kind gate reason final-action rule confined)."
  (setv escalation None
        modified None
        confined None
        clocks (_Clocks clock)
        kind (_action-kind action)
        pairs (select kind)
        i 0)
  (while (< i (len pairs))
    (setv [name gate] (get pairs i)
          i (+ i 1)
          [verdict reason new rule confines] (_timed-gate name gate action ctx clocks budget))
    (when (= verdict "fail")
      (.append decisions (_decision name "reject" reason))
      (return #("reject" name reason action None False)))
    (.append decisions (_decision name verdict reason rule confines))
    (when (and confines (is confined None))
      (setv confined #(name reason rule)))
    (cond
      (= verdict "reject") (return #("reject" name reason action rule False))
      (= verdict "escalate") (when (is escalation None) (setv escalation #(name reason rule)))
      (= verdict "modify")
      (do (setv [new _] (strip-authority new)
                problem (check-schema new (context-runtime ctx "skills")))
          (when problem
            (setv reason f"gate {name} modified the action into an invalid one: {problem}")
            (.append decisions (_decision name "reject" reason))
            (return #("reject" name reason action None False)))
          ;; an action of another kind meets the gates after this one that judge it
          (when (!= (_action-kind new) kind)
            (setv kind (_action-kind new)
                  pairs (_after (select kind) (select None) name)
                  i 0))
          (setv action new
                modified #(name reason rule)))))
  (cond escalation #("escalate" (get escalation 0) (get escalation 1) action (get escalation 2) False)
        modified #("modify" (get modified 0) (get modified 1) action (get modified 2)
                   (is-not confined None))
        confined #("allow" (get confined 0) (get confined 1) action (get confined 2) True)
        True #("allow" None None action None False)))

(defn _outcome [proposed stripped decisions kind gate reason final rule [confined False]]
  (setv out [_VERDICT (get _KINDS kind) _GATE gate _REASON reason _ACTION final
             _PROPOSED proposed _STRIPPED stripped _DECISIONS decisions])
  (when rule (.extend out [_RULE rule]))
  (when confined (.extend out [_CONFINED True]))
  out)

(defn verify [action ctx [gates None] [clock time.thread-time] [budget None]]
  "The outcome of running the gates over ACTION in CTX. Each gate has BUDGET
   seconds (GATE-BUDGET unless given). GATES, when given, are the (name gate)
   pairs to run over every action, or a function from an action's name to the
   pairs that judge it (None: all of them); by default the registry's gates
   that judge ACTION's kind."
  (setv registry (context-runtime ctx "skills")
        select (cond (is gates None) (fn [kind] (gates-for registry kind))
                     (callable gates) gates
                     True (fn [kind] gates))
        budget (or budget GATE-BUDGET)
        proposed action
        stripped [])
  (when (is-plist action)
    (setv [action stripped] (strip-authority action)))
  (setv problem (check-schema action registry)
        decisions [(_decision "schema" (if problem "reject" "allow") problem)])
  (if problem
      (_outcome proposed stripped decisions "reject" "schema" problem action None)
      (_outcome proposed stripped decisions #* (_run-gates select action ctx clock budget decisions))))
