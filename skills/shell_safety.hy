;; * Why

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
