;; * Why

"The gates are the law: they read a command and decide whether it may run. A
law can be wrong (a program the policy misreads, an option nobody modelled),
so every :shell action also runs inside an operating-system sandbox that
makes the worst of those mistakes impossible rather than forbidden. That is
the physics under the law."

;; * The gate

(require passepartout.macros [defskill])
(import passepartout.act [action-name]
        passepartout.proto [proto-get])

(defn sandbox-gate [action ctx]
  "Escalate every :shell action when CTX says no sandbox is in force."
  (when (!= (action-name action) "shell")
    (return [:verdict :allow]))
  (setv status (proto-get ctx ':sandbox)
        kind (proto-get (or status []) ':kind))
  (if (in kind #("bubblewrap" "off"))
      [:verdict :allow]
      [:verdict :escalate :rule "no-sandbox"
       :reason (+ "no sandbox is in force here ("
                  (or (proto-get (or status []) ':why) "the context does not say")
                  "), so every shell command is asked about first")]))

(defskill sandbox
  "Without an OS sandbox for shell commands, asks a person about every one."
  :priority 60
  :gate sandbox-gate)
