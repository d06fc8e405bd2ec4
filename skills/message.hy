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
