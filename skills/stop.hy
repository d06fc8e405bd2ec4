;; * Why

"The core loop can do nothing by itself: every action it can take is an
actuator some skill registered. The built-in ones are ordinary skill files,
loaded like any person's own, so they can be read, replaced or disabled the
same way. skills-core.org is the source of the ones that act on the
workspace, the shell, memory and the conversation, and of /stop, /help
and /status; each of its blocks names the skill file it tangles into."

;; * stop: ending the session's task

(require passepartout.macros [defskill])
(import passepartout.runner [stop-task stop-text]
        passepartout.context [context-runtime]
        passepartout.approvals.hitl [withdraw-waiting identity-of]
        passepartout.journal [journal-event]
        passepartout.perceive [reply-signal sensor-of]
        passepartout.proto [proto-get])

(defn is-stop [signal]
  (setv text (proto-get (proto-get signal ':payload) ':text))
  (and (= (sensor-of signal) "user-input")
       (isinstance text str)
       (= (.strip text) "/stop")))

(defn _withdrawn [signal ctx]
  "The codes of SIGNAL's session's approvals this stop withdrew."
  (setv store (context-runtime ctx "store"))
  (if (is store None)
      []
      (withdraw-waiting store (proto-get signal ':session)
                        (identity-of (proto-get signal ':source)) (proto-get ctx ':now))))

(defn on-stop [signal ctx]
  (when (is-stop signal)
    (setv text (stop-task (context-runtime ctx "stops") (proto-get signal ':session))
          codes (_withdrawn signal ctx))
    (when codes
      (setv withdrawn (+ "the approval" (if (> (len codes) 1) "s " " ") (.join ", " codes)
                         " waiting here " (if (> (len codes) 1) "were" "was")
                         " withdrawn, and " (if (> (len codes) 1) "their actions" "its action")
                         " will not run.")
            text (if (= text (stop-text []))
                     (+ "Stopped: " withdrawn)
                     (+ text " Also, " withdrawn))))
    (_journal-stop signal ctx text)
    [(reply-signal signal text "notice")]))

(defn _journal-stop [signal ctx text]
  "The stop as a turn of the session's journal: who stopped it, and what they were told."
  (setv store (context-runtime ctx "store"))
  (when (is-not store None)
    (journal-event store "stop" (proto-get signal ':session)
                   [:who (identity-of (proto-get signal ':source)) :text text]
                   :ts (proto-get ctx ':now))))

(setv on-stop.immediate is-stop
      on-stop.commands [["/stop" "end the task running here: its command is killed, its model call dropped"]])

(defskill stop
  "/stop: ends the session's task at once, answered here, never by the model."
  :priority 100
  :handlers [on-stop])
