(import json re time
        passepartout.proto [ProtoError kw proto-get proto-put proto-has proto-without proto-merge
                            proto-read proto-print proto-normalize proto-from-data
                            is-plist]
        passepartout.skills [actuator-for actuator-table skill-functions all-skills registry-view]
        passepartout.secrets [redact-value secret-tuple])

(setv VERDICTS #{"allow" "modify" "reject" "escalate"}
      GATE-BUDGET 0.25)

(defn verdict [kind [reason None] #** more]
  "A verdict plist: (verdict \"reject\" \"outside the workspace\")."
  (setv out [:verdict (kw kind)])
  (when reason (+= out [:reason reason]))
  (for [[k v] (.items more)] (+= out [(kw (.replace k "_" "-")) v]))
  out)

(defn _check-verdict [answer]
  "ANSWER as (kind reason new-action rule), or raise ValueError saying what is wrong."
  (when (not (is-plist answer))
    (raise (ValueError f"returned {(. (type answer) __name__)}, not a verdict plist")))
  ;; One pass over the pairs (the first of a repeated key wins, as in proto-get).
  (setv fields (dict (zip (gfor k (cut answer -2 None -2) k.name) (cut answer -1 None -2)))
        v (.get fields "verdict")
        kind (if (isinstance v hy.models.Keyword) v.name v)
        reason (.get fields "reason")
        rule (.get fields "rule"))
  (when (not (in kind VERDICTS))
    (raise (ValueError f"returned verdict {v !r}")))
  (when (and (in kind #("reject" "escalate")) (not (and (isinstance reason str) (.strip reason))))
    (raise (ValueError f"returned {kind} without a reason")))
  (setv new (.get fields "action"))
  (when (and (= kind "modify") (not (and (is-plist new) (proto-get new ':action))))
    (raise (ValueError "returned modify without a new action")))
  #(kind reason new rule))

(setv AUTHORITY-FIELDS
      (sfor n ["approved" "approval" "approved-by" "approver" "hitl-token" "hitl-approved"
               "hitl" "authorized" "authorization" "pre-approved" "auto-approve"
               "skip-gates" "bypass-gates" "trusted" "verdict"]
            (kw n)))

(defn strip-authority [action]
  "ACTION without any field that claims approval, and the names of those removed."
  (setv found (lfor k (cut action None None 2) :if (in k AUTHORITY-FIELDS) k.name))
  #((if found (proto-without action AUTHORITY-FIELDS) action) found))

(setv _type-checks
      {"string" (fn [v] (isinstance v str))
       "integer" (fn [v] (and (isinstance v int) (not (isinstance v bool))))
       "number" (fn [v] (and (isinstance v #(int float)) (not (isinstance v bool))))
       "boolean" (fn [v] (isinstance v bool))
       "keyword" (fn [v] (isinstance v hy.models.Keyword))
       "list" (fn [v] (isinstance v list))
       "plist" (fn [v] (is-plist v))
       "any" (fn [v] True)})

(defn check-schema [action]
  "None when ACTION fits its actuator's schema, else the reason it does not."
  (when (not (is-plist action))
    (return "an action must be a plist of keyword/value pairs"))
  (setv name (proto-get action ':action))
  (when (not (isinstance name hy.models.Keyword))
    (return "the action has no :action keyword (e.g. :action :message)"))
  (setv spec (actuator-for name))
  (when (is spec None)
    (setv known (.join ", " (gfor a (sorted (actuator-table)) (+ ":" a))))
    (return f"unknown action :{name.name}; known actions: {known}"))
  (setv schema (get spec "schema"))
  (for [i (range 0 (len schema) 2)]
    (setv field (get schema i)
          fspec (get schema (+ i 1))
          t (proto-get fspec ':type "any")
          present (proto-has action field)
          value (proto-get action field))
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
        (isinstance v hy.models.Keyword) "keyword"
        (isinstance v str) "string"
        (isinstance v int) "integer"
        (isinstance v float) "number"
        True "list"))

(defn _decision [gate kind [reason None] [rule None]]
  (+ [:gate gate :verdict (kw kind)]
     (if reason [:reason reason] [])
     (if rule [:rule rule] [])))

(defn verify [action ctx [gates None] [clock time.perf-counter]]
  "The outcome of running the gates over ACTION in CTX."
  (setv gates (if (is gates None) (skill-functions "gate") gates)
        proposed action
        stripped [])
  (when (is-plist action)
    (setv [action stripped] (strip-authority action)))
  (setv problem (check-schema action)
        decisions [(_decision "schema" (if problem "reject" "allow") problem)])
  (defn outcome [kind gate reason [final None] [rule None]]
    (+ [:verdict (kw kind) :gate gate :reason reason :action (if (is final None) action final)
        :proposed proposed :stripped stripped :decisions decisions]
       (if rule [:rule rule] [])))
  (when problem
    (return (outcome "reject" "schema" problem)))
  (setv escalation None
        modified None)
  (for [[name gate] gates]
    (setv started (clock))
    (try
      (setv [kind reason new rule] (_check-verdict (gate action ctx)))
      (when (> (- (clock) started) GATE-BUDGET)
        (raise (TimeoutError f"took longer than {GATE-BUDGET} s")))
      (except [e Exception]
        (setv reason f"gate {name} failed closed: {(. (type e) __name__)}: {e}")
        (.append decisions (_decision name "reject" reason))
        (return (outcome "reject" name reason))))
    (.append decisions (_decision name kind reason rule))
    (cond
      (= kind "reject") (return (outcome "reject" name reason None rule))
      (= kind "escalate") (when (is escalation None) (setv escalation #(name reason rule)))
      (= kind "modify")
      (do (setv [new _] (strip-authority new)
                problem (check-schema new))
          (when problem
            (setv reason f"gate {name} modified the action into an invalid one: {problem}")
            (.append decisions (_decision name "reject" reason))
            (return (outcome "reject" name reason)))
          (setv action new
                modified #(name reason rule)))))
  (cond escalation (outcome "escalate" (get escalation 0) (get escalation 1)
                            :rule (get escalation 2))
        modified (outcome "modify" (get modified 0) (get modified 1) :rule (get modified 2))
        True (outcome "allow" None None)))

(setv _fence-re (re.compile r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?```" re.S)
      MAX-PROPOSAL-BYTES 65536)

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

(defn _from-json [data]
  "The action plist of a decoded JSON object DATA."
  (when (not (isinstance data dict))
    (raise (ProtoError "a JSON proposal must be an object")))
  (setv function (.get data "function"))
  (cond
    (and (isinstance function dict) (in "name" function))
    (_from-call (get function "name") (.get function "arguments" {}))
    (and (in "name" data) (in "arguments" data) (not (in "action" data)))
    (_from-call (get data "name") (get data "arguments"))
    (and (isinstance (.get data "tool_calls") list) (get data "tool_calls"))
    (_from-json (get data "tool_calls" 0))
    True (proposal-action (proto-normalize (proto-from-data data)))))

(defn _from-call [name arguments]
  "The action plist of a function call NAME with ARGUMENTS (a dict or JSON text)."
  (when (isinstance arguments str)
    (when (> (len arguments) MAX-PROPOSAL-BYTES)
      (raise (ProtoError "tool-call arguments too large")))
    (try (setv arguments (if (.strip arguments) (json.loads arguments) {}))
         (except [e ValueError]
           (raise (ProtoError f"tool-call arguments are not JSON: {e}")))))
  (when (not (isinstance arguments dict))
    (raise (ProtoError "tool-call arguments must be an object")))
  (when (not (and (isinstance name str) (re.fullmatch r"[A-Za-z0-9_-]+" name)))
    (raise (ProtoError f"tool name {name !r} is not a name")))
  (setv fields (proto-normalize (proto-from-data arguments)))
  (proto-put (proto-without fields [':action])
             ':action (kw (.replace (.lower name) "_" "-"))))

(defn parse-proposal [text [tool-calls None]]
  "The action plist the model proposed, from its TEXT or its TOOL-CALLS.
   Raises ProtoError when it tried to propose one and failed."
  (when tool-calls
    (setv call (get tool-calls 0))
    (return (_from-call (proto-get call ':name) (proto-get call ':arguments))))
  (setv text (or text "")
        stripped (.strip text)
        fence (.search _fence-re stripped))
  (when (and fence (.startswith (.strip (.group fence 1)) #("(" "{")))
    (setv stripped (.strip (.group fence 1))))
  (cond
    (.startswith stripped "(")
    (proposal-action (proto-normalize (proto-read stripped)))
    (.startswith stripped "{")
    (do (when (> (len stripped) MAX-PROPOSAL-BYTES)
          (raise (ProtoError "JSON proposal too large")))
        (try (setv data (json.loads stripped))
             (except [e ValueError]
               (raise (ProtoError f"not valid JSON: {e}"))))
        (_from-json data))
    True [:action :message :text text]))

(setv IDENTITY "You are Passepartout, a personal agent. You act only by proposing one action at a time; deterministic gates check every proposal before it runs, and a person approves what they escalate.")

(setv RULES "Answer with exactly one action, as a plist such as (:action :shell :cmd \"ls -la\" :explanation \"list the workspace\") or as a tool call. To answer the person, use (:action :message :text \"…\"). Every action that changes anything needs an :explanation. If a proposal is refused, the reason is given: propose something acceptable instead, or explain to the person.")

(defn tool-belt []
  "The registered actions and their fields, as prompt text."
  (registry-view "tool-belt" _tool-belt))

(defn _tool-belt []
  (setv lines [])
  (for [[name spec] (sorted (.items (actuator-table)))]
    (setv schema (get spec "schema")
          fields (lfor i (range 0 (len schema) 2)
                       (do (setv f (get schema (+ i 1)))
                           (+ ":" (. (get schema i) name) " " (proto-get f ':type "any")
                              (if (proto-get f ':required) "" " (optional)")))))
    (.append lines (+ "(:action :" name " " (.join " " fields) ") — " (get spec "doc"))))
  (.join "\n" lines))

(defn tool-definitions []
  "The registered actions as OpenAI-format tool definitions (a fresh copy
   each time: a model client may change what it is given)."
  (json.loads (registry-view "tool-definitions" (fn [] (json.dumps (_tool-definitions))))))

(defn _tool-definitions []
  (setv json-types {"string" "string" "integer" "integer" "number" "number"
                    "boolean" "boolean" "list" "array" "keyword" "string"
                    "plist" "object" "any" "string"})
  (lfor [name spec] (sorted (.items (actuator-table)))
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

(defn _signal-message [signal]
  "The chat message that presents SIGNAL to the model."
  (setv payload (proto-get signal ':payload [])
        sensor (proto-get payload ':sensor))
  (if (= sensor (kw "tool-result"))
      {"role" "user"
       "content" (+ "Result of " (proto-print (proto-get payload ':action [])) ":\n"
                    (proto-print (proto-get payload ':result [])))}
      {"role" "user" "content" (str (or (proto-get payload ':text) ""))}))

(defn _rejection-message [rejections]
  {"role" "user"
   "content" (+ "Your previous proposals were refused:\n"
                (.join "\n" (gfor r rejections
                                  (+ "- gate " (str (proto-get r ':gate)) ": " (str (proto-get r ':reason))
                                     " — proposed " (proto-print (proto-get r ':action []))))))})

(defn build-request [signal ctx [history None] [rejections None]]
  "The request plist for the cascade."
  (setv augments (_call-each (skill-functions "augment") ctx)
        prompt-skill (next (gfor s (all-skills)
                                 :if (and (get s "prompt") (get s "trigger")
                                          (try ((get s "trigger") ctx) (except [Exception] False)))
                                 s)
                           None)
        system (.join "\n\n" (+ [IDENTITY RULES (+ "Actions:\n" (tool-belt))
                                 f"Workspace: {(proto-get ctx ':workspace)}"]
                                augments))
        messages (+ [{"role" "system" "content" system}]
                    (list (or history []))
                    [(_signal-message signal)]))
  (when prompt-skill
    (setv generated (_call-each [#((get prompt-skill "name") (get prompt-skill "prompt"))] ctx))
    (when generated
      (setv (get messages -1) {"role" "user" "content" (get generated 0)})))
  (when rejections
    (.append messages (_rejection-message rejections)))
  [:messages messages :tools (tool-definitions) :signal signal :rejections (list (or rejections []))])

(defn think [signal ctx complete [history None] [rejections None]]
  "Ask the cascade (the function COMPLETE) for a proposal: (:status :ok :action A …),
   (:status :unreadable :error E :text T …) or the cascade's own failure."
  (setv answer (complete (build-request signal ctx history rejections)))
  (when (!= (proto-get answer ':status) (kw "ok"))
    (return answer))
  (setv text (proto-get answer ':text)
        calls (proto-get answer ':tool-calls))
  (try
    (proto-merge answer [:action (parse-proposal text calls)])
    (except [e ProtoError]
      (proto-merge answer [:status :unreadable :error (str e)
                           :text (cut (or text (proto-print (or calls []))) 2000)]))))

(defn _usage-add [total usage]
  (if (is-plist usage)
      (lfor [k v] (zip (cut total None None 2) (cut total 1 None 2))
            x [k (+ v (or (proto-get usage k) 0))] x)
      total))

(defn _redacted [value ctx]
  "VALUE with every secret in its strings replaced by a marker."
  (get (redact-value value (secret-tuple (proto-get ctx ':secrets))) 0))

(defn reason [signal ctx complete [history None] [attempts 3] [guard None]]
  "Think and verify until a proposal passes or ATTEMPTS are used. GUARD, when
   given, is asked before every model call with the usage so far; a reason it
   returns stops the loop (the budget)."
  (setv rejections []
        tries []
        usage [:prompt-tokens 0 :completion-tokens 0 :cost 0.0])
  (for [n (range 1 (+ attempts 1))]
    (setv why (when guard (guard usage)))
    (when why
      (return [:verdict :stopped :reason why :attempts tries :usage usage :rejections rejections]))
    (setv thought (think signal ctx complete history rejections)
          status (proto-get thought ':status)
          usage (_usage-add usage (proto-get thought ':usage)))
    (cond
      (= status (kw "unreadable"))
      (do (setv trace (_redacted [:gate "proto" :reason (+ "unreadable proposal: " (proto-get thought ':error))
                                  :action [:action :message :text (proto-get thought ':text)]]
                                 ctx))
          (.append rejections trace)
          (.append tries (+ [:attempt n :verdict :reject] trace)))
      (!= status (kw "ok"))
      (return [:verdict :failed
               :reason (or (proto-get thought ':reason) "no provider answered")
               :attempts tries :usage usage :rejections rejections])
      True
      (do (setv outcome (verify (proto-get thought ':action) ctx)
                rejected (= (proto-get outcome ':verdict) (kw "reject")))
          ;; A refused proposal is only ever shown, never run: whatever secret it
          ;; carried is masked before it reaches the model, the person or the store.
          (when rejected (setv outcome (_redacted outcome ctx)))
          (.append tries (+ [:attempt n :provider (proto-get thought ':provider)] outcome))
          (if rejected
              (.append rejections [:gate (proto-get outcome ':gate)
                                   :reason (proto-get outcome ':reason)
                                   :action (proto-get outcome ':action)])
              (return (proto-merge outcome [:attempts tries :usage usage
                                            :provider (proto-get thought ':provider)]))))))
  [:verdict :refused :rejections rejections :attempts tries :usage usage])

(defn refusal-text [outcome]
  "What to tell the person when every attempt was refused."
  (setv lines (lfor [i r] (enumerate (proto-get outcome ':rejections []) 1)
                    f"{i}. {(proto-print (proto-get r ':action []))} — refused by {(proto-get r ':gate)}: {(proto-get r ':reason)}"))
  (+ f"I could not find an action the gates accept after {(len lines)} attempts:\n"
     (.join "\n" lines)))
