;; * Why

"The core loop can do nothing by itself: every action it can take is an
actuator some skill registered. The built-in ones are ordinary skill files,
loaded like any person's own, so they can be read, replaced or disabled the
same way. skills-core.org is the source of the ones that act on the
workspace, the shell, memory and the conversation, and of /stop, /help
and /status; each of its blocks names the skill file it tangles into."

;; * message: the model's answer

(require passepartout.macros [defskill])
(import passepartout.act [error-result]
        passepartout.proto [proto-get])

(defn run-message [action ctx]
  (setv text (proto-get action ':text))
  (if (isinstance text str)
      [:status :ok :reply text]
      (error-result "a message needs :text")))

(defskill message
  "The reply to the person."
  :priority 10
  :actuators {"message" {"run" run-message
                         "schema" [:text [:type "string" :required True
                                          :doc "what to say to the person"]]
                         "doc" "Answer the person with TEXT."
                         "effect" False}})
