;; * Why

(import asyncio hashlib logging os re secrets socket statistics sys tempfile time uuid
        collections [Counter]
        pathlib [Path]
        hy.models [Keyword]
        passepartout.proto [kw proto-get proto-put proto-merge proto-print proto-normalize]
        passepartout.config [ConfigError]
        passepartout.context [make-context context-limit context-runtime]
        passepartout.perceive [reply-signal]
        passepartout.reason [verify]
        passepartout.act [act action-name]
        passepartout.budget [usage-add]
        passepartout.workspace [resolve-path path-inside]
        passepartout.shell [analyse judge-command]
        passepartout.shell :as shell
        passepartout.skills [all-skills]
        passepartout.store [event-append data-print data-read kv-get kv-put kv-delete
                            notice-add notices-waiting notice-delivered]
        passepartout.task [task-state after-action ending event-record write-records])

;; * Configuration

(setv DEFAULTS {"expiry_minutes" 10
                "approvers" []
                "separate_duties" False
                "strategy" "any"
                "required" []
                "max_grant_minutes" 480}
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
      CODE-LENGTH 6
      _code-re (re.compile f"[{CODE-ALPHABET}]{{{CODE-LENGTH}}}\\Z"))

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

;; * Binding

(defn canonical-action [action]
  "ACTION as the text its hash is taken of."
  (setv action (proto-normalize action)
        pairs (sorted (gfor i (range 0 (- (len action) 1) 2)
                            #((. (get action i) name) (get action (+ i 1))))
                      :key (fn [p] (get p 0))))
  (proto-print (lfor [k v] pairs x [(kw k) v] x)))

(defn action-hash [action]
  (.hexdigest (hashlib.sha256 (.encode (canonical-action action) "utf-8" "surrogatepass"))))

(defn _file-bytes [path]
  (try (.read-bytes (Path path))
       (except [OSError] b"")))

(defn policy-version []
  "A hash of the loaded skills and the rules files beside them."
  (setv h (hashlib.sha256)
        folders (set))
  (for [s (all-skills)]
    (.update h (.encode f"{(get s "name")}\x00{(get s "priority")}\x00{(or (get s "source") "")}\x00"
                        "utf-8" "surrogatepass"))
    (when (get s "source")
      (setv p (Path (get s "source")))
      (.add folders p.parent)
      (.update h (_file-bytes p))))
  (for [folder (sorted folders)
        f (sorted (.glob folder "*.toml"))]
    (.update h (.encode (str f) "utf-8" "surrogatepass"))
    (.update h (_file-bytes f)))
  (cut (.hexdigest h) 24))

(defn _feeds-program [rec program]
  "True when REC, run by PROGRAM or through it as a launcher, reads its program
   from its input."
  (setv name (get rec "name"))
  (and name
       (or (= name program) (in program (get rec "via")))
       (if (in name shell.SHELLS)
           (get rec "reads-stdin")
           (and (or (shell._interpreter name) (in name #("source" ".")))
                (is (_run-path rec) None)))))

(defn _run-path [rec]
  (if shell.RULES
      (shell._run-path rec shell.RULES)
      (get rec "script")))

(defn _runs [cmd]
  "The files the command line CMD runs, as (word folders) pairs from its analysis."
  (setv out (analyse cmd)
        commands (lfor rec (get out "commands") :if (get rec "name") rec)
        found (lfor rec commands
                    :setv run (_run-path rec)
                    :if run
                    #(run (get rec "cwd"))))
  (for [r (get out "redirects")]
    (when (and (= (get r "kind") "read") (get r "program")
               (any (gfor rec commands (_feeds-program rec (get r "program")))))
      (.append found #((get r "target") (get r "cwd")))))
  found)

(defn script-files [cmd workspace]
  "The files inside WORKSPACE that the shell command CMD runs, resolved and sorted."
  (setv out (set))
  (when (and (isinstance cmd str) workspace)
    (for [[word folders] (_runs cmd)
          folder folders]
      (setv path (.replace word shell.HERE workspace)
            folder (.replace folder shell.HERE workspace))
      (when (not (any (gfor m shell.MARKERS (or (in m path) (in m folder)))))
        (setv p (os.path.realpath (os.path.join workspace folder path)))
        (when (and (path-inside p workspace) (os.path.isfile p))
          (.add out p)))))
  (sorted out))

(defn _file-hash [path]
  (.hexdigest (hashlib.sha256 (_file-bytes path))))

(defn binding-of [action session ctx]
  "The binding of ACTION asked for in SESSION, under the policy loaded now."
  (setv ws (proto-get ctx ':workspace)
        out [:action-hash (action-hash action) :session session :policy (policy-version) :cwd ws])
  (when (= (action-name action) "shell")
    (+= out [:scripts (lfor p (script-files (proto-get action ':cmd) ws) [p (_file-hash p)])]))
  out)

(defn binding-problem [approval ctx]
  "Why APPROVAL's action may not run now in CTX, or None when its binding holds."
  (setv was (proto-get approval ':binding [])
        action (proto-get approval ':action)
        now (binding-of action (proto-get approval ':session) ctx)
        old-scripts (dict (lfor [p h] (proto-get was ':scripts []) #(p h)))
        new-scripts (dict (lfor [p h] (proto-get now ':scripts []) #(p h))))
  (cond
    (!= (proto-get was ':action-hash) (proto-get now ':action-hash))
    "the stored action no longer matches the action that was asked for"
    (!= (proto-get was ':session) (proto-get ctx ':session))
    f"it was asked for in {(proto-get was ':session)}, not in {(proto-get ctx ':session)}"
    (!= (proto-get was ':policy) (proto-get now ':policy))
    "the policy changed since it was asked for (a skill or a rules file was added, removed or edited)"
    (!= (proto-get was ':cwd) (proto-get now ':cwd))
    f"the working directory changed from {(proto-get was ':cwd)} to {(proto-get now ':cwd)}"
    (!= old-scripts new-scripts)
    (do (setv gone (lfor p old-scripts :if (not (in p new-scripts)) p)
              added (lfor p new-scripts :if (not (in p old-scripts)) p)
              changed (lfor p old-scripts :if (and (in p new-scripts) (!= (get old-scripts p) (get new-scripts p))) p))
        (cond changed f"the script {(get changed 0)} changed since it was asked for"
              gone f"the script {(get gone 0)} is gone"
              True f"the command now runs {(get added 0)}, which it did not when it was asked for"))
    True None))

(defn _floor-problem [action ctx]
  "Why the gates would not let ACTION through now, or None. An escalation is what
   was approved; a rejection, or a change to the action, is not."
  (setv outcome (verify action ctx)
        v (. (proto-get outcome ':verdict) name))
  (cond (= v "reject")
        f"the gates now refuse it: {(proto-get outcome ':gate)}: {(proto-get outcome ':reason)}"
        (and (= v "modify") (!= (action-hash (proto-get outcome ':action)) (action-hash action)))
        f"the gates would now change it ({(proto-get outcome ':gate)}: {(proto-get outcome ':reason)}), so it is not what was approved"
        True None))

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

(defn _event [store what approval who now [more None]]
  (event-append store "approval" (proto-get approval ':session)
                (+ [:event what :approval (proto-get approval ':id) :code (proto-get approval ':code)
                    :who who]
                   (or more []))
                :ts now))

;; * Time and words

(defn _when [ts [now None]]
  (setv t (time.localtime ts)
        day (fn [x] (time.strftime "%Y-%m-%d" (time.localtime x))))
  (if (= (day ts) (day (if (is now None) (time.time) now)))
      (time.strftime "%H:%M:%S" t)
      (time.strftime "%Y-%m-%d %H:%M:%S" t)))

(defn _shown [action [limit 1500]]
  (setv text (proto-print action))
  (if (> (len text) limit)
      (+ (cut text limit) f"… ({(- (len text) limit)} more characters)")
      text))

(defn _origin [approval]
  "A signal standing for the one that asked, to address replies and tool results."
  [:type :event :source (proto-get approval ':source) :session (proto-get approval ':session)
   :payload [:sensor :approval]])

;; * Asking

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
                          :if (= (proto-get d ':verdict) (kw "escalate")) d))
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

(defn _waiting-for [cfg approval]
  (setv [voters needed _] (_voters cfg))
  (cond (not voters)
        (if (get cfg "separate_duties")
            "someone else in this conversation"
            "anyone in this conversation")
        (= (get cfg "strategy") "any") (+ "one of " (.join ", " voters))
        True f"{needed} of {(.join ", " voters)}"))

(defn ask-signal [signal approval token outcome cfg]
  "The reply that asks the person about APPROVAL."
  (setv code (proto-get approval ':code)
        gates (lfor d (proto-get outcome ':decisions [])
                    :if (= (proto-get d ':verdict) (kw "escalate"))
                    f"  {(proto-get d ':gate)}: {(proto-get d ':reason)}")
        stripped (proto-get outcome ':stripped [])
        minutes (int (min 30 (get cfg "max_grant_minutes")))
        lines [f"Approval needed — code {code} (expires at {(_when (proto-get approval ':expires) (proto-get approval ':created))})."
               f"Action: {(_shown (proto-get approval ':action))}"
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

(defn escalate [signal action outcome ctx env]
  "The signals answering an escalated ACTION: run it under a grant, or store it
   and ask a person. The loop calls this as env[\"escalate\"]."
  (setv store (get env "store")
        config (get env "config")
        cfg (approvals-config config)
        now (proto-get ctx ':now)
        session (proto-get signal ':session)
        _ (expire-due store now)
        grant (grant-covering store session action ctx now (proto-get outcome ':decisions)))
  (when grant
    (return (_run-granted signal action outcome ctx store grant now)))
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
       (if result f" ({(. (or (proto-get result ':status) (kw "error")) name)})" "")
       ". Nothing more was run.")
    (= state "failed")
    f"Approval {code} was approved at {at} by {by} but did not run: {note}."
    (= state "withdrawn")
    f"Approval {code} was withdrawn at {at} by {by} with /stop; its action was not run."
    True f"Approval {code} is {state}."))

;; * Answering

(defn _result [ok text [emit None]]
  [:ok ok :text text :emit (or emit [])])

(defn context-env [ctx]
  "The handles answering needs, from the context CTX a pre-reason handler is given.
   Its clock stands still at the time the command arrived."
  (setv now (proto-get ctx ':now))
  {"store" (context-runtime ctx "store")
   "config" (or (context-runtime ctx "config") {})
   "secrets" (proto-get ctx ':secrets [])
   "clock" (fn [] now)})

(setv _process-mark (cut (. (uuid.uuid4) hex) 12))

(defn _executor []
  "Who is running an approval: host, process id, and a mark of this very process
   (a daemon in a container is often pid 1 after every restart)."
  f"{(socket.gethostname)}:{(os.getpid)}:{_process-mark}")

(defn answer-approval [env who session key choice [reason None] [minutes None] [host False]]
  "Record WHO's answer CHOICE (\"approve\" or \"deny\") to the approval whose code
   or token is KEY, given in SESSION (None on the host)."
  (setv store (get env "store")
        cfg (approvals-config (get env "config"))
        now ((get env "clock"))
        emitted []
        _ (expire-due store now)
        approval (find-approval store key))
  (when (is approval None)
    (return (_result False f"No approval has the code {(.upper (.strip (str key)))}." emitted)))
  (setv code (proto-get approval ':code)
        refusal (_not-yours cfg approval who session host choice))
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
                                (_tally-text conn approval voters needed))
                       emitted)))
    (.execute conn "INSERT INTO answers (approval, ts, who, session, answer, reason, minutes)
                    VALUES (?, ?, ?, ?, ?, ?, ?)"
              #((proto-get approval ':id) now who session choice reason minutes))
    (_event store "answered" approval who now [:answer choice :reason reason :minutes minutes
                                               :from (or session "host")])
    (setv counted (lfor [w a m] (.fetchall (.execute conn "SELECT who, answer, minutes FROM answers
                                                           WHERE approval = ? ORDER BY id"
                                                     #((proto-get approval ':id))))
                        :if (or (not voters) (in w voters))
                        #(w a m))
          yes (lfor c counted :if (= (get c 1) "approve") c)
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
            grant-minutes (when (and yes (all (gfor c yes (get c 2)))) (min (gfor c yes (get c 2))))
            outcome #(settled grant-minutes))
      (_event store settled approval (proto-get approval ':decided-by) now))
    (when (is outcome None)
      (return (_result True (+ f"Counted your {(if (= choice "approve") "approval" "denial")} of {code}; "
                               (_tally-text conn approval voters needed))
                       emitted))))
  (setv [settled grant-minutes] outcome)
  (cond (= settled "denied") (_denied env approval session now emitted)
        host (+ (_result True f"Approved {code}.") [:handed-over True])
        True (_execute env approval who session now grant-minutes emitted)))

(defn _grant-minutes [store approval cfg]
  "The grant the approving answers to APPROVAL asked for, in minutes, or None:
   the shortest, when every one of them asked for one."
  (setv [voters _ _] (_voters cfg)
        asked (lfor [w m] (.query store "SELECT who, minutes FROM answers
                                         WHERE approval = ? AND answer = 'approve' ORDER BY id"
                                  #((proto-get approval ':id)))
                    :if (or (not voters) (in w voters))
                    m))
  (when (and asked (all asked)) (min asked)))

(defn _tally-text [conn approval voters needed]
  (setv yes (lfor [w] (.fetchall (.execute conn "SELECT who FROM answers WHERE approval = ? AND answer = 'approve'"
                                           #((proto-get approval ':id))))
                  :if (or (not voters) (in w voters)) w))
  f"it has {(len yes)} of the {needed} approvals it needs.")

(defn _denied [env approval session now emitted]
  (setv store (get env "store")
        origin (_origin approval)
        code (proto-get approval ':code)
        note (proto-get approval ':note)
        text (+ f"Approval {code} was denied by {(proto-get approval ':decided-by)}"
                (if note f" ({note})" "")
                f": {(_shown (proto-get approval ':action) 300)} was not run, and its task has ended."))
  (event-append store "answer" (proto-get approval ':session)
                [:text text :task (proto-get (proto-get approval ':task) ':task)] :ts now)
  (cond (= session (proto-get approval ':session)) (_result True text emitted)
        (is session None)
        (+ (_result True f"Denied {code}." (+ emitted [(ending (reply-signal origin text "notice"))]))
           [:handed-over True])
        True (_result True f"Denied {code}; the conversation that asked has been told."
                      (+ emitted [(ending (reply-signal origin text "notice"))]))))

;; * Running what was approved

(defn _context [env session now]
  (setv config (get env "config"))
  (make-context :workspace (.get config "workspace" ".")
                :session session
                :config config
                :store (get env "store")
                :secrets (.get env "secrets" [])
                :sandbox (.get env "sandbox")
                :now now))

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

(defn _continue [origin action result state ctx store [note ""]]
  "The signals that carry RESULT of ACTION back to the task whose STATE is
   given; their records are written here."
  (setv [signals records] (after-action origin action result state (context-limit ctx "step-budget" 8)
                                        :note note))
  (with [_ (.transaction store)]
    (write-records store records (proto-get ctx ':now)))
  signals)

(defn _execute [env approval who session now grant-minutes [emitted None]]
  (setv store (get env "store")
        code (proto-get approval ':code)
        asked-in (proto-get approval ':session)
        origin (_origin approval)
        ctx (_context env asked-in now)
        action (proto-get approval ':action)
        here (= session asked-in)
        emitted (list (or emitted []))
        why (or (binding-problem approval ctx) (_floor-problem action ctx)))
  (when why
    (setv text f"Approval {code} was approved but not run: {why}. Its task has ended; ask again if it is still wanted.")
    (_fail store approval "approved" why now)
    (event-append store "answer" asked-in [:text text :task (proto-get (proto-get approval ':task) ':task)] :ts now)
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
  (setv grant-note "")
  (when grant-minutes
    (setv scope (grant-scope action ctx (proto-get approval ':decisions)))
    (if scope
        (do (setv gid (add-grant store asked-in scope now grant-minutes who (proto-get approval ':id)))
            (setv grant-note f" Grant #{gid} allows {(describe-scope scope)} in this conversation until {(_when (+ now (* 60 grant-minutes)) now)}."))
        (setv grant-note " No grant was made: an escalation of this command belongs to no single program, or its program is only known when it runs.")))
  (setv result (act action (proto-put ctx ':approved True)))
  (with [conn (.transaction store)]
    (.execute conn "UPDATE approvals SET state = 'executed', finished = ?, result = ?
                    WHERE id = ? AND state = 'executing'"
              #(((get env "clock")) (data-print result) (proto-get approval ':id)))
    (_event store "executed" approval who now [:status (proto-get result ':status)]))
  (setv continued (_continue origin action result (task-state origin (proto-get approval ':task)) ctx store
                             f" (approved as {code})"))
  (_result True (+ f"Approved {code}." grant-note) (+ emitted continued)))

;; * Grants

(defn shell-escalations [cmd ctx]
  "The (program rule) pairs for which the shell judge escalates the command line
   CMD in CTX, sorted; None when it rejects CMD, when an escalation belongs to no
   single command, or when a program is only known when it runs.
   (shell-escalations \"timeout 5 sudo -n true\" ctx) ⇒ [[\"sudo\" \"privilege-escalation\"]]"
  (setv rules shell.RULES)
  (when (or (is rules None) (not (isinstance cmd str))
            (= (proto-get (judge-command cmd ctx) ':verdict) ':reject))
    (return None))
  (setv out (analyse cmd)
        pc (shell._places ctx rules)
        left (Counter (gfor [severity _ rule] (get (shell._judge-out out pc rules 0) 0)
                            :if (= severity shell.ESCALATE)
                            rule))
        pairs (set))
  (for [rec (get out "commands")
        [severity _ rule] (get (shell._judge-record rec pc rules 0) 0)
        :if (= severity shell.ESCALATE)]
    (when (is (get rec "name") None) (return None))
    (.add pairs #((get rec "name") rule))
    (-= (get left rule) 1))
  (when (any (gfor n (.values left) (> n 0)))
    (return None))
  (lfor [program rule] (sorted pairs) [program rule]))

(defn _programs [cmd]
  "The programs CMD runs, launchers left out when anything else runs."
  (setv commands (get (analyse cmd) "commands"))
  (sorted (or (sfor rec commands :if (not (get rec "launcher")) (get rec "name"))
              (sfor rec commands (get rec "name")))))

(defn _shell-scope [cmd ctx decisions]
  (setv pairs (shell-escalations cmd ctx))
  (when (is pairs None) (return None))
  (setv rules (sfor [_ rule] pairs rule)
        found (sfor [program rule] pairs #(program rule)))
  (for [d (or decisions [])
        :if (and (= (proto-get d ':verdict) ':escalate)
                 (not (in (proto-get d ':rule) rules)))]
    (setv gate (proto-get d ':gate)
          rule (proto-get d ':rule)
          why (if rule f"{gate} gate: {rule}" f"{gate} gate"))
    (for [program (_programs cmd)]
      (.add found #(program why))))
  (when found
    [:action :shell :cwd (proto-get ctx ':workspace)
     :escalations (lfor [program rule] (sorted found) [program rule])]))

(defn grant-scope [action ctx [decisions None]]
  "The scope a grant for ACTION would cover, or None when it cannot be granted.
   DECISIONS are the gates' decisions on ACTION (the outcome's :decisions)."
  (setv name (action-name action))
  (cond
    (= name "shell") (_shell-scope (proto-get action ':cmd) ctx decisions)
    (in name #("read-file" "write-file"))
    (do (setv found (resolve-path (proto-get action ':path) ctx :write (= name "write-file")))
        (when (proto-get found ':ok)
          [:action (kw name) :folder (os.path.dirname (proto-get found ':path))]))
    name [:action (kw name)]
    True None))

(defn describe-scope [scope]
  (setv name (. (proto-get scope ':action) name)
        pairs (proto-get scope ':escalations))
  (cond (and (= name "shell") pairs)
        (do (setv rules {})
            (for [[program rule] pairs]
              (.append (.setdefault rules program []) rule))
            (+ (.join ", " (gfor [program names] (.items rules) f"`{program}` ({(.join "; " names)})"))
               " in " (proto-get scope ':cwd)))
        (= name "shell")
        (+ "`" (.join " " (proto-get scope ':words [])) " …` in " (proto-get scope ':cwd)
           " (an older kind of grant, which covers nothing now)")
        (proto-get scope ':folder) (+ ":" name " in " (proto-get scope ':folder))
        True (+ ":" name)))

(defn _covers [granted scope]
  "True when the GRANTED scope covers SCOPE, the scope of a later action."
  (if (= (proto-get scope ':action) ':shell)
      (and (= (proto-get granted ':action) ':shell)
           (= (proto-get granted ':cwd) (proto-get scope ':cwd))
           (<= (sfor p (proto-get scope ':escalations) (tuple p))
               (sfor p (or (proto-get granted ':escalations) []) (tuple p))))
      (= (data-print granted) (data-print scope))))

(defn add-grant [store session scope now minutes who [approval None]]
  "Grant SCOPE in SESSION for MINUTES; its id."
  (setv policy (policy-version))
  (with [conn (.transaction store)]
    (setv id (. (.execute conn "INSERT INTO grants (session, scope, policy, created, expires, created_by, approval)
                                VALUES (?, ?, ?, ?, ?, ?, ?)"
                          #(session (data-print scope) policy now (+ now (* 60 minutes)) who approval))
                lastrowid))
    (event-append store "approval" session [:event "grant-created" :grant id :scope scope
                                            :minutes minutes :who who :approval approval]
                  :ts now))
  id)

(defn active-grants [store session now]
  "The grants of SESSION in force at NOW, as plists."
  (lfor [id scope policy created expires by]
        (.query store "SELECT id, scope, policy, created, expires, created_by FROM grants
                       WHERE session = ? AND revoked IS NULL AND expires > ? ORDER BY id"
                #(session now))
        [:id id :scope (data-read scope) :policy policy :created created :expires expires :by by]))

(defn grant-covering [store session action ctx now [decisions None]]
  "The grant of SESSION that covers ACTION, escalated with the gates' DECISIONS, now; or None."
  (setv scope (grant-scope action ctx decisions))
  (when (is scope None) (return None))
  (for [[id granted expires] (.query store "SELECT id, scope, expires FROM grants
                                            WHERE session = ? AND policy = ? AND revoked IS NULL
                                              AND expires > ? ORDER BY expires DESC, id"
                                     #(session (policy-version) now))]
    (when (_covers (data-read granted) scope)
      (return [:id id :expires expires :scope scope]))))

(defn _run-granted [signal action outcome ctx store grant now]
  (setv session (proto-get signal ':session)
        gid (proto-get grant ':id))
  (event-append store "approval" session [:event "grant-used" :grant gid :action action
                                          :who (identity-of (proto-get signal ':source))]
                :ts now)
  (_continue signal action (act action ctx) (_task-of signal outcome) ctx store
             f" (under grant #{gid}, until {(_when (proto-get grant ':expires) now)})"))

(defn revoke-grant [env who session id [host False]]
  "Revoke grant ID on behalf of WHO in SESSION; a result plist like answer-approval's."
  (setv store (get env "store")
        cfg (approvals-config (get env "config"))
        now ((get env "clock"))
        rows (.query store "SELECT session, expires, revoked, revoked_by FROM grants WHERE id = ?" #(id)))
  (when (not rows)
    (return (_result False f"There is no grant #{id}.")))
  (setv [owner expires revoked by] (get rows 0)
        [voters _ _] (_voters cfg))
  (cond
    (not (or host (= owner session) (in who voters)))
    (_result False f"Grant #{id} belongs to another conversation.")
    revoked (_result False f"Grant #{id} was already revoked at {(_when revoked now)} by {by}.")
    (<= expires now) (_result False f"Grant #{id} already expired at {(_when expires now)}.")
    True
    (do (with [conn (.transaction store)]
          (setv n (. (.execute conn "UPDATE grants SET revoked = ?, revoked_by = ?
                                     WHERE id = ? AND revoked IS NULL"
                               #(now who id))
                     rowcount))
          (when (= n 1)
            (event-append store "approval" owner [:event "grant-revoked" :grant id :who who] :ts now)))
        (_result True f"Revoked grant #{id}."))))

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
        (event-append store "answer" (proto-get a ':session)
                      [:text text :task (proto-get (proto-get a ':task) ':task)] :ts now)
        (.append out (reply-signal (_origin a) text "notice"))
        (notice-add store (get out -1) now))))
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
        (event-append store "answer" session
                      [:text f"Approval {(proto-get a ':code)} was withdrawn by /stop; its action was not run."
                       :task (proto-get (proto-get a ':task) ':task)] :ts now)
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
          (event-append store "answer" (proto-get a ':session)
                        [:text text :task (proto-get (proto-get a ':task) ':task)] :ts now)
          (.append out (reply-signal (_origin a) text "notice"))
          (notice-add store (get out -1) now)))))
  out)

(defn approvals-boot [env]
  "What a booting daemon does for approvals: check the [approvals] config (a
   ConfigError stops the boot), settle what a dead process left half done, expire
   what fell due while it was down. Returns the notices it stored for the daemon."
  (approvals-config (get env "config"))
  (setv store (get env "store")
        now ((get env "clock")))
  (+ (recover store now) (expire-due store now)))

;; * Listing

(defn pending-approvals [store [session None]]
  "The pending approvals (of SESSION, or all), oldest first."
  (lfor row (if (is session None)
                (.query store (+ _select "WHERE state = 'pending' ORDER BY id"))
                (.query store (+ _select "WHERE state = 'pending' AND session = ? ORDER BY id") #(session)))
        (_approval row)))

(defn pending-text [env who session [host False]]
  "The pending approvals WHO may see, as a result plist like answer-approval's:
   their conversation's, or every one for a configured approver and on the host."
  (setv store (get env "store")
        cfg (approvals-config (get env "config"))
        now ((get env "clock"))
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
                              f"      {(proto-get a ':reason)}\n"
                              f"      asked by {(proto-get a ':requester)} in {(proto-get a ':session)}, "
                              f"expires at {(_when (proto-get a ':expires) now)}"))))))

(defn grants-text [env session]
  (setv now ((get env "clock"))
        rows (active-grants (get env "store") session now))
  (if (not rows)
      "No grants are in force in this conversation."
      (.join "\n" (+ ["Grants in force here (/revoke ID ends one):"]
                     (lfor g rows
                           f"  #{(proto-get g ':id)}  {(describe-scope (proto-get g ':scope))}, until {(_when (proto-get g ':expires) now)} (by {(proto-get g ':by)})")))))

;; * On the host

(defn _print-signals [signals]
  (for [s signals]
    (when (= (proto-get s ':type) (kw "reply"))
      (print (proto-get (proto-get s ':payload) ':text) :flush True))))

(setv _duration-re (re.compile r"(?:for\s+)?([0-9]{1,6})\s*(m|mins?|minutes?|h|hrs?|hours?)\Z" re.I))

(defn _duration [text]
  "The minutes TEXT (\"30m\", \"2h\") names, or None."
  (setv m (.match _duration-re (.strip text)))
  (when m
    (* (int (.group m 1)) (if (.startswith (.lower (.group m 2)) "h") 60 1))))

(defn _handed-over-text [store approval choice]
  "What the host is told after handing CHOICE on APPROVAL to the daemon."
  (setv pid (approvals-served store)
        session (proto-get approval ':session))
  (if (= choice "approve")
      (if pid
          f"Handed to the running daemon (pid {pid}), which runs it and continues the task in {session}."
          f"No daemon is running; it will be carried out when the daemon starts, and {session} told then.")
      (if pid
          f"The running daemon (pid {pid}) tells {session}."
          f"No daemon is running; {session} will be told when the daemon starts.")))

(defn cmd-approvals [args]
  "The approvals command: ARGS has .action (list, approve, deny), .code,
   .duration (\"30m\"), .reason, .config."
  (import passepartout.daemon [boot shutdown])
  (setv env (boot :config-path args.config))
  (try
    (setv store (get env "store")
          action args.action
          duration (getattr args "duration" None)
          minutes (when duration (_duration duration)))
    (_print-signals (+ (recover store ((get env "clock"))) (expire-due store ((get env "clock")))))
    (cond
      (= action "list")
      (do (print (proto-get (pending-text env HOST-IDENTITY None :host True) ':text)) 0)
      (not (in action #("approve" "deny")))
      (do (print f"passepartout approvals: unknown action {action !r}" :file sys.stderr) 2)
      (not (getattr args "code" None))
      (do (print f"passepartout approvals {action}: give the code" :file sys.stderr) 2)
      (and duration (or (= action "deny") (not minutes)))
      (do (print f"passepartout approvals {action}: {duration !r} is not a duration such as 30m"
                 :file sys.stderr)
          2)
      True
      (do (setv r (answer-approval env HOST-IDENTITY None args.code action
                                   :reason (getattr args "reason" None) :minutes minutes :host True))
          (for [s (proto-get r ':emit)]
            (notice-add store s ((get env "clock"))))
          (print (if (proto-get r ':handed-over)
                     (+ (proto-get r ':text) " "
                        (_handed-over-text store (find-approval store args.code) action))
                     (proto-get r ':text)))
          (if (proto-get r ':ok) 0 1)))
    (finally (shutdown env))))

;; * The figure

(defn bench-approval [n]
  "Rows (name value unit goal): p50 and p99 of /approve to the start of execution."
  (import passepartout.daemon [boot shutdown]
          passepartout.cascade [make-provider]
          passepartout.loop [step]
          passepartout.skills [make-skill register-skill registry-snapshot registry-restore])
  (setv saved (registry-snapshot)
        tmp (Path (tempfile.mkdtemp :prefix "passepartout-bench-"))
        started [])
  (.write-text (/ tmp "config.toml") "")
  (setv env (boot :config-path (str (/ tmp "config.toml"))
                  :environ {"PASSEPARTOUT_DATA_DIR" (str (/ tmp "data")) "HOME" (str tmp)}
                  :providers [(make-provider "symbolic")]))
  (setv (get env "escalate") escalate
        (get env "complete") (fn [request]
                               [:status :ok :provider "bench"
                                :text "(:action :bench-probe :explanation \"measure\")"]))
  (register-skill
    (make-skill "bench-approval-probe" :priority 1
                :gate (fn [action ctx]
                        (if (= (action-name action) "bench-probe")
                            [:verdict :escalate :reason "measured"]
                            [:verdict :allow]))
                :actuators {"bench-probe" {"run" (fn [action ctx]
                                                   (.append started (time.perf-counter))
                                                   [:status :ok])
                                           "doc" "a probe" "effect" True}}))
  (defn say [text]
    (step [:type :event :source [:gateway :bench :chat "b" :user "b"]
           :payload [:sensor :user-input :text text]]
          env))
  (setv times [])
  (try
    (for [_ (range n)]
      (setv ask (next (gfor s (say "probe")
                            :if (proto-get (proto-get s ':payload []) ':approval) s))
            code (proto-get (proto-get (proto-get ask ':payload) ':approval) ':code)
            t (time.perf-counter))
      (say f"/approve {code}")
      (.append times (- (get started -1) t)))
    (finally
      (shutdown env)
      (registry-restore saved)))
  (setv times (sorted times))
  [#("approval: /approve to start of execution p50" (* 1000 (statistics.median times)) "ms" "< 50 ms")
   #("approval: /approve to start of execution p99"
     (* 1000 (get times (min (- (len times) 1) (int (* 0.99 (len times)))))) "ms" "")])

;; * The approvals service

(setv SERVICE-KEY "approvals:service"
      POLL-SECONDS 0.5)

(defn approvals-served [store]
  "The process id of the live approvals service on this store, or None."
  (setv mark (kv-get store SERVICE-KEY))
  (when (and mark (_alive (proto-get mark ':executor) (proto-get mark ':since)))
    (int (get (.split (proto-get mark ':executor) ":") -2))))

(defn carry-out-answered [env]
  "Run every approval answered elsewhere and waiting for the daemon; the signals
   for the conversations that asked, which are also stored for delivery."
  (setv store (get env "store")
        cfg (approvals-config (get env "config"))
        out [])
  (for [row (.query store (+ _select "WHERE state = 'approved' AND executor IS NULL ORDER BY id"))]
    (setv a (_approval row)
          now ((get env "clock"))
          who (proto-get a ':decided-by)
          r (_execute env a who None now (_grant-minutes store a cfg)))
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

(defn _approvals-pass [env]
  (setv store (get env "store"))
  (expire-due store ((get env "clock")))
  (carry-out-answered env)
  (notices-waiting store))

(defn :async _deliver [env runner id signal]
  (await (.emit runner signal :key f"notice:{id}"))
  (notice-delivered (get env "store") id ((get env "clock"))))

(defn :async approvals-service [env runner]
  "Expire approvals, carry out the ones answered elsewhere, deliver the stored
   notices; until cancelled."
  (setv store (get env "store"))
  (kv-put store SERVICE-KEY [:executor (_executor) :since (time.time)])
  (try
    (while True
      (try
        (for [[id signal] (await (asyncio.to-thread _approvals-pass env))]
          ;; a stop does not come between a delivery and its mark
          (await (asyncio.shield (_deliver env runner id signal))))
        (except [asyncio.CancelledError] (raise))
        (except [Exception]
          (.exception (logging.getLogger "passepartout.hitl") "the approvals service failed a pass")))
      (await (asyncio.sleep POLL-SECONDS)))
    (finally
      (when (= (approvals-served store) (os.getpid))
        (kv-delete store SERVICE-KEY)))))
