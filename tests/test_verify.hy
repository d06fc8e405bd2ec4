;; Tests of passepartout/verify.hy: verdicts, the gates in order, their budget, schema checks.

(import pytest time
        passepartout.proto [kw proto-get proto-read proto-print ProtoError]
        passepartout.skills [Registry make-skill register-skill]
        passepartout.verify [verify GateTimeout GateMemory]
        steps [run expect V context-of registry ctx gate-skill])

(setv LS [:action :shell :cmd "ls" :explanation "look"])

(defn test-allow-with-no-gates [registry ctx]
  (setv out (verify LS ctx))
  (expect (V out) "allow" "verdict")
  (expect (proto-get out ':action) LS "action"))

(defn test-gates-run-by-priority-then-name [registry ctx]
  (setv order [])
  (for [[n p] [["b-gate" 10] ["a-gate" 10] ["high" 90] ["low" 1]]]
    (gate-skill registry n p (fn [a c [n n]] (.append order n) [:verdict :allow])))
  (verify LS ctx)
  (expect order ["high" "a-gate" "b-gate" "low"] "gate order"))

(defn test-reject-stops-at-once [registry ctx]
  (setv called [])
  (gate-skill registry "first" 90 (fn [a c] [:verdict :reject :reason "no"]))
  (gate-skill registry "second" 10 (fn [a c] (.append called 1) [:verdict :allow]))
  (setv out (verify LS ctx))
  (expect (V out) "reject" "verdict")
  (expect (proto-get out ':gate) "first" "deciding gate")
  (expect (proto-get out ':reason) "no" "reason")
  (expect called [] "gates after a reject"))

(defn test-escalate-is-remembered-and-a-later-reject-wins [registry ctx]
  (gate-skill registry "asks" 90 (fn [a c] [:verdict :escalate :reason "needs a person"]))
  (gate-skill registry "later" 10 (fn [a c] [:verdict :allow]))
  (setv out (verify LS ctx))
  (expect (V out) "escalate" "verdict")
  (expect (proto-get out ':gate) "asks" "deciding gate")
  (expect (len (proto-get out ':decisions)) 3 "decisions (schema + 2 gates)")
  (gate-skill registry "forbids" 5 (fn [a c] [:verdict :reject :reason "forbidden"]))
  (setv out (verify LS ctx))
  (expect (V out) "reject" "verdict with a later reject")
  (expect (proto-get out ':gate) "forbids" "deciding gate"))

(defn test-modify-passes-the-new-action-on [registry ctx]
  (setv seen [])
  (gate-skill registry "rewrite" 90 (fn [a c] [:verdict :modify :action [:action :shell :cmd "ls -la" :explanation "look"]]))
  (gate-skill registry "watch" 10 (fn [a c] (.append seen (proto-get a ':cmd)) [:verdict :allow]))
  (setv out (verify LS ctx))
  (expect (V out) "modify" "verdict")
  (expect seen ["ls -la"] "what the later gate saw")
  (expect (proto-get (proto-get out ':action) ':cmd) "ls -la" "final action")
  (expect (proto-get (proto-get out ':proposed) ':cmd) "ls" "proposed action kept"))

(defn test-modify-into-an-invalid-action-rejects [registry ctx]
  (gate-skill registry "breaks" 90 (fn [a c] [:verdict :modify :action [:action :shell :cmd 5]]))
  (setv out (verify LS ctx))
  (expect (V out) "reject" "verdict")
  (expect (proto-get out ':gate) "breaks" "deciding gate"))

(defn test-a-confined-allow-is-kept-in-the-outcome [registry ctx]
  "An allow that holds only because the sandbox is in force says so in its
   decision and in the outcome, which names the gate and its reason; a later
   escalation still wins."
  (gate-skill registry "boxed" 50 (fn [a c] [:verdict :allow :reason "would be asked about" :rule "r"
                                             :confined True]))
  (gate-skill registry "plain" 10 (fn [a c] [:verdict :allow]))
  (setv out (verify LS ctx))
  (expect (V out) "allow" "verdict")
  (expect (proto-get out ':confined) True "the outcome says it runs confined")
  (expect [(proto-get out ':gate) (proto-get out ':reason) (proto-get out ':rule)]
          ["boxed" "would be asked about" "r"] "the confining gate")
  (expect (lfor d (proto-get out ':decisions) (proto-get d ':confined)) [None True None]
          "the decisions that confined")
  (gate-skill registry "asks" 5 (fn [a c] [:verdict :escalate :reason "needs a person"]))
  (setv out (verify LS ctx))
  (expect [(V out) (proto-get out ':confined)] ["escalate" None] "an escalation still wins"))

(defn [(pytest.mark.parametrize "answer"
         [None "allow" [:verdict :maybe] [:verdict :reject] [:verdict :escalate :reason ""]
          [:verdict :modify] [:verdict] {"verdict" "allow"} [:verdict :allow :extra]])]
  test-malformed-verdicts-reject-naming-the-gate [registry ctx answer]
  (gate-skill registry "sloppy" 50 (fn [a c] answer))
  (setv out (verify LS ctx))
  (expect (V out) "reject" f"verdict for {answer !r}")
  (expect (proto-get out ':gate) "sloppy" "deciding gate")
  (assert (in "sloppy" (proto-get out ':reason)) (proto-get out ':reason)))

(defn test-a-gate-that-raises-fails-closed [registry ctx]
  (gate-skill registry "boom" 50 (fn [a c] (/ 1 0)))
  (setv out (verify LS ctx))
  (expect (V out) "reject" "verdict")
  (expect (proto-get out ':gate) "boom" "deciding gate")
  (assert (in "ZeroDivisionError" (proto-get out ':reason)) (proto-get out ':reason)))

(defn spin [seconds]
  "Use SECONDS of this thread's CPU time."
  (setv t0 (time.thread-time))
  (while (< (- (time.thread-time) t0) seconds)))

(defn test-a-slow-gate-fails-closed [registry ctx]
  "A gate that computes for longer than its budget is refused, after a quick
   gate that ran before it and with the gates after it not run."
  (setv later [])
  (gate-skill registry "quick" 90 (fn [a c] [:verdict :allow]))
  (gate-skill registry "slow" 50 (fn [a c] (spin 0.1) [:verdict :allow]))
  (gate-skill registry "later" 10 (fn [a c] (.append later 1) [:verdict :allow]))
  (setv out (verify LS ctx :budget 0.02))
  (expect [(V out) (proto-get out ':gate)] ["reject" "slow"] "verdict and gate")
  (assert (in "gate slow did not answer within 20 ms" (proto-get out ':reason)) (proto-get out ':reason))
  (expect later [] "gates after the slow one"))

(defn test-gates-judge-only-the-actions-they-declare [registry ctx]
  "A gate whose skill names :actions meets only proposals of those actions; one
   that names none meets every proposal."
  (setv seen [])
  (register-skill registry (make-skill "shell-only" :priority 60 :actions ["shell"]
                                       :gate (fn [a c] (.append seen #("shell-only" (proto-get a ':action)))
                                               [:verdict :allow])))
  (register-skill registry (make-skill "every" :priority 50
                                       :gate (fn [a c] (.append seen #("every" (proto-get a ':action)))
                                               [:verdict :allow])))
  (setv out (verify [:action :message :text "hi"] ctx))
  (expect seen [#("every" (kw "message"))] "the gates a message met")
  (expect (lfor d (proto-get out ':decisions) (proto-get d ':gate)) ["schema" "every"] "its decisions")
  (.clear seen)
  (verify LS ctx)
  (expect (lfor [g _] seen g) ["shell-only" "every"] "the gates a shell command met"))

(defn test-a-modify-into-another-action-meets-the-later-gates-of-that-action [registry ctx]
  "A gate that turns a :message into a :shell command hands it to the gates after
   it that judge :shell, and not to those before it."
  (setv seen [])
  (defn watcher [name]
    (fn [a c] (.append seen #(name (. (proto-get a ':action) name))) [:verdict :allow]))
  (register-skill registry (make-skill "shell-early" :priority 90 :actions ["shell"] :gate (watcher "shell-early")))
  (register-skill registry (make-skill "turn" :priority 70 :actions ["message"]
                                       :gate (fn [a c] [:verdict :modify :reason "a command instead"
                                                        :action [:action :shell :cmd "echo hi"]])))
  (register-skill registry (make-skill "message-late" :priority 40 :actions ["message"] :gate (watcher "message-late")))
  (register-skill registry (make-skill "shell-late" :priority 30 :actions ["shell"] :gate (watcher "shell-late")))
  (register-skill registry (make-skill "every" :priority 20 :gate (watcher "every")))
  (setv out (verify [:action :message :text "hi"] ctx))
  (expect [(V out) (proto-get out ':gate)] ["modify" "turn"] "verdict and gate")
  (expect seen [#("shell-late" "shell") #("every" "shell")] "the gates the new action met"))

(defn timed-verify [ctx budget]
  "The outcome of verify on LS in CTX with each gate given BUDGET seconds, and the seconds it took."
  (setv started (time.monotonic)
        out (verify LS ctx :budget budget))
  #(out (- (time.monotonic) started)))

(defn test-the-budget-is-the-gates-own-work-and-its-waiting-is-bounded [registry ctx]
  "A gate that waits (for a core on a busy machine, or in a sleep) is not refused
   for it while it waits less than GATE-WAIT budgets; one that waits longer is."
  (gate-skill registry "waits" 50 (fn [a c] (time.sleep 0.12) [:verdict :allow]))
  (setv [out took] (timed-verify ctx 0.05))
  (expect (V out) "allow" f"a gate that used little CPU and waited {took :.2f} s for 0.05 s budgets")
  (gate-skill registry "waits" 50 (fn [a c] (time.sleep 0.5) [:verdict :allow]))
  (setv [out took] (timed-verify ctx 0.05))
  (expect (V out) "reject" "a gate that waited ten budgets")
  (assert (in "gate waits did not answer within 50 ms" (proto-get out ':reason)) (proto-get out ':reason)))

(defn [(pytest.mark.parametrize "error, words"
         [#(GateTimeout "gate stopped did not answer within 200 ms")
          #((GateMemory (* 64 1048576)) "gate stopped failed closed: the gate process grew by more than 64 MiB")
          #(GateMemory "gate stopped failed closed: the gate process grew by more than 256 MiB")])]
  test-a-gate-stopped-by-the-gate-process-is-rejected-naming-it [registry ctx error words]
  "What the gate process raises inside a gate at a deadline (org/gatekeeper.org)
   is a rejection naming the gate, and the gates after it do not run."
  (setv later [])
  (defn stopped [a c] (raise error))
  (gate-skill registry "stopped" 50 stopped)
  (gate-skill registry "later" 10 (fn [a c] (.append later 1) [:verdict :allow]))
  (setv [out took] (timed-verify ctx 0.2))
  (expect (V out) "reject" "verdict")
  (expect (proto-get out ':gate) "stopped" "deciding gate")
  (assert (in words (proto-get out ':reason)) (proto-get out ':reason))
  (expect later [] "gates after the stopped one"))


(defn test-a-proposal-cannot-approve-itself [registry ctx]
  (setv seen [])
  (gate-skill registry "asks" 50 (fn [a c] (.append seen a) [:verdict :escalate :reason "needs a person"]))
  (setv action [:action :shell :cmd "sudo ls" :explanation "x" :approved True :hitl-token "abc"]
        out (verify action ctx))
  (expect (V out) "escalate" "verdict")
  (expect (sorted (proto-get out ':stripped)) ["approved" "hitl-token"] "stripped fields")
  (assert (not (in (kw "approved") (get seen 0))) f"gate saw {(get seen 0)}")
  (assert (not (in (kw "hitl-token") (proto-get out ':action))) "final action keeps no token"))

(defn test-schema-checks [registry ctx]
  (for [[action words] [[[:action :teleport :to "mars"] "unknown action :teleport"]
                        [[:action :shell :explanation "x"] "needs :cmd"]
                        [[:action :shell :cmd 42] "must be string"]
                        [[:action :shell :cmd "ls" :timeout "soon"] "must be integer"]
                        [[:cmd "ls"] "no :action"]
                        [[:action "shell" :cmd "ls"] "no :action"]
                        [[1 2 3] "plist"]
                        ["ls" "plist"]]]
    (setv out (verify action ctx))
    (expect (V out) "reject" f"verdict for {action !r}")
    (expect (proto-get out ':gate) "schema" "deciding gate")
    (assert (in words (proto-get out ':reason)) f"{action !r}: {(proto-get out ':reason)}")))
