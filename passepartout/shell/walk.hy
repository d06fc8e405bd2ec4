;; * Why

"A command line is seldom one command: it holds pipelines, lists, subshells,
substitutions, loops, functions and here-documents, and it hands command
strings to bash -c, eval, find -exec and their like, each holding more
commands. This module walks the syntax tree that shell/parse.hy reads and
records every simple command in it, with its arguments as its program will
receive them; it peels the launchers (sudo, env, xargs, …) off to the
command they run, and parses command strings again in turn."

(import functools posixpath re shlex
        itertools [product]
        passepartout.shell.parse [CACHE-SIZE HERE HOME MARKERS MAX-BYTES MAX-COMMANDS
                                  MAX-DEPTH MAX-EXPANSION MAX-NEST MAX-NODES MAX-VARIANTS
                                  SPLIT UNKNOWN _argument-lists _bounded _cached-tree
                                  _fields _lookup _private-use-re _readings _text _union])

;; * Walking the tree

;; ** State

(defn _state []
  {"env" {} "cwd" [HERE] "piped" None "nest" 0 "outer" None "cd" None "data" #{} "stdin" []
   "integer" #{}})

(defn _copy [st]
  (setv new (dict st))
  (setv (get new "env") (dict (get st "env"))
        (get new "cwd") (list (get st "cwd"))
        (get new "data") (set (get st "data"))
        (get new "integer") (set (get st "integer"))
        (get new "cd") None)
  new)

(defn _capped [values out]
  (when (> (len values) MAX-VARIANTS)
    (setv (get out "overflow") True))
  (cut values MAX-VARIANTS))

(defn _merge [into frm out]
  "Merge the state FRM of a block that may not have run into INTO."
  (setv env (get into "env"))
  (for [[k v] (.items (get frm "env"))]
    (setv (get env k) (_capped (_union (_lookup k into) v) out)))
  (.update (get into "data") (get frm "data"))
  (.update (get into "integer") (get frm "integer"))
  (setv (get into "cwd") (_capped (_union (get into "cwd") (get frm "cwd")) out)))

(defn _issue [out severity reason rule]
  (.append (get out "issues") [severity reason rule]))

(defn _clip [text [n 80]]
  (setv text (.join " " (.split text)))
  (if (> (len text) n) (+ (cut text (- n 1)) "…") text))

;; ** The walk

(setv REJECT 3
      ESCALATE 2
      CONFINE 1
      ALLOW 0)

(defn _over-limit [out depth]
  (when (get out "stopped") (return True))
  (+= (get out "nodes") 1)
  (cond (> (get out "nodes") MAX-NODES)
        (do (_issue out REJECT f"the command is too complex to judge (more than {MAX-NODES} syntax nodes)" "floor-too-complex")
            (setv (get out "stopped") True))
        (> depth MAX-DEPTH)
        (do (_issue out REJECT f"the command is nested more than {MAX-DEPTH} levels deep" "floor-too-deep")
            (setv (get out "stopped") True)))
  (get out "stopped"))

(defn _walk-children [node st out depth]
  (for [c node.named-children]
    (_walk c st out (+ depth 1))))

(defn _block [node st out depth]
  "Walk NODE's statements in order in a copy of ST, and merge it back."
  (setv sub (_copy st))
  (_walk-children node sub out depth)
  (_merge st sub out))

(defn _isolated [node st out depth [piped None]]
  "Walk NODE in a copy of ST that is thrown away (a subshell, a substitution)."
  (setv sub (_copy st))
  (setv (get sub "piped") piped)
  (_walk-children node sub out depth))

(defn _walk [node st out depth]
  (when (_over-limit out depth) (return))
  (setv t node.type)
  (cond
    (= t "comment") None
    (= t "program") (_walk-children node st out depth)
    (= t "command") (_command node st out depth [])
    (= t "redirected_statement") (_redirected node st out depth)
    (= t "list") (_list node st out depth)
    (= t "pipeline") (_pipeline node st out depth)
    (= t "subshell") (_isolated node st out depth (get st "piped"))
    (in t #("compound_statement" "if_statement" "elif_clause" "else_clause" "case_item"
            "do_group"))
    (do (when (and (= t "compound_statement") node.children
                   (= (. (get node.children 0) type) "(("))
          (_arithmetic node st out depth))
        (_block node st out depth))
    (in t #("while_statement" "c_style_for_statement"))
    (do (_loop-bomb node out)
        (_loop-jobs node out)
        (when (= t "c_style_for_statement")
          (for [c node.named-children :if (!= c.type "do_group")]
            (_arithmetic c st out depth)))
        (_loop node st out depth))
    (in t #("arithmetic_expansion" "subscript"))
    (do (_arithmetic (_arithmetic-part node) st out depth)
        (_walk-children node st out depth))
    (and (= t "expansion") (any (gfor c node.children (and (not c.is-named) (= c.type ":")))))
    ;; ${s:n:m}: the offset and the length are arithmetic
    (do (for [c (cut node.named-children 1 None)]
          (_arithmetic c st out depth))
        (_walk-children node st out depth))
    (and (= t "test_command") (_arithmetic-test node))
    (do (_arithmetic node st out depth)
        (_walk-children node st out depth))
    (= t "for_statement") (do (_loop-jobs node out) (_for node st out depth))
    (= t "function_definition") (_function node st out depth)
    (= t "variable_assignment") (_assignment node st out depth "shell")
    (= t "declaration_command") (_declaration node st out depth)
    (= t "unset_command")
    (for [c node.named-children]
      (when (in "[" (_text c)) (_arithmetic c st out depth))
      (.append (get out "assigns") {"name" (_text c) "values" None "scope" "unset"}))
    (= t "command_substitution") (_substitution node st out depth)
    (= t "process_substitution")
    (_isolated node st out depth
               (when (= (. (get node.children 0) type) ">(")
                 (frozenset [(or (get st "outer") "?")])))
    (= t "file_redirect") (_redirect node st out depth [])
    (in t #("heredoc_redirect" "herestring_redirect")) (_redirect node st out depth [])
    True (_walk-children node st out depth)))

;; ** Lists, pipelines and loops

(defn _list [node st out depth]
  (setv named (lfor c node.children :if (and c.is-named (!= c.type "comment")) c)
        ops (lfor c node.children :if (not c.is-named) c.type))
  (when (not named) (return))
  (setv (get st "cd") None)
  (_walk (get named 0) st out (+ depth 1))
  (setv right (_copy st))
  (when (and (get st "cd") (in "&&" ops))
    (setv (get right "cwd") (get st "cd")))
  (setv (get st "cd") None)
  (for [r (cut named 1 None)]
    (_walk r right out (+ depth 1)))
  (_merge st right out))

(defn _pipeline [node st out depth]
  (setv upstream (set)
        commands (get out "commands"))
  (for [[i stage] (enumerate (lfor c node.children :if (and c.is-named (!= c.type "comment")) c))]
    (setv sub (_copy st)
          before (len commands))
    (when (> i 0)
      (setv (get sub "piped") (frozenset upstream)))
    (_walk stage sub out (+ depth 1))
    (.update upstream (gfor c (cut commands before None) (or (get c "name") "?")))))

(defn _loop [node st out depth]
  (setv sub (_copy st))
  (_walk-children node sub out depth)
  (_walk-children node sub out depth)
  (_merge st sub out))

(defn _for [node st out depth]
  (setv sub (_copy st)
        var None
        values []
        body [])
  (for [c node.named-children]
    (cond (and (is var None) (= c.type "variable_name")) (setv var (_text c))
          (in c.type #("do_group" "compound_statement")) (.append body c)
          True (do (_walk c sub out (+ depth 1))
                   (for [fields (_fields c st out)] (.extend values fields)))))
  (when var
    (setv (get (get sub "env") var)
          (_capped (if (in "in" (lfor c node.children :if (not c.is-named) c.type))
                       (or values [""])
                       [UNKNOWN])
                   out))
    ;; for x in $(…), or over "$@": each value is data
    (if (or (not (in "in" (lfor c node.children :if (not c.is-named) c.type)))
            (any (gfor c node.named-children
                       :if (not (or (= c.type "variable_name") (in c.type #("do_group" "compound_statement"))))
                       (_holds-data c sub))))
        (.add (get sub "data") var)
        (.discard (get sub "data") var)))
  (for [_ (range 2)]
    (for [b body] (_walk b sub out (+ depth 1))))
  (_merge st sub out))

;; ** Fork bombs

(defn _calls-of [node name]
  "The command nodes under NODE whose program is NAME."
  (setv found []
        stack [node])
  (while stack
    (setv n (.pop stack))
    (if (and (= n.type "command") (n.child-by-field-name "name")
             (= (.strip (_text (n.child-by-field-name "name"))) name))
        (.append found n)
        (.extend stack n.children)))
  found)

(defn _backgrounded [n top]
  "True when N runs in a pipeline or in the background, below TOP."
  (while (and n (!= n.id top.id))
    (when (= n.type "pipeline") (return True))
    (setv nxt n.next-sibling)
    (when (and nxt (= nxt.type "&")) (return True))
    (setv n n.parent))
  False)

(defn _function [node st out depth]
  (setv named node.named-children)
  (when (not named) (return))
  (setv name (.strip (_text (get named 0)))
        body (get named -1)
        calls (_calls-of body name))
  (when (or (>= (len calls) 2) (any (gfor c calls (_backgrounded c body))))
    (_issue out REJECT f"the function {name} starts copies of itself until the machine runs out of processes (a fork bomb)" "floor-fork-bomb"))
  (_isolated body st out depth))

(setv _forever #{"true" ":" "[ 1 ]" "((1))" "" "true;" ":;"})

(defn _loop-bomb [node out]
  (setv condition (node.child-by-field-name "condition")
        body (node.child-by-field-name "body")
        forever (if (= node.type "while_statement")
                    (and condition (in (.strip (_text condition)) _forever))
                    (is condition None)))
  (when (and forever body
             (any (gfor n (_calls-of-kind body "&") True)))
    (_issue out REJECT "an endless loop starts a background job on every turn (a fork bomb)" "floor-fork-bomb")))

(defn _calls-of-kind [node kind]
  (setv stack [node])
  (while stack
    (setv n (.pop stack))
    (when (= n.type kind) (yield n))
    (.extend stack n.children)))

(defn _loop-jobs [node out]
  (setv body (node.child-by-field-name "body"))
  (when (and body (any (gfor n (_calls-of-kind body "&") True)))
    (_issue out ESCALATE "a loop starts a background job on every turn, as many processes as it has turns, and no limit caps them without the sandbox" "unbounded-processes")))

;; ** Commands

(defn _inner-programs [nodes st out depth]
  "Walk the substitutions inside NODES; the names of the programs they run."
  (setv commands (get out "commands")
        before (len commands)
        nodes (lfor n nodes :if (and n (not (in n.type #("word" "number" "raw_string")))) n))
  (when (not nodes)
    (return (set)))
  (setv sub (_copy st))
  (setv (get sub "piped") None)
  (for [n nodes]
    (_walk n sub out (+ depth 1)))
  (sfor c (cut commands before None) (or (get c "name") "?")))

(setv _redirect-types #{"file_redirect" "heredoc_redirect" "herestring_redirect"}
      _plain-types #{"word" "number" "raw_string"})

(defn _check-touching [words out]
  "Two words with nothing between them are one word to the shell; where the
   parser split them (tree-sitter-bash does after some expansions: =a/$X/b=),
   what the gate would judge is not what runs, so the command is escalated."
  (for [[a b] (zip words (cut words 1 None))]
    (when (= a.end-byte b.start-byte)
      (_issue out ESCALATE "the shell reads this command's words differently from how the gate parsed them" "floor-unparsable")
      (return))))

(defn _command [node st out depth redirects]
  (setv assigns []
        name-node None
        args []
        nested []
        reds (list redirects))
  (for [c node.children]
    (setv t c.type)
    (cond (= t "variable_assignment")
          (if (is name-node None)
              (.append assigns c)
              (do (.append args c) (.append nested c)))
          (= t "command_name")
          (setv named c.named-children
                name-node (if named (get named 0) c))
          (in t _redirect-types) (.append reds c)
          (= t "comment") None
          c.is-named (do (.append args c)
                         (when (not (in t _plain-types)) (.append nested c)))))
  (when (and name-node (not (in name-node.type _plain-types)))
    (setv nested (+ [name-node] nested)))
  ;; tree-sitter-bash reads the 0 of =sh 0< f= as an argument; the shell reads
  ;; a number touching a redirection as the descriptor it redirects
  (setv glued None)
  (when (and args reds (= (. (get args -1) type) "number"))
    (setv after (next (gfor r reds :if (= r.start-byte (. (get args -1) end-byte)) r) None))
    (when after
      (setv glued #(after (_text (.pop args))))))
  (_check-touching (+ (if name-node [name-node] []) args) out)
  ;; most commands are plain words: no state to copy, nothing inside to walk
  (setv program (when (and name-node (or nested reds assigns)) (_clip (_text name-node) 40))
        inner (set)
        stdin (if (get st "piped") [] (list (get st "stdin")))
        extra [])
  (when (or nested reds)
    (setv sub (_copy st))
    (setv (get sub "outer") program)
    (setv inner (_inner-programs nested sub out depth))
    (for [r reds]
      (.extend extra (_redirect r sub out depth stdin
                                (when (and glued (is r (get glued 0))) (get glued 1)))))
    (when extra
      (.update inner (_inner-programs extra sub out depth))
      (setv args (+ args extra))))
  (when (is name-node None)
    (for [a assigns] (_assignment a st out depth "shell"))
    (return))
  (setv before (len (get out "assigns")))
  (for [a assigns] (_assignment a st out depth "command" program))
  (setv info {"inner" inner "stdin" stdin "tree" False
              "text" (_clip (_text node))
              "prefix" (dfor a (cut (get out "assigns") before None) (get a "name") (get a "values"))})
  (for [argv (_argument-lists (+ [name-node] args) st out)]
    (_simple argv st out depth info [])))

(defn _redirected [node st out depth]
  (setv named (lfor c node.named-children :if (!= c.type "comment") c))
  (when (not named) (return))
  (setv body (get named 0)
        reds (cut named 1 None))
  (if (= body.type "command")
      (_command body st out depth reds)
      ;; the block's redirections are opened before it runs; what they feed
      ;; it is the input of each command inside that has none of its own
      (do (setv stdin (list (get st "stdin"))
                outer (get st "stdin"))
          (for [r reds] (_redirect r st out depth stdin))
          (setv (get st "stdin") stdin)
          (_walk body st out (+ depth 1))
          (setv (get st "stdin") outer))))

;; ** Redirections

(setv _write-ops #{">" ">>" ">|" "&>" "&>>"})

(defn _redirect [node st out depth stdin [fd None]]
  "Record the redirection NODE (of the descriptor FD when the parser left it
   outside); the argument words it carried."
  (setv t node.type
        extra [])
  (cond
    (= t "file_redirect")
    (do (setv op None
              dest None)
        (for [c node.children]
          (cond (= c.type "file_descriptor") (setv fd (_text c))
                (not c.is-named) (when (is op None) (setv op c.type))
                (is dest None) (setv dest c)
                True (.append extra c)))
        (when (is dest None) (return extra))
        (_inner-programs [dest] st out depth)
        (setv target (_text dest)
              kind (cond (in op _write-ops) "write"
                         (= op "<") "read"
                         (= op "<>") "both"
                         (and (in op #(">&" "<&")) (not (re.fullmatch r"\d+-?|-" target)))
                         (if (= op ">&") "write" "read")
                         True None))
        (setv targets (if kind (lfor fields (_fields dest st out) f fields f) []))
        (for [f targets]
          (.append (get out "redirects")
                   {"kind" kind "target" f "cwd" (tuple (get st "cwd")) "op" op
                    "program" (get st "outer") "piped" (get st "piped")
                    "text" (_clip (_text node))}))
        ;; what the program reads as its input: a shell or an interpreter fed a
        ;; file this way runs that file
        (when (and (in kind #("read" "both")) (in fd #(None "0")))
          (for [f (or targets [UNKNOWN])]
            (.append stdin #("file" f)))))
    (= t "heredoc_redirect")
    (for [c node.named-children]
      (cond (= c.type "heredoc_body")
            (do (_inner-programs [c] st out depth)
                (_backquotes c st out depth)
                (.append stdin #("heredoc" (_text c))))
            (in c.type #("file_redirect" "herestring_redirect"))
            (.extend extra (_redirect c st out depth stdin))
            (not (in c.type #("heredoc_start" "heredoc_end")))
            (_heredoc-tail c st out depth)))
    (= t "herestring_redirect")
    (for [c node.named-children]
      (_inner-programs [c] st out depth)
      (for [fields (_fields c st out)]
        (.append stdin #("herestring" (.join " " fields))))))
  extra)

;; ** Assignments

(defn _value-readings [node st out]
  (cond (is node None) [""]
        (= node.type "array")
        [(.join " " (lfor c node.named-children fields (_fields c st out) f fields f))]
        True (lfor v (_readings node st False out True) (.replace v SPLIT " "))))

(defn _assignment [node st out depth scope [program None]]
  (setv named node.named-children)
  (when (not named) (return))
  (setv target (get named 0)
        name (_text (if (and (= target.type "subscript") target.named-children)
                        (get target.named-children 0)
                        target))
        value (when (> (len named) 1) (get named 1))
        appending (in "+=" (lfor c node.children :if (not c.is-named) c.type)))
  (when (= target.type "subscript")
    (_arithmetic (_arithmetic-part target) st out depth))
  (when (and (in name (get st "integer")) (_holds-data value st))
    (_issue out ESCALATE f"bash evaluates the value given to {name}, declared an integer, as arithmetic, and it is data read when the command runs: a subscript such as a[$(…)] in it runs a command" "arithmetic-code"))
  (_inner-programs [value] st out depth)
  (setv values (_value-readings value st out))
  (when appending
    (setv values (_bounded (_capped (lfor [a b] (product (_lookup name st) values) (+ a b)) out) out)))
  (.append (get out "assigns") {"name" name "values" values "scope" scope "program" program})
  (when (= scope "shell")
    (setv (get (get st "env") name) (_capped values out))
    (cond (_holds-data value st) (.add (get st "data") name)
          (not appending) (.discard (get st "data") name))))

(defn _declaration [node st out depth]
  ;; export, declare and typeset with no names (or only -p, -x) print the
  ;; variables, the environment's keys among them
  (setv keyword (if node.children (. (get node.children 0) type) "")
        words (lfor c node.named-children (_text c)))
  (when (and (in keyword #("export" "declare" "typeset"))
             (all (gfor w words (and (.startswith w "-") (not (in "f" w)) (not (in "F" w))))))
    (_issue out ESCALATE f"`{(_clip (_text node) 40)}` prints the shell's variables, the environment's keys among them" "env-secret"))
  ;; declare -i, local -i, typeset -ai: values given these names are arithmetic
  (when (any (gfor w words (and (.startswith w "-") (in "i" w))))
    (for [c node.named-children]
      (cond (= c.type "variable_name") (.add (get st "integer") (_text c))
            (and (= c.type "variable_assignment") c.named-children)
            (.add (get st "integer") (_text (get c.named-children 0))))))
  (for [c node.named-children]
    (cond (= c.type "variable_assignment") (_assignment c st out depth "shell")
          (= c.type "variable_name")
          (.append (get out "assigns") {"name" (_text c) "values" None "scope" "export"})
          True (do (when (in "[" (_text c)) (_arithmetic c st out depth))
                   (_inner-programs [c] st out depth)))))

;; ** Substitutions

(defn _substitution [node st out depth]
  (setv body (_text node))
  (if (and (.startswith body "`") (in "\\" body))
      (_nested (re.sub r"\\([$`\\])" r"\1" (cut body 1 -1)) st out depth "a backquoted substitution")
      (_isolated node st out depth)))

;; ** Arithmetic

(setv _arithmetic-tests #{"-eq" "-ne" "-lt" "-le" "-gt" "-ge" "-v"}
      _identifier-re (re.compile r"[A-Za-z_][A-Za-z0-9_]*")
      CODE-RE (re.compile r"\$\(|`"))

(defn _arithmetic-test [node]
  "True when the test command NODE ([[ … ]]) evaluates arithmetic."
  (any (gfor n (_calls-of-kind node "test_operator") (in (_text n) _arithmetic-tests))))

(defn data-name [name data]
  "True when the variable NAME holds data: one of DATA, or a positional parameter."
  (or (in name data) (.isdigit name) (in name #("@" "*"))))

(defn hidden-code [text]
  "The command lines written as $(…) or `…` in TEXT, as far as they can be cut out.
   (hidden-code \"a[$(id)]\") ⇒ [\"id\"]"
  (setv found []
        i 0
        n (len text))
  (while (< i n)
    (cond (.startswith text "$(" i)
          (do (setv depth 1
                    j (+ i 2))
              (while (and (< j n) (> depth 0))
                (cond (= (get text j) "(") (+= depth 1)
                      (= (get text j) ")") (-= depth 1))
                (+= j 1))
              (.append found (cut text (+ i 2) (if (= depth 0) (- j 1) j)))
              (setv i j))
          (= (get text i) "`")
          (do (setv j (.find text "`" (+ i 1)))
              (.append found (cut text (+ i 1) (if (< j 0) n j)))
              (setv i (if (< j 0) n (+ j 1))))
          True (+= i 1)))
  found)

(defn _holds-data [node st]
  "True when the value NODE is data: a substitution, a data variable, or text
   holding $( or a backquote."
  (when (is node None) (return False))
  (setv stack [node])
  (while stack
    (setv n (.pop stack)
          t n.type)
    (cond (in t #("command_substitution" "process_substitution")) (return True)
          (in t #("variable_name" "special_variable_name"))
          (when (and (is-not n.parent None) (in n.parent.type #("simple_expansion" "expansion"))
                     (data-name (_text n) (get st "data")))
            (return True))
          (in t #("raw_string" "string_content" "word" "ansi_c_string"))
          (when (.search CODE-RE (_text n)) (return True))
          True (.extend stack n.children)))
  False)

(defn _arithmetic-part [node]
  "What bash evaluates of NODE: of a subscript =a[i]= its index, not the array's name."
  (or (when (= node.type "subscript") (.child-by-field-name node "index")) node))

(defn _arithmetic [node st out depth]
  "Judge NODE, which bash evaluates as arithmetic: escalate data read in it."
  (setv stack [node]
        data (get st "data"))
  (while stack
    (setv n (.pop stack)
          t n.type)
    (cond (= t "process_substitution") None
          (= t "command_substitution")
          (do (_issue out ESCALATE f"bash evaluates `{(_clip (_text node) 40)}` as arithmetic, and what {(_clip (_text n) 30)} prints is data: a subscript such as a[$(…)] in it runs a command" "arithmetic-code")
              (return))
          (in t #("variable_name" "special_variable_name" "word"))
          (for [name (if (= t "word") (.findall _identifier-re (_text n)) [(_text n)])]
            (when (data-name name data)
              (_issue out ESCALATE f"bash evaluates `{(_clip (_text node) 40)}` as arithmetic, and ${name} holds data read when the command runs: a subscript such as a[$(…)] in it runs a command" "arithmetic-code")
              (return)))
          (in t #("raw_string" "string_content" "ansi_c_string"))
          (when (.search CODE-RE (_text n))
            (_issue out ESCALATE f"bash evaluates `{(_clip (_text node) 40)}` as arithmetic, which runs the command written in it" "arithmetic-code")
            (for [code (hidden-code (_text n))]
              (_nested code st out depth "an arithmetic expression"))
            (return))
          True (.extend stack n.children))))

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

(defn _launch [name spec args st out depth info via record]
  (setv found (_peel args spec)
        via (+ via [name]))
  (for [s (get found "strings")]
    (_nested s st out depth f"{name} -c"))
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
        (_nested (.join " " rest) st out depth name)
        (.get spec "extra")
        (_simple (if (get found "replace")
                     (lfor a rest (.replace a (get found "replace") UNKNOWN))
                     (+ rest [UNKNOWN]))
                 st out depth info via)
        True (_simple rest st out depth info via)))

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

(defn _heredoc-tail [node st out depth]
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
            (_walk stage sub out (+ depth 1))
            (.update upstream (gfor c (cut commands before None) (or (get c "name") "?")))))
      (_walk node st out (+ depth 1))))

(setv _backquote-re (re.compile r"`((?:\\.|[^`\\])*)`"))

(defn _backquotes [body st out depth]
  "Walk the backquoted commands of an unquoted here-document's BODY, which the
   shell runs and tree-sitter-bash leaves as text."
  (setv start (. body prev-named-sibling))
  (when (and start (= start.type "heredoc_start")
             (not (any (gfor ch "'\"\\" (in ch (_text start))))))
    (for [m (.finditer _backquote-re (_text body))]
      (_nested (re.sub r"\\([`$\\])" r"\1" (.group m 1)) st out depth "a here-document's backquotes"))))

(defn _nested [text st out depth what [record None]]
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
  (_walk tree.root-node sub out (+ depth 1)))

(defn _shell [record args st out depth]
  (setv parsed (_shell-args args)
        name (get record "name"))
  (cond (in "code" parsed)
        (when (is-not (get parsed "code") None)
          (setv (get record "code") (get parsed "code"))
          (_nested (get parsed "code") st out depth f"{name} -c" record))
        (in "script" parsed) (setv (get record "script") (get parsed "script"))
        True
        (do (setv (get record "reads-stdin") True)
            (for [[kind text] (get record "stdin")]
              (when (in kind #("heredoc" "herestring"))
                (_nested text st out depth f"{name}'s input" record))))))

;; ** find

(setv FIND-MATCH "find-match"
      _find-tests #{"-name" "-iname" "-path" "-ipath" "-wholename" "-iwholename" "-regex"
                    "-iregex" "-type" "-xtype" "-size" "-mtime" "-atime" "-ctime" "-mmin"
                    "-amin" "-cmin" "-newer" "-anewer" "-cnewer" "-newermt" "-empty" "-perm"
                    "-user" "-group" "-links" "-inum" "-lname" "-ilname" "-samefile" "-uid"
                    "-gid" "-nouser" "-nogroup" "-used"}
      _find-runs #{"-exec" "-execdir" "-ok" "-okdir"}
      _find-stops #{"(" "!" "," ")"})

(defn _find [args st out depth info via]
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
                (_simple (lfor c cmd (.replace c "{}" found)) st out depth tree-info (+ via [f"find {a}"])))
              (setv i j))
          (= a "-delete")
          ;; With a test before it, -delete removes what matches below the start
          ;; points, not the start points themselves.
          (_simple (+ ["rm" "-r" "--"]
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

(defn _simple [argv st out depth info via]
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
        (_launch name (get LAUNCHERS name) args st out depth info via record))
    (and (in name SUB-LAUNCHERS) args (in (get args 0) (get (get SUB-LAUNCHERS name) 0)))
    (do (setv (get record "launcher") True)
        (_launch f"{name} {(get args 0)}" (get (get SUB-LAUNCHERS name) 1) (cut args 1 None)
                 st out depth info via record))
    (in name SHELLS) (_shell record args st out depth)
    (in name #("source" "."))
    (setv (get record "script") (if args (get args 0) None))
    (= name "eval")
    (_nested (.join " " args) st out depth "eval" record)
    (= name "find") (_find args st out depth info via)
    (in name #("cd" "pushd")) (_cd args st out (.get info "prefix" {}))
    (= name "popd") (_cd ["-"] st out)
    (= name "trap")
    (do (setv rest (if (and args (= (get args 0) "--")) (cut args 1 None) args))
        (when (and (>= (len rest) 2) (not (in (get rest 0) #("-p" "-l" "-"))))
          (_nested (get rest 0) st out depth "trap" record)))
    (= name "alias")
    (for [a args]
      (when (in "=" a)
        (_nested (get (.partition a "=") 2) st out depth "alias" record)))
    (in name #("read" "mapfile" "readarray"))
    (_set-by-command (_read-names name args st out depth record) st True out)
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

(defn _read-names [name args st out depth record]
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
                              (_nested value st out depth f"{name} -C" record))
                            (+= i 1))
          (.startswith a "-") None
          True (.append names a))
    (+= i 1))
  (setv names (lfor n names (get (.partition n "[") 0)))
  (or names [(if (= name "read") "REPLY" "MAPFILE")]))

;; * Analysis

(defn _analyse [text]
  (setv out {"commands" [] "redirects" [] "assigns" [] "issues" [] "nodes" 0
             "nested-bytes" 0 "overflow" False "too-large" False "stopped" False
             "env-reads" (set)}
        tree (_cached-tree text))
  (_walk tree.root-node (_state) out 0)
  (when tree.root-node.has-error
    (_issue out ESCALATE "the command cannot be parsed as written (unbalanced quotes or brackets, or a syntax error)" "floor-unparsable"))
  (when (get out "too-large")
    (_issue out REJECT f"a word of the command expands to more than {MAX-EXPANSION} bytes, too large to judge" "floor-too-large"))
  (when (get out "overflow")
    (_issue out ESCALATE f"the command has more than {MAX-VARIANTS} readings (brace expansions, alternative values), too many to judge" "floor-too-ambiguous"))
  out)

(setv analyse ((functools.lru-cache :maxsize CACHE-SIZE) _analyse))
