;; * Why

"A command can run a file rather than its arguments: a script given to a
shell or an interpreter, one it reads as its input, a program named by its
path. This module finds that file, and judges a script that is already there
where a task can write, since a task can write one in one action and run it in
the next. A shell script is judged as a command line by the judge's own
function (shell/judge.hy), which it is given."

(import os posixpath
        passepartout.shell.parse [MAX-BYTES]
        passepartout.shell.state [ESCALATE]
        passepartout.shell.commands [SHELLS]
        passepartout.shell.rules [parse-options _spec]
        passepartout.shell.paths [_concrete _in-places _realpath]
        passepartout.shell.code [python-module _interpreter _inline-code])

;; * Scripts that are already there

(setv _stdin-names #(None "-" "/dev/stdin" "/proc/self/fd/0" "/dev/fd/0"))

(defn _stdin-file [rec]
  "The file the command REC reads as its input (sh < f), if one is redirected there."
  (next (gfor [kind f] (get rec "stdin") :if (= kind "file") f) None))

(defn _run-path [rec rules]
  "The script or program file the recorded command REC runs, if any: a file fed
   to a shell or an interpreter as its input (sh < f, python3 < f.py) too."
  (setv name (get rec "name")
        argv (get rec "argv"))
  (cond (or (in name SHELLS) (in name #("source" ".")))
        (setv script (get rec "script")
              script (if (and (in script _stdin-names) (or script (get rec "reads-stdin")))
                         (_stdin-file rec)
                         script))
        (_interpreter name)
        (do (setv parsed (parse-options (cut argv 1 None) (_spec rules name))
                  ops (get parsed "operands"))
            (return (cond (_inline-code argv) None
                          (python-module argv) None
                          (or (not ops) (in (get ops 0) _stdin-names)) (_stdin-file rec)
                          True (get ops 0))))
        (in "/" (get argv 0)) (setv script (get argv 0))
        True (setv script None))
  script)

(defn _shebang [head]
  "The program the =#!= line of HEAD (bytes) names, or None."
  (when (.startswith head b"#!")
    (setv words (.split (.decode (get (.split (cut head 2 None) b"\n" 1) 0) "utf-8" "replace")))
    (when (and words (= (posixpath.basename (get words 0)) "env"))
      (setv words (lfor w (cut words 1 None) :if (not (.startswith w "-")) w)))
    (when words
      (posixpath.basename (get words 0)))))

(defn _script-verdicts [rec pc rules nest judge-nested]
  "What running the existing script or program file of REC does: a shell
   script is judged as its command line; other code is escalated, unread."
  (setv name (get rec "name")
        run (_run-path rec rules))
  (when (not run)
    (return []))
  (setv out [])
  (for [[path maybe _] (_concrete run (get rec "cwd") pc)]
    (when maybe
      (continue))
    (setv real (_realpath path pc))
    ;; only where a task can have written it: a file elsewhere is read by the
    ;; read checks, and its text must not reach a reason
    (when (or (not (_in-places real pc)) (not (os.path.isfile real)))
      (continue))
    (try
      (with [f (open real "rb")]
        (setv data (.read f (+ MAX-BYTES 1))))
      (except [e OSError]
        (.append out [ESCALATE f"runs {run}, which the gate cannot read ({e.strerror})" "script-unread"])
        (continue)))
    (when (> (len data) MAX-BYTES)
      (.append out [ESCALATE f"runs {run}, a script longer than the gate reads ({MAX-BYTES} bytes)" "script-unread"])
      (continue))
    (setv by-shell (or (in name SHELLS) (in name #("source" ".")))
          shebang (_shebang data)
          language (cond by-shell None
                         (_interpreter name) name
                         (.startswith data b"\x7fELF") "compiled"
                         (and shebang (not (in shebang SHELLS))) shebang))
    (if language
        (.append out [ESCALATE (if (= language "compiled")
                                   f"runs {run}, a compiled program the gate cannot read"
                                   f"runs {run}, {language} code the gate does not read")
                      "script-unread"])
        (.extend out (judge-nested (.decode data "utf-8" "replace") pc rules nest run "script"))))
  out)
