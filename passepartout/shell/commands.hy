;; * Why

"A simple command can run more commands: a launcher (sudo, env,
xargs, …) runs its arguments, a shell runs its -c string or its input,
eval, trap and alias run a string, find runs what follows -exec.
This module records one simple command for the walk (shell/walk.hy) and
follows what its program does with the rest of it: the command it launches,
the command strings it runs, the folder it moves to, the variables it sets.
The functions that walk a command string are handed the walk function as
their first argument, so this module stays below the walk and never imports
it."

(import posixpath re shlex
        passepartout.shell.parse [HOME MARKERS MAX-BYTES MAX-COMMANDS MAX-NEST MAX-VARIANTS
                                  SPLIT UNKNOWN _cached-tree _private-use-re _text _union]
        passepartout.shell.state [ESCALATE REJECT _capped _copy _issue])

;; * Simple commands

;; ** Launchers

(setv _su {"value" ["-g" "--group" "-G" "--supp-group" "-s" "--shell" "-w"
                    "--whitelist-environment"]
           "strings" ["-c" "--command" "--session-command"] "skip" 1 "rest" False}
      _runuser {"value" ["-u" "--user" "-g" "--group" "-G" "--supp-group" "-s" "--shell" "-w"
                         "--whitelist-environment"]
                "strings" ["-c" "--command" "--session-command"]}
      _as-user {"skip" 1})

(setv LAUNCHERS
      {"sudo" {"value" ["-u" "--user" "-g" "--group" "-C" "--close-from" "-h"
                        "--host" "-p" "--prompt" "-r" "--role" "-t" "--type" "-T"
                        "--command-timeout" "-U" "--other-user"]
               "chdir" ["-D" "--chdir"]}
       "doas" {"value" ["-u" "-C"]}
       "pkexec" {"value" ["--user"]}
       "run0" {"value" ["-u" "--user" "-g" "--group" "--setenv" "--unit"
                        "--property" "--description" "--slice" "--nice"]
               "chdir" ["-D" "--chdir"]}
       "env" {"value" ["-u" "--unset" "-P"] "split" ["-S" "--split-string"]
              "chdir" ["-C" "--chdir"] "assignments" True}
       "command" {"lookup" ["-v" "-V"]}
       "builtin" {}
       "exec" {"value" ["-a"]}
       "nohup" {}
       "time" {"value" ["-f" "--format"] "writes" ["-o" "--output"]}
       "nice" {"value" ["-n" "--adjustment"]}
       "ionice" {"value" ["-c" "--class" "-n" "--classdata" "-p" "--pid" "-P" "--pgid" "-u" "--uid"]}
       "timeout" {"value" ["-s" "--signal" "-k" "--kill-after"] "skip" 1}
       "stdbuf" {"value" ["-i" "-o" "-e" "--input" "--output" "--error"]}
       "setsid" {}
       "unbuffer" {}
       "chrt" {"skip" 1}
       "taskset" {"skip" 1}
       "numactl" {}
       "chroot" {"value" ["--userspec" "--groups"] "skip" 1}
       "nsenter" {"value" ["-t" "--target" "-S" "--setuid" "-G" "--setgid" "-r" "--root"]
                  "chdir" ["-w" "--wd"]}
       "unshare" {"value" ["-S" "--setuid" "-G" "--setgid" "-R" "--root" "--propagation"
                           "--map-user" "--map-group" "--map-users" "--map-groups"
                           "--monotonic" "--boottime" "-l" "--load-interp"]
                  "chdir" ["-w" "--wd"]}
       "setpriv" {"value" ["--reuid" "--regid" "--ruid" "--euid" "--rgid" "--egid" "--groups"
                           "--inh-caps" "--ambient-caps" "--bounding-set" "--securebits"
                           "--pdeathsig" "--selinux-label" "--apparmor-profile"
                           "--landlock-access" "--landlock-rule" "--seccomp-filter"]}
       "runuser" _runuser
       "capsh" {"run" ["bash"]}
       "gosu" _as-user
       "su-exec" _as-user
       "setuidgid" _as-user
       "s6-setuidgid" _as-user
       "chpst" {"value" ["-u" "-U" "-b" "-e" "-/" "-n" "-l" "-L" "-m" "-d" "-o" "-p" "-f" "-c"
                         "-r" "-t"]}
       "firejail" {}
       "flatpak-spawn" {"value" ["--env" "--forward-fd" "--sandbox-expose" "--sandbox-expose-ro"
                                 "--sandbox-flag" "--directory"]}
       "systemd-run" {"value" ["-u" "--unit" "-p" "--property" "-E" "--setenv" "--description"
                               "--slice" "-M" "--machine" "--uid" "--gid" "--nice"]
                      "chdir" ["--working-directory"]}
       "strace" {"value" ["-e" "-p" "-s" "-u" "-E" "-P" "-a" "-b" "-I" "-O" "-S" "-X"]
                 "writes" ["-o"]}
       "ltrace" {"value" ["-e" "-p" "-s" "-u" "-n" "-a" "-l"] "writes" ["-o"]}
       "valgrind" {}
       "caffeinate" {"value" ["-w" "-t"]}
       "busybox" {}
       "toybox" {}
       "coproc" {}
       "eatmydata" {}
       "fakeroot" {}
       "catchsegv" {}
       "dbus-run-session" {}
       "xvfb-run" {"value" ["-n" "--server-num" "-s" "--server-args" "-f" "--auth-file" "-e"
                            "--error-file" "-p" "--xauth-protocol"]}
       "proxychains" {"value" ["-f"]}
       "proxychains4" {"value" ["-f"]}
       "torsocks" {}
       "tsocks" {}
       "faketime" {"skip" 1}
       "xargs" {"value" ["-d" "--delimiter" "-E" "--eof" "-L" "--max-lines"
                         "-n" "--max-args" "-P" "--max-procs" "-s" "--max-chars"
                         "--process-slot-var"]
                "reads" ["-a" "--arg-file"]
                "replace" ["-I" "--replace"] "extra" True}
       "flock" {"value" ["-w" "--timeout" "-E" "--conflict-exit-code"] "skip" 1
                "strings" ["-c" "--command"] "skip-writes" True}
       "su" _su
       "sg" {"strings" ["-c"] "skip" 1 "join" True}
       "script" {"value" ["-E" "--echo" "-m" "--logging-format" "-o" "--output-limit"]
                 "writes" ["-I" "--log-in" "-O" "--log-out" "-B" "--log-io" "-T" "--log-timing"]
                 "strings" ["-c" "--command"] "rest" False "rest-writes" True}
       "watch" {"value" ["-n" "--interval" "-d" "--differences" "-q" "--equexit"]
                "join" True "argv" ["-x" "--exec"]}
       "screen" {"value" ["-S" "-c" "-e" "-h" "-p" "-T" "-t" "-X" "-Logfile"]}})

