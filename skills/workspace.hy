;; * Why

"The core loop can do nothing by itself: every action it can take is an
actuator some skill registered. The built-in ones are ordinary skill files,
loaded like any person's own, so they can be read, replaced or disabled the
same way. skills-core.org is the source of the ones that act on the
workspace, the shell, memory and the conversation, and of /stop, /help
and /status; each of its blocks names the skill file it tangles into."

;; * workspace: the confinement gate

(require passepartout.macros [defskill])
(import passepartout.act [action-name]
        passepartout.proto [proto-get]
        passepartout.workspace [resolve-path runs-later])

(setv _writes {"read-file" False "write-file" True})

(defn _shown [path]
  (setv text (repr path))
  (if (> (len text) 120) (+ (cut text 117) "…") text))

(defn workspace-gate [action ctx]
  (setv name (action-name action))
  (when (not (in name _writes))
    (return [:verdict :allow]))
  (setv path (proto-get action ':path)
        found (resolve-path path ctx :write (get _writes name)))
  (cond (not (proto-get found ':ok))
        [:verdict :reject
         :reason f"{name} {(_shown path)} refused: {(proto-get found ':reason)}"]
        (proto-get found ':secret)
        [:verdict :escalate
         :reason f"{name} {(_shown path)} touches a file that usually holds secrets; a person must approve"]
        (and (get _writes name) (runs-later (proto-get found ':path) (proto-get ctx ':workspace)))
        [:verdict :escalate
         :reason f"{name} {(_shown path)} writes {(runs-later (proto-get found ':path) (proto-get ctx ':workspace))}, which runs commands later, unseen; a person must approve"]
        True [:verdict :allow]))

(defskill workspace
  "Keeps file reads in the workspace and writes in the workspace or the temp folders."
  :priority 90
  :gate workspace-gate)
