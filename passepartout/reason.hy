;; * Why

"This is where the two engines meet. Think asks the provider cascade for one
proposed action; verify runs it past every gate. The model has no authority:
whatever it says is a proposal, parsed as data, and only a proposal that every
gate lets through reaches the act stage."

(import asyncio inspect json re
        passepartout.proto [ProtoError kw proto-get proto-put proto-has proto-without proto-merge
                            proto-read proto-print proto-normalize proto-from-data
                            is-plist Plist]
        passepartout.skills [actuator-for actuator-table gates-for all-skills registry-view]
        passepartout.context [context-runtime]
        passepartout.secrets [redact-value secret-tuple]
        passepartout.extract [extract ACTIONS]
        passepartout.wire [CALL-KEY]
        passepartout.display [action-words reason-words]
        passepartout.symbolic [OWN-COMMAND symbolic-complete]
        passepartout.verify [verify proposal-action])

;; * The keywords of a model's turn

(setv _ACTION (kw "action")
      _ANSWER (kw "answer")
      _ARGUMENTS (kw "arguments")
      _ATTEMPT (kw "attempt")
      _ATTEMPTS (kw "attempts")
      _BATCH (kw "batch")
      _CALL (kw "call")
      _CALLS (kw "calls")
      _COMPLETION-TOKENS (kw "completion-tokens")
      _COST (kw "cost")
      _DOC (kw "doc")
      _ERROR (kw "error")
      _ESCALATE (kw "escalate")
      _EXPLANATION (kw "explanation")
      _FAILED (kw "failed")
      _GATE (kw "gate")
      _ID (kw "id")
      _MESSAGE (kw "message")
      _MESSAGES (kw "messages")
      _NAME (kw "name")
      _NOTE (kw "note")
      _NOTIFY (kw "notify")
      _OK (kw "ok")
      _PAYLOAD (kw "payload")
      _PROMPT-TOKENS (kw "prompt-tokens")
      _PROPOSAL (kw "proposal")
      _PROPOSED (kw "proposed")
      _PROVIDER (kw "provider")
      _REASON (kw "reason")
      _REFUSED (kw "refused")
      _REJECT (kw "reject")
      _REJECTIONS (kw "rejections")
      _REQUIRED (kw "required")
      _RESULT (kw "result")
      _SAID (kw "said")
      _SECRETS (kw "secrets")
      _SENSOR (kw "sensor")
      _SIGNAL (kw "signal")
      _STATUS (kw "status")
      _STOPPED (kw "stopped")
      _TEXT (kw "text")
      _TEXT-PROTOCOL (kw "text-protocol")
      _TOOL-CALLS (kw "tool-calls")
      _TOOL-RESULT (kw "tool-result")
      _TOOLS (kw "tools")
      _TYPE (kw "type")
      _UNREADABLE (kw "unreadable")
      _UNRUN (kw "unrun")
      _USAGE (kw "usage")
      _USER-INPUT (kw "user-input")
      _VERDICT (kw "verdict")
      _WRITTEN (kw "written"))

;; * Parsing what the model said

(defn _known-actions [registry]
  (| ACTIONS (set (actuator-table registry))))

(defn read-answer [text [tool-calls None] [registry None]]
  "#(action unrun said) for the model's TEXT or TOOL-CALLS: the action to
   verify, the further actions of the same answer, and the words the model
   wrote beside its call (or None). The actions REGISTRY's skills add are known
   by name too. Raises ProtoError when it tried to propose one and failed."
  (setv r (extract text tool-calls (if registry (_known-actions registry) ACTIONS)))
  (if (proto-has r _MESSAGE)
      #([_ACTION _MESSAGE _TEXT (proto-get r _MESSAGE)] [] None)
      #((proposal-action (proto-get r _PROPOSAL))
        (lfor p (proto-get r _UNRUN) (proposal-action p))
        (proto-get r _SAID))))

(defn parse-answer [text [tool-calls None] [registry None]]
  "#(action unrun) for the model's TEXT or TOOL-CALLS: the action to verify and
   the further actions of the same answer that will not run (see read-answer).
   Raises ProtoError when it tried to propose one and failed."
  (cut (read-answer text tool-calls registry) 2))

(defn as-written [text tool-calls]
  "What the model wrote, as a plist to show it back when it does not read: its
   tool calls as it made them, or its text."
  (if tool-calls
      [_TOOL-CALLS (lfor c tool-calls [_NAME (str (proto-get c _NAME))
                                       _ARGUMENTS (str (or (proto-get c _ARGUMENTS) ""))])]
      [_ANSWER (cut (or text "") 2000)]))

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
                           (+ ":" (. (get schema i) name) " " (proto-get f _TYPE "any")
                              (if (proto-get f _REQUIRED) "" " (optional)")))))
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
                    (get props fname) {"type" (get json-types (proto-get f _TYPE "any"))
                                       "description" (proto-get f _DOC "")})
              (when (proto-get f _REQUIRED) (.append required fname)))
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
  (if (and call (proto-get call _ID))
      (| message {CALL-KEY (| {"id" (str (proto-get call _ID))
                                "name" (str (proto-get call _NAME))
                                "arguments" (str (or (proto-get call _ARGUMENTS) "{}"))}
                               (if (proto-get call _SAID) {"said" (str (proto-get call _SAID))} {})
                               (if (proto-get call _ANSWER) {"answer" (str (proto-get call _ANSWER))} {}))})
      message))

