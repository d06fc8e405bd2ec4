;; * Why

"An approval is a row, not a promise in memory: the escalated action, the
session and person that asked, the verdicts that escalated it and the state of
the task that was waiting are stored in the SQLite store before the person is
asked, so a restart loses nothing, and nobody waits in silence: a question
expires and its person is told. This module keeps those rows and moves them
through their states, pending → approved | denied | expired | withdrawn, then
approved → executing → executed | failed, each move one
UPDATE … WHERE state = '…' inside a transaction, so that only the caller
whose update changed a row goes on."

(import hashlib os secrets socket time uuid
        pathlib [Path]
        hy.models [Keyword]
        passepartout.proto [kw proto-get proto-print]
        passepartout.config [ConfigError config-defaults]
        passepartout.perceive [reply-signal]
        passepartout.display [action-words when-words]
        passepartout.budget [usage-add]
        passepartout.records [data-print data-read]
        passepartout.mailbox [notice-add]
        passepartout.journal [journal-event]
        passepartout.task [task-state]
        passepartout.approvals.binding [binding-of])

;; * Configuration

(setv DEFAULTS (config-defaults "approvals")
      STRATEGIES #("any" "all" "majority")
      HOST-IDENTITY "terminal:local")

(defn _number [v]
  (and (isinstance v #(int float)) (not (isinstance v bool))))

(defn _identities [v]
  (and (isinstance v list) (all (gfor x v (and (isinstance x str) (in ":" x))))))

(defn approvals-config [config]
  "The [approvals] table of CONFIG with its defaults, or a ConfigError saying what is wrong."
  (setv raw (.get (or config {}) "approvals" {}))
  (when (not (isinstance raw dict))
    (raise (ConfigError "approvals should be a table")))
  (setv unknown (sorted (- (set raw) (set DEFAULTS))))
  (when unknown
    (raise (ConfigError (+ f"approvals: unknown key {(get unknown 0) !r}; the keys are "
                           (.join ", " (sorted DEFAULTS))))))
  (setv cfg (| DEFAULTS raw))
  (for [[key ok what] [["expiry_minutes" (fn [v] (and (_number v) (> v 0))) "a number of minutes above 0"]
                       ["max_grant_minutes" (fn [v] (and (_number v) (>= v 0))) "a number of minutes"]
                       ["approvers" _identities "an array of \"gateway:user\" strings"]
                       ["required" _identities "an array of \"gateway:user\" strings"]
                       ["separate_duties" (fn [v] (isinstance v bool)) "true or false"]
                       ["strategy" (fn [v] (in v STRATEGIES)) "\"any\", \"all\" or \"majority\""]]]
    (when (not (ok (get cfg key)))
      (raise (ConfigError f"approvals.{key} should be {what}, not {(get cfg key) !r}"))))
  cfg)

(defn identity-of [source]
  "The identity (\"gateway:user\") of whoever sent a signal from SOURCE."
  (setv gateway (proto-get source ':gateway)
        g (if (isinstance gateway Keyword) gateway.name (str (or gateway "local")))
        user (proto-get source ':user))
  (cond (is-not user None) f"{g}:{user}"
        (in g #("terminal" "local" "host")) f"{g}:local"
        True f"{g}:unknown"))

;; * Tokens and codes

(setv CODE-ALPHABET "ACDEFHJKMNPRTUVWXY"
      CODE-LENGTH 6)

(defn new-token []
  "A fresh unguessable token (192 bits, URL-safe)."
  (secrets.token-urlsafe 24))

(defn token-hash [token]
  (.hexdigest (hashlib.sha256 (.encode token "utf-8"))))

(defn _new-code [conn now]
  (setv taken (sfor [c] (.fetchall (.execute conn "SELECT code FROM approvals
                                                    WHERE state = 'pending' OR created > ?"
                                             #((- now 86400))))
                    c))
  (while True
    (setv code (.join "" (gfor _ (range CODE-LENGTH) (secrets.choice CODE-ALPHABET))))
    (when (not (in code taken))
      (return code))))

;; * Reading approvals

(setv _columns ["id" "code" "state" "session" "requester" "source" "action" "action_hash"
                "reason" "decisions" "binding" "task" "created" "expires" "decided"
                "decided_by" "finished" "note" "executor" "result"]
      _plist-columns #{"source" "action" "decisions" "binding" "task" "result"}
      _select (+ "SELECT " (.join ", " _columns) " FROM approvals "))

(defn _approval [row]
  (lfor [c v] (zip _columns row)
        x [(kw (.replace c "_" "-"))
           (if (and (in c _plist-columns) (is-not v None)) (data-read v) v)]
        x))

(defn get-approval [store id]
  "The approval with id ID, or None."
  (setv rows (.query store (+ _select "WHERE id = ?") #(id)))
  (when rows (_approval (get rows 0))))

(defn find-approval [store key]
  "The approval whose code (any case) or token is KEY: a pending one first, else
   the latest with that code."
  (setv key (.strip (str key))
        code (.upper key)
        rows (or (.query store (+ _select "WHERE token_hash = ?") #((token-hash key)))
                 (.query store (+ _select "WHERE code = ? ORDER BY state = 'pending' DESC, id DESC LIMIT 1")
                         #(code))))
  (when rows (_approval (get rows 0))))

(defn _told [store approval text now]
  "Record that the person who asked for APPROVAL was told TEXT: an answer of its task."
  (journal-event store "answer" (proto-get approval ':session)
                 [:text text :task (proto-get (or (proto-get approval ':task) []) ':task)] :ts now))

(defn _notice [store approval text now]
  "_told, and the notice of TEXT stored for the daemon that serves the
   conversation; the notice's reply signal."
  (_told store approval text now)
  (setv reply (reply-signal (_origin approval) text "notice"))
  (notice-add store reply now)
  reply)

(defn _event [store what approval who now [more None]]
  (journal-event store "approval" (proto-get approval ':session)
                 (+ [:event what :approval (proto-get approval ':id) :code (proto-get approval ':code)
                     :who who :task (proto-get (or (proto-get approval ':task) []) ':task)]
                    (or more []))
                 :ts now))

;; * Time and words

(defn _when [ts [now None]]
  (when-words ts now))

(defn _shown [action [limit 1500]]
  (setv text (action-words action))
  (if (> (len text) limit)
      (+ (cut text limit) f"… ({(- (len text) limit)} more characters)")
      text))

(defn _origin [approval]
  "A signal standing for the one that asked, to address replies and tool results."
  [:type :event :source (proto-get approval ':source) :session (proto-get approval ':session)
   :payload [:sensor :approval]])

;; * Storing a question

(defn _task-of [signal outcome]
  "The state of the task SIGNAL belongs to, after the step whose OUTCOME escalated."
  (task-state signal (or (proto-get outcome ':task-state)
                         [:task (proto-get outcome ':task)
                          :usage (usage-add (proto-get (or (proto-get signal ':payload) []) ':usage)
                                            (proto-get outcome ':usage))])))

(defn request-approval [store action outcome signal ctx config now]
  "Store ACTION, escalated by OUTCOME for SIGNAL, as a pending approval.
   Returns the approval plist and its token (which is not stored)."
  (setv cfg (approvals-config config)
        token (new-token)
        session (proto-get signal ':session)
        requester (identity-of (proto-get signal ':source))
        binding (binding-of action session ctx)
        escalations (lfor d (proto-get outcome ':decisions [])
                          :if (= (proto-get d ':verdict) ':escalate) d))
  (with [conn (.transaction store)]
    (setv code (_new-code conn now)
          id (. (.execute conn "INSERT INTO approvals (code, token_hash, state, session, requester,
                                  source, action, action_hash, reason, decisions, binding, task,
                                  created, expires) VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                          #(code (token-hash token) session requester
                            (data-print (proto-get signal ':source [])) (data-print action)
                            (proto-get binding ':action-hash)
                            (proto-get outcome ':reason) (data-print (proto-get outcome ':decisions []))
                            (data-print binding) (data-print (_task-of signal outcome))
                            now (+ now (* 60 (get cfg "expiry_minutes")))))
                lastrowid)
          approval (get-approval store id))
    (_event store "created" approval requester now
            [:action action :reason (proto-get outcome ':reason) :escalated-by escalations
             :stripped (proto-get outcome ':stripped [])]))
  #(approval token))

;; * Who runs it

(setv _process-mark (cut (. (uuid.uuid4) hex) 12))

(defn _executor []
  "Who is running an approval: host, process id, and a mark of this very process
   (a daemon in a container is often pid 1 after every restart)."
  f"{(socket.gethostname)}:{(os.getpid)}:{_process-mark}")

(defn _fail [store approval state why now]
  "Move APPROVAL from STATE to failed with WHY; true when this call did it."
  (with [conn (.transaction store)]
    (setv n (. (.execute conn "UPDATE approvals SET state = 'failed', finished = ?, note = ?
                               WHERE id = ? AND state = ?"
                         #(now why (proto-get approval ':id) state))
               rowcount))
    (when (= n 1)
      (_event store "failed" approval "daemon" now [:why why])))
  (= n 1))

;; * Expiry and restart

(defn expire-due [store now]
  "Expire every pending approval due by NOW; the notices to send."
  (setv out [])
  (for [[id] (.query store "SELECT id FROM approvals WHERE state = 'pending' AND expires <= ?" #(now))]
    (with [conn (.transaction store)]
      (setv n (. (.execute conn "UPDATE approvals SET state = 'expired', decided = expires, decided_by = 'expiry'
                                 WHERE id = ? AND state = 'pending' AND expires <= ?"
                           #(id now))
                 rowcount))
      (when (= n 1)
        (setv a (get-approval store id)
              text (+ f"Approval {(proto-get a ':code)} expired at {(_when (proto-get a ':expires) now)} with no answer: "
                      f"{(_shown (proto-get a ':action) 300)} was not run, and its task has ended."))
        (_event store "expired" a "expiry" now)
        (.append out (_notice store a text now)))))
  out)

(defn withdraw-waiting [store session who now]
  "Withdraw the pending approvals asked in SESSION (its task was stopped by
   WHO); their codes."
  (setv codes [])
  (for [[id] (.query store "SELECT id FROM approvals WHERE session = ? AND state = 'pending' ORDER BY id"
                     #(session))]
    (with [conn (.transaction store)]
      (when (= 1 (. (.execute conn "UPDATE approvals SET state = 'withdrawn', decided = ?, decided_by = ?
                                    WHERE id = ? AND state = 'pending'"
                              #(now who id))
                    rowcount))
        (setv a (get-approval store id))
        (_event store "withdrawn" a who now)
        (_told store a f"Approval {(proto-get a ':code)} was withdrawn by /stop; its action was not run." now)
        (.append codes (proto-get a ':code)))))
  codes)

(defn _process-start [pid]
  "When process PID started (seconds since the epoch), or None where /proc cannot say."
  (try
    (setv stat (.read-text (Path f"/proc/{pid}/stat"))
          ticks (int (get (.split (get (.rpartition stat ")") 2)) 19))
          btime (next (gfor line (.splitlines (.read-text (Path "/proc/stat")))
                            :if (.startswith line "btime ")
                            (int (get (.split line) 1)))))
    (+ btime (/ ticks (os.sysconf "SC_CLK_TCK")))
    (except [Exception] None)))

(defn _gone [pid]
  (try (os.kill pid 0) False
       (except [ProcessLookupError] True)
       (except [PermissionError] False)))

(defn _alive [executor since]
  "True when the process EXECUTOR names (see _executor) may still be running an
   approval it took at SINCE."
  (setv parts (.split (or executor "") ":"))
  (when (< (len parts) 3) (return False))
  (setv [mark pid] [(get parts -1) (get parts -2)]
        host (.join ":" (cut parts -2)))
  (when (or (!= host (socket.gethostname)) (not (.isdigit pid)))
    (return False))
  (setv pid (int pid))
  (cond
    (= pid (os.getpid)) (= mark _process-mark)
    (_gone pid) False
    True (do (setv started (_process-start pid))
             (not (and started since (> started (+ since 1)))))))

(defn recover [store now]
  "Settle the approvals a dead process left approved or executing; the notices to send."
  (setv out [])
  (for [row (.query store (+ _select "WHERE state = 'executing'
                                        OR (state = 'approved' AND executor IS NOT NULL)"))]
    (setv a (_approval row)
          state (proto-get a ':state))
    (when (not (_alive (proto-get a ':executor) (proto-get a ':decided)))
      (setv why (if (= state "approved")
                    "the daemon stopped after it was approved and before it ran; nothing was run"
                    "the daemon stopped while it was running; it may have done part or all of its work, so check before asking again")
            text f"Approval {(proto-get a ':code)}: {why}. Its task has ended.")
      (with [_ (.transaction store)]
        (when (_fail store a state why now)
          (.append out (_notice store a text now))))))
  out)

(defn approvals-boot [env]
  "What a booting daemon does for approvals: check the [approvals] config (a
   ConfigError stops the boot), settle what a dead process left half done, expire
   what fell due while it was down. Returns the notices it stored for the daemon."
  (approvals-config env.config)
  (setv store env.store
        now (env.clock))
  (+ (recover store now) (expire-due store now)))

;; * Listing

(defn pending-approvals [store [session None]]
  "The pending approvals (of SESSION, or all), oldest first."
  (lfor row (if (is session None)
                (.query store (+ _select "WHERE state = 'pending' ORDER BY id"))
                (.query store (+ _select "WHERE state = 'pending' AND session = ? ORDER BY id") #(session)))
        (_approval row)))
