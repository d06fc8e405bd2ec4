;; Tests of passepartout/reason.hy: parsing, thinking, the retry loop.

(import pytest time
        passepartout.proto [kw proto-get proto-read proto-print ProtoError]
        passepartout.skills [Registry make-skill register-skill]
        passepartout.verify [verify]
        passepartout.reason [parse-proposal reason think build-request tool-belt tool-definitions refusal-text]
        steps [run expect V context-of registry ctx gate-skill])

;; * Parsing

(defn test-parse-plist-forms []
  (setv want [:action :shell :cmd "ls" :explanation "x"])
  (for [text ["(:action :shell :cmd \"ls\" :explanation \"x\")"
              "(:TYPE :REQUEST :PAYLOAD (:ACTION :SHELL :CMD \"ls\" :EXPLANATION \"x\"))"
              "Here it is:\n```lisp\n(:action :shell :cmd \"ls\" :explanation \"x\")\n```"
              "  (:type :request :payload (:action :shell :cmd \"ls\" :explanation \"x\"))  "]]
    (expect (parse-proposal text) want f"parse of {text !r}")))

(defn test-parse-json-forms []
  (setv want [:action :shell :cmd "ls" :explanation "x"])
  (for [text ["{\"action\": \"shell\", \"cmd\": \"ls\", \"explanation\": \"x\"}"
              "{\"type\": \"request\", \"payload\": {\"action\": \"shell\", \"cmd\": \"ls\", \"explanation\": \"x\"}}"
              "{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\", \"explanation\": \"x\"}}"
              "{\"function\": {\"name\": \"shell\", \"arguments\": \"{\\\"cmd\\\": \\\"ls\\\", \\\"explanation\\\": \\\"x\\\"}\"}}"
              "```json\n{\"action\": \"shell\", \"cmd\": \"ls\", \"explanation\": \"x\"}\n```"]]
    (setv got (parse-proposal text))
    (expect (proto-get got ':action) (kw "shell") f"action of {text !r}")
    (expect (proto-get got ':cmd) "ls" f"cmd of {text !r}")))

(defn test-parse-tool-calls []
  (setv got (parse-proposal None [[:name "read_file" :arguments "{\"path\": \"a.txt\"}"]]))
  (expect (proto-get got ':action) (kw "read-file") "action")
  (expect (proto-get got ':path) "a.txt" "path"))

(defn test-plain-text-is-a-message []
  (expect (parse-proposal "Hello there.") [:action :message :text "Hello there."] "message"))

(defn test-broken-proposals-raise []
  (for [text ["(:action :shell :cmd \"ls\"" "{\"action\": " "(:action :shell :cmd ls)"
              "(1 2 3)" "{\"name\": \"a b\", \"arguments\": {}}" "{\"arguments\": 5, \"name\": \"x\"}"
              (+ "(" (* "(" 100) ")")]]
    (with [e (pytest.raises ProtoError)]
      (parse-proposal text))))

;; * Think and the retry loop

(defn scripted [answers]
  "A cascade that answers each request with the next of ANSWERS, and keeps the requests."
  (setv requests []
        it (iter answers))
  (defn complete [request]
    (.append requests request)
    (setv a (next it))
    (if (isinstance a str)
        [:status :ok :provider "script" :text a :usage [:prompt-tokens 10 :completion-tokens 5 :cost 0.001]]
        a))
  #(complete requests))

(setv SIGNAL [:type :event :session "test" :source [:gateway :terminal]
              :payload [:sensor :user-input :text "list the files"]])

(defn test-think-builds-the-prompt-from-the-registry [registry ctx]
  (setv [complete requests] (scripted ["(:action :message :text \"hi\")"]))
  (setv out (run (think SIGNAL ctx complete)))
  (expect (proto-get out ':action) [:action :message :text "hi"] "action")
  (setv messages (proto-get (get requests 0) ':messages)
        system (get messages 0 "content"))
  (assert (in "(:action :shell :cmd string :timeout integer (optional) :explanation string)" system) system)
  (assert (in "{\"action\": \"shell\"" system) "the prompt shows the JSON form too")
  (expect (get messages -1) {"role" "user" "content" "list the files"} "last message")
  (expect (sorted (gfor t (proto-get (get requests 0) ':tools) (get t "function" "name")))
          ["message" "shell"] "tool definitions"))

(defn test-the-request-carries-the-steps-notify [registry ctx]
  (setv [complete requests] (scripted ["(:action :message :text \"hi\")" "(:action :message :text \"hi\")"])
        heard [])
  (run (think SIGNAL (context-of registry :notify heard.append) complete))
  (run (think SIGNAL ctx complete))
  (expect (proto-get (get requests 0) ':notify) heard.append "the notify of a step that has one")
  (assert (not (in ':notify (get requests 1))) f"no notify, no :notify key: {(get requests 1)}"))

(defn test-retry-carries-the-rejection-trace [registry ctx]
  (gate-skill registry "no-rm" 50 (fn [a c] (if (in "rm" (or (proto-get a ':cmd) ""))
                                                 [:verdict :reject :reason "rm is not allowed"]
                                                 [:verdict :allow])))
  (setv [complete requests]
        (scripted ["(:action :shell :cmd \"rm x\" :explanation \"clean\")"
                   "(:action :shell :cmd \"ls\" :explanation \"look\")"]))
  (setv out (run (reason SIGNAL ctx complete)))
  (expect (V out) "allow" "verdict")
  (expect (len requests) 2 "model calls")
  (setv trace (get (proto-get (get requests 1) ':rejections) 0))
  (expect (proto-get trace ':gate) "no-rm" "trace gate")
  (expect (proto-get trace ':reason) "rm is not allowed" "trace reason")
  (expect (proto-get (proto-get trace ':action) ':cmd) "rm x" "trace action")
  (assert (in "rm is not allowed" (get (proto-get (get requests 1) ':messages) -1 "content"))
          "the model is told why")
  (expect (proto-get (proto-get out ':usage) ':prompt-tokens) 20 "usage summed over attempts"))

(defn test-three-rejections-tell-the-person [registry ctx]
  (gate-skill registry "never" 50 (fn [a c] [:verdict :reject :reason "not today"]))
  (setv [complete requests] (scripted (* ["(:action :shell :cmd \"ls\" :explanation \"x\")"] 5)))
  (setv out (run (reason SIGNAL ctx complete)))
  (expect (V out) "refused" "verdict")
  (expect (len requests) 3 "attempts")
  (expect (len (proto-get out ':rejections)) 3 "rejections")
  (setv text (refusal-text out))
  (assert (and (in "not today" text) (in "never" text) (in "3 attempts" text)) text))

(defn test-garbage-is-a-rejection-with-a-retry [registry ctx]
  (setv [complete requests] (scripted ["(:action :shell :cmd" "(:action :message :text \"ok\")"]))
  (setv out (run (reason SIGNAL ctx complete)))
  (expect (V out) "allow" "verdict")
  (setv first-try (get (proto-get out ':attempts) 0))
  (expect (proto-get first-try ':gate) "proto" "first attempt's gate")
  (assert (in "unreadable" (proto-get first-try ':reason)) (proto-get first-try ':reason)))

(defn test-cascade-failure-is-reported [registry ctx]
  (setv [complete requests] (scripted [[:status :failed :reason "all providers failed: p1 timeout"]]))
  (setv out (run (reason SIGNAL ctx complete)))
  (expect (V out) "failed" "verdict")
  (assert (in "p1 timeout" (proto-get out ':reason)) (proto-get out ':reason)))

;; * Several actions in one answer

(defn test-every-action-of-an-answer-is-judged-in-order [registry ctx]
  (gate-skill registry "no-pwd" 50 (fn [a c] (if (= (proto-get a ':cmd) "pwd")
                                               [:verdict :reject :reason "not here"]
                                               [:verdict :allow])))
  (setv [complete requests]
        (scripted ["<tool_call>{\"name\": \"shell\", \"arguments\": {\"cmd\": \"ls\", \"explanation\": \"x\"}}</tool_call>\n<tool_call>{\"name\": \"shell\", \"arguments\": {\"cmd\": \"pwd\"}}</tool_call>"]))
  (setv out (run (reason SIGNAL ctx complete)))
  (expect (V out) "allow" "verdict")
  (expect (proto-get (proto-get out ':action) ':cmd) "ls" "the first action")
  (expect (proto-get out ':unrun) None "no action is left unrun")
  (setv batch (proto-get out ':batch))
  (expect (lfor e batch (proto-get (proto-get e ':action) ':cmd)) ["ls" "pwd"] "the batch, in order")
  (expect (lfor e batch (V e)) ["allow" "reject"] "each with its own verdict"))

(defn test-an-escalation-runs-alone-and-the-rest-are-not-run [registry ctx]
  (gate-skill registry "ask" 50 (fn [a c] (if (= (proto-get a ':cmd) "rm x")
                                              [:verdict :escalate :reason "it deletes"]
                                              [:verdict :allow])))
  (setv [complete requests]
        (scripted ["{\"action\": \"shell\", \"cmd\": \"rm x\", \"explanation\": \"clean\"}\n{\"action\": \"shell\", \"cmd\": \"ls\", \"explanation\": \"look\"}"]))
  (setv out (run (reason SIGNAL ctx complete)))
  (expect (V out) "escalate" "verdict")
  (expect (proto-get out ':batch) None "no batch")
  (expect (len (proto-get out ':unrun)) 1 "actions not run")
  (assert (in "ls" (proto-get out ':note)) (proto-get out ':note)))

;; * With the daemon's own secrets in the context, as in every real deployment

(defn secret-ctx [ctx]
  "CTX with the daemon's secrets in it."
  (+ ctx [:secrets ["abcdefgh12345678" "sk-live-0123456789abcdef"]]))

(defn test-a-refusal-with-secrets-present-is-redacted-not-a-crash [registry ctx]
  (gate-skill registry "never" 50 (fn [a c] [:verdict :reject :reason "not today"]))
  (setv [complete requests]
        (scripted (* ["(:action :shell :cmd \"echo abcdefgh12345678\" :explanation \"x\")"] 3)))
  (setv out (run (reason SIGNAL (secret-ctx ctx) complete)))
  (expect (V out) "refused" "verdict")
  (setv shown (proto-print (proto-get out ':rejections)))
  (assert (not (in "abcdefgh12345678" shown)) f"the refused proposal keeps the secret: {shown}")
  (assert (in "[redacted" shown) f"no redaction marker: {shown}"))

(defn test-an-unreadable-answer-with-secrets-present-is-a-retry [registry ctx]
  (setv [complete requests]
        (scripted ["(:action :shell :cmd \"abcdefgh12345678" "(:action :message :text \"ok\")"]))
  (setv out (run (reason SIGNAL (secret-ctx ctx) complete)))
  (expect (V out) "allow" "verdict")
  (setv first-try (proto-print (get (proto-get out ':attempts) 0)))
  (assert (not (in "abcdefgh12345678" first-try)) f"the unreadable answer keeps the secret: {first-try}"))

;; * A model that answers later, gates that judge elsewhere

(defn test-a-model-that-answers-with-a-coroutine-is-awaited [registry ctx]
  (setv requests [])
  (defn :async complete [request]
    (.append requests request)
    (await (hy.I.asyncio.sleep 0))
    [:status :ok :provider "later" :text "(:action :shell :cmd \"ls\" :explanation \"look\")"])
  (setv out (run (reason SIGNAL ctx complete)))
  (expect (V out) "allow" "verdict")
  (expect (proto-get out ':provider) "later" "who answered")
  (expect (len requests) 1 "model calls"))

(defn test-reason-acts-on-the-verdicts-of-the-judge-it-is-given [registry ctx]
  (setv judged [])
  (defn :async judge [action c]
    (.append judged #(action c))
    (if (= (len judged) 1)
        [:verdict :reject :gate "elsewhere" :reason "judged elsewhere" :action action]
        (verify action c)))
  (setv [complete requests]
        (scripted ["(:action :shell :cmd \"rm x\" :explanation \"clean\")"
                   "(:action :shell :cmd \"ls\" :explanation \"look\")"]))
  (setv out (run (reason SIGNAL ctx complete :judge judge)))
  (expect (V out) "allow" "verdict")
  (expect (lfor [a c] judged (proto-get a ':cmd)) ["rm x" "ls"] "what the judge was given")
  (assert (all (gfor [a c] judged (is c ctx))) "the judge is given the step's context")
  (setv trace (get (proto-get (get requests 1) ':rejections) 0))
  (expect (proto-get trace ':gate) "elsewhere" "the judge's gate, in the trace")
  (expect (proto-get trace ':reason) "judged elsewhere" "the judge's reason, in the trace"))

;; * Several calls, words beside a call, calls that do not read

(defn test-an-unknown-tool-first-does-not-keep-a-valid-one-from-running [registry ctx]
  (setv [complete requests]
        (scripted [[:status :ok :provider "script" :text None
                    :tool-calls [[:name "teleport" :arguments "{\"to\": \"mars\"}" :id "call_1"]
                                 [:name "shell" :arguments "{\"cmd\": \"ls\", \"explanation\": \"look\"}" :id "call_2"]
                                 [:name "shell" :arguments "{\"cmd\": \"pwd\", \"explanation\": \"where\"}" :id "call_3"]]]]))
  (setv out (run (reason SIGNAL ctx complete)))
  (expect (V out) "allow" "verdict")
  (expect (len requests) 1 "one model call")
  (expect (proto-get (proto-get out ':action) ':cmd) "ls" "the valid call runs")
  (expect (proto-get (proto-get out ':call) ':id) "call_2" "its result answers its own call")
  (setv first-try (get (proto-get out ':attempts) 0))
  (expect (V first-try) "reject" "the unknown tool has its own verdict")
  (setv batch (proto-get out ':batch))
  (expect (lfor e batch (V e)) ["reject" "allow" "allow"] "every call judged, in order")
  (expect (lfor e batch (proto-get (proto-get e ':call) ':id)) ["call_1" "call_2" "call_3"]
          "each with the call it came from")
  (expect (len (sfor e batch (proto-get (proto-get e ':call) ':answer))) 1 "the calls name one answer"))

(defn test-a-call-whose-arguments-do-not-read-is-shown-back-as-it-was [registry ctx]
  (setv [complete requests]
        (scripted [[:status :ok :provider "script" :text None
                    :tool-calls [[:name "shell" :arguments "{\"cmd\": \"ls" :id "call_1"]]]
                   "(:action :message :text \"ok\")"]))
  (setv out (run (reason SIGNAL ctx complete)))
  (expect (V out) "allow" "verdict")
  (setv told (get (proto-get (get requests 1) ':messages) -1 "content"))
  (assert (in ":tool-calls" told) f"the model is shown its call: {told}")
  (assert (in "{\\\"cmd\\\": \\\"ls" told) f"with its arguments as written: {told}")
  (assert (not (in ":action :message" told)) f"not as a message it never wrote: {told}"))

(defn test-words-beside-a-call-are-shown-and-kept-with-the-call [registry]
  (setv heard []
        ctx (context-of registry :notify heard.append)
        [complete requests]
        (scripted [[:status :ok :provider "script" :text "I'll list the files first."
                    :tool-calls [[:name "shell" :arguments "{\"cmd\": \"ls\", \"explanation\": \"look\"}" :id "c1"]]]]))
  (setv out (run (reason SIGNAL ctx complete)))
  (expect heard ["I'll list the files first."] "what the person was shown")
  (expect (proto-get (proto-get out ':call) ':said) "I'll list the files first." "kept with the call"))

(defn test-the-request-names-the-text-protocol-for-native-tools [registry ctx]
  (setv request (build-request SIGNAL ctx))
  (setv system (get (proto-get request ':messages) 0 "content"))
  (for [part (proto-get request ':text-protocol)]
    (assert (in part system) f"each part is in the system message as it is: {part}")))
