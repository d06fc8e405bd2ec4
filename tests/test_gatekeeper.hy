;; Tests of passepartout/gatekeeper.hy: the gates in a process of their own,
;; with real gate processes started by a real GateKeeper.

(import asyncio json os random signal threading time
        pathlib [Path]
        pytest
        passepartout.proto [kw proto-get proto-read proto-normalize]
        passepartout.context [make-context]
        passepartout.gatekeeper [GateKeeper]
        passepartout.verify [verify proposal-action]
        passepartout.skills [Registry load-skills]
        steps [expect V])

(setv CTX [:workspace "/tmp" :session "test" :now 1.0]
      MiB 1048576
      LS [:action :shell :cmd "ls"])

;; * Skill files

(setv PRELUDE #[hy[(require passepartout.macros [defskill])
(import hashlib os re threading time
        passepartout.proto [proto-get])
]hy]
      ACTIONS #[hy[(defskill test-actions
  :actuators {"shell" {"run" (fn [a c] [:status :ok])
                       "schema" [:cmd [:type "string" :required True]]}
              "message" {"run" (fn [a c] [:status :ok]) "effect" False
                         "schema" [:text [:type "string" :required True]]}})
]hy])

(defn write-skills [folder #** files]
  "FOLDER (made) holding the actions skill and FILES, a name (without .hy) to the skill's text."
  (.mkdir folder :parents True :exist-ok True)
  (.write-text (/ folder "actions.hy") (+ PRELUDE ACTIONS))
  (for [[name text] (.items files)]
    (.write-text (/ folder (+ (.replace name "_" "-") ".hy")) (+ PRELUDE text)))
  folder)

(defn gate-skill [name body [trigger "bad"] [priority 90]]
  "A skill NAME whose gate runs BODY for the command TRIGGER and allows anything
   else, holding the module's LOCK while it does."
  (+ "(setv LOCK (threading.Lock))\n"
     f"(defskill {name} :priority {priority}\n"
     "  :gate (fn [action ctx]\n"
     f"          (if (= (proto-get action ':cmd) \"{trigger}\")\n"
     f"              {body}\n"
     "              (with [LOCK] [:verdict :allow]))))\n"))

(defn rejects [name word [priority 90]]
  "A skill NAME whose gate rejects any command holding WORD."
  (+ f"(defskill {name} :priority {priority}\n"
     "  :gate (fn [action ctx]\n"
     f"          (if (in \"{word}\" (or (proto-get action ':cmd) \"\"))\n"
     f"              [:verdict :reject :reason \"{name} says no\"]\n"
     "              [:verdict :allow])))\n"))

(defn run-keeper [sources body #** options]
  "Run (BODY keeper problems) with a started keeper of SOURCES (a folder, or a
   sources dict); the keeper is closed afterwards, and the result returned."
  (setv sources (if (isinstance sources dict) sources {"folders" [(str sources)] "builtin" False}))
  (defn :async main []
    (setv keeper (GateKeeper sources #** options)
          problems (await (.start keeper)))
    (try
      (await (body keeper problems))
      (finally
        (await (.close keeper)))))
  (asyncio.run (main)))

(defn assert-reaped [pid]
  "PID is no child of this process any more: killed and reaped, no zombie."
  (with [(pytest.raises ChildProcessError)]
    (os.waitpid pid os.WNOHANG)))

(defn wait-until [check what [deadline 30.0]]
  (setv until (+ (time.monotonic) deadline))
  (while (not (check))
    (assert (< (time.monotonic) until) f"waited {deadline} s for {what}")
    (time.sleep 0.02)))

;; * Deadlines

(setv BAD-GATES
      [#("spins" "(while True None)" "gate spins did not answer within 250 ms")
       #("swallows" "(while True (try (while True None) (except [Exception] None)))"
         "gate swallows did not answer within 250 ms")
       #("ignores-everything" "(while True (try (while True None) (except [BaseException] None)))"
         "gate ignores-everything did not answer within 250 ms")
       #("stuck-in-c" "(hashlib.pbkdf2-hmac \"sha256\" b\"x\" b\"salt\" (** 10 9))"
         "gate stuck-in-c did not answer within 250 ms")
       #("backtracks" "(re.match \"(a+)+$\" (+ (* \"a\" 64) \"b\"))"
         "gate backtracks did not answer within 250 ms")
       #("sleeps" "(time.sleep 600)" "gate sleeps did not answer within 250 ms")
       #("holds-a-lock" "(do (.acquire LOCK) (while True None))"
         "gate holds-a-lock did not answer within 250 ms")
       #("hoards" "(do (setv xs []) (while True (.append xs (* b\"x\" 1000000))))"
         "gate hoards failed closed: the gate process grew by more than 64 MiB")
       #("asks-too-much" "(* \"x\" (** 10 10))"
         "gate asks-too-much failed closed: the gate process grew by more than 64 MiB")
       #("dies" "(os._exit 3)"
         "gate dies failed closed: the gate process ended while it ran: it exited with status 3")])

