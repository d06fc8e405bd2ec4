;; Helpers the Hy tests of a step share: a booted daemon on the symbolic
;; provider, a scripted model, a task stepped to its end, and what replies say.

(import asyncio time
        passepartout.proto [kw proto-get]
        passepartout.providers [make-provider]
        passepartout.daemon [boot shutdown]
        passepartout.loop [step]
        passepartout.store [store-open store-path-for]
        passepartout.skills [Registry make-skill register-skill]
        pytest)

(defn expect [got want [what "value"]]
  (assert (= got want) f"{what}: expected {want !r}, got {got !r}"))

(defn :async until [test [seconds 120] [every 0.02]]
  "Wait, turning the loop, until (TEST) holds; fail the test, naming TEST,
   if it does not within SECONDS (a generous deadline, not a measurement)."
  (setv deadline (+ (time.monotonic) seconds))
  (while (not (test))
    (assert (< (time.monotonic) deadline)
            f"not so within {seconds} s: {(or test.__doc__ test)}")
    (await (asyncio.sleep every))))

(defn open-store [tmp-path]
  "A fresh store in TMP-PATH's data folder."
  (store-open (store-path-for (/ tmp-path "data"))))

(defn run [coroutine]
  "The value of COROUTINE, run on an event loop of its own."
  (asyncio.run coroutine))

(defn V [outcome]
  "The name of an outcome's verdict: \"allow\", \"reject\", …"
  (. (proto-get outcome ':verdict) name))

(defn kind-of [signal]
  (. (proto-get (proto-get signal ':payload) ':kind) name))

(defn text-of [signal]
  (proto-get (proto-get signal ':payload) ':text))

(defn last-said [body]
  "What a scripted model is asked about: the last message of the request BODY,
   from its last result or refusal on when turns of one role were joined into it."
  (setv text (str (or (get (get body "messages") -1 "content") ""))
        at (max (.rfind text "\n\nResult of ") (.rfind text "\n\nYour previous proposals were refused")))
  (if (>= at 0) (cut text (+ at 2) None) text))

(defn says [text]
  "A scripted model's answer that says TEXT."
  (+ "(:action :message :text \"" text "\")"))

(defn is-reply [signal]
  (= (proto-get signal ':type) (kw "reply")))

(defn symbolic-env [tmp-path]
  "The services of a daemon booted on a fresh data dir under TMP-PATH whose
   only provider is the symbolic one, with the sandbox off (a step is tested,
   not the sandbox: its shell commands run the same on a machine without
   bubblewrap); for a fixture to yield from."
  (setv config (/ tmp-path "config.toml"))
  (.write-text config "[sandbox]\nmode = \"off\"\n")
  (setv e (boot :config-path (str config)
                :environ {"PASSEPARTOUT_DATA_DIR" (str (/ tmp-path "data")) "HOME" (str tmp-path)}
                :providers [(make-provider "symbolic")]))
  (yield e)
  (shutdown e))

(defn user-says [text [chat "t1"]]
  [:type :event :source [:gateway :test :chat chat] :payload [:sensor :user-input :text text]])

(defn scripted [env answers]
  "Make ENV's cascade answer with ANSWERS in turn (the last one repeats); return the requests."
  (setv requests []
        answers (list answers))
  (defn complete [request]
    (.append requests request)
    [:status :ok :provider "script"
     :text (if (> (len answers) 1) (.pop answers 0) (get answers 0))])
  (setv env.complete complete)
  requests)

(defn :async run-task-async [env signal]
  "Step SIGNAL and every signal it leads to; the replies, in order."
  (setv queue [signal]
        replies [])
  (while queue
    (for [out (await (step (.pop queue 0) env))]
      (if (is-reply out)
          (.append replies out)
          (.append queue out))))
  replies)

(defn run-task [env signal]
  "run-task-async on an event loop of its own."
  (asyncio.run (run-task-async env signal)))

(defn :async converse [services text [timeout 120]]
  "Say TEXT in the chat test:1 of a hub of SERVICES and wait for the reply
   that ends its task; every reply of the chat, in order."
  (import passepartout.gateways.hub [Hub]
          passepartout.task [ends-task])
  (setv replies []
        done (asyncio.Event))
  (defn :async deliver [reply]
    (.append replies reply)
    (when (ends-task reply) (.set done)))
  (setv hub (Hub services [{"name" "test" "deliver" deliver}]))
  (try
    (await (.receive hub "test" "m1" (user-says text "1")))
    (await (asyncio.wait-for (.wait done) timeout))
    (finally (await (.close hub))))
  replies)

;; * A registry and context to verify and think in

(defn context-of [registry #** runtime]
  "The context the tests verify and think in: the skills of REGISTRY, and the
   other RUNTIME handles given."
  [:workspace "/tmp/ws" :session "test" :runtime (| {"skills" registry} runtime)])

(defn [pytest.fixture] registry []
  "A registry of the test's own holding only a test actuator set."
  (setv reg (Registry))
  (register-skill
    reg
    (make-skill "test-actions"
                :actuators {"message" {"run" (fn [a c] [:status :ok]) "effect" False
                                       "schema" [:text [:type "string" :required True]]}
                            "shell" {"run" (fn [a c] [:status :ok])
                                     "schema" [:cmd [:type "string" :required True]
                                               :timeout [:type "integer"]]}}))
  reg)

(defn [pytest.fixture] ctx [registry]
  (context-of registry))

(defn gate-skill [registry name priority gate]
  (register-skill registry (make-skill name :priority priority :gate gate)))
