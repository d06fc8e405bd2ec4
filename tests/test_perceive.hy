;; Tests of passepartout/perceive.hy: signals, sessions, pre-reason handlers.

(import pytest
        passepartout.proto [kw proto-get ProtoError proto-read]
        passepartout.skills [make-skill register-skill registry-snapshot registry-restore]
        passepartout.perceive [perceive normalize-signal session-name sensor-of])

(defn expect [got want [what "value"]]
  (assert (= got want) f"{what}: expected {want !r}, got {got !r}"))

(defn [(pytest.fixture :autouse True)] clean-registry []
  (setv saved (registry-snapshot))
  (registry-restore {})
  (yield None)
  (registry-restore saved))

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

(defn test-unhandled-input-goes-on-to-reason []
  (setv seen (perceive HELLO []))
  (expect (proto-get (proto-get (proto-get seen ':signal) ':payload) ':text) "hello" "signal"))

(defn test-other-sensors-are-ignored []
  (setv seen (perceive [:payload [:sensor :heartbeat]] []))
  (assert (in "heartbeat" (proto-get seen ':ignored)) seen))

(defn test-the-first-handler-that-answers-wins []
  (setv calls [])
  (register-skill (make-skill "late" :priority 1 :handlers [(fn [s c] (.append calls "late") [[:type :reply :payload [:text "late"]]])]))
  (register-skill (make-skill "early" :priority 90 :handlers [(fn [s c] (.append calls "early") None)]))
  (register-skill (make-skill "middle" :priority 50 :handlers [(fn [s c] (.append calls "middle") [[:type :reply :payload [:text "middle"]]])]))
  (setv seen (perceive HELLO []))
  (expect (proto-get seen ':handled-by) "middle" "handled by")
  (expect calls ["early" "middle"] "handlers asked"))

(defn test-a-handler-that-raises-answers-with-the-error-and-stops-the-signal []
  (register-skill (make-skill "broken" :handlers [(fn [s c] (raise (RuntimeError "no luck")))]))
  (setv seen (perceive HELLO [])
        reply (get (proto-get seen ':emit) 0))
  (expect (proto-get seen ':handled-by) "broken" "handled by")
  (expect (proto-get (proto-get reply ':payload) ':kind) (kw "error") "reply kind")
  (assert (in "no luck" (proto-get (proto-get reply ':payload) ':text)) reply))
