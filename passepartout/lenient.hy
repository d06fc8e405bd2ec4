;; * Why

"JSON written by a model has single quotes, trailing commas, comments, raw
newlines inside strings, or is a Python dict; and it stands inside prose. This
module reads such JSON as data, evaluating nothing, and finds where a balanced
form in a text begins and ends, within bounds of size and depth so that a
hostile answer costs little. What a form means is calls.org's and
extract.org's to say."

(import ast json re
        passepartout.proto [ProtoError])

;; * Bounds

(setv MAX-TEXT 65536
      MAX-DEPTH 32)

;; * Lenient JSON

(setv _json5 None)

(defn _json5-loads [text]
  (global _json5)
  (when (is _json5 None)
    (import json5)
    (setv _json5 json5))
  (_json5.loads text))

(defn _escape-controls [text]
  "TEXT with raw control characters inside its quoted strings escaped."
  (setv out []
        quote None
        escaped False)
  (for [c text]
    (cond
      escaped (do (.append out c) (setv escaped False))
      (and quote (= c "\\")) (do (.append out c) (setv escaped True))
      (and quote (= c quote)) (do (.append out c) (setv quote None))
      (and quote (< (ord c) 32)) (.append out (.format "\\u{:04x}" (ord c)))
      (and (not quote) (in c "\"'")) (do (.append out c) (setv quote c))
      True (.append out c)))
  (.join "" out))

(defn loads-lenient [text]
  "The value of the JSON (or JSON5) TEXT; ProtoError with the standard parser's
   reason when neither reads it."
  (when (> (len text) MAX-TEXT)
    (raise (ProtoError f"JSON larger than {MAX-TEXT} characters")))
  (try
    (return (json.loads text :strict False))
    (except [e ValueError]
      (setv first-error e)))
  (try
    (return (_json5-loads (_escape-controls text)))
    (except [e #(ValueError RecursionError MemoryError)]))
  (setv value (or (_python-literal text) (_requoted text)))
  (when (is value None)
    (raise (ProtoError f"not valid JSON: {first-error}")))
  value)

(setv _skeleton-re (re.compile r"[\s\"'\\]"))

(defn _python-literal [text]
  "The dict or list TEXT writes as a Python literal, or None."
  (try (setv value (ast.literal-eval (.strip text)))
       (except [Exception] (return None)))
  (when (isinstance value #(dict list)) value))

(defn _requoted [text]
  "The dict or list json-repair reads in TEXT, when its repair only changed quoting; else None."
  (import json-repair)
  (try (setv value (json-repair.loads text :skip-json-loads True))
       (except [Exception] (return None)))
  (when (and (isinstance value #(dict list)) value
             (= (.sub _skeleton-re "" (json.dumps value :ensure-ascii False))
                (.sub _skeleton-re "" text)))
    value))

;; * Spans

(setv _pairs {"{" "}" "[" "]" "(" ")"}
      _plain-re (re.compile r"[^\"'{}\[\]()/;\\]+")
      _in-string-re (re.compile r"[^\"'\\]+"))

(defn _span-end [text start]
  "#(end closed depth) of the form that opens at START in TEXT."
  (setv lisp (= (get text start) "(")
        stack []
        quote None
        escaped False
        depth 0
        i start
        n (len text))
  (while (< i n)
    ;; runs of characters that change nothing are skipped at C speed
    (setv run (cond escaped None
                    quote (.match _in-string-re text i)
                    True (.match _plain-re text i)))
    (when run
      (setv i (.end run))
      (when (>= i n) (break)))
    (setv c (get text i))
    (cond
      quote (cond escaped (setv escaped False)
                  (= c "\\") (setv escaped True)
                  (= c quote) (setv quote None))
      (or (= c "\"") (and (= c "'") (not lisp))) (setv quote c)
      (and lisp (= c ";")) (setv i (- (if (>= (.find text "\n" i) 0) (.find text "\n" i) n) 1))
      (and (not lisp) (.startswith text "//" i) (or (= i 0) (!= (get text (- i 1)) ":")))
      (setv i (- (if (>= (.find text "\n" i) 0) (.find text "\n" i) n) 1))
      (and (not lisp) (.startswith text "/*" i))
      (setv i (+ (if (>= (.find text "*/" (+ i 2)) 0) (.find text "*/" (+ i 2)) n) 1))
      (in c _pairs) (do (.append stack (get _pairs c))
                        (setv depth (max depth (len stack))))
      (in c ")]}") (do (when (or (not stack) (!= (.pop stack) c))
                         (return #((+ i 1) False depth)))
                       (when (not stack) (return #((+ i 1) True depth)))))
    (+= i 1))
  #(n False depth))
