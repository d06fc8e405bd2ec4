;; Tests of passepartout/perceive.hy: signals, sessions, pre-reason handlers.

(import pytest
        passepartout.proto [kw proto-get ProtoError proto-read]
        passepartout.context [make-context]
        passepartout.skills [Registry make-skill register-skill]
        passepartout.perceive [perceive normalize-signal session-name sensor-of slash-concerns immediate]
        steps [expect run])

(defn [pytest.fixture] registry []
  "An empty registry of the test's own."
  (Registry))

(defn seen-by [signal registry]
  "What perceive makes of SIGNAL with the handlers of REGISTRY."
  (run (perceive signal (make-context :skills registry))))

(defn test-session-names []
  (expect (session-name [:gateway :telegram :chat 42 :user 7]) "telegram:42" "telegram")
  (expect (session-name [:gateway :terminal :chat "local"]) "terminal:local" "terminal")
  (expect (session-name []) "local" "no source"))

(defn test-normalize-fills-type-source-and-session []
  (setv s (normalize-signal (proto-read "(:TYPE :EVENT :SOURCE (:GATEWAY :SIGNAL :CHAT \"+491\") :PAYLOAD (:SENSOR :USER_INPUT :TEXT \"Hi\"))")))
  (expect (proto-get s ':session) "signal:+491" "session")
  (expect (sensor-of s) "user-input" "sensor")
  (expect (proto-get (proto-get s ':payload) ':text) "Hi" "text is data, untouched"))

(defn test-malformed-signals-are-errors []
  (for [bad ["x" [1 2] [:type :event] [:payload "hi"] [:payload [:text "no sensor"]]
             [:payload [:sensor "user-input"]] [:payload [:sensor :user-input] :source "terminal"]]]
    (with [e (pytest.raises ProtoError)]
      (normalize-signal bad))))

(setv HELLO [:type :event :source [:gateway :test :chat 1] :payload [:sensor :user-input :text "hello"]])

(defn test-unhandled-input-goes-on-to-reason [registry]
  (setv seen (seen-by HELLO registry))
  (expect (proto-get (proto-get (proto-get seen ':signal) ':payload) ':text) "hello" "signal"))

(defn test-other-sensors-are-ignored [registry]
  (setv seen (seen-by [:payload [:sensor :heartbeat]] registry))
  (assert (in "heartbeat" (proto-get seen ':ignored)) seen))

(defn test-the-first-handler-that-answers-wins [registry]
  (setv calls [])
  (register-skill registry (make-skill "late" :priority 1 :handlers [(fn [s c] (.append calls "late") [[:type :reply :payload [:text "late"]]])]))
  (register-skill registry (make-skill "early" :priority 90 :handlers [(fn [s c] (.append calls "early") None)]))
  (register-skill registry (make-skill "middle" :priority 50 :handlers [(fn [s c] (.append calls "middle") [[:type :reply :payload [:text "middle"]]])]))
  (setv seen (seen-by HELLO registry))
  (expect (proto-get seen ':handled-by) "middle" "handled by")
  (expect calls ["early" "middle"] "handlers asked"))

(defn test-a-handler-that-raises-answers-with-the-error-and-stops-the-signal [registry]
  (register-skill registry (make-skill "broken" :handlers [(fn [s c] (raise (RuntimeError "no luck")))]))
  (setv seen (seen-by HELLO registry)
        reply (get (proto-get seen ':emit) 0))
  (expect (proto-get seen ':handled-by) "broken" "handled by")
  (expect (proto-get (proto-get reply ':payload) ':kind) (kw "error") "reply kind")
  (assert (in "no luck" (proto-get (proto-get reply ':payload) ':text)) reply))

(defn test-a-handler-may-answer-with-a-coroutine [registry]
  (defn :async later [s c]
    (await (hy.I.asyncio.sleep 0))
    (when (= (proto-get (proto-get s ':payload) ':text) "hello")
      [[:type :reply :payload [:text "awaited"]]]))
  (defn :async fails-later [s c]
    (await (hy.I.asyncio.sleep 0))
    (raise (RuntimeError "late trouble")))
  (register-skill registry (make-skill "later" :priority 90 :handlers [later]))
  (setv seen (seen-by HELLO registry))
  (expect (proto-get seen ':handled-by) "later" "handled by")
  (expect (proto-get (get (proto-get seen ':emit) 0) ':payload) [:text "awaited"] "what the handler answered")
  (register-skill registry (make-skill "fails-later" :priority 95 :handlers [fails-later]))
  (setv seen (seen-by HELLO registry)
        reply (get (proto-get seen ':emit) 0))
  (expect (proto-get seen ':handled-by) "fails-later" "handled by")
  (assert (in "late trouble" (proto-get (proto-get reply ':payload) ':text)) reply))

(defn test-each-registry-has-its-own-handlers [registry]
  (register-skill registry (make-skill "mine" :handlers [(fn [s c] [[:type :reply :payload [:text "mine"]]])]))
  (expect (proto-get (seen-by HELLO registry) ':handled-by) "mine" "handled by, in the registry that has it")
  (expect (proto-get (seen-by HELLO (Registry)) ':handled-by) None "handled by, in another registry"))

(defn test-a-handler-is-called-only-for-the-signals-it-concerns [registry]
  (setv calls [])
  (defn command [s c] (.append calls "command") [[:type :reply :payload [:text "done"]]])
  (setv command.concerns (slash-concerns #{"user-input"}))
  (defn buttons [s c] (.append calls "buttons") None)
  (setv buttons.concerns {"callback" None})
  (defn every [s c] (.append calls "every") None)
  (register-skill registry (make-skill "command" :priority 10 :handlers [command]))
  (register-skill registry (make-skill "buttons" :priority 20 :handlers [buttons]))
  (register-skill registry (make-skill "every" :priority 30 :handlers [every]))
  (expect (proto-get (seen-by HELLO registry) ':signal) (normalize-signal HELLO) "plain words go on to reason")
  (expect calls ["every"] "handlers asked about plain words")
  (.clear calls)
  (setv seen (seen-by [:source [:gateway :test :chat 1] :payload [:sensor :user-input :text "  /go now"]] registry))
  (expect (proto-get seen ':handled-by) "command" "a command is answered")
  (expect calls ["every" "command"] "handlers asked about a command")
  (.clear calls)
  (seen-by [:source [:gateway :test :chat 1] :payload [:sensor :callback :data "x"]] registry)
  (expect calls ["every" "buttons"] "handlers asked about a button pressed")
  (.clear calls)
  (seen-by [:source [:gateway :test :chat 1] :payload [:sensor :chat-message :text "/go"]] registry)
  (expect calls ["every"] "handlers asked about a command from a sensor the command handler leaves out"))

(defn test-immediate-is-asked-only-of-the-handlers-concerned [registry]
  (setv asked [])
  (defn stop [s c] None)
  (setv stop.immediate (fn [s] (.append asked (proto-get (proto-get s ':payload) ':text)) True)
        stop.concerns (slash-concerns #{"user-input"}))
  (register-skill registry (make-skill "stop" :handlers [stop]))
  (expect (immediate (normalize-signal HELLO) registry) False "plain words are not immediate")
  (expect (immediate (normalize-signal [:source [:gateway :test :chat 1]
                                        :payload [:sensor :user-input :text "/stop"]]) registry)
          True "the command is")
  (expect asked ["/stop"] "what the immediate test was asked about"))