(setv _env-run {"value" ["-n" "--name" "-p" "--prefix"] "chdir" ["--cwd"]}
      SUB-LAUNCHERS
      {"uv" [["run"] {"value" ["--with" "--python" "-p" "--package" "--project"
                               "--extra" "--group" "--index" "--from"]
                      "reads" ["--env-file"] "chdir" ["--directory"]}]
       "poetry" [["run"] {}]
       "pipenv" [["run"] {}]
       "pdm" [["run"] {}]
       "hatch" [["run"] {}]
       "rye" [["run"] {}]
       "pixi" [["run"] {}]
       "conda" [["run"] _env-run]
       "mamba" [["run"] _env-run]
       "micromamba" [["run"] _env-run]
       "bundle" [["exec"] {}]
       "rbenv" [["exec"] {}]
       "pyenv" [["exec"] {}]
       "asdf" [["exec"] {}]
       "mise" [["exec"] {}]
       "direnv" [["exec"] {"skip" 1}]
       "tmux" [["new" "new-session" "new-window" "neww" "split-window" "splitw"
                "respawn-pane" "respawnp" "respawn-window" "respawnw"]
               {"value" ["-s" "-n" "-t" "-x" "-y" "-F" "-e" "-f" "-l" "-p"] "chdir" ["-c"]
                "join" True}]})

(setv _name-value-re (re.compile r"[A-Za-z_][A-Za-z0-9_]*="))

(defn _split-string [text]
  (try (shlex.split text)
       (except [ValueError] [UNKNOWN])))

