;; Tests of passepartout/backup.hy: a copy of the store taken while it is in use.

(import os sqlite3 stat
        pytest
        passepartout.store [store-open store-path-for StoreError]
        passepartout.records [event-append events kv-get kv-put]
        passepartout.backup [store-backup backup-path-for]
        steps [expect :as check open-store])

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
