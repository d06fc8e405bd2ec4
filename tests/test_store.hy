;; Tests of passepartout/store.hy: one SQLite file, WAL, shared by threads and processes.

(import os sqlite3 stat subprocess sys threading
        pathlib [Path]
        pytest
        passepartout.proto [proto-get proto-read proto-print ProtoError]
        passepartout.store [store-open store-close store-path-for Store StoreError SCHEMA-VERSION]
        passepartout.records [event-append events kv-get kv-put kv-delete session-touch session-list MAX-DATA-BYTES]
        passepartout.mailbox [inbox-done inbox-pending]
        steps [expect :as check open-store])

;; * Opening

(defn test-store-path-is-in-the-data-dir [tmp-path]
  (check (store-path-for tmp-path) (/ tmp-path "passepartout.sqlite3")))

(defn test-open-creates-parent-folders-and-a-private-file [tmp-path]
  (setv path (/ tmp-path "a" "b" "store.sqlite3"))
  (with [store (store-open path)]
    (assert (isinstance store Store))
    (check (stat.S-IMODE (. (os.stat path) st-mode)) 0o600 "file mode")
    (check (stat.S-IMODE (. (os.stat (/ tmp-path "a" "b")) st-mode)) 0o700 "folder mode")
    (for [suffix ["-wal" "-shm"]]
      (setv side (Path (+ (str path) suffix)))
      (assert (.exists side) f"{side} missing")
      (check (stat.S-IMODE (. (os.stat side) st-mode)) 0o600 f"{suffix} mode"))))

(defn test-pragmas-are-set [tmp-path]
  (with [store (open-store tmp-path)]
    (check (get (.query store "PRAGMA journal_mode") 0 0) "wal" "journal_mode")
    ;; synchronous: 1 is NORMAL; what is promised to the outside is forced to
    ;; the disk by the writer's durable
    (check (get (.query store "PRAGMA synchronous") 0 0) 1 "synchronous")
    (check (get (.query store "PRAGMA foreign_keys") 0 0) 1 "foreign_keys")
    (check (get (.query store "PRAGMA busy_timeout") 0 0) 5000 "busy_timeout")
    (check (get (.query store "PRAGMA user_version") 0 0) SCHEMA-VERSION "user_version")))

(defn test-wal-persists-in-the-file [tmp-path]
  (setv path (store-path-for tmp-path))
  (store-close (store-open path))
  (setv conn (sqlite3.connect (str path)))
  (check (get (.fetchone (.execute conn "PRAGMA journal_mode")) 0) "wal")
  (.close conn))

(defn test-tables-exist-and-opening-again-is-harmless [tmp-path]
  (setv path (store-path-for tmp-path))
  (with [store (store-open path)]
    (event-append store "a" None [:n 1]))
  (with [store (store-open path)]
    (setv names (sfor [n] (.query store "SELECT name FROM sqlite_master WHERE type = 'table'") n))
    (for [t ["events" "kv" "sessions" "memory"]]
      (assert (in t names) f"table {t} missing from {names}"))
    (check (len (events store)) 1 "events after reopening")))

