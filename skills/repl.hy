;; * Why

(require passepartout.macros [defskill])
(import passepartout.proto [proto-get]
        passepartout.perceive [sensor-of slash-concerns])

(defn on-repl-eval [signal ctx]
  (when (= (sensor-of signal) "repl-eval")
    (hy.I.passepartout/repl.handle-repl-eval signal ctx)))

(defn on-reload [signal ctx]
  (setv text (proto-get (proto-get signal ':payload) ':text))
  (when (and (= (sensor-of signal) "user-input")
             (isinstance text str)
             (.startswith (.lstrip text) "/reload"))
    (hy.I.passepartout/reload.handle-reload signal ctx)))

(setv on-repl-eval.concerns {"repl-eval" None}
      on-reload.concerns (slash-concerns #{"user-input"}))

(defskill repl
  "Forms from the REPL socket, and /reload: answered here, never by the model."
  :priority 100
  :handlers [on-repl-eval on-reload])
