;; * Why

"The walk (shell/walk.hy) and what a simple command does
(shell/commands.hy) carry the shell's state from one command to the next:
the values variables may hold, the folders a command may run in, which values
are data. This module holds that state and the few helpers that copy and merge
it and record an issue, with the verdicts every part of the shell gate speaks
in, so that the modules above it share them without knowing each other."

(import passepartout.shell.parse [HERE MAX-VARIANTS _lookup _union])

;; * Verdicts

(setv REJECT 3
      ESCALATE 2
      CONFINE 1
      ALLOW 0)

;; * State

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
