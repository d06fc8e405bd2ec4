;; * Why

"A command line is seldom one command: it holds pipelines, lists, subshells,
substitutions, loops, functions and here-documents, and it hands command
strings to bash -c, eval, find -exec and their like, each holding more
commands. This module walks the syntax tree that shell/parse.hy reads and
records every simple command in it, with its arguments as its program will
receive them. What each of those runs in turn (the command a launcher such as
sudo, env or xargs runs, the command strings a shell is given) is found
by shell/commands.hy, which is handed the walk to walk them."

(import functools re
        itertools [product]
        passepartout.shell.parse [CACHE-SIZE MAX-DEPTH MAX-EXPANSION MAX-NODES MAX-VARIANTS
                                  SPLIT UNKNOWN _argument-lists _bounded _cached-tree
                                  _fields _lookup _readings _text]
        passepartout.shell.state [ESCALATE REJECT _capped _clip _copy _issue _merge _state]
        passepartout.shell.commands [_backquotes _heredoc-tail _nested _simple])

;; * Walking the tree

;; ** The walk

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
    (_simple _walk argv st out depth info [])))

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
                (_backquotes _walk c st out depth)
                (.append stdin #("heredoc" (_text c))))
            (in c.type #("file_redirect" "herestring_redirect"))
            (.extend extra (_redirect c st out depth stdin))
            (not (in c.type #("heredoc_start" "heredoc_end")))
            (_heredoc-tail _walk c st out depth)))
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
      (_nested _walk (re.sub r"\\([$`\\])" r"\1" (cut body 1 -1)) st out depth "a backquoted substitution")
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
              (_nested _walk code st out depth "an arithmetic expression"))
            (return))
          True (.extend stack n.children))))

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
