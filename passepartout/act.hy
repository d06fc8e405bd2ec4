;; * Why

"By the time an action reaches act, the gates have allowed it (or a person
has approved it). What is left is dispatch: find the actuator a skill
registered for the action's name, run it, and pass its result through the
result filters before anything else (the model, a log) sees it. This module
names no actuator; they all arrive through the registry of the context."

(import inspect
        hy.models [Keyword]
        passepartout.proto [is-plist proto-get proto-put]
        passepartout.context [context-runtime]
        passepartout.checkpoint [checkpoint-before checkpoint-after wrote-into]
        passepartout.skills [actuator-for skill-functions])

;; * Results

(defn error-result [message]
  "A failed result plist: (:status :error :error MESSAGE)."
  [:status :error :error message])

(defn _is-result [value]
  (and (is-plist value) (isinstance (proto-get value ':status) Keyword)))

(defn clip-output [data limit [total None]]
  "The bytes DATA as text, cut to LIMIT bytes, with a marker saying how much
   of TOTAL (the full size, by default len DATA) was cut.
   (clip-output b\"abcdef\" 3) ⇒ \"abc\\n[… 3 more bytes cut …]\""
  (setv total (if (is total None) (len data) total)
        text (.decode (bytes (cut data limit)) "utf-8" "replace"))
  (if (> total limit)
      (+ text f"\n[… {(- total limit)} more bytes cut …]")
      text))

;; * Dispatch

(defn action-name [action]
  "The name of ACTION's :action as text (\"shell\"), or None."
  (setv a (proto-get action ':action))
  (cond (isinstance a Keyword) a.name
        (isinstance a str) a
        True None))

(defn :async _run [name action ctx]
  (setv spec (when name (actuator-for (context-runtime ctx "skills") name)))
  (when (is spec None)
    (return (error-result (if name f"no actuator for :{name}" "the action names no :action"))))
  (setv mark (when (get spec "effect") (await (checkpoint-before action ctx))))
  (when (isinstance mark str)
    (return (error-result mark)))
  (setv manifest None)
  (try
    (setv result ((get spec "run") action ctx))
    (when (inspect.isawaitable result)
      (setv result (await result)))
    (except [e [Exception SystemExit]]
      (setv result (error-result f"actuator {name} failed: {(. (type e) __name__)}: {e}")))
    (finally
      (when mark (setv manifest (await (checkpoint-after mark))))))
  (cond (not (_is-result result)) (error-result f"actuator {name} returned no result plist")
        mark (wrote-into result mark manifest)
        True result))

(defn _filtered [action result ctx]
  (for [[name f] (skill-functions (context-runtime ctx "skills") "filter")]
    (setv out (try (f action result ctx)
                   (except [Exception] None)))
    (when (not (_is-result out))
      (return (error-result f"result withheld: filter {name} failed")))
    (setv result out))
  result)

(defn :async act [action ctx]
  "Run the allowed ACTION through its actuator and the result filters.
   (await (act [:action :message :text \"hi\"] ctx))
   ⇒ (:status :ok :reply \"hi\" :action-name \"message\")"
  (setv name (action-name action))
  (proto-put (_filtered action (await (_run name action ctx)) ctx) ':action-name name))
