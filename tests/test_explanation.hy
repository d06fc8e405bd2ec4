;; Tests for the explanation policy (skills/explanation.hy).

(import pathlib [Path]
        pytest
        passepartout.context [make-context]
        passepartout.proto [proto-get]
        passepartout.reason [verify]
        passepartout.skills [get-skill load-skill-file make-skill register-skill
                             registry-restore registry-snapshot])

(setv SKILLS (/ (. (Path __file__) parent parent) "skills")
      FILES ["explanation.hy" "message.hy" "shell.hy" "files.hy" "memory_actions.hy"])

(defn [pytest.fixture] gate []
  "The explanation skill and the built-in actuators (which say what has an
   effect) loaded; the registry put back afterwards."
  (setv snapshot (registry-snapshot))
  (for [f FILES]
    (setv loaded (load-skill-file (/ SKILLS f) :builtin True))
    (assert (is (proto-get loaded ':error) None) f"loading {f} failed: {loaded}"))
  (setv skill (get-skill "explanation"))
  (assert (= (get skill "priority") 70) f"priority {(get skill "priority")}")
  (yield (get skill "gate"))
  (registry-restore snapshot))

(defn [pytest.fixture] ctx [tmp-path]
  (make-context :workspace (str tmp-path)))

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

(defn test-an-action-a-skill-adds-is-covered-by-its-effect-flag [gate ctx]
  (register-skill (make-skill "lamp" :priority 10
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
