;; * Why

"Every :shell action passes this gate before it can run. The judgement
itself lives in passepartout/shell/judge.hy (see org/shell.org): it parses the
command, walks every command in it, and weighs each one against the rules file
and the floor. This skill is only the door to it, kept apart so that the
analysis can be used without the skill registry (passepartout rules test,
passepartout bench) and the skill can be disabled or replaced like any other."

(require passepartout.macros [defskill])
(import passepartout.act [action-name]
        passepartout.proto [proto-get]
        passepartout.shell.judge [judge-command])

(defn shell-gate [action ctx]
  "The verdict of the shell-safety gate on ACTION: every :shell command is judged."
  (when (!= (action-name action) "shell")
    (return [:verdict :allow]))
  (try
    (judge-command (proto-get action ':cmd) ctx)
    (except [e Exception]
      [:verdict :reject
       :reason f"the shell-safety gate failed on this command and refuses it ({(. (type e) __name__)}: {e})"
       :rule "shell-safety-error"])))

(defskill shell-safety
  "Judges every shell command on its syntax tree: what it deletes, writes, reads and runs."
  :priority 80
  :gate shell-gate)
