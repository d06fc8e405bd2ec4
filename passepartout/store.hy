;; * Why

"The daemon keeps a handful of things that must outlive it: the events it saw
and did, small pieces of key-value state, the sessions it has spoken in, the
memory a person asked it to keep, the approvals waiting for a person.
They all live in one SQLite file in the data dir, through the standard
library's sqlite3: one file to back up, one thing to open, and transactions
that span tables when a step needs it."

(import logging os sqlite3 threading
        pathlib [Path])

(setv log (logging.getLogger "passepartout.store"))

;; * The store

(defclass StoreError [Exception]
  "A store file that cannot be opened or used.")

(defclass _Transaction []
  "A store's transaction, for a `with`: the outermost begins and commits it
   (or rolls it back when its body raises), one inside it joins it. A class,
   not a generator: every write of every step enters one."
  (setv __slots__ #("store" "outer"))

  (defn __init__ [self store]
    (setv self.store store
          self.outer False))

  (defn __enter__ [self]
    (setv store self.store)
    (.acquire store.lock)
    (try
      (when (not store.conn.in-transaction)
        (.execute store.conn "BEGIN IMMEDIATE")
        (setv self.outer True))
      (except [BaseException]
        (.release store.lock)
        (raise)))
    store.conn)

  (defn __exit__ [self kind value traceback]
    (setv store self.store)
    (try
      (when self.outer
        (if (is kind None)
            (try
              (.execute store.conn "COMMIT")
              (except [BaseException]
                (self._undo)
                (raise)))
            (self._undo)))
      (finally
        (.release store.lock)))
    False)

  (defn _undo [self]
    ;; also after a failed COMMIT, so no later call joins a dead transaction
    (setv store self.store)
    (when store.conn.in-transaction
      (.execute store.conn "ROLLBACK"))
    (.clear store.memo)))

(defclass Store []
  "One SQLite connection shared by the threads of the daemon, behind one lock;
   and what the modules remember of the file between their writes (memo),
   forgotten whenever a transaction rolls back."

  (defn __init__ [self path conn]
    (setv self.path path
          self.conn conn
          self.lock (threading.RLock)
          self.memo {}
          self.fts False))

  (defn transaction [self]
    "Hold the lock and a write transaction for the body of a `with`: commit
     when it ends, roll back when it raises. The `with` gets the connection."
    (_Transaction self))

  (defn query [self sql [params #()]]
    "Every row that SQL selects, as tuples."
    (with [self.lock]
      (.fetchall (.execute self.conn sql params))))

  (defn write [self sql [params #()]]
    "Run the statement SQL in a transaction of its own; the rowid it inserted."
    (with [conn (.transaction self)]
      (. (.execute conn sql params) lastrowid)))

  (defn close [self]
    (with [self.lock]
      (.close self.conn)))

  (defn __enter__ [self] self)

  (defn __exit__ [self #* exc]
    (.close self)
    False))

;; * The schema

(setv _schema
  [;; 1: events, key-value state, sessions, memory
   ["CREATE TABLE IF NOT EXISTS events (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       ts REAL NOT NULL,
       kind TEXT NOT NULL,
       session TEXT,
       data TEXT NOT NULL)"
    "CREATE INDEX IF NOT EXISTS events_kind ON events (kind, id)"
    "CREATE INDEX IF NOT EXISTS events_session ON events (session, id)"
    "CREATE TABLE IF NOT EXISTS kv (
       key TEXT PRIMARY KEY,
       value TEXT NOT NULL)"
    "CREATE TABLE IF NOT EXISTS sessions (
       name TEXT PRIMARY KEY,
       gateway TEXT,
       created REAL NOT NULL,
       last_seen REAL NOT NULL)"
    "CREATE TABLE IF NOT EXISTS memory (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       ts REAL NOT NULL,
       session TEXT,
       text TEXT NOT NULL)"]
   ;; 2: approvals, their answers, grants
   ["CREATE TABLE IF NOT EXISTS approvals (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       code TEXT NOT NULL,
       token_hash TEXT NOT NULL UNIQUE,
       state TEXT NOT NULL,
       session TEXT NOT NULL,
       requester TEXT NOT NULL,
       source TEXT NOT NULL,
       action TEXT NOT NULL,
       action_hash TEXT NOT NULL,
       reason TEXT,
       decisions TEXT NOT NULL,
       binding TEXT NOT NULL,
       task TEXT NOT NULL,
       created REAL NOT NULL,
       expires REAL NOT NULL,
       decided REAL,
       decided_by TEXT,
       finished REAL,
       note TEXT,
       executor TEXT,
       result TEXT)"
    "CREATE UNIQUE INDEX IF NOT EXISTS approvals_pending_code ON approvals (code) WHERE state = 'pending'"
    "CREATE INDEX IF NOT EXISTS approvals_state ON approvals (state, expires)"
    "CREATE INDEX IF NOT EXISTS approvals_code ON approvals (code, id)"
    "CREATE INDEX IF NOT EXISTS approvals_session ON approvals (session, state)"
    "CREATE TABLE IF NOT EXISTS answers (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       approval INTEGER NOT NULL REFERENCES approvals (id),
       ts REAL NOT NULL,
       who TEXT NOT NULL,
       session TEXT,
       answer TEXT NOT NULL,
       reason TEXT,
       minutes REAL,
       UNIQUE (approval, who))"
    "CREATE TABLE IF NOT EXISTS grants (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       session TEXT NOT NULL,
       scope TEXT NOT NULL,
       policy TEXT NOT NULL,
       created REAL NOT NULL,
       expires REAL NOT NULL,
       created_by TEXT NOT NULL,
       approval INTEGER REFERENCES approvals (id),
       revoked REAL,
       revoked_by TEXT)"
    "CREATE INDEX IF NOT EXISTS grants_session ON grants (session, expires)"]
   ;; 3: the inbox of signals the gateways received (see =mailbox.org=)
   ["CREATE TABLE IF NOT EXISTS inbox (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       gateway TEXT NOT NULL,
       key TEXT NOT NULL,
       signal TEXT NOT NULL,
       state TEXT NOT NULL CHECK (state IN ('pending', 'done')),
       created REAL NOT NULL,
       done REAL,
       UNIQUE (gateway, key))"
    "CREATE INDEX IF NOT EXISTS inbox_state ON inbox (state, id)"]
   ;; 4: notices waiting for the daemon to deliver (see =mailbox.org=)
   ["CREATE TABLE IF NOT EXISTS notices (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       created REAL NOT NULL,
       session TEXT NOT NULL,
       signal TEXT NOT NULL,
       delivered REAL)"
    "CREATE INDEX IF NOT EXISTS notices_waiting ON notices (delivered, id)"]
   ;; 5: the outbox of replies on their way (see =mailbox.org=)
   ["CREATE TABLE IF NOT EXISTS outbox (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       gateway TEXT NOT NULL,
       session TEXT,
       reply TEXT NOT NULL,
       state TEXT NOT NULL CHECK (state IN ('pending', 'sent', 'expired', 'told')),
       created REAL NOT NULL,
       attempts INTEGER NOT NULL DEFAULT 0,
       next_try REAL NOT NULL,
       done REAL)"
    "CREATE INDEX IF NOT EXISTS outbox_state ON outbox (state, id)"
    "CREATE INDEX IF NOT EXISTS outbox_session ON outbox (session, state, id)"]
   ;; 6: events become the journal's turns, append-only (see =journal.org=)
   ["ALTER TABLE events ADD COLUMN turn TEXT"
    "ALTER TABLE events ADD COLUMN clock INTEGER"
    "ALTER TABLE events ADD COLUMN parents TEXT"
    "ALTER TABLE events ADD COLUMN task TEXT"
    "ALTER TABLE events ADD COLUMN state_before TEXT"
    "ALTER TABLE events ADD COLUMN state_after TEXT"
    "ALTER TABLE events ADD COLUMN tokens INTEGER"
    "ALTER TABLE events ADD COLUMN cost REAL"
    "ALTER TABLE events ADD COLUMN prev TEXT"
    "ALTER TABLE events ADD COLUMN hash TEXT"
    "CREATE INDEX IF NOT EXISTS events_turns ON events (id) WHERE turn IS NOT NULL"
    "CREATE INDEX IF NOT EXISTS events_task ON events (task, id) WHERE task IS NOT NULL"
    "CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events BEGIN
       SELECT RAISE (ABORT, 'the journal is append-only: an event is never changed');
     END"
    "CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events BEGIN
       SELECT RAISE (ABORT, 'the journal is append-only: an event is never deleted');
     END"]
   ;; 7: the contexts proposals were judged in, each kept once (see =journal.org=)
   ["CREATE TABLE IF NOT EXISTS contexts (
       hash TEXT PRIMARY KEY,
       data TEXT NOT NULL)"
    "CREATE TRIGGER IF NOT EXISTS contexts_no_update BEFORE UPDATE ON contexts BEGIN
       SELECT RAISE (ABORT, 'a context is kept as it was judged in: it is never changed');
     END"
    "CREATE TRIGGER IF NOT EXISTS contexts_no_delete BEFORE DELETE ON contexts BEGIN
       SELECT RAISE (ABORT, 'a context is kept as it was judged in: it is never deleted');
     END"]
   ;; 8: the hosts an answer asked to grant (see =grants.org=)
   ["ALTER TABLE answers ADD COLUMN hosts TEXT"]
   ;; 9: background work: workflows and their workers (see =workflow.org=)
   ["CREATE TABLE IF NOT EXISTS workflows (
       id TEXT PRIMARY KEY,
       title TEXT NOT NULL,
       session TEXT NOT NULL,
       task TEXT NOT NULL,
       depth INTEGER NOT NULL,
       state TEXT NOT NULL CHECK (state IN ('running', 'done', 'failed', 'stopped')),
       resume TEXT,
       created REAL NOT NULL,
       finished REAL)"
    "CREATE INDEX IF NOT EXISTS workflows_session ON workflows (session, state)"
    "CREATE INDEX IF NOT EXISTS workflows_state ON workflows (state)"
    "CREATE TABLE IF NOT EXISTS workers (
       id TEXT PRIMARY KEY,
       workflow TEXT NOT NULL REFERENCES workflows (id),
       step TEXT NOT NULL,
       objective TEXT NOT NULL,
       depends_on TEXT NOT NULL,
       not_before REAL,
       tools TEXT,
       mode TEXT NOT NULL,
       depth INTEGER NOT NULL,
       state TEXT NOT NULL CHECK (state IN ('waiting', 'running', 'done', 'failed', 'stopped', 'cut-off')),
       result TEXT,
       tool_calls INTEGER NOT NULL DEFAULT 0,
       tokens INTEGER NOT NULL DEFAULT 0,
       cost REAL NOT NULL DEFAULT 0,
       continuations INTEGER NOT NULL DEFAULT 0,
       checks TEXT,
       created REAL NOT NULL,
       started REAL,
       finished REAL)"
    "CREATE INDEX IF NOT EXISTS workers_workflow ON workers (workflow, id)"
    "CREATE INDEX IF NOT EXISTS workers_state ON workers (state)"]
   ;; 10: the agenda: goals the person or the model keeps (see =agenda.org=)
   ["CREATE TABLE IF NOT EXISTS agenda (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       text TEXT NOT NULL,
       state TEXT NOT NULL CHECK (state IN ('open', 'done', 'dropped')),
       created REAL NOT NULL,
       updated REAL NOT NULL,
       added_by TEXT NOT NULL CHECK (added_by IN ('person', 'model')),
       who TEXT,
       session TEXT,
       task TEXT,
       reason TEXT,
       closed_by TEXT)"
    "CREATE INDEX IF NOT EXISTS agenda_state ON agenda (state, id)"]
   ;; 11: memory by meaning: each note's vector, the vectors of texts by their
   ;; hash, and the mark dreaming puts on a stale note (see =memory.org=)
   ["CREATE TABLE IF NOT EXISTS memory_vectors (
       memory INTEGER PRIMARY KEY,
       model TEXT NOT NULL,
       vector BLOB NOT NULL)"
    "CREATE TABLE IF NOT EXISTS embeddings (
       hash TEXT NOT NULL,
       model TEXT NOT NULL,
       vector BLOB NOT NULL,
       PRIMARY KEY (hash, model))"
    "CREATE TRIGGER IF NOT EXISTS memory_vectors_delete AFTER DELETE ON memory BEGIN
       DELETE FROM memory_vectors WHERE memory = old.id;
     END"
    "CREATE TRIGGER IF NOT EXISTS memory_vectors_update AFTER UPDATE OF text ON memory BEGIN
       DELETE FROM memory_vectors WHERE memory = old.id;
     END"
    "ALTER TABLE memory ADD COLUMN stale REAL"]
   ;; 12: routines and their runs, one row per routine and due time (see =routines.org=)
   ["CREATE TABLE IF NOT EXISTS routines (
       id TEXT PRIMARY KEY,
       session TEXT NOT NULL,
       source TEXT NOT NULL,
       kind TEXT NOT NULL CHECK (kind IN ('cron', 'every', 'at')),
       spec TEXT NOT NULL,
       objective TEXT,
       say TEXT,
       quiet INTEGER NOT NULL DEFAULT 0,
       catch_up TEXT NOT NULL CHECK (catch_up IN ('once', 'skip')),
       until REAL,
       tz TEXT NOT NULL,
       state TEXT NOT NULL CHECK (state IN ('active', 'paused', 'done', 'deleted')),
       next_due REAL,
       anchor REAL NOT NULL,
       created REAL NOT NULL,
       runs INTEGER NOT NULL DEFAULT 0)"
    "CREATE INDEX IF NOT EXISTS routines_due ON routines (state, next_due)"
    "CREATE INDEX IF NOT EXISTS routines_session ON routines (session, state)"
    "CREATE TABLE IF NOT EXISTS routine_runs (
       routine TEXT NOT NULL REFERENCES routines (id),
       due REAL NOT NULL,
       state TEXT NOT NULL CHECK (state IN ('claimed', 'running', 'said', 'done', 'failed', 'skipped')),
       workflow TEXT,
       claimed REAL NOT NULL,
       finished REAL,
       result TEXT,
       PRIMARY KEY (routine, due))"
    "CREATE INDEX IF NOT EXISTS routine_runs_workflow ON routine_runs (workflow)"]
   ;; 13: the journal's archived segments; an event is deleted once archived (see =archive.org=)
   ["CREATE TABLE IF NOT EXISTS segments (
       id INTEGER PRIMARY KEY AUTOINCREMENT,
       file TEXT NOT NULL UNIQUE,
       first INTEGER NOT NULL,
       last INTEGER NOT NULL,
       rows INTEGER NOT NULL,
       turns INTEGER NOT NULL,
       head TEXT NOT NULL,
       sha256 TEXT NOT NULL,
       ts_first REAL,
       ts_last REAL,
       made REAL NOT NULL)"
    "CREATE TABLE IF NOT EXISTS archived_sessions (
       session TEXT PRIMARY KEY,
       id INTEGER NOT NULL,
       clock INTEGER,
       state_after TEXT)"
    "CREATE TRIGGER IF NOT EXISTS segments_no_update BEFORE UPDATE ON segments BEGIN
       SELECT RAISE (ABORT, 'a segment of the journal is never changed');
     END"
    "CREATE TRIGGER IF NOT EXISTS segments_no_delete BEFORE DELETE ON segments BEGIN
       SELECT RAISE (ABORT, 'a segment of the journal is never deleted');
     END"
    "DROP INDEX IF EXISTS events_turns"
    "DROP TRIGGER IF EXISTS events_no_delete"
    "CREATE TRIGGER events_no_delete BEFORE DELETE ON events
     WHEN OLD.id > (SELECT COALESCE(MAX(last), 0) FROM segments) BEGIN
       SELECT RAISE (ABORT, 'the journal is append-only: an event is deleted only once archived');
     END"]
   ;; 14: each model's circuit breaker, so the next process does not wait again (see =cascade.org=)
   ["CREATE TABLE IF NOT EXISTS breakers (
       provider TEXT PRIMARY KEY,
       failures INTEGER NOT NULL,
       opened_at REAL,
       incident TEXT,
       clause TEXT,
       updated REAL NOT NULL)"]
   ;; 15: an inbox row's next step apart from the message it received (see =mailbox.org=)
   ["CREATE TABLE IF NOT EXISTS inbox_next (
       inbox INTEGER PRIMARY KEY REFERENCES inbox (id),
       signal TEXT NOT NULL)"]])

