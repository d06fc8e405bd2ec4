;; * Why

"Everything that moves through Passepartout (a person's words, a model's proposal,
a gate's verdict, an actuator's result) is a property list: keywords alternating
with values. On the wire, in the store and in logs it is s-expression text; in
memory it is a Plist: the list of its pairs (hy.models.Keyword keys and plain
values: str, int, float, bool, None, nested lists and plists) that also
finds a field by name in one step and is never changed in place. No message has
behaviour of its own, so any stage can be replayed on recorded data."

;; ** Why a reader of our own

(import math re json
        functools [lru-cache]
        hy.models [Keyword])

;; * Errors and limits

(defclass ProtoError [ValueError]
  "Text that is not an acceptable message. POS is the offset where reading failed."
  (defn __init__ [self message [pos None]]
    (.__init__ (super) (if (is pos None) message f"{message} (at offset {pos})"))
    (setv self.reason message
          self.pos pos)))

(setv MAX-BYTES 65536
      MAX-DEPTH 32
      MAX-INT-DIGITS 4300)

;; * Reading

(setv _token-re (re.compile
                  (.join "|"
                         [r"(?P<ws>[ \t\r\n\f\v,]+)"
                          r"(?P<comment>;[^\n]*)"
                          r"(?P<open>\()"
                          r"(?P<close>\))"
                          #[re[(?P<string>"(?:[^"\\]|\\.)*")]re]
                          #[re[(?P<atom>[^\s()";]+)]re]])
                  re.S)
      _keyword-re (re.compile r"[A-Za-z0-9_*+!?<>=/&%$-]+\Z")
      _int-re (re.compile r"[+-]?[0-9]+\Z")
      _float-re (re.compile r"[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
      _escape-re (re.compile #[re[\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)]re] re.S)
      _simple-escapes {"n" "\n" "t" "\t" "r" "\r" "0" "\x00" "a" "\x07" "b" "\x08"
                       "f" "\x0c" "v" "\x0b" "\\" "\\" "\"" "\"" "'" "'" "\n" ""}
      _constants {"true" True "t" True "false" False "nil" None})

(setv _keyword ((lru-cache :maxsize 4096) Keyword)
      _atom-keywords {})

(defn _unescape [body pos]
  "The string BODY with its backslash escapes decoded."
  (defn decode [m]
    (setv e (.group m 1))
    (cond (in e _simple-escapes) (get _simple-escapes e)
          (in (get e 0) "xuU")
          (try (chr (int (cut e 1 None) 16))
               (except [ValueError]
                 (raise (ProtoError f"escape \\{e} is not a character" pos))))
          True (+ "\\" e)))
  (if (in "\\" body) (_escape-re.sub decode body) body))

(defn _atom [text pos]
  "The value of the bare token TEXT found at POS."
  (cond
    (.startswith text ":")
    (if (_keyword-re.match (cut text 1 None))
        (do (when (>= (len _atom-keywords) 4096) (.clear _atom-keywords))
            (setv k (_keyword (cut text 1 None))
                  (get _atom-keywords text) k)
            k)
        (raise (ProtoError f"malformed keyword {(_clip text)}" pos)))
    (_int-re.match text)
    (if (> (len (.lstrip text "+-")) MAX-INT-DIGITS)
        (raise (ProtoError f"integer of more than {MAX-INT-DIGITS} digits" pos))
        (int text))
    (_float-re.match text)
    (do (setv x (float text))
        (if (math.isfinite x)
            x
            (raise (ProtoError f"number {(_clip text)} is out of range" pos))))
    (in (.lower text) _constants) (get _constants (.lower text))
    (in (get text 0) "'`~#@^[]{}")
    (raise (ProtoError f"reader syntax {(_clip text)} is not data" pos))
    True
    (raise (ProtoError f"bare word {(_clip text)}: strings must be quoted" pos))))

(defn _clip [s [n 24]]
  "S cut short for an error message, lone surrogates written as escapes."
  (setv s (.decode (.encode (if (> (len s) n) (+ (cut s n) "…") s) "utf-8" "backslashreplace")
                   "utf-8"))
  s)

(defn _read-forms [text max-depth]
  "Yield each top-level value of TEXT."
  (setv where [0])
  (try
    (yield :from (_read-tokens text max-depth where))
    (except [ProtoError] (raise))
    (except [e Exception]
      (raise (ProtoError f"unreadable text ({(_clip (_describe e) 80)})" (get where 0))))))

(defn _describe [e]
  (try f"{(. (type e) __name__)}: {e}"
       (except [Exception] (. (type e) __name__))))

(defn _read-tokens [text max-depth where]
  "Yield each top-level value of TEXT, keeping the offset of the token being read in WHERE."
  (setv stack []
        opened []
        pos 0
        end (len text)
        token-at _token-re.match)
  (while (< pos end)
    (setv m (token-at text pos))
    (when (is m None)
      (raise (ProtoError (if (= (get text pos) "\"")
                             "unterminated string"
                             f"unexpected character {(_clip (repr (get text pos)))}")
                         pos)))
    (setv kind m.lastgroup
          start pos
          (get where 0) pos
          pos (.end m))
    (cond
      (= kind "ws") (continue)
      (= kind "atom")
      (setv value (or (.get _atom-keywords (cut text start pos))
                      (_atom (cut text start pos) start)))
      (= kind "open")
      (do (when (>= (len stack) max-depth)
            (raise (ProtoError f"nested deeper than {max-depth}" start)))
          (.append stack [])
          (.append opened start)
          (continue))
      (= kind "close")
      (do (when (not stack) (raise (ProtoError "unbalanced )" start)))
          (.pop opened)
          (setv value (_as-plist (.pop stack))))
      (= kind "string")
      (setv value (_unescape (cut text (+ start 1) (- pos 1)) start))
      True (continue))
    (if stack
        (.append (get stack -1) value)
        (yield value)))
  (when stack
    (raise (ProtoError "unbalanced (: the form is not closed" (get opened -1)))))

(defn _check-size [text max-bytes]
  (when (not (isinstance text str))
    (raise (ProtoError f"expected text, got {(. (type text) __name__)}")))
  (when (or (> (len text) max-bytes) (> (len (.encode text "utf-8" "surrogatepass")) max-bytes))
    (raise (ProtoError f"message larger than {max-bytes} bytes"))))

(defn proto-read [text [max-bytes None] [max-depth None]]
  "The one value written in TEXT, or a ProtoError.

   (proto-read \"(:type :event :payload (:text \\\"hi\\\"))\")"
  (setv max-bytes (or max-bytes MAX-BYTES)
        max-depth (or max-depth MAX-DEPTH))
  (_check-size text max-bytes)
  (setv forms (list (_read-forms text max-depth)))
  (cond (not forms) (raise (ProtoError "empty message"))
        (> (len forms) 1) (raise (ProtoError f"expected one form, found {(len forms)}"))
        True (get forms 0)))

(defn proto-read-all [text [max-bytes None] [max-depth None]]
  "Every value written in TEXT, in order."
  (setv max-bytes (or max-bytes MAX-BYTES)
        max-depth (or max-depth MAX-DEPTH))
  (_check-size text max-bytes)
  (list (_read-forms text max-depth)))

;; * Reading a stream

(setv _stream-re (re.compile
                   #[re[[ \t\r\n\f\v,]+|;[^\n]*|"(?:[^"\\\n]|\\[^\n]|\\?\n(?!\())*"?|\(|\)|[^\s()";]+|.]re]
                   re.S))

(defn _stream-tokens [text]
  "#(starts ends kinds): the tokens of TEXT that are not space or comments, each of kind
   \"(\", \")\" or \"x\"."
  (setv starts []
        ends []
        kinds [])
  (for [m (.finditer _stream-re text)]
    (setv c (get text (.start m)))
    (when (not (or (in c " \t\r\n\f\v,") (= c ";")))
      (.append starts (.start m))
      (.append ends (.end m))
      (.append kinds (if (in c "()") c "x"))))
  #(starts ends kinds))

(defn proto-read-each [text [convert None] [max-bytes None] [max-depth None]]
  "Yield #(offset chunk value error) for each proposal-sized chunk of TEXT: VALUE is
   what was read (passed through CONVERT when given) and ERROR None, or VALUE is None
   and ERROR the ProtoError that says why the chunk is refused."
  (setv max-bytes (or max-bytes MAX-BYTES)
        [starts ends kinds] (_stream-tokens text)
        n (len starts)
        closes (* [-1] n)
        pending [])
  (for [i (range n)]
    (setv k (get kinds i))
    (cond (= k "(") (.append pending i)
          (and (= k ")") pending) (setv (get closes (.pop pending)) i)))
  ;; line-opens[i]: the first token after i that is a ( in the first column, or n.
  (setv line-opens (* [n] (+ n 1))
        following n)
  (for [i (range (- n 1) -1 -1)]
    (setv (get line-opens i) following)
    (setv s (get starts i))
    (when (and (= (get kinds i) "(") (or (= s 0) (= (get text (- s 1)) "\n")))
      (setv following i)))
  (defn upto [i] (if (< i n) (get starts i) (len text)))
  (defn read [s e]
    (setv chunk (cut text s (min e (+ s max-bytes 1))))
    (try
      (setv value (proto-read chunk max-bytes max-depth))
      (when convert (setv value (convert value)))
      #(s chunk value None)
      (except [err ProtoError]
        #(s chunk None err))
      (except [err Exception]
        #(s chunk None (ProtoError f"refused: {(_clip (_describe err) 80)}")))))
  (setv i 0)
  (while (< i n)
    (setv s (get starts i)
          j (get closes i))
    (if (< j 0)
        (do (setv stop (get line-opens i))
            (yield (read s (upto stop)))
            (setv i stop))
        (do (setv e (get ends j)
                  after (+ j 1))
            (if (and (< after n) (!= (get kinds after) "(")
                     (= (.find text "\n" e (get starts after)) -1))
                (do (setv stop (get line-opens after))
                    (yield (read s (upto stop)))
                    (setv i stop))
                (do (setv [o chunk value err] (read s e)
                          inner (get line-opens i))
                    (cond
                      (is err None) (do (yield #(o chunk value None))
                                        (setv i after))
                      (<= inner j) (do (yield #(o (cut text s (min (get starts inner) (+ s max-bytes 1)))
                                                 None err))
                                       (setv i inner))
                      True (do (yield #(o chunk None err))
                               (setv i after)))))))))

;; * Printing

(setv _print-escapes {"\\" "\\\\" "\"" "\\\"" "\n" "\\n" "\t" "\\t" "\r" "\\r"}
      _needs-escape-re (re.compile #[re[[\\"\x00-\x1f\x7f\u2028\u2029\ud800-\udfff]]re]))

(defn _print-string [s]
  (defn esc [m]
    (setv c (.group m 0))
    (.get _print-escapes c (if (> (ord c) 255) f"\\u{(ord c) :04x}" f"\\x{(ord c) :02x}")))
  (+ "\"" (_needs-escape-re.sub esc s) "\""))

(defn proto-print [value [max-depth None]]
  "The s-expression text of VALUE; (proto-read (proto-print x)) equals x.
   With MAX-DEPTH, a ProtoError when its lists nest deeper than that."
  (if (isinstance value #(list tuple))
      (_print-list value 1 (or max-depth (float "inf")))
      (_print-atom value)))

(defn _print-list [value depth limit]
  ;; the atoms of a list are printed here rather than by a call each: a
  ;; message is mostly atoms, and printing one is a step of every stage
  (when (> depth limit)
    (raise (ProtoError f"nested deeper than {limit}")))
  (setv parts [])
  (for [v value]
    (.append parts (cond
                     (isinstance v Keyword)
                     (if (_keyword-re.match v.name)
                         (+ ":" v.name)
                         (_print-atom v))
                     (isinstance v #(list tuple)) (_print-list v (+ depth 1) limit)
                     (isinstance v str) (if (_needs-escape-re.search v)
                                            (_print-string v)
                                            (+ "\"" v "\""))
                     (is v True) "true"
                     (is v False) "false"
                     (is v None) "nil"
                     (is (type v) int) (str v)
                     True (_print-atom v))))
  (+ "(" (.join " " parts) ")"))

(defn _print-atom [value]
  (cond
    (isinstance value Keyword)
    (if (_keyword-re.match value.name)
        (+ ":" value.name)
        (raise (ProtoError f"keyword {(_clip (repr value.name))} would not read back")))
    (isinstance value str) (_print-string value)
    (is value True) "true"
    (is value False) "false"
    (is value None) "nil"
    (isinstance value int) (str value)
    (isinstance value float)
    (if (math.isfinite value)
        (repr value)
        (raise (ProtoError f"cannot print non-finite number {value}")))
    True (raise (ProtoError f"cannot print a {(. (type value) __name__)} as a message"))))

(defn proto-depth [value]
  "How deeply VALUE's lists nest: 0 for an atom, 1 for a flat list."
  (setv deepest 0
        stack [#(value 1)])
  (while stack
    (setv [v d] (.pop stack))
    (when (isinstance v #(list tuple))
      (setv deepest (max deepest d))
      (for [x v]
        (when (isinstance x #(list tuple))
          (.append stack #(x (+ d 1)))))))
  deepest)

;; * Working with plists

;; ** The Plist type

(defclass Plist [list]
  "Keyword/value pairs in order, found by name in one step, never changed in place.

   (setv p (plist :action :shell :cmd \"ls\"))
   (get p :cmd) ⇒ \"ls\"
   (.get p \"timeout\" 30) ⇒ 30
   (proto-print p) ⇒ \"(:action :shell :cmd \\\"ls\\\")\""
  (setv __slots__ #("_fields"))

  (defn __init__ [self [pairs #()]]
    (.__init__ (super) pairs)
    (when (% (list.__len__ self) 2)
      (raise (ProtoError "a plist needs a value after every key")))
    (setv fields {})
    (for [i (range 0 (list.__len__ self) 2)]
      (setv k (list.__getitem__ self i))
      (when (not (isinstance k Keyword))
        (raise (ProtoError f"plist key {(_clip (repr k))} is not a keyword")))
      (when (not (in k.name fields))
        (setv (get fields k.name) (list.__getitem__ self (+ i 1)))))
    (setv self._fields fields))

  (defn __getitem__ [self key]
    (cond (isinstance key Keyword) (get self._fields key.name)
          (isinstance key str) (get self._fields key)
          True (list.__getitem__ self key)))

  (defn get [self key [default None]]
    "The value of KEY (a keyword or its name), or DEFAULT."
    (.get self._fields (if (isinstance key Keyword) key.name key) default))

  (defn __contains__ [self key]
    (if (isinstance key Keyword)
        (in key.name self._fields)
        (list.__contains__ self key)))

  (defn keys [self] (list (cut self None None 2)))
  (defn values [self] (list (cut self 1 None 2)))
  (defn items [self] (list (zip (cut self None None 2) (cut self 1 None 2))))

  (defn __repr__ [self]
    (try (proto-print self)
         (except [ProtoError] (list.__repr__ self))))

  (defn __reduce__ [self]
    #(Plist #((list self))))

  (defn __copy__ [self] self)

  (defn _unchanged [self #* args]
    (raise (TypeError "a plist is not changed in place: make a new one with proto-put, proto-merge or proto-without")))

  (setv __setitem__ _unchanged
        __delitem__ _unchanged
        __iadd__ _unchanged
        __imul__ _unchanged
        append _unchanged
        extend _unchanged
        insert _unchanged
        pop _unchanged
        remove _unchanged
        clear _unchanged
        sort _unchanged
        reverse _unchanged))

(defn plist [#** fields]
  "A Plist of FIELDS, in the order given: (plist :verdict :allow :gate \"files\")."
  (setv pairs [])
  (for [[name value] (.items fields)]
    (.extend pairs [(_keyword (.replace name "_" "-")) value]))
  (Plist pairs))

(defn _as-plist [pairs]
  "PAIRS (a list) as a Plist when they are keyword/value pairs, else the list."
  (setv n (len pairs))
  (when (or (= n 0) (% n 2))
    (return pairs))
  (setv fields {})
  (for [i (range 0 n 2)]
    (setv k (get pairs i))
    (when (not (isinstance k Keyword))
      (return pairs))
    (when (not (in k.name fields))
      (setv (get fields k.name) (get pairs (+ i 1)))))
  (setv p (Plist.__new__ Plist))
  (list.extend p pairs)
  (setv p._fields fields)
  p)

;; ** Reading fields

(defn kw [name]
  "The keyword called NAME; (kw \"payload\") is :payload."
  (if (isinstance name Keyword) name (_keyword name)))

(defn is-plist [value]
  "True when VALUE is a list of keyword/value pairs."
  (when (is (type value) Plist)
    (return True))
  (when (or (not (isinstance value list)) (% (len value) 2))
    (return False))
  (for [i (range 0 (len value) 2)]
    (when (not (isinstance (get value i) Keyword))
      (return False)))
  True)

(defn proto-get [plist key [default None]]
  "The value after KEY in PLIST, or DEFAULT.

   (proto-get [:a 1 :b 2] ':b) ⇒ 2"
  ;; Names are compared, not keywords: Keyword's own = is Python code, and a
  ;; scan that calls it on every element (values too) is slower than this loop.
  (when (is (type plist) Plist)
    (return (.get plist._fields (if (isinstance key Keyword) key.name (. (kw key) name)) default)))
  (when (isinstance plist list)
    (setv name (if (isinstance key Keyword) key.name (. (kw key) name)))
    (for [i (range 0 (- (len plist) 1) 2)]
      (setv k (get plist i))
      (when (and (isinstance k Keyword) (= k.name name))
        (return (get plist (+ i 1))))))
  default)

(defn proto-values [plist #* keys]
  "The values after each of KEYS in PLIST (None for a key it lacks), found in
   one pass: a stage that reads several fields of a message reads it once.

   (proto-values [:a 1 :b 2] ':b ':c) ⇒ [2 None]"
  (setv values (* [None] (len keys))
        wanted {})
  (for [[i key] (enumerate keys)]
    (.append (.setdefault wanted (if (isinstance key Keyword) key.name (. (kw key) name)) []) i))
  (when (is (type plist) Plist)
    (for [[name at] (.items wanted)
          i at]
      (setv (get values i) (.get plist._fields name)))
    (return values))
  (when (isinstance plist list)
    (for [j (range 0 (- (len plist) 1) 2)]
      (setv k (get plist j))
      (when (isinstance k Keyword)
        (for [i (.pop wanted k.name #())]
          (setv (get values i) (get plist (+ j 1))))
        (when (not wanted)
          (break)))))
  values)

(defn proto-has [plist key]
  "True when KEY is present in PLIST (even with a nil value)."
  (setv name (if (isinstance key Keyword) key.name (. (kw key) name)))
  (when (is (type plist) Plist)
    (return (in name plist._fields)))
  (for [i (range 0 (- (len plist) 1) 2)]
    (setv k (get plist i))
    (when (and (isinstance k Keyword) (= k.name name))
      (return True)))
  False)

(defn _like [plist pairs]
  "PAIRS as a Plist when PLIST is one: a changed copy keeps its type."
  (if (is (type plist) Plist) (Plist pairs) pairs))

(defn proto-put [plist key value]
  "A copy of PLIST with KEY set to VALUE (replaced in place, or appended)."
  (setv key (if (isinstance key Keyword) key (kw key))
        out (list plist))
  (for [i (range 0 (- (len out) 1) 2)]
    (when (= (get out i) key)
      (setv (get out (+ i 1)) value)
      (return (_like plist out))))
  (_like plist (+ out [key value])))

(defn proto-merge [plist #* others]
  "A copy of PLIST with every pair of OTHERS put into it, later ones winning."
  (setv out (list plist)
        at {})
  (for [i (range (- (len out) 2 (% (len out) 2)) -1 -2)]
    (when (isinstance (get out i) Keyword)
      (setv (get at (. (get out i) name)) (+ i 1))))
  (for [other others
        i (range 0 (- (len other) 1) 2)]
    (setv key (get other i)
          key (if (isinstance key Keyword) key (kw key))
          value (get other (+ i 1)))
    (if (in key.name at)
        (setv (get out (get at key.name)) value)
        (do (.extend out [key value])
            (setv (get at key.name) (- (len out) 1)))))
  (_like plist out))

(defn proto-without [plist keys]
  "A copy of PLIST without the pairs whose key is in KEYS."
  (setv drop (sfor k keys (kw k))
        out [])
  (for [i (range 0 (- (len plist) 1) 2)]
    (when (not (in (get plist i) drop))
      (.extend out [(get plist i) (get plist (+ i 1))])))
  (_like plist out))

(defn proto-keys [plist]
  "The keys of PLIST, in order."
  (list (cut plist None None 2)))

;; * Normalising

(defn _normal-keyword [k]
  (setv name (.replace (.lower k.name) "_" "-"))
  (if (= name k.name) k (_keyword name)))

(defn proto-normalize [value]
  "VALUE with every keyword in lower-case kebab form, recursively."
  (cond (isinstance value Keyword) (_normal-keyword value)
        (isinstance value list) (_as-plist (lfor v value (proto-normalize v)))
        True value))

;; * JSON at the edge

(setv _keyword-valued #{"action" "type" "sensor" "verdict" "status"})

(defn proto-from-data [value [max-depth None] [_depth 0] [_key None]]
  "The plist form of a JSON-like VALUE (dict, list, str, number, bool, None)."
  (setv max-depth (or max-depth MAX-DEPTH))
  (when (> _depth max-depth)
    (raise (ProtoError f"nested deeper than {max-depth}")))
  (cond
    (isinstance value dict)
    (do (setv out [])
        (for [[k v] (.items value)]
          (when (not (and (isinstance k str) (_keyword-re.match k)))
            (raise (ProtoError f"object key {(_clip (repr k))} is not a name")))
          (setv key (_normal-keyword (_keyword k)))
          (.extend out [key (proto-from-data v max-depth (+ _depth 1) key.name)]))
        (Plist out))
    (isinstance value #(list tuple))
    (lfor v value (proto-from-data v max-depth (+ _depth 1)))
    (and (isinstance value str) (in _key _keyword-valued) (_keyword-re.match (.lstrip value ":")))
    (_normal-keyword (_keyword (.lstrip value ":")))
    (or (is value None) (isinstance value #(str bool))) value
    (isinstance value int)
    (if (> (.bit-length value) (* MAX-INT-DIGITS 3.33))
        (raise (ProtoError f"integer of more than {MAX-INT-DIGITS} digits"))
        value)
    (isinstance value float)
    (if (math.isfinite value) value (raise (ProtoError "number out of range")))
    True (raise (ProtoError f"a {(. (type value) __name__)} is not data"))))

(defn proto-to-data [value]
  "VALUE as JSON-ready data: plists become dicts, keywords become their names."
  (cond
    (is-plist value)
    (dfor i (range 0 (len value) 2)
          (. (get value i) name) (proto-to-data (get value (+ i 1))))
    (isinstance value list) (lfor v value (proto-to-data v))
    (isinstance value Keyword) value.name
    True value))
