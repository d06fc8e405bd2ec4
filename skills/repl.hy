;; * Why

"Forms from the REPL socket and the /reload command are answered before any
model sees them, by pre-reason handlers, the way every command is. They belong
to a skill like any other, so the core loop names neither, and a person who
wants no console into their daemon disables it ([skills] disabled = [\"repl\"]):
the socket then answers that nothing evaluates forms."

(require passepartout.macros [defskill])
(import passepartout.proto [proto-get]
        passepartout.perceive [sensor-of])

(defn on-repl-eval [signal ctx]
  (when (= (sensor-of signal) "repl-eval")
    (hy.I.passepartout/repl.handle-repl-eval signal ctx)))

(defn on-reload [signal ctx]
  (setv text (proto-get (proto-get signal ':payload) ':text))
  (when (and (= (sensor-of signal) "user-input")
             (isinstance text str)
             (.startswith (.lstrip text) "/reload"))
    (hy.I.passepartout/reload.handle-reload signal ctx)))

(defskill repl
  "Forms from the REPL socket, and /reload: answered here, never by the model."
  :priority 100
  :handlers [on-repl-eval on-reload])
