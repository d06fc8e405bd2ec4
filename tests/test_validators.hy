;; Tests of passepartout/validators.hy and skills/reply_checks.hy: the labelled
;; answers, the skill registry's :validators, and an answer's whole way
;; through step and the runner with a scripted model.

(import asyncio json
        pathlib [Path]
        pytest
        passepartout.proto [kw proto-get proto-print]
        passepartout.skills [Registry make-skill register-skill replace-skill reply-validators
                             SkillError load-skills]
        passepartout.runner [Runner]
        passepartout.records [events]
        passepartout.validators [findings judge]
        steps [expect kind-of text-of symbolic-env user-says scripted run-task])

(defn [pytest.fixture] env [tmp-path]
  (yield :from (symbolic-env tmp-path)))

(defn says [text]
  (+ "(:action :message :text " (proto-print text) ")"))

(defn last-prompt [request]
  (get (proto-get request ':messages) -1 "content"))

;; * The labelled answers
;; reply_cases_unseen.jsonl is left to the bench: written after the patterns and
;; never tuned to, it measures them; a test holding it to a goal would invite tuning.

(setv CASES (Path (/ (. (Path __file__) parent) "data" "reply_cases.jsonl")))

(defn builtin-registry []
  "A registry of its own holding the built-in skills."
  (setv r (Registry))
  (load-skills r)
  r)

(defn ctx-of [registry fields]
  "A bare context plist for findings: FIELDS, and REGISTRY in its runtime."
  (+ fields [:runtime {"skills" registry}]))

(defn _figures []
  "Per validator: [true-positive false-positive false-negative], over the labelled set."
  (setv checks (dfor v (reply-validators (builtin-registry)) (get v "name") (get v "check"))
        counts {})
  (for [line (.splitlines (.read-text CASES :encoding "utf-8"))]
    (setv case (json.loads line)
          ctx [:session "cases" :executed (get case "executed")])
    (for [[name want] (.items (get case "expect"))]
      (setv got (bool ((get checks name) (get case "text") ctx))
            c (.setdefault counts name [0 0 0]))
      (cond (and got want) (+= (get c 0) 1)
            got (+= (get c 1) 1)
            want (+= (get c 2) 1))))
  counts)

(defn test-the-labelled-set-is-what-the-bench-promises []
  (setv cases (lfor line (.splitlines (.read-text CASES :encoding "utf-8")) (json.loads line))
        violations (lfor c cases :if (any (.values (get c "expect"))) c))
  (assert (>= (len cases) 300) f"only {(len cases)} cases")
  (assert (<= 0.45 (/ (len violations) (len cases)) 0.55)
          f"{(len violations)} of {(len cases)} cases are violations")
  (expect (sorted (set (gfor c cases (get c "lang")))) ["de" "en"] "languages")
  (for [kind ["result quotes a real tool result" "promise that ends with a question"
              "past-tense talk about an earlier task" "a refusal that explains what was not done"]]
    (assert (>= (sum (gfor c cases (= (get c "kind") kind))) 10) f"too few hard negatives: {kind}")))

(defn test-each-validator-reaches-its-goal-on-the-labelled-set []
  (for [[name [tp fp fn]] (.items (_figures))]
    (setv precision (/ tp (max 1 (+ tp fp)))
          recall (/ tp (max 1 (+ tp fn))))
    (assert (>= precision 0.95) f"{name}: precision {precision :.3f} ({fp} false alarms)")
    (assert (>= recall 0.95) f"{name}: recall {recall :.3f} ({fn} missed)")))

;; * The review

(defn test-findings-of-one-answer-make-one-correction []
  (setv fs (findings "I've saved the notes. Here is the output: 42. Let me check the rest."
                     (ctx-of (builtin-registry) [:session "t"]) []))
  (expect (sorted (lfor f fs (proto-get f ':validator)))
          ["empty-promise" "hallucinated-action" "phantom-result"] "findings")
  (setv r (judge fs))
  (expect (proto-get r ':verdict) (kw "hold") "verdict")
  (expect (.count (proto-get r ':correction) "\n- ") 3 "one correction with three points"))

(defn test-a-validator-that-fired-notes-instead-of-holding []
  (setv fs (findings "I've saved the notes." (ctx-of (builtin-registry) [:session "t"]) [] ["hallucinated-action"])
        r (judge fs))
  (expect (proto-get r ':verdict) (kw "note") "verdict")
  ;; the finding is the model's and the journal's; the person reads one line
  (assert (in "hallucinated-action" (lfor f (proto-get r ':findings) (proto-get f ':validator))) r)
  (assert (not (in "hallucinated-action" (proto-get r ':note))) (proto-get r ':note))
  (assert (not (in "\n" (proto-get r ':note))) (proto-get r ':note)))

(defn test-premature-completion-is-off-unless-the-config-turns-it-on []
  (setv registry (builtin-registry)
        text "All done, the task is complete.")
  (expect (findings text (ctx-of registry [:session "t"]) [["shell" "error"]]) [] "findings by default")
  (setv fs (findings text (ctx-of registry [:session "t" :config {"validators" {"premature-completion" True}}])
                     [["shell" "error"]]))
  (expect (lfor f fs (proto-get f ':validator)) ["premature-completion"] "findings when on"))

;; * Skills declare validators

(defn test-a-skill-declares-validators-and-the-old-validator-key-is-one-of-them []
  (setv s (make-skill "polite" :validators {"no-shouting" (fn [t c] (when (.isupper t) "do not shout"))}
                      :validator (fn [t c] None)))
  (expect (sorted (lfor v (get s "validators") (get v "name"))) ["no-shouting" "polite"] "validators")
  (expect (lfor v (get s "validators") #((get v "halt") (get v "kill"))) [#(True False) #(True False)]
          "defaults")
  (with [(pytest.raises SkillError)]
    (make-skill "bad" :validators {"x" {"check" "not a function"}}))
  (with [(pytest.raises SkillError)]
    (make-skill "bad" :validators {"Not Kebab" (fn [t c] None)})))

(defn test-a-validator-that-raises-on-its-smoke-check-is-not-swapped-in []
  (setv registry (builtin-registry))
  (with [(pytest.raises SkillError :match "validator boom raised")]
    (replace-skill registry (make-skill "fragile" :validators {"boom" (fn [t c] (.nope t))})))
  (assert (not (in "boom" (lfor v (reply-validators registry) (get v "name")))) "the broken validator went live")
  (replace-skill registry (make-skill "fragile" :validators {"fine" (fn [t c] None)}))
  (assert (in "fine" (lfor v (reply-validators registry) (get v "name"))) "the new validator is not live"))

;; * The whole way through step

(setv CLAIM "I've created the file notes.txt with your list.")

(defn test-a-claimed-action-is-corrected-and-the-held-reply-never-delivered [env]
  (setv requests (scripted env [(says CLAIM)
                                (says "I have not created notes.txt yet. Shall I write it now?")])
        replies (run-task env (user-says "make me a notes file")))
  (expect (len requests) 2 "model calls")
  (assert (not (in CLAIM (lfor r replies :if (!= (kind-of r) "decision") (text-of r))))
          f"the held reply was delivered: {replies}")
  (expect (kind-of (get replies -1)) "answer" "last reply kind")
  (expect (text-of (get replies -1)) "I have not created notes.txt yet. Shall I write it now?" "answer")
  (setv held (lfor r replies :if (= (kind-of r) "decision") (text-of r)))
  (assert (and held (in "corrected" (get held 0))) f"the person was not told: {replies}")
  ;; what the check found is for the model, never shown to the person
  (assert (not (in "hallucinated-action" (get held 0))) f"a finding was shown: {held}")
  (assert (not (in "you wrote" (get held 0))) f"the correction was shown: {held}")
  (setv prompt (last-prompt (get requests 1)))
  (assert (in "Your answer was not delivered" prompt) prompt)
  (assert (in "notes.txt" prompt) prompt)
  (setv kinds (lfor e (events env.store :session "test:t1") (proto-get e ':kind)))
  (assert (in "validation" kinds) f"no validation round in the store: {kinds}"))

(defn test-a-clean-round-is-a-turn-of-the-journal-too [env]
  (scripted env [(says "Paris is the capital of France.")])
  (run-task env (user-says "what is the capital of France?"))
  (setv rows (.query env.store
                     "SELECT turn, task, data FROM events WHERE kind = 'validation'"))
  (expect (len rows) 1 "validation rounds recorded")
  (setv [turn task data] (get rows 0))
  (expect turn "thought" "the round's turn type")
  (assert task "the round belongs to no task")
  (assert (in ":verdict :deliver" data) f"the round's record: {data}")
  (assert (in ":findings ()" data) f"the round's record: {data}"))

(defn test-an-ignored-correction-delivers-the-second-answer-with-a-note [env]
  (setv requests (scripted env [(says CLAIM)])
        replies (run-task env (user-says "make me a notes file")))
  (expect (len requests) 2 "model calls")
  (setv answers (lfor r replies :if (= (kind-of r) "answer") (text-of r)))
  (expect (len answers) 1 "answers delivered")
  (assert (.startswith (get answers 0) CLAIM) (get answers 0))
  (assert (in "may not match what was done" (get answers 0)) (get answers 0))
  (assert (not (in "you wrote" (get answers 0))) f"the finding was shown: {(get answers 0)}"))

(defn test-a-claim-backed-by-an-action-goes-out-at-once [env]
  (setv requests (scripted env ["(:action :write-file :path \"notes.txt\" :content \"milk\" :explanation \"the list\")"
                                (says CLAIM)])
        replies (run-task env (user-says "make me a notes file")))
  (expect (len requests) 2 "model calls")
  (expect (text-of (get replies -1)) CLAIM "answer")
  (expect (lfor r replies :if (= (kind-of r) "decision") r) [] "held lines"))

(defn test-a-promise-that-asks-goes-out-at-once [env]
  (setv requests (scripted env [(says "I'll check the logs. Which day do you mean?")])
        replies (run-task env (user-says "any errors?")))
  (expect (len requests) 1 "model calls")
  (expect (text-of (get replies -1)) "I'll check the logs. Which day do you mean?" "answer"))

(defn test-a-raising-custom-validator-holds-the-reply-and-says-so [env]
  (register-skill env.skills (make-skill "brittle" :validators {"brittle-check" (fn [t c] (raise (RuntimeError "no dictionary")))}))
  (setv requests (scripted env [(says "The weather is fine.")])
        replies (run-task env (user-says "weather?")))
  (setv held (lfor r replies :if (= (kind-of r) "decision") (text-of r)))
  (assert (and held (not (in "no dictionary" (get held 0)))) f"the person was shown the check's failure: {replies}")
  (setv rounds (lfor e (events env.store :session "test:t1") :if (= (proto-get e ':kind) "validation") e))
  (assert (in "no dictionary" (proto-print rounds)) f"the journal does not say why: {rounds}")
  (expect (len requests) 2 "model calls")
  (expect (lfor r replies :if (= (kind-of r) "answer") r) [] "answers delivered")
  (expect (kind-of (get replies -1)) "notice" "last reply kind")
  (assert (in "withheld" (text-of (get replies -1))) (text-of (get replies -1))))

(defn test-a-killing-validator-keeps-the-answer-out-of-the-history [env]
  (register-skill env.skills (make-skill "secret-words" :validators {"no-password" {"check" (fn [t c] (when (in "swordfish" t) "do not say the password"))
                                                                          "kill" True}}))
  (setv requests (scripted env [(says "The password is swordfish.") (says "I cannot tell you that.")])
        replies (run-task env (user-says "password?")))
  (expect (text-of (get replies -1)) "I cannot tell you that." "answer")
  (setv stored (proto-print (lfor e (events env.store :session "test:t1" :kinds ["result" "answer"]) e)))
  (assert (not (in "swordfish" stored)) stored)
  (setv seen (json.dumps (proto-get (get requests 1) (quote :messages)) :ensure-ascii False))
  (assert (not (in "swordfish" seen)) seen))

(defn test-a-validator-redefined-while-running-applies-to-the-next-answer [env]
  (scripted env [(says "Hello there.")])
  (expect (text-of (get (run-task env (user-says "hi")) -1)) "Hello there." "before")
  (register-skill env.skills (make-skill "greeting" :validators {"no-hello" {"check" (fn [t c] (when (in "Hello" t) "say hi instead"))
                                                                  "halt" False}}))
  (setv answer (text-of (get (run-task env (user-says "hi")) -1)))
  (assert (and (.startswith answer "Hello there.") (in "may not match" answer)) answer)
  (assert (not (in "say hi instead" answer)) answer))

(defn test-the-runner-delivers-only-the-corrected-answer [env]
  (scripted env [(says CLAIM) (says "Nothing was written yet; tell me the contents and I will write it.")])
  (setv delivered [])
  (defn :async main []
    (setv runner (Runner env (fn [r] (.append delivered r))))
    (await (.submit runner (user-says "make me a notes file")))
    (await (.idle runner "test:t1"))
    (await (.close runner)))
  (asyncio.run (main))
  (setv answers (lfor r delivered :if (= (kind-of r) "answer") (text-of r)))
  (expect answers ["Nothing was written yet; tell me the contents and I will write it."] "answers delivered")
  (assert (not (in CLAIM (lfor r delivered :if (!= (kind-of r) "decision") (text-of r))))
          "the held reply was delivered"))

;; * What the built-in provider says is not a model's claim

(defn test-the-built-in-providers-own-help-is-delivered-unchecked [env]
  ;; its help quotes "first line of the file", which reads as a phantom result
  (setv replies (run-task env (user-says "write empty.txt")))
  (expect (lfor r replies :if (= (kind-of r) "decision") (text-of r)) [] "held lines")
  (expect (kind-of (get replies -1)) "answer" "last reply kind")
  (assert (in "first line of the file" (text-of (get replies -1))) (text-of (get replies -1)))
  (setv kinds (lfor e (events env.store :session "test:t1") (proto-get e ':kind)))
  (assert (not (in "validation" kinds)) f"the fallback's help was reviewed: {kinds}"))

(defn test-a-bang-command-never-reaches-the-model-and-its-failure-shows-its-output [env]
  (setv requests (scripted env [(says "I ran it and it is fine.")])
        replies (run-task env (user-says "!echo out; echo err >&2; exit 3")))
  (expect (len requests) 0 "model calls")
  (setv answer (text-of (get replies -1)))
  (assert (.startswith answer "`echo out; echo err >&2; exit 3` failed with exit status 3:") answer)
  (assert (and (in "out" answer) (in "err" answer)) f"the output is not shown: {answer}")
  (assert (not (in "(:" (.join "\n" (map text-of replies)))) f"a plist was shown: {replies}"))

;; * The [validators] section of the daemon's config

(defn test-the-validators-section-of-the-config-takes-effect-in-the-daemon [env]
  ;; the booted daemon's config, as a step's context carries it: nothing passed by hand
  (setv (get env.config "validators") {"hallucinated-action" False})
  (setv requests (scripted env [(says CLAIM)])
        replies (run-task env (user-says "make me a notes file")))
  (expect (len requests) 1 "model calls: the check that is off held nothing")
  (expect (text-of (get replies -1)) CLAIM "answer"))