(setv SCHEMA-VERSION (len _schema))

(defn _user-version [conn]
  (get (.fetchone (.execute conn "PRAGMA user_version")) 0))

(defn _migrate [store]
  "Bring the file of STORE up to SCHEMA-VERSION."
  (when (= (_user-version store.conn) SCHEMA-VERSION)
    (return))
  (with [conn (.transaction store)]
    (setv version (_user-version conn))
    (when (> version SCHEMA-VERSION)
      ;; checked at open too; here for a newer program that upgraded the file since
      (raise (_newer-error store.path version)))
    (for [[i step] (enumerate (cut _schema version None) version)]
      (if (callable step)
          (step conn)
          (for [sql step] (.execute conn sql)))
      (.execute conn f"PRAGMA user_version = {(+ i 1)}"))))

(setv _fts-schema
  ["CREATE VIRTUAL TABLE memory_fts USING fts5(
      text, content='memory', content_rowid='id',
      tokenize='unicode61 remove_diacritics 2')"
   "CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory BEGIN
      INSERT INTO memory_fts (rowid, text) VALUES (new.id, new.text);
    END"
   "CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory BEGIN
      INSERT INTO memory_fts (memory_fts, rowid, text) VALUES ('delete', old.id, old.text);
    END"
   "CREATE TRIGGER memory_fts_update AFTER UPDATE OF text ON memory BEGIN
      INSERT INTO memory_fts (memory_fts, rowid, text) VALUES ('delete', old.id, old.text);
      INSERT INTO memory_fts (rowid, text) VALUES (new.id, new.text);
    END"
   "INSERT INTO memory_fts (memory_fts) VALUES ('rebuild')"])

