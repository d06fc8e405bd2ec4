;; * Why

"The model proposes shell commands as text, and the shell is a language, not a
list of words. A gate that looks for rm -rf with a regular expression is
passed within days: the same deletion hides behind sudo, env, command,
\\rm, \"rm\", $'\\x72m', inside bash -c \"…\", after cd / &&, in a
$(…), in find -exec, or in the arguments of a program allowed by name
(rg --pre, git -c core.pager=, tar --checkpoint-action=exec=, GNU
sed's e). The shell gate reads the command the way the shell will: it parses
it into a syntax tree, walks every simple command in it (pipelines, lists,
subshells, command and process substitutions, here-documents, loops,
functions, and the strings handed to bash -c, eval, su -c, watch,
trap and alias, parsed again in turn), peels the launchers off each one,
and judges what is left, arguments included."

;; ** The modules

(import fnmatch os posixpath re
        passepartout.proto [proto-get]
        passepartout.workspace [path-inside BUILD-FILES]
        passepartout.shell.parse [MAX-BYTES MAX-JUDGED MAX-NEST UNKNOWN _kept _private-use-re]
        passepartout.shell.state [ALLOW CONFINE ESCALATE REJECT _clip]
        passepartout.shell.commands [FIND-MATCH SHELLS _absolute]
        passepartout.shell.walk [analyse]
        passepartout.shell.rules [ShellRulesError load-rules parse-options rule-matches
                                  rules-for _entry-holds _rule-options _rules-about _spec
                                  _unmodelled]
        passepartout.shell.paths [_concrete _glob-re _judge-write _name-match _norm _places
                                  _read-verdicts _realpath _resolve _shown _tree-verdicts]
        passepartout.shell.code [BUILD-TOOLS _interpreter _inline-code _agent-code-verdicts
                                 _code-verdicts _environment-verdicts _env-read-verdicts]
        passepartout.shell.scripts [_run-path _script-verdicts]
        passepartout.shell.floor [KNOWN PRINTERS _floor]
        passepartout.shell.effects [_effects _git-verdicts]
        passepartout.shell.unbounded [_resource-verdicts])

;; * Judging a command

;; ** One command

(defn _default-verdicts [rec pc rules]
  (setv args (cut (get rec "argv") 1 None)
        outputs (get rules "output-options")
        out [])
  (for [[i a] (enumerate args)]
    (setv [option eq value] (.partition a "="))
    (cond (and eq (in option outputs) value)
          (.extend out (_judge-write value rec pc rules "writes" "default-output-option"))
          (and (in a outputs) (< (+ i 1) (len args)))
          (.extend out (_judge-write (get args (+ i 1)) rec pc rules "writes" "default-output-option"))))
  out)

(setv COMPUTERS #{"printf" "echo" "base64" "base32" "basenc" "xxd" "od" "hexdump" "tr" "rev"
                  "sed" "awk" "gawk" "mawk" "perl" "python" "python3" "ruby" "node" "openssl"
                  "gzip" "gunzip" "zcat" "bzip2" "xz" "uudecode" "iconv" "cut" "paste"
                  "fold" "dd" "envsubst" "eval" "tac" "sort" "jq" "yq" "cat" "head" "tail"})

(setv BUILTINS #{"cd" "pushd" "popd" "dirs" "eval" "trap" "alias" "unalias" "export" "unset"
                 "set" "shopt" "read" "readarray" "mapfile" "local" "declare" "typeset"
                 "readonly" "shift" "return" "exit" "wait" "test" "[" "[[" "let" "type" "hash"
                 "umask" "getopts" "break" "continue" "true" "false" ":" "echo" "printf"
                 "jobs" "ulimit" "times"})

(setv _find-name-options #{"-name" "-iname" "-path" "-ipath" "-wholename" "-iwholename"
                           "-regex" "-iregex" "-lname" "-ilname"})

