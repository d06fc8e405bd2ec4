;; * Why

"Only people answer, and only the people the configuration names: free text
such as \"ok\" does not approve (an answer is a command, /approve CODE, handled
before any model sees the text, see skills-hitl.org), the agent's own request
is not approved by the agent's own account, and two answers at the same moment
do not both get their way. A second answer to a settled approval is told its
state, when and by whom, and changes nothing."

(import copy
        passepartout.proto [proto-get]
        passepartout.display [reason-words]
        passepartout.context [context-runtime]
        passepartout.perceive [reply-signal]
        passepartout.task [ending]
        passepartout.approvals.store [approvals-config expire-due find-approval get-approval
                                 pending-approvals _event _executor _origin _shown _told _when])

;; * Who may answer, and how many

(defn _voters [cfg]
  "(identities that count, approvals needed, denials that end it)"
  (setv strategy (get cfg "strategy")
        voters (list (if (and (!= strategy "any") (get cfg "required"))
                         (get cfg "required")
                         (get cfg "approvers")))
        n (len voters))
  (cond (not voters) #([] 1 1)
        (= strategy "any") #(voters 1 1)
        (= strategy "all") #(voters n 1)
        True (do (setv need (+ (// n 2) 1))
                 #(voters need (+ (- n need) 1)))))

(defn _not-yours [cfg approval who session host choice]
  "Why WHO (in SESSION, or on the host) may not give CHOICE to APPROVAL, or None."
  (setv [voters _ _] (_voters cfg)
        code (proto-get approval ':code))
  (cond
    (and voters (not (in who voters)))
    f"You ({who}) are not one of the approvers, so your answer to {code} was not counted."
    (and (not voters) (not host) (!= session (proto-get approval ':session)))
    f"Approval {code} belongs to another conversation; it can be answered only there."
    (and (= choice "approve") (get cfg "separate_duties") (= who (proto-get approval ':requester)))
    f"You asked for this action yourself, and separation of duties is on: someone else must approve {code}."
    True None))

(defn _settled-text [approval now]
  "What to say about an approval that is no longer pending."
  (setv code (proto-get approval ':code)
        state (proto-get approval ':state)
        at (when (proto-get approval ':decided) (_when (proto-get approval ':decided) now))
        by (proto-get approval ':decided-by)
        note (proto-get approval ':note)
        result (proto-get approval ':result))
  (cond
    (= state "expired")
    f"Approval {code} expired at {at} with no answer; its action was not run and its task ended."
    (= state "denied")
    (+ f"Approval {code} was already denied at {at} by {by}" (if note f" ({note})" "") "; nothing was run.")
    (in state #("approved" "executing"))
    f"Approval {code} was already approved at {at} by {by}; it is running now. Nothing more will run."
    (= state "executed")
    (+ f"Approval {code} was already approved at {at} by {by} and ran at {(_when (proto-get approval ':finished) now)}"
       (if result f" ({(. (or (proto-get result ':status) ':error) name)})" "")
       ". Nothing more was run.")
    (= state "failed")
    ;; failed before it ran, or cut off while it ran: the note says which
    f"Approval {code} was approved at {at} by {by} and did not finish: {note}."
    (= state "withdrawn")
    f"Approval {code} was withdrawn at {at} by {by} with /stop; its action was not run."
    True f"Approval {code} is {state}."))

;; * Answering

(defn _answering-as [env approval session]
  "SESSION as the approval's own when it is the conversation that started the
   workflow of the worker that asked (see =workflow.org=); else SESSION."
  (setv workflows (getattr env "workflows" None))
  (if (and workflows session
           (= session (.conversation-of workflows (proto-get approval ':session))))
      (proto-get approval ':session)
      session))

(defn _result [ok text [emit None]]
  [:ok ok :text text :emit (or emit [])])

(defn context-env [ctx]
  "The daemon's services, from the context CTX a pre-reason handler is given,
   as answering needs them: their clock stands still at the time the command
   arrived."
  (setv now (proto-get ctx ':now)
        env (copy.copy (context-runtime ctx "services")))
  (setv env.clock (fn [] now))
  env)

(defn record-answer [env who session key choice [reason None] [minutes None] [host False] [hosts None]]
  "Record WHO's answer CHOICE (\"approve\" or \"deny\") to the approval whose code
   or token is KEY, given in SESSION (None on the host), and settle the approval
   when the answers suffice. MINUTES asks for a grant; with HOSTS, a grant of
   those hosts (=grants.org=). A result plist, or, for an approval this answer
   settled as approved and that is not left to the daemon,
   (:approved APPROVAL :grant-minutes M :grant-hosts H :now NOW) for the caller to run."
  (setv store env.store
        cfg (approvals-config env.config)
        now (env.clock)
        emitted []
        _ (expire-due store now)
        approval (find-approval store key))
  (when (is approval None)
    (return (_result False f"No approval has the code {(.upper (.strip (str key)))}." emitted)))
  (setv code (proto-get approval ':code)
        refusal (_not-yours cfg approval who (_answering-as env approval session) host choice))
  (when refusal
    (_event store "answer-refused" approval who now [:answer choice :why refusal])
    (return (_result False refusal emitted)))
  (when (and minutes (> minutes (get cfg "max_grant_minutes")))
    (return (_result False (+ f"A grant may last at most {(get cfg "max_grant_minutes")} minutes; "
                              f"{code} was not answered.")
                     emitted)))
  (setv [voters needed denials-end] (_voters cfg)
        outcome None)
  (with [conn (.transaction store)]
    (setv approval (get-approval store (proto-get approval ':id)))
    (when (!= (proto-get approval ':state) "pending")
      (return (_result False (_settled-text approval now) emitted)))
    (setv before (.fetchone (.execute conn "SELECT ts, answer FROM answers WHERE approval = ? AND who = ?"
                                      #((proto-get approval ':id) who))))
    (when before
      (return (_result False (+ f"You already answered {code} ({(get before 1)}) at {(_when (get before 0) now)}; "
                                (_tally-text (_approving (_counted store approval voters)) needed))
                       emitted)))
    (.execute conn "INSERT INTO answers (approval, ts, who, session, answer, reason, minutes, hosts)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
              #((proto-get approval ':id) now who session choice reason minutes
                (when hosts (.join " " hosts))))
    (_event store "answered" approval who now [:answer choice :reason reason :minutes minutes
                                               :hosts (list (or hosts []))
                                               :from (or session "host")])
    (setv counted (_counted store approval voters)
          yes (_approving counted)
          no (lfor c counted :if (= (get c 1) "deny") c)
          settled (cond (>= (len yes) needed) "approved"
                        (>= (len no) denials-end) "denied"
                        True None))
    (when settled
      (setv changed (. (.execute conn "UPDATE approvals SET state = ?, decided = ?, decided_by = ?,
                                              note = ?, executor = ?
                                       WHERE id = ? AND state = 'pending'"
                                 #(settled now (.join ", " (gfor c (if (= settled "approved") yes no) (get c 0)))
                                   (when (= settled "denied") reason)
                                   (when (and (= settled "approved") (not host)) (_executor))
                                   (proto-get approval ':id)))
                       rowcount))
      (when (!= changed 1)
        (return (_result False (_settled-text (get-approval store (proto-get approval ':id)) now) emitted)))
      (setv approval (get-approval store (proto-get approval ':id))
            grant-minutes (_grant yes)
            outcome #(settled grant-minutes (_grant-hosts yes)))
      (_event store settled approval (proto-get approval ':decided-by) now))
    (when (is outcome None)
      (return (_result True (+ f"Counted your {(if (= choice "approve") "approval" "denial")} of {code}; "
                               (_tally-text yes needed))
                       emitted))))
  (setv [settled grant-minutes grant-hosts] outcome)
  (cond (= settled "denied") (_denied env approval session now emitted)
        host (+ (_result True f"Approved {code}.") [:handed-over True])
        True [:approved approval :grant-minutes grant-minutes :grant-hosts grant-hosts :now now]))

(defn _counted [store approval voters]
  "The answers to APPROVAL that count (every one, or only the VOTERS'), as
   #(who answer minutes hosts), in the order they came."
  (lfor [w a m h] (.query store "SELECT who, answer, minutes, hosts FROM answers WHERE approval = ? ORDER BY id"
                        #((proto-get approval ':id)))
        :if (or (not voters) (in w voters))
        #(w a m (if h (.split h) None))))

(defn _approving [counted]
  (lfor c counted :if (= (get c 1) "approve") c))

(defn _grant [yes]
  "The grant the approving answers YES asked for, in minutes, or None: the
   shortest, when every one of them asked for one."
  (when (and yes (all (gfor c yes (get c 2))))
    (min (gfor c yes (get c 2)))))

(defn _grant-hosts [yes]
  "The hosts a grant from the approving answers YES names: None when none of
   them named a host (a grant of the action's kind, or none); else the hosts
   every one of them named, which may be none at all: answers that differ in
   what they grant make no grant."
  (when (any (gfor c yes (get c 3)))
    (setv common (set (or (get (get yes 0) 3) [])))
    (for [c yes]
      (&= common (set (or (get c 3) []))))
    (sorted common)))

(defn _grant-minutes [store approval cfg]
  "#(minutes hosts): the grant the approving answers to APPROVAL asked for
   (see =_grant= and =_grant-hosts=)."
  (setv [voters _ _] (_voters cfg)
        yes (_approving (_counted store approval voters)))
  #((_grant yes) (_grant-hosts yes)))

(defn _tally-text [yes needed]
  f"it has {(len yes)} of the {needed} approvals it needs.")

(defn _denied [env approval session now emitted]
  (setv store env.store
        origin (_origin approval)
        code (proto-get approval ':code)
        note (proto-get approval ':note)
        text (+ f"Approval {code} was denied by {(proto-get approval ':decided-by)}"
                (if note f" ({note})" "")
                f": {(_shown (proto-get approval ':action) 300)} was not run, and its task has ended."))
  (_told store approval text now)
  (cond (= session (proto-get approval ':session)) (_result True text emitted)
        (is session None)
        (+ (_result True f"Denied {code}." (+ emitted [(ending (reply-signal origin text "notice"))]))
           [:handed-over True])
        True (_result True f"Denied {code}; the conversation that asked has been told."
                      (+ emitted [(ending (reply-signal origin text "notice"))]))))

;; * What each may see

(defn pending-text [env who session [host False]]
  "The pending approvals WHO may see, as a result plist like answer-approval's:
   their conversation's, or every one for a configured approver and on the host."
  (setv store env.store
        cfg (approvals-config env.config)
        now (env.clock)
        [voters needed _] (_voters cfg)
        _ (expire-due store now)
        rows (pending-approvals store (if (or host (in who voters)) None session)))
  (_result True (_pending-lines rows now)))

(defn _pending-lines [rows now]
  (if (not rows)
      "No approvals are pending."
      (.join "\n" (+ ["Pending approvals:"]
                     (lfor a rows
                           (+ f"  {(proto-get a ':code)}  {(_shown (proto-get a ':action) 200)}\n"
                              f"      {(reason-words (proto-get a ':action) (proto-get a ':reason))}\n"
                              f"      asked by {(proto-get a ':requester)} in {(proto-get a ':session)}, "
                              f"expires at {(_when (proto-get a ':expires) now)}"))))))
