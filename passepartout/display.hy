;; * Why

"Everything a person is shown, by whichever gateway, is made safe here: the
characters a terminal or a chat app would obey rather than show are made
visible, and actions, results and approvals are put into words. The
text-safety gate at the end judges what a model proposes to say by the same
rules."

(import json re)

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

;; * Saying what an action did, in words

(setv OUTPUT-LINES 30
      OUTPUT-CHARS 3000
      _skipped #{"action" "explanation"})

(defn _name-of [value]
  (if (hasattr value "name") value.name (str value)))

(defn _short [value [limit 60]]
  (setv text (if (isinstance value str) value (str value))
        text (.replace text "\n" " "))
  (if (> (len text) limit) (+ (cut text (- limit 1)) "…") text))

(defn _count [n one [many None]]
  (if (= n 1) f"1 {one}" f"{n} {(or many (+ one "s"))}"))

(defn _get [plist key]
  "The value of the keyword named KEY in PLIST, or None."
  (when (isinstance plist list)
    (for [i (range 0 (- (len plist) 1) 2)]
      (when (= (_name-of (get plist i)) key)
        (return (get plist (+ i 1))))))
  None)

(defn action-words [action]
  "ACTION in the words a person reads.

   (action-words [:action :shell :cmd \"ls -la\"]) ⇒ \"`ls -la`\"
   (action-words [:action :write-file :path \"n.txt\" :content \"a\\nb\\n\"]) ⇒ \"write n.txt (2 lines)\""
  (when (not (isinstance action list))
    (return (display-text (_short action 200))))
  (setv name (_name-of (or (_get action "action") "action"))
        path (_get action "path"))
  (display-text
    (cond
      (= name "shell") f"`{(_get action "cmd")}`"
      (= name "write-file")
      (do (setv content (_get action "content"))
          (+ f"write {path}"
             (if (isinstance content str) f" ({(_count (len (.splitlines content)) "line")})" "")))
      (= name "read-file") f"read {path}"
      (= name "message") f"say “{(_short (_get action "text") 80)}”"
      (= name "memory-add") f"remember “{(_short (_get action "text") 80)}”"
      (= name "memory-search") f"search memory for “{(_short (_get action "query") 80)}”"
      path f"{name} {path}"
      True (.join " " (+ [name]
                         (lfor i (range 0 (- (len action) 1) 2)
                               :setv k (_name-of (get action i))
                               :if (not (in k _skipped))
                               f"{k}={(_short (get action (+ i 1)))}"))))))

(defn output-words [output [lines OUTPUT-LINES] [chars OUTPUT-CHARS]]
  "OUTPUT cut to about LINES lines and CHARS characters, saying what was cut."
  (setv text (.rstrip (if (isinstance output str) output (str output)) "\n")
        all-lines (.split text "\n"))
  (when (> (len all-lines) lines)
    (setv head (// (* lines 2) 3)
          tail (- lines head)
          text (+ (.join "\n" (cut all-lines head))
                  f"\n… ({(_count (- (len all-lines) lines) "line")} left out) …\n"
                  (.join "\n" (cut all-lines (- tail) None)))))
  (when (> (len text) chars)
    (setv cut-at (// chars 2)
          text (+ (cut text cut-at)
                  f"\n… ({(_count (- (len text) chars) "character")} left out) …\n"
                  (cut text (- (- chars cut-at)) None))))
  (display-text text))

(defn status-words [result]
  "How the action of RESULT ended, in words: succeeded, failed with exit status 2,
   timed out after 30 s, …"
  (when (not (isinstance result list))
    (return "gave no result"))
  (setv status (_name-of (or (_get result "status") "error"))
        exit (_get result "exit")
        error (_get result "error"))
  (display-text
    (cond
      (_get result "timed-out") (or error "timed out; the command and its children were killed")
      (_get result "stopped") (or error "stopped by the person")
      (= status "ok") (if (is exit None) "done" "succeeded")
      (= status "waiting") "running in the background"
      (= status "held") (or (_get result "reason") "held")
      (and (is-not exit None) (< exit 0)) f"killed by signal {(- exit)}"
      (and (is-not exit None) (or (not error) (= error f"exit status {exit}")))
      f"failed with exit status {exit}"
      error (if (is exit None) f"failed: {error}" f"failed: {error} (exit status {exit})")
      True f"ended with status {status}")))

(defn result-words [result]
  "RESULT in words: how it ended, then what the action printed or read, cut
   to a readable length.

   (result-words [:status :error :exit 2 :output \"ls: x: No such file\"])
   ⇒ \"failed with exit status 2\\nls: x: No such file\""
  (setv head (status-words result)
        output (when (isinstance result list)
                 (or (_get result "output") (_get result "content"))))
  (setv hits (when (isinstance result list) (_get result "hits")))
  (cond
    (and (isinstance output str) (.strip output)) (+ head "\n" (output-words output))
    (isinstance hits list) (+ head f" ({(_count (len hits) "match" "matches")})")
    (and (isinstance result list) (is-not (_get result "bytes") None) (= (_name-of (_get result "status")) "ok"))
    (+ head f" ({(_count (_get result "bytes") "byte")} written)")
    (and (isinstance result list) (is-not (_get result "exit") None)) (+ head " (no output)")
    True head))

(defn reason-words [action reason]
  "REASON, a gate's words about ACTION, without the action repeated at its
   start: the line that shows it names the action already."
  (setv what (action-words action)
        reason (display-text (str reason)))
  (if (.startswith reason what)
      (or (.lstrip (cut reason (len what) None) " —:") reason)
      reason))

(defn when-words [ts [now None]]
  "The local time TS with its zone, and the date when it is not today's:
   =14:05:09 CET=, =2026-11-27 09:00:00 CET=."
  (import time)
  (setv t (time.localtime ts)
        day (fn [x] (time.strftime "%Y-%m-%d" (time.localtime x))))
  (if (= (day ts) (day (if (is now None) (time.time) now)))
      (time.strftime "%H:%M:%S %Z" t)
      (time.strftime "%Y-%m-%d %H:%M:%S %Z" t)))

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
