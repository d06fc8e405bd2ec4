;; Tests of passepartout/mailbox.hy: the inbox and outbox rows of the store.

(import passepartout.proto [proto-get proto-print]
        passepartout.mailbox [inbox-add inbox-continue inbox-pending outbox-add outbox-sent outbox-pending]
        steps [expect :as check open-store])

(defn test-a-done-inbox-row-keeps-the-message-and-a-sent-reply-forgets-its-text [tmp-path]
  (setv message [:type :event :payload [:text "hello"]]
        next-step [:type :event :payload [:sensor :tool-result :task "t1" :step 1]])
  (with [store (open-store tmp-path)]
    (setv id (inbox-add store "telegram" "u1" message))
    (inbox-continue store id next-step)
    (check (proto-get (get (inbox-pending store) 0) ':signal) next-step "a pending row gives its next step")
    (setv reply (outbox-add store "telegram" "telegram:1" [:type :reply :payload [:text "hi"]] :inbox id))
    (check (inbox-pending store) [] "the reply that ends the task marks the row done")
    (check (.query store "SELECT signal FROM inbox") [#((proto-print message))]
           "a done row holds the message it answered")
    (check (.query store "SELECT count(*) FROM inbox_next") [#(0)] "and no next step")
    (check (proto-get (get (outbox-pending store) 0) ':reply) [:type :reply :payload [:text "hi"]] "pending")
    (outbox-sent store reply)
    (check (.query store "SELECT state, reply FROM outbox") [#("sent" "()")] "a sent reply's text is dropped")))
