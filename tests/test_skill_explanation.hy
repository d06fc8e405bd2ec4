;; Tests for the explanation policy (skills/explanation.hy).

(import pathlib [Path]
        pytest
        passepartout.context [make-context]
        passepartout.proto [proto-get]
        passepartout.verify [verify]
        passepartout.skills [Registry get-skill load-skill-file make-skill register-skill])

(setv SKILLS (/ (. (Path __file__) parent parent) "skills")
      FILES ["explanation.hy" "message.hy" "shell.hy" "files.hy" "memory_actions.hy"])

(defn [pytest.fixture] registry []
  "A registry of the test's own with the explanation skill and the built-in
   actuators (which say what has an effect) loaded."
  (setv reg (Registry))
  (for [f FILES]
    (setv loaded (load-skill-file reg (/ SKILLS f) :builtin True))
    (assert (is (proto-get loaded ':error) None) f"loading {f} failed: {loaded}"))
  reg)

(defn [pytest.fixture] gate [registry]
  (setv skill (get-skill registry "explanation"))
  (assert (= (get skill "priority") 70) f"priority {(get skill "priority")}")
  (get skill "gate"))

(defn [pytest.fixture] ctx [tmp-path registry]
  (make-context :workspace (str tmp-path) :skills registry))

(defn verdict [gate action ctx]
  (setv v (gate action ctx))
  #((. (proto-get v ':verdict) name) (proto-get v ':reason)))

(defn rejected [gate action ctx]
  (setv [v reason] (verdict gate action ctx))
  (assert (= v "reject") f"expected a reject for {action}, got {v}")
  (assert (in ":explanation" reason) f"the reason should ask for :explanation: {reason}")
  (assert (in "propose it again" reason) f"the reason should say what to do: {reason}")
  reason)

(defn allowed [gate action ctx]
  (setv [v reason] (verdict gate action ctx))
  (assert (= v "allow") f"expected allow for {action}, got {v}: {reason}"))

(defn test-a-shell-command-without-explanation-is-refused [gate ctx]
  (setv reason (rejected gate [:action :shell :cmd "ls -la"] ctx))
  (assert (in ":shell" reason) f"the reason should name the action: {reason}"))

(defn test-a-shell-command-with-explanation-is-allowed [gate ctx]
  (allowed gate [:action :shell :cmd "ls -la" :explanation "see what is in the workspace"] ctx))

(defn test-actions-without-effect-need-no-explanation [gate ctx]
  (allowed gate [:action :message :text "hello"] ctx)
  (allowed gate [:action :read-file :path "notes.txt"] ctx)
  (allowed gate [:action :memory-search :query "birthday"] ctx))

(defn test-every-action-with-an-effect-needs-one [gate ctx]
  (for [action [[:action :write-file :path "a.txt" :content "x"]
                [:action :memory-add :text "the cat is called Tom"]]]
    (setv reason (rejected gate action ctx))
    (assert (in (+ ":" (. (get action 1) name)) reason) reason)))

(defn test-blank-short-or-non-text-explanations-count-as-missing [gate ctx]
  (for [why ["" "   " "\n\t " "." "ok" " a  " 42 None ["why"]]]
    (setv reason (rejected gate [:action :shell :cmd "ls" :explanation why] ctx))
    (when (isinstance why str)
      (assert (in "too short" reason) f"{why !r}: {reason}")))
  (allowed gate [:action :shell :cmd "ls" :explanation "why"] ctx))

(defn test-an-action-a-skill-adds-is-covered-by-its-effect-flag [registry gate ctx]
  (register-skill registry (make-skill "lamp" :priority 10
                                       :actuators {"lamp-on" {"run" (fn [a c] [:status :ok]) "effect" True}
                                                   "lamp-state" {"run" (fn [a c] [:status :ok]) "effect" False}}))
  (rejected gate [:action :lamp-on] ctx)
  (allowed gate [:action :lamp-on :explanation "the person asked for light"] ctx)
  (allowed gate [:action :lamp-state] ctx))

(defn test-verify-names-the-explanation-gate [gate ctx]
  (setv outcome (verify [:action :shell :cmd "ls"] ctx))
  (assert (= (proto-get outcome ':verdict) ':reject) f"{outcome}")
  (assert (= (proto-get outcome ':gate) "explanation") f"{outcome}")
  (setv ok (verify [:action :shell :cmd "ls" :explanation "look around"] ctx))
  (assert (!= (proto-get ok ':gate) "explanation") f"{ok}"))

(defn test-the-gate-asks-the-registry-of-its-context [registry gate ctx tmp-path]
  ;; the same action name: with an effect in this daemon's registry, without in another's
  (setv other (Registry))
  (register-skill registry (make-skill "lamp" :actuators {"lamp-on" {"run" (fn [a c] [:status :ok]) "effect" True}}))
  (register-skill other (make-skill "lamp" :actuators {"lamp-on" {"run" (fn [a c] [:status :ok]) "effect" False}}))
  (rejected gate [:action :lamp-on] ctx)
  (allowed gate [:action :lamp-on] (make-context :workspace (str tmp-path) :skills other)))

(defn test-the-daemons-gates-name-the-explanation-gate [registry ctx]
  (import passepartout.services [InlineGates]
          steps [run])
  (setv outcome (run (.verify (InlineGates registry) [:action :shell :cmd "ls"] ctx)))
  (assert (= (proto-get outcome ':verdict) ':reject) f"{outcome}")
  (assert (= (proto-get outcome ':gate) "explanation") f"{outcome}"))
