;; * Why

"The part of the shell policy that can change without the code is data, in two
files: the rules, skills/shell_rules.toml, and the known programs,
skills/shell_programs.toml. This module reads and checks both and answers
what the shell gate's judge asks of them, so that the policy changes by an
edit to a file, and a file with an unknown key or a rule that fails its own
examples is refused with a message saying which, rather than half obeyed."

(import fnmatch importlib.util re tomllib
        pathlib [Path]
        passepartout.shell.parse [_kept]
        passepartout.shell.state [ALLOW ESCALATE REJECT]
        passepartout.shell.walk [analyse])

;; * Compiling a rule

(defclass ShellRulesError [ValueError]
  "A rules file that cannot be used.")

(setv _match-keys #{"program" "subcommand" "flags" "not-flags" "operands" "arg-regex"
                    "option-value" "min-operands"}
      _effect-keys #{"deletes" "writes" "write-options" "write-prefixes" "writes-dir"
                     "recursive-flags" "recursive" "reads-tree" "command-options" "script"}
      _rule-keys (| _match-keys _effect-keys #{"name" "verdict" "reason" "examples"
                                                "counterexamples" "confined"})
      _severity {"allow" ALLOW "escalate" ESCALATE "reject" REJECT}
      _positions #{"operands" "all-but-last" "last" "first" "second"})

(defn _strings [rule key [value None]]
  (setv value (if (is value None) (.get rule key []) value))
  (when (isinstance value str) (setv value [value]))
  (when (not (and (isinstance value list) (all (gfor v value (isinstance v str)))))
    (raise (ShellRulesError f"rule {(.get rule "name")}: {key} must be a string or a list of strings")))
  value)

(defn _regex [rule key text]
  (try (re.compile text)
       (except [e re.error]
         (raise (ShellRulesError f"rule {(.get rule "name")}: {key} is not a regular expression: {e}")))))

