;; * Why

(import json re
        passepartout.proto [literal-keywords :as hy])

;; * Making text safe to show

(setv _shown-re (re.compile #[re[[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]]re]))

(defn _visible [c]
  "The visible spelling of the character C."
  (setv n (ord c))
  (cond (= n 13) "\\r"
        (< n 256) f"\\x{n :02x}"
        True f"\\u{n :04x}"))

(defn plain-text [text]
  "True when TEXT holds nothing =display-text= would change (nor a lone surrogate)."
  (is (_shown-re.search text) None))

(defn display-text [text]
  "TEXT as it may be shown to a person: control characters other than newline
   and tab, bidi controls and lone surrogates made visible as escapes.

   (display-text \"\\x1b[2Jdone\") ⇒ \"\\\\x1b[2Jdone\""
  (setv text (if (isinstance text str) text (str text)))
  (if (_shown-re.search text)
      (_shown-re.sub (fn [m] (_visible (.group m 0))) (.replace text "\r\n" "\n"))
      text))

(setv _json-re (re.compile #[re[[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]]re]))

(defn json-visible [line]
  "LINE, a JSON text, with C1 and bidi controls, line separators and lone
   surrogates written as \\u escapes: safe on a terminal, one line for any reader."
  (if (_json-re.search line)
      (_json-re.sub (fn [m] f"\\u{(ord (.group m 0)) :04x}") line)
      line))

(defn json-line [value]
  "VALUE as one line of JSON that is valid UTF-8 and safe to show."
  (json-visible (json.dumps value :ensure-ascii False)))

;; * Valid Unicode

(setv _surrogate-re (re.compile #[re[[\ud800-\udfff]]re]))

(defn _escape-surrogates [text]
  (_surrogate-re.sub (fn [m] (_visible (.group m 0))) text))

(defn valid-unicode [value]
  "VALUE with every lone surrogate in its strings written as a visible escape;
   VALUE itself when it holds none."
  (cond
    (isinstance value str)
    (if (_surrogate-re.search value) (_escape-surrogates value) value)
    (isinstance value list)
    (do (setv out (lfor v value (valid-unicode v)))
        (if (any (gfor [a b] (zip value out) (is-not a b))) out value))
    (isinstance value tuple)
    (do (setv out (tuple (gfor v value (valid-unicode v))))
        (if (any (gfor [a b] (zip value out) (is-not a b))) out value))
    (isinstance value dict)
    (dfor [k v] (.items value) (valid-unicode k) (valid-unicode v))
    True value))

(defn unicode-problem [text]
  "Why TEXT (a string, or strings nested in lists) is not valid Unicode, or None.

   (unicode-problem \"ab\\ud800\") ⇒ \"a lone surrogate (\\\\ud800) at character 3\""
  (cond
    (isinstance text str)
    (do (setv m (_surrogate-re.search text))
        (when m
          f"a lone surrogate ({(_visible (.group m 0))}) at character {(+ (.start m) 1)}"))
    (isinstance text #(list tuple))
    (for [v text]
      (setv why (unicode-problem v))
      (when why (return why)))
    True None))

;; * Naming what a text holds

(setv _sequence-re
      (re.compile
        (.join "|"
               [#[re[(?P<csi>(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?)]re]
                #[re[(?P<osc>(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?)]re]
                #[re[(?P<string>(?:\x1b[P_^X]|[\x90\x98\x9e\x9f])[^\x1b\x9c]*(?:\x1b\\|\x9c)?)]re]
                #[re[(?P<esc>\x1b[\x20-\x2f]*[\x30-\x7e]?)]re]
                #[re[(?P<bidi>[\u202a-\u202e\u2066-\u2069])]re]
                #[re[(?P<control>[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]|\r(?!\n))]re]])))

(defn _osc-kind [seq]
  (setv body (cut seq (if (.startswith seq "\x1b") 2 1) None)
        number (get (.split body ";" 1) 0))
  (cond (= number "52") "OSC 52 (writes the clipboard)"
        (= number "8") "OSC 8 (a link that hides its address)"
        (in number #("0" "1" "2")) "OSC (sets the window title)"
        True "OSC (an operating system command to the terminal)"))

(defn _kind [m]
  (setv what m.lastgroup
        seq (.group m 0))
  (cond (= what "csi") "CSI (moves the cursor, clears or recolours the screen)"
        (= what "osc") (_osc-kind seq)
        (= what "string") "DCS/APC/PM/SOS (a string the terminal reads as a command)"
        (= what "esc") "ESC (an escape sequence)"
        (= what "bidi") f"U+{(ord seq) :04X} (a bidi control that reorders the text shown)"
        True f"{(_visible seq)} (a control character)"))

(defn control-sequences [text]
  "The terminal control sequences and bidi controls in TEXT, each in words,
   in order, each kind once. Newline, tab and a line end written CR LF are none."
  (setv kinds [])
  (when (_shown-re.search text)
    (for [m (.finditer _sequence-re text)]
      (setv k (_kind m))
      (when (not (in k kinds))
        (.append kinds k))))
  kinds)
