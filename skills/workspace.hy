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

(setv _writes {"read-file" False "write-file" True}
      _verdict ':verdict _allow ':allow
      _path-key ':path _ok-key ':ok _secret-key ':secret _reason-key ':reason
      _workspace-key ':workspace)

(defn _shown [path]
  (setv text (repr path))
  (if (> (len text) 120) (+ (cut text 117) "…") text))

(defn workspace-gate [action ctx]
  (setv name (action-name action))
  (when (not (in name _writes))
    (return [_verdict _allow]))
  (setv path (proto-get action _path-key)
        found (resolve-path path ctx :write (get _writes name))
        runs (and (get _writes name) (proto-get found _ok-key) (not (proto-get found _secret-key))
                  (runs-later (proto-get found _path-key) (proto-get ctx _workspace-key))))
  (cond (not (proto-get found _ok-key))
        [:verdict :reject
         :reason f"{name} {(_shown path)} refused: {(proto-get found _reason-key)}"]
        (proto-get found _secret-key)
        [:verdict :escalate
         :reason f"{name} {(_shown path)} touches a file that usually holds secrets; a person must approve"]
        runs
        [:verdict :escalate
         :reason f"{name} {(_shown path)} writes {runs}, which runs commands later, unseen; a person must approve"]
        True [_verdict _allow]))

(defskill workspace
  "Keeps file reads in the workspace and writes in the workspace or the temp folders."
  :priority 90
  :gate workspace-gate)
