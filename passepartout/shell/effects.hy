;; * Why

"A rule without a verdict says what its program's arguments do: which it
deletes, writes, reads as a tree or runs as a command line. This module judges
those declared effects against the context, and two programs whose effects
hide in a language of their own: the scripts of sed and the settings of
git, some of which git runs as commands. A command line such an effect runs
is judged by the judge's own function (shell/judge.hy), which it is given."

(import fnmatch os posixpath
        passepartout.shell.parse [UNKNOWN sed-effects]
        passepartout.shell.state [ESCALATE]
        passepartout.shell.rules [rule-operands _entry-holds _spec]
        passepartout.shell.paths [_concrete _judge-delete _judge-write _read-verdicts _realpath
                                  _tree-verdicts])

;; * Effects declared by rules

(defn _positional [mode ops]
  (cond (= mode "operands") ops
        (= mode "all-but-last") (if (>= (len ops) 2) (cut ops -1) [])
        (= mode "last") (if (>= (len ops) 2) (cut ops -1 None) [])
        (= mode "first") (cut ops 1)
        (= mode "second") (cut ops 1 2)
        True []))

(defn _effects [rule rec parsed pc rules nest judge-nested]
  "The verdicts of the effects RULE declares for REC, and the arguments judged as targets."
  (setv out []
        targets (set)
        name (get rule "name")
        ops (or (rule-operands rule parsed) [])
        opts (get parsed "opts")
        recursive (or (get rule "recursive") (get rec "tree")
                      (any (gfor e (get rule "recursive-flags") (_entry-holds e parsed))))
        written (lfor [o v] opts :if (and v (in o (get rule "write-options"))) v))
  (when (get rule "deletes")
    (for [t (_positional (get rule "deletes") ops)]
      (.add targets t)
      (.extend out (_judge-delete t rec pc recursive "deletes" name))))
  (when (and (get rule "writes") (not written))
    (for [t (_positional (get rule "writes") ops)]
      (.add targets t)
      (.extend out (_judge-write t rec pc rules "writes" name))))
  (for [v written]
    (.add targets v)
    (.extend out (_judge-write v rec pc rules "writes" name)))
  ;; what a copy or a move puts into a folder lands there under its own name
  ;; (=cp -r ../o/.git .= writes =./.git=)
  (when (= (get rule "writes") "last")
    (setv folder (if written (get written 0) (when (>= (len ops) 2) (get ops -1)))
          sources (if written ops (cut ops 0 -1)))
    (when (and folder sources
               (any (gfor [path maybe _] (_concrete folder (get rec "cwd") pc)
                          (and (not maybe) (or written (os.path.isdir (_realpath path pc)))))))
      (for [src sources]
        (setv base (posixpath.basename (.rstrip src "/")))
        (when (and base (not (in base #("." ".."))) (not (in UNKNOWN base)))
          (.extend out (_judge-write (posixpath.join folder base) rec pc rules "writes" name))))))
  (for [a (get parsed "args")
        p (get rule "write-prefixes")]
    (when (.startswith a p)
      (.add targets a)
      (.extend out (_judge-write (cut a (len p) None) rec pc rules "writes" name))))
  (when (is-not (get rule "writes-dir") None)
    (for [d (or (lfor [o v] opts :if (and v (in o (get rule "writes-dir"))) v) ["."])]
      (.add targets d)
      (.extend out (_judge-write d rec pc rules "writes into" name))))
  (when (get rule "reads-tree")
    (for [t ops]
      (.extend out (_tree-verdicts t rec pc rules name))))
  (for [[o v] opts
        [option prefix] (get rule "command-options")]
    (when (and (= o option) v (.startswith v prefix))
      (.extend out (judge-nested (cut v (len prefix) None) pc rules nest o name))))
  (when (= (get rule "script") "sed")
    (.extend out (_judge-sed rec parsed pc rules nest name targets)))
  #(out targets))

;; * sed scripts

(defn _judge-sed [rec parsed pc rules nest rule targets]
  (setv opts (get parsed "opts")
        names (get parsed "names")
        scripts (lfor [o v] opts :if (and v (in o #("-e" "--expression"))) v)
        files (lfor [o v] opts :if (and v (in o #("-f" "--file"))) v)
        ops (list (get parsed "operands"))
        sandbox (in "--sandbox" names)
        out [])
  (when (and (not scripts) (not files) ops)
    (setv scripts [(get ops 0)]
          ops (cut ops 1 None)))
  (for [f files]
    (.append out [ESCALATE f"sed reads its script from {f}, which the gate cannot see" "sed-script"]))
  (for [script scripts]
    (setv effects (sed-effects script))
    (cond (is effects None)
          (.append out [ESCALATE "the sed script cannot be read" "sed-script"])
          (not sandbox)
          (do (when (get effects "runs")
                (.append out [ESCALATE "sed's e command runs a shell command" "sed-runs"]))
              (for [f (get effects "writes")]
                (.extend out (_judge-write f rec pc rules "sed writes" rule)))
              (for [f (get effects "reads")]
                (.extend out (_read-verdicts f rec pc rules))))))
  (when (or (in "-i" names) (any (gfor n names (.startswith n "--in-place"))))
    (for [f ops]
      (.add targets f)
      (.extend out (_judge-write f rec pc rules "edits in place" rule))))
  out)

;; * git settings

(setv _git-config-values #{"-f" "--file" "--blob" "--type" "--default" "--comment" "--value"}
      _git-config-reads #{"-l" "--list" "--unset" "--unset-all" "--remove-section"
                          "--rename-section" "-e" "--edit" "--show-origin" "--show-scope"
                          "--name-only" "get" "list" "unset" "edit" "remove-section"
                          "rename-section"})

(defn _git-setting [kv pc rules nest judge-nested]
  (setv [key _ value] (.partition kv "=")
        key (.lower key))
  (cond (any (gfor g (get rules "git-command") (fnmatch.fnmatchcase key g)))
        (judge-nested (cond (not (.startswith key "alias.")) value
                             (.startswith value "!") (cut value 1 None)
                             True (+ "git " value))
                       pc rules nest f"git's {key}" "git-command-config")
        (any (gfor g (get rules "git-escalate") (fnmatch.fnmatchcase key g)))
        [[ESCALATE f"git's {key} loads hooks, configuration or code from elsewhere" "git-escalate-config"]]
        True []))

(defn _git-verdicts [rec pc rules nest judge-nested]
  (setv args (cut (get rec "argv") 1 None)
        values (get (_spec rules "git") "value")
        out []
        i 0
        n (len args))
  (while (< i n)
    (setv a (get args i))
    (cond (= a "-c") (do (when (< (+ i 1) n)
                           (.extend out (_git-setting (get args (+ i 1)) pc rules nest judge-nested)))
                         (+= i 2))
          (.startswith a "-c") (do (.extend out (_git-setting (cut a 2 None) pc rules nest judge-nested))
                                   (+= i 1))
          (.startswith a "--config-env")
          (do (.append out [ESCALATE "git --config-env takes settings from the environment, unseen" "git-escalate-config"])
              (+= i (if (in "=" a) 1 2)))
          (in a values) (+= i 2)
          (.startswith a "-") (+= i 1)
          True (break)))
  (setv sub (cut args i None))
  (when (and sub (= (get sub 0) "config"))
    (setv ops []
          j 1
          reading False)
    (while (< j (len sub))
      (setv a (get sub j))
      (cond (in a _git-config-reads) (setv reading True)
            (.startswith a "--get") (setv reading True)
            (in a _git-config-values) (+= j 1)
            (.startswith a "-") None
            True (.append ops a))
      (+= j 1))
    (when (and ops (= (get ops 0) "set")) (setv ops (cut ops 1 None)))
    (when (and (not reading) (>= (len ops) 2))
      (setv key (.lower (get ops 0)))
      (.extend out (_git-setting f"{(get ops 0)}={(get ops 1)}" pc rules nest judge-nested))
      ;; kept in a config file, a command runs at every later git command, on
      ;; the host too, long after this one was judged
      (when (any (gfor g (+ (get rules "git-command") (get rules "git-escalate"))
                       (fnmatch.fnmatchcase key g)))
        (.append out [ESCALATE f"git config keeps {key} in a config file, which runs it later, unseen" "guarded-writes"]))))
  out)
