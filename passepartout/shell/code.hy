;; * Why

"A gate cannot judge arbitrary code, but it can know when a command runs code
it does not read: an interpreter's module or an option that loads code, the
recipes of a Makefile, the files a build or test tool runs where the agent
wrote, arithmetic that bash evaluates as code, and an environment variable
that makes a program load code. This module finds those ways, for the judge
(shell/judge.hy) to weigh; a command line such a way runs is judged by the
judge's own function, which it is given."

(import fnmatch functools posixpath re
        passepartout.workspace [path-inside]
        passepartout.secrets [ordinary-variable secret-variable]
        passepartout.shell.parse [MEMO-SIZE UNKNOWN]
        passepartout.shell.state [ESCALATE REJECT _clip]
        passepartout.shell.walk [CODE-RE data-name hidden-code]
        passepartout.shell.paths [_concrete _names-regex _realpath _shown])

;; * Code the agent wrote

;; ** Interpreters: modules and options that load code

(setv _inline-long #{"--eval" "--print" "--command" "--expr" "--execute" "--code"}
      _glued-value-letters "WXIMmr")

(defn _inline-code [argv]
  "True when the interpreter command ARGV is given its code on the command line
   (python -c, perl -e, node --eval, ruby -e …). In a bundle of short options a
   letter that takes a value glued to it (python -Werror, perl -MPOSIX) ends
   the options: what follows is its value."
  (for [a (cut argv 1 None)]
    (cond (= a "--") (return False)
          (not (.startswith a "-")) (return False)
          (in (get (.partition a "=") 0) _inline-long) (return True)
          (not (.startswith a "--"))
          (for [ch (cut a 1 None)]
            (cond (in ch "ceE") (return True)
                  (in ch _glued-value-letters) (break)))))
  False)

(setv INTERPRETERS ["python*" "pypy*" "perl" "perl5*" "ruby" "ruby[0-9]*" "irb" "jruby" "node"
                    "nodejs" "deno" "bun" "php" "php[0-9]*" "lua" "lua[0-9]*" "luajit" "tclsh*"
                    "wish*" "Rscript" "R" "julia" "osascript" "pwsh" "powershell*" "jshell"
                    "groovy" "scala" "elixir" "iex" "erl" "escript" "guile*" "racket" "sbcl"
                    "clisp" "ocaml" "swift" "expect" "hy" "bb"])

(setv _interpreter-regex (_names-regex INTERPRETERS))

(defn [(functools.lru-cache :maxsize MEMO-SIZE)] _interpreter [name]
  "True when NAME is an interpreter's (kept by name: it is asked of every command)."
  (is-not (.match _interpreter-regex name) None))

