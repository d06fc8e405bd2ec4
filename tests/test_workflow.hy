;; Tests of passepartout/workflow.hy and skills/workflow.hy: the vocabulary of
;; background work, its gate, the workflows in the store, workers as sessions.

(import pytest
        passepartout.proto [kw proto-get proto-put proto-read]
        passepartout.config [config-defaults]
        passepartout.context [make-context]
        passepartout.verify [verify]
        passepartout.workflow [plan-graph graph-order MAX-DEPTH]
        steps [expect V until])

(defn gate-ctx [registry [workers None]]
  "A gate context of a daemon with the default config, standing as WORKERS."
  (make-context :workspace "/tmp" :session "test:1" :skills registry
                :config {"workers" (config-defaults "workers")} :sandbox [:kind :none]
                :workers workers))

(defn judge [registry text [workers None]]
  (verify (proto-read text) (gate-ctx registry workers)))

(setv PLAN-OK "(:action :plan :title \"compare\" :explanation \"three options, then a comparison\"
                :steps ((:id \"a\" :objective \"look at option a\")
                        (:id \"b\" :objective \"look at option b\")
                        (:id \"c\" :objective \"compare a and b\" :depends-on (\"a\" \"b\"))))")

;; * The vocabulary and its gate

(defn test-a-plan-whose-steps-can-run-is-allowed [registry]
  (setv out (judge registry PLAN-OK))
  (expect (V out) "allow" (str (proto-get out ':reason))))

(defn test-a-cycle-is-refused-naming-the-circle [registry]
  (setv out (judge registry "(:action :plan :title \"t\" :explanation \"circle\"
                              :steps ((:id \"a\" :objective \"x\" :depends-on (\"c\"))
                                      (:id \"b\" :objective \"y\" :depends-on (\"a\"))
                                      (:id \"c\" :objective \"z\" :depends-on (\"b\"))))"))
  (expect (V out) "reject" "verdict")
  (expect (proto-get out ':gate) "workflow" "gate")
  (setv why (proto-get out ':reason))
  (assert (in "circle" why) why)
  (for [id ["'a'" "'b'" "'c'"]]
    (assert (in id why) f"{id} is not named in {why}")))

(defn test-a-dependency-on-no-step-is-refused [registry]
  (setv out (judge registry "(:action :plan :title \"t\" :explanation \"x\"
                              :steps ((:id \"a\" :objective \"x\")
                                      (:id \"b\" :objective \"y\" :depends-on (\"zz\"))))"))
  (expect (V out) "reject" "verdict")
  (expect (proto-get out ':gate) "workflow" "gate")
  (assert (in "'zz', which is no step of this plan" (proto-get out ':reason)) (proto-get out ':reason)))

(defn test-steps-must-have-ids-of-their-own-and-objectives [registry]
  (for [[steps words] [["((:id \"a\" :objective \"x\") (:id \"a\" :objective \"y\"))" "two steps"]
                       ["((:objective \"x\"))" "has no :id"]
                       ["((:id \"a\"))" "has no :objective"]
                       ["()" "needs :steps"]]]
    (setv out (judge registry f"(:action :plan :title \"t\" :explanation \"x\" :steps {steps})"))
    (expect (V out) "reject" steps)
    (assert (in words (str (proto-get out ':reason))) f"{steps}: {(proto-get out ':reason)}")))

(defn test-a-spawn-may-depend-only-on-workers-the-conversation-has [registry]
  (setv spawn "(:action :spawn :objective \"sum up\" :depends-on (\"w1\") :explanation \"fan in\")"
        out (judge registry spawn))
  (expect (V out) "reject" "verdict with no workers")
  (assert (in "'w1', which is no worker" (proto-get out ':reason)) (proto-get out ':reason))
  (setv out (judge registry spawn [:depth 0 :known ["w1" "w2"]]))
  (expect (V out) "allow" (str (proto-get out ':reason))))

(defn test-workers-nest-two-levels-deep-and-no-deeper [registry]
  (setv spawn "(:action :spawn :objective \"dig\" :explanation \"deeper\")")
  (for [depth (range MAX-DEPTH)]
    (expect (V (judge registry spawn [:depth depth :known []])) "allow" f"a spawn at depth {depth}"))
  (setv out (judge registry spawn [:depth MAX-DEPTH :known []]))
  (expect (V out) "reject" f"a spawn at depth {MAX-DEPTH}")
  (assert (in "levels deep" (proto-get out ':reason)) (proto-get out ':reason))
  (expect (V (judge registry PLAN-OK [:depth MAX-DEPTH :known []])) "reject" "a plan at the depth limit"))

(defn test-tools-name-a-profile-or-actions-there-are [registry]
  (expect (V (judge registry "(:action :spawn :objective \"o\" :tools \"researcher\" :explanation \"look into it\")"))
          "allow" "a known profile")
  (expect (V (judge registry "(:action :spawn :objective \"o\" :tools (\"read-file\") :explanation \"look into it\")"))
          "allow" "a list of actions")
  (setv out (judge registry "(:action :spawn :objective \"o\" :tools \"hacker\" :explanation \"look into it\")"))
  (expect (V out) "reject" "an unknown profile")
  (assert (in "file-worker, researcher" (proto-get out ':reason)) (proto-get out ':reason))
  (setv out (judge registry "(:action :spawn :objective \"o\" :tools (\"teleport\") :explanation \"look into it\")"))
  (expect (V out) "reject" "an unknown action")
  (setv out (judge registry "(:action :spawn :objective \"o\" :not-before \"soon\" :explanation \"look into it\")"))
  (expect (V out) "reject" "a time that is none")
  (assert (in "ISO 8601" (proto-get out ':reason)) (proto-get out ':reason)))

(defn test-a-worker-takes-only-the-actions-of-its-profile [registry]
  (setv worker [:depth 1 :known [] :id "w1" :tools ["read-file" "write-file"]])
  (setv out (judge registry "(:action :shell :cmd \"ls\" :explanation \"look\")" worker))
  (expect (V out) "reject" "a shell command from a file worker")
  (expect (proto-get out ':gate) "workflow" "gate")
  (assert (in ":read-file, :write-file" (proto-get out ':reason)) (proto-get out ':reason))
  (expect (V (judge registry "(:action :read-file :path \"notes.txt\")" worker)) "allow" "a read")
  (expect (V (judge registry "(:action :message :text \"done\")" worker)) "allow" "its answer"))

(defn test-a-read-only-shell-runs-only-where-the-sandbox-holds-it [registry]
  (setv worker [:depth 1 :known [] :id "w1" :tools ["shell:read-only" "read-file"]]
        ls "(:action :shell :cmd \"ls\" :explanation \"look\")"
        out (judge registry ls worker))
  (expect (V out) "reject" "a read-only shell without the sandbox")
  (expect (proto-get out ':gate) "workflow" "gate")
  (assert (in ":read-file" (proto-get out ':reason)) (proto-get out ':reason))
  (setv boxed (verify (proto-read ls)
                      (proto-put (gate-ctx registry worker) ':sandbox [:kind "bubblewrap" :network "off"])))
  (assert (!= (proto-get boxed ':gate) "workflow")
          f"the workflow gate refused a read-only shell in the sandbox: {(proto-get boxed ':reason)}")
  (expect (V (judge registry "(:action :spawn :objective \"o\" :tools (\"shell:read-only\") :explanation \"look\")"))
          "allow" "a spawn whose tools name the read-only shell"))

(defn test-spawn-and-plan-need-an-explanation-like-any-effect [registry]
  (setv out (judge registry "(:action :spawn :objective \"o\")"))
  (expect (V out) "reject" "verdict")
  (expect (proto-get out ':gate) "explanation" "gate"))

(defn test-a-worker-has-the-step-budget-of-workers []
  (import passepartout.context [context-limit])
  (setv config {"limits" {"step_budget" 8} "workers" {"step_budget" 3}})
  (expect (context-limit (make-context :config config :sandbox [:kind :none]
                                       :workers [:id "w1" :depth 1 :known []])
                         "step-budget")
          3 "a worker's step budget")
  (expect (context-limit (make-context :config config :sandbox [:kind :none] :workers [:depth 0 :known []])
                         "step-budget")
          8 "the conversation's step budget"))

(defn test-the-graph-is-ordered-by-graphlib []
  (setv [graph why] (plan-graph (proto-read "((:id \"c\" :objective \"x\" :depends-on (\"a\" \"b\"))
                                              (:id \"b\" :objective \"y\" :depends-on (\"a\"))
                                              (:id \"a\" :objective \"z\"))")))
  (expect why None "a plan that can run")
  (expect (get (graph-order graph) 0) ["a" "b" "c"] "the order"))

;; * Workers running as sessions, with the scripted model on loopback

(import asyncio
        passepartout.providers [make-provider]
        passepartout.daemon [boot shutdown]
        passepartout.gateways.hub [Hub]
        passepartout.task [ends-task]
        passepartout.records [events]
        passepartout.workers [workflows-of workflow-workers worker-session]
        steps [user-says text-of kind-of last-said says converse])

(setv KEY-ENV "PASSEPARTOUT_TEST_SCRIPTED_KEY")

(defn boot-daemon [tmp-path openai-server [more ""]]
  "The services of a daemon on the data dir under TMP-PATH whose one model is
   the scripted server's ok script; MORE is added to its config."
  (setv config (/ tmp-path "config.toml"))
  (.write-text config (+ "[sandbox]\nmode = \"off\"\n" more))
  (boot :config-path (str config)
        :environ {"PASSEPARTOUT_DATA_DIR" (str (/ tmp-path "data")) "HOME" (str tmp-path)}
        ;; results as tool messages, so that what the model is asked last is a
        ;; message of its own (the text form joins turns of one role in a row)
        :providers [(make-provider "openai/scripted" :api-base (.url openai-server "ok")
                                   :api-key-env KEY-ENV :tool-results "native")]))

(defn [pytest.fixture] daemon [tmp-path openai-server monkeypatch]
  (.setenv monkeypatch KEY-ENV "sk-scripted-test")
  (setv services (boot-daemon tmp-path openai-server))
  (yield services)
  (shutdown services))


(defn only-workflow [services]
  (setv found (workflows-of services.store "test:1"))
  (expect (len found) 1 "workflows of the chat")
  (get found 0))

(defn test-a-plan-fans-out-and-in-and-its-result-comes-back-to-the-spawner [daemon openai-server]
  (setv openai-server.responder
        (fn [body]
          (setv last (last-said body))
          (cond (in "Your objective:\nlook at option a" last) (says "option a is cheap")
                (in "Your objective:\nlook at option b" last) (says "option b is fast")
                (in "Your objective:\ncompare a and b" last)
                (says (if (and (in "option a is cheap" last) (in "option b is fast" last))
                          "b wins on speed, a on price"
                          "the results of a and b were not given"))
                (.startswith last "Result of (:action :plan")
                (says (+ "The workflow is over: "
                         (if (in "b wins on speed, a on price" last) "b wins on speed, a on price" "nothing")))
                True PLAN-OK)))
  (setv replies (asyncio.run (converse daemon "compare option a and option b")))
  (expect (text-of (get replies -1)) "The workflow is over: b wins on speed, a on price" "the spawner's answer")
  (setv f (only-workflow daemon)
        ws (dfor w (workflow-workers daemon.store (proto-get f ':id)) (proto-get w ':step) w))
  (expect (proto-get f ':state) "done" "the workflow's state")
  (expect (lfor s "abc" (proto-get (get ws s) ':state)) ["done" "done" "done"] "the workers' states")
  (expect (proto-get (get ws "c") ':result) "b wins on speed, a on price" "c's result")
  ;; c started only once a and b had finished: fan-in
  (assert (>= (proto-get (get ws "c") ':started)
              (max (proto-get (get ws "a") ':finished) (proto-get (get ws "b") ':finished)))
          "c started before its dependencies finished")
  ;; each worker is a session of its own, with its own thread in the journal
  (for [s "abc"]
    (setv session (worker-session (proto-get (get ws s) ':id))
          kinds (lfor e (events daemon.store :session session) (proto-get e ':kind)))
    (for [k ["input" "outcome" "answer"]]
      (assert (in k kinds) f"worker {s}'s thread has no {k}: {kinds}")))
  ;; the spawner's task waited: one trace for the plan, then the answer, and one model call after the results
  (setv kinds (lfor r replies (kind-of r))
        progress (lfor r replies :if (= (kind-of r) "progress") r))
  (expect [(get kinds 0) (get kinds -1) (sorted (set (cut kinds 1 -1)))] ["trace" "answer" ["progress"]]
          "the chat's replies")
  ;; how far the workflow is, told under one key (one message, edited, on Telegram)
  (expect (set (gfor r progress (proto-get (proto-get r ':payload) ':progress-key)))
          #{f"workflow-{(proto-get f ':id)}"} "the progress keys")
  (expect (text-of (get progress -1)) "Workflow 'compare', 3 workers: 3 done" "the last progress")
  (expect (lfor r progress (bool (proto-get (proto-get r ':payload) ':finished)))
          (+ (* [False] (- (len progress) 1)) [True]) "only the last progress says the workflow finished")
  ;; each worker's outcome row: what the validators said, and the spawner's last call was told of them
  (expect (proto-get (get ws "c") ':checks) ["deliver"] "c's checks")
  (setv [last-call] (lfor r openai-server.requests
                          :if (.startswith (last-said (get r "body")) "Result of (:action :plan")
                          (get r "body")))
  (setv system (get (get last-call "messages") 0 "content"))
  (assert (in "Workers of this conversation that finished" system) system)
  (assert (in f"- {(proto-get (get ws "c") ':id)} (compare a and b): done in" system) system))

(defn test-a-failed-worker-fails-its-dependents-and-the-spawner-is-told [daemon openai-server]
  (setv openai-server.responder
        (fn [body]
          (setv last (last-said body))
          (cond (in "Your objective:\nread the notes" last)
                "(:action :shell :cmd \"cat notes.txt\" :explanation \"read the notes\")"
                (in "Your objective:\nsum the notes up" last) (says "never asked")
                (in "Your objective:\ncount the files" last) (says "three files")
                (.startswith last "Result of (:action :plan")
                (says (if (and (in "b failed: not run: it depends on a, which failed" last)
                               (in "three files" last))
                          "a failed, so b did not run; c found three files"
                          (+ "unexpected: " (cut last 300))))
                (.startswith last "Your previous proposals were refused") None
                True
                "(:action :plan :title \"notes\" :explanation \"read, then sum up; count meanwhile\"
                  :steps ((:id \"a\" :objective \"read the notes\" :tools (\"read-file\"))
                          (:id \"b\" :objective \"sum the notes up\" :depends-on (\"a\"))
                          (:id \"c\" :objective \"count the files\")))")))
  ;; what the worker proposes after a refusal: the same shell command again
  (setv openai-server.reply-text "(:action :shell :cmd \"cat notes.txt\" :explanation \"read the notes\")")
  (setv replies (asyncio.run (converse daemon "read the notes")))
  (expect (text-of (get replies -1)) "a failed, so b did not run; c found three files" "the spawner's answer")
  (setv f (only-workflow daemon)
        ws (dfor w (workflow-workers daemon.store (proto-get f ':id)) (proto-get w ':step) w))
  (expect (proto-get f ':state) "failed" "the workflow's state")
  (expect (lfor s "abc" (proto-get (get ws s) ':state)) ["failed" "failed" "done"] "the workers' states")
  ;; a was refused by the gates, as any proposal is: its profile has no shell
  (assert (in "may not take :shell" (proto-get (get ws "a") ':result)) (proto-get (get ws "a") ':result))
  ;; b never ran: no session, no model call
  (expect (proto-get (get ws "b") ':started) None "b's start")
  (assert (not (events daemon.store :session (worker-session (proto-get (get ws "b") ':id))))
          "b's session has turns"))

(defn test-workers-nest-and-the-nested-result-reaches-the-first-spawner [daemon openai-server]
  (setv openai-server.responder
        (fn [body]
          (setv last (last-said body))
          (cond (in "Your objective:\ndig into it" last)
                "(:action :spawn :objective \"dig deeper\" :explanation \"a worker of my own\")"
                (in "Your objective:\ndig deeper" last)
                "(:action :spawn :objective \"dig even deeper\" :explanation \"one more level\")"
                (and (.startswith last "Your previous proposals were refused") (in "levels deep" last))
                (says "deep result")
                (.startswith last "Result of (:action :spawn")
                (says (if (in "deep result" last) "a got: deep result" "a got nothing"))
                (.startswith last "Result of (:action :plan")
                (says (if (in "a got: deep result" last) "done: a got: deep result" "done: nothing"))
                True
                "(:action :plan :title \"dig\" :explanation \"dig in the background\"
                  :steps ((:id \"a\" :objective \"dig into it\")))")))
  (setv replies (asyncio.run (converse daemon "dig")))
  (expect (text-of (get replies -1)) "done: a got: deep result" "the spawner's answer")
  (setv [outer] (workflows-of daemon.store "test:1")
        [a] (workflow-workers daemon.store (proto-get outer ':id))
        [inner] (workflows-of daemon.store (worker-session (proto-get a ':id)))
        [deep] (workflow-workers daemon.store (proto-get inner ':id)))
  (expect [(proto-get a ':depth) (proto-get deep ':depth)] [1 2] "the depths")
  (expect (proto-get deep ':result) "deep result" "the nested worker's result")
  (expect (proto-get inner ':depth) 1 "the nested workflow's spawner depth")
  (expect (workflows-of daemon.store (worker-session (proto-get deep ':id))) [] "a third level"))

;; * Stopping a workflow, and seeing it

(import os time
        pathlib [Path])

(defn processes-with [marker]
  "The ids of the sleep processes whose command line holds MARKER."
  (setv out [])
  (for [p (.glob (Path "/proc") "[0-9]*")]
    (try (setv line (.read-bytes (/ p "cmdline")))
         (when (and (.startswith line b"sleep\x00") (in (.encode marker) line))
           (.append out p.name))
         (except [OSError] None)))
  out)

(defn test-stop-ends-the-whole-workflow-and-workers-shows-it [daemon openai-server]
  (setv marker "31.4159"
        openai-server.responder
        (fn [body]
          (setv last (last-said body))
          (cond (in "Your objective:\nwait" last)
                f"(:action :shell :cmd \"sleep {marker}\" :explanation \"wait a while\")"
                (.startswith last "Result of (:action :plan") (says "the workflow was taken on")
                True
                "(:action :plan :title \"wait\" :explanation \"three waits in the background\"
                  :steps ((:id \"a\" :objective \"wait once\" :tools (\"shell\"))
                          (:id \"b\" :objective \"wait twice\" :tools (\"shell\"))
                          (:id \"c\" :objective \"wait thrice\" :tools (\"shell\"))))")))
  (setv replies [])
  (defn :async deliver [reply] (.append replies reply))
  (defn said-here [words]
    (lfor r replies :if (in words (str (text-of r))) (text-of r)))
  (defn :async scenario []
    (setv hub (Hub daemon [{"name" "test" "deliver" deliver}]))
    (try
      (await (.receive hub "test" "m1" (user-says "wait three times" "1")))
      (await (until (fn [] (= (len (processes-with marker)) 3))))
      (await (.receive hub "test" "m2" (user-says "/workers" "1")))
      (await (until (fn [] (said-here "Workflows of this conversation"))))
      (setv shown (get (said-here "Workflows of this conversation") 0)
            started (time.monotonic)
            told (await (.stop hub "test:1")))
      (await (until (fn [] (not (processes-with marker)))))
      (setv took (- (time.monotonic) started))
      (await (until (fn [] (= (proto-get (only-workflow daemon) ':state) "stopped"))))
      #(shown told took)
      (finally (await (.close hub)))))
  (setv [shown told took] (asyncio.run (scenario)))
  (for [s ["a [running] wait once" "b [running] wait twice" "c [running] wait thrice"]]
    (assert (in s shown) f"{s!r} is not shown: {shown}"))
  (assert (in "the workflow 'wait' (3 workers) was killed" told) told)
  (setv f (only-workflow daemon))
  (expect (lfor w (workflow-workers daemon.store (proto-get f ':id)) (proto-get w ':state))
          ["stopped" "stopped" "stopped"] "the workers' states")
  ;; the spawner's task is not taken on: nothing took its next step to the inbox
  (expect (.query daemon.store "SELECT COUNT(*) FROM inbox WHERE key = ?" #(f"workflow-{(proto-get f ':id)}"))
          [#(0)] "the spawner's resumption")
  (print f"every worker's processes were gone {(round (* 1000 took))} ms after /stop"))

;; * Taking up a workflow after a restart

(defn test-a-restart-takes-a-workflow-up-where-it-was [tmp-path openai-server monkeypatch]
  (.setenv monkeypatch KEY-ENV "sk-scripted-test")
  (setv marker "27.1828"
        openai-server.responder
        (fn [body]
          (setv last (last-said body))
          (cond (in "Your objective:\nfirst" last) (says "first done")
                (in "Your objective:\nslow" last)
                f"(:action :shell :cmd \"sleep {marker}\" :explanation \"take a long time\")"
                (in "Your objective:\nquick" last) (says "quick done")
                (in "Your objective:\nlast" last) (says "never asked")
                (.startswith last "Result of (:action :plan")
                (says (if (and (in "b cut-off" last) (in "c failed: not run: it depends on b, which cut-off" last)
                               (in "quick done" last))
                          "b was cut off by a restart, so c did not run"
                          (+ "unexpected: " (cut last 400))))
                True
                "(:action :plan :title \"restart\" :explanation \"four workers across a restart\"
                  :steps ((:id \"a\" :objective \"first\")
                          (:id \"b\" :objective \"slow\" :depends-on (\"a\") :tools (\"shell\"))
                          (:id \"d\" :objective \"quick\" :depends-on (\"a\"))
                          (:id \"c\" :objective \"last\" :depends-on (\"b\"))))")))
  (setv replies [])
  (defn :async deliver [reply] (.append replies reply))
  (defn step-states [services]
    (setv [f] (workflows-of services.store "test:1"))
    (dfor w (workflow-workers services.store (proto-get f ':id)) (proto-get w ':step) w))
  ;; the first run: stopped while b's command runs, d done
  (setv first (boot-daemon tmp-path openai-server))
  (defn :async before []
    (setv hub (Hub first [{"name" "test" "deliver" deliver}]))
    (try
      (await (.receive hub "test" "m1" (user-says "four workers" "1")))
      (await (until (fn [] (and (processes-with marker)
                                (= (proto-get (get (step-states first) "d") ':state) "done")))))
      (finally (await (.close hub))))
    (proto-get (get (step-states first) "b") ':state))
  (try (setv b-state (asyncio.run (before)))
       (finally (shutdown first)))
  (assert (not (processes-with marker)) "b's command outlived the daemon")
  (expect b-state "running" "b's state when the daemon stopped")
  ;; the next start takes it up
  (setv again (boot-daemon tmp-path openai-server))
  (defn :async after []
    (setv hub (Hub again [{"name" "test" "deliver" deliver}]))
    (try
      (await (.resume hub))
      (await (until (fn [] (any (gfor r replies (ends-task r))))))
      (finally (await (.close hub)))))
  (try
    (asyncio.run (after))
    (setv ws (step-states again))
    (expect (text-of (get (lfor r replies :if (ends-task r) r) 0)) "b was cut off by a restart, so c did not run"
            "the spawner's answer")
    (expect (lfor s "abdc" (proto-get (get ws s) ':state)) ["done" "cut-off" "done" "failed"] "the states")
    ;; nothing ran twice: one objective each, b's command started once and never again
    (for [s "abd"]
      (expect (len (events again.store :kind "input" :session (worker-session (proto-get (get ws s) ':id))))
              1 f"{s}'s inputs"))
    (setv b-session (worker-session (proto-get (get ws "b") ':id)))
    (expect (len (events again.store :kind "intent" :session b-session)) 1 "b's actions begun")
    (expect (len (events again.store :kind "result" :session b-session)) 0 "b's actions finished")
    (expect (proto-get (only-workflow again) ':state) "failed" "the workflow's state")
    (finally (shutdown again))))

;; * A gate that revises a plan

(import passepartout.skills [make-skill register-skill]
        passepartout_skills.workflow [run-plan])

(defn tests-first [action ctx]
  "A gate that puts a step running the tests before any step that tags a release."
  (setv steps (proto-get action ':steps))
  (if (and (= (proto-get action ':action) (kw "plan"))
           (any (gfor s steps (.startswith (proto-get s ':objective) "tag"))))
      [:verdict :modify
       :reason "the tests run before a release is tagged"
       :action (proto-put action ':steps
                          (+ [[:id "t" :objective "run the tests"]]
                             (lfor s steps
                                   (if (.startswith (proto-get s ':objective) "tag")
                                       (proto-put s ':depends-on (+ (list (proto-get s ':depends-on [])) ["t"]))
                                       s))))]
      [:verdict :allow]))

(defn test-a-gate-may-revise-a-plan-and-the-revised-plan-runs [daemon openai-server]
  (register-skill daemon.skills (make-skill "tests-first" :priority 50 :gate tests-first))
  (setv openai-server.responder
        (fn [body]
          (setv last (last-said body))
          (cond (in "Your objective:\nrun the tests" last) (says "the tests pass")
                (in "Your objective:\ncheck the build" last) (says "the build is fine")
                (in "Your objective:\ntag the release" last)
                (says (if (in "the tests pass" last) "tagged v1 after the tests" "tagged v1 without tests"))
                (.startswith last "Result of (:action :plan")
                (says (if (in "tagged v1 after the tests" last) "released after the tests" "released untested"))
                True
                "(:action :plan :title \"release\" :explanation \"check the build, then tag a release\"
                  :steps ((:id \"b\" :objective \"check the build\")
                          (:id \"r\" :objective \"tag the release\" :depends-on (\"b\"))))")))
  (setv replies (asyncio.run (converse daemon "check the build, then if it passes tag a release")))
  (expect (text-of (get replies -1)) "released after the tests" "the spawner's answer")
  (setv ws (dfor w (workflow-workers daemon.store (proto-get (only-workflow daemon) ':id)) (proto-get w ':step) w))
  (expect (sorted ws) ["b" "r" "t"] "the steps that ran")
  (assert (>= (proto-get (get ws "r") ':started) (proto-get (get ws "t") ':finished)) "the tag ran before the tests")
  ;; the plan as revised is in the journal's outcome, with the gate that revised it
  (setv [outcome] (lfor e (events daemon.store :kind "outcome" :session "test:1")
                        :if (= (proto-get (proto-get e ':data) ':verdict) (kw "modify"))
                        (proto-get e ':data)))
  (expect (proto-get outcome ':gate) "tests-first" "the gate that revised it"))

(defn test-the-actuator-checks-a-plan-again [registry]
  ;; a plan a gate after the workflow gate turned into a circle is not started
  (setv out (run-plan (proto-read "(:action :plan :title \"t\" :explanation \"x\"
                                    :steps ((:id \"a\" :objective \"x\" :depends-on (\"b\"))
                                            (:id \"b\" :objective \"y\" :depends-on (\"a\"))))")
                      (gate-ctx registry)))
  (expect (proto-get out ':status) (kw "error") "status")
  (assert (in "circle" (proto-get out ':error)) (proto-get out ':error)))

;; * A worker's escalation, answered in the conversation that started it

(defn test-a-workers-escalation-is-asked-and-answered-in-the-originating-chat [daemon openai-server]
  (.write-text (/ (Path (get daemon.config "workspace")) ".env") "A=1\n")
  (setv openai-server.responder
        (fn [body]
          (setv last (last-said body))
          (cond (in "Your objective:\nread the env file" last)
                "(:action :read-file :path \".env\")"
                (.startswith last "Result of (:action :read-file")
                (says (if (in "A=1" last) "the env file sets A" "the env file was not read"))
                (.startswith last "Result of (:action :plan")
                (says (if (in "the env file sets A" last) "done: the env file sets A" "done: nothing"))
                True
                "(:action :plan :title \"env\" :explanation \"read the env file in the background\"
                  :steps ((:id \"e\" :objective \"read the env file\" :tools \"file-worker\")))")))
  (setv replies [])
  (defn :async deliver [reply] (.append replies reply))
  (defn approval-asks []
    (lfor r replies :if (= (kind-of r) "approval") r))
  (defn :async scenario []
    (setv hub (Hub daemon [{"name" "test" "deliver" deliver}]))
    (try
      (await (.receive hub "test" "m1" (user-says "what does the env file set?" "1")))
      (await (until approval-asks))
      (setv ask (get (approval-asks) 0)
            code (proto-get (proto-get (proto-get ask ':payload) ':approval) ':code))
      ;; another conversation cannot answer it
      (await (.receive hub "test" "m2" (user-says f"/approve {code}" "2")))
      (await (until (fn [] (lfor r replies :if (= (proto-get r ':session) "test:2") r))))
      (await (.receive hub "test" "m3" (user-says f"/approve {code}" "1")))
      (await (until (fn [] (lfor r replies :if (and (= (proto-get r ':session) "test:1") (ends-task r)
                                                    (= (kind-of r) "answer")) r))))
      ask
      (finally (await (.close hub)))))
  (setv ask (asyncio.run (scenario)))
  (expect (proto-get ask ':session) "test:1" "where the worker's question was asked")
  (assert (in "The worker e of the workflow 'env' (objective: read the env file) asks:" (text-of ask)) (text-of ask))
  (setv elsewhere (lfor r replies :if (= (proto-get r ':session) "test:2") (text-of r)))
  (assert (in "belongs to another conversation" (get elsewhere 0)) elsewhere)
  (expect (text-of (get (lfor r replies :if (and (= (proto-get r ':session) "test:1") (= (kind-of r) "answer")) r) -1))
          "done: the env file sets A" "the spawner's answer")
  (setv [w] (workflow-workers daemon.store (proto-get (only-workflow daemon) ':id)))
  (expect [(proto-get w ':state) (proto-get w ':result)] ["done" "the env file sets A"] "the worker"))

;; * Continuing a worker's work

(defn test-a-worker-may-be-continued-three-times-and-no-more [registry]
  (setv spawn "(:action :spawn :objective \"go on\" :continue \"w1\" :explanation \"it ran out of steps\")")
  (expect (V (judge registry spawn [:depth 0 :known ["w1"]])) "allow" "a first continuation")
  (expect (V (judge registry spawn [:depth 0 :known ["w1"] :continuations [["w1" 2]]])) "allow" "a third")
  (setv out (judge registry spawn [:depth 0 :known ["w1"] :continuations [["w1" 3]]]))
  (expect (V out) "reject" "a fourth")
  (assert (in "continued 3 times already" (proto-get out ':reason)) (proto-get out ':reason))
  (setv out (judge registry spawn [:depth 0 :known ["w2"]]))
  (expect (V out) "reject" "a worker of another conversation")
  (assert (in ":continue 'w1' is no worker of this conversation" (proto-get out ':reason)) (proto-get out ':reason)))

(defn test-a-spawner-continues-a-worker-that-ran-out-of-steps [tmp-path openai-server monkeypatch]
  (import re)
  (.setenv monkeypatch KEY-ENV "sk-scripted-test")
  (setv openai-server.responder
        (fn [body]
          (setv said (lfor m (get body "messages") (str (or (get m "content") "")))
                last (last-said body)
                mine (.join "\n" said)
                results (.count mine "Result of"))
          (cond (.startswith last "Result of (:action :plan")
                (do (setv found (re.search r":id \"(w[0-9a-f]+)\" :step \"c\"" last))
                    (+ f"(:action :spawn :objective \"count the rest\" :continue \"{(.group found 1)}\""
                       " :explanation \"it ran out of steps\")"))
                (.startswith last "Result of (:action :spawn")
                (says (if (in "counted the rest" last) "counted, after one continuation" "not counted"))
                (in "This goes on with the work of the worker" mine) (says "counted the rest")
                (in "Your objective:\ncount" mine)
                f"(:action :shell :cmd \"echo {results}\" :explanation \"count one more\")"
                True
                "(:action :plan :title \"count\" :explanation \"count in the background\"
                  :steps ((:id \"c\" :objective \"count\" :tools (\"shell\"))))")))
  (setv services (boot-daemon tmp-path openai-server "[workers]\nstep_budget = 2\n"))
  (try
    (setv replies (asyncio.run (converse services "count")))
    (expect (text-of (get replies -1)) "counted, after one continuation" "the spawner's answer")
    (setv [first second] (workflows-of services.store "test:1")
          [c] (workflow-workers services.store (proto-get first ':id))
          [again] (workflow-workers services.store (proto-get second ':id)))
    (expect (proto-get c ':state) "failed" "the first worker")
    (assert (in "Stopped after 2 actions" (proto-get c ':result)) (proto-get c ':result))
    (expect [(proto-get again ':state) (proto-get again ':continuations) (proto-get again ':tools)]
            ["done" 1 ["shell"]] "the continuation")
    (finally (shutdown services))))

(defn test-a-workers-answer-is-checked-before-it-counts-as-done [daemon openai-server]
  (setv openai-server.responder
        (fn [body]
          (setv last (last-said body))
          (cond (in "nobody reads a worker's conversation" last) (says "the answer is 42")
                (in "Your objective:\nfind the answer" last) (says "Shall I look for the answer?")
                (.startswith last "Result of (:action :plan")
                (says (if (in "the answer is 42" last) "found: 42" "found nothing"))
                True
                "(:action :plan :title \"answer\" :explanation \"look for the answer in the background\"
                  :steps ((:id \"q\" :objective \"find the answer\")))")))
  (setv replies (asyncio.run (converse daemon "what is the answer?")))
  (expect (text-of (get replies -1)) "found: 42" "the spawner's answer")
  (setv [w] (workflow-workers daemon.store (proto-get (only-workflow daemon) ':id)))
  (expect [(proto-get w ':result) (proto-get w ':checks)] ["the answer is 42" ["hold" "deliver"]]
          "the worker's result and checks"))
