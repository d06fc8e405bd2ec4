;; * Why

"The figures of the daemon at work, as a person meets them: a command's cold
start and an idle chat's memory, the REPL's round trip, a model that hangs,
/approve and /stop, the daemon's CPU per message, and what the journal and
the causal cone cost and save. passepartout bench runs them and prints them
with their goals (bench.org)."

(import os statistics subprocess sys tempfile time
        pathlib [Path]
        passepartout.proto [proto-get proto-print]
        passepartout.tools.bench [_percentile _rss-kib])

;; * Whole processes

(defn _command []
  (setv exe (Path (. sys executable)))
  (setv script (/ exe.parent "passepartout"))
  (if (.exists script) [(str script)] [sys.executable "-m" "passepartout"]))

(defn bench-cold-start [runs]
  (setv ws (tempfile.mkdtemp :prefix "passepartout-bench-")
        proposal "(:type :request :payload (:action :shell :cmd \"ls\" :explanation \"look\"))"
        times [])
  (for [_ (range runs)]
    (setv t (time.perf-counter))
    (subprocess.run (+ (_command) ["verify" "-" "--workspace" ws])
                    :input proposal :capture-output True :text True :check True)
    (.append times (- (time.perf-counter) t)))
  [#("cold start of verify, one proposal, p50" (* 1000 (statistics.median times)) "ms" "< 1000 ms")])

(defn bench-chat-memory []
  (setv data (tempfile.mkdtemp :prefix "passepartout-bench-")
        config (os.path.join data "config.toml"))
  (.write-text (Path config) "")
  (setv env (| (dict os.environ) {"PASSEPARTOUT_DATA_DIR" data "PASSEPARTOUT_CONFIG" config})
        proc (subprocess.Popen (+ (_command) ["chat"]) :stdin subprocess.PIPE
                               :stdout subprocess.PIPE :stderr subprocess.DEVNULL :env env)
        seen b"")
  (try
    (setv deadline (+ (time.monotonic) 30))
    (while (and (not (in b"you>" seen)) (< (time.monotonic) deadline))
      (setv chunk (os.read (.fileno proc.stdout) 4096))
      (when (not chunk) (break))
      (+= seen chunk))
    (time.sleep 0.5)
    (setv rss (_rss-kib proc.pid))
    (finally
      (.close proc.stdin)
      (try (.wait proc :timeout 10)
           (except [subprocess.TimeoutExpired] (.kill proc)))))
  (if rss
      [#("idle chat resident memory" (/ rss 1024) "MiB" "")]
      [#("idle chat resident memory" "not measured: the chat did not reach its prompt" "" "")]))

;; * The REPL

(defn _client-command []
  "The client as bin/repl runs it (or as a script, installed), and the console script if any."
  (import importlib.util)
  (setv bin-repl (/ (. (Path __file__) parent parent parent) "bin" "repl")
        origin (. (importlib.util.find-spec "passepartout_repl") origin)
        script (/ (. (Path sys.executable) parent) "repl"))
  #([sys.executable "-S" (str (if (.exists bin-repl) bin-repl origin))]
    (if (.exists script) [(str script)] None)))

(defn bench-repl [n]
  "Rows #(name value unit goal) of the REPL's round trip."
  (import passepartout.daemon [boot shutdown]
          passepartout.providers [make-provider]
          passepartout.console [ReplThread])
  (setv data (tempfile.mkdtemp :prefix "passepartout-bench-")
        run (tempfile.mkdtemp :prefix "pp-run-")
        config (os.path.join data "config.toml"))
  (.write-text (Path config) "")
  (setv env (boot :config-path config
                  :environ (| (dict os.environ) {"PASSEPARTOUT_DATA_DIR" data
                                                 "PASSEPARTOUT_RUNTIME_DIR" run})
                  :providers [(make-provider "symbolic")])
        server (ReplThread env)
        [client script] (_client-command))
  (defn once [command forms [timeout 30]]
    (setv t (time.perf-counter)
          p (subprocess.run (+ command ["--socket" server.path "--timeout" (str timeout) forms])
                            :capture-output True :text True))
    #((- (time.perf-counter) t) p.returncode (.strip p.stdout)))
  (try
    (setv runs (lfor _ (range n) (once client "(+ 1 2)"))
          wrong (lfor r runs :if (!= (cut r 1 None) #(0 "3")) r)
          times (lfor r runs (get r 0))
          rows [#("repl '(+ 1 2)' whole process, python -S, p50" (* 1000 (statistics.median times)) "ms" "< 60 ms")
                #("repl '(+ 1 2)' whole process, python -S, p90"
                  (* 1000 (get (sorted times) (min (- n 1) (int (* 0.9 n))))) "ms" "")])
    (when wrong
      (.append rows #("repl '(+ 1 2)' wrong answers" (len wrong) f"of {n}" "0")))
    (when script
      (setv times (lfor _ (range (max 3 (// n 4))) (get (once script "(+ 1 2)") 0)))
      (.append rows #("repl '(+ 1 2)' through the console script, p50" (* 1000 (statistics.median times)) "ms" "")))
    (setv [t code _] (once client "(while True (setv x 1))" 1)
          [_ next-code next-out] (once client "(+ 1 2)"))
    (+= rows [#("repl: a form looping forever, --timeout 1, answered after" t "s" "≈ 1 s")
              #("repl: the next form after that timeout answered"
                (if (and (= code 1) (= next-code 0) (= next-out "3")) "yes" "no") "" "yes")])
    rows
    (finally
      (.stop server)
      (shutdown env))))

;; * A model that hangs

(defn bench-hung-provider [runs]
  (import asyncio socket
          passepartout.cascade [make-cascade cascade-complete]
          passepartout.providers [make-provider]
          passepartout.llm [_litellm-module])
  (_litellm-module)
  (setv key-env "PASSEPARTOUT_BENCH_HUNG_KEY"
        deadline 1.0
        told []
        answered [])
  (.setdefault os.environ key-env "bench-key")
  (with [s (socket.socket)]
    (.bind s #("127.0.0.1" 0))
    (.listen s 64)
    (setv base f"http://127.0.0.1:{(get (.getsockname s) 1)}/v1")
    (for [_ (range runs)]
      (setv cascade (make-cascade [(make-provider "openai/hung" :api-base base :api-key-env key-env
                                                  :timeout deadline)
                                   (make-provider "symbolic")])
            start (time.perf-counter)
            heard [])
      (asyncio.run (cascade-complete cascade [:messages [{"role" "user" "content" "help"}] :tools None
                                              :signal [:type :event :session "bench"
                                                       :payload [:sensor :user-input :text "help"]]
                                              :notify (fn [text [kind "progress"]]
                                                        (.append heard (time.perf-counter)))]))
      (.append answered (- (time.perf-counter) start))
      (when heard (.append told (- (get heard 0) start)))))
  [#(f"hung first model ({deadline :g} s deadline) → the person told, p50"
     (if told (statistics.median told) "never told") "s" "≤ deadline + 1 s")
   #(f"hung first model ({deadline :g} s deadline) → answer from the next, p50"
     (statistics.median answered) "s" "≤ deadline + 1 s; default deadline 60 s, 30 s for a local model")])

;; * Answering an approval

(defn bench-approval [n]
  "Rows (name value unit goal): p50 and p99 of /approve to the start of execution."
  (import asyncio
          passepartout.daemon [boot shutdown]
          passepartout.providers [make-provider]
          passepartout.loop [step]
          passepartout.act [action-name]
          passepartout.skills [make-skill register-skill])
  (setv tmp (Path (tempfile.mkdtemp :prefix "passepartout-bench-"))
        started [])
  (.write-text (/ tmp "config.toml") "")
  (setv env (boot :config-path (str (/ tmp "config.toml"))
                  :environ {"PASSEPARTOUT_DATA_DIR" (str (/ tmp "data")) "HOME" (str tmp)}
                  :providers [(make-provider "symbolic")]))
  (setv env.complete (fn [request]
                       [:status :ok :provider "bench"
                        :text "(:action :bench-probe :explanation \"measure\")"]))
  (register-skill
    env.skills
    (make-skill "bench-approval-probe" :priority 1
                :gate (fn [action ctx]
                        (if (= (action-name action) "bench-probe")
                            [:verdict :escalate :reason "measured"]
                            [:verdict :allow]))
                :actuators {"bench-probe" {"run" (fn [action ctx]
                                                   (.append started (time.perf-counter))
                                                   [:status :ok])
                                           "doc" "a probe" "effect" True}}))
  (defn :async say [text]
    (await (step [:type :event :source [:gateway :bench :chat "b" :user "b"]
                  :payload [:sensor :user-input :text text]]
                 env)))
  (setv times [])
  (defn :async main []
    (for [_ (range n)]
      (setv ask (next (gfor s (await (say "probe"))
                            :if (proto-get (proto-get s ':payload []) ':approval) s))
            code (proto-get (proto-get (proto-get ask ':payload) ':approval) ':code)
            t (time.perf-counter))
      (await (say f"/approve {code}"))
      (.append times (- (get started -1) t))))
  (try
    (asyncio.run (main))
    (finally
      (shutdown env)))
  [#("approval: /approve to start of execution p50" (* 1000 (statistics.median times)) "ms" "< 50 ms")
   #("approval: /approve to start of execution p99" (* 1000 (_percentile times 0.99)) "ms" "")])

;; * Stopping a running action

(defn _running [marker]
  "Whether a live process's command line holds MARKER."
  (for [d (os.listdir "/proc") :if (.isdigit d)]
    (try
      (when (and (in (.encode marker) (.read-bytes (Path f"/proc/{d}/cmdline")))
                 (not (.startswith (get (.split (.read-text (Path f"/proc/{d}/stat")) ") ") -1) "Z")))
        (return True))
      (except [OSError])))
  False)

(defn bench-stop [n]
  "Rows (name value unit goal): /stop to the running action's processes gone, N times."
  (import asyncio
          passepartout.daemon [boot shutdown]
          passepartout.providers [make-provider]
          passepartout.runner [Runner])
  (setv tmp (Path (tempfile.mkdtemp :prefix "passepartout-bench-"))
        times [])
  (.write-text (/ tmp "config.toml") "")
  (setv env (boot :config-path (str (/ tmp "config.toml"))
                  :environ {"PASSEPARTOUT_DATA_DIR" (str (/ tmp "data")) "HOME" (str tmp)
                            "PATH" (.get os.environ "PATH" "/usr/bin:/bin")}
                  :providers [(make-provider "symbolic")]))
  (defn said [text]
    [:type :event :source [:gateway :bench :chat "stop"] :payload [:sensor :user-input :text text]])
  (defn :async wait-for [check what]
    (setv deadline (+ (time.monotonic) 10))
    (while (not (check))
      (when (> (time.monotonic) deadline)
        (raise (RuntimeError f"after 10 s, {what}")))
      (await (asyncio.sleep 0.001))))
  (defn :async main []
    (setv runner (Runner env (fn [r] None)))
    (try
      (for [i (range n)]
        (setv marker f"sleep {(+ 700 i)}")
        (await (.submit runner (said f"!{marker}")))
        (await (wait-for (fn [] (_running marker)) f"`{marker}` has not started"))
        (setv t (time.perf-counter))
        (await (.submit runner (said "/stop")))
        (await (wait-for (fn [] (not (_running marker))) f"`{marker}` still runs after /stop"))
        (.append times (- (time.perf-counter) t))
        (await (.idle runner "bench:stop")))
      (finally
        (await (.close runner)))))
  (try
    (asyncio.run (main))
    (finally
      (shutdown env)))
  [#("/stop to the running action's processes gone, p50" (* 1000 (statistics.median times)) "ms" "< 100 ms")
   #("/stop to the running action's processes gone, max" (* 1000 (max times)) "ms" "")])

;; * The model a bench answers with

(setv _ECHO-KEYS #(':signal ':payload ':text ':status ':ok ':provider))

(defn _echo-model [request]
  (setv [signal payload text status ok provider] _ECHO-KEYS
        said (str (proto-get (proto-get (proto-get request signal) payload) text)))
  [status ok provider "echo" text (+ "(:action :message :text " (proto-print (+ "echo: " said)) ")")])

;; * What a message costs the daemon

(defn _cpu-of [pid]
  "The CPU seconds process PID has used."
  (setv fields (.split (get (.rsplit (.read-text (Path f"/proc/{pid}/stat")) ")" 1) 1)))
  (/ (+ (int (get fields 11)) (int (get fields 12))) (os.sysconf "SC_CLK_TCK")))

(defn bench-message-cpu [n [runs 5]]
  "Rows (name value unit goal): the daemon's CPU per message, N messages a run."
  (import asyncio
          passepartout.providers [make-provider]
          passepartout.daemon [boot shutdown start-services stop-services]
          passepartout.gateways.hub [Hub])
  (setv folder (Path (tempfile.mkdtemp :prefix "passepartout-bench-cpu-")))
  (.write-text (/ folder "config.toml") "[sandbox]\nmode = \"off\"\n")
  (setv env (boot :config-path (str (/ folder "config.toml"))
                  :environ {"PASSEPARTOUT_DATA_DIR" (str (/ folder "data")) "HOME" (str folder)}
                  :providers [(make-provider "symbolic")]
                  :gates "process"))
  (setv env.complete _echo-model)
  (defn :async through [count first]
    (setv done (asyncio.Event)
          answered [0])
    (defn :async deliver [reply]
      (+= (get answered 0) 1)
      (when (>= (get answered 0) count) (.set done)))
    (setv hub (Hub env [{"name" "bench" "deliver" deliver}]))
    (for [i (range count)]
      (await (.receive hub "bench" f"m{(+ first i)}"
                       [:type :event :source [:gateway :bench :chat (% i 20) :user 7]
                        :payload [:sensor :user-input :text f"hello {i}"]])))
    (await (.wait done))
    (await (.close hub)))
  (defn :async main []
    (await (start-services env))
    (try
      (setv gate-pid (get (.pids env.gates.keeper) 0))
      (await (through 50 0))
      (setv daemon [] gates [])
      (for [r (range runs)]
        (setv cpu (time.process-time)
              child (_cpu-of gate-pid))
        (await (through n (* 100000 (+ r 1))))
        (.append daemon (/ (- (time.process-time) cpu) n))
        (.append gates (/ (- (_cpu-of gate-pid) child) n)))
      #(daemon gates)
      (finally
        (await (stop-services env)))))
  (try
    (setv [daemon gates] (asyncio.run (main)))
    (finally
      (shutdown env)))
  [#(f"daemon CPU per message, instant model, gates in their process (median of {runs} × {n})"
     (* 1000 (statistics.median daemon)) "ms" "≤ 2 ms")
   #("the gate process's CPU per message" (* 1000 (statistics.median gates)) "ms" "")])

;; * The journal

(defn bench-journal [n [turns 100000]]
  "Rows (name value unit goal): append cost per turn, and verify over TURNS."
  (import passepartout.store [store-open store-path-for]
          passepartout.records [event-append]
          passepartout.journal [journal-append journal-verify row-hash GENESIS _columns])
  (setv tmp (Path (tempfile.mkdtemp :prefix "passepartout-bench-journal-")))
  (defn records [i]
    (setv task f"t{(% i 50)}"
          s f"s{(% i 7)}")
    [[:event "input" :session s :data [:text "what is in the folder?" :task task]]
     [:event "outcome" :session s :data [:verdict :allow :task task :action [:action :shell :cmd "ls"]
                                         :usage [:prompt-tokens 900 :completion-tokens 40 :cost 0.001]]]
     [:event "result" :session s :data [:task task :step 0 :result [:status :ok :stdout "a b c"]]
      :state-after "3f2a9c0d1e7b4a55"]
     [:event "answer" :session s :data [:text "three files" :task task]]])
  (defn timed [append]
    (with [store (store-open (store-path-for (/ tmp (str (id append)))))]
      (setv times [])
      (for [i (range n)]
        (setv rs (records i))
        (.execute store.conn "BEGIN IMMEDIATE")
        (setv t (time.perf-counter))
        (for [r rs] (append store r))
        (.append times (/ (- (time.perf-counter) t) (len rs)))
        (.execute store.conn "COMMIT"))
      (* 1e6 (statistics.median times))))
  (setv journal (timed (fn [store r] (journal-append store r)))
        plain (timed (fn [store r] (event-append store (proto-get r ':event) (proto-get r ':session)
                                                 (proto-get r ':data)))))
  (with [store (store-open (store-path-for (/ tmp "verify")))]
    (setv prev GENESIS
          rows [])
    (for [i (range 1 (+ turns 1))]
      (setv row #(i (+ 1.7e9 i) "result" f"s{(% i 7)}"
                  f"(:task \"t{(% i 50)}\" :step {(% i 8)} :result (:status :ok :stdout \"a b c\"))"
                  "action" i (str (- i 1)) f"t{(% i 50)}" "" "" None None prev)
            prev (row-hash row))
      (.append rows (+ row #(prev))))
    (with [conn (.transaction store)]
      (.executemany conn (+ "INSERT INTO events (" _columns ") VALUES (" (.join ", " (* ["?"] 15)) ")")
                    rows))
    (setv t (time.perf-counter)
          v (journal-verify store)
          took (- (time.perf-counter) t)
          said (if (proto-get v ':ok) "intact" "BROKEN")))
  [#("journal append, per turn in a step's transaction" journal "µs" "")
   #("plain event append, per record (before the journal)" plain "µs" "")
   #(f"journal verify, {turns} turns ({said})" took "s" "< 2")])

;; * The causal cone

(defn bench-cone [[sessions 4] [tasks 10]]
  "Rows (name value unit goal): prompt tokens of the history with the cone
   against the flat recent history, and own turns left out."
  (import passepartout.llm [_litellm-module]
          passepartout.store [store-open store-path-for]
          passepartout.journal [journal-append]
          passepartout.history [task-history turns-since HISTORY-TURNS])
  (setv tmp (Path (tempfile.mkdtemp :prefix "passepartout-bench-cone-"))
        cone-tokens []
        flat-tokens []
        missing 0)
  (defn tokens [messages]
    (if messages (.token-counter (_litellm-module) :model "gpt-3.5-turbo" :messages messages) 0))
  (defn listing [s t k]
    (.join "\n" (gfor i (range 40) f"-rw-r--r-- 1 me me {(* 97 (+ i k))} Nov 24 10:{(% i 60):02} s{s}-t{t}-file-{i}.txt")))
  (with [store (store-open (store-path-for (/ tmp "cone")))]
    (defn write [kind session data]
      (with [_ (.transaction store)]
        (journal-append store [:event kind :session session :data data])))
    (defn call [session task own]
      (setv [cone _] (task-history store session task)
            flat (cut (lfor [_ _ m _] (get (turns-since store session 0) 2) m) (- HISTORY-TURNS) None)
            shown (sfor m cone (get m "content")))
      (nonlocal missing)
      (+= missing (sum (gfor c own :if (not (in c shown)) 1)))
      (.append cone-tokens (tokens cone))
      (.append flat-tokens (tokens flat)))
    (for [t (range tasks)
          s (range sessions)]
      (setv session f"bench:{s}"
            task f"s{s}-t{t}"
            own [f"what is in folder {t} of {s}?"])
      (write "input" session [:text (get own 0) :task task])
      (for [k (range (+ 1 (% (+ s t) 3)))]
        (call session task own)
        (setv action [:action :shell :cmd f"ls -l folder-{t}/part-{k}"]
              result [:status :ok :stdout (listing s t k)])
        (write "result" session [:action action :result result :task task :step k])
        (.append own (+ "Result of " (proto-print action) ":\n" (proto-print result))))
      (call session task own)
      (write "answer" session [:text f"Folder {t} holds 40 files; the largest is s{s}-t{t}-file-39.txt." :task task])))
  (setv total-cone (sum cone-tokens)
        total-flat (sum flat-tokens))
  [#(f"history tokens per model call, causal cone ({(len cone-tokens)} calls, {sessions} sessions)"
     (statistics.median cone-tokens) "tokens (median)" "")
   #("history tokens per model call, flat recent history" (statistics.median flat-tokens) "tokens (median)" "")
   #("history tokens saved by the causal cone, all calls" (* 100 (- 1 (/ total-cone (max 1 total-flat)))) "%" "≥ 50")
   #("turns of a task's own thread left out of its cone" missing "" "0")])
