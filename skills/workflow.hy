;; * Why

":spawn and :plan are actions like any other: the schema check reads their
fields from the actuators declared here, the gates judge them, and the act
stage carries them out. What they mean is in workflow.org; this skill makes
them part of the tool belt and holds the gate that says what a workflow may be."

(require passepartout.macros [defskill])
(import passepartout.act [action-name error-result]
        passepartout.context [context-runtime]
        passepartout.skills [actuator-table]
        passepartout.proto [proto-get]
        passepartout.sandbox [READ-ONLY-SHELL workspace-read-only]
        passepartout.shell.judge [sandbox-in-force]
        passepartout.workflow [session-workers spawn-problem plan-problem tool-action])

(defn _profiles [ctx]
  (.get (.get (or (context-runtime ctx "config") {}) "workers" {}) "profiles" {}))

(defn _actions [ctx]
  (setv registry (context-runtime ctx "skills"))
  (if registry (set (actuator-table registry)) (set)))

(defn workflow-gate [action ctx]
  (setv name (action-name action)
        workers (session-workers ctx)
        tools (proto-get workers ':tools))
  (cond
    (and (is-not tools None) (!= name "message") (not (in name (lfor t tools (tool-action t)))))
    [:verdict :reject
     :reason (+ f"this worker may not take :{name} actions; its tools are "
                (.join ", " (gfor t tools (+ ":" t))) " and :message to answer")]
    (and (= name "shell") (workspace-read-only ctx) (not (sandbox-in-force ctx)))
    [:verdict :reject
     :reason (+ f"this worker's shell is read-only ({READ-ONLY-SHELL}), and without the sandbox"
                " nothing holds a command to that: read files with :read-file instead")]
    (= name "spawn")
    (do (setv why (spawn-problem action workers (_profiles ctx) (_actions ctx)))
        (if why [:verdict :reject :reason (+ "spawn refused: " why)] [:verdict :allow]))
    (= name "plan")
    (do (setv why (plan-problem action workers (_profiles ctx) (_actions ctx)))
        (if why [:verdict :reject :reason (+ "plan refused: " why)] [:verdict :allow]))
    True [:verdict :allow]))

;; * The actuators

(defn _runtime [ctx]
  (getattr (context-runtime ctx "services") "workflows" None))

(defn _unfit [check action ctx]
  (check action (session-workers ctx) (_profiles ctx) (_actions ctx)))

(defn _start [kind check not-started action ctx]
  "Start the background work of ACTION (a :spawn or a :plan, KIND) once CHECK
   finds nothing wrong with it; NOT-STARTED says what did not start without a runtime."
  (setv runtime (_runtime ctx)
        why (_unfit check action ctx))
  (cond why (error-result f"{kind} refused: {why}")
        (is runtime None)
        (error-result f"background work is not running in this daemon, so {not-started}")
        True ((getattr runtime kind) action ctx)))

(defn run-spawn [action ctx]
  (_start "spawn" spawn-problem "no worker was started" action ctx))

(defn run-plan [action ctx]
  (_start "plan" plan-problem "the plan was not started" action ctx))

;; * /workers: the live graph

(import passepartout.perceive [reply-signal sensor-of]
        passepartout.workflow [workers-text workers-outcomes])

(defn on-workers [signal ctx]
  (setv text (proto-get (proto-get signal ':payload) ':text)
        store (context-runtime ctx "store"))
  (when (and (= (sensor-of signal) "user-input")
             (isinstance text str)
             (= (.strip text) "/workers")
             (is-not store None))
    [(reply-signal signal (workers-text store (proto-get signal ':session) (proto-get ctx ':now)) "notice")]))

(defn workers-augment [ctx]
  "How this conversation's finished workers fared, for the prompt (see =workflow.org=)."
  (setv store (context-runtime ctx "store"))
  (when (and store (proto-get (session-workers ctx) ':known))
    (workers-outcomes store (proto-get ctx ':session))))

(defn worker-answer-check [text ctx]
  "What is wrong with TEXT as a worker's answer, or None (a worker's own session only)."
  (when (proto-get (session-workers ctx) ':id)
    (setv t (.strip (or text "")))
    (cond (not t)
          "a worker's answer is its result, and this one is empty: answer with what you found or did"
          (.endswith t "?")
          (+ "nobody reads a worker's conversation, so a question gets no answer: do what you can with"
             " your actions, then answer with the result, saying what is missing if anything is"))))

(setv on-workers.commands [["/workers" "the workflows of this conversation: each worker's state, time, actions and spend"]])

;; * The skill

(defskill workflow
  "Starts background work: one worker (:spawn) or a workflow of them (:plan), each governed like the conversation."
  :priority 92
  :gate workflow-gate
  :handlers [on-workers]
  :augment workers-augment
  :validators {"worker-answer" {"check" worker-answer-check "kill" False}}
  :actuators {"spawn" {"run" run-spawn
                       "schema" [:objective [:type "string" :required True
                                             :doc "what the worker is to do and bring back"]
                                 :depends-on [:type "list" :required False
                                              :doc "ids of workers whose results it needs first"]
                                 :not-before [:type "string" :required False
                                              :doc "ISO 8601 time before which it does not start"]
                                 :tools [:type "any" :required False
                                         :doc "a tool profile's name, or a list of the actions it may take"]
                                 :mode [:type "string" :required False
                                        :doc "\"objective\" (its objective and its dependencies' results) or \"full\" (the conversation too)"]
                                 :continue [:type "string" :required False
                                            :doc "the id of a worker that stopped before it was done (out of steps or time), to go on with its work; at most 3 times in a row"]]
                       "doc" "Start a worker in the background; its result comes back to this task when it is done."
                       "effect" True}
              "plan" {"run" run-plan
                      "schema" [:title [:type "string" :required True
                                        :doc "what the workflow is for, in a few words"]
                                :steps [:type "list" :required True
                                        :doc "the steps, each (:id \"a\" :objective \"…\" :depends-on (\"…\")), optionally with :tools and :not-before"]]
                      "doc" "Start a workflow of workers at once; a step starts when the steps it depends on are done, and the results come back to this task."
                      "effect" True}})
