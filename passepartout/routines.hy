;; * Why

"A person asks for what comes back: \"remind me at 7 to call the dentist\",
\"every Monday at 9 summarise my open issues\", \"check the backup every night and
tell me only if it failed\". A routine is that: a time or a cron line, and what
to do then (a worker's objective, or a reminder's words), kept in the store and
run by the daemon when it is due, whether or not anyone is talking to it."

(import asyncio datetime logging os re time zoneinfo
        croniter [croniter CroniterBadCronError CroniterBadDateError]
        passepartout.proto [proto-get proto-put kw]
        passepartout.records [data-print data-read])

(setv log (logging.getLogger "passepartout.routines"))

;; * The person's time zone

(defn local-zone [[environ None]]
  "The machine's IANA zone name (\"UTC\" when it cannot be told)."
  (setv environ (if (is environ None) os.environ environ)
        tz (.lstrip (.get environ "TZ" "") ":"))
  (when tz
    (try (zoneinfo.ZoneInfo tz) (return tz)
         (except [Exception] None)))
  (try
    (setv target (os.path.realpath "/etc/localtime"))
    (when (in "zoneinfo/" target)
      (setv name (get (.split target "zoneinfo/" 1) 1))
      (zoneinfo.ZoneInfo name)
      (return name))
    (except [Exception] None))
  "UTC")

(defn config-zone [config]
  "The zone name of CONFIG's [routines] time_zone, or the machine's."
  (setv name (.get (.get (or config {}) "routines" {}) "time_zone" ""))
  (if name name (local-zone)))

(defn zone-problem [name]
  "Why NAME is no time zone, or None."
  (try (zoneinfo.ZoneInfo name) None
       (except [Exception]
         f"{name !r} is no time zone; name one such as \"Europe/Berlin\" or \"UTC\"")))

(defn show-time [t tz]
  "The POSIX time T as the person reads it in the zone TZ (a name)."
  (.strftime (datetime.datetime.fromtimestamp t (zoneinfo.ZoneInfo tz)) "%a %Y-%m-%d %H:%M %Z"))

;; * When: a cron line, a time, or an interval

(setv _EVERY (re.compile r"^\s*every\s+(\d+)\s*(m|min|mins|minutes?|h|hrs?|hours?|d|days?)\s*$" re.I)
      _UNIT {"m" 60 "h" 3600 "d" 86400}
      WHEN-SHAPES (+ "a cron line such as \"0 9 * * 1\" (Mondays at 9), an ISO time such as "
                     "\"2030-05-01T07:00\", or an interval such as \"every 2h\" or \"every 30m\""))

