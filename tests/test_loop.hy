;; Tests of passepartout/loop.hy: one step, the agent loop's limits, /stop.
;; (The runner's order and concurrency: tests/test_runner.hy.)

(import asyncio os sqlite3
        pathlib [Path]
        pytest
        passepartout.proto [kw proto-get proto-print]
        passepartout.skills [make-skill register-skill]
        passepartout.providers [make-provider]
        passepartout.daemon [boot shutdown]
        passepartout.loop [step]
        passepartout.runner [Runner stop-session]
        passepartout.records [events]
        steps [expect kind-of text-of symbolic-env user-says scripted run-task until])

(defn [pytest.fixture] env [tmp-path]
  (yield :from (symbolic-env tmp-path)))

;; * A task through the symbolic provider

(defn test-a-shell-command-runs-and-its-output-comes-back [env]
  (setv replies (run-task env (user-says "!echo hello from the loop")))
  (expect (lfor r replies (kind-of r)) ["trace" "answer"] "reply kinds")
  (assert (in "hello from the loop" (text-of (get replies 1))) (text-of (get replies 1))))

(defn test-write-then-read-a-file [env]
  (run-task env (user-says "write notes/a.txt\nfirst line"))
  (setv ws (Path (get env.config "workspace")))
  (expect (.read-text (/ ws "notes" "a.txt")) "first line" "file content")
  (setv replies (run-task env (user-says "read notes/a.txt")))
  (assert (in "first line" (text-of (get replies -1))) (text-of (get replies -1))))

(defn test-what-the-gates-refuse-is-not-run-and-the-person-is-told [env]
  (setv replies (run-task env (user-says "write ../../outside.txt\nx")))
  (assert (not (.exists (/ (Path (get env.config "data_dir")) ".." ".." "outside.txt"))) "file was written")
  (expect (kind-of (get replies -1)) "answer" "reply kind")
  (assert (in "refused" (text-of (get replies -1))) (text-of (get replies -1))))

(defn test-every-turn-is-recorded [env]
  (run-task env (user-says "!echo recorded"))
  (setv kinds (lfor e (events env.store :session "test:t1") (proto-get e ':kind)))
  (for [k ["input" "outcome" "result" "answer"]]
    (assert (in k kinds) f"{k} missing from {kinds}")))

;; * The causal cone

(defn contents [request]
  (lfor m (proto-get request ':messages) (str (get m "content"))))

(defn test-a-task-sees-its-own-thread-and-the-conversation-not-earlier-results [env]
  (setv requests (scripted env ["(:action :shell :cmd \"echo first-result-XYZ\" :explanation \"look\")"
                                "(:action :message :text \"the first task is done\")"
                                "(:action :shell :cmd \"echo second-result-QRS\" :explanation \"look\")"
                                "(:action :message :text \"the second task is done\")"]))
  (run-task env (user-says "first question"))
  (run-task env (user-says "second question"))
  (expect (len requests) 4 "model calls")
  ;; the second task's second call: the conversation, its own input and its own result
  (setv seen (.join "\n" (contents (get requests 3))))
  (for [want ["first question" "the first task is done" "second question" "second-result-QRS"]]
    (assert (in want seen) f"{want !r} is not in what the model was given: {seen}"))
  (assert (not (in "first-result-XYZ" seen)) f"an earlier task's result is in the cone: {seen}")
  ;; the first task's second call saw its own result
  (assert (in "first-result-XYZ" (.join "\n" (contents (get requests 1)))) "a task's own result is left out")
  ;; each model call's outcome records what the cone left out
  (setv cones (lfor e (events env.store :kind "outcome" :session "test:t1")
                    (proto-get (proto-get e ':data) ':cone)))
  (expect (lfor c cones (proto-get c ':history)) [0 2 3 5] "the session's turns at each call")
  (expect (lfor c cones (proto-get c ':turns)) [0 2 2 4] "the turns given at each call")
  (expect (proto-get (get cones 3) ':compression) 0.2 "the last call's compression"))

(defn test-two-interleaved-sessions-each-see-only-their-own-past [env]
  (setv requests (scripted env ["(:action :message :text \"noted\")"]))
  (for [[chat text] [["a" "alpha one"] ["b" "bravo one"] ["a" "alpha two"] ["b" "bravo two"]]]
    (run-task env (user-says text chat)))
  (setv [_ _ a2 b2] (lfor r requests (.join "\n" (contents r))))
  (assert (and (in "alpha one" a2) (not (in "bravo" a2))) f"session a saw: {a2}")
  (assert (and (in "bravo one" b2) (not (in "alpha" b2))) f"session b saw: {b2}"))

(defn test-a-conversation-that-fits-its-budget-is-given-whole [env]
  ;; the history is bounded by tokens, not turns: 25 short exchanges fit, and
  ;; none is left out (compaction, when they do not fit: test_memory_compaction.py)
  (setv requests (scripted env ["(:action :message :text \"ok\")"]))
  (for [i (range 25)]
    (run-task env (user-says f"message number {i}")))
  (setv given (contents (get requests -1)))
  (setv said (lfor c given :if (.startswith c "message number") c))
  (expect said (lfor i (range 25) f"message number {i}") "every turn of the conversation, the last one the signal")
  (expect (proto-get (proto-get (get (events env.store :kind "outcome" :session "test:t1" :latest True :limit 1) 0)
                                ':data) ':cone)
          [:turns 48 :history 48 :compression 0.0]
          "the last call's cone"))

;; * The agent loop's limits

(defn test-the-step-budget-ends-a-task [env]
  (setv n [0])
  (defn complete [request]
    (+= (get n 0) 1)
    [:status :ok :text f"(:action :shell :cmd \"echo {(get n 0)}\" :explanation \"count\")"])
  (setv env.complete complete)
  (setv replies (run-task env (user-says "count forever")))
  (expect (get n 0) 8 "model calls")
  (expect (kind-of (get replies -1)) "notice" "last reply kind")
  (assert (in "step budget" (text-of (get replies -1))) (text-of (get replies -1))))

(defn test-a-fixed-point-ends-a-task [env]
  (setv requests (scripted env ["(:action :shell :cmd \"echo same\" :explanation \"again\")"]))
  (setv replies (run-task env (user-says "loop")))
  (expect (len requests) 2 "model calls")
  (assert (in "Stopped at a fixed point" (text-of (get replies -1))) (text-of (get replies -1)))
  ;; the journal shows it: the second result's turn left the state hash as it was
  (setv [first second] (.query env.store
                               "SELECT state_before, state_after FROM events WHERE kind = 'result' ORDER BY id"))
  (assert (!= (get first 0) (get first 1)) first)
  (expect (get second 0) (get second 1) "the state around the repeated action"))

(defn test-a-repeating-state-ends-a-task [env]
  (setv requests (scripted env ["(:action :shell :cmd \"echo a\" :explanation \"one\")"
                                "(:action :shell :cmd \"echo b\" :explanation \"two\")"
                                "(:action :shell :cmd \"echo a\" :explanation \"one\")"
                                "(:action :shell :cmd \"echo c\" :explanation \"three\")"]))
  (setv replies (run-task env (user-says "go round")))
  (expect (len requests) 3 "model calls")
  (assert (in "came back to where it was 2 actions ago" (text-of (get replies -1)))
          (text-of (get replies -1))))

(defn test-tool-results-reach-the-model [env]
  (setv requests (scripted env ["(:action :shell :cmd \"echo 41+1\" :explanation \"sum\")"
                                "(:action :message :text \"done\")"]))
  (setv replies (run-task env (user-says "add")))
  (expect (text-of (get replies -1)) "done" "final answer")
  (setv last (get (proto-get (get requests 1) ':messages) -1 "content"))
  (assert (in "41+1" last) last))

(defn test-three-refusals-tell-the-person-why [env]
  (setv requests (scripted env ["(:action :write-file :path \"/etc/passwd\" :content \"x\" :explanation \"testing\")"]))
  (setv replies (run-task env (user-says "break things")))
  (expect (len requests) 3 "attempts")
  (expect (kind-of (get replies -1)) "refusal" "reply kind")
  (assert (in "/etc/passwd" (text-of (get replies -1))) (text-of (get replies -1))))

(defn test-an-escalated-action-is-not-run [env]
  (setv ws (Path (get env.config "workspace")))
  (scripted env ["(:action :write-file :path \".env\" :content \"KEY=1\" :explanation \"config\" :approved t)"])
  (setv replies (run-task env (user-says "write my env file")))
  (expect (kind-of (get replies -1)) "approval" "reply kind")
  (assert (not (.exists (/ ws ".env"))) "the escalated write ran"))

(defn test-a-cascade-failure-is-reported [env]
  (setv env.complete (fn [r] [:status :failed :reason "all providers failed: a: timeout"]))
  (setv replies (run-task env (user-says "hello")))
  (expect (kind-of (get replies -1)) "error" "reply kind")
  (assert (in "a: timeout" (text-of (get replies -1))) (text-of (get replies -1))))

(defn test-a-handler-answers-before-any-model [env]
  (setv requests (scripted env ["(:action :message :text \"model\")"]))
  (register-skill
    env.skills
    (make-skill "ping" :handlers [(fn [signal ctx]
                                    (when (= (proto-get (proto-get signal ':payload) ':text) "/ping")
                                      [[:type :reply :session (proto-get signal ':session)
                                        :payload [:kind :answer :text "pong"]]]))]))
  (setv replies (run-task env (user-says "/ping")))
  (expect (lfor r replies (text-of r)) ["pong"] "replies")
  (expect requests [] "model calls"))

;; * Budget, loop detector, /stop

(defn costly [env cost]
  "Make every model call of ENV answer a new shell action and cost COST."
  (setv n [0])
  (defn complete [request]
    (+= (get n 0) 1)
    [:status :ok :provider "script"
     :text f"(:action :shell :cmd \"echo {(get n 0)}\" :explanation \"count\")"
     :usage [:prompt-tokens 100 :completion-tokens 50 :cost cost]])
  (setv env.complete complete)
  n)

(defn test-the-task-budget-stops-before-the-next-model-call [env]
  (setv (get env.config "budget") {"task_tokens" 400 "task_cost" 0 "day_tokens" 0 "day_cost" 0})
  (setv calls (costly env 0.0)
        replies (run-task env (user-says "spend")))
  (expect (get calls 0) 3 "model calls (150 tokens each, limit 400)")
  (expect (kind-of (get replies -1)) "notice" "last reply kind")
  (assert (in "token budget is spent: 450 of 400" (text-of (get replies -1))) (text-of (get replies -1))))

(defn test-the-day-budget-survives-across-tasks [env]
  (setv (get env.config "budget") {"task_tokens" 0 "task_cost" 0 "day_tokens" 0 "day_cost" 0.25})
  (setv calls (costly env 0.1))
  (run-task env (user-says "first"))
  (setv before (get calls 0)
        replies (run-task env (user-says "second")))
  (expect before 3 "model calls of the first task ($0.30 passes $0.25)")
  (expect (get calls 0) 3 "model calls of the second task")
  (assert (in "day's cost budget is spent" (text-of (get replies -1))) (text-of (get replies -1))))

(defn test-the-same-refused-action-three-times-in-a-task-stops-it [env]
  (setv n [0])
  (defn complete [request]
    "Alternate a refused write with a new harmless command."
    (+= (get n 0) 1)
    [:status :ok :text (if (% (get n 0) 2)
                           "(:action :write-file :path \"/etc/hosts\" :content \"x\" :explanation \"testing\")"
                           f"(:action :shell :cmd \"echo {(get n 0)}\" :explanation \"testing\")")])
  (setv env.complete complete)
  (setv replies (run-task env (user-says "go")))
  (setv last (text-of (get replies -1)))
  (assert (in "refused the same action 3 times" last) last)
  (assert (in "/etc/hosts" last) last)
  (expect (get n 0) 6 "model calls: the third refusal ends the task once its step is over"))

(defn pids-running [marker]
  "The pids of live processes whose command line holds MARKER."
  (setv found [])
  (for [d (os.listdir "/proc") :if (.isdigit d)]
    (try
      (setv cmdline (.read-bytes (Path f"/proc/{d}/cmdline"))
            state (get (.split (.read-text (Path f"/proc/{d}/stat")) ") ") -1))
      (when (and (in (.encode marker) cmdline) (not (.startswith state "Z")))
        (.append found (int d)))
      (except [OSError])))
  found)

(defn blocking-model [env first [later "(:action :message :text \"fresh\")"]]
  "Make ENV's first model call wait for the returned event, then answer FIRST;
   later calls answer LATER at once. Returns (started release calls ended):
   ENDED holds \"cancelled\" once the waiting call was cancelled."
  (setv started (asyncio.Event)
        release (asyncio.Event)
        calls []
        ended [])
  (defn :async complete [request]
    (.append calls request)
    (when (= (len calls) 1)
      (.set started)
      (try
        (await (.wait release))
        (except [asyncio.CancelledError]
          (.append ended "cancelled")
          (raise)))
      (return [:status :ok :provider "script" :text first
               :usage [:prompt-tokens 100 :completion-tokens 50 :cost 0.25]]))
    [:status :ok :provider "script" :text later])
  (setv env.complete complete)
  #(started release calls ended))

(defn test-stop-kills-the-running-command [env]
  (stop-a-running-command env))

(defn test-stop-kills-a-command-in-the-sandbox [tmp-path]
  (setv config (/ tmp-path "sandboxed.toml"))
  (.write-text config "")
  (setv e (boot :config-path (str config)
                :environ {"PASSEPARTOUT_DATA_DIR" (str (/ tmp-path "sandboxed")) "HOME" (str tmp-path)}
                :providers [(make-provider "symbolic")]))
  (try
    (when (!= (proto-get e.sandbox ':kind) "bubblewrap")
      (pytest.skip "no bubblewrap sandbox on this machine"))
    (stop-a-running-command e)
    (finally (shutdown e))))

(defn stop-a-running-command [env]
  "Stop `sleep 20; touch after.txt` while it runs: its processes go (the shell
   that would touch the file among them) and the file never appears. How fast
   they go is the bench's figure (bench-stop), not a deadline here: left
   running, the command would touch the file after 20 s."
  (setv delivered []
        workspace (Path (get env.config "workspace"))
        marker "sleep 20; touch after.txt")
  (defn :async main []
    (setv runner (Runner env (fn [r] (.append delivered r))))
    (await (.submit runner (user-says f"!{marker}" "k")))
    (await (until (fn [] (pids-running marker))))
    (await (.submit runner (user-says "/stop" "k")))
    (await (until (fn [] (not (pids-running marker)))))
    (await (asyncio.wait-for (.idle runner "test:k") 60))
    (await (.close runner)))
  (asyncio.run (main))
  (assert (not (.exists (/ workspace "after.txt"))) "the stopped command went on and touched after.txt")
  (setv texts (lfor r delivered (text-of r)))
  (expect texts [f"Stopped: the command `{marker}` was killed. Nothing more of that task will run."]
          "what the person was told"))

(defn test-stop-ends-the-model-call-and-drops-its-answer [env]
  (setv delivered []
        workspace (Path (get env.config "workspace"))
        [started release calls ended] (blocking-model
                                        env "(:action :shell :cmd \"touch late.txt\" :explanation \"late\")"))
  (defn :async main []
    (setv runner (Runner env (fn [r] (.append delivered r))))
    (await (.submit runner (user-says "make a file" "m")))
    (await (asyncio.wait-for (.wait started) 10))
    (await (.submit runner (user-says "/stop" "m")))
    ;; the session is free at once: the next message is answered, the old call never is
    (await (.submit runner (user-says "something else" "m")))
    (await (asyncio.wait-for (.idle runner "test:m") 5))
    (expect ended ["cancelled"] "what became of the stopped model call")
    (.set release)
    (await (.close runner)))
  (asyncio.run (main))
  (assert (not (.exists (/ workspace "late.txt"))) "the stopped call's action ran")
  (setv texts (lfor r delivered (text-of r)))
  (expect texts ["Stopped: the model call was stopped. Nothing more of that task will run." "fresh"]
          "what the person was told")
  (expect (len (events env.store :session "test:m" :kinds ["outcome"])) 1
          "outcomes: the stopped call has none, the next message's call has one"))

(defn while-one-slot-hangs [env said-meanwhile]
  "With one model slot, held by session a's model call that hangs, each of
   SAID-MEANWHILE (text, chat) is said; what was delivered by the time the
   last chat went idle (the call still hanging), and all that was delivered
   once the call is let go and session a is idle."
  (setv delivered []
        [started release calls ended] (blocking-model env "(:action :message :text \"late\")"))
  (defn :async main []
    (setv runner (Runner env (fn [r] (.append delivered r)) :concurrency 1))
    (await (.submit runner (user-says "think" "a")))
    (await (asyncio.wait-for (.wait started) 10))
    (for [[text chat] said-meanwhile]
      (await (.submit runner (user-says text chat))))
    (await (asyncio.wait-for (.idle runner f"test:{(get said-meanwhile -1 1)}") 5))
    (assert (not (.is-set release)) "the last chat waited for the hung model call")
    (setv seen (lfor r delivered (text-of r)))
    (.set release)
    (await (asyncio.wait-for (.idle runner "test:a") 5))
    (await (.close runner))
    seen)
  #((asyncio.run (main)) (lfor r delivered (text-of r))))

(defn test-a-stopped-model-call-gives-its-slot-back [env]
  "A stopped session's hung call must not keep another session waiting."
  (setv [seen texts] (while-one-slot-hangs env [["/stop" "a"] ["hello" "b"]]))
  (expect texts ["Stopped: the model call was stopped. Nothing more of that task will run." "fresh"]
          "what the two sessions were told"))

(defn test-a-command-never-waits-for-a-model-slot [env]
  "A slash command from another chat is answered while the only slot hangs."
  (setv [seen texts] (while-one-slot-hangs env [["/help" "b"]]))
  (expect (len seen) 1 "replies while the model call hung")
  (assert (in "/stop" (get seen 0)) f"the /help answer: {(get seen 0)}")
  (expect texts [(get seen 0) "late"] "every reply, in the end"))

(defn test-stop-drops-the-queued-next-step [env]
  (setv delivered []
        workspace (Path (get env.config "workspace"))
        [started release calls ended] (blocking-model
                                        env "(:action :message :text \"first\")"
                                        "(:action :shell :cmd \"touch next.txt\" :explanation \"next\")"))
  (defn :async main []
    (setv runner (Runner env (fn [r] (.append delivered r))))
    (await (.submit runner (user-says "think" "n")))
    (await (asyncio.wait-for (.wait started) 10))
    ;; a task's next step waits behind the step that runs (as an approved action's result does)
    (await (.emit runner [:type :event :source [:gateway :test :chat "n"] :session "test:n"
                          :payload [:sensor :tool-result :task "t9" :step 1
                                    :action [:action :shell :cmd "echo one"]
                                    :result [:status :ok :output "one"]]]))
    (await (.submit runner (user-says "/stop" "n")))
    (.set release)
    (await (asyncio.wait-for (.idle runner "test:n") 5))
    (await (.close runner)))
  (asyncio.run (main))
  (expect (len calls) 1 "model calls: the queued next step never ran")
  (assert (not (.exists (/ workspace "next.txt"))) "the queued step's action ran")
  (setv texts (lfor r delivered (text-of r)))
  (expect texts [(+ "Stopped: the model call was stopped; the task's next step was stopped."
                    " Nothing more of that task will run.")]
          "what the person was told"))

(defn test-a-stop-during-a-running-shell-action-kills-it-and-keeps-its-result [env]
  (setv delivered []
        tag f"41.{(% (hy.I.time.time-ns) 1000000000)}"
        marker f"sleep\x00{tag}\x00"
        requests (scripted env [f"(:action :shell :cmd \"sleep {tag} & wait\" :explanation \"wait\")"
                                "(:action :message :text \"after the stop\")"]))
  (defn running []
    (pids-running marker))
  (defn :async main []
    (setv runner (Runner env (fn [r] (.append delivered r))))
    (await (.submit runner (user-says "wait a while" "w")))
    (await (until running 30))
    (await (.submit runner (user-says "/stop" "w")))
    ;; the sleep is the shell's child, in its process group: the stop kills it too
    (await (until (fn [] (not (running)))))
    (await (asyncio.wait-for (.idle runner "test:w") 10))
    (await (.close runner)))
  (asyncio.run (main))
  (expect (len requests) 1 "model calls: the task went no further")
  (expect (lfor r delivered (text-of r))
          [f"Stopped: the command `sleep {tag} & wait` was killed. Nothing more of that task will run."]
          "all that was delivered")
  (setv results (lfor e (events env.store :session "test:w" :kinds ["result"]) (proto-get e ':data)))
  (expect (len results) 1 "results in the journal")
  (setv result (proto-get (get results 0) ':result))
  (expect (proto-get result ':stopped) True f"the journaled result is the stopped one: {result}")
  (assert (in "stopped by the person" (proto-get result ':error)) f"{result}"))

(defn never-answering-model [env]
  "Make ENV's model calls wait for an event no one sets. Returns (started ended):
   STARTED is set once a call waits, ENDED holds \"cancelled\" once one was."
  (setv started (asyncio.Event)
        ended [])
  (defn :async complete [request]
    (.set started)
    (try
      (await (.wait (asyncio.Event)))
      (except [asyncio.CancelledError]
        (.append ended "cancelled")
        (raise))))
  (setv env.complete complete)
  #(started ended))

(defn test-a-stop-ends-a-model-call-that-never-answers-at-once [env]
  (setv delivered []
        [started ended] (never-answering-model env))
  (defn :async main []
    (setv runner (Runner env (fn [r] (.append delivered r))))
    (await (.submit runner (user-says "think forever" "f")))
    (await (asyncio.wait-for (.wait started) 10))
    (await (.submit runner (user-says "/stop" "f")))
    (await (asyncio.wait-for (.idle runner "test:f") 10))
    (expect ended ["cancelled"] "what became of the model call")
    (await (.close runner)))
  (asyncio.run (main))
  (expect (lfor r delivered (text-of r))
          ["Stopped: the model call was stopped. Nothing more of that task will run."]
          "all that was delivered")
  (expect (sorted (gfor e (events env.store :session "test:f") (proto-get e ':kind))) ["input" "stop"]
          "the journal: the input and the stop, no outcome"))

(defn test-stop-session-cancels-the-runners-step [env]
  (setv delivered []
        [started ended] (never-answering-model env))
  (defn :async main []
    (setv runner (Runner env (fn [r] (.append delivered r))))
    (await (.submit runner (user-says "think forever" "c")))
    (await (asyncio.wait-for (.wait started) 10))
    (setv step (get runner.running "test:c"))
    (expect (stop-session env.stops "test:c") [#("the model call" False)] "what the stop interrupted")
    (await (asyncio.wait-for (.idle runner "test:c") 10))
    (assert (.cancelled step) f"the step was not cancelled: {step}")
    (expect ended ["cancelled"] "what became of the model call")
    (expect (.get runner.running "test:c") None "the session's running step")
    (await (.close runner)))
  (asyncio.run (main))
  (expect delivered [] "what was delivered"))

(defn test-a-stop-ends-a-real-model-call-that-hangs [tmp-path openai-server]
  "The daemon's own model call (the cascade, over HTTP, to a provider that does
   not answer) ends at once on /stop while the loop goes on serving: the
   provider sees its connection closed, and nothing of the call is told later."
  (setv config (/ tmp-path "config.toml"))
  (.write-text config "[sandbox]\nmode = \"off\"\n")
  (setv e (boot :config-path (str config)
                :environ {"PASSEPARTOUT_DATA_DIR" (str (/ tmp-path "data")) "HOME" (str tmp-path)}
                :providers [(make-provider "openai/scripted-hang" :api-base (.url openai-server "hang")
                                           :api-key-env "PASSEPARTOUT_TEST_API_KEY" :timeout 120)])
        delivered [])
  (defn :async main []
    (setv runner (Runner e (fn [r] (.append delivered r))))
    (await (.submit runner (user-says "hello" "h")))
    (await (until (fn [] (.scripts-seen openai-server))))
    (await (.submit runner (user-says "/stop" "h")))
    (await (asyncio.wait-for (.idle runner "test:h") 10))
    (setv closed (await (asyncio.to-thread openai-server.wait-hang-closed 1 30)))
    (await (.close runner))
    closed)
  (try
    (setv closed (asyncio.run (main)))
    (finally (shutdown e)))
  (assert closed "the provider saw the request's connection closed by the stop")
  (expect (lfor r delivered (text-of r))
          ["Stopped: the model call was stopped. Nothing more of that task will run."]
          "all that was delivered"))

(defn test-stop-with-nothing-running-says-so [env]
  (setv delivered [])
  (defn :async main []
    (setv runner (Runner env (fn [r] (.append delivered r))))
    (await (.submit runner (user-says "/stop" "z")))
    (await (.close runner)))
  (asyncio.run (main))
  (expect (lfor r delivered (text-of r)) ["Stopped: nothing was running."] "what the person was told"))

(defn test-a-stop-is-a-turn-of-the-journal [env]
  (run-task env (user-says "/stop" "z"))
  (setv rows (.query env.store "SELECT turn, session, data FROM events WHERE kind = 'stop'"))
  (expect (lfor r rows (cut r 0 2)) [#("silence" "test:z")] "the stop's turn")
  (assert (in "nothing was running" (get rows 0 2)) (get rows 0 2)))

(defn test-a-refused-secret-is-not-echoed [env]
  (setv key "AKIAZ7Q3M4N5P6R7S2TX"
        requests (scripted env [f"(:action :message :text \"the key is {key}\")"]))
  (setv replies (run-task env (user-says "what is the key?")))
  (expect (kind-of (get replies -1)) "refusal" "reply kind")
  (for [r replies]
    (assert (not (in key (text-of r))) f"reply echoes the key: {(text-of r)}"))
  (for [m (get (proto-get (get requests -1) ':messages) (slice 1 None))]
    (assert (not (in key (get m "content"))) f"the model is shown the key: {m}"))
  (for [e (events env.store :limit None)]
    (assert (not (in key (proto-print (proto-get e ':data)))) f"the store keeps the key: {e}")))

(defn test-tmpdir-is-the-folder-the-gates-judged [env]
  ;; the temp folders of the context the step builds: one that holds the
  ;; daemon's files (these tests keep them under /tmp) is not among them
  (setv replies (run-task env (user-says "!echo tmp=$TMPDIR"))
        temps (proto-get (hy.I.passepartout/context.make-context
                           :workspace (get env.config "workspace") :config env.config)
                         ':temp-dirs))
  (assert (in f"tmp={(get temps -1)}" (text-of (get replies -1))) (text-of (get replies -1))))

(defn test-a-task-finishes-before-the-next-message-begins [env]
  (setv delivered [])
  (defn :async main []
    (setv runner (Runner env (fn [r] (.append delivered r))))
    (await (.submit runner (user-says "!echo first task" "q")))
    (await (.submit runner (user-says "!echo second task" "q")))
    (await (.idle runner "test:q"))
    (await (.close runner)))
  (asyncio.run (main))
  (setv kinds (lfor r delivered (kind-of r)))
  (expect kinds ["trace" "answer" "trace" "answer"] "reply kinds, in order")
  (assert (in "first task" (text-of (get delivered 1))) (text-of (get delivered 1))))

;; * What a step writes

(defn test-what-reason-decided-is-on-disk-before-an-action-runs [env]
  (setv seen []
        path (. env.store path))
  (defn probe [action ctx]
    (setv db (sqlite3.connect f"file:{path}?mode=ro" :uri True))
    (try
      (.append seen (lfor [k] (.fetchall (.execute db "SELECT kind FROM events WHERE session = 'test:t1' ORDER BY id"))
                          k))
      (finally (.close db)))
    [:status :ok :output "probed"])
  (register-skill env.skills
                  (make-skill "probe" :actuators {"probe" {"run" probe "schema" [] "doc" "looks at the store"
                                                           "effect" True}}))
  (scripted env ["(:action :probe :explanation \"look\")" "(:action :message :text \"done\")"])
  (setv replies (run-task env (user-says "probe it")))
  (expect seen [["input" "outcome" "intent"]] "the events another process could read while the action ran")
  (expect (text-of (get replies -1)) "done" "the answer")
  (expect (lfor e (events env.store :session "test:t1") (proto-get e ':kind))
          ["input" "outcome" "intent" "result" "outcome" "validation" "answer"] "the events after the task"))

;; * How fast a stop kills

(defn test-every-stop-leaves-no-process-of-the-action []
  "The figure is the bench's (bench-stop); here, that each stop does its work."
  (setv rows (hy.I.passepartout/tools/bench-daemon.bench-stop 3)
        p50 (get rows 0 1))
  (assert (.startswith (get rows 0 0) "/stop to the running action's processes gone") f"{rows}")
  (assert (< 0 p50 10000) f"p50 {p50} ms: the bench waits at most 10 s for the processes to go"))

;; * Several actions in one answer

(defn test-every-action-of-an-answer-runs-in-one-step [env tmp-path]
  (setv requests (scripted env ["[{\"name\": \"shell\", \"arguments\": {\"command\": \"echo one\", \"explanation\": \"say one\"}}, {\"name\": \"shell\", \"arguments\": {\"command\": \"touch two.txt\", \"explanation\": \"make two\"}}]"
                                "(:action :message :text \"done\")"])
        replies (run-task env (user-says "do both")))
  (expect (len requests) 2 "model calls: both actions ran before the model was asked again")
  (expect (text-of (get replies -1)) "done" "the answer")
  (assert (.exists (/ (Path (get env.config "workspace")) "two.txt")) "the second action did not run")
  (setv told (.join "\n" (gfor m (proto-get (get requests 1) ':messages) (get m "content"))))
  (assert (< (.index told "echo one") (.index told "two.txt")) f"both results, in order: {told}")
  (expect (lfor e (events env.store :session "test:t1") :if (= (proto-get e ':kind) "result")
                (proto-get (proto-get (proto-get e ':data) ':action) ':cmd))
          ["echo one" "touch two.txt"] "each result a turn of its own"))

(defn test-an-escalation-in-a-batch-is-not-run-and-the-model-is-told [env tmp-path]
  (setv requests (scripted env ["[{\"name\": \"shell\", \"arguments\": {\"command\": \"echo one\", \"explanation\": \"say one\"}}, {\"name\": \"write-file\", \"arguments\": {\"path\": \".env\", \"content\": \"KEY=1\", \"explanation\": \"config\"}}, {\"name\": \"shell\", \"arguments\": {\"command\": \"touch three.txt\", \"explanation\": \"make three\"}}]"
                                "(:action :message :text \"done\")"])
        replies (run-task env (user-says "do all three")))
  (expect (len requests) 2 "model calls")
  (setv told (.join "\n" (gfor m (proto-get (get requests 1) ':messages) (get m "content"))))
  (assert (in "approval" told) f"the model is not told why the write was not run: {told}")
  (assert (in "three.txt" told) told)
  (assert (not (.exists (/ (Path (get env.config "workspace")) "three.txt"))) "a call after the escalation ran")
  (expect (lfor e (events env.store :session "test:t1") :if (= (proto-get e ':kind) "result")
                (proto-get (proto-get (proto-get e ':data) ':result) ':status))
          [':ok ':not-run ':not-run] "every call answered, in order"))

(defn test-the-fallbacks-words-are-not-shown-to-a-model-as-its-own [env]
  (setv answers [[:status :ok :provider "symbolic" :text "(:action :message :text \"the fallback speaking\")"]
                 [:status :ok :provider "script" :text "(:action :message :text \"a model speaking\")"]]
        requests [])
  (defn complete [request]
    (.append requests request)
    (.pop answers 0))
  (setv env.complete complete)
  (run-task env (user-says "first"))
  (setv replies (run-task env (user-says "second")))
  (expect (text-of (get replies -1)) "a model speaking" "the second answer")
  (setv shown (lfor m (proto-get (get requests 1) ':messages) (get m "content")))
  (assert (not (in "the fallback speaking" shown)) f"the fallback's answer was shown to the model: {shown}")
  (assert (in "first" shown) f"the person's first message is still there: {shown}")
  (setv answers-stored (lfor e (events env.store :session "test:t1" :kinds ["answer"]) (proto-get e ':data)))
  (expect (lfor d answers-stored (proto-get d ':by)) ["fallback" None] "who each stored answer is marked as"))