(defn [(pytest.mark.parametrize "name, body, words" BAD-GATES :ids (lfor g BAD-GATES (get g 0)))]
  test-a-gate-past-a-deadline-is-rejected-naming-it [tmp-path name body words]
  "Whatever way a gate fails to answer, the proposal is rejected naming the gate,
   the process that ran it is gone, and the next proposal is judged by a fresh
   one (which holds no lock the gate took)."
  (setv folder (write-skills (/ tmp-path "skills") #** {name (gate-skill name body)}))
  (defn :async check [keeper problems]
    (expect problems [] "problems loading the skills")
    (setv before (get (.pids keeper) 0)
          out (await (.verify keeper [:action :shell :cmd "bad"] CTX)))
    (expect (V out) "reject" "verdict")
    (expect (proto-get out ':gate) name "deciding gate")
    (assert (in words (proto-get out ':reason)) (proto-get out ':reason))
    (expect (proto-get out ':action) [:action :shell :cmd "bad"] "the action in the outcome")
    (assert-reaped before)
    (setv out (await (.verify keeper LS CTX)))
    (expect (V out) "allow" f"the next proposal: {out}")
    (assert (!= (get (.pids keeper) 0) before) "the next proposal was judged by the same process"))
  (run-keeper folder check :memory (* 64 MiB)))

(defn test-after-stopped-gates-nothing-is-left-running [tmp-path]
  "Gates stopped in Python, in C and while holding a lock leave no thread in the
   daemon, and every gate process is reaped once the keeper is closed."
  (setv folder (write-skills (/ tmp-path "skills")
                             :spins (gate-skill "spins" "(while True None)" "spin" 90)
                             :stuck (gate-skill "stuck" "(hashlib.pbkdf2-hmac \"sha256\" b\"x\" b\"s\" (** 10 9))" "stuck" 80)
                             :locks (gate-skill "locks" "(do (.acquire LOCK) (while True None))" "lock" 70))
        threads (set (threading.enumerate))
        seen [])
  (defn :async check [keeper problems]
    (.extend seen (.pids keeper))
    (for [[cmd gate] [["spin" "spins"] ["stuck" "stuck"] ["lock" "locks"]]]
      (setv out (await (.verify keeper [:action :shell :cmd cmd] CTX)))
      (expect (V out) "reject" f"verdict for {cmd}")
      (expect (proto-get out ':gate) gate f"deciding gate for {cmd}")
      (expect (V (await (.verify keeper LS CTX))) "allow" f"a proposal after {cmd}")
      (.extend seen (.pids keeper))))
  (run-keeper folder check)
  (assert (>= (len (set seen)) 4) f"gate processes seen: {seen}")
  (for [pid (set seen)]
    (assert-reaped pid))
  (wait-until (fn [] (<= (set (threading.enumerate)) threads)) "the threads to be as they were")
  (expect (- (set (threading.enumerate)) threads) (set) "threads left running"))

(defn test-a-stop-never-lands-outside-a-gate [tmp-path]
  "Gates that finish around their CPU deadline, many times: a stop that landed
   outside the gate (in verify's own work, or between proposals) would show as
   another verdict, another gate or another reason."
  (setv folder (write-skills (/ tmp-path "skills")
                             :edge #[hy[(import random)
(defskill edge :priority 50
  :gate (fn [action ctx]
          (setv until (+ (time.thread-time) (random.uniform 0.0 0.1)))
          (while (< (time.thread-time) until) None)
          [:verdict :allow]))
]hy])
        seen [])
  (defn :async check [keeper problems]
    (for [i (range 12)]
      (setv out (await (.verify keeper LS CTX)))
      (.append seen (V out))
      (when (= (V out) "reject")
        (expect (proto-get out ':gate) "edge" "deciding gate")
        (assert (in "gate edge did not answer within 50 ms" (proto-get out ':reason))
                (proto-get out ':reason)))))
  (run-keeper folder check :budget 0.05)
  (assert (<= (set seen) #{"allow" "reject"}) f"verdicts {seen}"))

(defn test-a-gate-process-that-dies-between-proposals-is-replaced [tmp-path]
  "A gate process killed from outside: the proposal sent to it is rejected,
   never allowed, and the next one is judged by a fresh process."
  (setv folder (write-skills (/ tmp-path "skills") :quiet (rejects "quiet" "rm")))
  (defn :async check [keeper problems]
    (setv pid (get (.pids keeper) 0))
    (os.kill pid signal.SIGKILL)
    (setv out (await (.verify keeper LS CTX)))
    (expect (V out) "reject" "the proposal in flight")
    (expect (proto-get out ':gate) "verify" "deciding gate")
    (assert (in "the gate process ended" (proto-get out ':reason)) (proto-get out ':reason))
    (assert-reaped pid)
    (expect (V (await (.verify keeper LS CTX))) "allow" "the next proposal")
    (expect (V (await (.verify keeper [:action :shell :cmd "rm x"] CTX))) "reject" "the gates still judge"))
  (run-keeper folder check))

;; * Judging as verify does

(setv ROOT (. (Path __file__) parent parent))

(defn corpus-sample [n]
  "N proposals (as actions) from the outside corpora and the project's own attack
   and benign sets, the same N each run."
  (setv lines [])
  (for [path (+ (sorted (.glob (/ ROOT "tests" "data" "corpora") "*.jsonl"))
                [(/ ROOT "tests" "data" "attacks.jsonl") (/ ROOT "tests" "data" "benign.jsonl")])]
    (for [line (.splitlines (.read-text path :encoding "utf-8"))]
      (when (.strip line)
        (.append lines (get (json.loads line) "proposal")))))
  (lfor text (.sample (random.Random 11) lines (min n (len lines)))
        (proposal-action (proto-normalize (proto-read text)))))

(defn test-the-gate-process-judges-as-verify-does [tmp-path]
  (setv config {"sandbox" {"mode" "off"}}
        registry (Registry)
        _ (load-skills registry)
        ctx (make-context :workspace (str tmp-path) :session "corpus" :config config
                          :secrets ["pp-test-secret-9c1d2e3f4a5b"] :skills registry
                          :sandbox [:kind "off" :network "on" :why "the gates alone"])
        actions (corpus-sample 150)
        want (lfor a actions (verify a ctx)))
  (defn :async check [keeper problems]
    (expect problems [] "problems loading the built-in skills")
    (lfor a actions (await (.verify keeper a ctx))))
  (setv got (run-keeper {"folders" [] "builtin" True} check :config config))
  (assert (> (len (sfor o want (V o))) 1) "the sample holds more than one verdict")
  (for [[a g w] (zip actions got want)]
    (expect g w f"the outcome for {a}")))

(defn test-a-malformed-or-oversized-action-is-rejected-with-a-reason [tmp-path]
  (setv folder (write-skills (/ tmp-path "skills") :quiet (rejects "quiet" "rm"))
        deep [:action :shell :cmd "ls"])
  (for [i (range 40)] (setv deep [:inner deep]))
  (defn :async check [keeper problems]
    (setv pid (get (.pids keeper) 0))
    (for [[action gate words]
          [[[:action :shell :cmd (object)] "proto" "cannot be written as plist text"]
           [{"action" "shell"} "proto" "cannot be written as plist text"]
           [[:action :shell :cmd (* "x" 70000)] "proto" "larger than 65536 bytes"]
           [deep "proto" "nested deeper than 32"]
           ["ls" "schema" "plist"]
           [[1 2 3] "schema" "plist"]
           [[:action :teleport :to "mars"] "schema" "unknown action :teleport"]]]
      (setv out (await (.verify keeper action CTX)))
      (expect (V out) "reject" f"verdict for {action !r:.60}")
      (expect (proto-get out ':gate) gate f"deciding gate for {action !r:.60}")
      (assert (in words (proto-get out ':reason)) (proto-get out ':reason))
      (assert (is (proto-get out ':proposed) action) f"the proposal in the outcome for {action !r:.60}"))
    (expect (V (await (.verify keeper LS CTX))) "allow" "a proposal after them")
    (expect (get (.pids keeper) 0) pid "the gate process after them"))
  (run-keeper folder check))

(defn test-the-gate-process-sees-the-config-the-secrets-and-repl-forms [tmp-path]
  (setv folder (write-skills (/ tmp-path "skills")
                             :configured #[hy[(defskill configured :priority 60
  :gate (fn [action ctx]
          (setv config (.get (proto-get ctx ':runtime) "config"))
          (if (= (proto-get action ':cmd) "tell")
              [:verdict :reject
               :reason (+ "mode " (get config "mode") ", "
                          (str (len (proto-get ctx ':secrets))) " secret(s), at " (str (proto-get ctx ':now)))]
              [:verdict :allow])))
]hy])
        form #[hy[(defskill from-the-repl :priority 70
  :gate (fn [action ctx]
          (if (= (proto-get action ':cmd) "rm")
              [:verdict :reject :reason "not while I watch"]
              [:verdict :allow])))]hy])
  (defn :async check [keeper problems]
    (setv out (await (.verify keeper [:action :shell :cmd "tell"] (+ CTX [:secrets ["s3cr3t-value-0001"]]))))
    (expect (proto-get out ':reason) "mode strict, 1 secret(s), at 1.0" "what the gate saw")
    (setv out (await (.verify keeper [:action :shell :cmd "tell"] [:workspace "/tmp" :now 2.5 :secrets []])))
    (expect (proto-get out ':reason) "mode strict, 0 secret(s), at 2.5" "what the gate saw in another context")
    (setv out (await (.verify keeper [:action :shell :cmd "rm"] CTX)))
    (expect (proto-get out ':gate) "from-the-repl" "the gate given at the REPL"))
  (run-keeper {"folders" [(str folder)] "builtin" False "forms" [form]} check :config {"mode" "strict"}))

(defn test-many-proposals-at-once-each-get-their-own-outcome [tmp-path]
  (setv folder (write-skills (/ tmp-path "skills")
                             :asks #[hy[(defskill asks :priority 60
  :gate (fn [action ctx]
          (setv cmd (proto-get action ':cmd))
          (cond (= cmd "bad") (while True None)
                (.startswith cmd "echo") [:verdict :escalate :reason (+ "asked about " cmd)]
                True [:verdict :allow])))
]hy]))
  (defn :async check [keeper problems]
    (setv cmds (+ (lfor i (range 15) f"echo {i}") ["bad"] (lfor i (range 15 30) f"echo {i}"))
          outs (await (asyncio.gather #* (gfor c cmds (.verify keeper [:action :shell :cmd c] CTX)))))
    (for [[c out] (zip cmds outs)]
      (expect (proto-get (proto-get out ':action) ':cmd) c "the action of the outcome")
      (if (= c "bad")
          (expect (proto-get out ':gate) "asks" "the gate that spun")
          (expect (proto-get out ':reason) (+ "asked about " c) f"the reason for {c}"))))
  (run-keeper folder check))

(defn test-a-caller-that-stops-waiting-leaves-the-wire-in-order [tmp-path]
  (setv marker (/ tmp-path "started")
        folder (write-skills (/ tmp-path "skills")
                             :slow (+ f"(setv MARKER {(json.dumps (str marker))})\n"
                                      #[hy[(defskill slow :priority 60
  :gate (fn [action ctx]
          (when (= (proto-get action ':cmd) "slow")
            (.write-text (hy.I.pathlib.Path MARKER) "")
            (time.sleep 0.5))
          [:verdict :escalate :reason (+ "asked about " (proto-get action ':cmd))]))
]hy])))
  (defn :async check [keeper problems]
    (setv task (asyncio.ensure-future (.verify keeper [:action :shell :cmd "slow"] CTX))
          until (+ (time.monotonic) 30))
    (while (not (.exists marker))
      (assert (< (time.monotonic) until) "the slow gate did not start")
      (await (asyncio.sleep 0.01)))
    (.cancel task)
    (with [(pytest.raises asyncio.CancelledError)]
      (await task))
    (setv out (await (.verify keeper [:action :shell :cmd "next"] CTX)))
    (expect (proto-get out ':reason) "asked about next" "the outcome after a cancelled one"))
  (run-keeper folder check))

(defn test-the-gate-process-runs-the-installed-package-not-the-working-folder [tmp-path monkeypatch]
  "A folder called passepartout in the daemon's working folder is not what the
   gate process imports."
  (setv decoy (/ tmp-path "cwd" "passepartout"))
  (.mkdir decoy :parents True)
  (.write-text (/ decoy "__init__.py") "raise ImportError('the decoy was imported')\n")
  (.chdir monkeypatch (. decoy parent))
  (setv folder (write-skills (/ tmp-path "skills") :quiet (rejects "quiet" "rm")))
  (defn :async check [keeper problems]
    (expect (V (await (.verify keeper [:action :shell :cmd "rm x"] CTX))) "reject" "a proposal"))
  (run-keeper folder check))

;; * Loading skills

(defn test-load-changes-the-skills-all-or-nothing [tmp-path]
  (setv first (write-skills (/ tmp-path "first") :first (rejects "first" "rm"))
        broken (write-skills (/ tmp-path "broken") :broken #[hy[(defskill broken :priority 60
  :gate (fn [action ctx] (raise (ValueError "broken on purpose"))))
]hy])
        loops (write-skills (/ tmp-path "loops") :loops #[hy[(defskill loops :priority 60
  :gate (fn [action ctx] (while True None)))
]hy])
        syntax (write-skills (/ tmp-path "syntax") :syntax "(defskill syntax :gate (fn [a c]\n")
        second (write-skills (/ tmp-path "second")
                             :second (rejects "second" "mv")
                             :boom (gate-skill "boom" "(os._exit 1)" "boom")))
  (defn sources [folder] {"folders" [(str folder)] "builtin" False})
  (defn :async judged [keeper cmd]
    (setv out (await (.verify keeper [:action :shell :cmd cmd] CTX)))
    #((V out) (proto-get out ':gate)))
  (defn :async check [keeper problems]
    (expect (await (judged keeper "rm x")) #("reject" "first") "at the start")
    (for [[folder words] [[broken "skill broken: its gate failed the smoke check"]
                          [loops "gate loops did not answer within 250 ms"]
                          [syntax "failed to load"]]]
      (setv problems (await (.load keeper (sources folder))))
      (assert (any (gfor p problems (in words p))) f"problems loading {folder.name}: {problems}")
      (expect (await (judged keeper "rm x")) #("reject" "first") f"after loading {folder.name} failed"))
    (expect (await (.load keeper (sources second))) [] "problems loading good skills")
    (expect (await (judged keeper "rm x")) #("allow" None) "rm, with the new skills")
    (expect (await (judged keeper "mv x y")) #("reject" "second") "mv, with the new skills")
    ;; a fresh gate process judges with the skills loaded last
    (expect (await (judged keeper "boom")) #("reject" "boom") "a gate that ends its process")
    (expect (await (judged keeper "mv x y")) #("reject" "second") "mv, in a fresh gate process")
    (expect (await (judged keeper "rm x")) #("allow" None) "rm, in a fresh gate process"))
  (run-keeper first check))

(defn test-start-reports-a-skill-file-that-fails-and-judges-with-the-rest [tmp-path]
  (setv folder (write-skills (/ tmp-path "skills")
                             :quiet (rejects "quiet" "rm")
                             :broken "(raise (RuntimeError \"broken on purpose\"))\n"))
  (defn :async check [keeper problems]
    (assert (and (= (len problems) 1) (in "broken on purpose" (get problems 0))) f"problems: {problems}")
    (expect (V (await (.verify keeper [:action :shell :cmd "rm x"] CTX))) "reject" "the skill that loaded"))
  (run-keeper folder check))

;; * The daemon's gates

(import passepartout.daemon [boot shutdown start-services stop-services]
        passepartout.providers [make-provider]
        passepartout.loop [step]
        passepartout.repl [make-namespace evaluate-async]
        passepartout.reload [reload-skills note-skill-files]
        passepartout.skills [make-skill register-skill get-skill])

(defn process-daemon [tmp-path folder]
  "The services of a daemon booted with its gates in a gate process, the person's
   skills in FOLDER, the model scripted to propose `bad` and the sandbox off."
  (setv config (/ tmp-path "config.toml"))
  (.write-text config (+ "[sandbox]\nmode = \"off\"\n[skills]\ndirs = [" (json.dumps (str folder)) "]\n"))
  (setv env (boot :config-path (str config)
                  :environ {"PASSEPARTOUT_DATA_DIR" (str (/ tmp-path "data")) "HOME" (str tmp-path)}
                  :providers [(make-provider "symbolic")]
                  :gates "process"))
  (setv env.complete (fn [request]
                       [:status :ok :provider "script"
                        :text "(:action :shell :cmd \"bad\" :explanation \"try it\")"]))
  env)

(defn said [text]
  [:type :event :source [:gateway :test :chat "g"] :payload [:sensor :user-input :text text]])

(defn own-threads []
  "The names of this process's threads but asyncio's waiters on child processes
   (one per gate process, which ends with it)."
  (sorted (gfor t (threading.enumerate) :if (not (in "waitpid" t.name)) t.name)))

(defn texts [emitted]
  (lfor e emitted (str (proto-get (proto-get e ':payload) ':text))))

(defn test-the-daemon-judges-in-its-gate-process-and-survives-a-gate-that-never-answers [tmp-path]
  "A gate that loops forever in the daemon's skills is cut off in the gate
   process: the proposal is refused naming it, the daemon's own threads are as
   they were, and the next proposal is judged by a fresh process."
  (setv folder (/ tmp-path "skills"))
  (.mkdir folder)
  (.write-text (/ folder "spinner.hy")
               (+ PRELUDE (gate-skill "spinner" "(while True None)")))
  (setv env (process-daemon tmp-path folder))
  (defn :async main []
    (await (start-services env))
    (try
      (setv threads (own-threads)
            before (get (.pids env.gates.keeper) 0)
            out (await (step (said "go") env)))
      (setv env.complete (fn [request]
                           [:status :ok :provider "script"
                            :text "(:action :message :text \"fine\")"]))
      (setv next (await (step (said "again") env))
            after (get (.pids env.gates.keeper) 0))
      #(threads (own-threads) before after out next)
      (finally
        (await (stop-services env)))))
  (setv [threads-before threads-after before after out next] (asyncio.run (main)))
  (shutdown env)
  (setv told (.join "\n" (texts out)))
  (assert (in "spinner did not answer within" told) f"what the person was told: {told}")
  (assert (!= before after) f"the gate process {before} was replaced")
  (assert-reaped before)
  (expect threads-after threads-before "threads of the daemon after the cut-off gate")
  (assert (in "fine" (.join "\n" (texts next))) f"the next answer: {(texts next)}"))

(defn test-a-repl-defskill-reaches-the-gate-process-and-one-it-cannot-hold-is-refused [tmp-path]
  (setv folder (/ tmp-path "skills"))
  (.mkdir folder)
  (setv env (process-daemon tmp-path folder))
  (defn :async main []
    (await (start-services env))
    (try
      (setv loop (asyncio.get-running-loop)
            ns (make-namespace {} env.skills
                               (fn [forms]
                                 (.result (asyncio.run-coroutine-threadsafe (.check env.gates forms) loop) 60)))
            defined (await (evaluate-async ns "(defskill no-bad :priority 90 :gate (fn [a c] (if (= (hy.I.passepartout/proto.proto-get a ':cmd) \"bad\") [:verdict :reject :reason \"no-bad says no\"] [:verdict :allow])))" 60))
            judged (await (step (said "go") env))
            looping (await (evaluate-async ns "(defskill no-bad :priority 90 :gate (fn [a c] (while True None)))" 60))
            again (await (step (said "go") env)))
      #(defined judged looping again)
      (finally
        (await (stop-services env)))))
  (setv [defined judged looping again] (asyncio.run (main)))
  (shutdown env)
  (assert (get defined "ok") f"the first defskill: {defined}")
  (assert (in "no-bad says no" (.join "\n" (texts judged))) f"judged with the REPL's gate: {(texts judged)}")
  (assert (not (get looping "ok")) f"a gate that never answers is refused at the REPL: {looping}")
  (assert (in "no-bad" (get looping "error")) (get looping "error"))
  (assert (in "no-bad says no" (.join "\n" (texts again))) f"the old gate still judges: {(texts again)}"))

(defn test-a-reload-the-gate-process-cannot-take-changes-nothing [tmp-path]
  (setv folder (/ tmp-path "skills"))
  (.mkdir folder)
  (setv f (/ folder "guard.hy"))
  (.write-text f (+ PRELUDE (rejects "guard" "bad")))
  (setv env (process-daemon tmp-path folder))
  (defn :async main []
    (await (start-services env))
    (try
      (note-skill-files env)
      (.write-text f (+ PRELUDE (gate-skill "guard" "(while True None)" :trigger "ls")))
      (setv results (await (reload-skills env))
            judged (await (step (said "go") env)))
      #(results judged)
      (finally
        (await (stop-services env)))))
  (setv [results judged] (asyncio.run (main)))
  (shutdown env)
  (setv errors (lfor r results :if (proto-get r ':error) (proto-get r ':error)))
  (expect (len errors) 1 f"the reload of guard.hy is refused: {results}")
  (assert (in "gate process" (get errors 0)) (get errors 0))
  (assert (in "guard says no" (.join "\n" (texts judged))) f"the old guard still judges: {(texts judged)}"))
