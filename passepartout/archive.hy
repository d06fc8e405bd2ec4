;; * Why

"The journal is append-only, and a busy daemon writes a few kilobytes a
message: left alone, the store grows by most of a gigabyte a year, and every
query, backup and quick_check pays for turns nobody will read again except
to audit them. Archiving moves the events older than a configured age out of
the live table into compressed segment files beside the store, and keeps
what the journal needs to stay one journal: the hash of the last turn
archived (the chain goes on from it), the hash of each segment's bytes, and
each session's last turn. journal verify, journal export and replay
read through the segments first and the live table after (journal.org), so
an archived turn is still verified, exported and judged again; it is only no
longer in SQL's reach."

(import asyncio fcntl hashlib json logging lzma os re time
        pathlib [Path]
        passepartout.proto [proto-get]
        passepartout.journal [GENESIS segment-folder file-sha256 read-columns]
        passepartout.records [kv-get kv-put])

(setv log (logging.getLogger "passepartout.archive"))

;; * The age

(setv DEFAULT-AGE "30d"
      PASS-EVERY 86400
      POLL 600
      SEGMENT-ROWS 50000
      LAST-PASS-KEY "journal:last-archive"
      _units {"s" 1 "m" 60 "min" 60 "h" 3600 "hour" 3600 "hours" 3600
              "d" 86400 "day" 86400 "days" 86400 "w" 604800 "week" 604800 "weeks" 604800}
      _age-re (re.compile r"^(\d+(?:\.\d+)?)\s*([a-z]+)$"))

