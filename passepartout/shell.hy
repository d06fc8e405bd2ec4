(import fnmatch functools importlib.util os posixpath re shlex shutil threading tomllib
        hy.models [Keyword]
        itertools [islice product]
        pathlib [Path]
        tree-sitter [Language Parser]
        tree-sitter-bash
        passepartout.proto [proto-get]
        passepartout.workspace [path-inside runs-later BUILD-FILES SECRET-PATTERNS])

(setv MAX-BYTES 16384
      MAX-EXPANSION 65536
      MAX-DEPTH 150
      MAX-NEST 6
      MAX-NODES 40000
      MAX-COMMANDS 1000
      MAX-VARIANTS 32
      MAX-JUDGED 64
      MAX-BRACES 64
      CACHE-SIZE 1024
      MEMO-SIZE 2048
      MAX-CONTEXTS 16)

(setv _missing (object))

(defn _kept [memo key compute #* args]
  "MEMO's answer for KEY, computed as (COMPUTE #* ARGS) the first time."
  (setv found (.get memo key _missing))
  (when (is found _missing)
    (when (>= (len memo) MEMO-SIZE) (.clear memo))
    (setv found (compute #* args)
          (get memo key) found))
  found)

(setv _language (Language (tree-sitter-bash.language))
      _parser (Parser _language)
      _parse-lock (threading.Lock))

(setv _private-use-re (re.compile "[\ue000-\uf8ff\U000f0000-\U0010ffff]"))

(defn parse-tree [text]
  "The tree-sitter syntax tree of the shell TEXT. Text holding private-use
   characters is never handed to tree-sitter: tree-sitter-bash 0.25 crashes the
   whole process on some of them (a brace followed by one from plane 15 or 16)."
  (when (_private-use-re.search text)
    (raise (ValueError "private-use characters are not parsed")))
  (with [_parse-lock]
    (.parse _parser (.encode text "utf-8" "surrogatepass"))))

(setv _cached-tree ((functools.lru-cache :maxsize CACHE-SIZE) parse-tree))

(defn _text [node]
  (.decode node.text "utf-8" "replace"))

(setv UNKNOWN "\x00"
      HOME "\U000F0001"
      TMP "\U000F0002"
      HERE "\U000F0003"
      SPLIT "\U000F0004"
      MARKERS (+ UNKNOWN HOME TMP HERE SPLIT))

(setv _c-escapes {"a" "\x07" "b" "\x08" "e" "\x1b" "E" "\x1b" "f" "\x0c" "n" "\n"
                  "r" "\r" "t" "\t" "v" "\x0b" "\\" "\\" "'" "'" "\"" "\"" "?" "?"}
      _c-escape-re (re.compile r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.|.)" re.S))

(defn _ansi-c [body]
  "The text of the $'…' string whose inside is BODY."
  (defn decode [m]
    (setv e (.group m 1)
          c (get e 0))
    (cond (in e _c-escapes) (get _c-escapes e)
          (in c "xuU") (try (chr (int (cut e 1 None) 16)) (except [ValueError] UNKNOWN))
          (in c "01234567") (chr (% (int e 8) 256))
          (= c "c") (chr (& (ord (get e 1)) 31))
          True (+ "\\" e)))
  (.sub _c-escape-re decode body))

(defn _unescape-word [text]
  "An unquoted word without its backslashes: \\x is x, backslash-newline is nothing."
  (if (in "\\" text)
      (re.sub r"\\(\n|.)" (fn [m] (if (= (.group m 1) "\n") "" (.group m 1))) text :flags re.S)
      text))

(defn _unescape-quoted [text]
  "Double-quoted text: a backslash only escapes $ ` \" \\ and newline."
  (if (in "\\" text)
      (re.sub r"\\([$`\"\\\n])" (fn [m] (if (= (.group m 1) "\n") "" (.group m 1))) text)
      text))

(defn _tilde [text]
  "TEXT with a leading ~, ~+, ~- or ~user expanded."
  (setv slash (.find text "/")
        head (if (< slash 0) text (cut text slash))
        rest (if (< slash 0) "" (cut text slash None)))
  (cond (= head "~") (+ HOME rest)
        (= head "~+") (+ HERE rest)
        (= head "~-") (+ UNKNOWN rest)
        (= head "~root") (+ "/root" rest)
        (re.fullmatch r"~[A-Za-z_][A-Za-z0-9_.-]*" head) (+ "/home/" (cut head 1 None) rest)
        True text))

(defn _tilde-readings [text st]
  (if (and (in "HOME" (get st "env")) (or (= text "~") (.startswith text "~/")))
      (lfor h (get (get st "env") "HOME") (+ h (cut text 1 None)))
      [(_tilde text)]))

(defn _bounded [values out]
  "VALUES, or [UNKNOWN] when one of them is longer than MAX-EXPANSION: a
   variable doubled forty times must cost the judge nothing, not its memory."
  (if (any (gfor v values (> (len v) MAX-EXPANSION)))
      (do (setv (get out "too-large") True)
          [UNKNOWN])
      values))

(defn _join [parts out]
  "Every concatenation of one reading of each of PARTS (lists of strings)."
  (setv acc [""])
  (for [p parts]
    (setv acc (_bounded (lfor [a b] (product acc p) (+ a b)) out))
    (when (> (len acc) MAX-VARIANTS)
      (setv (get out "overflow") True
            acc (cut acc MAX-VARIANTS))))
  acc)

(defn _union [a b]
  "The readings of A and then those of B not already in A."
  (+ (list a) (lfor x b :if (not (in x a)) x)))

(defn _lookup [name st]
  (setv env (get st "env"))
  (cond (in name env) (get env name)
        (= name "HOME") [HOME]
        (= name "TMPDIR") [TMP]
        (= name "PWD") (list (get st "cwd"))
        True [UNKNOWN]))

(defn _split-fields [value]
  (.join SPLIT (.split value)))

(defn _variable [name st quoted]
  (setv values (_lookup name st))
  (cond quoted values
        (in "IFS" (get st "env")) [UNKNOWN]
        True (lfor v values (_split-fields v))))

(setv _default-ops #{":-" "-" ":=" "="}
      _alternate-ops #{":+" "+"}
      _plain-ops #{":?" "?"})

(defn _expansion [node st quoted out]
  (setv name None
        op None
        rest []
        prefix False)
  (for [c node.children]
    (cond (in c.type #("${" "}")) None
          (and (is name None) (in c.type #("#" "!"))) (setv prefix True)
          (and (is name None) (in c.type #("variable_name" "special_variable_name")))
          (setv name (_text c))
          (is name None) (setv prefix True)
          (and (is op None) (not c.is-named)) (setv op c.type)
          True (.append rest c)))
  (cond (or prefix (is name None) (and (is-not op None) (not (in op (| _default-ops _alternate-ops _plain-ops)))))
        [UNKNOWN]
        (or (is op None) (in op _plain-ops)) (_variable name st quoted)
        (in op _default-ops)
        (_union (_variable name st quoted) (_join (lfor r rest (_readings r st True out)) out))
        True
        (_union [""] (_join (lfor r rest (_readings r st True out)) out))))

(defn _readings [node st quoted out [start False]]
  "The readings (strings, possibly with markers) of the word NODE."
  (setv t node.type)
  (cond
    (= t "word")
    (do (setv raw (_text node)
              text (_unescape-word raw))
        (if (and start (not quoted) (.startswith raw "~"))
            (_tilde-readings text st)
            [text]))
    (in t #("number" "extglob_pattern" "regex" "test_operator" "variable_name"))
    [(_text node)]
    (= t "raw_string") [(cut (_text node) 1 -1)]
    (= t "ansi_c_string") [(_ansi-c (cut (_text node) 2 -1))]
    (= t "string_content") [(_unescape-quoted (_text node))]
    (in t #("string" "translated_string"))
    (_join (lfor c node.children
                 :if (not (in c.type #("\"" "$\"")))
                 (if c.is-named (_readings c st True out) [(_text c)]))
           out)
    (= t "concatenation")
    (_join (lfor [i c] (enumerate node.children)
                 (if c.is-named
                     (_readings c st quoted out (and start (= i 0)))
                     [(_text c)]))
           out)
    (= t "simple_expansion")
    (do (setv names (lfor c node.named-children (_text c)))
        (if (and names (re.fullmatch r"[A-Za-z_][A-Za-z0-9_]*" (get names 0)))
            (_variable (get names 0) st quoted)
            [UNKNOWN]))
    (= t "expansion") (_expansion node st quoted out)
    (= t "command_substitution")
    (lfor v (_printed node st out) (if quoted v (_split-fields v)))
    (= t "process_substitution") ["/dev/fd/63"]
    (= t "brace_expression") [(_text node)]
    True [UNKNOWN]))

(defn _printed [node st out]
  "The readings of what the substitution NODE prints, when that is known."
  (setv named (lfor c node.named-children :if (!= c.type "comment") c))
  (when (or (!= (len named) 1) (!= (. (get named 0) type) "command"))
    (return [UNKNOWN]))
  (setv command (get named 0)
        parts (lfor c command.named-children c))
  (when (or (not parts) (!= (. (get parts 0) type) "command_name")
            (not (in (_text (get parts 0)) #("echo" "printf")))
            (any (gfor p (cut parts 1 None)
                       (not (in p.type #("word" "string" "raw_string" "number" "concatenation"))))))
    (return [UNKNOWN]))
  (setv program (_text (get parts 0))
        found [])
  (for [args (_argument-lists (cut parts 1 None) st out)]
    (when (any (gfor a args (in UNKNOWN a)))
      (return [UNKNOWN]))
    (if (= program "echo")
        (do (while (and args (re.fullmatch r"-[neE]+" (get args 0)))
              (when (in "e" (get args 0))
                (return [UNKNOWN]))
              (setv args (cut args 1 None)))
            (.append found (.rstrip (.join " " args) "\n")))
        (do (when (or (!= (len args) 1) (in "%" (get args 0)) (in "\\" (get args 0)))
              (return [UNKNOWN]))
            (.append found (.rstrip (get args 0) "\n")))))
  (or found [UNKNOWN]))

(defn _brace-parts [s i]
  "The end and the top-level parts of the brace group opening at I, or None."
  (setv depth 0
        parts []
        start (+ i 1)
        j i)
  (while (< j (len s))
    (setv c (get s j))
    (cond (= c "{") (+= depth 1)
          (= c "}") (do (-= depth 1)
                        (when (= depth 0)
                          (.append parts (cut s start j))
                          (return #(j parts))))
          (and (= c ",") (= depth 1)) (do (.append parts (cut s start j))
                                          (setv start (+ j 1))))
    (+= j 1))
  None)

(defn _sequence [body]
  "The words of the sequence {a..b} or {a..b..step}, or None."
  (setv m (re.fullmatch r"(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.(-?\d+))?" body))
  (when (not m) (return None))
  (setv [a b step] (.groups m)
        step (abs (int (or step "1"))))
  (when (= step 0) (setv step 1))
  (setv numeric (.lstrip a "-"))
  (if (.isdigit numeric)
      (if (.isdigit (.lstrip b "-"))
          (do (setv a (int a) b (int b))
              (lfor k (islice (range a (+ b (if (>= b a) 1 -1)) (if (>= b a) step (- step)))
                              (+ MAX-VARIANTS 1))
                    (str k)))
          None)
      (if (and (= (len a) 1) (= (len b) 1) (not (.isdigit b)))
          (lfor k (islice (range (ord a) (+ (ord b) (if (>= (ord b) (ord a)) 1 -1))
                                 (if (>= (ord b) (ord a)) step (- step)))
                          (+ MAX-VARIANTS 1))
                (chr k))
          None)))

(defn expand-braces [s [limit MAX-VARIANTS] [out None]]
  "The words the brace expansions of S stand for. Past LIMIT words (or
   MAX-BRACES braces) the rest are dropped and OUT (a dict) notes the overflow.
   (expand-braces \"a{b,c}d\") ⇒ [\"abd\" \"acd\"]"
  (when (> (.count s "{") MAX-BRACES)
    (when (is-not out None) (setv (get out "overflow") True))
    (return [s]))
  (setv i (.find s "{"))
  (while (>= i 0)
    (when (or (= i 0) (!= (get s (- i 1)) "$"))
      (setv found (_brace-parts s i))
      (when found
        (setv [end parts] found
              words (if (> (len parts) 1) parts (_sequence (get parts 0))))
        (when words
          (setv found []
                prefix (cut s i)
                suffix (cut s (+ end 1) None))
          (for [w words]
            (for [r (expand-braces (+ prefix w suffix) limit out)]
              (.append found r)
              (when (>= (len found) limit)
                (when (is-not out None) (setv (get out "overflow") True))
                (return found))))
          (return found))))
    (setv i (.find s "{" (+ i 1))))
  [s])

(defn _plain-word [node]
  "The one reading of the word NODE when it reads as written, else None."
  (setv t node.type)
  (cond (in t #("word" "number"))
        (do (setv text (_text node))
            (when (not (or (in "\\" text) (in "{" text) (in SPLIT text) (.startswith text "~")))
              text))
        (= t "raw_string")
        (do (setv inside (cut (_text node) 1 -1))
            (when (not (or (in "{" inside) (in SPLIT inside)))
              inside))
        (= t "string")
        (do (setv parts node.children)
            (when (and (= (len parts) 3) (= (. (get parts 1) type) "string_content"))
              (setv inside (_text (get parts 1)))
              (when (not (or (in "\\" inside) (in "{" inside) (in SPLIT inside)))
                inside)))))

(defn _fields [node st out]
  "The readings of the argument NODE, each a list of fields."
  (setv plain (_plain-word node))
  (when (is-not plain None)
    (return [[plain]]))
  (setv readings [])
  (for [r (_readings node st False out True)]
    (setv fields [])
    (for [word (expand-braces r MAX-VARIANTS out)]
      (if (in SPLIT word)
          (.extend fields (lfor f (.split word SPLIT) :if f f))
          (.append fields word)))
    (when (not (in fields readings))
      (.append readings fields)))
  readings)

(defn _state []
  {"env" {} "cwd" [HERE] "piped" None "nest" 0 "outer" None "cd" None})

(defn _copy [st]
  (setv new (dict st))
  (setv (get new "env") (dict (get st "env"))
        (get new "cwd") (list (get st "cwd"))
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
  (setv (get into "cwd") (_capped (_union (get into "cwd") (get frm "cwd")) out)))

(defn _issue [out severity reason rule]
  (.append (get out "issues") [severity reason rule]))

(defn _clip [text [n 80]]
  (setv text (.join " " (.split text)))
  (if (> (len text) n) (+ (cut text (- n 1)) "…") text))

(setv REJECT 2
      ESCALATE 1
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
    (_block node st out depth)
    (in t #("while_statement" "c_style_for_statement"))
    (do (_loop-bomb node out)
        (_loop node st out depth))
    (= t "for_statement") (_for node st out depth)
    (= t "function_definition") (_function node st out depth)
    (= t "variable_assignment") (_assignment node st out depth "shell")
    (= t "declaration_command") (_declaration node st out depth)
    (= t "unset_command")
    (for [c node.named-children]
      (.append (get out "assigns") {"name" (_text c) "values" None "scope" "unset"}))
    (= t "command_substitution") (_substitution node st out depth)
    (= t "process_substitution")
    (_isolated node st out depth
               (when (= (. (get node.children 0) type) ">(")
                 (frozenset [(or (get st "outer") "?")])))
    (= t "file_redirect") (_redirect node st out depth [])
    (in t #("heredoc_redirect" "herestring_redirect")) (_redirect node st out depth [])
    True (_walk-children node st out depth)))

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
                   out)))
  (for [_ (range 2)]
    (for [b body] (_walk b sub out (+ depth 1))))
  (_merge st sub out))

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

(defn _argument-lists [words st out]
  "Every argument list the word nodes WORDS can stand for (at most MAX-VARIANTS)."
  (setv readings (lfor w words (_fields w st out))
        lists [])
  (for [combination (product #* readings)]
    (when (>= (len lists) MAX-VARIANTS)
      (setv (get out "overflow") True)
      (break))
    (.append lists (lfor fields combination f fields f)))
  lists)

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
  (_check-touching (+ (if name-node [name-node] []) args) out)
  ;; most commands are plain words: no state to copy, nothing inside to walk
  (setv program (when (and name-node (or nested reds assigns)) (_clip (_text name-node) 40))
        inner (set)
        stdin []
        extra [])
  (when (or nested reds)
    (setv sub (_copy st))
    (setv (get sub "outer") program)
    (setv inner (_inner-programs nested sub out depth))
    (for [r reds]
      (.extend extra (_redirect r sub out depth stdin)))
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
      (do (_walk body st out (+ depth 1))
          (for [r reds] (_redirect r st out depth [])))))

(setv _write-ops #{">" ">>" ">|" "&>" "&>>"})

(defn _redirect [node st out depth stdin]
  "Record the redirection NODE; the argument words it carried."
  (setv t node.type
        extra [])
  (cond
    (= t "file_redirect")
    (do (setv op None
              dest None)
        (for [c node.children]
          (cond (= c.type "file_descriptor") None
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
        (when kind
          (for [fields (_fields dest st out)
                f fields]
            (.append (get out "redirects")
                     {"kind" kind "target" f "cwd" (tuple (get st "cwd")) "op" op
                      "program" (get st "outer") "piped" (get st "piped")
                      "text" (_clip (_text node))})))
        (when (in kind #("read" "both"))
          (.append stdin #("file" None))))
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
  (_inner-programs [value] st out depth)
  (setv values (_value-readings value st out))
  (when appending
    (setv values (_bounded (_capped (lfor [a b] (product (_lookup name st) values) (+ a b)) out) out)))
  (.append (get out "assigns") {"name" name "values" values "scope" scope "program" program})
  (when (= scope "shell")
    (setv (get (get st "env") name) (_capped values out))))

(defn _declaration [node st out depth]
  (for [c node.named-children]
    (cond (= c.type "variable_assignment") (_assignment c st out depth "shell")
          (= c.type "variable_name")
          (.append (get out "assigns") {"name" (_text c) "values" None "scope" "export"})
          True (_inner-programs [c] st out depth))))

(defn _substitution [node st out depth]
  (setv body (_text node))
  (if (and (.startswith body "`") (in "\\" body))
      (_nested (re.sub r"\\([$`\\])" r"\1" (cut body 1 -1)) st out depth "a backquoted substitution")
      (_isolated node st out depth)))

(setv _su {"value" ["-g" "--group" "-G" "--supp-group" "-s" "--shell" "-w"
                    "--whitelist-environment"]
           "strings" ["-c" "--command" "--session-command"] "skip" 1 "rest" False})

(setv LAUNCHERS
      {"sudo" {"value" ["-u" "--user" "-g" "--group" "-C" "--close-from" "-D" "--chdir" "-h"
                        "--host" "-p" "--prompt" "-r" "--role" "-t" "--type" "-T"
                        "--command-timeout" "-U" "--other-user"]}
       "doas" {"value" ["-u" "-C"]}
       "pkexec" {"value" ["--user"]}
       "run0" {"value" ["-u" "--user" "-g" "--group" "-D" "--chdir" "--setenv" "--unit"
                        "--property" "--description" "--slice" "--nice"]}
       "env" {"value" ["-u" "--unset" "-C" "--chdir" "-P"] "split" ["-S" "--split-string"]
              "assignments" True}
       "command" {"lookup" ["-v" "-V"]}
       "builtin" {}
       "exec" {"value" ["-a"]}
       "nohup" {}
       "time" {"value" ["-o" "--output" "-f" "--format"]}
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
       "nsenter" {"value" ["-t" "--target" "-S" "--setuid" "-G" "--setgid" "-w" "--wd" "-r" "--root"]}
       "unshare" {}
       "firejail" {}
       "systemd-run" {"value" ["-u" "--unit" "-p" "--property" "-E" "--setenv" "--description"
                               "--slice" "-M" "--machine" "--uid" "--gid" "--nice"
                               "--working-directory"]}
       "strace" {"value" ["-o" "-e" "-p" "-s" "-u" "-E" "-P" "-a" "-b" "-I" "-O" "-S" "-X"]}
       "ltrace" {"value" ["-o" "-e" "-p" "-s" "-u" "-n" "-a" "-l"]}
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
       "xargs" {"value" ["-a" "--arg-file" "-d" "--delimiter" "-E" "--eof" "-L" "--max-lines"
                         "-n" "--max-args" "-P" "--max-procs" "-s" "--max-chars"
                         "--process-slot-var"]
                "replace" ["-I" "--replace"] "extra" True}
       "flock" {"value" ["-w" "--timeout" "-E" "--conflict-exit-code"] "skip" 1
                "strings" ["-c" "--command"]}
       "su" _su
       "runuser" _su
       "sg" {"strings" ["-c"] "skip" 1 "join" True}
       "script" {"value" ["-E" "--echo" "-I" "--log-in" "-O" "--log-out" "-B" "--log-io" "-T"
                          "--log-timing" "-m" "--logging-format" "-o" "--output-limit"]
                 "strings" ["-c" "--command"] "rest" False}
       "watch" {"value" ["-n" "--interval" "-d" "--differences" "-q" "--equexit"]
                "join" True "argv" ["-x" "--exec"]}
       "screen" {"value" ["-S" "-c" "-e" "-h" "-p" "-T" "-t" "-X" "-Logfile"]}})

(setv _env-run {"value" ["-n" "--name" "-p" "--prefix" "--cwd"]}
      SUB-LAUNCHERS
      {"uv" [["run"] {"value" ["--with" "--python" "-p" "--package" "--directory" "--project"
                               "--env-file" "--extra" "--group" "--index" "--from"]}]
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
               {"value" ["-s" "-n" "-c" "-t" "-x" "-y" "-F" "-e" "-f" "-l" "-p"] "join" True}]})

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
        found {"strings" [] "assignments" [] "prefix" [] "replace" None "lookup" False "argv" False}
        i 0
        n (len args))
  (defn take [option value]
    (cond (in option strings) (.append (get found "strings") value)
          (in option splits) (.extend (get found "prefix") (_split-string value))
          (in option replaces) (setv (get found "replace") value)))
  (setv skip (.get spec "skip" 0))
  (while (< i n)
    (setv a (get args i))
    (cond
      (= a "--") (do (+= i 1) (break))
      (and (.get spec "assignments") (_name-value-re.match a))
      (.append (get found "assignments") a)
      (and (> skip 0) (or (= a "-") (not (.startswith a "-"))))
      (-= skip 1)
      (.startswith a "--")
      (do (setv [option _ value] (.partition a "="))
          (when (in option lookups) (setv (get found "lookup") True))
          (when (in option argv-flags) (setv (get found "argv") True))
          (when (in option (| values strings splits replaces))
            (when (not (in "=" a))
              (+= i 1)
              (setv value (if (< i n) (get args i) "")))
            (take option value)))
      (and (.startswith a "-") (> (len a) 1))
      (for [[j ch] (enumerate (cut a 1 None))]
        (setv option (+ "-" ch))
        (when (in option lookups) (setv (get found "lookup") True))
        (when (in option argv-flags) (setv (get found "argv") True))
        (when (in option (| values strings splits replaces))
          (setv value (cut a (+ j 2) None))
          (when (not value)
            (+= i 1)
            (setv value (if (< i n) (get args i) "")))
          (take option value)
          (break)))
      True (break))
    (+= i 1))
  (setv rest (cut args (+ i skip) None))
  (setv (get found "rest") (+ (get found "prefix") rest))
  found)

(defn _launch [name spec args st out depth info via]
  (setv found (_peel args spec)
        via (+ via [name]))
  (for [s (get found "strings")]
    (_nested s st out depth f"{name} -c"))
  (when (get found "assignments")
    (for [a (get found "assignments")]
      (setv [k _ v] (.partition a "="))
      (.append (get out "assigns") {"name" k "values" [v] "scope" "command" "program" name})))
  (setv rest (get found "rest"))
  (cond (or (get found "lookup") (not rest) (= (.get spec "rest" True) False)) None
        (and (.get spec "join") (not (get found "argv")))
        (_nested (.join " " rest) st out depth name)
        (.get spec "extra")
        (_simple (if (get found "replace")
                     (lfor a rest (.replace a (get found "replace") UNKNOWN))
                     (+ rest [UNKNOWN]))
                 st out depth info via)
        True (_simple rest st out depth info via)))

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
          (and (in (get a 0) "-+") (> (len a) 1))
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
  (when (in UNKNOWN text)
    (when record (setv (get record "dynamic-code") True))
    (setv text (.replace text UNKNOWN "${__unknown__}")))
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
                "script" None "reads-stdin" False "dynamic-code" False})
  (.append (get out "commands") record)
  (when (is name None) (return))
  (cond
    (in name LAUNCHERS)
    (do (setv (get record "launcher") True)
        (_launch name (get LAUNCHERS name) args st out depth info via))
    (and (in name SUB-LAUNCHERS) args (in (get args 0) (get (get SUB-LAUNCHERS name) 0)))
    (do (setv (get record "launcher") True)
        (_launch f"{name} {(get args 0)}" (get (get SUB-LAUNCHERS name) 1) (cut args 1 None)
                 st out depth info via))
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
        (_nested (get (.partition a "=") 2) st out depth "alias" record)))))

(defn _analyse [text]
  (setv out {"commands" [] "redirects" [] "assigns" [] "issues" [] "nodes" 0
             "nested-bytes" 0 "overflow" False "too-large" False "stopped" False}
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

(defclass ShellRulesError [ValueError]
  "A rules file that cannot be used.")

(setv _match-keys #{"program" "subcommand" "flags" "not-flags" "operands" "arg-regex"
                    "option-value" "min-operands"}
      _effect-keys #{"deletes" "writes" "write-options" "write-prefixes" "writes-dir"
                     "recursive-flags" "recursive" "reads-tree" "command-options" "script"}
      _rule-keys (| _match-keys _effect-keys #{"name" "verdict" "reason" "examples"
                                                "counterexamples"})
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

(setv _no-spec {"value" #{} "old-style" False}
      _none (frozenset))

(defn parse-options [args [spec None]]
  "ARGS split by SPEC: {\"names\" set \"opts\" [(name value)] \"operands\" [...]
   \"args\" ARGS \"patterns\" {indices of args that are pattern values}}.
   (parse-options [\"-rf\" \"x\"]) ⇒ names {-r -f}, operands [x]"
  (setv spec (or spec _no-spec)
        values (get spec "value")
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
          (.append opts #(a (if (< i n) (get args i) None))))
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
                      "old-style" "also"})

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
                                    (.get spec "pattern-options" [])))
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

(setv _indexes {}
      _context-keys #{"workspace" "home" "temp-dirs" "protected"})

(defn _context-places [ctx]
  "The workspace, home, temp folders and protected paths of the context CTX, by
   name, as proto-get finds them, in one pass over the plist instead of four."
  (setv found {})
  (when (isinstance ctx list)
    (for [[k v] (zip (cut ctx None None 2) (cut ctx 1 None 2))]
      (when (and (isinstance k Keyword) (in k.name _context-keys)
                 (not (in k.name found)))
        (setv (get found k.name) v))))
  found)

(defn _places [ctx rules]
  "What the judge needs of CTX: its folders, and the index of its secret locations
   (kept between calls for the same folders and rules)."
  (setv fields (_context-places ctx)
        workspace (.get fields "workspace")
        home (.get fields "home")
        temps (tuple (or (.get fields "temp-dirs") []))
        protected (tuple (or (.get fields "protected") []))
        key #(workspace home temps protected (id rules))
        pc (.get _indexes key))
  (when (is pc None)
    (setv temps (lfor t temps :if t (posixpath.normpath t))
          pc {"ws" (posixpath.normpath (or workspace "/nonexistent-workspace"))
              "home" (if home (posixpath.normpath home) None)
              "temps" temps
              "tmp" (if temps (get temps -1) None)
              "protected" (lfor p protected :if p (posixpath.normpath p))})
    (setv (get pc "home-text") (or (get pc "home") UNKNOWN)
          (get pc "tmp-text") (or (get pc "tmp") UNKNOWN))
    (setv (get pc "secrets") (_secret-index pc rules)
          (get pc "ws-real") (os.path.realpath (get pc "ws"))
          (get pc "temps-real") (lfor t temps (os.path.realpath t))
          (get pc "protected-real") (lfor p (get pc "protected") (os.path.realpath p))
          (get pc "named") {})
    (when (>= (len _indexes) MAX-CONTEXTS) (.clear _indexes))
    (setv (get _indexes key) pc))
  (| pc {"ctx" ctx "nested" 0 "resolved" {}}))

(setv _control-re (re.compile "[\x00-\x1f\x7f]"))

(defn _lexists [path]
  "os.path.lexists without the exception it raises and catches for a missing path."
  (try (os.access path os.F-OK :follow-symlinks False)
       (except [ValueError] False)))

(defn _realpath [p pc]
  "os.path.realpath of P, once per command."
  (setv memo (get pc "resolved")
        key #("real" p))
  (when (not (in key memo))
    (setv (get memo key) (os.path.realpath p)))
  (get memo key))

(defn _resolve [given pc]
  "Where the path GIVEN (absolute, or relative to the workspace) leads, for a
   write: #(True real) or #(False reason). These are resolve-path's rules (a
   relative path may not climb out with .., symlinks are followed, the daemon's
   files are refused, the workspace and temp folders are the only places) with
   the context's folders resolved once, not on every call."
  (setv memo (get pc "resolved"))
  (when (not (in given memo))
    (setv (get memo given) (_resolve-new given pc)))
  (get memo given))

(defn _resolve-new [given pc]
  (when (.search _control-re given)
    (return #(False "it contains a control character")))
  (if (posixpath.isabs given)
      (setv p given)
      (do (setv lexical (posixpath.normpath given))
          (when (or (= lexical "..") (.startswith lexical "../"))
            (return #(False "its .. climbs out of the workspace")))
          (setv p (posixpath.join (get pc "ws-real") given))))
  (setv real (os.path.realpath p))
  (when (os.path.islink real)
    (return #(False "it goes through a symlink that cannot be resolved (a loop)")))
  (for [r (get pc "protected-real")]
    (when (path-inside real r)
      (return #(False "it is one of the daemon's own files"))))
  (when (or (path-inside real (get pc "ws-real"))
            (any (gfor t (get pc "temps-real") (path-inside real t))))
    (return #(True real)))
  #(False f"it resolves to {real}, outside the workspace and the temp folders"))

(defn _unmark [text pc]
  (.replace (.replace (.replace text HOME (get pc "home-text"))
                      TMP (get pc "tmp-text"))
            HERE (get pc "ws")))

(setv _abnormal-re (re.compile r"(^|/)\.\.?(/|$)|//|/$|^$"))

(defn _norm [p]
  "P normalised; when part of it is unknown, only the folders before that part
   are (an unknown part followed by .. could be anything)."
  (when (in UNKNOWN p)
    (setv i (.index p UNKNOWN)
          cut-at (+ (.rfind p "/" 0 i) 1))
    (return (if (> cut-at 0)
                (+ (.rstrip (_norm (cut p cut-at)) "/") "/" (cut p cut-at None))
                p)))
  ;; normpath only removes ., .., empty components and a trailing slash; most
  ;; paths have none of them and are returned as they are, without the call
  (when (.search _abnormal-re p)
    (setv p (posixpath.normpath p)))
  (if (.startswith p "//") (+ "/" (.lstrip p "/")) p))

(defn _concrete [text cwds pc]
  "The readings of the path word TEXT: (path maybe given) triples, PATH absolute
   and normalised, MAYBE true when part of it is unknown, GIVEN what resolve-path is handed."
  (setv t (_unmark text pc)
        out [])
  (for [v (if (in UNKNOWN t) [(.replace t UNKNOWN "") t] [t])]
    (when (not v) (continue))
    (setv maybe (in UNKNOWN v))
    (if (.startswith v "/")
        (.append out #((_norm v) maybe v))
        (for [c cwds]
          (setv here (.startswith c HERE)
                c (_unmark c pc))
          (cond (= c (get pc "ws")) (.append out #((_norm (posixpath.join c v)) maybe v))
                (and here (not (in UNKNOWN c)))
                (do (setv joined (_norm (posixpath.join c v)))
                    (.append out #(joined maybe (posixpath.relpath joined (get pc "ws")))))
                (.startswith c "/")
                (.append out #((_norm (posixpath.join c v)) (or maybe (in UNKNOWN c))
                               (posixpath.join c v)))
                True (.append out #((_norm (+ UNKNOWN "/" v)) True v))))))
  out)

(defn _shown [path]
  (_clip (.replace path UNKNOWN "…") 100))

(setv FLOOR-SECRET-DIRS [".ssh" ".aws" ".gnupg"]
      FLOOR-SECRET-FILES [".env" ".env.*"]
      FLOOR-SECRET-PATHS ["/etc/shadow" "/etc/shadow-" "/etc/gshadow" "/etc/gshadow-"
                          "/proc/*/environ"]
      _templates #(".example" ".sample" ".template" ".dist" ".defaults" ".tmpl")
      _glob-re (re.compile r"[*?\[]")
      _glob-chars "*?[")

(defn _globby [s]
  (is-not (.search _glob-re s) None))

(defn _names-regex [names]
  "One compiled pattern matching any of the file-name globs NAMES, or None."
  (when names
    (re.compile (.join "|" (gfor n names (fnmatch.translate n))))))

(defn _name-set [names]
  "The file-name globs NAMES as _name-match reads them: the literal ones, and all
   of them compiled."
  #((tuple (gfor n names :if (not (_globby n)) n)) (_names-regex names)))

(defn _dirs-regex [names]
  "A pattern finding a component named one of the literal NAMES in a path."
  (when names
    (re.compile (+ "(?:^|/)(" (.join "|" (gfor n names (re.escape n))) ")(?:/|$)"))))

(defn _literal-prefix [pattern]
  (setv i 0)
  (while (and (< i (len pattern)) (not (in (get pattern i) (+ _glob-chars UNKNOWN))))
    (+= i 1))
  (cut pattern i))

(defn _comp-match [p s]
  "Whether the path component P may name the secret component S: True, \"maybe\" or False."
  (setv unknown (in UNKNOWN p)
        pattern (.replace p UNKNOWN "*"))
  (cond (= pattern "*") (cond (_globby s) True
                              unknown False
                              True (not (.startswith s ".")))
        (and (_globby pattern) (_globby s)) (if unknown "maybe" True)
        (_globby pattern)
        (cond (and (.startswith s ".") (not (.startswith pattern ".")) (not unknown)) False
              (fnmatch.fnmatchcase s pattern) (if unknown "maybe" True)
              True False)
        (_globby s) (fnmatch.fnmatchcase p s)
        True (= p s)))

(defn _name-match [comp name-set]
  "Whether the path component COMP may be one of the names of NAME-SET (see
   _name-set). A glob counts only when its fixed start covers at least half of
   the name, and only against the literal names."
  (setv [literals regex] name-set
        unknown (in UNKNOWN comp)
        pattern (.replace comp UNKNOWN "*"))
  (if (_globby pattern)
      (do (setv prefix (_literal-prefix comp))
          (for [n literals]
            (when (and (>= (len prefix) (max 2 (// (+ (len n) 1) 2)))
                       (.startswith n prefix)
                       (fnmatch.fnmatchcase n pattern))
              (return (if unknown "maybe" True))))
          False)
      (if regex
          (is-not (.match regex comp) None)
          False)))

(defn _under [comps anchor]
  "Whether the path COMPS lies in ANCHOR (components): True, \"maybe\" or False."
  (when (< (len comps) (len anchor)) (return False))
  (setv result True)
  (for [[p s] (zip comps anchor)]
    (setv m (if (= p s) True (_comp-match p s)))
    (when (not m) (return False))
    (when (= m "maybe") (setv result "maybe")))
  result)

(defn _comps [path]
  (lfor c (.split path "/") :if c c))

(setv _secret-name-regex (_names-regex SECRET-PATTERNS))

(defn _secret-index [pc rules]
  (setv home (get pc "home")
        anchors [])
  (when home
    (for [d FLOOR-SECRET-DIRS]
      (.append anchors #((_comps (posixpath.join home d)) f"~/{d}" REJECT "floor-secret-read"))))
  (for [p FLOOR-SECRET-PATHS]
    (.append anchors #((_comps p) p REJECT "floor-secret-read")))
  (for [p (get pc "protected")]
    (.append anchors #((_comps p) f"{p} (the daemon's own files)" REJECT "floor-secret-read")))
  (for [p (get rules "secret-anchored")]
    (cond (.startswith p "~/")
          (when home
            (.append anchors #((_comps (posixpath.join home (cut p 2 None))) p REJECT "secret-paths")))
          (.startswith p "/") (.append anchors #((_comps p) p REJECT "secret-paths"))))
  (setv startup (_startup-set home)
        by-first {}
        glob-first (lfor a anchors :if (and (get a 0) (_globby (get (get a 0) 0))) a))
  (for [a anchors]
    (.append (.setdefault by-first (if (get a 0) (get (get a 0) 0) "") []) a))
  {"anchors" anchors
   "memo" {}
   "by-first" by-first
   "by-second" (_by-second by-first)
   "glob-first" glob-first
   "startup" startup
   "startup-prefixes" (tuple startup)
   "floor-dirs-path" (_dirs-regex FLOOR-SECRET-DIRS)
   "rule-dirs-path" (_dirs-regex (get rules "secret-dirs"))
   "floor-dirs" (_name-set FLOOR-SECRET-DIRS)
   "rule-dirs" (_name-set (get rules "secret-dirs"))
   "floor-files" (_name-set FLOOR-SECRET-FILES)
   "rule-files" (_name-set (get rules "secret-files"))})

(defn _by-second [by-first]
  "The anchors of each group of BY-FIRST a path may lie in, by the path's plain
   second component: #(first second) holds those whose second component is
   SECOND or a glob, or that have only one; #(first None) the last two kinds."
  (setv found {})
  (for [[first group] (.items by-first)]
    (defn any-second [a]
      (or (< (len (get a 0)) 2) (_globby (get (get a 0) 1))))
    (setv (get found #(first None)) (lfor a group :if (any-second a) a))
    (for [second (sfor a group :if (not (any-second a)) (get (get a 0) 1))]
      (setv (get found #(first second))
            (lfor a group :if (or (any-second a) (= (get (get a 0) 1) second)) a))))
  found)

(defn _file-secret [name pc rules]
  "The (severity description rule) for the file name NAME, or None."
  (setv index (get pc "secrets")
        floor (_name-match name (get index "floor-files")))
  (when (and floor (not (.endswith (.lower name) _templates)))
    (return #((if (= floor "maybe") ESCALATE REJECT) "a .env file" "floor-secret-read")))
  (setv m (_name-match name (get index "rule-files")))
  (when m
    (return #((if (= m "maybe") ESCALATE REJECT) f"{name}, a file that holds credentials" "secret-paths")))
  (when (and (not (_globby (.replace name UNKNOWN "*")))
             (.match _secret-name-regex (.lower name)))
    (return #(ESCALATE f"{name}, a file that usually holds secrets" "secret-files")))
  None)

(defn _secret-of [path pc rules]
  "How the absolute PATH touches a secret location: (severity description rule), or None."
  (_kept (get (get pc "secrets") "memo") path _find-secret path pc rules))

(setv _dirs-paths #(#("floor-dirs-path" "floor-secret-read") #("rule-dirs-path" "secret-paths")))

(defn _find-secret [path pc rules]
  (setv comps (_comps path)
        index (get pc "secrets")
        first (if comps (get comps 0) "")
        second (when (> (len comps) 1) (get comps 1))
        candidates (cond (or (_globby first) (in UNKNOWN first))
                         (get index "anchors")
                         (and second (not (_globby second)) (not (in UNKNOWN second)))
                         (+ (.get (get index "by-second") #(first second)
                                  (.get (get index "by-second") #(first None) []))
                            (get index "glob-first"))
                         True
                         (+ (.get (get index "by-first") first []) (get index "glob-first"))))
  (for [[anchor what severity rule] candidates]
    (setv m (_under comps anchor))
    (when m
      (return #((if (= m "maybe") ESCALATE severity) what rule))))
  (when (not (or (_globby path) (in UNKNOWN path)))
    (for [[key rule] _dirs-paths]
      (setv m (and (get index key) (.search (get index key) path)))
      (when m (return #(REJECT f"a {(.group m 1)} folder" rule))))
    (return (when comps (_file-secret (get comps -1) pc rules))))
  (for [c comps]
    (setv m (_name-match c (get index "floor-dirs")))
    (when m (return #((if (= m "maybe") ESCALATE REJECT) f"a {c} folder" "floor-secret-read")))
    (setv m (_name-match c (get index "rule-dirs")))
    (when m (return #((if (= m "maybe") ESCALATE REJECT) f"a {c} folder" "secret-paths"))))
  (when comps
    (_file-secret (get comps -1) pc rules)))

(defn _holds-secret [path pc rules]
  "The secret location inside the folder PATH (read recursively), or None."
  (setv comps (_comps path))
  (for [[anchor what severity rule] (get (get pc "secrets") "anchors")]
    (when (and (< (len comps) (len anchor)) (_under anchor comps))
      (return #(severity what rule))))
  None)

(setv HARMLESS-DEVICES #{"/dev/null" "/dev/zero" "/dev/full" "/dev/tty" "/dev/stdout"
                         "/dev/stderr" "/dev/stdin" "/dev/random" "/dev/urandom"}
      STARTUP-FILES [".bashrc" ".bash_profile" ".bash_login" ".bash_logout" ".profile"
                     ".zshrc" ".zshenv" ".zprofile" ".zlogin" ".zlogout" ".kshrc" ".mkshrc"
                     ".cshrc" ".tcshrc" ".login" ".logout" ".xprofile" ".xinitrc" ".xsession"
                     ".xsessionrc" ".pam_environment" ".config/fish" ".config/autostart"
                     ".config/environment.d" ".config/systemd/user" ".config/plasma-workspace/env"]
      STARTUP-PATHS ["/etc/profile" "/etc/profile.d" "/etc/bash.bashrc" "/etc/bashrc"
                     "/etc/zshrc" "/etc/zsh" "/etc/zprofile" "/etc/environment" "/etc/sudoers"
                     "/etc/sudoers.d" "/etc/crontab" "/etc/cron.d" "/etc/cron.hourly"
                     "/etc/cron.daily" "/etc/cron.weekly" "/etc/cron.monthly" "/etc/anacrontab"
                     "/var/spool/cron" "/var/spool/anacron" "/etc/rc.local" "/etc/init.d"
                     "/etc/systemd/system" "/etc/ld.so.preload" "/etc/ld.so.conf.d"
                     "/Library/LaunchAgents" "/Library/LaunchDaemons"])

(defn _device [path]
  (and (.startswith path "/dev/")
       (not (in path HARMLESS-DEVICES))
       (not (.startswith path "/dev/fd/"))
       (not (.startswith path "/dev/pts/"))))

(defn _startup-set [home]
  "A dict from every start-up location (for the home folder HOME) to its name."
  (setv found (dfor p STARTUP-PATHS p p))
  (when home
    (for [f (+ STARTUP-FILES ["Library/LaunchAgents"])]
      (setv (get found (posixpath.join home f)) f"~/{f}")))
  found)

(defn _startup [path pc]
  "The start-up, cron or sudoers location PATH is in, or None."
  (setv index (get pc "secrets")
        places (get index "startup"))
  ;; every folder the loop visits is a prefix of PATH: most paths have none
  (when (not (.startswith path (get index "startup-prefixes")))
    (return None))
  (while True
    (when (in path places) (return (get places path)))
    (setv parent (posixpath.dirname path))
    (when (= parent path) (return None))
    (setv path parent)))

(defn _guarded [real pc rules]
  (setv ws (get pc "ws-real"))
  (or (runs-later real ws)
      (runs-later real ws (get rules "guarded-writes"))))

(defn _place-of-unknown [path pc what rule]
  "The verdict for writing or deleting PATH, part of which is unknown."
  (setv prefix (cut path (.index path UNKNOWN))
        folder (cut prefix (+ (.rfind prefix "/") 1)))
  (when (and folder (!= folder "/"))
    (setv [ok reason] (_resolve folder pc))
    (when (not ok)
      (return [REJECT f"{what} {(_shown path)}: {reason}" rule])))
  [ESCALATE f"{what} {(_shown path)}, a path only known when the command runs" "floor-unknown-path"])

(defn _write-verdict [path maybe given pc rules what rule]
  (when maybe (return (_place-of-unknown path pc what rule)))
  (when (_device path)
    (return [REJECT f"{what} the device {path}" "floor-device-write"]))
  (when (or (in path HARMLESS-DEVICES) (.startswith path "/dev/fd/") (.startswith path "/dev/pts/"))
    (return [ALLOW None rule]))
  (setv startup (_startup path pc))
  (when startup
    (return [REJECT f"{what} {startup}, which runs commands later (start-up files, crontabs and sudoers are never written)" "floor-startup-files"]))
  (setv [ok real] (_resolve given pc))
  (when (not ok)
    (return [REJECT f"{what} {(_shown path)}: {real}" rule]))
  (setv startup (_startup real pc))
  (when startup
    (return [REJECT f"{what} {startup} (through {(_shown path)}), which runs commands later" "floor-startup-files"]))
  (setv guarded (_guarded real pc rules))
  (when guarded
    (return [ESCALATE f"{what} {(_shown path)} in {guarded}, which runs commands later, unseen" "guarded-writes"]))
  (when (or (_secret-of real pc rules) (_secret-of path pc rules))
    (return [ESCALATE f"{what} {(_shown path)}, a file that usually holds secrets" "secret-files"]))
  [ALLOW None rule])

(defn _judge-write [text rec pc rules what rule]
  (lfor [path maybe given] (_concrete text (get rec "cwd") pc)
        (_write-verdict path maybe given pc rules what rule)))

(setv SYSTEM-DIRS #{"/" "/bin" "/boot" "/dev" "/etc" "/home" "/lib" "/lib32" "/lib64" "/libx32"
                    "/media" "/mnt" "/opt" "/proc" "/root" "/run" "/sbin" "/srv" "/sys" "/tmp"
                    "/usr" "/var" "/var/tmp" "/snap" "/nix" "/usr/bin" "/usr/sbin" "/usr/lib"
                    "/usr/local" "/usr/share" "/usr/include" "/usr/local/bin" "/var/lib"
                    "/var/log" "/var/cache" "/var/spool" "/var/mail" "/etc/ssh" "/Applications"
                    "/Library" "/System" "/Users" "/Volumes" "/private" "/cores"})

(defn _strip-wildcards [path]
  (while (and (!= path "/") (re.fullmatch r"[*?.]*[*?][*?.]*" (posixpath.basename path)))
    (setv path (posixpath.dirname path)))
  path)

(defn _catastrophic [path pc]
  "(severity reason) when deleting PATH would be a disaster, or None."
  (setv base (_strip-wildcards path)
        home (get pc "home")
        ws (get pc "ws")
        temps (get pc "temps"))
  (for [p (if (_globby base) [base] [base (_realpath base pc)])]
    (setv in-temp (any (gfor t temps (path-inside p t))))
    (cond (= p "/") (return #(REJECT "it is the root of the file system"))
          (and home (= p home)) (return #(REJECT "it is the home folder"))
          (and (or (in p SYSTEM-DIRS) (= (.count p "/") 1))
               (not (and (!= base path) (in p temps))))
          (return #(REJECT f"{p} is a system folder"))
          (and home (path-inside home p)) (return #(REJECT "it holds the home folder"))
          (and (!= p ws) (path-inside ws p))
          (return #((if in-temp ESCALATE REJECT) "it holds the workspace"))))
  None)

(defn _delete-verdict [path maybe given pc recursive what rule]
  (when maybe (return (_place-of-unknown path pc what rule)))
  (setv disaster (_catastrophic path pc))
  (when (and disaster (= (get disaster 0) REJECT))
    (return [REJECT f"{what} {(_shown path)}: {(get disaster 1)}" "floor-delete"]))
  (setv [ok real] (_resolve given pc)
        ws (get pc "ws-real"))
  (cond (not ok) [REJECT f"{what} {(_shown path)}: {real}" rule]
        disaster [(get disaster 0) f"{what} {(_shown path)}: {(get disaster 1)}" "floor-delete"]
        (in real (get pc "temps-real"))
        [REJECT f"{what} the temp folder {real} itself" rule]
        (or (= real ws) (= (_strip-wildcards real) ws))
        [ESCALATE f"{what} the workspace itself{(if (= real ws) "" ", all of it")}" rule]
        True [ALLOW None rule]))

(defn _judge-delete [text rec pc recursive what rule]
  (lfor [path maybe given] (_concrete text (get rec "cwd") pc)
        (_delete-verdict path maybe given pc recursive what rule)))

(defn _path-candidates [arg]
  (setv out [arg])
  (when (and (in "=" arg) (not (.startswith arg "=")))
    (.append out (get (.partition arg "=") 2)))
  (for [c (list out)]
    (when (and c (in (get c 0) "@<"))
      (.append out (cut c 1 None))))
  (when (.startswith arg "file://")
    (.append out (cut arg 7 None)))
  (when (and (in ":" arg) (not (in "://" arg)))
    (.extend out (.split arg ":")))
  (lfor c out :if c (if (.startswith c "~") (_tilde c) c)))

(defn _named-paths [arg cwds pc rules]
  "Every path the argument ARG may name in the folders CWDS, as (path maybe
   secret startup): the secret location it touches (_secret-of) and the start-up
   file it lies in when all of it is known. The read check and the floor's
   start-up check both ask, so the answer is kept per context, by word."
  (_kept (get pc "named") #(arg (tuple cwds)) _find-named-paths arg cwds pc rules))

(defn _find-named-paths [arg cwds pc rules]
  (tuple (gfor c (_path-candidates arg)
               [path maybe _] (_concrete c cwds pc)
               #(path maybe (_secret-of path pc rules) (when (not maybe) (_startup path pc))))))

(defn _read-verdicts [arg rec pc rules [rule None]]
  (setv out [])
  (for [[path maybe found _] (_named-paths arg (get rec "cwd") pc rules)]
    ;; /proc/self is whichever process reads it: the command's own, not the gate's
    (when (and (not found) (not maybe) (not (.startswith arg "-")) (not (_globby path))
               (not (.startswith path #("/proc/self" "/proc/thread-self" "/dev/fd" "/dev/std")))
               (_lexists path))
      (setv real (_realpath path pc))
      (when (!= real path)
        (setv found (_secret-of real pc rules))))
    (when found
      (setv [severity what by] found)
      (.append out [severity f"reads {what} ({(_shown path)})" (or rule by)])))
  out)

(defn _tree-verdicts [arg rec pc rules rule]
  (setv out [])
  (for [[path maybe _] (_concrete arg (get rec "cwd") pc)]
    (when (not maybe)
      (setv found (_holds-secret path pc rules))
      (when found
        (setv [severity what by] found)
        (.append out [severity f"reads everything under {(_shown path)}, which holds {what}" by]))))
  out)

(defn _positional [mode ops]
  (cond (= mode "operands") ops
        (= mode "all-but-last") (if (>= (len ops) 2) (cut ops -1) [])
        (= mode "last") (if (>= (len ops) 2) (cut ops -1 None) [])
        (= mode "first") (cut ops 1)
        (= mode "second") (cut ops 1 2)
        True []))

(defn _judge-nested [text pc rules nest what rule]
  "The verdicts of the command line TEXT that WHAT runs: only those that stop it."
  (+= (get pc "nested") 1)
  (when (or (>= nest MAX-NEST) (> (get pc "nested") MAX-JUDGED))
    (return [[REJECT f"{what}: command strings are nested too deep, or too many to judge" "floor-too-deep"]]))
  (when (or (in "\x00" text) (> (len text) MAX-BYTES))
    (return [[REJECT f"{what} runs a command line that cannot be judged" "floor-too-long"]]))
  (setv [verdicts _] (_judge-out (analyse text) pc rules (+ nest 1))
        worst (_worst verdicts))
  (if worst
      [[(get worst 0) f"{what} runs {(get worst 1)}" (get worst 2)]]
      []))

(defn _effects [rule rec parsed pc rules nest]
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
      (.extend out (_judge-nested (cut v (len prefix) None) pc rules nest o name))))
  (when (= (get rule "script") "sed")
    (.extend out (_judge-sed rec parsed pc rules nest name targets)))
  #(out targets))

(defn sed-effects [script]
  "What the sed SCRIPT does besides editing text, or None when it cannot be read:
   {\"runs\" bool \"writes\" [files] \"reads\" [files]}.
   (sed-effects \"s/a/b/w out.txt\") ⇒ {\"runs\" False \"writes\" [\"out.txt\"] \"reads\" []}"
  (setv s script
        n (len s)
        i 0
        found {"runs" False "writes" [] "reads" []})
  (defn blank [i]
    (while (and (< i n) (in (get s i) " \t")) (+= i 1))
    i)
  (defn eol [i]
    (setv j (.find s "\n" i))
    (if (< j 0) n j))
  (defn upto [i stops]
    (while (and (< i n) (not (in (get s i) stops))) (+= i 1))
    i)
  (defn delimited [i delim]
    (while (< i n)
      (setv c (get s i))
      (cond (= c "\\") (+= i 2)
            (= c delim) (return (+ i 1))
            (= c "\n") (return None)
            True (+= i 1)))
    None)
  (defn regex-flags [i]
    (while (and (< i n) (in (get s i) "IM")) (+= i 1))
    i)
  (defn address [i]
    (when (>= i n) (return i))
    (setv c (get s i))
    (cond (.isdigit c) (do (while (and (< i n) (or (.isdigit (get s i)) (= (get s i) "~"))) (+= i 1))
                           i)
          (= c "$") (+ i 1)
          (= c "/") (do (setv j (delimited (+ i 1) "/"))
                        (if (is j None) None (regex-flags j)))
          (= c "\\") (if (< (+ i 1) n)
                         (do (setv j (delimited (+ i 2) (get s (+ i 1))))
                             (if (is j None) None (regex-flags j)))
                         None)
          (in c "+~") (do (+= i 1)
                          (while (and (< i n) (.isdigit (get s i))) (+= i 1))
                          i)
          True i))
  (while True
    (while (and (< i n) (in (get s i) " \t\n;")) (+= i 1))
    (when (>= i n) (break))
    (when (= (get s i) "#") (setv i (eol i)) (continue))
    (when (= (get s i) "}") (+= i 1) (continue))
    (setv i (address i))
    (when (is i None) (return None))
    (when (and (< i n) (= (get s i) ","))
      (setv i (address (blank (+ i 1))))
      (when (is i None) (return None)))
    (setv i (blank i))
    (while (and (< i n) (= (get s i) "!")) (setv i (blank (+ i 1))))
    (when (>= i n) (return None))
    (setv c (get s i)
          i (+ i 1))
    (cond
      (= c "{") (continue)
      (in c "qQlL") (do (setv i (blank i))
                        (while (and (< i n) (.isdigit (get s i))) (+= i 1)))
      (in c "=dDgGhHnNpPxzF") None
      (in c "aic")
      (do (while (and (< i n) (!= (get s i) "\n"))
            (+= i (if (= (get s i) "\\") 2 1)))
          (continue))
      (in c ":btTv") (do (setv i (upto i ";\n")) (continue))
      (in c "rRwW")
      (do (setv start (blank i)
                i (eol i))
          (.append (get found (if (in c "rR") "reads" "writes")) (.strip (cut s start i)))
          (continue))
      (= c "e") (do (setv (get found "runs") True
                          i (eol i))
                    (continue))
      (in c "sy")
      (do (when (or (>= i n) (in (get s i) "\n\\")) (return None))
          (setv delim (get s i)
                i (delimited (+ i 1) delim))
          (when (is i None) (return None))
          (setv i (delimited i delim))
          (when (is i None) (return None))
          (when (= c "s")
            (while (and (< i n) (in (get s i) "gpiImMe0123456789w"))
              (when (= (get s i) "e") (setv (get found "runs") True))
              (when (= (get s i) "w")
                (setv start (blank (+ i 1))
                      i (eol i))
                (.append (get found "writes") (.strip (cut s start i)))
                (break))
              (+= i 1))))
      True (return None))
    (setv i (blank i))
    (when (and (< i n) (not (in (get s i) ";\n}#")))
      (return None)))
  found)

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
    (.append out [ESCALATE f"sed reads its script from {f}, which the gate cannot see" rule]))
  (for [script scripts]
    (setv effects (sed-effects script))
    (cond (is effects None)
          (.append out [ESCALATE "the sed script cannot be read" rule])
          (not sandbox)
          (do (when (get effects "runs")
                (.append out [ESCALATE "sed's e command runs a shell command" rule]))
              (for [f (get effects "writes")]
                (.extend out (_judge-write f rec pc rules "sed writes" rule)))
              (for [f (get effects "reads")]
                (.extend out (_read-verdicts f rec pc rules))))))
  (when (or (in "-i" names) (any (gfor n names (.startswith n "--in-place"))))
    (for [f ops]
      (.add targets f)
      (.extend out (_judge-write f rec pc rules "edits in place" rule))))
  out)

(setv _git-config-values #{"-f" "--file" "--blob" "--type" "--default" "--comment" "--value"}
      _git-config-reads #{"-l" "--list" "--unset" "--unset-all" "--remove-section"
                          "--rename-section" "-e" "--edit" "--show-origin" "--show-scope"
                          "--name-only" "get" "list" "unset" "edit" "remove-section"
                          "rename-section"})

(defn _git-setting [kv pc rules nest]
  (setv [key _ value] (.partition kv "=")
        key (.lower key))
  (cond (any (gfor g (get rules "git-command") (fnmatch.fnmatchcase key g)))
        (_judge-nested (cond (not (.startswith key "alias.")) value
                             (.startswith value "!") (cut value 1 None)
                             True (+ "git " value))
                       pc rules nest f"git's {key}" "git-command-config")
        (any (gfor g (get rules "git-escalate") (fnmatch.fnmatchcase key g)))
        [[ESCALATE f"git's {key} loads hooks, configuration or code from elsewhere" "git-escalate-config"]]
        True []))

(defn _git-verdicts [rec pc rules nest]
  (setv args (cut (get rec "argv") 1 None)
        values (get (_spec rules "git") "value")
        out []
        i 0
        n (len args))
  (while (< i n)
    (setv a (get args i))
    (cond (= a "-c") (do (when (< (+ i 1) n)
                           (.extend out (_git-setting (get args (+ i 1)) pc rules nest)))
                         (+= i 2))
          (.startswith a "-c") (do (.extend out (_git-setting (cut a 2 None) pc rules nest))
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
      (.extend out (_git-setting f"{(get ops 0)}={(get ops 1)}" pc rules nest))))
  out)

(setv DELETERS #{"rm" "rmdir" "unlink" "shred" "srm" "wipe"}
      MKFS #{"mke2fs" "mkdosfs" "mkntfs" "mkswap" "newfs" "wipefs" "mkfs"}
      SHUTDOWN #{"shutdown" "reboot" "halt" "poweroff"}
      DOWNLOADERS #{"curl" "wget" "fetch" "aria2c" "axel" "http" "https" "xh" "xhs" "httpie"
                    "lwp-request" "GET" "POST" "HEAD" "lynx" "w3m" "links" "elinks" "nc" "ncat"
                    "netcat" "socat" "telnet" "openssl" "ftp" "tftp" "scp" "sftp" "ssh" "gh"}
      INTERPRETERS ["python*" "pypy*" "perl" "perl5*" "ruby" "ruby[0-9]*" "irb" "jruby" "node"
                    "nodejs" "deno" "bun" "php" "php[0-9]*" "lua" "lua[0-9]*" "luajit" "tclsh*"
                    "wish*" "Rscript" "R" "julia" "osascript" "pwsh" "powershell*" "jshell"
                    "groovy" "scala" "elixir" "iex" "erl" "escript" "guile*" "racket" "sbcl"
                    "clisp" "ocaml" "swift" "expect" "hy" "bb"]
      READERS #{"cat" "head" "tail" "less" "more" "grep" "egrep" "fgrep" "rg" "ag" "ls" "wc"
                "stat" "file" "diff" "cmp" "md5sum" "sha1sum" "sha256sum" "sha512sum" "b2sum"
                "cksum" "echo" "printf" "test" "[" "readlink" "realpath" "basename" "dirname"
                "bat" "od" "xxd" "hexdump" "strings" "du" "find" "tree" "source" "." "nl"}
      PRINTERS #{"echo" "printf" "true" "false" ":"}
      KNOWN (| SHELLS DELETERS PRINTERS #{"find" "cd" "pushd" "popd" "eval" "trap" "alias" "source"
                                         "." "git" "kill" "dd" "crontab"})
      _inline-long #{"--eval" "--print" "--command" "--expr" "--execute" "--code"})

(setv _interpreter-regex (_names-regex INTERPRETERS))

(defn [(functools.lru-cache :maxsize MEMO-SIZE)] _interpreter [name]
  "True when NAME is an interpreter's (kept by name: it is asked of every command)."
  (is-not (.match _interpreter-regex name) None))

(defn _reads-program [rec parsed]
  "True when the interpreter REC takes its program from its standard input."
  (setv name (get rec "name"))
  (cond (in name SHELLS) (get rec "reads-stdin")
        (in name #("source" ".")) (in (get rec "script") #("/dev/stdin" "-" "/proc/self/fd/0"))
        (= name "eval") False
        True (do (for [[o _] (get parsed "opts")]
                   (when (or (in o _inline-long)
                             (and (= (len o) 2) (in (get o 1) "ceEmr")))
                     (return False)))
                 (setv ops (get parsed "operands"))
                 (or (not ops) (in (get ops 0) #("-" "/dev/stdin"))))))

(defn _kill-everything [args]
  "\"yes\" when the kill ARGS target PID 1 or every process, \"maybe\" when a target is unknown."
  (setv i 0
        signal None)
  (when (and args (in (get args 0) #("-s" "-n")))
    (setv i 2))
  (when (and args (= i 0) (.startswith (get args 0) "-") (not (in (get args 0) #("--" "-l" "-L"))))
    (setv signal (get args 0)
          i 1))
  (setv ops (cut args i None))
  (when (and ops (= (get ops 0) "--")) (setv ops (cut ops 1 None)))
  (cond (any (gfor o ops (in o #("1" "-1")))) "yes"
        (and (not ops) (= signal "-1")) "yes"
        (any (gfor o ops (in UNKNOWN o))) "maybe"
        True None))

(defn _floor [rec parsed pc rules nest]
  (setv name (get rec "name")
        args (cut (get rec "argv") 1 None)
        ops (get parsed "operands")
        out [])
  (when (in name DELETERS)
    (setv recursive (or (get rec "tree")
                        (_entry-holds ["-r" "-R" "--recursive"] parsed)))
    (for [o ops]
      (.extend out (_judge-delete o rec pc recursive "deletes" "floor-delete"))))
  (when (or (in name MKFS) (.startswith name #("mkfs." "newfs_")))
    (.append out [REJECT "makes a file system, erasing a disk" "floor-mkfs"]))
  (when (= name "dd")
    (for [a args]
      (when (.startswith a "of=")
        (for [[path maybe _] (_concrete (cut a 3 None) (get rec "cwd") pc)]
          (when (_device path)
            (.append out [REJECT f"writes onto the device {path}" "floor-device-write"]))))))
  (when (= name "kill")
    (setv everything (_kill-everything args))
    (cond (= everything "yes")
          (.append out [REJECT "kills PID 1 or every process" "floor-kill-all"])
          (= everything "maybe")
          (.append out [ESCALATE "kills a process only known when the command runs" "floor-kill-all"])))
  (when (or (in name SHUTDOWN)
            (and (in name #("init" "telinit")) (& (set ops) #{"0" "6"}))
            (and (in name #("systemctl" "loginctl")) ops
                 (in (get ops 0) #("poweroff" "reboot" "halt" "kexec" "soft-reboot"))))
    (.append out [REJECT "shuts down or restarts the machine" "floor-shutdown"]))
  (when (and (= name "crontab") (not (in "-l" (get parsed "names"))))
    (.append out [REJECT "installs or removes scheduled commands" "floor-startup-files"]))
  (when (not (in name READERS))
    (for [a args
          [path maybe _ startup] (_named-paths a (get rec "cwd") pc rules)]
      (when startup
        (.append out [REJECT f"touches {startup}, which runs commands later (start-up files, crontabs and sudoers are never changed)" "floor-startup-files"]))))
  (when (or (in name SHELLS) (_interpreter name) (in name #("eval" "source" ".")))
    (.extend out (_interpreter-verdicts rec parsed)))
  out)

(defn _interpreter-verdicts [rec parsed]
  (setv name (get rec "name")
        out []
        piped (or (get rec "piped") (frozenset))
        feeds (lfor [kind _] (get rec "stdin") kind)
        downloads (sorted (| (& piped DOWNLOADERS) (& (get rec "inner") DOWNLOADERS))))
  (when (and (_reads-program rec parsed) (not (in "file" feeds)))
    (cond (and piped (& piped DOWNLOADERS))
          (.append out [REJECT f"pipes what {(.join ", " (sorted (& piped DOWNLOADERS)))} downloads into {name}" "floor-download-to-interpreter"])
          piped
          (.append out [ESCALATE f"pipes commands the gate cannot see into {name}" "floor-pipe-to-interpreter"])
          (and (not (in name SHELLS)) (& (set feeds) #{"heredoc" "herestring"}))
          (.append out [ESCALATE f"runs {name} code given inline on its input" "interpreter-inline"])))
  (setv script (get rec "script")
        computed (or (get rec "dynamic-code")
                     (and script (.startswith script "/dev/fd/"))
                     (any (gfor a (cut (get rec "argv") 1 None)
                                (or (in UNKNOWN a) (.startswith a "/dev/fd/"))))))
  (when (and computed (& (get rec "inner") DOWNLOADERS))
    (.append out [REJECT f"runs as {name} code what {(.join ", " downloads)} downloads" "floor-download-to-interpreter"]))
  (when (get rec "dynamic-code")
    (.append out [ESCALATE f"{name} runs a command line only known when it runs" "floor-dynamic-code"]))
  (when (and script (.startswith script "/dev/fd/"))
    (.append out [ESCALATE f"{name} runs a script another command produces" "floor-dynamic-code"]))
  out)

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

(setv _search-path "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")

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
        [ESCALATE f"runs {run}, the daemon's control plane, which answers people, not the agent's own commands" "control-plane"]))

(defn _secret-search-verdicts [args pc]
  "find looking for secret files by name (-name id_rsa, -path '*/.ssh/*'): what
   it finds is a list of keys, whatever folder it starts in."
  (setv index (get pc "secrets")
        out [])
  (for [[a b] (zip args (cut args 1 None))]
    (when (in a _find-name-options)
      (setv comps (lfor c (.split b "/") :if c (.replace c "\\" "")))
      (when (any (gfor c comps
                       (or (_name-match c (get index "floor-dirs")) (_name-match c (get index "rule-dirs"))
                           (_name-match c (get index "rule-files")))))
        (.append out [ESCALATE f"find {a} {b} looks for files that hold secrets" "floor-secret-search"]))))
  out)

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

(defn _inline-code [argv]
  "True when the interpreter command ARGV is given its code on the command line
   (python -c, perl -e, node --eval, ruby -e …)."
  (for [a (cut argv 1 None)]
    (cond (= a "--") (return False)
          (not (.startswith a "-")) (return False)
          (in (get (.partition a "=") 0) _inline-long) (return True)
          (and (not (.startswith a "--")) (& (set (cut a 1 None)) #{"c" "e" "E"})) (return True)))
  False)

(defn _workspace-program [program rec pc]
  "True when the program file PROGRAM (a path) lies in the workspace, as it
   reads from every folder the command may run in."
  (setv found (_concrete program (get rec "cwd") pc))
  (and found
       (all (gfor [path maybe given] found
                  (and (not maybe) (path-inside (_realpath path pc) (get pc "ws-real")))))))

(defn [(functools.lru-cache :maxsize MEMO-SIZE)] _installed [name search-path]
  "True when a program NAME is found on SEARCH-PATH, the one commands run with:
   a name that is not (a, hello) can only fail with \"command not found\"."
  (is-not (shutil.which name :path search-path) None))

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
                        (not (_installed name (or (proto-get (get pc "ctx") ':search-path) _search-path)))
                        []
                        True
                        [[ESCALATE f"{name} is not a program the shell policy knows" "unknown-program"]])))
        (setv found (_kept (get rules "unmodelled") #(name (tuple args))
                           _unmodelled args entry (_rule-options rules name)))
        (cond (is found None) []
              (= (get found 0) "subcommand")
              [[ESCALATE f"{name} {(get found 1)} is a subcommand the shell policy has not modelled" "unmodelled-subcommand"]]
              True
              [[ESCALATE f"{name} {(get found 1)} is an option the shell policy has not modelled" "unmodelled-option"]]))))

(defn _judge-record [rec pc rules nest]
  "The verdicts for the recorded command REC, and the rule to name if it is allowed."
  (setv name (get rec "name"))
  (when (is name None)
    (return #([[ESCALATE "the program it runs is only known when it runs" "floor-dynamic-program"]]
              None)))
  (setv args (cut (get rec "argv") 1 None)
        parsed (parse-options args (_spec rules name))
        out []
        targets (set)
        allowed None
        matched False)
  (for [rule (_rules-about rules name parsed)]
    (when (rule-matches rule parsed)
      (setv matched True)
      (if (is-not (get rule "severity") None)
          (.append out [(get rule "severity") (get rule "reason") (get rule "name")])
          (do (setv [found judged] (_effects rule rec parsed pc rules nest))
              (.extend out found)
              (.update targets judged)))
      (when (is allowed None) (setv allowed (get rule "name")))))
  (.extend out (_floor rec parsed pc rules nest))
  (when (= name "git")
    (.extend out (_git-verdicts rec pc rules nest)))
  (when (not (or (get rec "launcher") (in name PRINTERS) (= name "eval")))
    (for [[i a] (enumerate args)]
      (when (and (not (in a targets)) (!= a (get rec "code")) (not (in i (get parsed "patterns"))))
        (.extend out (_read-verdicts a rec pc rules))))
    (when (get rec "tree")
      (for [o (get parsed "operands")]
        (.extend out (_tree-verdicts o rec pc rules "find-exec")))))
  (when (not (or matched (get rec "launcher") (in name KNOWN)))
    (.extend out (_default-verdicts rec pc rules)))
  (when (not (get rec "launcher"))
    (.extend out (_known-verdicts rec rules pc)))
  (when (= name "ln")
    (.extend out (_hard-link-verdicts rec parsed pc)))
  (when (= name "find")
    (.extend out (_secret-search-verdicts args pc)))
  (when (or (in name SHELLS) (_interpreter name) (in name #("source" ".")))
    (.extend out (_control-plane-verdicts rec rules)))
  (when (and (& (get rec "inner") COMPUTERS) (not (in name PRINTERS))
             (any (gfor a args (in UNKNOWN a))))
    (.append out [ESCALATE f"names a path that {(.join ", " (sorted (& (get rec "inner") COMPUTERS)))} computes when it runs, so what it reads is not known" "floor-computed-path"]))
  #(out (or allowed (if (get rec "launcher") None "known-program"))))

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

(defn _run-path [rec rules]
  "The script or program file the recorded command REC runs, if any."
  (setv name (get rec "name")
        argv (get rec "argv"))
  (cond (or (in name SHELLS) (in name #("source" "."))) (get rec "script")
        (_interpreter name)
        (do (setv ops (get (parse-options (cut argv 1 None) (_spec rules name)) "operands"))
            (when ops (get ops 0)))
        (in "/" (get argv 0)) (get argv 0)
        True None))

(setv BUILD-TOOLS #{"make" "gmake" "cmake" "ninja" "meson" "npm" "npx" "yarn" "pnpm" "bun" "cargo"
                    "go" "pytest" "tox" "nox" "rake" "bundle" "gradle" "gradlew" "mvn" "ant"
                    "just" "task" "pip" "pip3" "uv" "poetry" "pipenv" "hatch" "pdm" "deno"
                    "docker" "docker-compose" "podman" "bazel" "scons" "composer" "mix" "sbt"}
      _copy-writers #{"cp" "mv" "install" "ln" "tee" "dd"})

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
        written (when (> (len commands) 1) (set (_written out pc rules))))
  (for [rec commands]
    (setv run (when (or downloads written) (_run-path rec rules)))
    (when (and run downloads (& (set (_paths run rec pc)) (set downloads)))
      (.append verdicts [REJECT f"`{(get rec "text")}` — runs {run}, which this command line downloads" "floor-download-to-interpreter"]))
    (when (and run written (_runs-written (_paths run rec pc) written))
      (.append verdicts [ESCALATE f"`{(get rec "text")}` — runs {run}, which this same command line writes" "write-then-run"]))
    (when (and written (in (get rec "name") BUILD-TOOLS))
      (for [w written]
        (when (any (gfor b BUILD-FILES (fnmatch.fnmatchcase (posixpath.basename w) b)))
          (.append verdicts [ESCALATE f"`{(get rec "text")}` — {(get rec "name")} reads {(posixpath.basename w)}, which this same command line writes" "write-then-run"])
          (break)))))
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
  verdicts)

(defn _worst [verdicts]
  (setv worst None)
  (for [v verdicts]
    (when (and (> (get v 0) ALLOW) (or (is worst None) (> (get v 0) (get worst 0))))
      (setv worst v)))
  worst)

(defn _judge-out [out pc rules nest]
  "The verdicts of the analysis OUT, and the rule to name if all of them allow."
  (setv verdicts (list (get out "issues"))
        allowed None)
  (setv widest 0)
  (for [rec (get out "commands")]
    (setv [found name] (_judge-record rec pc rules nest)
          whole (or (get rec "text") (.join " " (get rec "argv"))))
    (setv text None)
    (for [[severity reason rule] found]
      (when (and reason (is text None))
        (setv text (_clip whole 60)))
      (.append verdicts [severity (when reason f"`{text}` — {reason}") rule]))
    (when (and name (> (len whole) widest))
      (setv allowed name
            widest (len whole))))
  (for [r (get out "redirects")]
    (for [[severity reason rule] (_redirect-verdicts r pc rules)]
      (.append verdicts [severity (when reason f"`{(get r "text")}` — {reason}") rule])))
  (for [a (get out "assigns")]
    (.extend verdicts (_assign-verdicts a pc rules nest)))
  (.extend verdicts (_line-verdicts out pc rules))
  #(verdicts allowed))

(setv _verdict-key ':verdict
      _reason-key ':reason
      _rule-key ':rule
      _reject ':reject
      _escalate ':escalate
      _allow ':allow)

(defn _verdict [severity reason rule]
  (cond (= severity REJECT) [_verdict-key _reject _reason-key reason _rule-key rule]
        (= severity ESCALATE) [_verdict-key _escalate _reason-key reason _rule-key rule]
        True [_verdict-key _allow _rule-key rule]))

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

(setv GIT-REMOTE #{"clone" "fetch" "pull" "ls-remote" "push" "submodule" "remote"})

(defn network-fetch [cmd]
  "True when the command line CMD runs a downloader or a git command that
   talks to a remote, so that its sandbox needs the network.
   (network-fetch \"curl -sS https://example.org\") ⇒ True"
  (when (not (and (isinstance cmd str) (.strip cmd) (not (in "\x00" cmd))
                  (not (_private-use-re.search cmd))
                  (<= (len (.encode cmd "utf-8" "surrogatepass")) MAX-BYTES)))
    (return False))
  (for [rec (get (analyse cmd) "commands")]
    (setv name (get rec "name"))
    (when (in name FETCHERS)
      (return True))
    (when (= name "git")
      (setv ops (get (parse-options (cut (get rec "argv") 1 None) (_spec RULES name)) "operands"))
      (when (and ops (in (get ops 0) GIT-REMOTE))
        (return True))))
  False)
