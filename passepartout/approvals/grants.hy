;; * Why

"A person asked about the same kind of action again and again stops reading the
question. A grant lets them answer once for a while, /approve CODE 30m, so
that the questions that remain are worth reading. It must not cover more than
was meant: it is only as wide as the escalations that were approved, it lapses
when the policy changes, and it never reaches an action the gates reject."

(import os re
        collections [Counter]
        passepartout.proto [kw proto-get]
        passepartout.act [action-name]
        passepartout.reach [action-asks ask-pairs]
        passepartout.egress [entry-covers host-entries host-text split-host]
        passepartout.workspace [resolve-path]
        passepartout.shell.state [ESCALATE]
        passepartout.shell.walk [analyse]
        passepartout.shell.paths [_places]
        passepartout.shell.judge [judge-command]
        passepartout.shell.judge :as shell
        passepartout.records [data-print data-read]
        passepartout.context [context-runtime]
        passepartout.journal [journal-event]
        passepartout.approvals.binding [policy-version]
        passepartout.approvals.store [approvals-config _when]
        passepartout.approvals.voting [_result _voters])

;; * What a grant covers

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
        pc (_places ctx rules)
        left (Counter (gfor [severity _ rule] (get (shell._judge-out out pc rules 0) 0)
                            :if (= severity ESCALATE)
                            rule))
        pairs (set))
  (for [rec (get out "commands")
        [severity _ rule] (get (shell._judge-record rec pc rules 0) 0)
        :if (= severity ESCALATE)]
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
    (if (= gate "egress")
        (for [[program what] (ask-pairs (action-asks [:action :shell :cmd cmd] ctx))]
          (.add found #(program f"egress gate: {what}")))
        (for [program (_programs cmd)]
          (.add found #(program why)))))
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
  (cond (= name "egress")
        (+ "reads and uploads to " (.join ", " (proto-get scope ':hosts [])) " through the egress proxy")
        (and (= name "shell") pairs)
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

;; * Making, finding and revoking grants

(setv _duration-re (re.compile r"(?:for\s+)?([0-9]{1,6})\s*(m|mins?|minutes?|h|hrs?|hours?)\Z" re.I))

(defn duration-minutes [text]
  "The minutes TEXT (\"30m\", \"for 2 hours\") names, or None: how long a
   grant asked for with /approve or on the host lasts."
  (setv m (.match _duration-re (.strip text)))
  (when m
    (* (int (.group m 1)) (if (.startswith (.lower (.group m 2)) "h") 60 1))))

(defn host-scope [hosts]
  "The scope of a grant naming HOSTS (texts such as \"github.com\" or
   \"127.0.0.2:8080\"), written the one way; None when one is not a host."
  (setv found (lfor h hosts (split-host h)))
  (when (and found (all found))
    [:action :egress :hosts (sorted (sfor [h p] found (host-text h p)))]))

(defn add-grant [store session scope now minutes who registry [approval None]]
  "Grant SCOPE in SESSION for MINUTES, under the policy of REGISTRY; its id."
  (setv policy (policy-version registry))
  (with [conn (.transaction store)]
    (setv id (. (.execute conn "INSERT INTO grants (session, scope, policy, created, expires, created_by, approval)
                                VALUES (?, ?, ?, ?, ?, ?, ?)"
                          #(session (data-print scope) policy now (+ now (* 60 minutes)) who approval))
                lastrowid))
    (journal-event store "approval" session [:event "grant-created" :grant id :scope scope
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
  ;; most sessions hold no grant: the scope and the policy's hash (which
  ;; reads every skill file) are worked out only when one is in force
  (setv rows (.query store "SELECT id, scope, expires, policy FROM grants
                            WHERE session = ? AND revoked IS NULL AND expires > ?
                            ORDER BY expires DESC, id"
                     #(session now)))
  (when (not rows) (return None))
  (setv policy (policy-version (context-runtime ctx "skills"))
        rows (lfor [id granted expires p] rows :if (= p policy) #(id (data-read granted) expires))
        hosts (_host-covering rows action ctx decisions))
  (when hosts
    (return hosts))
  (setv scope (grant-scope action ctx decisions))
  (when (is scope None) (return None))
  (for [[id granted expires] rows]
    (when (_covers granted scope)
      (return [:id id :expires expires :scope scope]))))

(defn _host-covering [rows action ctx decisions]
  "The host grant among ROWS #(id scope expires) that covers the shell ACTION
   escalated with DECISIONS, as grant-covering answers; None when the egress
   gate is not its only asker or a host it asks about is granted by none."
  (setv escalating (lfor d (or decisions []) :if (= (proto-get d ':verdict) ':escalate) d)
        granted (lfor [id scope expires] rows
                      :if (= (proto-get scope ':action) ':egress)
                      e (host-entries (proto-get scope ':hosts []))
                      #(id expires e)))
  (when (not (and granted escalating (= (action-name action) "shell")
                  (all (gfor d escalating (= (proto-get d ':gate) "egress")))))
    (return None))
  (setv asks (action-asks action ctx)
        used [])
  (for [u asks]
    (setv found (split-host (or (proto-get u ':host) ""))
          by (when found (next (gfor [id expires e] granted :if (entry-covers e #* found) #(id expires)) None)))
    (when (is by None)
      (return None))
    (.append used by))
  (when used
    (setv [id expires] (min used :key (fn [u] (get u 1))))
    [:id id :expires expires :scope [:action :egress :hosts (sorted (sfor u asks (proto-get u ':host)))]]))

(defn host-grants [store session now registry]
  "The hosts granted in SESSION at NOW under the policy of REGISTRY, as
   [host port expires] (port None: the web's ports), for the egress proxy."
  (setv rows (.query store "SELECT scope, expires, policy FROM grants
                            WHERE session = ? AND revoked IS NULL AND expires > ?
                            AND scope LIKE '(:action :egress%'"
                     #(session now)))
  (when (not rows) (return []))
  (setv policy (policy-version registry))
  (lfor [scope expires p] rows
        :if (= p policy)
        [host port] (host-entries (proto-get (data-read scope) ':hosts []))
        [host port expires]))

(defn revoke-grant [env who session id [host False]]
  "Revoke grant ID on behalf of WHO in SESSION; a result plist like answer-approval's."
  (setv store env.store
        cfg (approvals-config env.config)
        now (env.clock)
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
            (journal-event store "approval" owner [:event "grant-revoked" :grant id :who who] :ts now)))
        (_result True f"Revoked grant #{id}."))))

(defn grants-text [env session]
  (setv now (env.clock)
        rows (active-grants env.store session now))
  (if (not rows)
      "No grants are in force in this conversation."
      (.join "\n" (+ ["Grants in force here (/revoke ID ends one):"]
                     (lfor g rows
                           f"  #{(proto-get g ':id)}  {(describe-scope (proto-get g ':scope))}, until {(_when (proto-get g ':expires) now)} (by {(proto-get g ':by)})")))))