(setv SAFE-MODULES #{"json.tool" "venv" "site" "sysconfig" "platform" "calendar" "this" "uuid"
                     "base64" "mimetypes" "tokenize" "ast" "dis" "py_compile" "compileall"
                     "tabnanny" "pickletools" "quopri" "filecmp" "ensurepip"}
      TEST-MODULES #{"pytest" "unittest" "doctest" "nose" "nose2" "tox" "nox" "build" "pip"
                     "coverage" "mypy" "pylint" "flake8" "black" "ruff" "isort" "hatch"}
      CONTROL-MODULES #{"passepartout" "passepartout_repl" "passepartout_skills"}
      _code-options [["node*" #{"-r" "--require" "--import" "--loader" "--experimental-loader"}]
                     ["bun" #{"-r" "--preload"}]
                     ["deno" #{"--import-map" "--preload"}]
                     ["perl*" #{"-M" "-m"}]
                     ["ruby*" #{"-r" "--require"}]
                     ["php*" #{"-d" "-z"}]
                     ["lua*" #{"-l"}]])

(defn python-module [argv]
  "The module the Python command ARGV runs with -m, or None.
   (python-module [\"python3\" \"-Bm\" \"timeit\" \"x\"]) ⇒ \"timeit\""
  (setv args (cut argv 1 None)
        i 0)
  (while (< i (len args))
    (setv a (get args i))
    (cond (or (= a "--") (not (.startswith a "-")) (= a "-")) (return None)
          (.startswith a "--") None
          (in a #("-W" "-X" "-Q")) (+= i 1)
          True
          (for [[j ch] (enumerate (cut a 1 None))]
            (cond (= ch "c") (return None)
                  (in ch "WXQ") (break)
                  (= ch "m")
                  (return (or (cut a (+ j 2) None)
                              (when (< (+ i 1) (len args)) (get args (+ i 1))))))))
    (+= i 1))
  None)

(defn _code-option [name argv]
  "The first option of the interpreter command ARGV that loads code, or None."
  (setv options (next (gfor [g o] _code-options :if (fnmatch.fnmatchcase name g) o) None))
  (when (not options) (return None))
  (for [a (cut argv 1 None)]
    (when (or (= a "--") (not (.startswith a "-"))) (return None))
    (setv option (get (.partition a "=") 0))
    (when (or (in option options)
              (and (not (.startswith a "--")) (in (cut a 0 2) options)))
      (return option)))
  None)

(defn _shadowing-verdicts [rec pc module]
  "python -m MODULE, run by REC, imports first from the folder it runs in: a
   module or package the agent wrote there runs instead of the library's."
  (setv written (get pc "written"))
  (when (or (not written)
            (any (gfor a (cut (get rec "argv") 1 None)
                       (and (.startswith a "-") (not (.startswith a "--"))
                            (or (in "I" a) (in "P" a))
                            (not (in a #("-W" "-X")))))))
    (return []))
  (for [[path maybe _] (_concrete "." (get rec "cwd") pc)]
    (when maybe (continue))
    (setv real (_realpath path pc))
    (for [w written]
      (setv rel (posixpath.relpath (.rstrip w "/") real)
            parts (.split rel "/"))
      (when (or (and (.endswith w "/") (or (= w "/") (path-inside real (.rstrip w "/"))))
                (and (not (.startswith rel ".."))
                     (or (and (= (len parts) 1) (.endswith rel #(".py" ".pyc" ".so")))
                         (and (= (len parts) 2) (= (get parts 1) "__init__.py")))))
        (return [[ESCALATE f"python -m {module} imports from {(_shown real)} first, where the agent wrote {(_shown w)}" "agent-code"]]))))
  [])

(defn _interpreter-code-verdicts [rec pc]
  (setv name (get rec "name")
        argv (get rec "argv")
        out [])
  ;; every Python runs a module with -m: CPython, PyPy, and Hy over either
  (when (any (gfor g #("python*" "pypy*" "hy") (fnmatch.fnmatchcase name g)))
    (setv module (python-module argv))
    (when module
      (setv root (get (.split module ".") 0))
      (cond (in root CONTROL-MODULES)
            (.append out [REJECT f"runs the module {module}, the daemon's control plane, which answers people, not the agent's own commands" "control-plane"])
            (in module SAFE-MODULES) (.extend out (_shadowing-verdicts rec pc module))
            (in root TEST-MODULES) (.extend out (_agent-code-verdicts rec pc module))
            True
            (.append out [ESCALATE f"{name} -m {module} runs that module's code (and whatever it is given), which the gate does not read" "interpreter-module"]))))
  (setv option (_code-option name argv))
  (when option
    (.append out [ESCALATE f"{name} {option} loads code (a module, a file or inline text) the gate does not read" "interpreter-code"]))
  out)

;; ** make's recipes

(setv MAKES #{"make" "gmake" "bmake" "remake"}
      _make-shell-vars #{"SHELL" ".SHELLFLAGS" "MAKESHELL" "MAKEFLAGS" "MFLAGS" "GNUMAKEFLAGS"
                         "MAKEFILES" "MAKEFILE_LIST" ".RECIPEPREFIX"}
      _make-files #{"-f" "--file" "--makefile"}
      ;; variables whose value make's built-in rules and most makefiles run as a program
      _make-program-vars #{"CC" "CXX" "CPP" "FC" "LD" "AR" "AS" "RANLIB" "STRIP" "OBJCOPY" "NM"
                           "MAKE" "INSTALL" "RM" "CP" "MV" "LN" "MKDIR" "PYTHON" "PERL" "YACC"
                           "LEX" "M4" "PKG_CONFIG" "CCLD" "CXXLD" "LINK" "GO" "CARGO" "NPM" "NODE"}
      _shell-meta-re (re.compile r"[;|&`$<>()\n]")
      _make-assignment-re (re.compile r"([A-Za-z_.][A-Za-z0-9_.]*)\s*(?:[:+?!]|::)?="))

(defn _make-verdicts [rec parsed pc rules nest judge-nested]
  (setv out [])
  (for [a (get parsed "operands")]
    (setv m (.match _make-assignment-re a))
    (when m
      (setv var (.group m 1)
            value (cut a (.end m) None))
      (cond (in var _make-shell-vars)
            (.append out [ESCALATE f"sets {var}, which changes how make runs every recipe, unseen" "make-recipes"])
            (.search _shell-meta-re value)
            (do (.append out [ESCALATE f"sets {var} to a command line a recipe may run" "make-recipes"])
                (.extend out (judge-nested value pc rules nest f"make's {var}" "make-recipes")))
            (in var _make-program-vars)
            (.extend out (judge-nested value pc rules nest f"make's {var}" "make-recipes")))))
  (for [[o v] (get parsed "opts")]
    (cond (or (= o "--eval") (.startswith o "--eval="))
          (.append out [ESCALATE "make --eval adds rules given inline" "make-recipes"])
          (and (in o _make-files) v
               (or (in v #("-" "/dev/stdin")) (.startswith v #("/dev/fd/" "/proc/self/fd/"))))
          (.append out [ESCALATE f"make reads its makefile from {v}, which the gate cannot see" "make-recipes"])))
  out)

;; ** Builds and tests on files the agent wrote

(setv BUILD-TOOLS #{"make" "gmake" "cmake" "ninja" "meson" "npm" "npx" "yarn" "pnpm" "bun" "cargo"
                    "go" "pytest" "tox" "nox" "rake" "bundle" "gradle" "gradlew" "mvn" "ant"
                    "just" "task" "pip" "pip3" "uv" "poetry" "pipenv" "hatch" "pdm" "deno"
                    "docker" "docker-compose" "podman" "bazel" "scons" "composer" "mix" "sbt"})

(setv TEST-TOOLS #{"pytest" "py.test" "tox" "nox" "jest" "vitest" "mocha" "rspec" "phpunit"
                   "ctest" "pre-commit" "behave" "cucumber" "karma" "ava" "tap" "dotnet"
                   "swift" "zig" "dune" "stack" "cabal" "lein" "invoke" "inv" "fab" "doit"
                   "snakemake" "nx" "turbo" "lerna" "bmake" "remake" "bazelisk" "buck" "buck2"
                   "pants" "waf" "xmake" "premake5" "autoreconf" "qmake"})

(defn _agent-code-verdicts [rec pc tool]
  "TOOL, run by REC, reads and runs the files of the folders REC runs in."
  (setv written (get pc "written")
        out [])
  (for [[path maybe _] (_concrete "." (or (.get rec "work") (get rec "cwd")) pc)]
    (when maybe (continue))
    (setv real (_realpath path pc))
    (setv found (_written-below written real))
    (cond found
          (return [[ESCALATE f"{tool} runs what {(_shown real)} holds, and the agent wrote {(_shown found)} there" "agent-code"]])
          (path-inside real (get pc "ws-real")) None
          (any (gfor t (get pc "temps-real") (path-inside real t)))
          (return [[ESCALATE f"{tool} runs what the temp folder {(_shown real)} holds, where earlier actions may have written" "agent-code"]])
          True
          (return [[ESCALATE f"{tool} runs the build or tests of {(_shown real)}, outside the workspace, and writes there" "build-outside"]])))
  (when written
    (for [a (cut (get rec "argv") 1 None)
          [path maybe _] (_concrete a (get rec "cwd") pc)
          :if (not maybe)]
      (when (_written-below written (_realpath path pc) True)
        (return [[ESCALATE f"{tool} runs {a}, which the agent wrote" "agent-code"]]))))
  out)

(defn _written-below [written real [exact False]]
  "An entry of WRITTEN (the context's files the agent wrote) that lies in the
   folder REAL (that is REAL, when EXACT), or a folder entry (ending in /: the
   agent wrote something below it) that holds REAL; else None."
  (for [w written]
    (when (if (.endswith w "/")
              (or (path-inside real (.rstrip w "/")) (= w "/")
                  (and (not exact) (path-inside (.rstrip w "/") real)))
              (if exact (= w real) (path-inside w real)))
      (return w)))
  None)

;; ** Arithmetic commands

(setv _identifier-re (re.compile r"[A-Za-z_][A-Za-z0-9_]*"))

(defn _arithmetic-verdicts [rec pc rules nest judge-nested]
  (setv name (get rec "name")
        args (cut (get rec "argv") 1 None)
        exprs (cond (= name "let") (lfor a args :if (not (.startswith a "-")) a)
                    (in name #("test" "[" "printf"))
                    (lfor [a b] (zip args (cut args 1 None)) :if (and (= a "-v") (in "[" b))
                          (cut b (.index b "[") None))
                    (in name #("read" "mapfile" "readarray"))
                    (lfor a args :if (and (in "[" a) (not (.startswith a "-"))) (cut a (.index a "[") None))
                    True [])
        out [])
  (for [e exprs]
    (cond (.search CODE-RE e)
          (do (.append out [ESCALATE f"{name} evaluates {(_clip e 40)} as arithmetic, which runs the command written in it" "arithmetic-code"])
              (for [code (hidden-code e)]
                (.extend out (judge-nested code pc rules nest f"{name}'s arithmetic" "arithmetic-code"))))
          (in UNKNOWN e)
          (.append out [ESCALATE f"{name} evaluates as arithmetic a value only known when it runs, where a subscript such as a[$(…)] runs a command" "arithmetic-code"])
          (any (gfor i (.findall _identifier-re e) (data-name i (get rec "data"))))
          (.append out [ESCALATE f"{name} evaluates {(_clip e 40)} as arithmetic, and it names a variable holding data read when the command runs" "arithmetic-code"])))
  out)

;; ** The environment

(defn _environment-verdicts [rec parsed]
  (setv name (get rec "name")
        ops (get parsed "operands"))
  (cond (and (= name "env") (not (get rec "runs")))
        [[ESCALATE "prints the environment, where keys are kept" "env-secret"]]
        (and (= name "printenv") (not ops))
        [[ESCALATE "prints the environment, where keys are kept" "env-secret"]]
        (= name "printenv")
        (lfor o ops :if (or (secret-variable o) (not (ordinary-variable o)))
              [ESCALATE (if (secret-variable o)
                            f"prints {o}, a variable that holds a secret"
                            f"prints {o}, from the environment, where keys are kept under names a person chose")
               "env-secret"])
        (and (= name "set") (not (cut (get rec "argv") 1 None)))
        [[ESCALATE "prints every variable, the environment's keys among them" "env-secret"]]
        True []))

(defn _env-read-verdicts [out]
  (lfor n (sorted (get out "env-reads"))
        :if (or (.startswith n "!") (secret-variable n) (not (ordinary-variable n)))
        (cond (.startswith n "!")
              [ESCALATE f"reads the variable ${{{n}}} names, only known when it runs" "env-secret"]
              (secret-variable n)
              [ESCALATE f"reads ${n} from the environment, a variable that holds a secret" "env-secret"]
              True
              [ESCALATE f"reads ${n} from the environment, where keys are kept under names a person chose" "env-secret"])))

;; ** All of it

(defn _code-verdicts [rec parsed pc rules nest judge-nested]
  "What the command REC runs that the gate does not read."
  (setv name (get rec "name")
        out (_arithmetic-verdicts rec pc rules nest judge-nested))
  (when (_interpreter name)
    (.extend out (_interpreter-code-verdicts rec pc)))
  (when (in name MAKES)
    (.extend out (_make-verdicts rec parsed pc rules nest judge-nested)))
  (when (or (in name BUILD-TOOLS) (in name TEST-TOOLS))
    (.extend out (_agent-code-verdicts rec pc name)))
  out)
