;; * Why

"A person keeps copies of the store, made while the daemon runs: store-backup
writes a copy of one consistent moment into a new file that is whole once it
exists, and backup-path-for says where one goes by default. What the copy
holds and how the store is opened are store.org's; the passepartout backup
command is cli.org's."

(import os sqlite3 time
        pathlib [Path]
        passepartout.store [StoreError])

;; * Backups

(defn backup-path-for [data-dir [now None]]
  "Where a backup made at NOW (default the present) goes by default:
   DATA-DIR/backups/passepartout-YYYYMMDDTHHMMSSZ.sqlite3, in UTC."
  (/ (Path data-dir) "backups"
     (+ "passepartout-" (time.strftime "%Y%m%dT%H%M%SZ" (time.gmtime now)) ".sqlite3")))

(defn _fsync [path [folder False]]
  (setv fd (os.open path (if folder os.O-RDONLY os.O-RDWR)))
  (try
    (os.fsync fd)
    (finally (os.close fd))))

(defn store-backup [store dest]
  "Copy STORE, in use or not, into the new file DEST (private, its folders made);
   the copy's size in bytes. A StoreError when DEST exists or cannot be written."
  (setv dest (Path dest)
        part (.with-name dest f".{dest.name}.part-{(os.getpid)}"))
  (when (or (.exists dest) (.is-symlink dest))
    (raise (StoreError f"{dest}: already exists; name a new file, or a folder to put the backup in")))
  (try
    (.mkdir dest.parent :parents True :exist-ok True :mode 0o700)
    (os.close (os.open part (| os.O-RDWR os.O-CREAT os.O-TRUNC) 0o600))
    (setv copy (sqlite3.connect (str part) :isolation-level None))
    (try
      (with [store.lock]
        (.backup store.conn copy))
      (.execute copy "PRAGMA journal_mode = DELETE")
      (setv found (lfor [r] (.fetchall (.execute copy "PRAGMA quick_check")) r))
      (finally (.close copy)))
    (when (!= found ["ok"])
      (raise (StoreError f"{dest}: the copy did not check out ({(get found 0)}); nothing was written")))
    (_fsync part)
    (os.rename part dest)
    (_fsync dest.parent :folder True)
    (setv size (. (.stat dest) st-size))
    (except [e #(OSError sqlite3.Error)]
      (raise (StoreError f"{dest}: the backup could not be written ({e})") :from e))
    (finally
      (when (.exists part) (.unlink part))))
  size)
