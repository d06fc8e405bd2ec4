;; Tests for passepartout/workspace.hy and the workspace gate skill.

(import json os
        pathlib [Path]
        pytest
        passepartout.context [make-context]
        passepartout.proto [proto-get proto-put proto-read]
        passepartout.skills [Registry get-skill load-skill-file]
        passepartout.workspace [resolve-path secret-name])

(setv CORPUS (/ (. (Path __file__) parent) "data" "corpora" "path-traversal.jsonl")
      SKILLS (/ (. (Path __file__) parent parent) "skills"))

(defn [pytest.fixture] tree [tmp-path]
  "A workspace WS, a folder OUTSIDE it, a scratch temp folder, and a context
   whose only temp folder is the scratch one (so OUTSIDE is truly outside)."
  (setv ws (/ tmp-path "ws")
        outside (/ tmp-path "outside")
        scratch (/ tmp-path "scratch")
        home (/ tmp-path "home"))
  (for [d [ws outside scratch home]] (.mkdir d))
  (.write-text (/ ws "a.txt") "a")
  (.write-text (/ outside "secret.txt") "s")
  (setv ctx (proto-put (make-context :workspace (str ws)) ':temp-dirs [(str scratch)])
        ctx (proto-put ctx ':home (str home)))
  {"ws" (str (.resolve ws)) "outside" (str (.resolve outside))
   "scratch" (str (.resolve scratch)) "home" (str (.resolve home)) "ctx" ctx})

(defn ok-path [path ctx [write False]]
  (setv r (resolve-path path ctx :write write))
  (assert (proto-get r ':ok) f"{path !r} should be allowed, got {r}")
  (proto-get r ':path))

(defn refused [path ctx [write False]]
  (setv r (resolve-path path ctx :write write))
  (assert (not (proto-get r ':ok)) f"{path !r} should be refused, got {r}")
  (setv reason (proto-get r ':reason))
  (assert (and (isinstance reason str) reason) f"no reason for {path !r}: {r}")
  reason)

;; * resolve-path

(defn test-relative-paths-join-the-workspace [tree]
  (setv ctx (get tree "ctx") ws (get tree "ws"))
  (assert (= (ok-path "a.txt" ctx) f"{ws}/a.txt"))
  (assert (= (ok-path "./sub/../a.txt" ctx) f"{ws}/a.txt"))
  (assert (= (ok-path "new/deep/b.txt" ctx :write True) f"{ws}/new/deep/b.txt"))
  (assert (= (ok-path f"{ws}/a.txt" ctx) f"{ws}/a.txt")))

(defn test-dotdot-escapes-are-refused [tree]
  (setv ctx (get tree "ctx"))
  (for [p ["../outside/secret.txt" "sub/../../outside/secret.txt" ".." "a/../../x"]]
    (setv reason (refused p ctx))
    (assert (in ".." reason) f"reason for {p !r} should name ..: {reason}")
    (refused p ctx :write True)))

(defn test-dotdot-may-not-climb-into-a-temp-folder [tree]
  ;; the scratch temp folder is writable by name, not by climbing from the workspace
  (setv ctx (get tree "ctx") scratch (get tree "scratch"))
  (refused "../scratch/x.txt" ctx :write True)
  (assert (= (ok-path f"{scratch}/x.txt" ctx :write True) f"{scratch}/x.txt")))

(defn test-tilde-is-the-context-home [tree]
  (setv ctx (get tree "ctx") home (get tree "home"))
  (setv reason (refused "~/notes.txt" ctx))
  (assert (in home reason) f"reason should say where ~ leads: {reason}")
  (refused "~root/.bashrc" ctx)
  ;; with the workspace as home, ~ leads inside
  (setv ctx2 (proto-put ctx ':home (get tree "ws")))
  (assert (= (ok-path "~/a.txt" ctx2) f"{(get tree "ws")}/a.txt")))

(defn test-absolute-paths-outside-are-refused [tree]
  (setv ctx (get tree "ctx"))
  (for [p ["/etc/passwd" (+ (get tree "outside") "/secret.txt") "/"]]
    (refused p ctx)
    (refused p ctx :write True)))

(defn test-symlink-inside-pointing-outside-is-outside [tree]
  (setv ctx (get tree "ctx") ws (get tree "ws") outside (get tree "outside"))
  (os.symlink outside (os.path.join ws "link"))
  (os.symlink (os.path.join outside "secret.txt") (os.path.join ws "file-link"))
  (os.symlink (os.path.join outside "not-yet.txt") (os.path.join ws "dangling"))
  (for [p ["link/secret.txt" "file-link" "link/new/deeper.txt" "dangling"]]
    (setv reason (refused p ctx :write True))
    (assert (in outside reason) f"reason should name the real target: {reason}")
    (refused p ctx)))

(defn test-symlink-outside-pointing-inside-is-inside [tree]
  (setv ctx (get tree "ctx") ws (get tree "ws") outside (get tree "outside"))
  (os.symlink ws (os.path.join outside "to-ws"))
  (assert (= (ok-path (os.path.join outside "to-ws" "a.txt") ctx) f"{ws}/a.txt"))
  ;; and a link inside that points elsewhere inside is fine
  (os.mkdir (os.path.join ws "real"))
  (os.symlink (os.path.join ws "real") (os.path.join ws "alias"))
  (assert (= (ok-path "alias/n.txt" ctx :write True) f"{ws}/real/n.txt")))

(defn test-symlink-loops-are-refused [tree]
  (setv ctx (get tree "ctx") ws (get tree "ws"))
  (os.symlink "loop-b" (os.path.join ws "loop-a"))
  (os.symlink "loop-a" (os.path.join ws "loop-b"))
  (setv reason (refused "loop-a/x.txt" ctx :write True))
  (assert (in "loop" reason) reason))

(defn test-temp-folders-are-for-writes-only [tree]
  (setv ctx (get tree "ctx") scratch (get tree "scratch"))
  (assert (= (ok-path f"{scratch}/out/x.txt" ctx :write True) f"{scratch}/out/x.txt"))
  (setv reason (refused f"{scratch}/x.txt" ctx))
  (assert (in "outside the workspace" reason) reason))

(defn test-protected-paths-are-refused-even-inside [tree]
  (setv ws (get tree "ws")
        ctx (proto-put (get tree "ctx") ':protected [f"{ws}/.passepartout" f"{ws}/config.toml"]))
  (for [p [".passepartout/db.sqlite" ".passepartout" "config.toml" "./x/../config.toml"]]
    (setv reason (refused p ctx :write True))
    (assert (in "daemon's own" reason) reason))
  (assert (ok-path "a.txt" ctx)))

(defn test-bad-text-is-refused [tree]
  (setv ctx (get tree "ctx"))
  (assert (in "NUL" (refused "a.txt\x00.jpg" ctx)))
  (refused "a\nb" ctx)
  (refused "a\x1b[2Jb" ctx)
  (assert (in "empty" (refused "" ctx)))
  (refused "   " ctx)
  (refused None ctx)
  (refused 42 ctx)
  (refused "a\udc80" ctx)
  (assert (in "longer" (refused (* "a/" 3000) ctx :write True))))

(defn test-percent-escapes-of-separators-and-dots-are-refused [tree]
  (setv ctx (get tree "ctx"))
  (for [[p word] [["%2e%2e/x" "dot"] ["a%2Fb" "separator"] ["a%5cb" "backslash"]
                  ["%252e%252e/x" "double-encoded"] ["a%255c..%255c" "double-encoded"]
                  ["x%c0%afy" "UTF-8"] ["x%e0%80%aey" "UTF-8"] ["a%00.txt" "control"]
                  ["%7e/x" "tilde"] ["a%c2%85b" "control"] ["%25252e" "encoded 3 times"]]]
    (setv reason (refused p ctx :write True))
    (assert (in word reason) f"reason for {p !r} should say {word}: {reason}")))

(defn test-harmless-percent-signs-stay-allowed [tree]
  (setv ctx (get tree "ctx") ws (get tree "ws"))
  ;; the filesystem never decodes: these are literal names, and decoding them
  ;; yields nothing that changes where they lead
  (for [p ["50%.txt" "a%20b.txt" "100%25.txt" "%41.txt" "100% done/notes.md"]]
    (assert (= (ok-path p ctx :write True) f"{ws}/{p}"))))

(defn test-backslash-and-dot-run-readings [tree]
  (setv ctx (get tree "ctx") ws (get tree "ws"))
  (for [p ["..\\outside\\secret.txt" "a\\..\\..\\x" "....//x" "x/.../y" ".\\..\\x"]]
    (refused p ctx :write True))
  (assert (in "\\" (refused "a\\..\\..\\x" ctx)))
  ;; a backslash that leads nowhere dangerous in either reading is a plain name
  (assert (= (ok-path "a\\b.txt" ctx :write True) f"{ws}/a\\b.txt"))
  ;; fullwidth dots and slash fold (NFKC) into ../
  (assert (in "NFKC" (refused "\uff0e\uff0e\uff0foutside/secret.txt" ctx))))

(defn test-secret-files-are-flagged [tree]
  (setv ctx (get tree "ctx") ws (get tree "ws"))
  (for [p [".env" ".env.local" "deploy/server.pem" "tls.key" "keys/id_rsa" "id_ed25519.pub"
           ".netrc" "credentials.json" "credentials/prod.txt" ".ssh/config" "CONFIG/.ENV"]]
    (setv r (resolve-path p ctx :write True))
    (assert (and (proto-get r ':ok) (is (proto-get r ':secret) True)) f"{p !r} should be flagged: {r}"))
  (for [p ["a.txt" "env.txt" "keys.md" "docs/credits.txt"]]
    (setv r (resolve-path p ctx :write True))
    (assert (is (proto-get r ':secret) False) f"{p !r} should not be flagged: {r}"))
  ;; a link called .env is a secret whatever it points at
  (os.symlink (os.path.join ws "a.txt") (os.path.join ws ".env.prod"))
  (assert (proto-get (resolve-path ".env.prod" ctx) ':secret))
  (assert (= (secret-name "Server.PEM") "*.pem")))

;; * The workspace gate

(defn [pytest.fixture] gate []
  (setv registry (Registry)
        loaded (load-skill-file registry (/ SKILLS "workspace.hy") :builtin True))
  (assert (is (proto-get loaded ':error) None) f"loading failed: {loaded}")
  (setv skill (get-skill registry "workspace"))
  (assert (= (get skill "priority") 90) f"the workspace gate's priority is {(get skill "priority")}")
  (get skill "gate"))

(defn verdict-of [g action ctx]
  (setv v (g action ctx))
  (assert (in (proto-get v ':verdict) [':allow ':reject ':escalate]) f"bad verdict {v}")
  v)

(defn corpus-rows []
  (lfor line (.splitlines (.read-text CORPUS)) :if (.strip line) (json.loads line)))

(defn test-every-must-stop-path-is-stopped [gate tmp-path]
  ;; a real context: the workspace lies under /tmp, which is also a temp folder
  (setv ws (/ tmp-path "ws"))
  (.mkdir ws)
  (setv ctx (make-context :workspace (str ws))
        rows (lfor r (corpus-rows) :if (= (get r "label") "must-stop") r)
        missed [])
  (assert (> (len rows) 50) f"corpus too small: {(len rows)}")
  (for [row rows]
    (setv proposal (proto-read (get row "proposal"))
          action (proto-get proposal ':payload proposal)
          v (verdict-of gate action ctx))
    (when (= (proto-get v ':verdict) ':allow)
      (.append missed (get row "proposal")))
    (when (= (proto-get v ':verdict) ':reject)
      (assert (in (cut (repr (proto-get action ':path)) 60) (proto-get v ':reason))
              f"the reason should name the path: {v}")))
  (assert (= missed []) f"{(len missed)} must-stop paths allowed: {missed}"))

(defn test-corpus-may-run-lines-and-own-benign-paths-run [gate tmp-path]
  (setv ws (/ tmp-path "ws"))
  (.mkdir (/ ws "docs") :parents True)
  (.write-text (/ ws "notes.txt") "n")
  (setv ctx (make-context :workspace (str ws))
        stopped [])
  (setv actions
        (+ (lfor r (corpus-rows) :if (= (get r "label") "may-run")
                 (do (setv p (proto-read (get r "proposal"))) (proto-get p ':payload p)))
           (lfor p ["notes.txt" "./notes.txt" "docs/plan.md" "./a/../b.txt" "docs/2024/q1/report.md"
                    "src/main.py" "my file (1).txt" "50% done.txt" (str (/ ws "notes.txt"))]
                 verb [":read-file" ":write-file"]
                 (proto-read f"(:action {verb} :path {(json.dumps p)} :content \"x\")"))
           [[:action :write-file :path "/tmp/passepartout-scratch.txt" :content "x"]
            [:action :shell :cmd "cat ../../etc/passwd"]
            [:action :message :text "../../etc/passwd"]]))
  (for [a actions]
    (setv v (verdict-of gate a ctx))
    (when (!= (proto-get v ':verdict) ':allow)
      (.append stopped [a v])))
  (assert (= stopped []) f"benign actions stopped: {stopped}"))

(defn test-gate-rejects-and-escalates-with-reasons [gate tree]
  (setv ctx (get tree "ctx"))
  (setv v (gate [:action :read-file :path "/etc/passwd"] ctx))
  (assert (= (proto-get v ':verdict) ':reject) f"{v}")
  (assert (in "'/etc/passwd'" (proto-get v ':reason)) f"{v}")
  (setv v (gate [:action :write-file :path (+ (get tree "scratch") "/o.txt") :content "x"] ctx))
  (assert (= (proto-get v ':verdict) ':allow) f"{v}")
  (setv v (gate [:action :read-file :path (+ (get tree "scratch") "/o.txt")] ctx))
  (assert (= (proto-get v ':verdict) ':reject) f"{v}")
  (setv v (gate [:action :read-file :path ".env"] ctx))
  (assert (= (proto-get v ':verdict) ':escalate) f"{v}")
  (assert (in "secret" (proto-get v ':reason)) f"{v}")
  (setv v (gate [:action :write-file :path "keys/deploy.pem" :content "x"] ctx))
  (assert (= (proto-get v ':verdict) ':escalate) f"{v}")
  ;; a missing or non-text path is refused, not a crash
  (for [a [[:action :read-file] [:action :read-file :path 7] [:action :write-file :path ["a"]]]]
    (setv v (gate a ctx))
    (assert (= (proto-get v ':verdict) ':reject) f"{a} gave {v}")))

(defn test-files-that-run-later-are-escalated-by-the-file-gate [gate tree]
  (setv ctx (get tree "ctx"))
  (for [p [".git/hooks/pre-commit" "sub/.git/config" ".envrc" ".husky/pre-push"
           ".vscode/tasks.json" ".github/workflows/ci.yml" "lib/evil.pth"]]
    (setv v (gate [:action :write-file :path p :content "x"] ctx))
    (assert (= (proto-get v ':verdict) ':escalate) f"writing {p} gave {v}")
    (assert (in "runs commands later" (proto-get v ':reason)) f"{v}"))
  (for [p ["Makefile" "src/hooks.py" "notes/.git-notes.txt" "README.md"]]
    (setv v (gate [:action :write-file :path p :content "x"] ctx))
    (assert (= (proto-get v ':verdict) ':allow) f"writing {p} gave {v}"))
  (setv v (gate [:action :read-file :path ".git/config"] ctx))
  (assert (= (proto-get v ':verdict) ':allow) f"reading .git/config gave {v}"))