(defn archive-age [text]
  "The seconds TEXT asks turns to age before they are archived; None for off.
   A ValueError for text that is neither.
   (archive-age \"30d\") ⇒ 2592000.0"
  (setv t (.lower (.strip (str (if (is text None) "" text)))))
  (when (in t #("" "off" "no" "none" "false" "never"))
    (return None))
  (setv m (.match _age-re t))
  (when (or (not m) (not-in (.group m 2) _units))
    (raise (ValueError f"[journal] archive_after: {text !r} is no age; write one such as \"30d\", \"2 weeks\" or \"12h\", or \"off\"")))
  (* (float (.group m 1)) (get _units (.group m 2))))

(defn configured-age [config]
  "The archive age of CONFIG's [journal] section, in seconds, or None."
  (archive-age (.get (.get config "journal" {}) "archive_after" DEFAULT-AGE)))

;; * Writing a segment

(setv _select (+ "SELECT " read-columns " FROM events WHERE id >= ? AND id <= ? ORDER BY id")
      _encode (. (json.JSONEncoder :ensure-ascii False :separators #("," ":")) encode))

(defn _fsync [path [folder False]]
  (setv fd (os.open path (if folder os.O-RDONLY os.O-RDWR)))
  (try (os.fsync fd) (finally (os.close fd))))

(defn _batch [store before limit]
  "#(first last) of the next events to archive: the oldest, up to LIMIT, all
   older than BEFORE with nothing younger before them; None when there are none."
  (setv [[first stop]] (.query store "SELECT MIN(id), (SELECT MIN(id) FROM events WHERE ts >= ?) FROM events"
                               #(before)))
  (when (or (is first None) (and (is-not stop None) (<= stop first)))
    (return None))
  (setv [[last]] (.query store "SELECT MAX(id) FROM (SELECT id FROM events WHERE id < ? ORDER BY id LIMIT ?)"
                         #((if (is stop None) (** 2 62) stop) limit)))
  #(first last))

(defn _clear-orphans [folder known]
  "Remove the files in FOLDER that no recorded segment names (KNOWN): what a
   pass killed before it recorded its segment left."
  (for [p (.glob folder "events-*")]
    (when (not-in p.name known)
      (.unlink p :missing-ok True))))

(defn _write-segment [store folder first last]
  "Write the events FIRST..LAST of STORE into a segment file; a dict of what
   it holds (name, rows, turns, head, sha256, ts range, sessions' last turns)."
  (setv name f"events-{first :012d}-{last :012d}.jsonl.xz"
        part (/ folder (+ name ".part"))
        head None
        n 0
        turns 0
        ts-first None
        ts-last None
        sessions {})
  (with [raw (open part "wb" :opener (fn [p flags] (os.open p flags 0o600)))
         f (lzma.open raw "wt" :encoding "utf-8" :preset 6)]
    (setv at first)
    (while (<= at last)
      (setv rows (.query store _select #(at (min last (+ at 4095)))))
      (setv at (+ (min last (+ at 4095)) 1))
      (for [row rows]
        (.write f (_encode row))
        (.write f "\n")
        (+= n 1)
        (when (is ts-first None) (setv ts-first (get row 1)))
        (setv ts-last (get row 1))
        (when (is-not (get row 5) None)
          (+= turns 1)
          (setv head (get row 14))
          (when (is-not (get row 3) None)
            (setv (get sessions (get row 3)) #((get row 0) (get row 6) (get row 10))))))))
  (_fsync part)
  (os.rename part (/ folder name))
  (_fsync folder :folder True)
  {"file" name "rows" n "turns" turns "head" head "sha256" (file-sha256 (/ folder name))
   "ts_first" ts-first "ts_last" ts-last "sessions" sessions})

(defn _record [store seg first last now]
  "Record the written segment SEG and delete its events, in one transaction;
   False (and nothing changed) when the events are no longer those it holds."
  (with [conn (.transaction store)]
    (setv [count] (.fetchone (.execute conn "SELECT COUNT(*) FROM events WHERE id >= ? AND id <= ?"
                                       #(first last)))
          [done] (.fetchone (.execute conn "SELECT COALESCE(MAX(last), 0) FROM segments" #())))
    (when (or (!= count (get seg "rows")) (>= done first))
      (return False))
    (setv head (or (get seg "head")
                   (get (or (.fetchone (.execute conn "SELECT head FROM segments ORDER BY last DESC LIMIT 1" #()))
                            #(GENESIS))
                        0)))
    (.execute conn "INSERT INTO segments (file, first, last, rows, turns, head, sha256, ts_first, ts_last, made)
                    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
              #((get seg "file") first last (get seg "rows") (get seg "turns") head (get seg "sha256")
                (get seg "ts_first") (get seg "ts_last") now))
    (for [[session [id clock after]] (.items (get seg "sessions"))]
      (.execute conn "INSERT OR REPLACE INTO archived_sessions (session, id, clock, state_after) VALUES (?, ?, ?, ?)"
                #(session id clock after)))
    (.execute conn "DELETE FROM events WHERE id >= ? AND id <= ?" #(first last)))
  True)

;; * Giving the space back

(defn store-shrink [store]
  "Give STORE's free pages back to the disk; True when it could."
  (import sqlite3)
  (try
    (with [_ store.lock]
      (when (!= (get (.fetchone (.execute store.conn "PRAGMA auto_vacuum")) 0) 2)
        (.execute store.conn "PRAGMA auto_vacuum = INCREMENTAL")
        (.execute store.conn "VACUUM"))
      ;; run to its end by executescript: each step of the pragma frees one page
      (.executescript store.conn "PRAGMA incremental_vacuum;")
      (.fetchall (.execute store.conn "PRAGMA wal_checkpoint(TRUNCATE)")))
    True
    (except [e sqlite3.OperationalError]
      (.warning log "the store could not give its free space back now: %s" e)
      False)))

;; * A pass

(defn archive-journal [store before [now None] [limit SEGMENT-ROWS] [shrink True]]
  "Move STORE's events older than BEFORE (seconds since the epoch) into
   segments. (:segments N :rows M :turns T :bytes B): what was archived and
   the segment files' size."
  (setv folder (segment-folder store)
        now (if (is now None) (time.time) now)
        made 0 rows 0 turns 0 size 0)
  (when (and (not (.exists folder)) (is (_batch store before limit) None))
    (return [:segments 0 :rows 0 :turns 0 :bytes 0]))
  (.mkdir folder :parents True :exist-ok True :mode 0o700)
  (with [lock (open (/ folder ".lock") "a")]
    (fcntl.flock lock fcntl.LOCK-EX)
    (_clear-orphans folder (sfor [r] (.query store "SELECT file FROM segments") r))
    (while (setx span (_batch store before limit))
      (setv [first last] span
            seg (_write-segment store folder first last))
      (when (not (_record store seg first last now))
        (.unlink (/ folder (get seg "file")) :missing-ok True)
        (break))
      (+= made 1)
      (+= rows (get seg "rows"))
      (+= turns (get seg "turns"))
      (+= size (. (.stat (/ folder (get seg "file"))) st-size))))
  (when (and made shrink)
    (store-shrink store))
  [:segments made :rows rows :turns turns :bytes size])

(defn archive-text [r]
  "One line that says what the pass R archived."
  (if (proto-get r ':segments)
      (+ f"archived {(proto-get r ':turns)} turns ({(proto-get r ':rows)} events) into "
         f"{(proto-get r ':segments)} segment(s) of {(proto-get r ':bytes)} bytes")
      "nothing is old enough to archive"))

;; * In the daemon

(defn archive-due [services]
  "Whether a pass is due at the services' clock."
  (setv last (kv-get services.store LAST-PASS-KEY))
  (or (is last None) (>= (services.clock) (+ (float last) PASS-EVERY))))

(defn archive-pass [services age]
  "Archive what is older than AGE seconds when a pass is due; its result, or None."
  (when (not (archive-due services))
    (return None))
  (setv now (services.clock))
  (kv-put services.store LAST-PASS-KEY now)
  (setv r (archive-journal services.store (- now age) :now now))
  (when (proto-get r ':segments)
    (.info log "%s" (archive-text r)))
  r)

(defn :async archive-service [env hub]
  "Archive the journal of the daemon ENV once a day while it runs, unless
   [journal] archive_after is off."
  (try (setv age (configured-age env.config))
       (except [e ValueError]
         (.error log "%s; the journal is not archived" e)
         (return)))
  (when (is age None) (return))
  (while True
    (try (await (asyncio.to-thread archive-pass env age))
         (except [asyncio.CancelledError] (raise))
         (except [e Exception] (.error log "the journal could not be archived: %s" e)))
    (await (asyncio.sleep POLL))))