(defn _signal-message [signal]
  "The chat message that presents SIGNAL to the model."
  (setv payload (proto-get signal _PAYLOAD [])
        sensor (proto-get payload _SENSOR))
  (if (= sensor _TOOL-RESULT)
      (with-call {"role" "user"
                  "content" (+ "Result of " (proto-print (proto-get payload _ACTION [])) ":\n"
                               (proto-print (proto-get payload _RESULT []))
                               (if (proto-get payload _NOTE) (+ "\n" (str (proto-get payload _NOTE))) ""))}
                 (proto-get payload _CALL))
      {"role" "user" "content" (str (or (proto-get payload _TEXT) ""))}))

(defn _rejection-message [rejections]
  {"role" "user"
   "content" (+ "Your previous proposals were refused:\n"
                (.join "\n" (gfor r rejections
                                  (+ "- gate " (str (proto-get r _GATE)) ": " (str (proto-get r _REASON))
                                     " — proposed " (proto-print (proto-get r _ACTION []))))))})

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
  (+ [_MESSAGES messages _TOOLS (tool-definitions registry) _SIGNAL signal _REJECTIONS (list (or rejections []))
      _TEXT-PROTOCOL [TEXT-PROTOCOL belt]]
     (if notify [_NOTIFY notify] [])))

;; ** The person's own command

(defn own-command [signal]
  "True when SIGNAL is the person's own =!command=, or the result of one."
  (setv payload (proto-get signal _PAYLOAD [])
        sensor (proto-get payload _SENSOR))
  (cond (= sensor _USER-INPUT)
        (do (setv text (proto-get payload _TEXT))
            (and (isinstance text str) (.startswith (.lstrip text) "!")))
        (= sensor _TOOL-RESULT)
        (= (proto-get (proto-get payload _ACTION []) _EXPLANATION) OWN-COMMAND)
        True False))

(defn :async think [signal ctx complete [history None] [rejections None]]
  "Ask the cascade (the function COMPLETE) for a proposal: (:status :ok :action A …),
   (:status :unreadable :error E :text T …) or the cascade's own failure. The
   person's own command is read by the built-in provider alone."
  (setv answer (if (own-command signal)
                   (symbolic-complete [_SIGNAL signal _REJECTIONS (list (or rejections []))])
                   (complete (build-request signal ctx history rejections))))
  (when (inspect.isawaitable answer)
    (setv answer (await answer)))
  (when (!= (proto-get answer _STATUS) _OK)
    (return answer))
  (setv text (proto-get answer _TEXT)
        calls (proto-get answer _TOOL-CALLS))
  (try
    (setv [action unrun said] (read-answer text calls (context-runtime ctx "skills"))
          ;; the call each action came from, which its result answers; the calls
          ;; of one answer name its first, so that their turns stay one answer
          batch (when (and calls (> (len calls) 1)) (proto-get (get calls 0) _ID))
          each (if (and calls (= (len calls) (+ 1 (len unrun))))
                   (lfor c calls (when (proto-get c _ID)
                                   (proto-merge c (+ (if said [_SAID said] [])
                                                     (if batch [_ANSWER (str batch)] [])))))
                   [])
          call (when each (get each 0)))
    (proto-merge answer (+ [_ACTION action]
                           (if call [_CALL call] [])
                           (if (any each) [_CALLS each] [])
                           (if said [_SAID said] [])
                           (if unrun [_UNRUN unrun _NOTE (unrun-note unrun)] [])))
    (except [e ProtoError]
      (proto-merge answer [_STATUS _UNREADABLE _ERROR (str e)
                           _TEXT (cut (or text (proto-print (or calls []))) 2000)
                           _WRITTEN (as-written text calls)]))))

;; * The retry loop

(defn _usage-add [total usage]
  (if (is-plist usage)
      (lfor [k v] (zip (cut total None None 2) (cut total 1 None 2))
            x [k (+ v (or (proto-get usage k) 0))] x)
      total))

(defn _redacted [value ctx]
  "VALUE with every secret in its strings replaced by a marker."
  (get (redact-value value (secret-tuple (proto-get ctx _SECRETS))) 0))

(defn :async _verify-here [action ctx]
  (verify action ctx))

