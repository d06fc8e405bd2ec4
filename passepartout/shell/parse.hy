;; * Why

"The shell gate judges what a command line would really do, so it first reads
the line as bash will. This module is that reading: the text becomes a syntax
tree, and each word of the tree the text its program will receive, with what
only the running shell knows kept as a marker. It also reads the one other
language a command line commonly hands a program, a sed script, and it holds
the limits that bound the whole gate's work."

;; ** Why tree-sitter

(import functools re threading
        itertools [islice product]
        tree-sitter [Language Parser]
        tree-sitter-bash)

;; * Limits

(setv MAX-BYTES 16384
      MAX-EXPANSION 65536
      MAX-DEPTH 150
      MAX-NEST 6
      MAX-NODES 40000
      MAX-COMMANDS 1000
      MAX-VARIANTS 32
      MAX-JUDGED 64
      MAX-BRACES 64
      CACHE-SIZE 4096
      TREE-CACHE-SIZE 1024
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

;; * Parsing

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

(setv _cached-tree ((functools.lru-cache :maxsize TREE-CACHE-SIZE) parse-tree))

(defn _text [node]
  (.decode node.text "utf-8" "replace"))

;; * Reading words

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

;; ** Alternatives

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

;; ** Variables

(defn _note-read [name st out]
  (when (not (in name (get st "env")))
    (setv reads (.get out "env-reads"))
    (when (is-not reads None) (.add reads name))))

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
  (setv indirect False)
  (for [c node.children]
    (cond (in c.type #("${" "}")) None
          (and (is name None) (in c.type #("#" "!")))
          (setv prefix True
                indirect (= c.type "!"))
          (and (is name None) (in c.type #("variable_name" "special_variable_name")))
          (setv name (_text c))
          (is name None) (setv prefix True)
          (and (is op None) (not c.is-named)) (setv op c.type)
          True (.append rest c)))
  (when name (_note-read name st out))
  ;; ${!n} reads the variable whose name n holds
  (when (and indirect name (is op None) (not rest))
    (for [v (_lookup name st)]
      (_note-read (if (re.fullmatch r"[A-Za-z_][A-Za-z0-9_]*" v) v f"!{name}") st out)))
  (cond (or prefix (is name None) (and (is-not op None) (not (in op (| _default-ops _alternate-ops _plain-ops)))))
        [UNKNOWN]
        (or (is op None) (in op _plain-ops)) (_variable name st quoted)
        (in op _default-ops)
        (_union (_variable name st quoted) (_join (lfor r rest (_readings r st True out)) out))
        True
        (_union [""] (_join (lfor r rest (_readings r st True out)) out))))

;; ** A word's readings

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
            (do (_note-read (get names 0) st out)
                (_variable (get names 0) st quoted))
            [UNKNOWN]))
    (= t "expansion") (_expansion node st quoted out)
    (= t "command_substitution")
    (lfor v (_printed node st out) (if quoted v (_split-fields v)))
    (= t "process_substitution") ["/dev/fd/63"]
    (= t "brace_expression") [(_text node)]
    True [UNKNOWN]))

;; ** What echo prints

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

;; ** Brace expansion

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

;; ** Argument lists

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

;; * sed scripts

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
