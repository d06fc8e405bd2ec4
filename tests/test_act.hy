;; Tests for passepartout/act.hy and the built-in actuators (skills/message,
;; shell, files, memory_actions).

(import os re signal time
        pathlib [Path]
        pytest
        passepartout.act [act :as act-async clip-output]
        passepartout.context [make-context]
        passepartout.proto [is-plist proto-get proto-put proto-merge]
        passepartout.runner [Stops]
        passepartout.skills [Registry actuator-for load-skill-file make-skill register-skill]
        steps [run])

(setv SKILLS (/ (. (Path __file__) parent parent) "skills")
      ACTUATOR-FILES ["message.hy" "shell.hy" "files.hy" "memory_actions.hy"])

(defn [pytest.fixture] registry []
  "A registry of the test's own with the built-in actuator skills loaded."
  (setv reg (Registry))
  (for [f ACTUATOR-FILES]
    (setv loaded (load-skill-file reg (/ SKILLS f) :builtin True))
    (assert (is (proto-get loaded ':error) None) f"loading {f} failed: {loaded}"))
  reg)

(defn [pytest.fixture] ctx [tmp-path registry]
  (setv ws (/ tmp-path "ws"))
  (.mkdir ws)
  (proto-put (make-context :workspace (str ws) :skills registry :stops (Stops))
             ':temp-dirs [(str (/ tmp-path "scratch"))]))

(defn act [action ctx]
  "What ACTION comes back with in CTX, acted on an event loop of its own."
  (run (act-async action ctx)))

(defn limited [ctx #** limits]
  "CTX with its limits changed, e.g. (limited ctx :output-limit 100)."
  (setv out (list (proto-get ctx ':limits)))
  (for [[k v] (.items limits)]
    (setv out (proto-put out (.replace k "_" "-") v)))
  (proto-put ctx ':limits out))

(defn status [r] (proto-get r ':status))

(defn ok [r]
  "R, checked to be an ok result."
  (assert (= (status r) ':ok) f"expected :ok, got {r}")
  r)

(defn failed [r [word None]]
  "R, checked to be an error result (mentioning WORD)."
  (assert (= (status r) ':error) f"expected :error, got {r}")
  (setv e (proto-get r ':error))
  (assert (isinstance e str) f"no :error text in {r}")
  (when word
    (assert (in word e) f"the error should mention {word !r}: {e}"))
  r)

;; * Dispatch

(defn test-the-built-in-actuators-declare-themselves [registry]
  (for [[name effect] [["message" False] ["shell" True] ["read-file" False]
                       ["write-file" True] ["memory-add" True] ["memory-search" False]]]
    (setv spec (actuator-for registry name))
    (assert spec f"no actuator for {name}")
    (assert (is (get spec "effect") effect) f"{name} effect should be {effect}")
    (assert (and (get spec "doc") (not (in "\n" (get spec "doc")))) f"{name} needs a one-line doc")
    (for [i (range 0 (len (get spec "schema")) 2)]
      (assert (proto-get (get (get spec "schema") (+ i 1)) ':doc) f"{name} field {i} has no doc"))))

(defn test-message-replies [registry ctx]
  (setv r (ok (act [:action :message :text "hello"] ctx)))
  (assert (= (proto-get r ':reply) "hello") f"{r}")
  (assert (= (proto-get r ':action-name) "message") f"{r}")
  (for [a [[:action :message] [:action :message :text 5]]]
    (failed (act a ctx) ":text")))

(defn test-unknown-action [registry ctx]
  (setv r (failed (act [:action :no-such-thing :x 1] ctx)))
  (assert (= (proto-get r ':error) "no actuator for :no-such-thing") f"{r}")
  (assert (= (proto-get r ':action-name) "no-such-thing") f"{r}")
  (for [a [[:text "no action at all"] [] [:action 42]]]
    (failed (act a ctx) ":action")))

(defn test-an-actuator-that-raises-or-returns-junk-is-an-error [registry ctx]
  (defn boom [action ctx] (raise (RuntimeError "kaput")))
  (defn junk [action ctx] "not a plist")
  (defn quits [action ctx] (raise (SystemExit 3)))
  (register-skill registry (make-skill "test-bad-actuators"
                                       :actuators {"boom" {"run" boom} "junk" {"run" junk}
                                                   "quits" {"run" quits}}))
  (setv r (failed (act [:action :boom] ctx) "kaput"))
  (assert (in "RuntimeError" (proto-get r ':error)) f"{r}")
  (assert (= (proto-get r ':action-name) "boom") f"{r}")
  (failed (act [:action :junk] ctx) "no result plist")
  (setv r (failed (act [:action :quits] ctx) "SystemExit"))
  (assert (= (proto-get r ':action-name) "quits") f"{r}"))

(defn test-filters-redact-in-skill-order [registry ctx]
  (defn redact [action result ctx]
    (proto-put result ':reply (.replace (proto-get result ':reply) "hunter2" "[redacted]")))
  (defn mark [action result ctx]
    (proto-put result ':reply (+ "<<" (proto-get result ':reply) ">>")))
  (register-skill registry (make-skill "test-redact" :priority 80 :filter redact))
  (register-skill registry (make-skill "test-mark" :priority 70 :filter mark))
  (setv r (ok (act [:action :message :text "the password is hunter2"] ctx)))
  (assert (= (proto-get r ':reply) "<<the password is [redacted]>>") f"{r}"))

(defn test-filters-see-errors-too [registry ctx]
  (defn boom [action ctx] (raise (ValueError "token hunter2 rejected")))
  (defn redact [action result ctx]
    (proto-put result ':error (.replace (proto-get result ':error) "hunter2" "[redacted]")))
  (register-skill registry (make-skill "test-boom" :actuators {"boom" {"run" boom}}))
  (register-skill registry (make-skill "test-redact" :filter redact))
  (setv r (failed (act [:action :boom] ctx) "[redacted]"))
  (assert (not (in "hunter2" (proto-get r ':error))) f"{r}"))

(defn test-a-failing-filter-withholds-the-result [registry ctx]
  (defn broken [action result ctx] (raise (KeyError "oops")))
  (defn junk [action result ctx] "a string")
  (defn after [action result ctx] (proto-put result ':reply "leaked"))
  (register-skill registry (make-skill "test-broken" :priority 80 :filter broken))
  (register-skill registry (make-skill "test-after" :priority 10 :filter after))
  (setv r (failed (act [:action :message :text "hunter2"] ctx)))
  (assert (= (proto-get r ':error) "result withheld: filter test-broken failed") f"{r}")
  (assert (not (in "hunter2" (str r))) f"{r}")
  (assert (is (proto-get r ':reply) None) f"{r}")
  (register-skill registry (make-skill "test-broken" :priority 80 :filter junk))
  (setv r (act [:action :message :text "x"] ctx))
  (assert (= (proto-get r ':error) "result withheld: filter test-broken failed") f"{r}"))

(defn test-clip-output []
  (assert (= (clip-output b"abcdef" 10) "abcdef"))
  (assert (= (clip-output b"abcdef" 3) "abc\n[… 3 more bytes cut …]"))
  (assert (= (clip-output b"abc" 3 5000) "abc\n[… 4997 more bytes cut …]"))
  (assert (= (clip-output b"a\xffb" 10) "a\ufffdb")))

;; * shell

(defn shell [ctx cmd #** more]
  (act (proto-merge [:action :shell :cmd cmd]
                    (lfor [k v] (.items more) x [(hy.models.Keyword k) v] x))
       ctx))

(defn test-shell-runs-in-the-workspace [registry ctx]
  (setv r (ok (shell ctx "pwd")))
  (assert (= (.strip (proto-get r ':output)) (proto-get ctx ':workspace)) f"{r}")
  (assert (= (proto-get r ':exit) 0) f"{r}")
  (assert (is (proto-get r ':timed-out) False) f"{r}")
  (assert (= (proto-get r ':action-name) "shell") f"{r}"))

(defn test-shell-captures-both-streams-in-order [registry ctx]
  (setv r (ok (shell ctx "echo one; echo two 1>&2; echo three")))
  (assert (= (proto-get r ':output) "one\ntwo\nthree\n") f"{r}"))

(defn test-shell-stdin-is-closed [registry ctx]
  (setv r (ok (shell ctx "cat; echo done")))
  (assert (= (proto-get r ':output) "done\n") f"{r}"))

(defn test-shell-nonzero-exit-keeps-the-output [registry ctx]
  (setv r (failed (shell ctx "echo kept; exit 3") "exit status 3"))
  (assert (= (proto-get r ':exit) 3) f"{r}")
  (assert (= (proto-get r ':output) "kept\n") f"{r}"))

(defn test-shell-output-is-truncated-with-a-marker [registry ctx]
  (setv r (ok (shell (limited ctx :output-limit 100) "head -c 250000 /dev/zero | tr '\\0' a")))
  (setv out (proto-get r ':output))
  (assert (.startswith out (* "a" 100)) f"{(cut out 120)}")
  (assert (.endswith out "[… 249900 more bytes cut …]") f"{(cut out -60 None)}")
  (assert (< (len out) 140) f"{(len out)}"))

(defn test-shell-output-is-decoded-with-replacement [registry ctx]
  (setv r (ok (shell ctx "printf 'a\\377b'")))
  (assert (= (proto-get r ':output) "a\ufffdb") f"{r}"))

(defn _running [tag]
  "Pids of live (not zombie) processes running `sleep TAG`, found from outside:
   inside a sandbox the command sees pids of its own namespace."
  (setv found [])
  (for [p (.iterdir (Path "/proc")) :if (.isdigit p.name)]
    (try
      (when (in (.encode f"sleep\x00{tag}\x00") (.read-bytes (/ p "cmdline")))
        (when (!= (get (.split (get (.rsplit (.read-text (/ p "stat")) ")" 1) 1)) 0) "Z")
          (.append found p.name)))
      (except [OSError])))
  found)

(defn test-shell-timeout-kills-the-whole-group [registry ctx]
  (setv tag f"30.{(% (time.time-ns) 1000000000)}"
        r (failed (shell (limited ctx :shell-timeout 1) f"sleep {tag} & wait" :timeout 20)
                  "timed out"))
  (assert (is (proto-get r ':timed-out) True) f"{r}")
  ;; the kill is sent before the actuator returns; give the kernel a moment to finish it
  (for [_ (range 100)]
    (when (not (_running tag)) (break))
    (time.sleep 0.05))
  (assert (not (_running tag)) f"the background sleep {(_running tag)} survived the timeout"))

(defn test-shell-timeout-from-the-action-when-lower [registry ctx]
  (setv r (failed (shell ctx "sleep 30" :timeout 1) "timed out after 1 s"))
  (assert (is (proto-get r ':timed-out) True) f"{r}"))

(defn :async _until-running [tag]
  "Wait (at most 30 s) until `sleep TAG` runs."
  (setv deadline (+ (time.monotonic) 30))
  (while (not (_running tag))
    (assert (< (time.monotonic) deadline) f"`sleep {tag}` never started")
    (await (hy.I.asyncio.sleep 0.01))))

(defn _gone [tag]
  "True once no `sleep TAG` is left (waiting at most 10 s for the kernel to finish the kill)."
  (for [_ (range 200)]
    (when (not (_running tag)) (return True))
    (time.sleep 0.05))
  False)

(defn test-a-cancelled-shell-action-kills-its-whole-group [registry ctx]
  (setv tag f"31.{(% (time.time-ns) 1000000000)}")
  (defn :async main []
    (setv job (hy.I.asyncio.ensure-future
                (act-async [:action :shell :cmd f"sleep {tag} & wait"] ctx)))
    (await (_until-running tag))
    (.cancel job)
    (try (await job)
         (except [hy.I.asyncio.CancelledError] "cancelled")))
  (setv outcome (run (main)))
  (assert (= outcome "cancelled") f"the cancelled action came back with {outcome}")
  (assert (_gone tag) f"the background sleep {(_running tag)} survived the cancel"))

(defn test-a-stop-kills-the-running-command-and-says-so [registry ctx]
  (import passepartout.runner [stop-session])
  (setv tag f"32.{(% (time.time-ns) 1000000000)}"
        stops (hy.I.passepartout/context.context-runtime ctx "stops")
        ctx (proto-put ctx ':session "test:stop"))
  (defn :async main []
    (setv job (hy.I.asyncio.ensure-future
                (act-async [:action :shell :cmd f"sleep {tag} & wait"] ctx)))
    (await (_until-running tag))
    (setv interrupted (stop-session stops "test:stop"))
    #(interrupted (await (hy.I.asyncio.wait-for job 30))))
  (setv [interrupted r] (run (main)))
  (assert (= interrupted [#(f"the command `sleep {tag} & wait`" True)]) f"what the stop interrupted: {interrupted}")
  (failed r "stopped by the person")
  (assert (is (proto-get r ':stopped) True) f"{r}")
  (assert (_gone tag) f"the background sleep {(_running tag)} survived the stop"))

(defn _started [text]
  "True when a live process's command line holds TEXT (the sandbox's own holds
   the command from its first instant)."
  (for [p (.iterdir (Path "/proc")) :if (.isdigit p.name)]
    (try
      (when (in (.encode text) (.read-bytes (/ p "cmdline")))
        (return True))
      (except [OSError])))
  False)

(defn test-a-stop-as-a-sandboxed-command-starts-leaves-nothing-running [registry ctx]
  (when (!= (proto-get (proto-get ctx ':sandbox) ':kind) "bubblewrap")
    (pytest.skip "no bubblewrap sandbox on this machine"))
  (import passepartout.runner [stop-session])
  (setv stops (hy.I.passepartout/context.context-runtime ctx "stops"))
  ;; the stop comes as soon as bubblewrap is there, before its sandbox is set up
  (for [i (range 30)]
    (setv tag f"33{i}.{(% (time.time-ns) 1000000000)}"
          session f"test:starting-{i}"
          c (proto-put ctx ':session session))
    (defn :async main []
      (setv job (hy.I.asyncio.ensure-future
                  (act-async [:action :shell :cmd f"sleep {tag} & wait"] c))
            deadline (+ (time.monotonic) 30))
      (while (not (_started f"sleep {tag}"))
        (assert (< (time.monotonic) deadline) f"`sleep {tag}` never started")
        (await (hy.I.asyncio.sleep 0.001)))
      (stop-session stops session)
      (await (hy.I.asyncio.wait-for job 30)))
    (failed (run (main)) "stopped by the person")
    (assert (_gone tag) f"round {i}: the sandboxed sleep {(_running tag)} survived the stop")))

(defn test-shell-env-holds-no-secret [registry ctx monkeypatch]
  (monkeypatch.setenv "OPENAI_API_KEY" "sk-test-000000000000000000000")
  (monkeypatch.setenv "TELEGRAM_BOT_TOKEN" "123456:ABCDEF")
  (monkeypatch.setenv "LC_SECRET" "hunter2-hunter2-hunter2")
  (monkeypatch.setenv "LC_PAPER" "en_GB.UTF-8")
  (setv ctx (proto-put ctx ':secrets ["hunter2-hunter2-hunter2"])
        out (proto-get (ok (shell ctx "env")) ':output))
  (for [bad ["OPENAI_API_KEY" "sk-test" "TELEGRAM_BOT_TOKEN" "ABCDEF" "LC_SECRET" "hunter2"]]
    (assert (not (in bad out)) f"{bad} reached the command: {out}"))
  (assert (in "LC_PAPER=en_GB.UTF-8" out) out)
  (assert (re.search r"(?m)^PATH=" out) out))

(defn test-shell-refuses-a-workspace-that-is-not-real [registry ctx tmp-path]
  (setv marker (/ tmp-path "ran"))
  (for [ws [(str (/ tmp-path "missing")) "relative/ws" None]]
    (failed (shell (proto-put ctx ':workspace ws) f"touch {marker}") "not a real folder"))
  (os.symlink (proto-get ctx ':workspace) (/ tmp-path "ws-link"))
  (failed (shell (proto-put ctx ':workspace (str (/ tmp-path "ws-link"))) f"touch {marker}")
          "not a real folder")
  (assert (not (.exists marker)) "a command ran outside the real workspace"))

(defn test-shell-refuses-an-empty-command [registry ctx]
  (for [a [[:action :shell :cmd "   "] [:action :shell] [:action :shell :cmd ["ls"]]]]
    (failed (act a ctx) "empty")))

;; * files

(defn read-file [ctx path]
  (act [:action :read-file :path path] ctx))

(defn write-file [ctx path content]
  (act [:action :write-file :path path :content content] ctx))

(defn test-write-then-read [registry ctx]
  (setv ws (proto-get ctx ':workspace)
        r (ok (write-file ctx "notes/2024/plan.md" "héllo\nworld\n")))
  (assert (= (proto-get r ':path) f"{ws}/notes/2024/plan.md") f"{r}")
  (assert (= (proto-get r ':bytes) 13) f"{r}")
  (setv r (ok (read-file ctx "notes/2024/plan.md")))
  (assert (= (proto-get r ':content) "héllo\nworld\n") f"{r}")
  (assert (is (proto-get r ':truncated) False) f"{r}")
  (ok (write-file ctx "notes/2024/plan.md" "v2"))
  (assert (= (proto-get (read-file ctx "notes/2024/plan.md") ':content) "v2")))

(defn test-atomic-write-leaves-no-temp-files-and-keeps-the-mode [registry ctx]
  (setv ws (Path (proto-get ctx ':workspace))
        target (/ ws "a.sh"))
  (.write-text target "old")
  (os.chmod target 0o750)
  (for [i (range 3)]
    (ok (write-file ctx "a.sh" f"new {i}")))
  (assert (= (lfor p (.iterdir ws) p.name) ["a.sh"]) f"{(list (.iterdir ws))}")
  (assert (= (.read-text target) "new 2"))
  (assert (= (& (. (.stat target) st-mode) 0o777) 0o750)))

(defn test-a-failed-write-leaves-nothing [registry ctx]
  (setv ws (Path (proto-get ctx ':workspace)))
  (.mkdir (/ ws "dir"))
  (failed (write-file ctx "dir" "x") "folder")
  ;; a lone surrogate cannot be encoded: the write fails before any temp file
  (failed (write-file ctx "s.txt" "\ud800"))
  (assert (= (sorted (lfor p (.iterdir ws) p.name)) ["dir"]) f"{(list (.iterdir ws))}"))

(defn test-read-refuses-binary-and-non-files [registry ctx]
  (setv ws (Path (proto-get ctx ':workspace)))
  (.write-bytes (/ ws "img.png") (+ b"\x89PNG\r\n\x1a\n\x00\x00" (* b"x" 100)))
  (failed (read-file ctx "img.png") "binary")
  (.mkdir (/ ws "sub"))
  (failed (read-file ctx "sub") "folder")
  (os.mkfifo (/ ws "fifo"))
  (failed (read-file ctx "fifo") "not a regular file")
  (setv r (read-file ctx "missing.txt"))
  (assert (.startswith (proto-get r ':error) "no such file") f"{r}"))

(defn test-read-is-cut-to-the-output-limit [registry ctx]
  (setv ws (Path (proto-get ctx ':workspace)))
  (.write-text (/ ws "big.txt") (* "z" 50000))
  (setv r (ok (read-file (limited ctx :output-limit 1000) "big.txt")))
  (assert (= (proto-get r ':bytes) 50000) f"{(proto-get r ':bytes)}")
  (assert (is (proto-get r ':truncated) True))
  (assert (.endswith (proto-get r ':content) "[… 49000 more bytes cut …]")))

(defn test-last-mile-refusal-without-the-gate [registry ctx tmp-path]
  ;; the actuators are called directly: no gate ran
  (setv outside (/ tmp-path "outside.txt"))
  (.write-text outside "do not read")
  (setv r (failed (read-file ctx (str outside)) "refused"))
  (assert (not (in "do not read" (str r))) f"{r}")
  (failed (read-file ctx "../outside.txt") "refused")
  (failed (write-file ctx "../outside.txt" "overwritten") "refused")
  (failed (write-file ctx "../new.txt" "x") "refused")
  (os.symlink tmp-path (/ (Path (proto-get ctx ':workspace)) "up"))
  (failed (write-file ctx "up/outside.txt" "overwritten") "refused")
  (assert (= (.read-text outside) "do not read"))
  (assert (not (.exists (/ tmp-path "new.txt")))))

(defn test-write-to-a-temp-folder [registry ctx]
  (setv scratch (get (proto-get ctx ':temp-dirs) 0)
        r (ok (write-file ctx f"{scratch}/out/x.txt" "t")))
  (assert (= (.read-text (Path scratch "out" "x.txt")) "t"))
  (setv r (read-file ctx f"{scratch}/out/x.txt"))
  (assert (in "outside the workspace" (proto-get r ':error)) f"{r}"))

;; * memory

(defn [pytest.fixture] store [tmp-path]
  (setv s (hy.I.passepartout/store.store-open (str (/ tmp-path "p.sqlite"))))
  (yield s)
  (hy.I.passepartout/store.store-close s))

(defn test-memory-add-then-search [registry ctx store]
  (setv ctx (proto-put ctx ':runtime (| (proto-get ctx ':runtime) {"store" store "config" {}})))
  (setv a (proto-get (ok (act [:action :memory-add :text "the cat is called Mistigri"] ctx)) ':id)
        b (proto-get (ok (act [:action :memory-add :text "the dog is called Rex"] ctx)) ':id))
  (assert (and (isinstance a int) (!= a b)) f"ids {a} {b}")
  (setv hits (proto-get (ok (act [:action :memory-search :query "cat"] ctx)) ':hits))
  (assert (= (lfor h hits (proto-get h ':id)) [a]) f"{hits}")
  (assert (is-plist (get hits 0)))
  (setv hits (proto-get (ok (act [:action :memory-search :query "called" :limit 1] ctx)) ':hits))
  (assert (= (len hits) 1) f"{hits}"))

(defn test-memory-without-a-store-or-text [registry ctx]
  (for [[a word] [[[:action :memory-add :text "x"] "no memory store"]
                  [[:action :memory-search :query "x"] "no memory store"]
                  [[:action :memory-add :text "  "] ":text"]
                  [[:action :memory-search] ":query"]]]
    (failed (act a ctx) word)))