(setv _fts-exists "SELECT 1 FROM sqlite_master WHERE name = 'memory_fts'")

(defn _ensure-fts [store]
  "True when the memory of STORE has a working full-text index."
  (try
    (if (.query store _fts-exists)
        (.query store "SELECT rowid FROM memory_fts WHERE 0")
        (with [conn (.transaction store)]
          ;; another process may have built it since the look above
          (when (not (.fetchone (.execute conn _fts-exists)))
            (for [sql _fts-schema] (.execute conn sql)))))
    True
    (except [e sqlite3.OperationalError]
      (if (in "fts5" (str e)) False (raise)))))

;; * Opening

;; ** A store that checks itself

(defn store-path-for [data-dir]
  "The store file inside DATA-DIR."
  (/ (Path data-dir) "passepartout.sqlite3"))

(setv _afresh "or move the file away to start with an empty store")

(defn _newer-error [path version]
  (StoreError (+ f"{path}: schema version {version} is newer than this program knows "
                 f"({SCHEMA-VERSION}); run the newer Passepartout that wrote it, "
                 "or restore a backup made by this one")))

(defn _damaged [path detail]
  (StoreError (+ f"{path}: the store is damaged ({detail}); stop what uses it, then restore "
                 "a backup, or rescue what it holds with "
                 f"`sqlite3 {path} .recover | sqlite3 NEW` and put NEW in its place")))

