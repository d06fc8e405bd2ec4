;; * Why

"The core loop can do nothing by itself: every action it can take is an
actuator some skill registered. The built-in ones are ordinary skill files,
loaded like any person's own, so they can be read, replaced or disabled the
same way. skills-core.org is the source of the ones that act on the
workspace, the shell, memory and the conversation, and of /stop, /help
and /status; each of its blocks names the skill file it tangles into."

;; * help: the slash commands there are

(require passepartout.macros [defskill])
(import re
        passepartout.perceive [reply-signal sensor-of]
        passepartout.proto [proto-get]
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

(setv OPERATOR-ONLY #{"repl"})

(defn command-lines [registry [operator True]]
  "One line per slash command the pre-reason handlers of REGISTRY answer; the
   skills of the daemon's operator (the REPL) only when OPERATOR."
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
    (when (and (not (in name listed)) (.search _slash-re doc)
               (or operator (not (in name OPERATOR-ONLY))))
      (.add listed name)
      (.append lines f"  {name}: {doc}")))
  lines)

(defn _at-terminal [signal]
  (= (proto-get (or (proto-get signal ':source) []) ':gateway) ':terminal))

(defn on-help [signal ctx]
  (when (said signal #{"/help"})
    (setv terminal (_at-terminal signal))
    [(reply-signal signal (.join "\n" (+ ["Commands, answered here and never by the model:"]
                                         (command-lines (context-runtime ctx "skills") terminal)
                                         (if terminal ["  /quit — leave the chat (or Ctrl-D)"] [])
                                         ["Anything else goes to the model."])))]))

(setv on-help.commands [["/help" "this list"]])

(defskill help
  "/help: lists the slash commands of every skill, answered here, never by the model."
  :priority 100
  :handlers [on-help])

(import difflib)

(setv _unknown-re (re.compile r"\s*(/[A-Za-z][\w-]*)(?:@\w+)?(\s[^\n]*)?\Z")
      PROVIDER-WORDS #{"/read" "/write" "/remember" "/recall" "/help" "/start" "/commands"})

(defn command-words [registry]
  "The command words (/stop, /approve, …) the handlers of REGISTRY list."
  (sorted (set (gfor [_ handler] (pre-reason-handlers registry)
                     [usage _] (or (getattr handler "commands" None) [])
                     (get (.split usage) 0)))))

(defn on-unknown [signal ctx]
  (setv text (proto-get (proto-get signal ':payload) ':text)
        m (and (in (sensor-of signal) SENSORS) (isinstance text str) (.match _unknown-re text)))
  (when (not m) (return None))
  (setv word (.lower (.group m 1))
        words (+ (command-words (context-runtime ctx "skills"))
                 (if (_at-terminal signal) ["/quit"] [])))
  (when (or (in word words) (in word PROVIDER-WORDS)) (return None))
  (setv near (difflib.get-close-matches word words :n 3 :cutoff 0.6))
  [(reply-signal signal (+ f"{word} is not a command here."
                           (if near f" Did you mean {(.join ", " near)}?" "")
                           " /help lists them all.")
                 "notice")])

(defskill unknown-command
  "Answers a slash command no skill knows with the nearest ones, never passing it to the model."
  :priority -1000
  :handlers [on-unknown])
