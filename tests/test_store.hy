;; Tests of passepartout/store.hy: one SQLite file, WAL, shared by threads and processes.

(import os sqlite3 stat subprocess sys threading
        pathlib [Path]
        pytest
        passepartout.proto [proto-get proto-read proto-print ProtoError]
        passepartout.store [store-open store-close store-path-for Store StoreError SCHEMA-VERSION]
        passepartout.records [event-append events kv-get kv-put kv-delete session-touch session-list MAX-DATA-BYTES]
        passepartout.backup [store-backup backup-path-for]
        passepartout.mailbox [inbox-add inbox-continue inbox-done inbox-pending outbox-add outbox-sent outbox-pending]
        steps [expect :as check])

(defn open-store [tmp-path]
  (store-open (store-path-for (/ tmp-path "data"))))

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

;; * Events

(defn test-event-round-trip [tmp-path]
  (with [store (open-store tmp-path)]
    (setv data [:type :event :source [:gateway :telegram :chat 42]
                :payload [:text "hi" :n 1.5 :ok True :none None :items [1 2 3]]]
          i (event-append store "signal" "telegram:42" data :ts 1000.5)
          j (event-append store ':reply "telegram:42" [:text "hello"]))
    (assert (< i j) f"ids {i} {j}")
    (setv got (events store))
    (check (get got 0) [:id i :ts 1000.5 :kind "signal" :session "telegram:42" :data data])
    (check (get got 1 7) "telegram:42")
    (check (get got 1 5) "reply" "a keyword kind is stored by name")
    (assert (isinstance (get got 1 3) float) "ts defaults to now")
    (check (get (.query store "SELECT data FROM events WHERE id = ?" #(i)) 0 0)
           (proto-print data) "stored as plist text")))

(defn test-event-filters [tmp-path]
  (with [store (open-store tmp-path)]
    (setv ids (lfor n (range 10)
                    (event-append store (if (% n 2) "odd" "even") (if (< n 5) "s1" "s2") [:n n])))
    (defn ns [#** kw] (lfor e (events store #** kw) (get e 9 1)))
    (check (ns) (list (range 10)) "all")
    (check (ns :kind "odd") [1 3 5 7 9] "kind")
    (check (ns :session "s2") [5 6 7 8 9] "session")
    (check (ns :kind "even" :session "s1") [0 2 4] "kind and session")
    (check (ns :since-id (get ids 6)) [7 8 9] "since-id")
    (check (ns :limit 3) [0 1 2] "limit")
    (check (ns :since-id (get ids 2) :limit 2) [3 4] "since-id and limit")
    (check (ns :limit None) (list (range 10)) "no limit")
    (check (ns :kind "none such") [] "unknown kind")))

(defn test-data-that-would-not-read-back-is-refused [tmp-path]
  (with [store (open-store tmp-path)]
    (with [(pytest.raises ProtoError)]
      (event-append store "x" None [:f (float "inf")]))
    (with [(pytest.raises ProtoError)]
      (event-append store "x" None [:obj (object)]))
    (setv deep [])
    (for [_ (range 200)] (setv deep [deep]))
    (with [(pytest.raises ProtoError)]
      (event-append store "x" None deep))
    (with [(pytest.raises TypeError)]
      (event-append store 42 None [:a 1]))
    (check (events store) [] "nothing was stored")))

(defn test-large-data-round-trips [tmp-path]
  ;; bigger than a network message may be, well within the store's limit
  (with [store (open-store tmp-path)]
    (setv big (* "x" 200000))
    (event-append store "tool-result" "s" [:output big])
    (check (get (events store) 0 9) [:output big])))

(setv hostile
  ["'); DROP TABLE events; --"
   "\" OR 1=1 --"
   "(:approved t)"
   "#.(os.system \"rm -rf /\")"
   "\\\" ) (:evil"
   "a\x00b"
   "line\nbreak\r\ttab\x1b[31mred"
   "\u2028\u2029 separators"
   "emoji 🦀 and ünïcödé and 中文"
   "lone \ud800 surrogate \udfff"
   ";; a comment"
   "%_ like wildcards \\"
   ""])

(defn test-hostile-strings-round-trip [tmp-path]
  (with [store (open-store tmp-path)]
    (setv data [:strings hostile :nested [:k (get hostile 0) :list hostile]])
    (setv names (lfor s hostile :if (not (in "\ud800" s)) s))
    (for [s names]
      (event-append store s s [:text s])
      (kv-put store s s))
    (event-append store "all" None data)
    (setv got (events store :limit None))
    (check (lfor e (cut got (len names)) (get e 5)) names "kinds")
    (check (lfor e (cut got (len names)) (get e 7)) names "sessions")
    (check (lfor e (cut got (len names)) (get e 9 1)) names "data")
    (check (get got -1 9) data "nested data, lone surrogates included")
    (check (lfor s names (kv-get store s)) names "kv")
    (for [bad ["lone \ud800" (hy.models.Keyword "k\udfff")]]
      (with [(pytest.raises ValueError)]
        (event-append store bad None [:a 1]))
      (with [(pytest.raises ValueError)]
        (kv-put store bad 1)))
    (check (len (.query store "SELECT name FROM sqlite_master WHERE name = 'events'")) 1
           "the events table is still there")))

;; * Key-value state and sessions

(defn test-kv [tmp-path]
  (with [store (open-store tmp-path)]
    (check (kv-get store "missing") None "missing")
    (check (kv-get store "missing" 7) 7 "default")
    (kv-put store "offset" 41)
    (kv-put store "offset" 42)
    (check (kv-get store "offset") 42 "replaced")
    (kv-put store "plist" [:until 12.5 :names ["a" "b"] :on True])
    (check (kv-get store "plist") [:until 12.5 :names ["a" "b"] :on True] "plist")
    (kv-put store "nil" None)
    (check (kv-get store "nil" "default") None "a stored nil is not missing")
    (kv-delete store "offset")
    (check (kv-get store "offset") None "deleted")))

(defn test-session-touch [tmp-path]
  (with [store (open-store tmp-path)]
    (session-touch store "telegram:42" "telegram" :ts 100.0)
    (session-touch store "terminal" "terminal" :ts 150.0)
    (session-touch store "telegram:42" "telegram" :ts 200.0)
    (check (session-list store)
           [[:name "telegram:42" :gateway "telegram" :created 100.0 :last-seen 200.0]
            [:name "terminal" :gateway "terminal" :created 150.0 :last-seen 150.0]])))

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

;; * Backups

(defn test-a-backup-opens-and-holds-the-same-rows [tmp-path]
  (setv path (store-path-for (/ tmp-path "data"))
        dest (/ tmp-path "copies" "one.sqlite3"))
  (with [store (store-open path)]
    (for [n (range 200)]
      (event-append store "e" f"s{(% n 3)}" [:n n :text "hello"]))
    (kv-put store "offset" [:at 7])
    (setv size (store-backup store dest)
          want (events store :limit None))
    ;; taken while the store stays open and in use
    (event-append store "after" None [:n -1]))
  (check size (. (os.stat dest) st-size) "the size it reports")
  (check (stat.S-IMODE (. (os.stat dest) st-mode)) 0o600 "the copy is private")
  (check (sorted (gfor p (.iterdir dest.parent) p.name)) ["one.sqlite3"] "no partial file is left")
  (setv raw (sqlite3.connect (str dest)))
  (check (get (.fetchone (.execute raw "PRAGMA journal_mode")) 0) "delete"
         "a self-contained file, without -wal")
  (.close raw)
  (with [copy (store-open dest)]
    (check (events copy :limit None) want "the same events")
    (check (kv-get copy "offset") [:at 7] "the same state")))

(defn test-a-backup-never-overwrites [tmp-path]
  (setv dest (/ tmp-path "taken.sqlite3"))
  (.write-text dest "someone's file")
  (with [store (open-store tmp-path)]
    (with [e (pytest.raises StoreError)]
      (store-backup store dest))
    (assert (in "already exists" (str e.value)) (str e.value)))
  (check (.read-text dest) "someone's file" "left as it was"))

(defn test-default-backups-sort-by-time-in-the-data-dir [tmp-path]
  (setv early (backup-path-for tmp-path 1700000000)
        late (backup-path-for tmp-path 1700003600))
  (check early (/ tmp-path "backups" "passepartout-20231114T221320Z.sqlite3") "name")
  (assert (< early.name late.name) f"{early.name} sorts before {late.name}"))

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

;; * What a row keeps once its work is done

(defn test-a-done-inbox-row-keeps-the-message-and-a-sent-reply-forgets-its-text [tmp-path]
  (setv message [:type :event :payload [:text "hello"]]
        next-step [:type :event :payload [:sensor :tool-result :task "t1" :step 1]])
  (with [store (open-store tmp-path)]
    (setv id (inbox-add store "telegram" "u1" message))
    (inbox-continue store id next-step)
    (check (proto-get (get (inbox-pending store) 0) ':signal) next-step "a pending row gives its next step")
    (setv reply (outbox-add store "telegram" "telegram:1" [:type :reply :payload [:text "hi"]] :inbox id))
    (check (inbox-pending store) [] "the reply that ends the task marks the row done")
    (check (.query store "SELECT signal FROM inbox") [#((proto-print message))]
           "a done row holds the message it answered")
    (check (.query store "SELECT count(*) FROM inbox_next") [#(0)] "and no next step")
    (check (proto-get (get (outbox-pending store) 0) ':reply) [:type :reply :payload [:text "hi"]] "pending")
    (outbox-sent store reply)
    (check (.query store "SELECT state, reply FROM outbox") [#("sent" "()")] "a sent reply's text is dropped")))

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
