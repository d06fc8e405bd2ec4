;; * Why

"A task is what one thing the person said sets going: the model's actions and
their results, until it answers. It is created when the message arrives,
continued after each action, suspended while a person decides on an action,
resumed when they answer, stopped, and finished. Each of those moves is made
here and nowhere else, by functions from a task's state and what just happened
to two lists: the signals that follow (replies for the person, the task's next
step) and the records to write (events for the session's history, the inbox
row's new content). The caller writes the records in one transaction and sends
the signals on; the loop, the approvals and the REPL all go through these
functions, so a task goes on after an approved action exactly as it goes on
after an allowed one."

(import hashlib uuid
        passepartout.proto [proto-get proto-put proto-merge proto-print proto-without]
        passepartout.perceive [reply-signal]
        passepartout.display [action-words reason-words status-words result-words]
        passepartout.budget [ZERO]
        passepartout.records [data-read]
        passepartout.mailbox [inbox-continue]
        passepartout.journal [journal-append journal-context])

(setv _ACTION      ':action
      _ATTEMPTS    ':attempts
      _BY          ':by
      _CALL        ':call
      _CONTEXT     ':context
      _CORRECTION  ':correction
      _DATA        ':data
      _ENDS-TASK   ':ends-task
      _ERROR       ':error
      _ESCALATE    ':escalate
      _EVENT       ':event
      _FINDINGS    ':findings
      _FIRE        ':fire
      _FIRED       ':fired
      _GATE        ':gate
      _INBOX       ':inbox
      _KILL        ':kill
      _LINE        ':line
      _NOTE        ':note
      _OK          ':ok
      _PAYLOAD     ':payload
      _PROVIDER    ':provider
      _RAISED      ':raised
      _RAN         ':ran
      _REASON      ':reason
      _REFUSED     ':refused
      _REJECT      ':reject
      _REPLY       ':reply
      _RESUME      ':resume
      _SAYS        ':says
      _SENSOR      ':sensor
      _SESSION     ':session
      _SIGNAL      ':signal
      _SOURCE      ':source
      _STATES      ':states
      _STATUS      ':status
      _STEP        ':step
      _TASK        ':task
      _TEXT        ':text
      _TOOL-RESULT ':tool-result
      _TS          ':ts
      _USAGE       ':usage
      _VALIDATOR   ':validator
      _VERDICT     ':verdict
      _WAITING     ':waiting
      _WORKFLOW    ':workflow)

;; * The state

(defn fingerprint [#* values]
  "A short hash of VALUES' printed text: what makes two actions (and results) the same."
  (cut (.hexdigest (hashlib.sha256 (.encode (.join "\n" (map proto-print values)) "utf-8"))) 16))

(defn _new-id [signal]
  (setv inbox (proto-get (or (proto-get signal _SOURCE) []) _INBOX))
  (if (is inbox None)
      (cut (. (uuid.uuid4) hex) 12)
      f"inbox-{inbox}"))

(defn task-state [signal [given None]]
  "The state of the task SIGNAL belongs to: GIVEN's keys first, then the
   signal's payload, then a new task's."
  (setv payload (or (proto-get signal _PAYLOAD) [])
        given (or given []))
  (defn pick [key default]
    (setv v (proto-get given key))
    (if (is v None)
        (do (setv v (proto-get payload key))
            (if (is v None) default v))
        v))
  [_TASK (or (pick _TASK None) (_new-id signal))
   _STEP (pick _STEP 0)
   _STATES (list (pick _STATES []))
   _USAGE (or (pick _USAGE None) ZERO)
   _REFUSED (list (pick _REFUSED []))
   _RAN (list (pick _RAN []))
   _FIRED (list (pick _FIRED []))])

;; * Records

(defn event-record [kind session data]
  [_EVENT kind _SESSION session _DATA data])

(defn write-records [store records [ts None]]
  "Write RECORDS to STORE (inside the caller's transaction): events, the
   contexts they name, and inbox rows' next steps."
  (for [r records]
    (cond (is-not (proto-get r _EVENT) None)
          (journal-append store r :ts (or (proto-get r _TS) ts))
          (is-not (proto-get r _CONTEXT) None)
          (journal-context store (proto-get r _CONTEXT) (proto-get r _TEXT))
          (is-not (proto-get r _WORKFLOW) None)
          ;; reached at run time: the workflow module stands on the runner, which stands on this one
          (hy.I.passepartout/workers.workflow-resume store (proto-get r _WORKFLOW) (proto-get r _RESUME))
          True
          (inbox-continue store (proto-get r _INBOX) (proto-get r _SIGNAL)))))

;; * Finishing

(defn ending [reply]
  "REPLY, marked as the one that ends its task."
  (proto-put reply _PAYLOAD (proto-put (proto-get reply _PAYLOAD) _ENDS-TASK True)))

(defn ends-task [reply]
  "True when REPLY ends the task it belongs to."
  (bool (proto-get (or (proto-get reply _PAYLOAD) []) _ENDS-TASK)))

(defn finish [signal state text [kind "answer"] [more None]]
  "The task of STATE ends with TEXT told to the person: #(signals records).
   The reply names the task, so that its delivery is a turn of the task too;
   MORE (a plist) adds to its payload what those who read the reply need."
  (setv reply (ending (reply-signal signal text kind))
        payload (proto-put (proto-get reply _PAYLOAD) _TASK (proto-get state _TASK)))
  #([(proto-put reply _PAYLOAD (if more (proto-merge payload more) payload))]
    [(event-record "answer" (proto-get signal _SESSION) [:text text :task (proto-get state _TASK)])]))

(defn stop [signal state why]
  "The task ends early, for WHY."
  (finish signal state (+ "Stopped: " why) "notice"))

;; * What follows an outcome

(setv REFUSALS-TO-STOP 3)

(defn refused-again [refused outcome]
  "REFUSED with the actions OUTCOME's attempts were refused for, and the action
   now refused REFUSALS-TO-STOP times, if any."
  (setv refused (list refused)
        repeated None)
  (for [attempt (proto-get outcome _ATTEMPTS [])]
    (when (= (proto-get attempt _VERDICT) _REJECT)
      (setv action (proto-get attempt _ACTION)
            mark (fingerprint action))
      (.append refused mark)
      (when (>= (.count refused mark) REFUSALS-TO-STOP)
        (setv repeated #(action (proto-get attempt _GATE) (proto-get attempt _REASON))))))
  #(refused repeated))

(defn refusal-lines [signal outcome]
  "One line per proposal a gate refused on the way to OUTCOME (a refusal lists them itself)."
  (if (= (proto-get outcome _VERDICT) _REFUSED)
      []
      (lfor a (proto-get outcome _ATTEMPTS [])
            :if (= (proto-get a _VERDICT) _REJECT)
            (reply-signal signal (refused-line (proto-get a _GATE) (or (proto-get a _ACTION) [])
                                               (proto-get a _REASON))
                          "decision"))))

(defn refused-line [gate action reason]
  "One line saying that GATE refused ACTION for REASON, in words: the command
   is not said twice when the reason starts with it."
  f"{gate} refused {(action-words action)}: {(reason-words action reason)}")

(defn after-outcome [signal outcome state repeated refusal]
  "Which way the task of STATE goes after OUTCOME: (:then :act) to carry out its
   action, (:then :ask) to ask a person about it, or (:then :end :moved
   #(signals records)) when the task ends here. REPEATED is what refused-again
   found; REFUSAL the text that tells the person every attempt was refused."
  (setv v (. (proto-get outcome _VERDICT) name))
  (defn end [moved] [:then :end :moved moved])
  (cond
    (= v "refused")
    (end (finish signal state refusal "refusal"))
    repeated
    (end (stop signal state
               (+ f"the gates refused the same action {REFUSALS-TO-STOP} times in this task: "
                  (action-words (get repeated 0)) " — " (str (get repeated 1)) ": "
                  (str (get repeated 2)))))
    (= v "stopped")
    (end (stop signal state (+ (str (proto-get outcome _REASON)) ".")))
    (= v "failed")
    (end (finish signal state (+ "No model could answer: " (str (proto-get outcome _REASON))) "error"))
    (= v "escalate") [:then :ask]
    True [:then :act]))

(defn not-approvable [signal action outcome]
  "What the person is told of an escalated ACTION where no one can approve it."
  [(ending (reply-signal signal
                         (+ "This action needs a person's approval and approvals are not set up, so it was not run: "
                            (action-words action) " — " (str (proto-get outcome _REASON)))
                         "approval"))])

(defn is-answer [action result]
  "True when RESULT of ACTION is an answer to the person, checked by the reply
   validators before it goes out."
  (and (= (. (proto-get action _ACTION) name) "message")
       (= (proto-get result _STATUS) _OK)))

(defn after-act [signal action result state outcome budget [review None]]
  "What follows RESULT of ACTION, the allowed action of OUTCOME: #(signals
   records). REVIEW is the validators' review of an answer; BUDGET the step budget."
  (_marked-fallback
    (if review
        (after-reply signal action result state review)
        (after-action signal action result state budget
                      :extra (when (proto-get outcome _NOTE) [:note (proto-get outcome _NOTE)])
                      :call (proto-get outcome _CALL)))
    outcome))

(defn _marked-fallback [moved outcome]
  "MOVED with its answer marked as the fallback's when the symbolic provider gave it."
  (setv [signals records] moved)
  (if (!= (proto-get outcome _PROVIDER) "symbolic")
      moved
      #(signals (lfor r records
                      (if (= (proto-get r _EVENT) "answer")
                          (proto-put r _DATA (proto-put (proto-get r _DATA) _BY "fallback"))
                          r)))))

;; * Going on after an action

;; ** Fixed points and cycles

(defn _trace [signal action result note]
  (reply-signal signal (+ "ran " (action-words action) " → " (status-words result) note)
                "trace"))

(defn _ran [action result]
  "The (name status) an executed ACTION leaves in the task's state."
  [(. (proto-get action _ACTION) name) (. (or (proto-get result _STATUS) _ERROR) name)])

(setv STATE-WINDOW 8)

(defn state-hash [action result]
  "The hash of where ACTION and its RESULT leave a task."
  (fingerprint action result))

(defn after-action [signal action result state budget [note ""] [extra None] [call None]]
  "What follows RESULT of ACTION in the task of STATE: #(signals records).
   BUDGET is the step budget; NOTE is added to the trace line; EXTRA is added
   to the next step's payload (what else the model proposed and was not run);
   CALL is the model's tool call the action came from, which the result answers."
  (setv session (proto-get signal _SESSION)
        task (proto-get state _TASK)
        n (proto-get state _STEP 0)
        states (list (proto-get state _STATES [])))
  (when (= (. (proto-get action _ACTION) name) "message")
    (return (finish signal state (or (proto-get result _REPLY) (proto-get result _ERROR) ""))))
  (setv after (state-hash action result)
        records [(+ (event-record "result" session (+ [:action action :result result :task task :step n]
                                                      (if call [:call call] [])))
                    [:state-after after])]
        trace (_trace signal action result note))
  (defn ended [text]
    (setv [signals more] (finish signal state text "notice"))
    #((+ [trace] signals) (+ records more)))
  (setv next-state [:step (+ n 1)
                    :states (cut (+ states [after]) (- STATE-WINDOW) None)
                    :ran (+ (list (proto-get state _RAN [])) [(_ran action result)])]
        tool-result (+ [:sensor :tool-result :action action :result result]
                       (if call [:call call] [])))
  (cond
    (= (proto-get result _STATUS) _WAITING)
    (do (setv [next _] (_next-step signal tool-result state next-state))
        #([trace] (+ records [[:workflow (proto-get result _WORKFLOW) :resume next]])))
    (and states (= after (get states -1)))
    (ended (+ "Stopped at a fixed point: this action left the task where the one before it had, so going on would change nothing. Last result: "
              (result-words result)))
    (in after states)
    (ended (+ f"Stopped: the task came back to where it was {(- (len states) (.index states after))} actions ago, so it was going round in circles. Last result: "
              (result-words result)))
    (>= (+ n 1) budget)
    (ended (+ f"Stopped after {budget} actions (the step budget of one task). Last result: "
              (result-words result)))
    True
    (do (setv [next kept] (_next-step signal (+ tool-result (or extra [])) state next-state))
        #([trace next] (+ records kept)))))

(defn _next-step [signal fields state changes]
  "The signal that takes the task of STATE on (a tool result: FIELDS, then
   STATE with CHANGES), and the records that keep it as its inbox row's next
   step, so that a daemon that dies here takes the task up where it was."
  (setv source (proto-get signal _SOURCE)
        next [:type :event
              :source source
              :session (proto-get signal _SESSION)
              :payload (+ fields (proto-merge state changes))]
        inbox (proto-get (or source []) _INBOX))
  #(next (if (is inbox None) [] [[:inbox inbox :signal next]])))

;; * Several calls in one step

(defn unrun-result [entry [stopped-at None]]
  "The result that answers ENTRY, a call of a batch that was not run;
   STOPPED-AT is the call at which the batch stopped running, if it did."
  (cond
    (= (proto-get entry _VERDICT) _REJECT)
    [:status :refused :gate (proto-get entry _GATE) :reason (proto-get entry _REASON)]
    (and stopped-at (is-not entry stopped-at))
    [:status :not-run :reason "a call before it in the same answer was not run: propose it again after that one"]
    (= (proto-get entry _VERDICT) _ESCALATE)
    [:status :not-run :reason "it needs a person's approval: propose it again on its own"]
    True
    [:status :not-run :reason "an answer comes after the results of the calls beside it have been seen"]))

(defn unrun-record [signal state entry result]
  "The result turn of ENTRY, a call of a batch answered with RESULT without being run."
  (setv call (proto-get entry _CALL))
  (event-record "result" (proto-get signal _SESSION)
                (+ [:action (proto-get entry _ACTION) :result result
                    :task (proto-get state _TASK) :step (proto-get state _STEP 0)]
                   (if call [:call call] []))))

(defn presenting [next action result call]
  "NEXT, the task's next step, presenting ACTION's RESULT (answering CALL)
   as its last turn: #(next records)."
  (setv payload (proto-without (proto-get next _PAYLOAD) [_NOTE _CALL])
        payload (+ (proto-merge payload [:action action :result result])
                   (if call [:call call] []))
        next (proto-put next _PAYLOAD payload)
        inbox (proto-get (or (proto-get next _SOURCE) []) _INBOX))
  #(next (if (is inbox None) [] [[:inbox inbox :signal next]])))

(defn is-next-step [s]
  "True when the signal S takes its task on (a tool result for reason)."
  (= (proto-get (or (proto-get s _PAYLOAD) []) _SENSOR) _TOOL-RESULT))

;; * Nothing twice

(defn intent [signal action state]
  "The record that ACTION is about to run as step N of the task of STATE."
  (event-record "intent" (proto-get signal _SESSION)
                [:action action :task (proto-get state _TASK) :step (proto-get state _STEP 0)]))

(defn cut-off [store signal state]
  "The action the task of STATE was running at its current step when the
   daemon stopped, or None."
  ;; the task's own turns, by the task's index: a long conversation costs no more
  (setv rows (.query store "SELECT kind, data FROM events
                            WHERE task = ? AND kind IN ('intent', 'result')
                            ORDER BY id DESC LIMIT 1"
                     #((str (proto-get state _TASK)))))
  (when (and rows (= (get rows 0 0) "intent"))
    (setv d (data-read (get rows 0 1)))
    (when (and (= (proto-get d _TASK) (proto-get state _TASK))
               (= (proto-get d _STEP) (proto-get state _STEP 0)))
      (proto-get d _ACTION))))

(defn cut-off-text [action]
  (+ "This action was started but its result was never recorded: " (action-words action)
     " (the daemon stopped while it ran, or its result could not be stored). It may have done part "
     "or all of its work, so it was not run again, and its task has ended."))

;; * Answering the reply validators

(defn _validation-record [signal state review]
  (event-record "validation" (proto-get signal _SESSION)
                [_TASK (proto-get state _TASK) _STEP (proto-get state _STEP 0)
                 _VERDICT (proto-get review _VERDICT)
                 _FINDINGS (lfor f (proto-get review _FINDINGS [])
                                 [_VALIDATOR (proto-get f _VALIDATOR) _SAYS (proto-get f _SAYS)
                                  _RAISED (proto-get f _RAISED)])]))

(defn after-reply [signal action result state review]
  "What follows the model's answer (ACTION, run as RESULT) given the validators'
   REVIEW: #(signals records)."
  (setv verdict (. (proto-get review _VERDICT) name)
        text (or (proto-get result _REPLY) "")
        check [(_validation-record signal state review)])
  (defn with-check [moved]
    #((get moved 0) (+ check (get moved 1))))
  (cond
    (= verdict "deliver")
    (with-check (finish signal state text))
    (= verdict "note")
    (with-check (finish signal state (+ text "\n\n" (proto-get review _NOTE))))
    (= verdict "withhold")
    (with-check (finish signal state (proto-get review _NOTE) "notice"))
    True
    (_held signal action state review check)))

(defn _held [signal action state review check]
  (setv session (proto-get signal _SESSION)
        n (proto-get state _STEP 0)
        shown (if (proto-get review _KILL)
                  [:action :message :text "(an answer the checks discarded)"]
                  action)
        outcome [:status :held :reason "not delivered: the reply validators objected"]
        [next kept] (_next-step signal
                                [:sensor :tool-result :action shown :result outcome
                                 :note (proto-get review _CORRECTION)]
                                state
                                [:step (+ n 1)
                                 :fired (+ (list (proto-get state _FIRED []))
                                           (list (proto-get review _FIRE [])))]))
  #([(reply-signal signal (proto-get review _LINE) "decision") next]
    (+ check
       [(event-record "result" session [:action shown :result outcome
                                        :task (proto-get state _TASK) :step n])]
       kept)))