(defn parse-when [text tz now]
  "#(spec None) for the :when TEXT in the zone TZ at NOW, or #(None why)."
  (when (not (and (isinstance text str) (.strip text)))
    (return #(None (+ ":when is needed: " WHEN-SHAPES))))
  (setv text (.strip text)
        every (.match _EVERY text))
  (when every
    (setv n (int (.group every 1))
          seconds (* n (get _UNIT (.lower (get (.group every 2) 0)))))
    (when (= n 0)
      (return #(None ":when \"every 0\" never comes back; give an interval of at least one minute")))
    (return #([:kind "every" :text text :seconds seconds] None)))
  (when (= (len (.split text)) 5)
    (try
      (croniter text (datetime.datetime.fromtimestamp now (zoneinfo.ZoneInfo tz)))
      (return #([:kind "cron" :text text] None))
      (except [e #(CroniterBadCronError CroniterBadDateError ValueError KeyError)]
        (return #(None f":when {text !r} is no cron line ({e}); {WHEN-SHAPES}")))))
  (try
    (setv at (datetime.datetime.fromisoformat text))
    (except [ValueError]
      (return #(None f":when {text !r} is none of {WHEN-SHAPES}"))))
  (when (is at.tzinfo None)
    (setv at (.replace at :tzinfo (zoneinfo.ZoneInfo tz))))
  (when (<= (.timestamp at) now)
    (return #(None f":when {text !r} is past (it is {(show-time now tz)} now); give a time ahead")))
  #([:kind "at" :text text :at (.timestamp at)] None))

;; ** The next run

(defn _second-coming [d tz]
  "True when the aware local time D is the later of two moments of one wall-clock time."
  (setv first (.replace (.replace d :tzinfo None) :tzinfo tz :fold 0))
  (< (.timestamp first) (.timestamp d)))

(defn next-due [spec tz after [anchor None]]
  "When the routine of SPEC (zone name TZ, set at ANCHOR) runs next after AFTER; None: never."
  (setv kind (proto-get spec ':kind))
  (cond
    (= kind "at") (when (> (proto-get spec ':at) after) (proto-get spec ':at))
    (= kind "every")
    (do (setv step (proto-get spec ':seconds)
              base (if (is anchor None) after anchor))
        (if (< after base)
            (+ base step)
            (+ base (* step (+ 1 (int (// (- after base) step)))))))
    True
    (do (setv zone (zoneinfo.ZoneInfo tz)
              it (croniter (proto-get spec ':text) (datetime.datetime.fromtimestamp after zone))
              fixed-hour (not (in "*" (get (.split (proto-get spec ':text)) 1))))
        (for [_ (range 4)]
          (setv d (.get-next it datetime.datetime))
          (when (not (and fixed-hour (_second-coming d zone)))
            (return (.timestamp d))))
        None)))

(defn shortest-gap [spec tz now [runs 48]]
  "The shortest time between two of the next RUNS runs of SPEC, or None for one run."
  (setv t now times [])
  (for [_ (range runs)]
    (setv t (next-due spec tz t now))
    (when (is t None) (break))
    (.append times t))
  (when (> (len times) 1)
    (min (gfor [a b] (zip times (cut times 1 None)) (- b a)))))

;; * The routines in the store

(import uuid)

(setv _COLUMNS "id, session, source, kind, spec, objective, say, quiet, catch_up, until, tz,
                state, next_due, anchor, created, runs")

(defn _routine [row]
  (setv [id session source kind spec objective say quiet catch-up until tz state next-due anchor created runs] row)
  [:id id :session session :source (data-read source) :kind kind :when spec
   :objective objective :say say :quiet (bool quiet) :catch-up catch-up :until until :tz tz
   :state state :next-due next-due :anchor anchor :created created :runs runs])

(defn routine-spec [routine]
  "The spec of ROUTINE's :when, read again (it was checked when it was set)."
  (setv kind (proto-get routine ':kind) text (proto-get routine ':when))
  (cond (= kind "every") (get (parse-when text "UTC" 0) 0)
        (= kind "at") [:kind "at" :text text :at (proto-get routine ':next-due)]
        True [:kind "cron" :text text]))

(defn routine-add [store routine now]
  "Record ROUTINE (:id :session :source :spec :objective :say :quiet :catch-up
   :until :tz :next-due), active."
  (setv spec (proto-get routine ':spec))
  (with [conn (.transaction store)]
    (.execute conn (+ f"INSERT INTO routines ({_COLUMNS}) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', ?, ?, ?, 0)")
              #((proto-get routine ':id) (proto-get routine ':session) (data-print (proto-get routine ':source))
                (proto-get spec ':kind) (proto-get spec ':text) (proto-get routine ':objective)
                (proto-get routine ':say) (int (bool (proto-get routine ':quiet)))
                (proto-get routine ':catch-up "once") (proto-get routine ':until) (proto-get routine ':tz)
                (proto-get routine ':next-due) now now))
    (hy.I.passepartout/journal.journal-event
      store "routine" (proto-get routine ':session)
      [:event "created" :routine (proto-get routine ':id) :when (proto-get spec ':text)
       :objective (proto-get routine ':objective) :say (proto-get routine ':say)
       :quiet (bool (proto-get routine ':quiet)) :catch-up (proto-get routine ':catch-up "once")
       :next-due (proto-get routine ':next-due)] :ts now)))

(defn routine-get [store id]
  "The routine ID as a plist, or None."
  (setv rows (.query store f"SELECT {_COLUMNS} FROM routines WHERE id = ?" #(id)))
  (when rows (_routine (get rows 0))))

(defn routines-of [store [session None] [states #("active" "paused")]]
  "The routines (set in SESSION, when given) in STATES, by next run."
  (lfor row (.query store f"SELECT {_COLUMNS} FROM routines ORDER BY next_due IS NULL, next_due, created")
        :setv r (_routine row)
        :if (and (in (proto-get r ':state) states)
                 (or (is session None) (= (proto-get r ':session) session)))
        r))

(defn routines-due [store now]
  "The active routines whose next run is at NOW or before."
  (lfor row (.query store f"SELECT {_COLUMNS} FROM routines WHERE state = 'active' AND next_due <= ?
                           ORDER BY next_due" #(now))
        (_routine row)))

(defn earliest-due [store]
  "The earliest next run of an active routine, or None."
  (get (.query store "SELECT MIN(next_due) FROM routines WHERE state = 'active'") 0 0))

(defn routine-set-state [store id state now [why None]]
  "Move the routine ID to STATE (paused, active, deleted); True when it changed.
   Resumed, its next run is the next one after NOW."
  (with [conn (.transaction store)]
    (setv r (routine-get store id))
    (when (or (is r None) (= (proto-get r ':state) state) (in (proto-get r ':state) #("deleted" "done")))
      (return False))
    (setv due (proto-get r ':next-due))
    (when (and (= state "active") (is-not due None) (< due now))
      (setv due (next-due (routine-spec r) (proto-get r ':tz) now (proto-get r ':anchor))))
    (.execute conn "UPDATE routines SET state = ?, next_due = ? WHERE id = ?" #(state due id))
    (hy.I.passepartout/journal.journal-event store "routine" (proto-get r ':session)
                                             [:event state :routine id :why why] :ts now)
    True))

(defn routine-runs [store id]
  "The runs of the routine ID, oldest first, as plists."
  (lfor [due state workflow claimed finished result]
        (.query store "SELECT due, state, workflow, claimed, finished, result FROM routine_runs
                       WHERE routine = ? ORDER BY due" #(id))
        [:due due :state state :workflow workflow :claimed claimed :finished finished :result result]))

;; ** Claiming a run

(defn routine-claim [store routine after state now [write None]]
  "Claim ROUTINE's run due at its :next-due; True when this claim won."
  (setv id (proto-get routine ':id)
        due (proto-get routine ':next-due)
        later (next-due (routine-spec routine) (proto-get routine ':tz) (max after due) (proto-get routine ':anchor)))
  (when (and (is-not later None) (is-not (proto-get routine ':until) None) (> later (proto-get routine ':until)))
    (setv later None))
  (with [conn (.transaction store)]
    (when (!= 1 (. (.execute conn (+ "UPDATE routines SET next_due = ?, state = ?, runs = runs + ?"
                                     " WHERE id = ? AND state = 'active' AND next_due = ?")
                             #(later (if (is later None) "done" "active") (if (= state "skipped") 0 1) id due))
                   rowcount))
      (return False))
    (.execute conn "INSERT INTO routine_runs (routine, due, state, claimed) VALUES (?, ?, ?, ?)"
              #(id due state now))
    (when write (write store))
    True))

(defn run-set [store id due state [result None] [workflow None] [now None]]
  "Mark the run of routine ID due at DUE in STATE."
  (.write store "UPDATE routine_runs SET state = ?, result = COALESCE(?, result),
                 workflow = COALESCE(?, workflow), finished = ? WHERE routine = ? AND due = ?"
          #(state result workflow now id due)))

;; * The runtime

(import passepartout.workers [new-id worker-session workflow-add workflow-resume workflow-end
                              conversation-of root-source]
        passepartout.journal [journal-event])

(setv LONGEST-SLEEP 300
      ;; a run this late at start was missed while the daemon was down
      MISSED-AFTER 60)

(defn new-routine-id []
  "A fresh routine id such as \"r3f9a0c2b1d\"."
  (new-id "r"))

(defn source-of [session]
  "The source replies to SESSION go out with: gateway and chat from its name."
  (setv [g _ chat] (.partition session ":"))
  (if chat [:gateway (kw g) :chat chat] [:gateway (kw g)]))

(defn routine-title [routine]
  (setv what (or (proto-get routine ':objective) (proto-get routine ':say) ""))
  (setv what (.join " " (.split what)))
  f"routine {(proto-get routine ':id)} ({(proto-get routine ':when)}: {(cut what 60)})")

(defclass Routines []
  "The routines of one daemon: SERVICES its parts, HUB the way replies go out
   and workers come in."

  (defn __init__ [self services hub]
    (setv self.services services
          self.hub hub
          self.wake (asyncio.Event)
          self.task None
          self.told []
          services.routines self
          (get hub.workflows.finishers "routine") self._finished))

  (defn zone [self]
    (config-zone self.services.config))

  (defn :async add [self routine]
    "Record ROUTINE (see routine-add) and wake the loop."
    (await (.call self.services.writer routine-add routine (self.services.clock)))
    (.set self.wake))

  (defn :async set-state [self id state [why None]]
    "Pause, resume or delete the routine ID; True when it changed."
    (setv changed (await (.call self.services.writer routine-set-state id state (self.services.clock) why)))
    (.set self.wake)
    changed)

  ;; ** The loop

  (defn :async start [self]
    "Say the reminders a kill left unsaid, catch up what was missed while the
     daemon was down, then run the loop; once (a second call does nothing)."
    (when (is-not self.task None) (return))
    (setv self.task (.create-future (asyncio.get-running-loop)))
    (await (self.say-unsaid))
    (await (self.catch-up))
    (setv self.task (asyncio.ensure-future (self._loop))))

  (defn :async _loop [self]
    (while True
      (.clear self.wake)
      (try
        (await (self.run-due))
        (except [e Exception]
          (.exception log "running the due routines failed: %s" e)))
      (setv soonest (earliest-due self.services.store)
            wait (if (is soonest None)
                     LONGEST-SLEEP
                     (min LONGEST-SLEEP (max 0.0 (- soonest (self.services.clock))))))
      (try
        (await (asyncio.wait-for (.wait self.wake) wait))
        (except [asyncio.TimeoutError] None))))

  (defn :async run-due [self]
    "Run every routine due now; how many runs were claimed here."
    (setv now (self.services.clock)
          due (routines-due self.services.store now))
    (if due (await (self._run-all due now "due")) 0))

  (defn :async catch-up [self]
    "What the start of a daemon does with the runs missed while it was down."
    (setv now (self.services.clock))
    (for [r (routines-due self.services.store (- now MISSED-AFTER))]
      (setv missed (self._missed r now)
            tz (proto-get r ':tz)
            last (show-time (proto-get r ':next-due) tz))
      (if (= (proto-get r ':catch-up) "skip")
          (when (await (.call self.services.writer routine-claim r now "skipped" now))
            (await (self._record r "missed" [:missed missed :due (proto-get r ':next-due) :policy "skip"]))
            (await (self._tell r (+ f"While I was not running, the {(routine-title r)} missed {missed} run"
                                    (if (= missed 1) "" "s") f" (the first due {last}); as it asks, "
                                    "they are skipped, and it runs next at "
                                    (self._next-text (proto-get r ':id)) "."))))
          (do (await (self._record r "catch-up" [:missed missed :due (proto-get r ':next-due) :policy "once"]))
              (when (await (self._run r now "catch-up"))
                (await (self._tell r (+ f"While I was not running, the {(routine-title r)} missed {missed} run"
                                        (if (= missed 1) "" "s") f" (the first due {last}); as it asks, "
                                        "it runs once now."))))))))

  (defn _missed [self r now]
    "How many runs of R fell between its next-due and NOW (at most 1000 counted)."
    (setv spec (routine-spec r) t (proto-get r ':next-due) n 0)
    (while (and (is-not t None) (<= t now) (< n 1000))
      (+= n 1)
      (setv t (next-due spec (proto-get r ':tz) t (proto-get r ':anchor))))
    n)

  (defn _next-text [self id]
    (setv r (routine-get self.services.store id))
    (if (and r (proto-get r ':next-due)) (show-time (proto-get r ':next-due) (proto-get r ':tz)) "never"))

  ;; ** A run

  (defn :async _run [self r now why]
    "Claim and start the run of R due at its next-due; True when this claim won."
    (= 1 (await (self._run-all [r] now why))))

  (defn :async _run-all [self routines now why]
    "Claim the runs of ROUTINES, each due at its next-due, in one commit, then
     start those this daemon won, together; how many."
    (setv won (await (.call self.services.writer self._claim-all routines now why)))
    (await (asyncio.gather #* (gfor [r due workflow] won (self._begin r due workflow))))
    (len won))

  (defn _claim-all [self store routines now why]
    "#(routine due workflow) for each of ROUTINES whose run this claim won;
     WORKFLOW None for a reminder."
    (setv won [])
    (for [r routines]
      (setv due (proto-get r ':next-due))
      (if (proto-get r ':say)
          (when (routine-claim store r now "claimed" now)
            (.append won #(r due None)))
          (do (setv workflow (self._workflow r)
                    wid (new-id "w"))
              (defn write [store]
                (workflow-add store workflow [[:id wid :step (proto-get r ':id) :objective (proto-get r ':objective)]] now)
                (workflow-resume store (proto-get workflow ':id)
                                 [:type :event :session (proto-get r ':session) :source (proto-get r ':source)
                                  :payload [:sensor :routine :routine (proto-get r ':id) :due due
                                            ;; the resume names the task: the finisher is found by it
                                            :task (proto-get workflow ':task)]])
                (.execute store.conn "UPDATE routine_runs SET workflow = ?, state = 'running'
                                      WHERE routine = ? AND due = ?" #((proto-get workflow ':id) (proto-get r ':id) due))
                (journal-event store "routine" (proto-get r ':session)
                               [:event "run" :routine (proto-get r ':id) :due due :why why
                                :workflow (proto-get workflow ':id) :worker wid] :ts now))
              (when (routine-claim store r now "claimed" now write)
                (.append won #(r due workflow))))))
    won)

  (defn :async _begin [self r due workflow]
    (if (is workflow None)
        (await (self._say r due))
        (await (.run-detached self.hub.workflows workflow 1))))

  (defn _workflow [self r]
    [:id (new-id "f") :title (routine-title r) :session (proto-get r ':session)
     :task f"routine:{(proto-get r ':id)}" :depth 0])

  (defn :async _say [self r due]
    (setv now (self.services.clock))
    (await (self._record r "said" [:due due :text (proto-get r ':say)]))
    (await (self._tell r (+ "Reminder: " (proto-get r ':say))))
    (await (.call self.services.writer run-set (proto-get r ':id) due "said" None None now)))

  (defn :async _record [self r event data]
    (await (.call self.services.writer journal-event "routine" (proto-get r ':session)
                  [:event event :routine (proto-get r ':id) #* data] (self.services.clock))))

  (defn :async _tell [self r text [kind "notice"]]
    (.append self.told #((proto-get r ':id) text))
    (await (.deliver self.hub [:type :reply :session (proto-get r ':session) :source (proto-get r ':source)
                               :payload [:kind (kw kind) :text text]])))

  ;; ** A run's end

  (defn :async _finished [self workflow workers]
    "The workflow of a routine's run is over: mark the run, and tell the chat."
    (setv store self.services.store
          id (cut (proto-get workflow ':task) (len "routine:") None)
          r (routine-get store id)
          w (get workers 0)
          ok (= (proto-get w ':state) "done")
          result (str (or (proto-get w ':result) ""))
          now (self.services.clock)
          rows (.query store "SELECT due FROM routine_runs WHERE workflow = ?" #((proto-get workflow ':id))))
    (defn end [store]
      (when (workflow-end store (proto-get workflow ':id) (if ok "done" "failed") now)
        (when rows
          (run-set store id (get rows 0 0) (if ok "done" "failed") result None now))
        (journal-event store "routine" (proto-get workflow ':session)
                       [:event (if ok "done" "failed") :routine id :workflow (proto-get workflow ':id)
                        :state (proto-get w ':state) :result result] :ts now)
        True))
    (when (and (await (.call self.services.writer end)) r
               (not (and ok (proto-get r ':quiet))))
      (await (self._tell r (+ (if ok f"The {(routine-title r)} ran:\n"
                                  f"The {(routine-title r)} did not finish well ({(proto-get w ':state)}):\n")
                              result)))))

  ;; ** Reminders a kill left unsaid

  (defn :async say-unsaid [self]
    "Say the reminders whose runs were claimed but not said before the last stop."
    (for [[id due] (.query self.services.store
                           "SELECT r.routine, r.due FROM routine_runs r JOIN routines t ON t.id = r.routine
                            WHERE r.state = 'claimed' AND r.workflow IS NULL AND t.say IS NOT NULL")]
      (await (self._say (routine-get self.services.store id) due))))

  (defn close [self]
    (when self.task
      (.cancel self.task)
      (setv self.task None))))

;; * A grant for a routine

(import passepartout.workers [session-worker-id])

(defn grant-home [store session]
  "The session the grants of SESSION are kept under."
  (setv id (session-worker-id session))
  (when id
    (setv rows (.query store "SELECT r.routine FROM routine_runs r JOIN workers w ON w.workflow = r.workflow
                              WHERE w.id = ?" #(id)))
    (when rows (return f"routine:{(get rows 0 0)}")))
  session)

;; * What the person sees

(defn routine-line [r]
  (setv what (if (proto-get r ':say) (+ "says " (repr (proto-get r ':say))) (proto-get r ':objective))
        next (if (= (proto-get r ':state) "paused")
                 "paused"
                 (if (proto-get r ':next-due) (+ "next " (show-time (proto-get r ':next-due) (proto-get r ':tz))) "no next run")))
  (+ f"- {(proto-get r ':id)} [{(proto-get r ':when)}] {(.join " " (.split (str what)))} — {next}"
     (if (proto-get r ':quiet) " (quiet: told only when a run fails)" "")
     (if (= (proto-get r ':catch-up) "skip") " (missed runs are skipped)" "")))

(defn routines-text [store session]
  "The routines SESSION set, as text."
  (setv mine (routines-of store (conversation-of store session)))
  (if mine
      (.join "\n" (+ ["Routines of this conversation (pause, resume or delete one with /routines pause ID …):"]
                     (lfor r mine (routine-line r))))
      "No routines are set in this conversation."))
