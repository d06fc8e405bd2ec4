;; * Why

"A conversation ends; a goal often does not. \"Get the backup check green\",
\"find out why the build is slow\", \"call the dentist\": the person says them
once, and the agent should still know of them next week, across restarts and
conversations. The agenda is that list: items the person or the model adds,
kept in the one store, shown to the model in brief with every prompt and to
the person with /agenda."

;; * The skill: the action, its gate, /agenda and the prompt

(require passepartout.macros [defskill])
(import passepartout.act [action-name error-result]
        passepartout.agenda [AgendaError action-problem agenda-add agenda-change agenda-brief
                             agenda-text item-id op-name open-ids]
        passepartout.context [context-runtime]
        passepartout.approvals.hitl [identity-of]
        passepartout.perceive [reply-signal sensor-of]
        passepartout.proto [proto-get])

(defn _facts [ctx]
  "#(open ran) as the context's :agenda gives them; None for what it does not."
  (setv facts (proto-get ctx ':agenda))
  (if facts
      #((list (proto-get facts ':open [])) (list (proto-get facts ':ran [])))
      #(None None)))

(defn agenda-gate [action ctx]
  (if (!= (action-name action) "agenda")
      [:verdict :allow]
      (do (setv [open ran] (_facts ctx)
                why (action-problem action open ran))
          (if why
              [:verdict :reject :reason (+ "agenda: " why)]
              [:verdict :allow]))))

(defn run-agenda [action ctx]
  (setv store (context-runtime ctx "store"))
  (when (is store None)
    (return (error-result "there is no store here, so the agenda cannot be changed")))
  (setv [_ ran] (_facts ctx)
        why (action-problem action (open-ids store) ran))
  (when why
    (return (error-result (+ "agenda: " why))))
  (setv op (op-name (proto-get action ':op))
        session (proto-get ctx ':session)
        now (proto-get ctx ':now))
  (try
    (setv item (if (= op "add")
                   (agenda-add store (proto-get action ':text) "model" session session :now now)
                   (agenda-change store (item-id (proto-get action ':id)) op "model" session session
                                  :text (proto-get action ':text) :reason (proto-get action ':reason)
                                  :now now)))
    (except [e AgendaError]
      (return (error-result (+ "agenda: " (str e))))))
  [:status :ok :op op :id (proto-get item ':id) :state (proto-get item ':state)
   :text (proto-get item ':text)])

(setv _SENSORS #{"user-input" "chat-message"}
      USAGE (+ "Usage: /agenda (the open items), /agenda all, /agenda add TEXT, "
               "/agenda done N [REASON], /agenda drop N [REASON], /agenda update N TEXT"))

(defn _rest [signal]
  "What follows /agenda in what a person said, or None when it is no /agenda."
  (setv text (proto-get (proto-get signal ':payload) ':text))
  (when (and (in (sensor-of signal) _SENSORS) (isinstance text str))
    (setv t (.strip text))
    (when (or (= t "/agenda") (.startswith t "/agenda "))
      (.strip (cut t 7 None)))))

(defn agenda-command [store rest who session [now None]]
  "What /agenda REST, said by WHO in SESSION, answers, after doing it."
  (setv [verb _ arg] (.partition rest " ")
        verb (.lower verb)
        arg (.strip arg)
        [first _ more] (.partition arg " ")
        id (item-id first)
        verbs {"done" "complete" "complete" "complete" "drop" "drop" "update" "update" "edit" "update"}
        said {"complete" "Completed" "drop" "Dropped" "update" "Updated"})
  (try
    (cond
      (= verb "") (agenda-text store)
      (= verb "all") (agenda-text store :everything True)
      (= verb "add")
      (if arg
          (do (setv item (agenda-add store arg "person" who session :now now))
              f"Added #{(proto-get item ':id)}: {(proto-get item ':text)}")
          USAGE)
      (and (in verb verbs) id (or (!= (get verbs verb) "update") (.strip more)))
      (do (setv op (get verbs verb)
                item (agenda-change store id op "person" who session
                                    :text (when (= op "update") more)
                                    :reason (when (!= op "update") more) :now now))
          f"{(get said op)} #{id}: {(proto-get item ':text)}")
      True USAGE)
    (except [e AgendaError]
      (str e))))

(defn on-agenda [signal ctx]
  (setv rest (_rest signal)
        store (context-runtime ctx "store"))
  (when (and (is-not rest None) (is-not store None))
    [(reply-signal signal (agenda-command store rest (identity-of (proto-get signal ':source))
                                          (proto-get signal ':session) (proto-get ctx ':now))
                   "notice")]))

(setv on-agenda.commands [["/agenda [all]" "the open goals (all: the closed ones too)"]
                          ["/agenda add TEXT" "add a goal"]
                          ["/agenda done N [REASON]" "close goal N as done"]
                          ["/agenda drop N [REASON]" "drop goal N"]
                          ["/agenda update N TEXT" "say goal N anew"]])

(defskill agenda
  "Keeps the agenda of open goals: the :agenda action, its evidence gate, /agenda, and the open items in the prompt."
  :priority 85
  :gate agenda-gate
  :handlers [on-agenda]
  :actuators {"agenda" {"run" run-agenda
                        "schema" [:op [:type "any" :required True
                                       :doc "add, update, complete or drop"]
                                  :text [:type "string" :required False
                                         :doc "the item, in a few words (add, update)"]
                                  :id [:type "any" :required False
                                       :doc "the number of an open item (update, complete, drop)"]
                                  :reason [:type "string" :required False
                                           :doc "why: for complete, the evidence: what this task ran and what it showed"]]
                        "doc" "Add, update, complete or drop an item of the agenda, the open goals kept across conversations; completing one needs evidence."
                        "effect" True}})
