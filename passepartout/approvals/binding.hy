;; * Why

"A stale answer must not run something other than what the person was shown.
An approval is therefore bound to one action, in one place, under one policy:
the binding is computed when the person is asked, stored with the question,
and computed again just before the action runs; when the two differ, or the
gates would now refuse the action, nothing runs."

(import hashlib os
        pathlib [Path]
        passepartout.proto [kw proto-get proto-print proto-normalize]
        passepartout.act [action-name]
        passepartout.context [context-runtime]
        passepartout.workspace [path-inside]
        passepartout.shell.parse [HERE MARKERS]
        passepartout.shell.commands [SHELLS]
        passepartout.shell.walk [analyse]
        passepartout.shell.code [_interpreter]
        passepartout.shell.scripts [_run-path :as _script-path]
        passepartout.shell.judge :as shell
        passepartout.skills [all-skills])

;; * Binding

(defn canonical-action [action]
  "ACTION as the text its hash is taken of."
  (setv action (proto-normalize action)
        pairs (sorted (gfor i (range 0 (- (len action) 1) 2)
                            #((. (get action i) name) (get action (+ i 1))))
                      :key (fn [p] (get p 0))))
  (proto-print (lfor [k v] pairs x [(kw k) v] x)))

(defn action-hash [action]
  (.hexdigest (hashlib.sha256 (.encode (canonical-action action) "utf-8" "surrogatepass"))))

(defn _file-bytes [path]
  (try (.read-bytes (Path path))
       (except [OSError] b"")))

(defn policy-version [registry]
  "A hash of the skills of REGISTRY and the rules files beside them."
  (setv h (hashlib.sha256)
        folders (set))
  (for [s (all-skills registry)]
    (.update h (.encode f"{(get s "name")}\x00{(get s "priority")}\x00{(or (get s "source") "")}\x00"
                        "utf-8" "surrogatepass"))
    (when (get s "source")
      (setv p (Path (get s "source")))
      (.add folders p.parent)
      (.update h (_file-bytes p))))
  (for [folder (sorted folders)
        f (sorted (.glob folder "*.toml"))]
    (.update h (.encode (str f) "utf-8" "surrogatepass"))
    (.update h (_file-bytes f)))
  (cut (.hexdigest h) 24))

(defn _feeds-program [rec program]
  "True when REC, run by PROGRAM or through it as a launcher, reads its program
   from its input."
  (setv name (get rec "name"))
  (and name
       (or (= name program) (in program (get rec "via")))
       (if (in name SHELLS)
           (get rec "reads-stdin")
           (and (or (_interpreter name) (in name #("source" ".")))
                (is (_run-path rec) None)))))

(defn _run-path [rec]
  (if shell.RULES
      (_script-path rec shell.RULES)
      (get rec "script")))

(defn _runs [cmd]
  "The files the command line CMD runs, as (word folders) pairs from its analysis."
  (setv out (analyse cmd)
        commands (lfor rec (get out "commands") :if (get rec "name") rec)
        found (lfor rec commands
                    :setv run (_run-path rec)
                    :if run
                    #(run (get rec "cwd"))))
  (for [r (get out "redirects")]
    (when (and (= (get r "kind") "read") (get r "program")
               (any (gfor rec commands (_feeds-program rec (get r "program")))))
      (.append found #((get r "target") (get r "cwd")))))
  found)

(defn script-files [cmd workspace]
  "The files inside WORKSPACE that the shell command CMD runs, resolved and sorted."
  (setv out (set))
  (when (and (isinstance cmd str) workspace)
    (for [[word folders] (_runs cmd)
          folder folders]
      (setv path (.replace word HERE workspace)
            folder (.replace folder HERE workspace))
      (when (not (any (gfor m MARKERS (or (in m path) (in m folder)))))
        (setv p (os.path.realpath (os.path.join workspace folder path)))
        (when (and (path-inside p workspace) (os.path.isfile p))
          (.add out p)))))
  (sorted out))

(defn _file-hash [path]
  (.hexdigest (hashlib.sha256 (_file-bytes path))))

(defn binding-of [action session ctx]
  "The binding of ACTION asked for in SESSION, under the policy loaded now."
  (setv ws (proto-get ctx ':workspace)
        out [:action-hash (action-hash action) :session session
             :policy (policy-version (context-runtime ctx "skills")) :cwd ws])
  (when (= (action-name action) "shell")
    (+= out [:scripts (lfor p (script-files (proto-get action ':cmd) ws) [p (_file-hash p)])]))
  out)

(defn binding-problem [approval ctx]
  "Why APPROVAL's action may not run now in CTX, or None when its binding holds."
  (setv was (proto-get approval ':binding [])
        action (proto-get approval ':action)
        now (binding-of action (proto-get approval ':session) ctx)
        old-scripts (dict (lfor [p h] (proto-get was ':scripts []) #(p h)))
        new-scripts (dict (lfor [p h] (proto-get now ':scripts []) #(p h))))
  (cond
    (!= (proto-get was ':action-hash) (proto-get now ':action-hash))
    "the stored action no longer matches the action that was asked for"
    (!= (proto-get was ':session) (proto-get ctx ':session))
    f"it was asked for in {(proto-get was ':session)}, not in {(proto-get ctx ':session)}"
    (!= (proto-get was ':policy) (proto-get now ':policy))
    "the policy changed since it was asked for (a skill or a rules file was added, removed or edited)"
    (!= (proto-get was ':cwd) (proto-get now ':cwd))
    f"the working directory changed from {(proto-get was ':cwd)} to {(proto-get now ':cwd)}"
    (!= old-scripts new-scripts)
    (do (setv gone (lfor p old-scripts :if (not (in p new-scripts)) p)
              added (lfor p new-scripts :if (not (in p old-scripts)) p)
              changed (lfor p old-scripts :if (and (in p new-scripts) (!= (get old-scripts p) (get new-scripts p))) p))
        (cond changed f"the script {(get changed 0)} changed since it was asked for"
              gone f"the script {(get gone 0)} is gone"
              True f"the command now runs {(get added 0)}, which it did not when it was asked for"))
    True None))

(defn :async floor-problem [action ctx judge]
  "Why the gates (run by JUDGE, as verify is) would not let ACTION through now,
   or None. An escalation is what was approved; a rejection, or a change to the
   action, is not."
  (setv outcome (await (judge action ctx))
        v (. (proto-get outcome ':verdict) name))
  (cond (= v "reject")
        f"the gates now refuse it: {(proto-get outcome ':gate)}: {(proto-get outcome ':reason)}"
        (and (= v "modify") (!= (action-hash (proto-get outcome ':action)) (action-hash action)))
        f"the gates would now change it ({(proto-get outcome ':gate)}: {(proto-get outcome ':reason)}), so it is not what was approved"
        True None))
