;; * Why

"Some actions are neither allowed nor refused: a gate escalates them, and a
person decides. Every agent that asks people for approval fails in a few known
ways: the question is lost when the process restarts, or it is kept forever and
the task waits in silence; free text such as \"ok\" approves by accident; a stale
button runs something other than what was shown; the agent's own request is
approved by the agent's own account. This module is built against each of
those."

;; ** The modules

(import asyncio logging os time
        passepartout.proto [proto-get proto-put]
        passepartout.context [context-for context-limit context-runtime]
        passepartout.perceive [reply-signal]
        passepartout.act [act]
        passepartout.records [data-print kv-get kv-put kv-delete]
        passepartout.mailbox [notice-add notices-waiting notice-delivered]
        passepartout.journal [journal-event]
        passepartout.display [display-text output-words reason-words]
        passepartout.task [task-state after-action ending write-records]
        passepartout.approvals.binding [action-hash binding-of binding-problem policy-version
                                   script-files floor-problem]
        passepartout.approvals.store [CODE-ALPHABET HOST-IDENTITY approvals-config identity-of
                                 token-hash get-approval find-approval request-approval
                                 expire-due withdraw-waiting recover approvals-boot
                                 pending-approvals _select _approval _event _when _shown
                                 _origin _task-of _executor _alive _fail _told]
        passepartout.approvals.voting [context-env record-answer pending-text
                                  _voters _settled-text _result _grant-minutes]
        passepartout.approvals.grants [shell-escalations grant-scope describe-scope add-grant host-scope
                             active-grants grant-covering revoke-grant grants-text])

;; * Asking

(defn _waiting-for [cfg approval]
  (setv [voters needed _] (_voters cfg))
  (cond (not voters)
        (if (get cfg "separate_duties")
            "someone else in this conversation"
            "anyone in this conversation")
        (= (get cfg "strategy") "any") (+ "one of " (.join ", " voters))
        True f"{needed} of {(.join ", " voters)}"))