(defn store-unwell [e]
  "True when E is the store failing to write for a reason that may pass."
  (and (isinstance e sqlite3.OperationalError)
       (.startswith (or (getattr e "sqlite_errorname" None) "")
                    #("SQLITE_FULL" "SQLITE_BUSY" "SQLITE_LOCKED" "SQLITE_IOERR"))))

(defn _explained [path e]
  "The one-line StoreError for the SQLite or OS error E met opening PATH."
  (setv code (or (getattr e "sqlite_errorname" None) ""))
  (cond
    (isinstance e OSError)
    (StoreError (+ f"{path}: the store cannot be opened ({(or e.strerror e)}); "
                   "check that the data dir is yours, writable and not full"))
    (.startswith code "SQLITE_NOTADB")
    (StoreError f"{path}: not an SQLite database, so not a store; restore a backup, {_afresh}")
    (.startswith code "SQLITE_CORRUPT")
    (_damaged path e)
    (or (.startswith code "SQLITE_BUSY") (.startswith code "SQLITE_LOCKED"))
    (StoreError f"{path}: another process holds the store locked ({e}); wait for it, or stop it")
    True
    (StoreError f"{path}: the store cannot be used ({e})")))

(defn _used [folder path [besides #()]]
  "True when FOLDER holds something besides the file PATH, the entries named
   in BESIDES and empty folders."
  (try
    (for [p (.iterdir folder)]
      (when (and (!= p.name path.name)
                 (not (in p.name besides))
                 (or (.is-symlink p) (not (.is-dir p)) (any (.iterdir p))))
        (return True)))
    False
    (except [OSError] True)))

(defn _check-file [conn path]
  "Refuse the file at PATH, open on CONN, unless it is new, or a store of a
   schema this program knows whose pages check out. Writes nothing."
  (setv tables (lfor [n] (.fetchall (.execute conn "SELECT name FROM sqlite_master
                                                   WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"))
                     n)
        version (_user-version conn))
  (when (and (not tables) (= version 0))
    (return))
  (when (not (in "events" tables))
    (raise (StoreError (+ f"{path}: an SQLite database, but not a Passepartout store ("
                          (if tables (+ "its tables: " (.join ", " (cut (sorted tables) 6))) "no tables")
                          (if (> (len tables) 6) ", …" "")
                          f"); point data_dir elsewhere, {_afresh}"))))
  (when (> version SCHEMA-VERSION)
    (raise (_newer-error path version)))
  (setv found (lfor [r] (.fetchall (.execute conn "PRAGMA quick_check")) r))
  (when (!= found ["ok"])
    (raise (_damaged path (+ "quick_check: "
                             (cut (.join " " (.split (.replace (get found 0) "*** in database main ***" "")))
                                  200)
                             (if (> (len found) 1) f", and {(- (len found) 1)} more" ""))))))

(defn store-open [path [fts True]]
  "The Store kept in the SQLite file at PATH, created with its schema when new;
   a StoreError, with one line that says what to do, for a file that is not a
   sound store. With FTS false, memory search uses LIKE even where SQLite has FTS5."
  (setv path (Path path))
  (try
    (.mkdir path.parent :parents True :exist-ok True :mode 0o700)
    (when (and (.is-file path) (= (. (.stat path) st-size) 0) (_used path.parent path))
      (raise (StoreError (+ f"{path}: the store is empty (0 bytes), yet {path.parent} has been used, "
                            "so its history, memory and approvals are not in it; restore a backup "
                            "(see passepartout backup), or delete the empty file to start afresh"))))
    (when (and (not (.exists path))
               (_used path.parent path #("logs" "run")))
      (.warning log (+ f"{path}: there is no store, yet {path.parent} has been used; a new, empty one is made. "
                       "If the old one was lost, stop and restore a backup (see passepartout backup)")))
    (os.close (os.open path (| os.O-RDWR os.O-CREAT) 0o600))
    (setv conn (sqlite3.connect (str path) :timeout 5.0 :isolation-level None
                                :check-same-thread False))
    (except [e #(OSError sqlite3.Error)]
      (raise (_explained path e) :from e)))
  (try
    (.execute conn "PRAGMA busy_timeout = 5000")
    (_check-file conn path)
    (setv mode (get (.fetchone (.execute conn "PRAGMA journal_mode = WAL")) 0))
    (when (!= (.lower mode) "wal")
      (raise (StoreError f"{path}: the file cannot use WAL journaling (got {mode})")))
    (.execute conn "PRAGMA synchronous = NORMAL")
    (.execute conn "PRAGMA foreign_keys = ON")
    (setv store (Store path conn))
    (_migrate store)
    (setv store.fts (and fts (_ensure-fts store)))
    store
    (except [e #(sqlite3.Error OSError)]
      (.close conn)
      (raise (_explained path e) :from e))
    (except [BaseException]
      (.close conn)
      (raise))))

(defn store-close [store]
  "Close STORE; its connection cannot be used after this."
  (.close store))
