(require passepartout.macros [defskill])
(import passepartout.act [stop-task]
        passepartout.perceive [reply-signal sensor-of]
        passepartout.proto [proto-get])

(defn is-stop [signal]
  (setv text (proto-get (proto-get signal ':payload) ':text))
  (and (= (sensor-of signal) "user-input")
       (isinstance text str)
       (= (.strip text) "/stop")))

(defn on-stop [signal ctx]
  (when (is-stop signal)
    [(reply-signal signal (stop-task (proto-get signal ':session)) "notice")]))

(setv on-stop.immediate is-stop
      on-stop.commands [["/stop" "end the task running here: its command is killed, its model call dropped"]])

(defskill stop
  "/stop: ends the session's task at once, answered here, never by the model."
  :priority 100
  :handlers [on-stop])
