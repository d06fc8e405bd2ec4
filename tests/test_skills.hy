;; Tests of passepartout/skills.hy and the defskill macro.

(require passepartout.macros [defskill])
(import pytest
        pathlib [Path]
        passepartout.proto [proto-get]
        passepartout.skills [make-skill register-skill unregister-skill get-skill all-skills
                             skill-functions gates-for actuator-for actuator-table pre-reason-handlers
                             load-skill-file load-skills Registry registry-version SkillError]
        steps [expect run])

(defn [pytest.fixture] registry []
  "An empty registry of the test's own."
  (Registry))

(defn test-defskill-declares-a-skill-to-register [registry]
  (register-skill registry
                  (defskill no-rm
                    "Refuses any shell command that mentions rm."
                    :priority 60
                    :gate (fn [action ctx]
                            (if (in "rm" (or (proto-get action ':cmd) ""))
                                [:verdict :reject :reason "no rm here"]
                                [:verdict :allow]))))
  (setv s (get-skill registry "no-rm"))
  (expect (get s "priority") 60 "priority")
  (expect (get s "doc") "Refuses any shell command that mentions rm." "doc")
  (expect ((get s "gate") [:action :shell :cmd "rm x"] []) [:verdict :reject :reason "no rm here"] "gate"))

(defn test-the-defskill-docstring-example-is-the-one-tested []
  (setv doc (. (get (. (hy.I.importlib.import-module "passepartout.macros") _hy_macros) "defskill") __doc__))
  (assert (in "(defskill no-rm" doc) doc)
  (assert (in ":priority 60" doc) doc))

(defn test-bad-definitions-are-refused []
  (for [[kwargs words] [[{"name" "Bad Name"} "lower-case kebab"]
                        [{"name" "x" "priority" "high"} "priority"]
                        [{"name" "x" "priority" True} "priority"]
                        [{"name" "x" "gate" "not a function"} ":gate must be a function"]
                        [{"name" "x" "actuators" {"Shell" {"run" print}}} "lower-case kebab"]
                        [{"name" "x" "actuators" {"shell" {"schema" []}}} "callable"]
                        [{"name" "x" "actuators" {"shell" {"run" print "schema" [:cmd [:type "text"]]}}} "unknown type"]
                        [{"name" "x" "handlers" [1]} "handler"]
                        [{"name" "x" "actions" ["shell"]} "has no :gate"]
                        [{"name" "x" "gate" print "actions" "shell"} "list of action names"]
                        [{"name" "x" "gate" print "actions" ["Shell"]} "not lower-case kebab"]]]
    (with [e (pytest.raises SkillError)]
      (make-skill #** kwargs))
    (assert (in words (str e.value)) f"{kwargs}: {e.value}")))

(defn test-order-is-priority-then-name [registry]
  (for [[n p] [["b" 10] ["a" 10] ["z" 99] ["m" 0]]]
    (register-skill registry (make-skill n :priority p :gate (fn [a c] [:verdict :allow]))))
  (expect (lfor [n _] (skill-functions registry "gate") n) ["z" "a" "b" "m"] "gate order"))

(defn test-gates-for-an-action-are-those-that-judge-it [registry]
  "gates-for gives, in skill order, the gates that name the action in :actions
   and those that name none; every gate for None; and follows changes."
  (setv spec {"run" (fn [a c] [:status :ok]) "schema" []})
  (register-skill registry (make-skill "doers" :actuators {"shell" spec "read-file" spec "write-file" spec
                                                            "message" spec}))
  (register-skill registry (make-skill "shell-only" :priority 90 :actions ["shell"] :gate (fn [a c] None)))
  (register-skill registry (make-skill "files" :priority 80 :actions ["read-file" "write-file"] :gate (fn [a c] None)))
  (register-skill registry (make-skill "every" :priority 70 :gate (fn [a c] None)))
  (defn names [action] (lfor [n _] (gates-for registry action) n))
  (expect (names "shell") ["shell-only" "every"] "gates for shell")
  (expect (names "write-file") ["files" "every"] "gates for write-file")
  (expect (names "message") ["every"] "gates for message")
  (expect (names None) ["shell-only" "files" "every"] "every gate")
  (register-skill registry (make-skill "files" :priority 80 :gate (fn [a c] None)))
  (expect (names "shell") ["shell-only" "files" "every"] "gates for shell once files judges every action"))

(defn test-a-gate-naming-an-action-no-actuator-carries-judges-every-action [registry]
  "A misspelt name in :actions must not take the gate off the action it meant."
  (setv spec {"run" (fn [a c] [:status :ok]) "schema" []})
  (register-skill registry (make-skill "doers" :actuators {"shell" spec "message" spec}))
  (register-skill registry (make-skill "typo" :actions ["shel"] :gate (fn [a c] None)))
  (register-skill registry (make-skill "right" :actions ["message"] :gate (fn [a c] None)))
  (defn names [action] (lfor [n _] (gates-for registry action) n))
  (expect (names "shell") ["typo"] "the misspelt gate still judges shell")
  (expect (names "message") ["right" "typo"] "and every other action")
  (unregister-skill registry "doers")
  (expect (names "message") ["right" "typo"] "a gate whose actions lost their actuator judges everything"))

(defn test-views-follow-changes [registry]
  (setv v (registry-version registry))
  (register-skill registry (make-skill "one" :gate (fn [a c] None)))
  (assert (> (registry-version registry) v) "version moves")
  (expect (len (skill-functions registry "gate")) 1 "gates")
  (unregister-skill registry "one")
  (expect (skill-functions registry "gate") [] "gates after removal"))

(defn test-an-action-has-one-actuator [registry]
  (setv spec {"run" (fn [a c] [:status :ok]) "schema" []})
  (register-skill registry (make-skill "first" :actuators {"ping" spec}))
  (with [e (pytest.raises SkillError)]
    (register-skill registry (make-skill "second" :actuators {"ping" spec})))
  (assert (in "already provided by skill first" (str e.value)) (str e.value))
  (register-skill registry (make-skill "first" :actuators {"ping" spec "pong" spec}))
  (expect (sorted (actuator-table registry)) ["ping" "pong"] "a skill may redefine its own actions"))

(defn test-each-registry-is-its-own [registry tmp-path]
  (import passepartout.skills [registry-copy set-immutable-skills immutable-skills])
  (setv file (write-skill tmp-path "own.hy" "(defskill own-gate :gate (fn [a c] None))\n"))
  (expect (proto-get (load-skill-file registry file) ':error) None "loading the file")
  (setv other (Registry))
  (expect (get-skill other "own-gate") None "a skill loaded into another registry")
  (set-immutable-skills registry ["own-gate"])
  (setv copy (registry-copy registry))
  (expect (get-skill copy "own-gate") (get-skill registry "own-gate") "the copy's skill")
  (expect (immutable-skills copy) (frozenset ["own-gate"]) "the copy's immutable names")
  (register-skill copy (make-skill "only-in-copy" :gate (fn [a c] None)))
  (unregister-skill copy "own-gate")
  (expect (lfor [n _] (skill-functions registry "gate") n) ["own-gate"] "the original's gates")
  (expect (lfor [n _] (skill-functions copy "gate") n) ["only-in-copy"] "the copy's gates"))

(defn write-skill [folder name text]
  (setv p (/ folder name))
  (.write-text p (+ "(require passepartout.macros [defskill])\n" text))
  p)

(defn test-a-file-loads-whole-or-not-at-all [registry tmp-path]
  (setv good (write-skill tmp-path "good.hy" "(defskill g-one :gate (fn [a c] None))\n(defskill g-two :gate (fn [a c] None))\n")
        bad (write-skill tmp-path "bad.hy" "(defskill b-one :gate (fn [a c] None))\n(raise (RuntimeError \"broken on purpose\"))\n")
        r1 (load-skill-file registry good)
        r2 (load-skill-file registry bad))
  (expect (proto-get r1 ':skills) ["g-one" "g-two"] "skills of the good file")
  (expect (proto-get r1 ':error) None "error of the good file")
  (expect (proto-get r2 ':skills) [] "skills of the bad file")
  (assert (in "broken on purpose" (proto-get r2 ':error)) (proto-get r2 ':error))
  (expect (get-skill registry "b-one") None "half-registered skill")
  (expect (get (get-skill registry "g-one") "source") (str good) "source"))

(defn test-a-file-that-does-not-compile-is-reported [registry tmp-path]
  (setv bad (write-skill tmp-path "syntax.hy" "(defskill s-one :gate (fn [a c] None)\n")
        r (load-skill-file registry bad))
  (assert (proto-get r ':error) "no error reported")
  (expect (get-skill registry "s-one") None "skill from a broken file"))

(defn test-load-skills-reads-the-user-folder-and-honours-disabled [registry tmp-path]
  (write-skill tmp-path "mine.hy" "(defskill mine :gate (fn [a c] None))\n")
  (write-skill tmp-path "_private.hy" "(defskill hidden :gate (fn [a c] None))\n")
  (setv results (load-skills registry :folders [tmp-path (/ tmp-path "missing")] :disabled ["workspace"]))
  (assert (get-skill registry "mine") "user skill not loaded")
  (expect (get-skill registry "hidden") None "files starting with _ are not skills")
  (expect (get-skill registry "workspace") None "disabled built-in")
  (assert (get-skill registry "shell") "built-in shell actuator skill")
  (assert (all (gfor r results (is (proto-get r ':error) None)))
          (lfor r results :if (proto-get r ':error) r)))

;; * /help and /status, answered from the registry and the daemon's state

(defn says [text [sensor "user-input"]]
  [:type :event :source [:gateway :terminal :chat "local" :user "local"]
   :payload [:sensor (hy.models.Keyword sensor) :text text]])

(defn answer-text [seen]
  (assert (proto-get seen ':handled-by) f"not handled: {seen}")
  (.join "\n" (lfor r (proto-get seen ':emit) (proto-get (proto-get r ':payload) ':text))))

(defn test-help-lists-every-slash-command-of-the-registry [registry tmp-path]
  (import passepartout.context [make-context]
          passepartout.perceive [perceive])
  (load-skills registry)
  (defn on-frob [signal ctx] None)
  (setv on-frob.commands [["/frob N" "frobs N times"]])
  (register-skill registry (defskill frob "A person's own command." :handlers [on-frob]))
  (register-skill registry (defskill twiddle "/twiddle: twiddles, answered here." :handlers [(fn [s c] None)]))
  (setv ctx (make-context :workspace (str tmp-path) :skills registry)
        text (answer-text (run (perceive (says "/help") ctx))))
  (for [usage ["/approve CODE [30m]" "/deny CODE [reason]" "/pending" "/grants" "/revoke ID"
               "/help" "/status" "/stop" "/reload" "/frob N — frobs N times" "/twiddle: twiddles"]]
    (assert (in usage text) f"{usage} missing from /help:\n{text}"))
  (expect (proto-get (run (perceive (says "/help" "tool-result") ctx)) ':handled-by)
          None "/help in a tool's output"))

(defn test-help-on-a-chat-service-leaves-out-the-operators-commands [registry tmp-path]
  (import passepartout.context [make-context]
          passepartout.perceive [perceive])
  (load-skills registry)
  (setv ctx (make-context :workspace (str tmp-path) :skills registry)
        chat [:type :event :source [:gateway :telegram :chat "1" :user "2"]
              :payload [:sensor :chat-message :text "/help"]]
        shown (answer-text (run (perceive chat ctx)))
        local (answer-text (run (perceive (says "/help") ctx))))
  (assert (and (in "/stop" shown) (not (in "repl" shown)) (not (in "/reload" shown))) shown)
  (assert (not (in "/quit" shown)) f"/quit offered where it does nothing: {shown}")
  (assert (and (in "/quit" local) (in "/reload" local)) local))

(defn test-an-unknown-slash-command-says-so-and-names-the-nearest [registry tmp-path]
  (import passepartout.context [make-context]
          passepartout.perceive [perceive])
  (load-skills registry)
  (setv ctx (make-context :workspace (str tmp-path) :skills registry)
        typo (answer-text (run (perceive (says "/stpo") ctx))))
  (assert (and (in "/stpo is not a command" typo) (in "Did you mean /stop?" typo)) typo)
  (setv other (answer-text (run (perceive (says "/frobnicate now") ctx))))
  (assert (and (in "not a command" other) (in "/help" other) (not (in "Did you mean" other))) other)
  ;; what the built-in provider reads, Telegram's /start, a path and plain words go on
  (for [text ["/read notes.txt" "/start" "/etc/hosts is broken" "hello" "/stop"]]
    (setv seen (run (perceive (says text) ctx)))
    (assert (not (in "not a command" (str (proto-get seen ':emit)))) f"{text}: {seen}")))

(defn test-status-shows-models-breakers-budget-approvals-grants-workspace-and-sandbox [registry tmp-path]
  (import passepartout.budget [day-record]
          passepartout.cascade [make-cascade]
          passepartout.providers [make-provider]
          passepartout.context [make-context]
          passepartout.approvals.hitl [add-grant request-approval]
          passepartout.perceive [perceive]
          passepartout.records [event-append kv-put]
          passepartout.store [store-open store-close])
  (load-skills registry)
  (setv store (store-open (/ tmp-path "store.db"))
        cascade (make-cascade [(make-provider "openai/gpt-4o-mini" :name "hosted") (make-provider "symbolic")]
                              :clock (fn [] 110.0))
        session "terminal:local"
        now 1000000.0
        config {"budget" {"day_tokens" 5000 "day_cost" 2.0}}
        ctx (make-context :workspace (str tmp-path) :session session :store store :config config
                          :cascade cascade :now now :sandbox [:kind "off"] :skills registry))
  (setv (get cascade "breakers" 0) {"failures" 3 "opened-at" 100.0})
  (event-append store "outcome" session [:verdict :allow :provider "symbolic"] :ts now)
  (day-record store now [:prompt-tokens 100 :completion-tokens 23 :cost 0.5])
  (request-approval store [:action :write-file :path ".env" :content "K=1"]
                    [:verdict :escalate :reason "secrets"] (+ (says "write .env") [:session session]) ctx config now)
  (add-grant store session [:action :read-file :folder (str tmp-path)] now 30 "terminal:local" registry)
  (setv alone (answer-text (run (perceive (says "/status") ctx))))
  (assert (in "Gateways: this terminal chat only" alone) f"no daemon's heartbeat: {alone}")
  (kv-put store "daemon:heartbeat" [:time (- now 5) :gateways ["telegram" "409 Conflict: another program polls this bot"]
                                    :degraded True])
  (setv text (answer-text (run (perceive (says " /STATUS ") ctx))))
  (store-close store)
  (for [part ["hosted (openai/gpt-4o-mini): breaker open, 3 failures in a row"
              "symbolic: breaker closed — answered last"
              "Spent today: 123 of 5000 tokens, $0.5000 of $2.00."
              "Approvals waiting here: 1 ("
              f"Grants in force here: :read-file in {tmp-path}"
              f"Workspace: {tmp-path}"
              "Gateways (degraded): telegram: 409 Conflict: another program polls this bot"
              "Protection: "]]
    (assert (in part text) f"{part !r} missing from /status:\n{text}")))
