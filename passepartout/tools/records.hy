;; * Why

"The store holds the agent's history, and these commands read and keep it from
the host, with the daemon running or not: backup copies the store,
journal verifies, exports and archives the journal of turns, replay runs
today's gates over its proposals, and memory lists, reverts and
consolidates the changes to long-term memory."

(import re sys
        pathlib [Path]
        passepartout.tools.cli [_gate-context])

;; * backup

(defn cmd-backup [args]
  (import passepartout.config [load-config]
          passepartout.store [store-open store-path-for]
          passepartout.backup [store-backup backup-path-for])
  (setv data-dir (get (load-config args.config) "data_dir")
        source (store-path-for data-dir)
        given (when args.path (.expanduser (Path args.path)))
        dest (cond (is given None) (backup-path-for data-dir)
                   (.is-dir given) (/ given (. (backup-path-for data-dir) name))
                   True given))
  (when (not (.exists source))
    (print f"passepartout backup: there is no store at {source} to back up" :file sys.stderr)
    (return 1))
  (with [store (store-open source)]
    (setv size (store-backup store dest)))
  (print f"wrote {dest} ({size} bytes)")
  0)

;; * journal

(defn _journal-store [args]
  "The store of the configured data dir, or None when there is none yet."
  (import passepartout.config [load-config]
          passepartout.store [store-open store-path-for])
  (setv path (store-path-for (get (load-config args.config) "data_dir")))
  (when (.exists path) (store-open path)))

(defn cmd-journal [args]
  (import passepartout.journal [journal-verify journal-export]
          passepartout.display [display-text json-visible]
          passepartout.proto [proto-get])
  (setv store (_journal-store args))
  (when (is store None)
    (when (= args.journal-command "verify")
      (print "the journal is empty: there is no store yet"))
    (return 0))
  (with [store store]
    (if (= args.journal-command "verify")
        (do (setv v (journal-verify store))
            (if (proto-get v ':ok)
                (do (print f"the journal's {(proto-get v ':turns)} turns are intact") 0)
                (do (print (proto-get v ':text)) 1)))
        (do (for [text (journal-export store :session args.session :fmt args.format)]
              (.write sys.stdout (if (= args.format "jsonl") (json-visible text) (display-text text))))
            (.flush sys.stdout)
            0))))

;; ** journal archive

(defn cmd-journal-archive [args]
  (import time
          passepartout.archive [archive-age configured-age archive-journal archive-text]
          passepartout.config [load-config]
          passepartout.store [store-open store-path-for])
  (setv config (load-config args.config)
        path (store-path-for (get config "data_dir")))
  (try (setv age (if args.older-than (archive-age args.older-than) (configured-age config)))
       (except [e ValueError]
         (print e :file sys.stderr)
         (return 2)))
  (when (is age None)
    (print "archiving is off ([journal] archive_after); give --older-than to archive now")
    (return 0))
  (when (not (.exists path))
    (print "the journal is empty: there is no store yet")
    (return 0))
  (with [store (store-open path)]
    (print (archive-text (archive-journal store (- (time.time) age)))))
  0)

;; * replay

(setv _ago-re (re.compile r"([0-9]{1,6})\s*(m|h|d)\Z" re.I))

(defn _since [text]
  "The time TEXT names, in seconds since the epoch; ValueError when it names none."
  (import datetime time)
  (setv text (.strip text)
        m (.match _ago-re text))
  (cond
    m (- (time.time) (* (int (.group m 1)) (get {"m" 60 "h" 3600 "d" 86400} (.lower (.group m 2)))))
    (.fullmatch (re.compile r"[0-9]+(\.[0-9]+)?") text) (float text)
    True (.timestamp (datetime.datetime.fromisoformat text))))

(defn cmd-replay [args]
  (import passepartout.journal [journal-replay change-text]
          passepartout.display [display-text]
          passepartout.proto [proto-get])
  (setv since None)
  (when args.since
    (try (setv since (_since args.since))
         (except [ValueError]
           (print f"passepartout replay: --since {args.since !r} is neither a time nor an age like 12h"
                  :file sys.stderr)
           (return 2))))
  (setv today (_gate-context args)
        store (_journal-store args))
  (when (is store None)
    (print "replayed 0 proposals: there is no store yet")
    (return 0))
  (with [store store]
    (setv r (journal-replay store today :since since :session args.session)))
  (setv changes (proto-get r ':changes))
  (for [c changes] (print (display-text (change-text c))))
  (print (+ f"replayed {(proto-get r ':judged)} proposals: {(len changes)} decisions would change"
            (if (proto-get r ':unjudged)
                f"; {(proto-get r ':unjudged)} had no recorded proposal or context to judge again"
                "")))
  (if changes 1 0))

;; * memory

(defn cmd-memory [args]
  (import passepartout.memory [memory-history change-line memory-revert dream]
          passepartout.display [display-text]
          passepartout.proto [proto-get])
  (setv store (_journal-store args))
  (when (is store None)
    (print "memory is empty: there is no store yet")
    (return 0))
  (with [store store]
    (cond
      (= args.memory-command "history")
      (do (setv changes (memory-history store :limit args.limit))
          (when (not changes) (print "no memory changes yet"))
          (for [c changes] (print (display-text (change-line c))))
          0)
      (= args.memory-command "revert")
      (try (setv turn (memory-revert store args.turn))
           (print f"reverted turn {args.turn} (the revert is turn {turn})")
           0
           (except [e ValueError]
             (print f"passepartout memory revert: {e}" :file sys.stderr)
             1))
      True
      (do (setv r (dream store))
          (print f"{(proto-get r ':before)} notes before, {(proto-get r ':after)} after: {(proto-get r ':merged)} merged, {(proto-get r ':forgotten)} forgotten, {(proto-get r ':stale)} marked stale")
          0))))
