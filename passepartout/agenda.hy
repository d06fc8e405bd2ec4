;; * Why

"A conversation ends; a goal often does not. \"Get the backup check green\",
\"find out why the build is slow\", \"call the dentist\": the person says them
once, and the agent should still know of them next week, across restarts and
conversations. The agenda is that list: items the person or the model adds,
kept in the one store, shown to the model in brief with every prompt and to
the person with /agenda."

(import asyncio logging re time
        hy.models [Keyword]
        passepartout.proto [proto-get]
        passepartout.records [data-read]
        passepartout.journal [journal-append])

(setv log (logging.getLogger "passepartout.agenda"))

;; * Limits

(setv MAX-OPEN 100
      MAX-TEXT 500
      MAX-REASON 2000
      OPS #("add" "update" "complete" "drop")
      STATES #("open" "done" "dropped"))

(defclass AgendaError [ValueError]
  "A change the agenda cannot make; its text says why, for the person or the model.")

;; * Reading what was proposed

(defn op-name [v]
  "The operation V names (\"add\", \"update\", \"complete\", \"drop\"), or None.
   (op-name :complete) ⇒ \"complete\""
  (setv name (cond (isinstance v Keyword) v.name
                   (isinstance v str) (.lower (.lstrip (.strip v) ":"))
                   True None))
  (when (in name OPS) name))

(defn item-id [v]
  "The item number V names, or None.
   (item-id \"#3\") ⇒ 3"
  (cond (isinstance v bool) None
        (isinstance v int) (when (> v 0) v)
        (isinstance v str) (do (setv t (.lstrip (.strip v) "#"))
                               (when (and (.isdigit t) (.isascii t) (> (int t) 0)) (int t)))
        True None))

(defn _clean [text]
  (if (isinstance text str) (.strip text) ""))

;; * The items in the store

(setv _cols "id, text, state, created, updated, added_by, who, session, task, reason, closed_by")

(defn _item [row]
  (setv [id text state created updated by who session task reason closed-by] row)
  [:id id :text text :state state :created created :updated updated :by by
   :who who :session session :task task :reason reason :closed-by closed-by])

(defn agenda-get [store id]
  "The item numbered ID, or None."
  (setv rows (.query store f"SELECT {_cols} FROM agenda WHERE id = ?" #(id)))
  (when rows (_item (get rows 0))))

(defn agenda-items [store [states #("open")] [limit None]]
  "The items in STATES, open ones oldest first, closed ones newest first."
  (setv marks (.join ", " (* ["?"] (len states)))
        rows (.query store (+ f"SELECT {_cols} FROM agenda WHERE state IN ({marks}) "
                              (if (= (tuple states) #("open")) "ORDER BY id" "ORDER BY updated DESC, id DESC")
                              " LIMIT ?")
                     #(#* states (if (is limit None) -1 limit))))
  (lfor r rows (_item r)))

(defn open-ids [store]
  "The numbers of the open items, in order."
  (lfor [i] (.query store "SELECT id FROM agenda WHERE state = 'open' ORDER BY id") i))

(defn _journal [store op item by who session task reason now]
  (journal-append store
                  [:event "agenda" :session session :turn "action"
                   :data (+ [:op op :id (proto-get item ':id) :text (proto-get item ':text)
                             :state (proto-get item ':state) :by by :who who]
                            (if reason [:reason reason] [])
                            (if task [:task task] []))]
                  :ts now))

(defn agenda-add [store text by who session [task None] [now None]]
  "Add an open item of TEXT, by BY (\"person\" or \"model\") WHO in SESSION; the item."
  (setv text (_clean text)
        now (if (is now None) (time.time) (float now)))
  (cond (not text) (raise (AgendaError "an item needs its text: what is to be done, in a few words"))
        (> (len text) MAX-TEXT) (raise (AgendaError f"an item is at most {MAX-TEXT} characters; this one has {(len text)}: say it shorter")))
  (with [conn (.transaction store)]
    (setv [n] (.fetchone (.execute conn "SELECT count(*) FROM agenda WHERE state = 'open'"))
          same (.fetchone (.execute conn "SELECT id FROM agenda WHERE state = 'open' AND lower(text) = lower(?)" #(text))))
    (when same
      (raise (AgendaError f"the open item #{(get same 0)} says that already")))
    (when (>= n MAX-OPEN)
      (raise (AgendaError f"the agenda holds {MAX-OPEN} open items already: complete or drop some first")))
    (setv id (. (.execute conn (+ "INSERT INTO agenda (text, state, created, updated, added_by, who, session, task) "
                                  "VALUES (?, 'open', ?, ?, ?, ?, ?, ?)")
                          #(text now now by who session task))
                lastrowid)
          item (agenda-get store id))
    (_journal store "add" item by who session task None now))
  item)

(defn agenda-change [store id op by who session [text None] [reason None] [task None] [now None]]
  "Update, complete or drop (OP) the open item ID, by BY WHO in SESSION; the
   item as it is after. An AgendaError when it cannot be done."
  (setv now (if (is now None) (time.time) (float now))
        text (_clean text)
        reason (cut (_clean reason) MAX-REASON))
  (when (not (in op #("update" "complete" "drop")))
    (raise (AgendaError f"no such change to an item: {op !r}")))
  (when (and (= op "update") (not text))
    (raise (AgendaError "an update needs the item's new text")))
  (when (> (len text) MAX-TEXT)
    (raise (AgendaError f"an item is at most {MAX-TEXT} characters; this one has {(len text)}: say it shorter")))
  (with [conn (.transaction store)]
    (setv item (agenda-get store id))
    (cond (is item None) (raise (AgendaError f"there is no agenda item #{id}"))
          (!= (proto-get item ':state) "open")
          (raise (AgendaError f"the item #{id} is {(proto-get item ':state)} already")))
    (if (= op "update")
        (.execute conn "UPDATE agenda SET text = ?, updated = ?, reason = ? WHERE id = ?"
                  #(text now (or reason None) id))
        (.execute conn "UPDATE agenda SET state = ?, updated = ?, reason = ?, closed_by = ? WHERE id = ?"
                  #((if (= op "complete") "done" "dropped") now (or reason None) by id)))
    (setv item (agenda-get store id))
    (_journal store op item by who session task (or reason None) now))
  item)

;; * What counts as evidence

(setv RAN-KEPT 12
      CUE-CHARS 80
      _word-re (re.compile r"[^\W_][\w./+-]*")
      _DONE-WORDS (frozenset (.split "done finished finish complete completed completes completion fixed fix
                                      resolved resolve works worked working succeeded success successful
                                      successfully achieved accomplished handled closed close over ended
                                      item items task tasks goal the this that these those has have had
                                      been was were are and its all now yes okay indeed everything
                                      thing things good fine great"))
      _NOT-EVIDENCE #("agenda" "message")
      _cue-fields [':cmd ':path ':query ':url ':objective ':title ':text]
      HOW (+ "cite what the task ran and what it showed, e.g. "
             ":reason \"ran `pytest -q` (shell): 42 passed, 0 failed\""))

(defn _words [text]
  (lfor w (.findall _word-re (.lower text)) (.rstrip w ".:,;/")))

(defn _cue-words [cue]
  "The words of CUE a reason may cite it by."
  (setv out (set))
  (for [w (_words cue)]
    (when (>= (len w) 3)
      (.add out w)
      (setv base (get (.rsplit w "/" 1) -1))
      (when (>= (len base) 3) (.add out base))))
  out)

(defn ran-fact [action result]
  "What the evidence check keeps of one ACTION that ran with RESULT:
   (:action NAME :status STATUS :cue TEXT).
   (ran-fact [:action :shell :cmd \"pytest -q\"] [:status :ok]) ⇒ (:action \"shell\" :status \"ok\" :cue \"pytest -q\")"
  (setv name (proto-get action ':action)
        status (proto-get result ':status)
        cue (next (gfor f _cue-fields
                        :setv v (proto-get action f)
                        :if (and (isinstance v str) (.strip v))
                        (.strip v))
                  ""))
  [:action (if (isinstance name Keyword) name.name (str name))
   :status (if (isinstance status Keyword) status.name (str status))
   :cue (cut cue CUE-CHARS)])

(defn _cites [words lowered fact]
  (setv name (proto-get fact ':action))
  (or (in name words)
      (in (.replace name "-" " ") lowered)
      (bool (& (_cue-words (proto-get fact ':cue "")) (set words)))))

(defn ran-text [ran]
  "The actions of RAN (facts) as one line for a correction."
  (.join "; " (gfor f ran (+ ":" (proto-get f ':action)
                            (if (proto-get f ':cue) (+ " " (repr (proto-get f ':cue))) "")
                            " → " (proto-get f ':status)))))

(defn completion-problem [reason [ran None]]
  "What is wrong with REASON as the evidence of a completion, or None. RAN
   is what the task ran (facts, see ran-fact); None when it is not known."
  (setv text (_clean reason))
  (when (not text)
    (return (+ "completing an item needs :reason, the evidence that it is done: " HOW)))
  (setv words (_words text)
        said (lfor w words :if (and (>= (len w) 3) (not (in w _DONE-WORDS))) w))
  (when (< (len said) 3)
    (return (+ f"{text !r} is no evidence that the item is done: " HOW)))
  (when (is ran None)
    (return None))
  (setv ran (lfor f ran :if (not (in (proto-get f ':action) _NOT-EVIDENCE)) f))
  (when (not ran)
    (return (+ "nothing has run in this task yet, so nothing shows the item is done: first run "
               "what shows it (a test, a check, a look at the file), then complete the item "
               "citing that result")))
  (setv cited (lfor f ran :if (_cites words (.lower text) f) f))
  (when (not cited)
    (return (+ "the reason cites nothing this task ran: " HOW ". This task ran: " (ran-text ran))))
  (when (not (any (gfor f cited (= (proto-get f ':status) "ok"))))
    (return (+ "what the reason cites failed (" (ran-text cited) "), which shows the item is not done "
               "yet: run what shows it is done and cite that, or update or drop the item")))
  None)

(defn _shown [v]
  (cond (isinstance v Keyword) (+ ":" v.name)
        (is v None) "none"
        True (repr v)))

(defn action-problem [action [open None] [ran None]]
  "What is wrong with the :agenda ACTION, or None. OPEN is the numbers of
   the open items and RAN what the task ran (see completion-problem); None
   for either when it is not known."
  (setv op (op-name (proto-get action ':op))
        id (item-id (proto-get action ':id))
        text (_clean (proto-get action ':text))
        shown (if (is open None) ""
                  (if open (+ " (open items: " (.join ", " (gfor i open f"#{i}")) ")") " (no item is open)")))
  (cond
    (is op None)
    (+ ":agenda needs :op, one of :add, :update, :complete, :drop; got "
       (_shown (proto-get action ':op)))
    (and (in op #("add" "update")) (not text))
    f":agenda :op :{op} needs :text, the item in a few words"
    (> (len text) MAX-TEXT)
    f"an item is at most {MAX-TEXT} characters; this :text has {(len text)}: say it shorter"
    (and (= op "add") (is-not open None) (>= (len open) MAX-OPEN))
    f"the agenda holds {MAX-OPEN} open items already: complete or drop some first"
    (= op "add") None
    (is id None)
    (+ f":agenda :op :{op} needs :id, the number of an open item" shown)
    (and (is-not open None) (not (in id open)))
    (+ f"there is no open agenda item #{id}" shown)
    (= op "complete")
    (completion-problem (proto-get action ':reason) ran)
    True None))

;; ** The facts a context carries

(defn agenda-facts [store [task None]]
  "The :agenda plist of a context: (:open (N …) :ran (FACT …)), RAN the last
   RAN-KEPT results of TASK, oldest first."
  (when (is store None) (return None))
  (setv open (open-ids store)
        ran [])
  (when (and open task)
    (setv memo (.setdefault store.memo "agenda-ran" {}))
    (when (> (len memo) 4096) (.clear memo))
    (setv rows (.query store "SELECT id FROM events WHERE task = ? AND kind = 'result' ORDER BY id DESC LIMIT ?"
                       #((str task) RAN-KEPT)))
    (for [[i] (reversed rows)]
      (when (not (in i memo))
        (setv data (data-read (get (.query store "SELECT data FROM events WHERE id = ?" #(i)) 0 0))
              (get memo i) (ran-fact (or (proto-get data ':action) []) (or (proto-get data ':result) []))))
      (.append ran (get memo i))))
  [:open open :ran ran])

;; * In the prompt, in brief

(setv BRIEF-ITEMS 10
      BRIEF-WIDTH 160
      BRIEF-CHARS 1500)

(defn _short [text n]
  (setv t (.join " " (.split (str (or text "")))))
  (if (> (len t) n) (+ (cut t (- n 1)) "…") t))

(defn agenda-brief [store #** kw]
  "The open items of STORE's agenda in brief, for the prompt; \"\" when none.
   Keywords: items (at most, BRIEF-ITEMS), width (of one item, BRIEF-WIDTH),
   chars (in all, BRIEF-CHARS)."
  (setv most (.get kw "items" BRIEF-ITEMS)
        width (.get kw "width" BRIEF-WIDTH)
        chars (.get kw "chars" BRIEF-CHARS))
  (when (is store None) (return ""))
  (setv items (agenda-items store)
        lines [])
  (when (not items) (return ""))
  (setv head (+ "Agenda: the open goals, kept across conversations. Change them with :agenda; "
                "complete one only with evidence, a :reason citing what this task ran and what it showed.")
        used (len head))
  (for [item (cut items most)]
    (setv line (+ f"- #{(proto-get item ':id)} " (_short (proto-get item ':text) width)
                  (if (= (proto-get item ':by) "person") " (the person's)" " (yours)")))
    (when (> (+ used (len line) 1) chars) (break))
    (+= used (+ (len line) 1))
    (.append lines line))
  (setv left (- (len items) (len lines)))
  (.join "\n" (+ [head] lines (if left [f"… and {left} more (the person sees them all with /agenda)"] []))))

;; * What the person reads

(setv CLOSED-SHOWN 30)

(defn _when [t]
  (time.strftime "%Y-%m-%d %H:%M" (time.localtime t)))

(defn _by [item]
  (if (= (proto-get item ':by) "person") (str (proto-get item ':who)) "the model"))

(defn agenda-text [store [everything False]]
  "What /agenda (EVERYTHING: /agenda all) answers."
  (setv items (agenda-items store)
        lines (if items
                  (+ [f"Open agenda items ({(len items)}):"]
                     (lfor i items (+ f"  #{(proto-get i ':id)} {(_short (proto-get i ':text) 200)}"
                                      f" — added by {(_by i)}, {(_when (proto-get i ':created))}")))
                  ["The agenda has no open items. Add one with /agenda add TEXT."]))
  (when everything
    (setv closed (agenda-items store #("done" "dropped") :limit CLOSED-SHOWN))
    (.extend lines
             (if closed
                 (+ ["Closed (newest first):"]
                    (lfor i closed (+ f"  #{(proto-get i ':id)} {(proto-get i ':state)}: {(_short (proto-get i ':text) 120)}"
                                      f" — {(_when (proto-get i ':updated))}, by "
                                      (if (= (proto-get i ':closed-by) "person") "the person" "the model")
                                      (if (proto-get i ':reason) (+ ": " (_short (proto-get i ':reason) 200)) ""))))
                 ["No closed items."])))
  (.join "\n" lines))

;; * The periodic review

(import passepartout.records [kv-get kv-put events]
        passepartout.proto [kw proto-merge proto-without])

(setv MIN-REVIEW 600
      REVIEW-POLL 60
      LAST-REVIEW-KEY "agenda:last-review"
      _units {"s" 1 "sec" 1 "secs" 1 "second" 1 "seconds" 1
              "m" 60 "min" 60 "mins" 60 "minute" 60 "minutes" 60
              "h" 3600 "hr" 3600 "hrs" 3600 "hour" 3600 "hours" 3600
              "d" 86400 "day" 86400 "days" 86400 "w" 604800 "week" 604800 "weeks" 604800}
      _interval-re (re.compile r"^(?:every\s+)?(\d+(?:\.\d+)?)?\s*([a-z]+)$"))

(defn review-interval [text]
  "The seconds between two reviews TEXT asks for; None when it asks for none.
   A ValueError for text that is neither.
   (review-interval \"every 6h\") ⇒ 21600.0"
  (setv t (.lower (.strip (str (or text "")))))
  (when (in t #("" "off" "no" "none" "false" "never"))
    (return None))
  (setv m (.match _interval-re t))
  (when (or (not m) (not (in (.group m 2) _units)))
    (raise (ValueError f"[agenda] review: {text !r} is no interval; write one such as \"6h\", \"every 2 days\" or \"90m\", or \"off\"")))
  (setv seconds (* (float (or (.group m 1) "1")) (get _units (.group m 2))))
  (when (< seconds MIN-REVIEW)
    (raise (ValueError f"[agenda] review: {text !r} is more often than every {(// MIN-REVIEW 60)} minutes")))
  seconds)

(defn review-text [items]
  "What a review's task is started with, for the open ITEMS."
  (+ "This is a periodic review of the agenda, the open goals kept across conversations; "
     "nobody reads this conversation. For each item below: where your actions can show whether "
     "it is done, find out; complete it only with evidence (:agenda :op :complete with a :reason "
     "citing what ran and what it showed); drop one that no longer makes sense, saying why; "
     "update one whose text is out of date. Change nothing you cannot back up. When you are "
     "finished, answer in one line with what you changed, or that nothing changed.\n\nOpen items:\n"
     (.join "\n" (gfor i items (+ f"- #{(proto-get i ':id)} " (_short (proto-get i ':text) 300))))))

(defn review-changes [store session]
  "The agenda turns of the review SESSION, as (:op :id :text :reason) plists."
  (lfor e (events store :kind "agenda" :session session :limit None)
        (proto-get e ':data)))

(defn changes-text [changes]
  "What the person is told of a review's CHANGES."
  (setv verbs {"add" "added" "update" "updated" "complete" "completed" "drop" "dropped"})
  (+ "The agenda review changed:\n"
     (.join "\n" (gfor c changes
                       (+ f"- #{(proto-get c ':id)} {(.get verbs (str (proto-get c ':op)) (str (proto-get c ':op)))}: "
                          (_short (proto-get c ':text) 160)
                          (if (proto-get c ':reason) (+ " — " (_short (proto-get c ':reason) 200)) ""))))))

(defn session-source [session]
  "The source a reply to SESSION (\"gateway:chat\") goes out with."
  (setv [g _ chat] (.partition (str session) ":"))
  [:gateway (kw g)
   :chat (if (.isdigit (.lstrip chat "-")) (int chat) chat)])

(defclass AgendaReview []
  "The periodic review of one daemon: SERVICES its parts, HUB the way its
   task's signal comes in and its replies go out (as the gateway agenda),
   INTERVAL seconds between two reviews."

  (defn __init__ [self services hub interval [report-to None]]
    (setv self.services services
          self.hub hub
          self.interval interval
          self.report-to (or report-to None)
          self.running (set)
          (get hub.gateways "agenda") {"name" "agenda" "deliver" self.deliver}))

  (defn next-due [self]
    "When the next review is due; the first is one interval from now."
    (setv store self.services.store
          last (kv-get store LAST-REVIEW-KEY))
    (when (is last None)
      (setv last (self.services.clock))
      (kv-put store LAST-REVIEW-KEY last))
    (+ (float last) self.interval))

  (defn wait-time [self]
    "Seconds until the service should ask again."
    (max 1 (min REVIEW-POLL (- (self.next-due) (self.services.clock)))))

  (defn :async review-pass [self]
    "Start a review when one is due and none runs; its session, or None."
    (setv store self.services.store
          now (self.services.clock))
    (when (or self.running (< now (self.next-due)))
      (return None))
    (kv-put store LAST-REVIEW-KEY now)
    (setv items (agenda-items store))
    (when (not items)
      (return None))
    (setv key f"review-{(int now)}"
          session f"agenda:{key}")
    (.add self.running session)
    (when (not (await (.receive self.hub "agenda" key
                                [:type :event :source [:gateway :agenda :chat key]
                                 :payload [:sensor :worker-objective :text (review-text items)]])))
      (.discard self.running session))
    session)

  (defn _targets [self items]
    "Where to tell of ITEMS (plists with :id): report_to, else the
     conversations they were added in."
    (if self.report-to
        [self.report-to]
        (list (dfor c items
                    :setv item (agenda-get self.services.store (proto-get c ':id))
                    :setv s (when item (proto-get item ':session))
                    :if (and s (not (.startswith s "agenda:")) (not (.startswith s "worker:")))
                    s True))))

  (defn :async _tell [self sessions payload]
    (for [s sessions]
      (await (.deliver self.hub [:type :reply :session s :source (session-source s) :payload payload]))))

  (defn :async deliver [self reply]
    "The gateway agenda: a review's REPLY. An approval question goes to the
     person; the reply that ends the task tells them what changed."
    (setv session (proto-get reply ':session)
          payload (or (proto-get reply ':payload) []))
    (cond
      (= (proto-get payload ':kind) ':approval)
      ;; nothing has changed yet, maybe: asked where the items under review came from
      (await (self._tell (self._targets (agenda-items self.services.store))
                         (proto-merge (proto-without payload [':ends-task])
                                      [:text (+ "The agenda review asks:\n" (str (proto-get payload ':text)))])))
      (proto-get payload ':ends-task)
      ;; the review counts as running until the person has been told
      (try (setv changes (review-changes self.services.store session))
           (when changes
             (await (self._tell (self._targets changes) [:kind :notice :text (changes-text changes)])))
           (finally (.discard self.running session))))
    True))

(defn :async agenda-review-service [env hub]
  "Run the periodic review of the daemon ENV while it runs, when [agenda]
   review asks for one."
  (setv section (.get env.config "agenda" {}))
  (try (setv interval (review-interval (.get section "review" "")))
       (except [e ValueError]
         (.error log "%s; the agenda is not reviewed" e)
         (return)))
  (when (is interval None) (return))
  (setv review (AgendaReview env hub interval (.get section "report_to")))
  (while True
    (try (await (.review-pass review))
         (except [asyncio.CancelledError] (raise))
         (except [e Exception] (.error log "the agenda review could not start: %s" e)))
    (await (asyncio.sleep (.wait-time review)))))