(defn _peel [args spec]
  (setv values (set (.get spec "value" []))
        strings (set (.get spec "strings" []))
        splits (set (.get spec "split" []))
        replaces (set (.get spec "replace" []))
        lookups (set (.get spec "lookup" []))
        argv-flags (set (.get spec "argv" []))
        files (| (set (.get spec "reads" [])) (set (.get spec "writes" [])) (set (.get spec "chdir" [])))
        found {"strings" [] "assignments" [] "prefix" [] "replace" None "lookup" False "argv" False
               "reads" [] "writes" [] "chdir" [] "skipped" []}
        i 0
        n (len args))
  (defn take [option value]
    (cond (in option strings) (.append (get found "strings") value)
          (in option splits) (.extend (get found "prefix") (_split-string value))
          (in option replaces) (setv (get found "replace") value))
    (for [key #("reads" "writes" "chdir")]
      (when (in option (.get spec key []))
        (.append (get found key) value))))
  (setv skip (.get spec "skip" 0))
  (while (< i n)
    (setv a (get args i))
    (cond
      (= a "--") (do (+= i 1) (break))
      (and (.get spec "assignments") (_name-value-re.match a))
      (.append (get found "assignments") a)
      (and (> skip 0) (or (= a "-") (not (.startswith a "-"))))
      (do (-= skip 1)
          (.append (get found "skipped") a))
      (.startswith a "--")
      (do (setv [option _ value] (.partition a "="))
          (when (in option lookups) (setv (get found "lookup") True))
          (when (in option argv-flags) (setv (get found "argv") True))
          (when (in option (| values strings splits replaces files))
            (when (not (in "=" a))
              (+= i 1)
              (setv value (if (< i n) (get args i) "")))
            (take option value)))
      (and (.startswith a "-") (> (len a) 1))
      (for [[j ch] (enumerate (cut a 1 None))]
        (setv option (+ "-" ch))
        (when (in option lookups) (setv (get found "lookup") True))
        (when (in option argv-flags) (setv (get found "argv") True))
        (when (in option (| values strings splits replaces files))
          (setv value (cut a (+ j 2) None))
          (when (not value)
            (+= i 1)
            (setv value (if (< i n) (get args i) "")))
          (take option value)
          (break)))
      True (break))
    (+= i 1))
  (.extend (get found "skipped") (cut args i (+ i skip)))
  (setv rest (cut args (+ i skip) None))
  (setv (get found "rest") (+ (get found "prefix") (.get spec "run" []) rest))
  found)

(defn _launch [walk name spec args st out depth info via record]
  (setv found (_peel args spec)
        via (+ via [name]))
  (for [s (get found "strings")]
    (_nested walk s st out depth f"{name} -c"))
  (when (get found "assignments")
    (for [a (get found "assignments")]
      (setv [k _ v] (.partition a "="))
      (.append (get out "assigns") {"name" k "values" [v] "scope" "command" "program" name})))
  ;; what the launcher itself reads and writes: its option values that name
  ;; files, the lock file flock creates, the log script writes
  (setv (get record "reads") (get found "reads")
        (get record "writes") (+ (get found "writes")
                                 (if (.get spec "skip-writes")
                                     (lfor f (get found "skipped") :if (not (.isdigit f)) f)
                                     [])
                                 (if (.get spec "rest-writes") (cut (get found "rest") 1) [])))
  (setv rest (get found "rest"))
  (when (or (get found "lookup") (not rest) (= (.get spec "rest" True) False))
    (return))
  (setv (get record "runs") True)
  ;; an option that changes the folder the command runs in (env -C, sudo -D,
  ;; uv run --directory) moves where its relative paths lead
  (when (get found "chdir")
    (setv st (_copy st))
    (setv (get st "cwd") (_capped (lfor c (get st "cwd") d (get found "chdir")
                                        (if (_absolute d) d (+ c "/" d)))
                                  out)))
  (cond (and (.get spec "join") (not (get found "argv")))
        (_nested walk (.join " " rest) st out depth name)
        (.get spec "extra")
        (_simple walk
                 (if (get found "replace")
                     (lfor a rest (.replace a (get found "replace") UNKNOWN))
                     (+ rest [UNKNOWN]))
                 st out depth info via)
        True (_simple walk rest st out depth info via)))

;; ** Shells and command strings

(setv SHELLS #{"sh" "bash" "dash" "zsh" "ksh" "mksh" "pdksh" "oksh" "yash" "ash" "fish"
               "csh" "tcsh" "rbash" "posh" "elvish" "xonsh" "nu"}
      _shell-valued #{"-o" "+o" "-O" "+O" "--rcfile" "--init-file" "-C" "--init-command"})

(defn _shell-args [args]
  "(:code S), (:script F) or (:stdin True) for the arguments ARGS of a shell."
  (setv i 0
        code False
        stdin False
        n (len args))
  (while (< i n)
    (setv a (get args i))
    (cond (= a "--") (do (+= i 1) (break))
          (= a "-") (do (setv stdin True) (+= i 1) (break))
          (in a _shell-valued) (+= i 2)
          (.startswith a "--command=") (return {"code" (cut a 10 None)})
          (= a "--command") (setv code True i (+ i 1))
          (.startswith a "--") (+= i 1)
          (and (> (len a) 1) (in (get a 0) "-+"))
          (do (when (and (= (get a 0) "-") (in "c" a)) (setv code True))
              (when (in "s" (cut a 1 None)) (setv stdin True))
              (+= i 1))
          True (break)))
  (setv rest (cut args i None))
  (cond code {"code" (if rest (get rest 0) None)}
        (and rest (not stdin)) {"script" (get rest 0)}
        True {"stdin" True}))

(defn _heredoc-tail [walk node st out depth]
  "Walk what follows a here-document's start on its line (=cat <<EOF | sh=),
   which tree-sitter-bash puts inside the redirection: a pipeline there is fed
   by the command the here-document belongs to."
  (if (= node.type "pipeline")
      (do (setv upstream #{(or (get st "outer") "?")}
                commands (get out "commands"))
          (for [stage (lfor c node.children :if (and c.is-named (!= c.type "comment")) c)]
            (setv sub (_copy st)
                  before (len commands))
            (setv (get sub "piped") (frozenset upstream))
            (walk stage sub out (+ depth 1))
            (.update upstream (gfor c (cut commands before None) (or (get c "name") "?")))))
      (walk node st out (+ depth 1))))

(setv _backquote-re (re.compile r"`((?:\\.|[^`\\])*)`"))

(defn _backquotes [walk body st out depth]
  "Walk the backquoted commands of an unquoted here-document's BODY, which the
   shell runs and tree-sitter-bash leaves as text."
  (setv start (. body prev-named-sibling))
  (when (and start (= start.type "heredoc_start")
             (not (any (gfor ch "'\"\\" (in ch (_text start))))))
    (for [m (.finditer _backquote-re (_text body))]
      (_nested walk (re.sub r"\\([`$\\])" r"\1" (.group m 1)) st out depth "a here-document's backquotes"))))

(defn _nested [walk text st out depth what [record None]]
  "Walk the command line TEXT that WHAT runs."
  ;; what the outer line expands is marked in the string (UNKNOWN, and in
  ;; private-use characters, which the parser is never given, the home and
  ;; temp folders and the workspace): an unknown part is a value only known
  ;; when it runs; a folder cannot be put back as text the inner shell would
  ;; read alike inside its own quotes, so that string is not judged but refused
  (setv text (.replace text SPLIT " "))
  (when (in UNKNOWN text)
    (when record (setv (get record "dynamic-code") True))
    (setv text (.replace text UNKNOWN "${__unknown__}")))
  (when (_private-use-re.search text)
    (_issue out REJECT f"the command string given to {what} holds the home folder, the temp folder or the workspace as the line around it expands them, which the gate does not follow into it" "floor-nested-expansion")
    (return))
  (when (>= (get st "nest") MAX-NEST)
    (_issue out REJECT f"command strings are nested more than {MAX-NEST} deep" "floor-too-deep")
    (return))
  (+= (get out "nested-bytes") (len text))
  (when (> (get out "nested-bytes") (* 2 MAX-BYTES))
    (_issue out REJECT f"the command strings given to {what} and its like add up to more than {(* 2 MAX-BYTES)} bytes, too much to judge" "floor-too-long")
    (setv (get out "stopped") True)
    (return))
  (setv tree (_cached-tree text)
        sub (_copy st))
  (+= (get sub "nest") 1)
  (when tree.root-node.has-error
    (_issue out ESCALATE f"the command string given to {what} cannot be parsed" "floor-unparsable"))
  (walk tree.root-node sub out (+ depth 1)))

(defn _shell [walk record args st out depth]
  (setv parsed (_shell-args args)
        name (get record "name"))
  (cond (in "code" parsed)
        (when (is-not (get parsed "code") None)
          (setv (get record "code") (get parsed "code"))
          (_nested walk (get parsed "code") st out depth f"{name} -c" record))
        (in "script" parsed) (setv (get record "script") (get parsed "script"))
        True
        (do (setv (get record "reads-stdin") True)
            (for [[kind text] (get record "stdin")]
              (when (in kind #("heredoc" "herestring"))
                (_nested walk text st out depth f"{name}'s input" record))))))

;; ** find

(setv FIND-MATCH "find-match"
      _find-tests #{"-name" "-iname" "-path" "-ipath" "-wholename" "-iwholename" "-regex"
                    "-iregex" "-type" "-xtype" "-size" "-mtime" "-atime" "-ctime" "-mmin"
                    "-amin" "-cmin" "-newer" "-anewer" "-cnewer" "-newermt" "-empty" "-perm"
                    "-user" "-group" "-links" "-inum" "-lname" "-ilname" "-samefile" "-uid"
                    "-gid" "-nouser" "-nogroup" "-used"}
      _find-runs #{"-exec" "-execdir" "-ok" "-okdir"}
      _find-stops #{"(" "!" "," ")"})

(defn _find [walk args st out depth info via]
  (setv i 0
        n (len args)
        starts [])
  (while (and (< i n) (or (in (get args i) #("-H" "-L" "-P"))
                          (.startswith (get args i) "-D") (.startswith (get args i) "-O")))
    (+= i (if (in (get args i) #("-D" "-O")) 2 1)))
  (while (and (< i n) (not (.startswith (get args i) "-")) (not (in (get args i) _find-stops)))
    (.append starts (get args i))
    (+= i 1))
  (setv starts (or starts ["."])
        tree-info (| info {"tree" True}))
  (while (< i n)
    (setv a (get args i))
    (cond (in a _find-runs)
          (do (setv j (+ i 1)
                    cmd [])
              (while (and (< j n) (not (in (get args j) #(";" "+"))))
                (.append cmd (get args j))
                (+= j 1))
              (setv tested (& (set (cut args i)) _find-tests))
              (for [s (cut starts MAX-VARIANTS)]
                (setv found (if tested (posixpath.join s FIND-MATCH) s))
                (_simple walk (lfor c cmd (.replace c "{}" found)) st out depth tree-info (+ via [f"find {a}"])))
              (setv i j))
          (= a "-delete")
          ;; With a test before it, -delete removes what matches below the start
          ;; points, not the start points themselves.
          (_simple walk
                   (+ ["rm" "-r" "--"]
                      (if (& (set (cut args i)) _find-tests)
                          (lfor s starts (posixpath.join s FIND-MATCH))
                          starts))
                   st out depth info (+ via ["find -delete"])))
    (+= i 1)))

;; ** The current folder

(defn _absolute [p]
  (and p (or (.startswith p "/") (in (get p 0) MARKERS))))

(defn _cd [args st out [prefix {}]]
  (setv ops (lfor a args :if (not (and (.startswith a "-") (!= a "-"))) a)
        target (if ops (get ops 0) HOME)
        new (if (= target "-")
                [UNKNOWN]
                (lfor c (get st "cwd") (if (_absolute target) target (+ c "/" target))))
        cdpath (+ (.get prefix "CDPATH" []) (.get (get st "env") "CDPATH" [])))
  (when (and cdpath (not (_absolute target)) (not (.startswith target ".")))
    (for [value cdpath
          folder (.split value ":")
          :if folder]
      (.append new (+ folder "/" target))))
  (setv (get st "cwd") (_capped (_union (get st "cwd") new) out)
        (get st "cd") new))

;; ** Recording a command

(defn _simple [walk argv st out depth info via]
  (when (or (not argv) (get out "stopped")) (return))
  (when (>= (len (get out "commands")) MAX-COMMANDS)
    (_issue out REJECT f"the command line holds more than {MAX-COMMANDS} commands, too many to judge" "floor-too-complex")
    (setv (get out "stopped") True)
    (return))
  (setv first (get argv 0)
        name (when (not (in UNKNOWN first))
               (or (posixpath.basename first) None))
        args (cut argv 1 None)
        record {"argv" argv "name" name "cwd" (tuple (get st "cwd")) "piped" (get st "piped")
                "inner" (get info "inner") "stdin" (get info "stdin") "tree" (get info "tree")
                "via" via "text" (get info "text") "launcher" False "code" None
                "script" None "reads-stdin" False "dynamic-code" False
                "data" (frozenset (get st "data")) "reads" [] "writes" [] "runs" False})
  (.append (get out "commands") record)
  (when (is name None) (return))
  (cond
    (in name LAUNCHERS)
    (do (setv (get record "launcher") True)
        (_launch walk name (get LAUNCHERS name) args st out depth info via record))
    (and (in name SUB-LAUNCHERS) args (in (get args 0) (get (get SUB-LAUNCHERS name) 0)))
    (do (setv (get record "launcher") True)
        (_launch walk f"{name} {(get args 0)}" (get (get SUB-LAUNCHERS name) 1)
                 (cut args 1 None) st out depth info via record))
    (in name SHELLS) (_shell walk record args st out depth)
    (in name #("source" "."))
    (setv (get record "script") (if args (get args 0) None))
    (= name "eval")
    (_nested walk (.join " " args) st out depth "eval" record)
    (= name "find") (_find walk args st out depth info via)
    (in name #("cd" "pushd")) (_cd args st out (.get info "prefix" {}))
    (= name "popd") (_cd ["-"] st out)
    (= name "trap")
    (do (setv rest (if (and args (= (get args 0) "--")) (cut args 1 None) args))
        (when (and (>= (len rest) 2) (not (in (get rest 0) #("-p" "-l" "-"))))
          (_nested walk (get rest 0) st out depth "trap" record)))
    (= name "alias")
    (for [a args]
      (when (in "=" a)
        (_nested walk (get (.partition a "=") 2) st out depth "alias" record)))
    (in name #("read" "mapfile" "readarray"))
    (_set-by-command (_read-names walk name args st out depth record) st True out)
    ;; printf -v NAME sets NAME to what it formats: data when any of it is
    (and (= name "printf") (>= (len args) 2) (= (get args 0) "-v"))
    (_set-by-command [(get (.partition (get args 1) "[") 0)] st
                     (any (gfor a (cut args 2 None) (in UNKNOWN a))) out)
    (and (= name "getopts") (>= (len args) 2))
    (_set-by-command ["OPTARG" (get args 1)] st True out)))

(defn _set-by-command [names st data out]
  "NAMES were set by a command (read, printf -v, getopts): from here on they are
   the line's own, not the environment's, and hold DATA when it says so; data
   given to a variable declared an integer is evaluated as arithmetic."
  (for [n names]
    (when (not (in n (get st "env")))
      (setv (get (get st "env") n) [UNKNOWN]))
    (when (and data (in n (get st "integer")))
      (_issue out ESCALATE f"bash evaluates what is read into {n}, declared an integer, as arithmetic: a subscript such as a[$(…)] in it runs a command" "arithmetic-code"))
    (when data (.add (get st "data") n))))

(setv _read-values {"read" #{"-d" "-i" "-n" "-N" "-p" "-t" "-u"}
                    "mapfile" #{"-d" "-n" "-O" "-s" "-u" "-C" "-c"}
                    "readarray" #{"-d" "-n" "-O" "-s" "-u" "-C" "-c"}})

(defn _read-names [walk name args st out depth record]
  "The variables read, mapfile and readarray set from their input, named by
   ARGS; a mapfile callback (-C) is a command line of its own."
  (setv names []
        values (get _read-values name)
        i 0)
  (while (< i (len args))
    (setv a (get args i)
          value (when (< (+ i 1) (len args)) (get args (+ i 1))))
    (cond (and (= a "-a") (= name "read")) (do (when value (.append names value)) (+= i 1))
          (in a values) (do (when (and (= a "-C") value)
                              (_nested walk value st out depth f"{name} -C" record))
                            (+= i 1))
          (.startswith a "-") None
          True (.append names a))
    (+= i 1))
  (setv names (lfor n names (get (.partition n "[") 0)))
  (or names [(if (= name "read") "REPLY" "MAPFILE")]))
