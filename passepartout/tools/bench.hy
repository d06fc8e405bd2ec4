;; * Why

"Speed and memory goals are measured here and printed, never asserted in unit
tests (a busy machine makes timed tests flake, and a flaky test teaches people
to ignore red). passepartout bench prints medians and tails, with the goal
beside each figure, so a change that costs speed shows up as a number."

(import json os re subprocess sys tempfile time
        pathlib [Path])

;; * Helpers

(defn _percentile [xs p]
  (setv xs (sorted xs))
  (get xs (min (- (len xs) 1) (int (* p (len xs))))))

(defn _timed [f n]
  "The durations of N calls of F, in seconds."
  (lfor _ (range n)
        (do (setv t (time.perf-counter))
            (f)
            (- (time.perf-counter) t))))

(defn _gate-context [workspace registry]
  ;; The figures are the shell policy's own: whether this machine has a sandbox
  ;; (without one every allowed command is asked about) must not move them.
  (import passepartout.context [make-context])
  (make-context :workspace workspace :session "bench" :skills registry
                :sandbox [:kind "off" :network "on" :why "the bench measures the gates alone"]))

(defn _default-skills []
  "A registry holding the built-in skills."
  (import passepartout.skills [Registry load-skills])
  (setv registry (Registry))
  (load-skills registry)
  registry)

(defn _rss-kib [pid]
  (for [line (.splitlines (.read-text (Path f"/proc/{pid}/status")))]
    (when (.startswith line "VmRSS:")
      (return (int (get (.split line) 1)))))
  None)

;; * Through the gateways

(defn _tests-rows [name quick [what None]]
  "The rows =tests/bench_rows.py= prints for NAME, run as a script of the
   source tree's tests/ folder (nothing of it is imported here)."
  (setv script (/ (. (Path __file__) parent parent parent) "tests" "bench_rows.py")
        what (or what f"{name} figures"))
  (when (not (.is-file script))
    (return [#(what "not measured: they need the source tree's tests/" "" "")]))
  (setv p (subprocess.run (+ [sys.executable (str script) name] (if quick ["--quick"] []))
                          :capture-output True :text True :cwd (str script.parent)))
  (setv rows (lfor line (.splitlines p.stdout) :if (.startswith line "[") (tuple (json.loads line))))
  (if (and (= p.returncode 0) rows)
      rows
      [#(what f"not measured: the run failed (exit {p.returncode}): {(cut (.strip p.stderr) -500 None)}" "" "")]))

(defn bench-telegram [quick]
  (_tests-rows "telegram" quick))

(defn bench-one-message [quick]
  (_tests-rows "one-message" quick "one Telegram message, update to reply"))

;; * The harm test

(defn bench-harm [quick]
  (_tests-rows "harm" quick))

;; * Running them

(setv _goal-re (re.compile r"\s*(≥|>=|≤|<=|<|>|=|≈)?\s*([0-9][0-9  ]*(?:\.[0-9]+)?)\s*(.*)\Z"))

(defn goal-missed [value unit goal]
  "True when VALUE (in UNIT) misses GOAL, a bound such as \"≥ 95 %\", \"< 20 ms\"
   or \"0\"; False when it meets it; None when the goal is not a plain bound
   in the unit of the value (\"≈ 1 s\", one in prose)."
  (setv m (and (isinstance goal str) (isinstance value #(int float)) (not (isinstance value bool))
               (.match _goal-re goal)))
  (when (not m) (return None))
  (setv [op number rest] (.groups m)
        bound (float (re.sub r"[  ]" "" number))
        rest (.strip rest))
  (when (and rest (not (.startswith (or unit "") rest)) (!= rest (or unit "")))
    (return None))
  (cond (in op #("≥" ">=")) (< value bound)
        (in op #("≤" "<=")) (> value bound)
        (= op "<") (>= value bound)
        (= op ">") (<= value bound)
        (in op #(None "=")) (!= value bound)
        True None))

(defn _print-row [row]
  (setv [name value unit goal] row
        missed (goal-missed value unit goal))
  (print (+ f"{name}: "
            (if (isinstance value float) f"{value :.2f}" (str value))
            (if unit f" {unit}" "")
            (if goal f"   (goal {goal})" "")
            (if missed "   ✗ MISSES ITS GOAL" ""))
         :flush True))

(defn run-benchmarks [[quick False]]
  "Run every benchmark and print its figures. Returns 0. What they write goes
   in one scratch folder (the default of =tempfile=, and =TMPDIR= for the
   processes they start), removed at the end."
  (import shutil)
  (setv scratch (tempfile.mkdtemp :prefix "passepartout-bench-")
        before #(tempfile.tempdir (.get os.environ "TMPDIR")))
  (setv tempfile.tempdir scratch
        (get os.environ "TMPDIR") scratch)
  (try
    (_run-all quick)
    (finally
      (setv tempfile.tempdir (get before 0))
      (if (is (get before 1) None)
          (.pop os.environ "TMPDIR" None)
          (setv (get os.environ "TMPDIR") (get before 1)))
      (shutil.rmtree scratch :ignore-errors True)))
  0)

(defn _run-all [quick]
  (import passepartout.tools.bench-gates [bench-proto bench-verify bench-corpora bench-sandbox
                                          bench-gate-cutoffs bench-reply-validators]
          passepartout.tools.bench-daemon [bench-cold-start bench-chat-memory bench-repl
                                           bench-approval bench-stop bench-message-cpu
                                           bench-hung-provider bench-journal bench-cone])
  (setv n (if quick 300 3000))
  (for [bench [(fn [] (bench-proto n))
               (fn [] (bench-verify n))
               bench-corpora
               (fn [] (bench-cold-start (if quick 3 7)))
               (fn [] (bench-sandbox (if quick 30 200)))
               bench-chat-memory
               (fn [] (bench-repl (if quick 10 40)))
               (fn [] (bench-approval (if quick 50 300)))
               (fn [] (bench-stop (if quick 5 20)))
               (fn [] (bench-gate-cutoffs (if quick 1 3)))
               (fn [] (bench-telegram quick))
               (fn [] (bench-one-message quick))
               (fn [] (bench-message-cpu (if quick 200 600) (if quick 3 5)))
               (fn [] (_tests-rows "model-calls" quick "model calls"))
               (fn [] (_tests-rows "litellm-message" quick "a message through LiteLLM"))
               (fn [] (_tests-rows "workflows" quick "background work"))
               (fn [] (_tests-rows "memory" quick "memory: recall, compaction, dreaming"))
               (fn [] (_tests-rows "routines" quick "routines"))
               (fn [] (_tests-rows "store" quick "the store's size"))
               (fn [] (bench-harm quick))
               (fn [] (bench-hung-provider (if quick 3 5)))
               (fn [] (_tests-rows "reader" quick "the reader by model family"))
               (fn [] (_tests-rows "conversation" quick "the conversation strict servers accept"))
               (fn [] (bench-journal (if quick 300 2000)))
               bench-cone
               (fn [] (bench-reply-validators (if quick 3 20)))]]
    (for [row (bench)] (_print-row row))))