(defn _compile-rule [raw index]
  (setv name (.get raw "name"))
  (when (not (and (isinstance name str) (re.fullmatch r"[a-z0-9][a-z0-9-]*" name)))
    (raise (ShellRulesError f"rule #{(+ index 1)}: name {name !r} must be lower-case kebab")))
  (setv unknown (- (set raw) _rule-keys))
  (when unknown
    (raise (ShellRulesError f"rule {name}: unknown key(s) {(sorted unknown)}")))
  (when (not (.get raw "program"))
    (raise (ShellRulesError f"rule {name}: program is required")))
  (setv verdict (.get raw "verdict")
        effects (& (set raw) _effect-keys))
  (when (and verdict (not (in verdict _severity)))
    (raise (ShellRulesError f"rule {name}: verdict must be allow, escalate or reject")))
  (when (and verdict (not (isinstance (.get raw "reason") str)))
    (raise (ShellRulesError f"rule {name}: a verdict needs a reason")))
  (when (and verdict effects)
    (raise (ShellRulesError f"rule {name}: a rule gives a verdict or declares effects, not both")))
  (when (and (.get raw "confined") (!= verdict "escalate"))
    (raise (ShellRulesError f"rule {name}: only an escalating rule can run confined")))
  (when (not (or verdict effects))
    (raise (ShellRulesError f"rule {name}: give a verdict or declare effects")))
  (for [key #("deletes" "writes")]
    (when (and (in key raw) (not (in (get raw key) _positions)))
      (raise (ShellRulesError f"rule {name}: {key} must be one of {(sorted _positions)}"))))
  (when (and (in "script" raw) (!= (get raw "script") "sed"))
    (raise (ShellRulesError f"rule {name}: the only script kind is \"sed\"")))
  (when (not (.get raw "examples"))
    (raise (ShellRulesError f"rule {name}: at least one example is required")))
  (setv option-value (.get raw "option-value")
        command-options [])
  (when (and option-value (not (and (isinstance option-value dict)
                                    (isinstance (.get option-value "options") str)
                                    (isinstance (.get option-value "regex") str))))
    (raise (ShellRulesError f"rule {name}: option-value needs options and regex strings")))
  (for [entry (_strings raw "command-options")]
    (setv [option _ prefix] (.partition entry " "))
    (.append command-options #(option prefix)))
  (setv programs (_strings raw "program")
        subcommands (lfor s (_strings raw "subcommand") (.split s)))
  {"name" name
   "index" index
   "programs" programs
   "subcommands" subcommands
   "first-words" (if (or (not subcommands) (in [] subcommands))
                     None
                     (frozenset (gfor sub subcommands (get sub 0))))
   "flags" (lfor f (_strings raw "flags") (.split f "|"))
   "not-flags" (lfor f (_strings raw "not-flags") (.split f "|"))
   "operands" (_strings raw "operands")
   "arg-regex" (when (in "arg-regex" raw) (_regex raw "arg-regex" (get raw "arg-regex")))
   "option-value" (when option-value
                    #((set (.split (get option-value "options") "|"))
                      (_regex raw "option-value" (get option-value "regex"))))
   "min-operands" (.get raw "min-operands" 0)
   "severity" (when verdict (get _severity verdict))
   "reason" (.get raw "reason")
   "confined" (bool (.get raw "confined" False))
   "deletes" (.get raw "deletes")
   "writes" (.get raw "writes")
   "write-options" (set (_strings raw "write-options"))
   "option-names" (| (set (_strings raw "write-options")) (sfor [c _] command-options c))
   "write-prefixes" (_strings raw "write-prefixes")
   "writes-dir" (when (in "writes-dir" raw) (set (_strings raw "writes-dir")))
   "recursive-flags" (lfor f (_strings raw "recursive-flags") [f])
   "recursive" (bool (.get raw "recursive" False))
   "reads-tree" (bool (.get raw "reads-tree" False))
   "command-options" command-options
   "script" (.get raw "script")
   "optional" (and (not verdict)
                   (<= effects #{"write-options" "write-prefixes" "command-options"}))
   "examples" (_strings raw "examples")
   "counterexamples" (_strings raw "counterexamples")})

;; * Options and operands

(setv _no-spec {"value" #{} "old-style" False}
      _none (frozenset))

(defn parse-options [args [spec None]]
  "ARGS split by SPEC: {\"names\" set \"opts\" [(name value)] \"operands\" [...]
   \"args\" ARGS \"patterns\" {indices of args that are pattern values}}.
   (parse-options [\"-rf\" \"x\"]) ⇒ names {-r -f}, operands [x]"
  (setv spec (or spec _no-spec)
        values (get spec "value")
        pairs (.get spec "pairs" _none)
        pattern-options (.get spec "patterns" _none)
        patterns (set)
        names (set)
        opts []
        operands []
        first-operand None
        i 0
        n (len args)
        ended False)
  (when (and (get spec "old-style") args (re.fullmatch r"[A-Za-z]+" (get args 0)))
    (setv pending [])
    (for [ch (get args 0)]
      (setv option (+ "-" ch))
      (.add names option)
      (if (in option values) (.append pending option) (.append opts #(option None))))
    (setv i 1)
    (for [option pending]
      (.append opts #(option (if (< i n) (get args i) None)))
      (+= i 1)))
  (while (< i n)
    (setv a (get args i))
    (cond
      (or ended (= a "-") (not (.startswith a "-")))
      (do (when (is first-operand None) (setv first-operand i))
          (.append operands a))
      (= a "--") (do (setv ended True) (.add names "--"))
      (in a values)
      (do (.add names a)
          (+= i 1)
          (when (in a pattern-options) (.add patterns i))
          (.append opts #(a (if (< i n) (get args i) None)))
          ;; jq --rawfile NAME FILE: a second value, the file
          (when (in a pairs)
            (+= i 1)
            (.append opts #(a (if (< i n) (get args i) None)))))
      (.startswith a "--")
      (do (setv [option eq value] (.partition a "="))
          (.add names option)
          (when (in option pattern-options) (.add patterns (if eq i (+ i 1))))
          (cond eq (.append opts #(option value))
                (in option values) (do (+= i 1)
                                       (.append opts #(option (if (< i n) (get args i) None))))
                True (.append opts #(option None))))
      True
      (for [[j ch] (enumerate (cut a 1 None))]
        (setv option (+ "-" ch))
        (.add names option)
        (if (in option values)
            (do (setv value (cut a (+ j 2) None))
                (when (not value)
                  (+= i 1)
                  (setv value (if (< i n) (get args i) None)))
                (when (in option pattern-options) (.add patterns i))
                (.append opts #(option value))
                (break))
            (.append opts #(option None)))))
    (+= i 1))
  (when (and (.get spec "pattern-first") (is-not first-operand None)
             (not (& names (| pattern-options (.get spec "pattern-files" _none)))))
    (.add patterns first-operand))
  {"names" names "opts" opts "operands" operands "args" args "patterns" patterns})

;; * Matching

(defn _abbreviates [given flag]
  (and (.startswith given "--") (>= (len given) 4) (< (len given) (len flag))
       (.startswith flag given) (!= (get flag (len given)) "-")))

(defn _present [flag parsed]
  (setv names (get parsed "names"))
  (or (in flag names)
      (in flag (get parsed "args"))
      (and (.startswith flag "--")
           (any (gfor n names (_abbreviates n flag))))))

(defn _entry-holds [entry parsed]
  (any (gfor f entry (_present f parsed))))

(defn rule-operands [rule parsed]
  "The operands after RULE's subcommand, or None when the subcommand is absent."
  (setv ops (get parsed "operands"))
  (when (not (get rule "subcommands"))
    (return ops))
  (for [sub (get rule "subcommands")]
    (when (= (cut ops (len sub)) sub)
      (return (cut ops (len sub) None))))
  None)

(defn rule-matches [rule parsed]
  "True when RULE's conditions hold for the PARSED arguments."
  (setv rest (rule-operands rule parsed))
  (and (is-not rest None)
       (>= (len rest) (get rule "min-operands"))
       (or (not (get rule "flags"))
           (all (gfor e (get rule "flags") (_entry-holds e parsed))))
       (or (not (get rule "not-flags"))
           (not (any (gfor e (get rule "not-flags") (_entry-holds e parsed)))))
       (or (not (get rule "operands"))
           (any (gfor o rest g (get rule "operands") (fnmatch.fnmatchcase o g))))
       (or (is (get rule "arg-regex") None)
           (any (gfor a (get parsed "args") (.search (get rule "arg-regex") a))))
       (or (is (get rule "option-value") None)
           (do (setv [options regex] (get rule "option-value"))
               (any (gfor [o v] (get parsed "opts")
                          (and (in o options) (is-not v None) (.search regex v))))))
       (or (not (get rule "optional"))
           (any (gfor [o _] (get parsed "opts") (in o (get rule "option-names"))))
           (any (gfor a (get parsed "args") p (get rule "write-prefixes") (.startswith a p))))))

;; * Loading

(defn rules-path []
  "The built-in rules file: shell_rules.toml beside the built-in skills."
  (setv spec (importlib.util.find-spec "passepartout_skills"))
  (/ (Path (get (list spec.submodule-search-locations) 0)) "shell_rules.toml"))

(defn _lower-list [section key]
  (lfor v (.get section key []) (.lower v)))

(setv _sections {"version" None
                 "rule" None
                 "programs" None
                 "paths" #{"secret-dirs" "secret-files" "secret-anchored" "guarded-writes"}
                 "env" #{"command-valued" "code-loading" "history"}
                 "git" #{"command-config" "escalate-config"}
                 "defaults" #{"output-options"}}
      _program-keys #{"value-options" "pattern-options" "pattern-first" "pattern-files"
                      "old-style" "also" "chdir-options" "pair-options"})

(defn _check-sections [data]
  (when (!= (.get data "version" 1) 1)
    (raise (ShellRulesError f"version {(get data "version")} is not one this gate reads (1)")))
  (for [[key value] (.items data)]
    (when (not (in key _sections))
      (raise (ShellRulesError f"unknown section [{key}]")))
    (setv known (get _sections key))
    (when known
      (for [k value]
        (when (not (in k known))
          (raise (ShellRulesError f"[{key}]: unknown key {k}")))
        (setv (get value k) (_strings {"name" f"[{key}]"} k (get value k))))))
  (for [[name spec] (.items (.get data "programs" {}))]
    (setv unknown (- (set spec) _program-keys))
    (when unknown
      (raise (ShellRulesError f"[programs.{name}]: unknown key(s) {(sorted unknown)}")))))

(defn _compile [data]
  (_check-sections data)
  (setv rules (lfor [i raw] (enumerate (.get data "rule" [])) (_compile-rule raw i))
        seen (set))
  (for [r rules]
    (when (in (get r "name") seen)
      (raise (ShellRulesError f"rule {(get r "name")} is defined twice")))
    (.add seen (get r "name")))
  (setv exact {}
        globs [])
  (for [r rules
        p (get r "programs")]
    (if (any (gfor c "*?[" (in c p)))
        (.append globs #((re.compile (fnmatch.translate p)) r))
        (.append (.setdefault exact p []) r)))
  (setv paths (.get data "paths" {})
        env (.get data "env" {})
        git (.get data "git" {})
        programs {})
  (for [[name spec] (.items (.get data "programs" {}))]
    (setv compiled {"value" (set (+ (.get spec "value-options" [])
                                    (.get spec "pattern-options" [])
                                    (.get spec "chdir-options" [])))
                    "pairs" (set (.get spec "pair-options" []))
                    "patterns" (set (.get spec "pattern-options" []))
                    "pattern-first" (bool (.get spec "pattern-first" False))
                    "pattern-files" (set (.get spec "pattern-files" []))
                    "old-style" (bool (.get spec "old-style" False))})
    (for [n (+ [name] (.get spec "also" []))]
      (setv (get programs n) compiled)))
  {"rules" rules
   "exact" exact
   "globs" globs
   "programs" programs
   "program-globs" (lfor [k v] (.items programs) :if (any (gfor c "*?[" (in c k))) #(k v))
   "secret-dirs" (.get paths "secret-dirs" [])
   "secret-files" (.get paths "secret-files" [])
   "secret-anchored" (.get paths "secret-anchored" [])
   "guarded-writes" (.get paths "guarded-writes" [])
   "command-valued" (set (.get env "command-valued" []))
   "code-loading" (sfor v (.get env "code-loading" []) :if (not (any (gfor c "*?[" (in c v)))) v)
   "code-loading-globs" (lfor v (.get env "code-loading" []) :if (any (gfor c "*?[" (in c v))) v)
   "history" (set (.get env "history" []))
   "git-command" (_lower-list git "command-config")
   "git-escalate" (_lower-list git "escalate-config")
   "output-options" (set (.get (.get data "defaults" {}) "output-options" []))
   "confined" (sfor r rules :if (get r "confined") (get r "name"))
   "chdir" (dfor [name spec] (.items (.get data "programs" {}))
                 n (+ [name] (.get spec "also" []))
                 :if (.get spec "chdir-options")
                 n (frozenset (get spec "chdir-options")))
   "rules-for" {}
   "rules-about" {}
   "unmodelled" {}
   "specs" {}})

(defn rules-for [rules name]
  "The rules of RULES about the program NAME, in file order."
  (_kept (get rules "rules-for") name _rules-for rules name))

(defn _rules-for [rules name]
  (setv found (list (.get (get rules "exact") name [])))
  (for [[pattern r] (get rules "globs")]
    (when (and (.match pattern name) (not (in r found)))
      (.append found r)))
  (tuple (if (get rules "globs") (sorted found :key (fn [r] (get r "index"))) found)))

(defn _spec [rules name]
  (_kept (get rules "specs") name _find-spec rules name))

(defn _find-spec [rules name]
  (setv programs (get rules "programs"))
  (when (in name programs)
    (return (get programs name)))
  (for [[pattern spec] (get rules "program-globs")]
    (when (fnmatch.fnmatchcase name pattern)
      (return spec)))
  _no-spec)

(defn _rules-about [rules name parsed]
  "The rules about the program NAME that may match PARSED: those whose
   subcommand starts with its first operand, and those that name none."
  (setv ops (get parsed "operands")
        first (if ops (get ops 0) None))
  (_kept (get rules "rules-about") #(name first) _find-rules-about rules name first))

(defn _find-rules-about [rules name first]
  (tuple (gfor r (rules-for rules name)
               :if (or (is (get r "first-words") None) (in first (get r "first-words")))
               r)))

(defn _rule-applies [rule record rules]
  (setv name (get record "name"))
  (and name
       (any (gfor p (get rule "programs") (fnmatch.fnmatchcase name p)))
       (rule-matches rule (parse-options (cut (get record "argv") 1 None) (_spec rules name)))))

(defn _check-examples [rules]
  (setv problems [])
  (for [rule (get rules "rules")]
    (for [[expected texts] [[True (get rule "examples")] [False (get rule "counterexamples")]]
          text texts]
      (setv hit (any (gfor c (get (analyse text) "commands") (_rule-applies rule c rules))))
      (when (!= hit expected)
        (.append problems
                 (if expected
                     f"rule {(get rule "name")}: its example {text !r} does not match it"
                     f"rule {(get rule "name")}: its counterexample {text !r} matches it")))))
  (when problems
    (raise (ShellRulesError (.join "\n" problems)))))

(defn load-rules [[path None] [known None]]
  "The compiled rules of the TOML file PATH (the built-in file by default),
   with the known-program table KNOWN (the built-in one by default), checked
   against their own examples; a ShellRulesError says what is wrong."
  (setv path (Path (or path (rules-path))))
  (try (setv data (tomllib.loads (.read-text path :encoding "utf-8")))
       (except [e tomllib.TOMLDecodeError]
         (raise (ShellRulesError f"{path}: {e}"))))
  (setv rules (_compile data)
        table (load-known known)
        (get rules "known") table)
  ;; The options a known program takes a value with tell its operands apart.
  (for [[name entry] (.items table)]
    (setv spec (.get (get rules "programs") name _no-spec))
    (when (not (<= (get entry "values") (get spec "value")))
      (setv (get (get rules "programs") name)
            (| spec {"value" (| (get spec "value") (get entry "values"))
                     "patterns" (.get spec "patterns" _none)}))))
  (_check-examples rules)
  rules)

;; * Known programs

(setv _known-keys #{"flags" "values" "optional" "numeric" "sub" "also" "old-style" "note"}
      SKIPS-COMMAND #{"-exec" "-execdir" "-ok" "-okdir"}
      CODE-MODELLED {"find" (| SKIPS-COMMAND #{"-delete"})})

(defn known-path []
  "The built-in table of known programs, beside the rules file."
  (/ (. (rules-path) parent) "shell_programs.toml"))

(defn _option-words [where key value]
  (when (not (isinstance value str))
    (raise (ShellRulesError f"{where}: {key} must be a string of options separated by spaces")))
  (setv words (.split value))
  (for [w words]
    (when (not (.startswith w "-"))
      (raise (ShellRulesError f"{where}: {key}: {w !r} is not an option"))))
  (frozenset words))

(defn _known-entry [where raw [top True]]
  (when (not (isinstance raw dict))
    (raise (ShellRulesError f"{where} must be a table")))
  (setv unknown (- (set raw) _known-keys))
  (when unknown
    (raise (ShellRulesError f"{where}: unknown key(s) {(sorted unknown)}")))
  (when (and (not top) (& (set raw) #{"sub" "also"}))
    (raise (ShellRulesError f"{where}: a subcommand has no sub or also")))
  (setv sub None)
  (when (in "sub" raw)
    (setv sub (dfor [k v] (.items (get raw "sub"))
                    k (_known-entry f"{where}.sub.{k}" v False))))
  {"flags" (_option-words where "flags" (.get raw "flags" ""))
   "values" (_option-words where "values" (.get raw "values" ""))
   "optional" (_option-words where "optional" (.get raw "optional" ""))
   "numeric" (bool (.get raw "numeric" False))
   "old-style" (bool (.get raw "old-style" False))
   "sub" sub})

(defn load-known [[path None]]
  "The known-program table of the TOML file PATH (the built-in one by default):
   {name entry}; a ShellRulesError says what is wrong."
  (setv path (Path (or path (known-path))))
  (try (setv data (tomllib.loads (.read-text path :encoding "utf-8")))
       (except [e #(OSError tomllib.TOMLDecodeError)]
         (raise (ShellRulesError f"{path}: {e}"))))
  (when (!= (.get data "version" 1) 1)
    (raise (ShellRulesError f"{path}: version {(get data "version")} is not one this gate reads (1)")))
  (setv unknown (- (set data) #{"version" "programs"}))
  (when unknown
    (raise (ShellRulesError f"{path}: unknown section(s) {(sorted unknown)}")))
  (setv out {})
  (for [[name raw] (.items (.get data "programs" {}))]
    (setv entry (_known-entry f"[programs.{name}]" raw))
    (for [n (+ [name] (list (.get raw "also" [])))]
      (setv (get out n) entry)))
  out)

(defn _rule-options [rules name]
  "The options the rules about NAME model: their flags and the options they read."
  (setv out (set (.get CODE-MODELLED name #{})))
  (for [r (rules-for rules name)]
    (for [entry (+ (get r "flags") (get r "not-flags") (get r "recursive-flags"))]
      (.update out entry))
    (.update out (get r "option-names"))
    (when (get r "option-value")
      (.update out (get (get r "option-value") 0))))
  (frozenset out))

(defn _unmodelled [args entry modelled]
  "The first argument of ARGS that ENTRY (a known program) does not model, as
   #(kind word), or None. KIND is \"option\" or \"subcommand\"."
  (setv i 0
        n (len args)
        flags (| (get entry "flags") modelled)
        values (get entry "values")
        optional (get entry "optional")
        sub (get entry "sub"))
  (when (and (get entry "old-style") args (re.fullmatch r"[A-Za-z]+" (get args 0)))
    (setv pending 0)
    (for [ch (get args 0)]
      (setv o (+ "-" ch))
      (cond (in o values) (+= pending 1)
            (not (in o flags)) (return #("option" (get args 0)))))
    (setv i (+ 1 pending)))
  (while (< i n)
    (setv a (get args i))
    (cond
      (= a "--")
      (return (when sub #("subcommand" "--")))
      (and (in a SKIPS-COMMAND) (in a flags))
      ;; find -exec CMD ;: the command is judged as a command of its own
      (while (and (< (+ i 1) n) (not (in (get args (+ i 1)) #(";" "+"))))
        (+= i 1))
      (or (not (.startswith a "-")) (= a "-"))
      (when sub
        (if (in a sub)
            (return (_unmodelled (cut args (+ i 1) None) (get sub a) modelled))
            (return #("subcommand" a))))
      (in a flags) None
      (in a values) (+= i 1)
      (and (get entry "numeric") (re.fullmatch r"-[0-9]+" a)) None
      (.startswith a "--")
      (do (setv [option eq value] (.partition a "="))
          (cond (in option values) (when (not eq) (+= i 1))
                (and eq (in option optional)) None
                (and (not eq) (in option flags)) None
                True (return #("option" option))))
      (and (in (cut a 2) values) (> (len a) 2)) None
      True
      (for [[j ch] (enumerate (cut a 1 None))]
        (setv o (+ "-" ch))
        (cond (in o values)
              (do (when (= (+ j 2) (len a)) (+= i 1))
                  (break))
              (and (get entry "numeric") (.isdigit ch)) None
              (not (in o flags)) (return #("option" a)))))
    (+= i 1))
  None)
