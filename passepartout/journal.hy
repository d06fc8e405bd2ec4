;; * Why

"A person who lets an agent act wants to ask, afterwards, what it did and why,
and whether the rule they wrote this morning would have stopped what it did
last week. Both questions need a history that cannot quietly change. The
journal is that history: every step of every task, as a turn appended to the
store's events and never rewritten."

(import hashlib json lzma re time
        hy.models [Keyword]
        pathlib [Path]
        passepartout.proto [ProtoError proto-get proto-print proto-put proto-read proto-values proto-without]
        passepartout.display [action-words display-text status-words when-words]
        passepartout.budget [usage-values]
        passepartout.records [data-print data-read])

;; * Turn types

(setv TURN-TYPES #("speech" "action" "thought" "yield" "silence")
      _kind-types {"input" "speech" "answer" "speech" "delivered" "speech" "outcome" "thought"
                   "intent" "action" "result" "action" "approval" "yield" "stop" "silence"})

(defn turn-type [kind data [given None]]
  "The turn type of an event of KIND carrying DATA (GIVEN, when a record names it)."
  (cond
    given (str given)
    (and (= kind "outcome") (= (proto-get data ':verdict) ':stopped)) "silence"
    True (.get _kind-types kind "thought")))

;; * The chain

(setv _columns "id, ts, kind, session, data, turn, clock, parents, task,
                state_before, state_after, tokens, cost, prev, hash"
      GENESIS ""
      _encode (. (json.JSONEncoder :ensure-ascii False :separators #("," ":")) encode))

(defn row-hash [row]
  "The hash of ROW, a tuple in the journal's column order (its own hash left out)."
  (.hexdigest (hashlib.sha256 (.encode (_encode (cut row 0 14)) "utf-8" "surrogatepass"))))

;; ** Hashes as bytes

(setv _hex-re (re.compile "(?:[0-9a-f]{2})*"))

(defn packed [h]
  "The hash H (hex text) as the bytes the file keeps; None and other text as they are."
  (if (and (isinstance h str) (.fullmatch _hex-re h)) (bytes.fromhex h) h))

(defn _hexed [column]
  f"CASE typeof({column}) WHEN 'blob' THEN lower(hex({column})) ELSE {column} END")

(setv read-columns (+ "id, ts, kind, session, data, turn, clock, parents, task, "
                       (.join ", " (gfor c ["state_before" "state_after"] (_hexed c)))
                       ", tokens, cost, "
                       (.join ", " (gfor c ["prev" "hash"] (_hexed c)))))

;; * Appending a turn

(defn _one [conn sql params]
  (.fetchone (.execute conn sql params)))

(defn _remembered [store seq]
  "The journal's memo when the file's last event is still its last turn, else a fresh one."
  (setv memo (.get store.memo "journal"))
  (when (not (and memo (= (get memo "id") seq)))
    (setv memo {"id" None "hash" None "sessions" {} "tasks" {}}
          (get store.memo "journal") memo))
  memo)

(defn _last-of [conn memo key what sql value]
  "The remembered last turn of WHAT (\"sessions\" or \"tasks\") KEY, or the one SQL finds."
  (if (in key (get memo what))
      (get memo what key)
      (_one conn sql #(value))))

(defn journal-append [store record [ts None]]
  "Append the event RECORD (see =task.org=) as a turn; its id."
  (setv [kind session data state-after turn given]
          (proto-values record ':event ':session ':data ':state-after ':turn ':parents)
        kind (str kind)
        session (if (is session None) None (str session))
        data (or data [])
        stored (if (= kind "outcome") (outcome-compact data) data)
        [task usage] (proto-values data ':task ':usage)
        task (if (is task None) None (str task))
        figures (when usage (usage-values usage))
        ts (if (is ts None) (time.time) (float ts)))
  (with [conn (.transaction store)]
    (when (= kind "outcome")
      (setv stored (_keep-decisions store stored)))
    (setv text (data-print stored)
          seq (_one conn "SELECT seq FROM sqlite_sequence WHERE name = 'events'" #())
          seq (if seq (get seq 0) 0)
          memo (_remembered store seq)
          last (if (is (get memo "id") None)
                   (or (_one conn (+ "SELECT " (_hexed "hash") " FROM events WHERE turn IS NOT NULL ORDER BY id DESC LIMIT 1") #())
                       (_one conn "SELECT head FROM segments WHERE head != '' ORDER BY last DESC LIMIT 1" #()))
                   #((get memo "hash")))
          mine (or (_last-of conn memo session "sessions"
                             (+ "SELECT id, clock, " (_hexed "state_after") " FROM events
                                 WHERE session IS ? AND turn IS NOT NULL ORDER BY id DESC LIMIT 1")
                             session)
                   (_one conn "SELECT id, clock, state_after FROM archived_sessions WHERE session IS ?"
                         #(session)))
          thread (when task
                   (_last-of conn memo task "tasks"
                             "SELECT id, clock FROM events WHERE task = ? ORDER BY id DESC LIMIT 1"
                             task))
          parent (or thread mine)
          clock (+ 1 (max (if mine (get mine 1) 0) (if parent (get parent 1) 0)))
          before (if mine (get mine 2) GENESIS)
          after (or state-after before)
          id (+ 1 seq)
          row #(id ts kind session text (turn-type kind data turn) clock
                (cond given (.join " " (gfor p given (str (int p))))
                      parent (str (get parent 0))
                      True "")
                task before after
                (when figures (+ (get figures 0) (get figures 1))) (when figures (float (get figures 2)))
                (if last (get last 0) GENESIS))
          hash (row-hash row))
    (.execute conn (+ "INSERT INTO events (" _columns ") VALUES ("
                      (.join ", " (* ["?"] 15)) ")")
              (+ (cut row 0 9) #((packed before) (packed after)) (cut row 11 13)
                 #((packed (get row 13)) (packed hash))))
    (.update memo {"id" id "hash" hash})
    (setv (get memo "sessions" session) #(id clock after))
    (when task
      (setv (get memo "tasks" task) #(id clock)))
    (when (> (len (get memo "sessions")) 4096) (.clear (get memo "sessions")))
    (when (> (len (get memo "tasks")) 4096) (.clear (get memo "tasks"))))
  id)

(defn journal-event [store kind session data [ts None]]
  "Append an event of KIND in SESSION carrying the plist DATA as a turn; its id."
  (journal-append store [:event kind :session session :data data] :ts ts))

;; ** Contexts, each kept once

(setv _VOLATILE [':now ':stop-mark ':session])

(defn kept-hash [text]
  "The name of TEXT kept once: the first 128 bits of its SHA-256, in hex."
  (cut (.hexdigest (hashlib.sha256 (.encode text "utf-8" "surrogatepass"))) 32))

(defn context-record [ctx]
  "#(hash record) for the context data CTX (see =context-data=): the record
   that keeps it once (written by =write-records=), and the hash an outcome
   names it by. The moment it holds, the stop count and the session are left
   out: the outcome's turn keeps them itself."
  (setv text (data-print (proto-without ctx _VOLATILE))
        hash (kept-hash text))
  #(hash [:context hash :text text]))

(defn journal-context [store hash text]
  "Keep the context (or the decisions) TEXT under HASH, unless it is kept already."
  (setv known (.setdefault store.memo "contexts" (set)))
  (when (not (in hash known))
    (.execute store.conn "INSERT OR IGNORE INTO contexts (hash, data) VALUES (?, ?)" #(hash text))
    (when (> (len known) 4096) (.clear known))
    (.add known hash)))

(defn context-of [store data [session None]]
  "The context the outcome DATA of SESSION was judged in, or None when it names none."
  (setv old (proto-get data ':context))
  (when old (return old))
  (setv hash (proto-get data ':context-hash))
  (when (is hash None) (return None))
  (setv rows (.query store "SELECT data FROM contexts WHERE hash = ?" #(hash)))
  (when rows
    (setv ctx (data-read (get rows 0 0)))
    ;; a context kept before sessions were left out holds its own
    (+ [:now (proto-get data ':now)]
       (if (or (is session None) (is-not (proto-get ctx ':session) None)) [] [:session session])
       ctx)))

;; ** An outcome, written once

(defn _bare-allow [d]
  "The gate's name when the decision D is an allow and nothing more, else None."
  (when (and (= (len d) 4) (= (proto-get d ':verdict) ':allow) (isinstance (proto-get d ':gate) str))
    (proto-get d ':gate)))

(setv _K-ATTEMPTS ':attempts
      _K-DECISIONS ':decisions
      _K-SAME ':same
      _K-USAGE ':usage
      _USAGE-KEYS [':prompt-tokens ':completion-tokens ':cost])

(defn _usage-numbers [usage]
  "The numbers of USAGE when it is (:prompt-tokens P :completion-tokens C :cost X), else None."
  (when (and (isinstance usage list) (= (len usage) 6) (= (cut usage 0 None 2) _USAGE-KEYS))
    (cut usage 1 None 2)))

(defn _sole-attempt [out]
  "The attempts of the outcome OUT when the model was asked once and its
   proposal judged as the outcome says, as compacted."
  [[:attempt 1 :provider (proto-get out ':provider) :verdict (proto-get out ':verdict)
    :gate (proto-get out ':gate) :reason (proto-get out ':reason) :proposed _K-SAME]])

(defn _keep-decisions [store out]
  "The compacted outcome OUT with its list of decisions kept once in STORE
   (inside the caller's transaction) and named by its hash."
  (setv decisions (proto-get out _K-DECISIONS))
  (if (and (isinstance decisions list) decisions)
      (do (setv text (data-print decisions)
                hash (kept-hash text))
          (journal-context store hash text)
          (proto-put out _K-DECISIONS hash))
      out))

(defn outcome-compact [data]
  "The outcome DATA as it is stored: what repeats, written once (see =outcome-data=)."
  (setv action (proto-get data ':action)
        proposed (proto-get data ':proposed)
        out data)
  (when (and (is-not proposed None) (= proposed action))
    (setv out (proto-put out ':proposed ':same)))
  (setv same (if (is proposed None) action proposed)
        decisions (proto-get out ':decisions)
        attempts (proto-get out ':attempts))
  (when decisions
    (setv out (proto-put out ':decisions (lfor d decisions (or (_bare-allow d) d)))))
  (when (and attempts (is-not same None))
    (setv out (proto-put out ':attempts
                         (lfor a attempts
                               (if (= (proto-get a ':proposed) same) (proto-put a ':proposed ':same) a))))
    (when (= (proto-get out _K-ATTEMPTS) (_sole-attempt out))
      (setv out (proto-put out _K-ATTEMPTS _K-SAME))))
  (setv numbers (_usage-numbers (proto-get out _K-USAGE)))
  (when numbers
    (setv out (proto-put out _K-USAGE numbers)))
  out)

(defn outcome-data [data [store None]]
  "The outcome as it was recorded, from DATA as it is stored (=outcome-compact=);
   STORE holds the decisions it names by hash."
  (setv action (proto-get data ':action)
        out data
        kept (proto-get out _K-DECISIONS))
  (when (and (isinstance kept str) (is-not store None))
    (setv rows (.query store "SELECT data FROM contexts WHERE hash = ?" #(kept)))
    (when rows
      (setv out (proto-put out _K-DECISIONS (data-read (get rows 0 0))))))
  (when (= (proto-get out _K-ATTEMPTS) _K-SAME)
    (setv out (proto-put out _K-ATTEMPTS (_sole-attempt out))))
  (setv usage (proto-get out _K-USAGE))
  (when (and (isinstance usage list) (= (len usage) 3) (not (isinstance (get usage 0) Keyword)))
    (setv out (proto-put out _K-USAGE (lfor [k v] (zip _USAGE-KEYS usage) x [k v] x))))
  (when (= (proto-get out ':proposed) ':same)
    (setv out (proto-put out ':proposed action)))
  (setv proposed (proto-get out ':proposed)
        same (if (is proposed None) action proposed)
        decisions (proto-get out ':decisions)
        attempts (proto-get out ':attempts))
  (when (and decisions (not (isinstance decisions str)))
    (setv out (proto-put out ':decisions (lfor d decisions (if (isinstance d str) [:gate d :verdict :allow] d)))))
  (when (and attempts (not (isinstance attempts Keyword)))
    (setv out (proto-put out ':attempts
                         (lfor a attempts
                               (if (= (proto-get a ':proposed) ':same) (proto-put a ':proposed same) a)))))
  out)

;; * Verifying

(defn segment-folder [store]
  "The folder beside STORE's file that holds the journal's segments."
  (/ (. (Path store.path) parent) "journal"))

(defn segments [store]
  "The journal's segments, oldest first, as dicts of their columns."
  (setv names ["id" "file" "first" "last" "rows" "turns" "head" "sha256" "ts_first" "ts_last"])
  (lfor r (.query store (+ "SELECT " (.join ", " names) " FROM segments ORDER BY first"))
        (dict (zip names r))))

(defn segment-read [store seg]
  "The rows of the segment SEG (a dict of =segments=) as tuples in the journal's
   column order, oldest first: every event it holds, turns and plain ones."
  (with [f (lzma.open (/ (segment-folder store) (get seg "file")) "rt" :encoding "utf-8")]
    (for [line f]
      (yield (tuple (json.loads line))))))

(defn journal-rows [store [session None] [since-id 0] [since-ts None]]
  "The turns as row tuples in the journal's column order, oldest first: those
   archived in segments, then those in the events table. A pass that archives
   meanwhile (another process's) takes nothing from under it: the table is read
   in batches, and a batch read after a segment took its rows is read again
   from the segment."
  (setv where ["turn IS NOT NULL"]
        params [])
  (when (is-not session None)
    (.append where "session = ?")
    (.append params session))
  (when (is-not since-ts None)
    (.append where "ts >= ?")
    (.append params since-ts))
  (setv sql (+ "SELECT " read-columns " FROM events WHERE " (.join " AND " where) " AND id > ? ORDER BY id LIMIT 4096")
        cursor since-id)
  (defn wanted [row]
    (and (is-not (get row 5) None)
         (> (get row 0) cursor)
         (or (is session None) (= (get row 3) session))
         (or (is since-ts None) (>= (get row 1) since-ts))))
  (defn archived-past [cursor]
    (lfor seg (segments store) :if (> (get seg "last") cursor) seg))
  (while True
    (for [seg (archived-past cursor)]
      (when (or (is since-ts None) (is (get seg "ts_last") None) (>= (get seg "ts_last") since-ts))
        (yield :from (gfor row (segment-read store seg) :if (wanted row) row)))
      (setv cursor (get seg "last")))
    (setv rows (.query store sql (+ params [cursor])))
    (when (archived-past cursor)
      (continue))
    (when (not rows)
      (break))
    (yield :from rows)
    (setv cursor (get rows -1 0))))

(defn file-sha256 [path]
  "The SHA-256 of the file at PATH, in hex."
  (setv h (hashlib.sha256))
  (with [f (open path "rb")]
    (while (setx chunk (.read f 1048576))
      (.update h chunk)))
  (.hexdigest h))

(defn journal-verify [store]
  "(:ok True :turns N) when the chain holds; else (:ok False :id N :problem P :text T)."
  (setv expected GENESIS
        last None
        n 0)
  (for [seg (segments store)]
    (setv path (/ (segment-folder store) (get seg "file"))
          first (get seg "first")
          end (get seg "last"))
    (when (not (.exists path))
      (return [:ok False :id first :problem "segment missing"
               :text f"the segment {path} of events {first} to {end} is missing"]))
    (when (!= (file-sha256 path) (get seg "sha256"))
      (return [:ok False :id first :problem "segment edited"
               :text f"the segment {path} does not match its hash: it was edited"])))
  (for [row (journal-rows store)]
    (setv id (get row 0)
          prev (get row 13))
    (when (!= (row-hash row) (get row 14))
      (return [:ok False :id id :problem "edited"
               :text f"turn {id} does not match its hash: it was edited (or written by hand)"]))
    (when (!= prev expected)
      (return
        (if (and last (= prev (get last 13)))
            [:ok False :id (get last 0) :problem "inserted"
             :text f"turn {(get last 0)} was inserted: turn {id} links to the turn before it"]
            [:ok False :id id :problem "removed"
             :text (+ f"turn {id} does not link to "
                      (if last f"turn {(get last 0)}" "the start of the journal")
                      ": turns before it were removed"
                      (if last f", or turn {(get last 0)} was rewritten" ""))])))
    (setv expected (get row 14)
          last row
          n (+ n 1)))
  (for [[hash text] (.query store "SELECT hash, data FROM contexts ORDER BY rowid")]
    (when (!= hash (kept-hash text))
      (return [:ok False :id None :problem "context edited"
               :text f"the context {hash} does not match its hash: it was edited"])))
  [:ok True :turns n])

;; * Exporting

(setv _names ["id" "ts" "kind" "session" "content" "type" "clock" "parents" "task"
              "state_before" "state_after" "tokens" "cost" "prev" "hash"])

(defn turn-dict [row]
  "ROW as a dict with the journal's names; parents as a list of ids."
  (setv d (dict (zip _names row)))
  (setv (get d "parents") (lfor p (.split (or (get d "parents") "")) (int p)))
  d)

(defn _org-value [k v]
  (if (= k "parents") (.join " " (map str v)) v))

(defn _org-turn [d]
  (setv session (get d "session"))
  (+ (.format "* {} {}: {}" (get d "id") (get d "type") (get d "kind"))
     (if session (+ " in " session) "") "\n"
     ":PROPERTIES:\n"
     (.join "" (gfor k _names
                     :if (and (not-in k #("id" "content" "type" "kind")) (not-in (get d k) #(None "" [])))
                     (.format ":{}: {}\n" (.upper k) (_org-value k (get d k)))))
     ":END:\n#+begin_src hy\n" (get d "content") "\n#+end_src\n"))

(defn turn-summary [kind content]
  "What the turn of KIND with the plist text CONTENT holds, in a few words."
  (try (setv d (proto-read content))
       (except [ProtoError] (return (_one-line content))))
  (when (not (isinstance d list)) (return (_one-line content)))
  (setv action (proto-get d ':action)
        result (proto-get d ':result)
        text (proto-get d ':text)
        verdict (proto-get d ':verdict)
        event (proto-get d ':event))
  (_one-line
    (cond
      (and event action) f"{event}: {(action-words action)}"
      event (+ (str event) (if (proto-get d ':code) f" {(proto-get d ':code)}" "")
               (if (proto-get d ':answer) f" ({(proto-get d ':answer)})" ""))
      (is-not result None) (+ (if action (+ (action-words action) " → ") "") (status-words result))
      (and verdict action) (+ (. verdict name) ": " (action-words action)
                              (if (proto-get d ':gate) f" ({(proto-get d ':gate)})" ""))
      verdict (+ (. verdict name) (if (proto-get d ':reason) f": {(proto-get d ':reason)}" ""))
      action (action-words action)
      (isinstance text str) f"“{text}”"
      (proto-get d ':kind) (. (proto-get d ':kind) name)
      True content)))

(defn _one-line [text [limit 160]]
  (setv text (.replace (str text) "\n" " ⏎ "))
  (display-text (if (> (len text) limit) (+ (cut text (- limit 1)) "…") text)))

(defn _text-turn [d]
  (.join "  " [(when-words (get d "ts") 0)
               f"{(get d "type")}/{(get d "kind")}"
               (or (get d "session") "-")
               (turn-summary (get d "kind") (get d "content"))]))

(defn journal-export [store [session None] [fmt "jsonl"]]
  "The turns (of SESSION, or all) as lines of text in FMT: text, jsonl or org."
  (for [row (journal-rows store :session session)]
    (setv d (turn-dict row))
    (yield (cond (= fmt "org") (_org-turn d)
                 (= fmt "jsonl") (+ (json.dumps d :ensure-ascii False) "\n")
                 True (+ (_text-turn d) "\n")))))

;; * Replay

(setv _said {"allow" "allowed" "modify" "modified" "reject" "refused" "escalate" "escalated"})

(defn _name-of [v]
  (if (hasattr v "name") v.name (str v)))

(defn journal-replay [store today [since None] [session None] [gates None]]
  "Today's gates over the journal's proposals. TODAY is a context whose
   secrets and runtime handles stand in for the ones never stored; SINCE a
   time (seconds since the epoch); GATES the gates to run (the registry's).
   (:judged N :unjudged M :changes [(:id :session :task :action :then :now
   :gate :reason :was-gate :was-reason) …])."
  (import passepartout.verify [verify])
  (setv changes []
        judged 0
        unjudged 0
        fresh [:secrets (proto-get today ':secrets []) :runtime (proto-get today ':runtime)])
  (for [row (journal-rows store :session session :since-ts since)
        :if (= (get row 2) "outcome")]
    (setv data (outcome-data (data-read (get row 4)) store)
          ctx (context-of store data (get row 3)))
    (for [attempt (or (proto-get data ':attempts) [])]
      (setv proposed (proto-get attempt ':proposed))
      (when (or (is ctx None) (is proposed None))
        (+= unjudged 1)
        (continue))
      (+= judged 1)
      (setv now (verify proposed (+ (list ctx) fresh) :gates gates)
            then-v (_name-of (proto-get attempt ':verdict))
            now-v (_name-of (proto-get now ':verdict)))
      (when (!= then-v now-v)
        (.append changes [:id (get row 0) :session (get row 3) :task (get row 8)
                          :action proposed :then then-v :now now-v
                          :gate (proto-get now ':gate) :reason (proto-get now ':reason)
                          :was-gate (proto-get attempt ':gate) :was-reason (proto-get attempt ':reason)]))))
  [:judged judged :unjudged unjudged :changes changes])

(defn change-text [c]
  "One line that says how the decision C would change."
  (defn said [verdict gate reason]
    (+ (.get _said verdict verdict)
       (if (and gate (!= verdict "allow")) (+ f" by {gate}" (if reason f": {reason}" "")) "")))
  (+ f"turn {(proto-get c ':id)} ({(proto-get c ':session)}, task {(proto-get c ':task)}): "
     (proto-print (proto-get c ':action))
     " was " (said (proto-get c ':then) (proto-get c ':was-gate) (proto-get c ':was-reason))
     ", now " (said (proto-get c ':now) (proto-get c ':gate) (proto-get c ':reason))))