(defn :async reason [signal ctx complete [history None] [attempts 3] [guard None] [judge None]]
  "Think and verify until a proposal passes or ATTEMPTS are used. GUARD, when
   given, is asked before every model call with the usage so far; a reason it
   returns stops the loop (the budget). JUDGE runs the gates (verify here by default)."
  (setv rejections []
        tries []
        judge (or judge _verify-here)
        usage [_PROMPT-TOKENS 0 _COMPLETION-TOKENS 0 _COST 0.0])
  (for [n (range 1 (+ attempts 1))]
    (setv why (when guard (guard usage)))
    (when why
      (return [_VERDICT _STOPPED _REASON why _ATTEMPTS tries _USAGE usage _REJECTIONS rejections]))
    (setv thought (await (think signal ctx complete history rejections))
          status (proto-get thought _STATUS)
          usage (_usage-add usage (proto-get thought _USAGE)))
    (cond
      (= status _UNREADABLE)
      (do (setv trace (_redacted [_GATE "proto" _REASON (+ "unreadable proposal: " (proto-get thought _ERROR))
                                  _ACTION (or (proto-get thought _WRITTEN)
                                              [_ANSWER (proto-get thought _TEXT)])]
                                 ctx))
          (.append rejections trace)
          (.append tries (+ [_ATTEMPT n _VERDICT _REJECT] trace)))
      (!= status _OK)
      (return [_VERDICT _FAILED
               _REASON (or (proto-get thought _REASON) "no provider answered")
               _ATTEMPTS tries _USAGE usage _REJECTIONS rejections])
      True
      (do (setv proposed (+ [(proto-get thought _ACTION)] (list (or (proto-get thought _UNRUN) [])))
                calls (or (proto-get thought _CALLS) [])
                judged [])
          (defn :async judged-one [action]
            (setv outcome (await (judge action ctx))
                  rejected (= (proto-get outcome _VERDICT) _REJECT))
            ;; A refused proposal is only ever shown, never run: whatever secret it
            ;; carried is masked before it reaches the model, the person or the store.
            (when rejected (setv outcome (_redacted outcome ctx)))
            ;; a rejected attempt is kept whole; one that passed is an outcome
            ;; itself, so its attempt keeps only what replay judges again
            (.append tries (+ [_ATTEMPT n _PROVIDER (proto-get thought _PROVIDER)]
                              (if rejected
                                  outcome
                                  [_VERDICT (proto-get outcome _VERDICT) _GATE (proto-get outcome _GATE)
                                   _REASON (proto-get outcome _REASON) _PROPOSED (proto-get outcome _PROPOSED)])))
            (.append judged (proto-merge outcome (if calls [_CALL (get calls (len judged))] [])))
            outcome)
          (for [[k action] (enumerate proposed)]
            (setv outcome (await (judged-one action)))
            (when (= (proto-get outcome _VERDICT) _REJECT)
              (.append rejections [_GATE (proto-get outcome _GATE)
                                   _REASON (proto-get outcome _REASON)
                                   _ACTION (proto-get outcome _ACTION)])
              (continue))
            (setv call (if calls (get calls k) (proto-get thought _CALL))
                  rest (list (cut proposed (+ k 1) None))
                  one (or (= (len proposed) 1) (_runs-alone outcome)))
            (await (_tell-said ctx (proto-get thought _SAID)))
            (when (not one)
              (for [action rest] (await (judged-one action))))
            (return (proto-merge outcome (+ [_ATTEMPTS tries _USAGE usage
                                             _PROVIDER (proto-get thought _PROVIDER)]
                                            (if call [_CALL call] [])
                                            (cond (not one) [_BATCH judged]
                                                  rest [_UNRUN rest _NOTE (unrun-note rest)]
                                                  True []))))))))
  [_VERDICT _REFUSED _REJECTIONS rejections _ATTEMPTS tries _USAGE usage])

(defn _runs-alone [outcome]
  "True when the passing OUTCOME is asked about (an escalation) or is the
   answer (a message): the rest of its answer is then not run."
  (or (= (proto-get outcome _VERDICT) _ESCALATE)
      (= (proto-get (proto-get outcome _ACTION []) _ACTION) _MESSAGE)))

(defn :async _tell-said [ctx said]
  "Show the person SAID, the words the model wrote beside the call that passed."
  (setv notify (context-runtime ctx "notify"))
  (when (and said notify)
    (try (setv r (notify said))
         (when (inspect.isawaitable r) (await r))
         (except [Exception]))))

(defn refusal-text [outcome]
  "What to tell the person when every attempt was refused."
  (setv lines (lfor [i r] (enumerate (proto-get outcome _REJECTIONS []) 1)
                    :setv a (proto-get r _ACTION [])
                    f"{i}. {(action-words a)} — refused by {(proto-get r ':gate)}: {(reason-words a (proto-get r ':reason))}"))
  (+ f"I could not find an action the gates accept after {(len lines)} attempts:\n"
     (.join "\n" lines)))