(defn _action-details [action]
  "The lines under an action's name in a request for approval: the model's
   explanation, and what a file action would write."
  (setv why (proto-get action ':explanation)
        content (proto-get action ':content))
  (+ (if (and (isinstance why str) (.strip why)) [(display-text f"Explanation: {why}")] [])
     (if (isinstance content str)
         [(+ "Content:\n" (output-words content 12 1200))]
         [])))

(defn ask-signal [signal approval token outcome cfg]
  "The reply that asks the person about APPROVAL."
  (setv code (proto-get approval ':code)
        gates (lfor d (proto-get outcome ':decisions [])
                    :if (= (proto-get d ':verdict) ':escalate)
                    f"  {(proto-get d ':gate)}: {(reason-words (proto-get approval ':action) (proto-get d ':reason))}")
        stripped (proto-get outcome ':stripped [])
        minutes (int (min 30 (get cfg "max_grant_minutes")))
        lines [f"Approval needed — code {code} (expires at {(_when (proto-get approval ':expires) (proto-get approval ':created))})."
               f"Action: {(_shown (proto-get approval ':action))}"
               #* (_action-details (proto-get approval ':action))
               "Why a person must decide:"
               #* (or gates [f"  {(proto-get outcome ':gate)}: {(proto-get outcome ':reason)}"])])
  (when stripped
    (.append lines (+ "The proposal claimed its own approval (" (.join ", " (gfor s stripped (+ ":" s)))
                      "); that was ignored.")))
  (.append lines f"Who may answer: {(_waiting-for cfg approval)}.")
  (.append lines f"Answer /approve {code} to run it once,")
  (when (> minutes 0)
    (.append lines f"  /approve {code} {minutes}m to run it and allow this kind of action here for {minutes} minutes,"))
  (.append lines f"  or /deny {code} [reason].")
  (setv reply (reply-signal signal (.join "\n" lines) "approval"))
  (proto-put reply ':payload (+ (proto-get reply ':payload)
                                [:approval [:code code :token token
                                            :expires (proto-get approval ':expires)]])))

(defn :async escalate [signal action outcome ctx env]
  "The signals answering an escalated ACTION: run it under a grant, or store it
   and ask a person. ENV is the daemon's services, whose escalate this is."
  (setv store env.store
        config env.config
        cfg (approvals-config config)
        now (proto-get ctx ':now)
        session (proto-get signal ':session)
        _ (expire-due store now)
        ;; a routine's run keeps its grants under the routine (=routines.org=)
        grant (grant-covering store (hy.I.passepartout/routines.grant-home store session) action ctx now
                              (proto-get outcome ':decisions)))
  (when grant
    (return (await (_run-granted signal action outcome ctx store grant now))))
  (setv rows (.query store (+ _select "WHERE session = ? AND state = 'pending' AND action_hash = ?
                                        ORDER BY id DESC LIMIT 1")
                     #(session (action-hash action))))
  (when rows
    (setv waiting (_approval (get rows 0)))
    (return [(ending (reply-signal signal
                                   (+ f"This action is already waiting for approval {(proto-get waiting ':code)} "
                                      f"(until {(_when (proto-get waiting ':expires) now)}): "
                                      (_shown action))
                                   "approval"))]))
  (setv [approval token] (request-approval store action outcome signal ctx config now))
  [(ending (ask-signal signal approval token outcome cfg))])

;; * Answering

(defn :async answer-approval [env who session key choice [reason None] [minutes None] [host False]
                              [hosts None]]
  "Record WHO's answer CHOICE (\"approve\" or \"deny\") to the approval whose code
   or token is KEY, given in SESSION (None on the host); run the approval when
   this answer approved it here. MINUTES asks for a grant, of HOSTS when given."
  (setv r (record-answer env who session key choice reason minutes host hosts)
        approval (proto-get r ':approved))
  (if (is approval None)
      r
      (await (_execute env approval who session (proto-get r ':now)
                       #((proto-get r ':grant-minutes) (proto-get r ':grant-hosts)) []))))

;; * Running what was approved

(defn _continue [origin action result state ctx store [note ""]]
  "The signals that carry RESULT of ACTION back to the task whose STATE is
   given; their records are written here."
  (setv [signals records] (after-action origin action result state (context-limit ctx "step-budget" 8)
                                        :note note))
  (with [_ (.transaction store)]
    (write-records store records (proto-get ctx ':now)))
  signals)

(defn :async _execute [env approval who session now grant [emitted None]]
  (setv store env.store
        code (proto-get approval ':code)
        asked-in (proto-get approval ':session)
        origin (_origin approval)
        ctx (context-for env asked-in :now now)
        action (proto-get approval ':action)
        here (= session asked-in)
        emitted (list (or emitted []))
        why (or (binding-problem approval ctx) (await (floor-problem action ctx env.gates.verify))))
  (when why
    (setv text f"Approval {code} was approved but not run: {why}. Its task has ended; ask again if it is still wanted.")
    (_fail store approval "approved" why now)
    (_told store approval text now)
    (return (_result False text (+ emitted (if here [] [(ending (reply-signal origin text "notice"))])))))
  (with [conn (.transaction store)]
    (setv n (. (.execute conn "UPDATE approvals SET state = 'executing', executor = ?
                               WHERE id = ? AND state = 'approved'"
                         #((_executor) (proto-get approval ':id)))
               rowcount))
    (when (= n 1)
      (_event store "executing" approval who now)))
  (when (!= n 1)
    (return (_result False (_settled-text (get-approval store (proto-get approval ':id)) now) emitted)))
  (setv grant-note ""
        [grant-minutes grant-hosts] grant)
  (when grant-minutes
    (setv scope (if (is grant-hosts None)
                    (grant-scope action ctx (proto-get approval ':decisions))
                    (host-scope grant-hosts)))
    (cond scope
          (do (setv gid (add-grant store (hy.I.passepartout/routines.grant-home store asked-in) scope now
                                   grant-minutes who env.skills (proto-get approval ':id)))
              (setv grant-note f" Grant #{gid} allows {(describe-scope scope)} in this conversation until {(_when (+ now (* 60 grant-minutes)) now)}."))
          (is grant-hosts None)
          (setv grant-note " No grant was made: an escalation of this command belongs to no single program, or its program is only known when it runs.")
          True
          (setv grant-note " No grant was made: the approving answers did not name the same hosts.")))
  (setv result (await (act action (proto-put ctx ':approved True))))
  (with [conn (.transaction store)]
    (.execute conn "UPDATE approvals SET state = 'executed', finished = ?, result = ?
                    WHERE id = ? AND state = 'executing'"
              #((env.clock) (data-print result) (proto-get approval ':id)))
    (_event store "executed" approval who now [:status (proto-get result ':status)]))
  (setv continued (_continue origin action result (task-state origin (proto-get approval ':task)) ctx store
                             f" (approved as {code})"))
  (_result True (+ f"Approved {code}." grant-note) (+ emitted continued)))

(defn :async _run-granted [signal action outcome ctx store grant now]
  (setv session (proto-get signal ':session)
        gid (proto-get grant ':id))
  (journal-event store "approval" session [:event "grant-used" :grant gid :action action
                                           :who (identity-of (proto-get signal ':source))]
                 :ts now)
  (_continue signal action (await (act action (proto-put ctx ':granted gid))) (_task-of signal outcome) ctx store
             f" (under grant #{gid}, until {(_when (proto-get grant ':expires) now)})"))

;; * The approvals service

(setv SERVICE-KEY "approvals:service"
      POLL-SECONDS 0.5)

(defn approvals-served [store]
  "The process id of the live approvals service on this store, or None."
  (setv mark (kv-get store SERVICE-KEY))
  (when (and mark (_alive (proto-get mark ':executor) (proto-get mark ':since)))
    (int (get (.split (proto-get mark ':executor) ":") -2))))

(defn :async carry-out-answered [env]
  "Run every approval answered elsewhere and waiting for the daemon; the signals
   for the conversations that asked, which are also stored for delivery."
  (setv store env.store
        cfg (approvals-config env.config)
        out [])
  (for [row (.query store (+ _select "WHERE state = 'approved' AND executor IS NULL ORDER BY id"))]
    (setv a (_approval row)
          now (env.clock)
          who (proto-get a ':decided-by)
          r (await (_execute env a who None now (_grant-minutes store a cfg))))
    (setv code (proto-get a ':code)
          signals (+ (if (proto-get r ':ok)
                         [(reply-signal (_origin a)
                                        (.replace (proto-get r ':text) f"Approved {code}."
                                                  f"Approval {code} was approved by {who}; running it now.")
                                        "notice")]
                         [])
                     (proto-get r ':emit)))
    (with [_ (.transaction store)]
      (for [s signals] (notice-add store s now)))
    (+= out signals))
  out)

(defn :async _approvals-pass [env]
  (setv store env.store)
  (expire-due store (env.clock))
  (await (carry-out-answered env))
  (notices-waiting store))

(defn :async _deliver [env runner id signal]
  (await (.emit runner signal :key f"notice:{id}"))
  (notice-delivered env.store id (env.clock)))

(defn :async approvals-service [env runner]
  "Expire approvals, carry out the ones answered elsewhere, deliver the stored
   notices; until cancelled."
  (setv store env.store)
  (kv-put store SERVICE-KEY [:executor (_executor) :since (time.time)])
  (try
    (while True
      (try
        (for [[id signal] (await (_approvals-pass env))]
          ;; a stop does not come between a delivery and its mark
          (await (asyncio.shield (_deliver env runner id signal))))
        (except [asyncio.CancelledError] (raise))
        (except [Exception]
          (.exception (logging.getLogger "passepartout.approvals.hitl") "the approvals service failed a pass")))
      (await (asyncio.sleep POLL-SECONDS)))
    (finally
      (when (= (approvals-served store) (os.getpid))
        (kv-delete store SERVICE-KEY)))))
