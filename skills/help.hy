;; * help: the slash commands there are

(require passepartout.macros [defskill])
(import re
        passepartout.perceive [reply-signal sensor-of]
        passepartout.proto [literal-keywords :as hy proto-get]
        passepartout.context [context-runtime]
        passepartout.skills [get-skill pre-reason-handlers])

(setv SENSORS #{"user-input" "chat-message"}
      _slash-re (re.compile r"(?<![\w/])/[a-z][a-z-]*"))

(defn said [signal words]
  "True when SIGNAL is a person saying one of WORDS (lower case), and nothing else."
  (setv text (proto-get (proto-get signal ':payload) ':text))
  (and (in (sensor-of signal) SENSORS)
       (isinstance text str)
       (in (.lower (.strip text)) words)))

(defn command-lines [registry]
  "One line per slash command the pre-reason handlers of REGISTRY answer."
  (setv lines []
        listed #{})
  (for [[name handler] (pre-reason-handlers registry)]
    (setv commands (getattr handler "commands" None))
    (cond commands
          (do (.add listed name)
              (for [[usage doc] commands]
                (.append lines f"  {usage} — {doc}")))))
  (for [[name handler] (pre-reason-handlers registry)]
    (setv doc (or (.get (or (get-skill registry name) {}) "doc") ""))
    (when (and (not (in name listed)) (.search _slash-re doc))
      (.add listed name)
      (.append lines f"  {name}: {doc}")))
  lines)

(defn on-help [signal ctx]
  (when (said signal #{"/help"})
    [(reply-signal signal (.join "\n" (+ ["Commands, answered here and never by the model:"]
                                         (command-lines (context-runtime ctx "skills"))
                                         ["Anything else goes to the model."])))]))

(setv on-help.commands [["/help" "this list"]])

(defskill help
  "/help: lists the slash commands of every skill, answered here, never by the model."
  :priority 100
  :handlers [on-help])
