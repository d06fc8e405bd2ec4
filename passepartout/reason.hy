;; * Why

"This is where the two engines meet. Think asks the provider cascade for one
proposed action; verify runs it past every gate. The model has no authority:
whatever it says is a proposal, parsed as data, and only a proposal that every
gate lets through reaches the act stage."

(import asyncio inspect json re time
        hy.models [Keyword]
        passepartout.proto [ProtoError kw proto-get proto-put proto-has proto-without proto-merge
                            proto-read proto-print proto-normalize proto-from-data
                            is-plist]
        passepartout.skills [actuator-for actuator-table skill-functions all-skills registry-view]
        passepartout.context [context-runtime]
        passepartout.secrets [redact-value secret-tuple]
        passepartout.extract [extract ACTIONS]
        passepartout.cascade [CALL-KEY]
        passepartout.display [action-words reason-words]
        passepartout.symbolic [OWN-COMMAND symbolic-complete])

;; * Verdicts

(setv VERDICTS #{"allow" "modify" "reject" "escalate"}
      GATE-BUDGET 0.25
      GATE-WAIT 4
      GATE-MEMORY (* 256 1024 1024))

(defn verdict [kind [reason None] #** more]
  "A verdict plist: (verdict \"reject\" \"outside the workspace\")."
  (setv out [:verdict (kw kind)])
  (when reason (+= out [:reason reason]))
  (for [[k v] (.items more)] (+= out [(kw (.replace k "_" "-")) v]))
  out)

(setv _ALLOWED #("allow" None None None False))

(defn _check-verdict [answer]
  "ANSWER as (kind reason new-action rule confined), or raise ValueError saying what is wrong."
  ;; Most answers are the plain allow that =verdict= and a literal build, with
  ;; the interned keywords: that one is known without a pass over its pairs.
  (when (and (is (type answer) list) (= (len answer) 2)
             (is (get answer 0) ':verdict) (is (get answer 1) ':allow))
    (return _ALLOWED))
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
  (when (and (= kind "modify") (not (and (is-plist new) (proto-get new ':action))))
    (raise (ValueError "returned modify without a new action")))
  #(kind reason new rule (and (in kind #("allow" "modify")) (is (.get fields "confined") True))))

;; * A proposal cannot approve itself

(setv AUTHORITY-FIELDS
      (sfor n ["approved" "approval" "approved-by" "approver" "hitl-token" "hitl-approved"
               "hitl" "authorized" "authorization" "pre-approved" "auto-approve"
               "skip-gates" "bypass-gates" "trusted" "verdict"]
            (kw n)))

(defn strip-authority [action]
  "ACTION without any field that claims approval, and the names of those removed."
  (setv found (lfor k (cut action None None 2) :if (in k AUTHORITY-FIELDS) k.name))
  #((if found (proto-without action AUTHORITY-FIELDS) action) found))

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

(defn check-schema [action registry]
  "None when ACTION fits the schema of its actuator in REGISTRY, else the reason it does not."
  (when (not (is-plist action))
    (return "an action must be a plist of keyword/value pairs"))
  (setv name (proto-get action ':action))
  (when (not (isinstance name Keyword))
    (return "the action has no :action keyword (e.g. :action :message)"))
  (setv spec (actuator-for registry name))
  (when (is spec None)
    (setv known (.join ", " (gfor a (sorted (actuator-table registry)) (+ ":" a))))
    (return f"unknown action :{name.name}; known actions: {known}"))
  ;; The action's fields read once, by name, the first of a repeated key winning
  ;; as in proto-get.
  (setv schema (get spec "schema")
        fields {})
  (for [i (range 0 (len action) 2)]
    (.setdefault fields (. (get action i) name) (get action (+ i 1))))
  (for [i (range 0 (len schema) 2)]
    (setv field (get schema i)
          fspec (get schema (+ i 1))
          t (proto-get fspec ':type "any")
          present (in field.name fields)
          value (.get fields field.name))
    (cond
      (and (not present) (proto-get fspec ':required))
      (return f":{name.name} needs :{field.name} ({t})")
      (and present (not (and (is value None) (not (proto-get fspec ':required))))
           (not ((get _type-checks t) value)))
      (return f":{name.name} field :{field.name} must be {t}, got {(_type-name value)}")))
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
  (if (or reason rule confined)
      (+ [:gate gate :verdict (kw kind)]
         (if reason [:reason reason] [])
         (if rule [:rule rule] [])
         (if confined [:confined True] []))
      [:gate gate :verdict (kw kind)]))

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

(defn run-gate [name gate action ctx [clock time.thread-time] [budget None]]
  "Gate NAME's answer to ACTION in CTX as #(kind reason new-action rule confined),
   or #(\"fail\" why None None False) when it is refused: it raised, it came
   later than BUDGET seconds (GATE-BUDGET unless given), or its answer is no verdict."
  (get (_timed-gate name gate action ctx clock (or budget GATE-BUDGET) (clock) (time.monotonic)) 0))

(defn _timed-gate [name gate action ctx clock budget started wall]
  "#(answer ended wall-ended): run-gate's answer for a gate started at STARTED
   on CLOCK and WALL on the wall clock, and the two clocks when it returned."
  (try
    (setv answer (gate action ctx)
          error None)
    (except [e #(Exception GateTimeout GateMemory)]
      (setv answer None
            error e)))
  (setv ended (clock)
        wall-ended (time.monotonic)
        took (- ended started)
        waited (- wall-ended wall))
  (when (or error (> took budget) (> waited (* GATE-WAIT budget)))
    (setv failure (_gate-failure name error (if (> waited (* GATE-WAIT budget)) waited took) budget))
    (return #(#("fail" failure None None False) ended wall-ended)))
  #((try
      (_check-verdict answer)
      (except [e Exception]
        #("fail" f"gate {name} failed closed: {(_describe e)}" None None False)))
    ended wall-ended))

(defn _run-gates [gates action ctx clock budget decisions]
  "Run GATES over ACTION, appending each decision to DECISIONS.
   #(kind gate reason final-action rule confined)."
  (setv escalation None
        modified None
        confined None
        started (clock)
        wall (time.monotonic))
  (for [[name gate] gates]
    (setv [[kind reason new rule confines] started wall]
          (_timed-gate name gate action ctx clock budget started wall))
    (when (= kind "fail")
      (.append decisions (_decision name "reject" reason))
      (return #("reject" name reason action None False)))
    (.append decisions (_decision name kind reason rule confines))
    (when (and confines (is confined None))
      (setv confined #(name reason rule)))
    (cond
      (= kind "reject") (return #("reject" name reason action rule False))
      (= kind "escalate") (when (is escalation None) (setv escalation #(name reason rule)))
      (= kind "modify")
      (do (setv [new _] (strip-authority new)
                problem (check-schema new (context-runtime ctx "skills")))
          (when problem
            (setv reason f"gate {name} modified the action into an invalid one: {problem}")
            (.append decisions (_decision name "reject" reason))
            (return #("reject" name reason action None False)))
          (setv action new
                modified #(name reason rule)))))
  (cond escalation #("escalate" (get escalation 0) (get escalation 1) action (get escalation 2) False)
        modified #("modify" (get modified 0) (get modified 1) action (get modified 2)
                   (is-not confined None))
        confined #("allow" (get confined 0) (get confined 1) action (get confined 2) True)
        True #("allow" None None action None False)))

(defn verify [action ctx [gates None] [clock time.thread-time] [budget None]]
  "The outcome of running the gates over ACTION in CTX. Each gate has BUDGET
   seconds (GATE-BUDGET unless given)."
  (setv registry (context-runtime ctx "skills")
        gates (if (is gates None) (skill-functions registry "gate") gates)
        budget (or budget GATE-BUDGET)
        proposed action
        stripped [])
  (when (is-plist action)
    (setv [action stripped] (strip-authority action)))
  (setv problem (check-schema action registry)
        decisions [(_decision "schema" (if problem "reject" "allow") problem)])
  (defn outcome [kind gate reason final rule [confined False]]
    (+ [:verdict (kw kind) :gate gate :reason reason :action final
        :proposed proposed :stripped stripped :decisions decisions]
       (if rule [:rule rule] [])
       (if confined [:confined True] [])))
  (if problem
      (outcome "reject" "schema" problem action None)
      (outcome #* (_run-gates gates action ctx clock budget decisions))))

;; * Parsing what the model said

(setv MAX-PROPOSAL-BYTES 65536)

(defn proposal-action [proposal]
  "The action plist inside PROPOSAL: a (:type :request :payload ACTION) form or a bare action.
   Authority claimed on the envelope travels with the action, so that verify strips
   and records it like any other."
  (when (not (is-plist proposal))
    (raise (ProtoError "a proposal must be a plist")))
  (setv payload (proto-get proposal ':payload))
  (cond
    (and (is-plist payload) (proto-get payload ':action))
    (+ payload (lfor i (range 0 (len proposal) 2)
                     :if (in (get proposal i) AUTHORITY-FIELDS)
                     x [(get proposal i) (get proposal (+ i 1))]
                     x))
    (proto-get proposal ':action) proposal
    True (raise (ProtoError "a proposal needs :action (or :type :request :payload (:action …))"))))

(defn _known-actions [registry]
  (| ACTIONS (set (actuator-table registry))))

(defn read-answer [text [tool-calls None] [registry None]]
  "#(action unrun said) for the model's TEXT or TOOL-CALLS: the action to
   verify, the further actions of the same answer, and the words the model
   wrote beside its call (or None). The actions REGISTRY's skills add are known
   by name too. Raises ProtoError when it tried to propose one and failed."
  (setv r (extract text tool-calls (if registry (_known-actions registry) ACTIONS)))
  (if (proto-has r ':message)
      #([:action :message :text (proto-get r ':message)] [] None)
      #((proposal-action (proto-get r ':proposal))
        (lfor p (proto-get r ':unrun) (proposal-action p))
        (proto-get r ':said))))

(defn parse-answer [text [tool-calls None] [registry None]]
  "#(action unrun) for the model's TEXT or TOOL-CALLS: the action to verify and
   the further actions of the same answer that will not run (see read-answer).
   Raises ProtoError when it tried to propose one and failed."
  (cut (read-answer text tool-calls registry) 2))

(defn as-written [text tool-calls]
  "What the model wrote, as a plist to show it back when it does not read: its
   tool calls as it made them, or its text."
  (if tool-calls
      [:tool-calls (lfor c tool-calls [:name (str (proto-get c ':name))
                                       :arguments (str (or (proto-get c ':arguments) ""))])]
      [:answer (cut (or text "") 2000)]))

(defn parse-proposal [text [tool-calls None] [registry None]]
  "The action plist the model proposed, from its TEXT or its TOOL-CALLS.
   Raises ProtoError when it tried to propose one and failed."
  (get (parse-answer text tool-calls registry) 0))

(defn unrun-note [unrun]
  "What the model is told about the actions of its answer that were not run."
  (+ f"An action a person had to approve ran alone; {(len unrun)} more "
     (if (= (len unrun) 1) "was" "were") " not run: "
     (.join ", " (gfor a unrun (proto-print a)))
     ". Propose the next one after you have seen this result."))

;; * Think

(setv TEXT-PROTOCOL "Answer with exactly one action: as a plist such as (:action :shell :cmd \"ls -la\" :explanation \"list the workspace\"), as JSON such as {\"action\": \"shell\", \"cmd\": \"ls -la\", \"explanation\": \"list the workspace\"}, or as a tool call. To answer the person, use (:action :message :text \"…\").")

(setv RULES f"{TEXT-PROTOCOL} Every action that changes anything needs an :explanation, as listed below. If a proposal is refused, the reason is given: propose something acceptable instead, or explain to the person.")

(defn tool-belt [registry]
  "The actions of REGISTRY and their fields, as prompt text."
  (registry-view registry "tool-belt" (fn [] (_tool-belt registry))))

(defn _tool-belt [registry]
  (setv lines [])
  (for [[name spec] (sorted (.items (actuator-table registry)))]
    (setv schema (get spec "schema")
          fields (lfor i (range 0 (len schema) 2)
                       (do (setv f (get schema (+ i 1)))
                           (+ ":" (. (get schema i) name) " " (proto-get f ':type "any")
                              (if (proto-get f ':required) "" " (optional)")))))
    (when (get spec "effect")
      (.append fields ":explanation string"))
    (.append lines (+ "(:action :" name " " (.join " " fields) ") — " (get spec "doc"))))
  (.join "\n" lines))

(defn tool-definitions [registry]
  "The actions of REGISTRY as OpenAI-format tool definitions (a fresh copy
   each time: a model client may change what it is given)."
  (json.loads (registry-view registry "tool-definitions"
                             (fn [] (json.dumps (_tool-definitions registry))))))

(defn _tool-definitions [registry]
  (setv json-types {"string" "string" "integer" "integer" "number" "number"
                    "boolean" "boolean" "list" "array" "keyword" "string"
                    "plist" "object" "any" "string"})
  (lfor [name spec] (sorted (.items (actuator-table registry)))
        (do (setv schema (get spec "schema")
                  props {}
                  required [])
            (for [i (range 0 (len schema) 2)]
              (setv fname (. (get schema i) name)
                    f (get schema (+ i 1))
                    (get props fname) {"type" (get json-types (proto-get f ':type "any"))
                                       "description" (proto-get f ':doc "")})
              (when (proto-get f ':required) (.append required fname)))
            (when (get spec "effect")
              (setv (get props "explanation") {"type" "string" "description" "why this action"})
              (.append required "explanation"))
            {"type" "function"
             "function" {"name" name
                         "description" (get spec "doc")
                         "parameters" {"type" "object" "properties" props "required" required}}})))

(defn _call-each [pairs #* args]
  "The text each (name function) of PAIRS returns for ARGS; a function that fails is skipped."
  (setv out [])
  (for [[name f] pairs]
    (try (setv text (f #* args))
         (when (and (isinstance text str) (.strip text)) (.append out text))
         (except [Exception])))
  out)

(defn with-call [message call]
  "MESSAGE (a result) marked with the tool CALL it answers, when there is one;
   the cascade sends the call and the result in the form the provider renders
   (see \"The conversation after a tool call\" in =cascade.org=). The calls of
   one answer share its =:answer=, and go out as one assistant turn."
  (if (and call (proto-get call ':id))
      (| message {CALL-KEY (| {"id" (str (proto-get call ':id))
                                "name" (str (proto-get call ':name))
                                "arguments" (str (or (proto-get call ':arguments) "{}"))}
                               (if (proto-get call ':said) {"said" (str (proto-get call ':said))} {})
                               (if (proto-get call ':answer) {"answer" (str (proto-get call ':answer))} {}))})
      message))

(defn _signal-message [signal]
  "The chat message that presents SIGNAL to the model."
  (setv payload (proto-get signal ':payload [])
        sensor (proto-get payload ':sensor))
  (if (= sensor ':tool-result)
      (with-call {"role" "user"
                  "content" (+ "Result of " (proto-print (proto-get payload ':action [])) ":\n"
                               (proto-print (proto-get payload ':result []))
                               (if (proto-get payload ':note) (+ "\n" (str (proto-get payload ':note))) ""))}
                 (proto-get payload ':call))
      {"role" "user" "content" (str (or (proto-get payload ':text) ""))}))

(defn _rejection-message [rejections]
  {"role" "user"
   "content" (+ "Your previous proposals were refused:\n"
                (.join "\n" (gfor r rejections
                                  (+ "- gate " (str (proto-get r ':gate)) ": " (str (proto-get r ':reason))
                                     " — proposed " (proto-print (proto-get r ':action []))))))})

(defn build-request [signal ctx [history None] [rejections None]]
  "The request plist for the cascade."
  (setv registry (context-runtime ctx "skills")
        belt (+ "Actions:\n" (tool-belt registry))
        prompt-skill (next (gfor s (all-skills registry)
                                 :if (and (get s "prompt") (get s "trigger")
                                          (try ((get s "trigger") ctx) (except [Exception] False)))
                                 s)
                           None)
        system (hy.I.passepartout/prompt.system-text
                 (hy.I.passepartout/prompt.prompt-sections signal ctx))
        messages (+ [{"role" "system" "content" system}]
                    (list (or history []))
                    [(_signal-message signal)]))
  (when prompt-skill
    (setv generated (_call-each [#((get prompt-skill "name") (get prompt-skill "prompt"))] ctx))
    (when generated
      (setv (get messages -1) {"role" "user" "content" (get generated 0)})))
  (when rejections
    (.append messages (_rejection-message rejections)))
  (setv notify (context-runtime ctx "notify"))
  ;; :text-protocol is what the cascade takes out of the system message when the
  ;; tools go natively: the model then reads them as tool definitions
  (+ [:messages messages :tools (tool-definitions registry) :signal signal :rejections (list (or rejections []))
      :text-protocol [TEXT-PROTOCOL belt]]
     (if notify [:notify notify] [])))

;; ** The person's own command

(defn own-command [signal]
  "True when SIGNAL is the person's own =!command=, or the result of one."
  (setv payload (proto-get signal ':payload [])
        sensor (proto-get payload ':sensor))
  (cond (= sensor ':user-input)
        (do (setv text (proto-get payload ':text))
            (and (isinstance text str) (.startswith (.lstrip text) "!")))
        (= sensor ':tool-result)
        (= (proto-get (proto-get payload ':action []) ':explanation) OWN-COMMAND)
        True False))

(defn :async think [signal ctx complete [history None] [rejections None]]
  "Ask the cascade (the function COMPLETE) for a proposal: (:status :ok :action A …),
   (:status :unreadable :error E :text T …) or the cascade's own failure. The
   person's own command is read by the built-in provider alone."
  (setv answer (if (own-command signal)
                   (symbolic-complete [:signal signal :rejections (list (or rejections []))])
                   (complete (build-request signal ctx history rejections))))
  (when (inspect.isawaitable answer)
    (setv answer (await answer)))
  (when (!= (proto-get answer ':status) ':ok)
    (return answer))
  (setv text (proto-get answer ':text)
        calls (proto-get answer ':tool-calls))
  (try
    (setv [action unrun said] (read-answer text calls (context-runtime ctx "skills"))
          ;; the call each action came from, which its result answers; the calls
          ;; of one answer name its first, so that their turns stay one answer
          batch (when (and calls (> (len calls) 1)) (proto-get (get calls 0) ':id))
          each (if (and calls (= (len calls) (+ 1 (len unrun))))
                   (lfor c calls (when (proto-get c ':id)
                                   (proto-merge c (+ (if said [:said said] [])
                                                     (if batch [:answer (str batch)] [])))))
                   [])
          call (when each (get each 0)))
    (proto-merge answer (+ [:action action]
                           (if call [:call call] [])
                           (if (any each) [:calls each] [])
                           (if said [:said said] [])
                           (if unrun [:unrun unrun :note (unrun-note unrun)] [])))
    (except [e ProtoError]
      (proto-merge answer [:status :unreadable :error (str e)
                           :text (cut (or text (proto-print (or calls []))) 2000)
                           :written (as-written text calls)]))))

;; * The retry loop

(defn _usage-add [total usage]
  (if (is-plist usage)
      (lfor [k v] (zip (cut total None None 2) (cut total 1 None 2))
            x [k (+ v (or (proto-get usage k) 0))] x)
      total))

(defn _redacted [value ctx]
  "VALUE with every secret in its strings replaced by a marker."
  (get (redact-value value (secret-tuple (proto-get ctx ':secrets))) 0))

(defn :async _verify-here [action ctx]
  (verify action ctx))

(defn :async reason [signal ctx complete [history None] [attempts 3] [guard None] [judge None]]
  "Think and verify until a proposal passes or ATTEMPTS are used. GUARD, when
   given, is asked before every model call with the usage so far; a reason it
   returns stops the loop (the budget). JUDGE runs the gates (verify here by default)."
  (setv rejections []
        tries []
        judge (or judge _verify-here)
        usage [:prompt-tokens 0 :completion-tokens 0 :cost 0.0])
  (for [n (range 1 (+ attempts 1))]
    (setv why (when guard (guard usage)))
    (when why
      (return [:verdict :stopped :reason why :attempts tries :usage usage :rejections rejections]))
    (setv thought (await (think signal ctx complete history rejections))
          status (proto-get thought ':status)
          usage (_usage-add usage (proto-get thought ':usage)))
    (cond
      (= status ':unreadable)
      (do (setv trace (_redacted [:gate "proto" :reason (+ "unreadable proposal: " (proto-get thought ':error))
                                  :action (or (proto-get thought ':written)
                                              [:answer (proto-get thought ':text)])]
                                 ctx))
          (.append rejections trace)
          (.append tries (+ [:attempt n :verdict :reject] trace)))
      (!= status ':ok)
      (return [:verdict :failed
               :reason (or (proto-get thought ':reason) "no provider answered")
               :attempts tries :usage usage :rejections rejections])
      True
      (do (setv proposed (+ [(proto-get thought ':action)] (list (or (proto-get thought ':unrun) [])))
                calls (or (proto-get thought ':calls) [])
                judged [])
          (defn :async judged-one [action]
            (setv outcome (await (judge action ctx))
                  rejected (= (proto-get outcome ':verdict) ':reject))
            ;; A refused proposal is only ever shown, never run: whatever secret it
            ;; carried is masked before it reaches the model, the person or the store.
            (when rejected (setv outcome (_redacted outcome ctx)))
            ;; a rejected attempt is kept whole; one that passed is an outcome
            ;; itself, so its attempt keeps only what replay judges again
            (.append tries (+ [:attempt n :provider (proto-get thought ':provider)]
                              (if rejected
                                  outcome
                                  [:verdict (proto-get outcome ':verdict) :gate (proto-get outcome ':gate)
                                   :reason (proto-get outcome ':reason) :proposed (proto-get outcome ':proposed)])))
            (.append judged (proto-merge outcome (if calls [:call (get calls (len judged))] [])))
            outcome)
          (for [[k action] (enumerate proposed)]
            (setv outcome (await (judged-one action)))
            (when (= (proto-get outcome ':verdict) ':reject)
              (.append rejections [:gate (proto-get outcome ':gate)
                                   :reason (proto-get outcome ':reason)
                                   :action (proto-get outcome ':action)])
              (continue))
            (setv call (if calls (get calls k) (proto-get thought ':call))
                  rest (list (cut proposed (+ k 1) None))
                  one (or (= (len proposed) 1) (_runs-alone outcome)))
            (await (_tell-said ctx (proto-get thought ':said)))
            (when (not one)
              (for [action rest] (await (judged-one action))))
            (return (proto-merge outcome (+ [:attempts tries :usage usage
                                             :provider (proto-get thought ':provider)]
                                            (if call [:call call] [])
                                            (cond (not one) [:batch judged]
                                                  rest [:unrun rest :note (unrun-note rest)]
                                                  True []))))))))
  [:verdict :refused :rejections rejections :attempts tries :usage usage])

(defn _runs-alone [outcome]
  "True when the passing OUTCOME is asked about (an escalation) or is the
   answer (a message): the rest of its answer is then not run."
  (or (= (proto-get outcome ':verdict) ':escalate)
      (= (proto-get (proto-get outcome ':action []) ':action) ':message)))

(defn :async _tell-said [ctx said]
  "Show the person SAID, the words the model wrote beside the call that passed."
  (setv notify (context-runtime ctx "notify"))
  (when (and said notify)
    (try (setv r (notify said))
         (when (inspect.isawaitable r) (await r))
         (except [Exception]))))

(defn refusal-text [outcome]
  "What to tell the person when every attempt was refused."
  (setv lines (lfor [i r] (enumerate (proto-get outcome ':rejections []) 1)
                    :setv a (proto-get r ':action [])
                    f"{i}. {(action-words a)} — refused by {(proto-get r ':gate)}: {(reason-words a (proto-get r ':reason))}"))
  (+ f"I could not find an action the gates accept after {(len lines)} attempts:\n"
     (.join "\n" lines)))