(defn _control-plane-verdicts [rec rules]
  "The daemon's control plane run as a script (python3 bin/repl, sh …/passepartout):
   the script's name is judged against the rule control-plane's programs."
  (setv run (_run-path rec rules))
  (when (not run) (return []))
  (setv stem (get (posixpath.splitext (posixpath.basename run)) 0))
  (lfor r (rules-for rules stem)
        :if (= (get r "name") "control-plane")
        [REJECT f"runs {run}, the daemon's control plane, which answers people, not the agent's own commands" "control-plane"]))

(defn _secret-search-verdicts [args pc]
  "find looking for secret files by name (-name id_rsa, -path '*/.ssh/*'): what
   it finds is a list of keys, whatever folder it starts in."
  (setv index (get pc "secrets")
        out [])
  (for [[a b] (zip args (cut args 1 None))]
    (when (and (in a _find-name-options)
               (_kept (get index "searches") b _names-secret b index))
      (.append out [ESCALATE f"find {a} {b} looks for files that hold secrets" "floor-secret-search"])))
  out)

(defn _names-secret [pattern index]
  "True when a component of find's name or path PATTERN may name a secret
   location of INDEX. The answer depends on the pattern and the index alone, so
   it is kept in the index, by pattern."
  (any (gfor c (.split pattern "/")
             :if c
             :setv c (.replace c "\\" "")
             (or (_name-match c (get index "floor-dirs")) (_name-match c (get index "rule-dirs"))
                 (_name-match c (get index "rule-files"))))))

(defn _hard-link-verdicts [rec parsed pc]
  "A hard link is the file it links to: writing through a link to a file
   outside the workspace changes that file, so making one is escalated."
  (setv ops (get parsed "operands"))
  (when (or (not ops) (_entry-holds ["-s" "--symbolic"] parsed))
    (return []))
  (lfor target (if (>= (len ops) 2) (cut ops -1) ops)
        [path maybe given] (_concrete target (get rec "cwd") pc)
        :if (or maybe (not (get (_resolve given pc) 0)))
        [ESCALATE f"makes a hard link to {(_shown path)}, outside the workspace: writing through it would change that file" "link-outside"]))

(defn _workspace-program [program rec pc]
  "True when the program file PROGRAM (a path) lies in the workspace, as it
   reads from every folder the command may run in."
  (setv found (_concrete program (get rec "cwd") pc))
  (and found
       (all (gfor [path maybe given] found
                  (and (not maybe) (path-inside (_realpath path pc) (get pc "ws-real")))))))