(defn refusal [path #* needles]
  "Check that opening PATH raises a StoreError whose message is one line that
   names PATH and holds every one of NEEDLES."
  (with [e (pytest.raises StoreError)]
    (store-open path))
  (setv text (str e.value))
  (assert (not (in "\n" text)) f"one line: {text !r}")
  (assert (.startswith text (str path)) f"names the file first: {text !r}")
  (for [n needles]
    (assert (in n text) f"{n !r} missing from {text !r}")))

(defn test-a-newer-schema-is-refused [tmp-path]
  (setv path (store-path-for tmp-path))
  (store-close (store-open path))
  (setv conn (sqlite3.connect (str path)))
  (.execute conn f"PRAGMA user_version = {(+ SCHEMA-VERSION 1)}")
  (.close conn)
  (refusal path f"schema version {(+ SCHEMA-VERSION 1)} is newer" f"({SCHEMA-VERSION})"
           "newer Passepartout" "backup"))

(defn test-a-file-that-is-not-a-database-is-refused-and-left-alone [tmp-path]
  (setv path (/ tmp-path "junk.sqlite3")
        junk (* b"not a database at all " 1000))
  (.write-bytes path junk)
  (refusal path "not an SQLite database" "backup" "move the file away")
  (check (.read-bytes path) junk "the file is not touched"))

(defn test-another-programs-database-is-refused-and-left-alone [tmp-path]
  (setv path (store-path-for tmp-path)
        conn (sqlite3.connect (str path)))
  (.execute conn "CREATE TABLE contacts (name TEXT)")
  (.execute conn "INSERT INTO contacts VALUES ('Ada')")
  (.commit conn)
  (.close conn)
  (setv before (.read-bytes path))
  (refusal path "not a Passepartout store" "contacts" "data_dir")
  (check (.read-bytes path) before "the file is not touched (not even switched to WAL)"))

(defn test-an-empty-file-in-a-used-data-dir-is-refused [tmp-path]
  (setv data (/ tmp-path "data")
        path (store-path-for data))
  (.mkdir (/ data "logs") :parents True)
  (.write-text (/ data "logs" "daemon.log") "started\n")
  (.touch path)
  (refusal path "empty (0 bytes)" (str data) "restore a backup" "passepartout backup")
  (check (. (os.stat path) st-size) 0 "the empty file is left as it was"))

(defn test-an-empty-file-in-a-fresh-data-dir-becomes-a-store [tmp-path]
  ;; a start killed before the file had its header leaves this; empty folders
  ;; (the workspace boot makes) are no sign of use
  (setv data (/ tmp-path "data")
        path (store-path-for data))
  (.mkdir (/ data "workspace") :parents True)
  (.touch path)
  (with [store (store-open path)]
    (event-append store "first" None [:n 1])
    (check (len (events store)) 1 "a working store")))

(defn test-a-missing-store-in-a-used-data-dir-is-made-anew-with-a-warning [tmp-path caplog]
  (setv data (/ tmp-path "data")
        path (store-path-for data))
  ;; the logs alone are no sign: a first start writes them before it opens the store
  (.mkdir (/ data "logs") :parents True)
  (.write-text (/ data "logs" "daemon.log") "started\n")
  (with [store (store-open path)])
  (check (lfor r caplog.records :if (in "has been used" (.getMessage r)) r) [] "a warning on a first start")
  (.unlink path)
  (.mkdir (/ data "workspace"))
  (.write-text (/ data "workspace" "notes.txt") "mine\n")
  (with [store (store-open path)]
    (check (len (events store)) 0 "a new, empty store"))
  (setv said (lfor r caplog.records :if (in "has been used" (.getMessage r)) (.getMessage r)))
  (check (len said) 1 "warnings")
  (assert (in "restore a backup" (get said 0)) (get said 0)))

(defn test-a-damaged-page-is-found-at-open [tmp-path]
  (setv path (store-path-for tmp-path))
  (with [store (store-open path)]
    (with [_ (.transaction store)]
      (for [n (range 3000)]
        (event-append store "filler" "s" [:n n :text (* "words to fill pages " 10)]))))
  (setv size (. (os.stat path) st-size))
  (assert (> size (* 100 4096)) f"the store should span many pages, not {size} bytes")
  (with [f (open path "r+b")]
    (.seek f (// size 2))
    (.write f (* b"\xde\xad\xbe\xef" 2048)))
  (refusal path "damaged" "restore a backup" ".recover"))

(defn test-what-quick-check-finds-is-named [tmp-path]
  (setv path (store-path-for tmp-path))
  (with [store (store-open path)]
    (with [_ (.transaction store)]
      (for [n (range 500)]
        (kv-put store f"filler {n}" (* "words to fill pages " 10))))
    (.write store "DELETE FROM kv WHERE key LIKE 'filler%'")
    (.query store "PRAGMA wal_checkpoint(TRUNCATE)"))
  ;; the header's count of free pages (offset 36) no longer matches the free list
  (with [f (open path "r+b")]
    (.seek f 36)
    (.write f (.to-bytes 9999 4 "big")))
  (refusal path "damaged (quick_check: Main freelist: size is" "should be 9999"))

(defn test-a-store-that-cannot-be-created-is-one-line [tmp-path]
  (.write-text (/ tmp-path "not-a-folder") "")
  (refusal (/ tmp-path "not-a-folder" "passepartout.sqlite3") "cannot be opened" "writable"))

(defn test-a-store-locked-by-another-process-is-one-line [tmp-path]
  (setv path (store-path-for tmp-path))
  (store-close (store-open path))
  (setv other (sqlite3.connect (str path) :isolation-level None))
  (.execute other "PRAGMA locking_mode = EXCLUSIVE")
  (.execute other "BEGIN EXCLUSIVE")
  (try
    (refusal path "another process holds the store locked")
    (finally (.close other))))

(defn test-closed-store-cannot-be-used [tmp-path]
  (setv store (open-store tmp-path))
  (store-close store)
  (with [(pytest.raises sqlite3.ProgrammingError)]
    (events store)))

;; * Transactions

(defn test-a-failed-transaction-leaves-nothing [tmp-path]
  (with [store (open-store tmp-path)]
    (with [(pytest.raises RuntimeError)]
      (with [conn (.transaction store)]
        (event-append store "inside" None [:n 1])
        (kv-put store "inside" 1)
        (raise (RuntimeError "stop"))))
    (check (events store) [] "events rolled back")
    (check (kv-get store "inside") None "kv rolled back")
    (event-append store "after" None [:n 2])
    (check (len (events store)) 1 "usable afterwards")))

;; * Threads and processes

(defn test-concurrent-appends-from-threads-keep-every-event [tmp-path]
  (with [store (open-store tmp-path)]
    (setv errors []
          n-threads 8
          per-thread 50)
    (defn work [t]
      (try
        (for [n (range per-thread)]
          (event-append store "tick" f"t{t}" [:thread t :n n])
          (when (= (% n 10) 0) (events store :session f"t{t}")))
        (except [e Exception] (.append errors e))))
    (setv threads (lfor t (range n-threads) (threading.Thread :target work :args #(t))))
    (for [t threads] (.start t))
    (for [t threads] (.join t))
    (check errors [] "errors in threads")
    (setv got (events store :limit None))
    (check (len got) (* n-threads per-thread) "count")
    (check (len (sfor e got (get e 1))) (* n-threads per-thread) "distinct ids")
    (check (sorted (gfor e got #((get e 9 1) (get e 9 3))))
           (sorted (gfor t (range n-threads) n (range per-thread) #(t n))) "every event")
    (for [t (range n-threads)]
      (check (lfor e (events store :session f"t{t}" :limit None) (get e 9 3))
             (list (range per-thread)) f"order within thread {t}"))))

(setv child-code "
import sys, hy
from passepartout.store import store_open
from passepartout.records import events, event_append, kv_get
from passepartout.proto import proto_print
store = store_open(sys.argv[1])
print(proto_print([e[9] for e in events(store)]))
print(proto_print(kv_get(store, 'k')))
event_append(store, 'from-child', None, [hy.models.Keyword('pid'), 1])
store.close()
")

(defn test-another-process-reads-what-this-one-wrote [tmp-path]
  (setv path (store-path-for tmp-path))
  (with [store (store-open path)]
    (event-append store "one" None [:text "first"])
    (event-append store "two" None [:text "second \"quoted\""])
    (kv-put store "k" [:v 1])
    ;; the writer stays open: the child reads through WAL while it does
    (setv r (subprocess.run [sys.executable "-c" child-code (str path)]
                            :capture-output True :text True :timeout 60))
    (check r.returncode 0 r.stderr)
    (setv lines (.splitlines r.stdout))
    (check (proto-read (get lines 0)) [[:text "first"] [:text "second \"quoted\""]] "events")
    (check (proto-read (get lines 1)) [:v 1] "kv")
    (check (lfor e (events store :kind "from-child") (get e 9)) [[:pid 1]]
           "what the child wrote")))

;; * Migrations

(defn test-a-store-of-version-14-migrates-and-its-pending-next-step-goes-on [tmp-path]
  ;; a row continued before step 15 holds its next step as its signal
  (setv path (store-path-for tmp-path)
        next-step [:type :event :payload [:sensor :tool-result :task "t1" :step 2]])
  (with [store (store-open path)] None)
  (with [conn (sqlite3.connect path)]
    (.execute conn "DROP TABLE inbox_next")
    (.execute conn "PRAGMA user_version = 14")
    (.execute conn "INSERT INTO inbox (gateway, key, signal, state, created) VALUES ('t', 'k', ?, 'pending', 0)"
              #((proto-print next-step))))
  (.close conn)
  (with [store (store-open path)]
    (check (get (.query store "PRAGMA user_version") 0 0) SCHEMA-VERSION "migrated")
    (check (proto-get (get (inbox-pending store) 0) ':signal) next-step "the old row's next step")
    (inbox-done store 1)
    (check (inbox-pending store) [] "done")))
