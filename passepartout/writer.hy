;; * Why

"A daemon writes to its store from its event loop alone, and GroupWriter is
how: the writes asked for in one turn of the loop are committed in one
transaction, and what was committed is forced to the disk when the daemon is
about to tell the outside world it has something. The store itself, its
transactions and its file are store.org's."

(import asyncio os)

;; * The writer

(defn _settle [done result error]
  (when (not (.done done))
    (if (is error None)
        (.set-result done result)
        (.set-exception done error))))

(defclass GroupWriter []
  "Runs (WRITE store #* args) for each call on the event loop, in one store
   transaction for all the calls asked for in the same turn of the loop; and
   forces what was committed to the disk when asked (durable)."

  (defn __init__ [self store]
    (setv self.store store
          self.pending []
          self.scheduled False
          self.syncing None
          self.again None
          self.dirty False))

  (defn :async call [self write #* args]
    "The value of (WRITE store #* args), written in the next commit."
    (setv loop (asyncio.get-running-loop)
          done (.create-future loop))
    (.append self.pending #(write args done))
    (when (not self.scheduled)
      (setv self.scheduled True)
      (.call-soon loop self.flush))
    (await done))

  (defn flush [self]
    "Write what was asked for, in one transaction (each alone when that fails)."
    (setv batch self.pending
          self.pending []
          self.scheduled False)
    (when batch
      (try
        (with [_ (.transaction self.store)]
          (setv outcomes (lfor [write args _] batch #((write self.store #* args) None))))
        (except [Exception]
          (setv outcomes (lfor [write args _] batch (self._alone write args)))))
      (setv self.dirty True)
      (for [[[_ _ done] [result error]] (zip batch outcomes)]
        (_settle done result error))))

  (defn close [self]
    "Write what is still asked for, and force it to the disk."
    (self.flush)
    (store-sync self.store))

  (defn _alone [self write args]
    (try
      (with [_ (.transaction self.store)]
        #((write self.store #* args) None))
      (except [e Exception] #(None e))))

  (defn :async durable [self]
    "Wait until everything committed so far is on the disk."
    (self.flush)
    (when self.syncing
      ;; a sync under way may have begun before our commit: wait for the next
      (when (is self.again None)
        (setv self.again (asyncio.ensure-future (self._after self.syncing))))
      (await (asyncio.shield self.again))
      (return))
    (setv self.syncing (asyncio.ensure-future (self._sync)))
    (await (asyncio.shield self.syncing)))

  (defn :async _after [self running]
    (try (await running) (except [Exception]))
    (setv self.again None
          self.syncing (asyncio.ensure-future (self._sync)))
    (await self.syncing))

  (defn :async _sync [self]
    (setv self.dirty False)
    (try
      (await (asyncio.to-thread store-sync self.store))
      (finally
        (setv self.syncing None)))))

(defn store-sync [store]
  "Force what STORE has committed to the disk: its write-ahead log, or the file."
  (for [path [(+ (str store.path) "-wal") (str store.path)]]
    (try
      (setv fd (os.open path os.O-RDONLY))
      (except [FileNotFoundError] (continue)))
    (try
      (os.fsync fd)
      (return)
      (finally (os.close fd)))))