(defn _known-verdicts [rec rules pc]
  "Escalations for what the policy does not know about the command REC: its
   program, a subcommand, or an option."
  (setv name (get rec "name")
        args (cut (get rec "argv") 1 None))
  (cond
    (and (not (in name #("[" "[["))) (.search _glob-re (get (get rec "argv") 0)))
    [[ESCALATE f"the program's name {(get (get rec "argv") 0)} is a pattern the shell expands, so what runs is not known" "glob-program"]]
    (or (in name SHELLS) (in name #("source" ".")) (in name BUILTINS)) []
    (_interpreter name)
    (if (_inline-code (get rec "argv"))
        [[ESCALATE f"{name} runs code given on its command line, which the gate does not read" "interpreter-code"]]
        [])
    True
    (do (setv entry (.get (get rules "known") name)
              program (get (get rec "argv") 0))
        (when (is entry None)
          (return (cond (in "/" program)
                        (if (_workspace-program program rec pc)
                            []
                            [[ESCALATE f"runs the program file {program}, outside the workspace, which the shell policy does not know" "unknown-program"]])
                        True
                        [[ESCALATE f"{name} is not a program the shell policy knows" "unknown-program"]])))
        (setv found (_kept (get rules "unmodelled") #(name (tuple args))
                           _unmodelled args entry (_rule-options rules name)))
        (cond (is found None) []
              (= (get found 0) "subcommand")
              [[ESCALATE f"{name} {(get found 1)} is a subcommand the shell policy has not modelled" "unmodelled-subcommand"]]
              True
              [[ESCALATE f"{name} {(get found 1)} is an option the shell policy has not modelled" "unmodelled-option"]]))))

(defn _moved [rec parsed rules]
  "REC as its paths are judged: an option that moves the folder the program
   works in (=make -C DIR=, =git -C DIR=, =tar -C DIR=) adds DIR to the folders
   its relative paths may lead from (some, like tar's -f, still lead from where
   it started), and makes DIR the folder it works in (=work=)."
  (setv options (.get (get rules "chdir") (get rec "name")))
  (when (not options) (return rec))
  (setv dirs (lfor [o v] (get parsed "opts") :if (and v (in o options)) v))
  (when (not dirs) (return rec))
  (setv moved (tuple (lfor c (get rec "cwd") d dirs (if (_absolute d) d (+ c "/" d)))))
  (| rec {"cwd" (+ (tuple (get rec "cwd")) moved) "work" moved}))

(defn _glued-values [args parsed]
  "Values written into a short option's word (-a/etc/x, bundled -xa/etc/x): the
   read check of whole arguments does not see them (it splits --opt=value)."
  (setv whole (set args)
        patterns (sfor i (get parsed "patterns") :if (< i (len args)) (get args i)))
  (lfor [o v] (get parsed "opts")
        :if (and v (= (len o) 2) (not (in v whole))
                 (not (any (gfor p patterns (.endswith p (+ (cut o 1 None) v))))))
        v))

(defn _judge-record [rec pc rules nest]
  "The verdicts for the recorded command REC, the rule to name if it is
   allowed, and how much that rule weighs (a deletion 2, a write 1, else 0)."
  (setv name (get rec "name"))
  (when (is name None)
    (return #([[ESCALATE "the program it runs is only known when it runs" "floor-dynamic-program"]]
              None 0)))
  (setv args (cut (get rec "argv") 1 None)
        parsed (parse-options args (_spec rules name))
        rec (_moved rec parsed rules)
        out []
        targets (set)
        allowed None
        weight 0
        matched False)
  (for [rule (_rules-about rules name parsed)]
    (when (rule-matches rule parsed)
      (setv matched True
            w 0)
      (if (is-not (get rule "severity") None)
          (.append out [(get rule "severity") (get rule "reason") (get rule "name")])
          (do (setv [found judged] (_effects rule rec parsed pc rules nest _judge-nested))
              (.extend out found)
              (.update targets judged)
              (when judged (setv w (if (get rule "deletes") 2 1)))))
      (when (or (is allowed None) (> w weight))
        (setv allowed (get rule "name")
              weight w))))
  (.extend out (_floor rec parsed pc rules nest))
  (when (= name "git")
    (.extend out (_git-verdicts rec pc rules nest _judge-nested)))
  (when (not (or (get rec "launcher") (in name PRINTERS) (= name "eval")))
    (for [[i a] (enumerate args)]
      (when (and (not (in a targets)) (!= a (get rec "code")) (not (in i (get parsed "patterns"))))
        (.extend out (_read-verdicts a rec pc rules))))
    (for [v (_glued-values args parsed)]
      (.extend out (_read-verdicts v rec pc rules)))
    (when (get rec "tree")
      (for [o (get parsed "operands")]
        (.extend out (_tree-verdicts o rec pc rules "find-exec")))))
  ;; what a launcher reads and writes itself (xargs -a FILE, flock FILE, time -o FILE)
  (for [f (get rec "reads")]
    (.extend out (_read-verdicts f rec pc rules)))
  (for [f (get rec "writes")]
    (.extend out (_judge-write f rec pc rules "writes" "launcher-output")))
  (when (not (or matched (get rec "launcher") (in name KNOWN)))
    (.extend out (_default-verdicts rec pc rules)))
  (.extend out (_environment-verdicts rec parsed))
  (if (get rec "launcher")
      ;; a project's runner (=hatch run test=, =pdm run lint=, =bundle exec=)
      ;; reads its project's files first: scripts named there, a Gemfile
      (when (in name BUILD-TOOLS)
        (.extend out (_agent-code-verdicts rec pc name)))
      (do (.extend out (_known-verdicts rec rules pc))
          (.extend out (_script-verdicts rec pc rules nest _judge-nested))
          (.extend out (_code-verdicts rec parsed pc rules nest _judge-nested))))
  (when (= name "ln")
    (.extend out (_hard-link-verdicts rec parsed pc)))
  (when (= name "find")
    (.extend out (_secret-search-verdicts args pc)))
  (when (or (in name SHELLS) (_interpreter name) (in name #("source" ".")))
    (.extend out (_control-plane-verdicts rec rules)))
  (when (and (& (get rec "inner") COMPUTERS) (not (in name PRINTERS))
             (any (gfor a args (in UNKNOWN a))))
    (.append out [ESCALATE f"names a path that {(.join ", " (sorted (& (get rec "inner") COMPUTERS)))} computes when it runs, so what it reads is not known" "floor-computed-path"]))
  #((_confine out pc rules) (or allowed (if (get rec "launcher") None "known-program")) weight))

;; ** Redirections and assignments

(defn _redirect-verdicts [r pc rules]
  (setv rec {"cwd" (get r "cwd")}
        target (get r "target")
        out [])
  (when (in (get r "kind") #("write" "both"))
    (.extend out (_judge-write target rec pc rules "writes" "redirect-write")))
  (when (in (get r "kind") #("read" "both"))
    (.extend out (_read-verdicts target rec pc rules)))
  out)

(defn _assign-verdicts [a pc rules nest]
  (setv name (get a "name")
        values (get a "values")
        scope (get a "scope"))
  (cond (in name (get rules "history"))
        (if (or values (= scope "unset"))
            [[REJECT f"{(if (= scope "unset") "unsets" "sets")} {name}, which switches shell history off or erases it" "history-variables"]]
            [])
        (is values None) []
        (in name (get rules "command-valued"))
        (lfor v values
              verdict (_judge-nested v pc rules nest name "command-valued-variables")
              verdict)
        (_code-loading name rules)
        [[ESCALATE f"sets {name}, which changes what programs run or where they load code and settings from" "code-loading-variables"]]
        True []))

(defn _code-loading [name rules]
  "True when the variable NAME is one of the code-loading names or globs of RULES."
  (or (in name (get rules "code-loading"))
      (any (gfor g (get rules "code-loading-globs") (fnmatch.fnmatchcase name g)))))

;; ** Across the command line

(setv FETCHERS #{"curl" "wget" "fetch" "aria2c" "axel" "http" "https" "xh" "xhs" "lwp-request"
                 "GET"}
      _fetch-outputs #{"-o" "--output" "-O" "--output-document"}
      _url-re (re.compile r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*(/[^?#]*)?"))

(defn _paths [word rec pc]
  (lfor [path maybe _] (_concrete word (get rec "cwd") pc) :if (not maybe) path))

(defn _downloaded [out pc rules]
  "The paths the downloaders of the analysis OUT write to."
  (setv found [])
  (for [rec (get out "commands")]
    (setv name (get rec "name")
          args (cut (get rec "argv") 1 None))
    (cond (in name FETCHERS)
          (do (for [[o v] (get (parse-options args (_spec rules name)) "opts")]
                (when (and v (in o _fetch-outputs))
                  (.extend found (_paths v rec pc))))
              (for [a args]
                (setv m (.fullmatch _url-re a))
                (when (and m (.group m 1) (posixpath.basename (.group m 1)))
                  (.extend found (_paths (posixpath.basename (.group m 1)) rec pc)))))
          (and (= name "tee") (& (or (get rec "piped") #{}) FETCHERS))
          (for [a args :if (not (.startswith a "-"))]
            (.extend found (_paths a rec pc)))))
  (for [r (get out "redirects")]
    (when (and (= (get r "kind") "write")
               (or (in (posixpath.basename (or (get r "program") "")) FETCHERS)
                   (& (or (get r "piped") #{}) FETCHERS)))
      (.extend found (_paths (get r "target") r pc))))
  found)

(setv _copy-writers #{"cp" "mv" "install" "ln" "tee" "dd"}
      MAKERS (| BUILD-TOOLS #{"git" "svn" "hg" "tar" "bsdtar" "unzip" "7z" "7za" "cpio" "ar"
                                       "rsync" "scp" "sftp" "patch" "gunzip" "gzip" "bunzip2" "bzip2"
                                       "xz" "unxz" "zstd" "unzstd"}))

(defn _written [out pc rules]
  "The paths the command line OUT writes: its redirections, and the files
   tee, cp, mv, install, ln and dd make."
  (setv found [])
  (for [r (get out "redirects")]
    (when (in (get r "kind") #("write" "both"))
      (.extend found (_paths (get r "target") r pc))))
  (for [rec (get out "commands")]
    (setv name (get rec "name"))
    (when (in name _copy-writers)
      (setv ops (get (parse-options (cut (get rec "argv") 1 None) (_spec rules name)) "operands"))
      (cond (= name "tee") (for [o ops] (.extend found (_paths o rec pc)))
            (= name "dd") (for [a (get rec "argv") :if (.startswith a "of=")]
                            (.extend found (_paths (cut a 3 None) rec pc)))
            ops (do (setv target (get ops -1))
                    (.extend found (_paths target rec pc))
                    (for [src (cut ops -1)]
                      (.extend found (_paths (posixpath.join target (posixpath.basename src)) rec pc)))))))
  found)

(defn _runs-written [runs written]
  "True when one of the paths RUNS is one of WRITTEN; a path find stands for
   (what matches below a folder, see FIND-MATCH) may be any file written there."
  (for [r runs]
    (when (in r written) (return True))
    (when (= (posixpath.basename r) FIND-MATCH)
      (setv folder (posixpath.dirname r))
      (when (any (gfor w written (path-inside w folder))) (return True))))
  False)

(defn _line-verdicts [out pc rules]
  (setv verdicts []
        commands (lfor c (get out "commands") :if (get c "name") c)
        downloads (when (& (sfor c commands (get c "name")) FETCHERS) (_downloaded out pc rules))
        written (when (> (len commands) 1) (set (_written out pc rules)))
        makers (lfor c commands :if (in (get c "name") MAKERS) (get c "name")))
  (for [rec commands]
    (setv run (when (or downloads written makers) (_run-path rec rules)))
    (when (and run downloads (& (set (_paths run rec pc)) (set downloads)))
      (.append verdicts [REJECT f"`{(get rec "text")}` — runs {run}, which this command line downloads" "floor-download-to-interpreter"]))
    (when (and run written (_runs-written (_paths run rec pc) written))
      (.append verdicts [ESCALATE f"`{(get rec "text")}` — runs {run}, which this same command line writes" "write-then-run"]))
    (when (and written (in (get rec "name") BUILD-TOOLS))
      (for [w written]
        (when (any (gfor b BUILD-FILES (fnmatch.fnmatchcase (posixpath.basename w) b)))
          (.append verdicts [ESCALATE f"`{(get rec "text")}` — {(get rec "name")} reads {(posixpath.basename w)}, which this same command line writes" "write-then-run"])
          (break))))
    (when (and run makers (not (in (get rec "name") MAKERS))
               (not (any (gfor p (_paths run rec pc) (os.path.exists (_realpath p pc))))))
      (.append verdicts [ESCALATE f"`{(get rec "text")}` — runs {run}, which is not there yet: {(get makers 0)} on this command line may make it" "make-then-run"])))
  (when (> (len (lfor c commands :if (not (get c "launcher")) c)) 1)
    (for [rec commands]
      (when (= (get rec "name") "ln")
        (setv parsed (parse-options (cut (get rec "argv") 1 None) (_spec rules "ln"))
              ops (get parsed "operands"))
        (when (and ops (_entry-holds ["-s" "--symbolic"] parsed))
          (setv target (get ops 0)
                link (if (>= (len ops) 2) (get ops -1) (posixpath.basename target)))
          (for [link-path (_paths link rec pc)
                target-path (if (_absolute target)
                                (_paths target rec pc)
                                (lfor t (_paths target rec pc)
                                      (_norm (posixpath.join (posixpath.dirname link-path) target))))]
            (when (not (get (_resolve target-path pc) 0))
              (.append verdicts [ESCALATE f"`{(get rec "text")}` — links {link} to {(_shown target-path)}, outside the workspace, and the same command line goes on" "link-outside"])
              (break)))))))
  (when (get out "env-reads")
    (.extend verdicts (_env-read-verdicts out)))
  (.extend verdicts (_resource-verdicts out commands pc rules _written))
  verdicts)

(defn command-writes [cmd ctx [rules None]]
  "The files the command line CMD writes as far as its words say (its
   redirections, and what tee, cp, mv, install, ln and dd make), resolved in
   the gate context CTX; [] when it cannot be read.
   (command-writes \"printf x > Makefile\" ctx) ⇒ [\"/ws/Makefile\"]"
  (setv rules (or rules RULES))
  (when (or (is rules None) (not (isinstance cmd str))) (return []))
  (try
    (setv pc (_places ctx rules))
    (lfor p (_written (analyse cmd) pc rules) (_realpath p pc))
    (except [Exception] [])))

;; ** Command lines a command runs

(defn _judge-nested [text pc rules nest what rule]
  "The verdicts of the command line TEXT that WHAT runs: only those that stop it."
  (+= (get pc "nested") 1)
  (when (or (>= nest MAX-NEST) (> (get pc "nested") MAX-JUDGED))
    (return [[REJECT f"{what}: command strings are nested too deep, or too many to judge" "floor-too-deep"]]))
  (when (or (in "\x00" text) (> (len text) MAX-BYTES))
    (return [[REJECT f"{what} runs a command line that cannot be judged" "floor-too-long"]]))
  (when (.search _private-use-re text)
    (return [[REJECT f"{what} runs a command line holding private-use Unicode characters (or what the line around it expands), which the shell parser is not given" "floor-private-use"]]))
  (setv [verdicts _] (_judge-out (analyse text) pc rules (+ nest 1))
        worst (_worst verdicts))
  (if worst
      [[(get worst 0) f"{what} runs {(get worst 1)}" (get worst 2)]]
      []))

;; ** The verdict

(defn _worst [verdicts]
  (setv worst None)
  (for [v verdicts]
    (when (and (> (get v 0) ALLOW) (or (is worst None) (> (get v 0) (get worst 0))))
      (setv worst v)))
  worst)

(defn _judge-out [out pc rules nest]
  "The verdicts of the analysis OUT, and the rule to name if all of them allow."
  (setv verdicts (list (get out "issues"))
        allowed None
        best #(-1 -1))
  (for [rec (get out "commands")]
    (setv [found name weight] (_judge-record rec pc rules nest)
          whole (or (get rec "text") (.join " " (get rec "argv"))))
    (setv text None)
    (for [[severity reason rule] found]
      (when (and reason (is text None))
        (setv text (_clip whole 60)))
      (.append verdicts [severity (when reason f"`{text}` — {reason}") rule]))
    (when (and name (> #(weight (len whole)) best))
      (setv allowed name
            best #(weight (len whole)))))
  (for [r (get out "redirects")]
    (for [[severity reason rule] (_redirect-verdicts r pc rules)]
      (.append verdicts [severity (when reason f"`{(get r "text")}` — {reason}") rule]))
    (when (and (in (get r "kind") #("write" "both")) (> #(1 (len (get r "text"))) best))
      (setv allowed "redirect-write"
            best #(1 (len (get r "text"))))))
  (for [a (get out "assigns")]
    (.extend verdicts (_assign-verdicts a pc rules nest)))
  (.extend verdicts (_line-verdicts out pc rules))
  #((_confine verdicts pc rules) allowed))

(setv _verdict-key ':verdict
      _reason-key ':reason
      _rule-key ':rule
      _confined-key ':confined
      _reject ':reject
      _escalate ':escalate
      _allow ':allow
      _sandbox-key ':sandbox
      _kind-key ':kind)

(defn _verdict [severity reason rule]
  (cond (= severity REJECT) [_verdict-key _reject _reason-key reason _rule-key rule]
        (= severity ESCALATE) [_verdict-key _escalate _reason-key reason _rule-key rule]
        (= severity CONFINE)
        [_verdict-key _allow _reason-key (+ "runs confined; without the sandbox it would be asked about: " reason)
         _rule-key rule _confined-key True]
        True [_verdict-key _allow _rule-key rule]))

;; * The two judgements

(setv CONFINED #{"unknown-program" "unmodelled-option" "unmodelled-subcommand" "interpreter-code"
                 "interpreter-module" "interpreter-inline" "script-unread" "write-then-run"
                 "make-then-run" "floor-pipe-to-interpreter" "floor-dynamic-code"
                 "floor-dynamic-program" "glob-program" "floor-computed-path" "floor-unknown-path"
                 "floor-kill-all" "link-outside" "arithmetic-code" "env-secret"
                 "code-loading-variables" "git-escalate-config" "agent-code" "build-outside"
                 "make-recipes" "sed-runs" "sed-script" "unbounded-write" "unbounded-processes"})

(defn sandbox-in-force [ctx]
  "True when the context CTX says shell actions run in the sandbox."
  (= (proto-get (or (proto-get ctx _sandbox-key) []) _kind-key) "bubblewrap"))

(defn _confine [verdicts pc rules]
  "VERDICTS with the escalations the sandbox makes harmless turned into confined
   runs, when it is in force."
  (if (get pc "confined")
      (lfor v verdicts
            (if (and (= (get v 0) ESCALATE)
                     (or (in (get v 2) CONFINED) (in (get v 2) (get rules "confined"))))
                [CONFINE (get v 1) (get v 2)]
                v))
      verdicts))

;; * The gate's entry point

(setv RULES None
      RULES-ERROR None)

(defn reload-rules [[path None] [known None]]
  "Load the rules file PATH (the built-in one by default) for judge-command.
   On error the previous rules stay and the ShellRulesError is raised."
  (global RULES RULES-ERROR)
  (setv RULES (load-rules path known)
        RULES-ERROR None)
  RULES)

(try (reload-rules)
     (except [e Exception]
       (setv RULES-ERROR f"{(. (type e) __name__)}: {e}")))

(defn judge-command [cmd ctx [rules None]]
  "The verdict of the shell-safety gate for the command line CMD in the gate
   context CTX: (:verdict :allow :rule R), or :reject / :escalate with :reason
   and :rule.
   (judge-command \"rm -rf /\" ctx) ⇒ (:verdict :reject :reason \"…\" :rule \"floor-delete\")"
  (setv rules (or rules RULES))
  (cond
    (is rules None)
    (_verdict REJECT f"the shell rules failed to load, so no command can be judged: {RULES-ERROR}" "rules-error")
    (not (isinstance cmd str))
    (_verdict REJECT "the command must be text" "floor-not-text")
    (in "\x00" cmd)
    (_verdict REJECT "the command contains a NUL byte; the shell would cut it there, so what runs is not what was judged" "floor-nul")
    (_private-use-re.search cmd)
    (_verdict REJECT "the command contains private-use Unicode characters, which the shell parser cannot be trusted with" "floor-private-use")
    (> (len (.encode cmd "utf-8" "surrogatepass")) MAX-BYTES)
    (_verdict REJECT f"the command is longer than {MAX-BYTES} bytes; write a script file and run that" "floor-too-long")
    (not (.strip cmd))
    (_verdict ALLOW None "empty")
    True
    (do (setv [verdicts allowed] (_judge-out (analyse cmd) (_places ctx rules) rules 0)
              worst (_worst verdicts))
        ;; A backslash before a newline joins two lines into one word for the
        ;; shell (r\<newline>m is rm) wherever it is not single-quoted; the
        ;; command is judged both ways and the more severe reading stands.
        (when (in "\\\n" cmd)
          (setv joined (_worst (get (_judge-out (analyse (.replace cmd "\\\n" ""))
                                                (_places ctx rules) rules 0)
                                    0)))
          (when (and joined (or (is worst None) (> (get joined 0) (get worst 0))))
            (setv worst joined)))
        (if worst
            (_verdict #* worst)
            (_verdict ALLOW None (or allowed "known-program"))))))
