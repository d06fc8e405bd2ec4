;; * Why

"The daemon's gates run in a process of their own, and GateKeeper is the
daemon's side of it. A gate that hangs or grows without bound costs a
rejection naming it and a killed process, never a stuck daemon, a held lock or
a thread left running."

(import asyncio collections json mmap os signal sys time
        passepartout.proto [proto-get proto-read proto-print is-plist ProtoError MAX-DEPTH]
        passepartout.verify [GATE-BUDGET GATE-WAIT GATE-MEMORY MAX-PROPOSAL-BYTES]
        passepartout.skills [registry-version]
        passepartout.gatewire [MAX-FRAME LOAD-WAIT _CONTEXTS _SLOT _RUNTIME _OP _VERIFY _BASE _NEW-BASE _DROP
                               _CTX _OUTCOME _SAME _DISCARD _frame _describe _mark _read-slot
                               failed-outcome _sources-plist])

;; * The daemon's side

;; ** One gate process

(defclass _Gone [Exception]
  "A gate process that gave no answer: NAME the gate (or phase) it was in, REASON why."
  (defn __init__ [self name reason]
    (.__init__ (super) reason)
    (setv self.name name
          self.reason reason)))

(defn _how-it-ended [code]
  (cond (is code None) "it stopped answering"
        (< code 0) (try f"it was killed by {(. (signal.Signals (- code)) name)}"
                        (except [ValueError] f"it was killed by signal {(- code)}"))
        True f"it exited with status {code}"))

(defn _gate-name [phase]
  (if (.startswith phase ":") "verify" phase))

(defn _stopped-reason [phase over budget]
  (setv ms (round (* 1000 budget))
        took (round (* 1000 over)))
  (cond (= phase ":start") f"the gate process did not start within {LOAD-WAIT} s"
        (= phase ":load") f"loading the skills took longer than {LOAD-WAIT} s"
        (= phase ":verify") f"the gate process did not answer within {took} ms"
        True f"gate {phase} did not answer within {ms} ms (it was stopped after {took} ms)"))

(defn _died-reason [phase code]
  (cond (= phase ":start") f"the gate process ended before it was ready: {(_how-it-ended code)}"
        (.startswith phase ":") f"the gate process ended while judging: {(_how-it-ended code)}"
        True f"gate {phase} failed closed: the gate process ended while it ran: {(_how-it-ended code)}"))

(defn _python []
  "The Python interpreter of this process (under the =hy= command,
   =sys.executable= names =hy=, which keeps the real one aside)."
  (or (getattr hy "sys_executable" None) sys.executable))

(defclass _Child []
  "One gate process: its pipes, its slot, and which contexts it holds."

  (defn __init__ [self budget]
    (setv self.budget budget
          self.proc None
          self.slot None
          self.timer None
          self.stopped None
          self.bases (collections.OrderedDict)
          self.next-base 0
          self.gates []
          self.problems []))

  (defn :async spawn [self setup]
    "Start the process and send it SETUP; it is ready when this returns.
     Raises _Gone when it did not start."
    (setv fd (os.memfd-create "passepartout-gate-slot"))
    (try
      (os.ftruncate fd _SLOT.size)
      (setv self.slot (mmap.mmap fd _SLOT.size))
      (_mark self.slot ":start" LOAD-WAIT)
      (setv self.proc (await (asyncio.create-subprocess-exec
                               (_python) "-P" "-m" "passepartout.gateprocess" "--slot" (str fd)
                               :stdin asyncio.subprocess.PIPE :stdout asyncio.subprocess.PIPE
                               :pass-fds [fd] :start-new-session True)))
      (except [e OSError]
        (await (self.kill))
        (raise (_Gone "verify" f"the gate process could not start: {(_describe e)}")))
      (finally
        (os.close fd)))
    (try
      (setv ready (proto-read (await (self.exchange (_frame setup) ":start" LOAD-WAIT))
                              :max-bytes MAX-FRAME))
      (except [e ProtoError]
        (await (self.kill))
        (raise (_Gone "verify" f"the gate process answered unreadably: {e}")))
      (except [BaseException]
        (await (self.kill))
        (raise)))
    (setv self.gates (list (proto-get ready ':gates []))
          self.problems (list (proto-get ready ':problems [])))
    self)

  (defn _watch [self]
    (when (is self.slot None)
      (return))
    (setv [started allowance phase] (_read-slot self.slot)
          over (- (time.monotonic) started))
    (if (>= over allowance)
        (do (setv self.stopped #(phase over))
            (.send self signal.SIGKILL))
        (setv self.timer (.call-later (asyncio.get-running-loop) (- allowance over) self._watch))))

  (defn :async exchange [self data phase allowance]
    "Send DATA (whole frames) and the text of the answer's frame. PHASE, allowed
     ALLOWANCE seconds, is what the process does until it says otherwise."
    (_mark self.slot phase allowance)
    (setv self.stopped None
          self.timer (.call-later (asyncio.get-running-loop) allowance self._watch))
    (try
      (.write self.proc.stdin data)
      (await (.drain self.proc.stdin))
      (setv size (int.from-bytes (await (.readexactly self.proc.stdout 4)) "big"))
      (when (> size MAX-FRAME)
        (.send self signal.SIGKILL)
        (raise (_Gone "verify" f"the gate process sent a frame of {size} bytes")))
      (.decode (await (.readexactly self.proc.stdout size)) "utf-8")
      (except [#(asyncio.IncompleteReadError ConnectionError)]
        (.cancel self.timer)
        (raise (await (self._lost))))
      (finally
        (.cancel self.timer))))

  (defn :async _lost [self]
    "The _Gone for a process that ended its answer unwritten."
    (setv stopped self.stopped
          [_ _ phase] (_read-slot self.slot)
          code (await (self.kill)))
    (if stopped
        (_Gone (_gate-name (get stopped 0)) (_stopped-reason (get stopped 0) (get stopped 1) self.budget))
        (_Gone (_gate-name phase) (_died-reason phase code))))

  (defn send [self signum]
    "Send SIGNUM to the process's group, while the process is there."
    (when (and self.proc (is self.proc.returncode None))
      (try
        (os.killpg self.proc.pid signum)
        (except [ProcessLookupError]))))

  (defn :async kill [self]
    "Kill the process and everything it started, and reap it; its exit status,
     as it was before the kill when it had already ended."
    (setv code (when self.proc self.proc.returncode))
    (when self.proc
      (.send self signal.SIGKILL)
      (setv waited (await (.wait self.proc)))
      (when (is code None) (setv code waited))
      (.close self.proc.stdin))
    (when self.slot
      (.close self.slot)
      (setv self.slot None))
    code)

  (defn base-for [self text]
    "#(number new forgotten): the number the process knows the context text
     TEXT by, whether TEXT must be sent, and the numbers it should forget."
    (setv known (.get self.bases text))
    (when (is-not known None)
      (.move-to-end self.bases text)
      (return #(known False [])))
    (setv n self.next-base
          self.next-base (+ n 1)
          (get self.bases text) n
          forgotten [])
    (while (> (len self.bases) _CONTEXTS)
      (.append forgotten (get (.popitem self.bases :last False) 1)))
    #(n True forgotten)))

;; ** The keeper

(defclass GateKeeperError [RuntimeError]
  "The gate process could not be started.")

(defn _context-parts [ctx]
  "#(numbers rest-text): CTX without its runtime, split into its numbers (and
   flags), sent with every request, and the text of the rest, sent once."
  (setv numbers []
        rest [])
  (for [i (range 0 (len ctx) 2)]
    (setv k (get ctx i)
          v (get ctx (+ i 1)))
    (cond (= k _RUNTIME) None
          (or (is v None) (isinstance v #(int float))) (+= numbers [k v])
          True (+= rest [k v])))
  #(numbers (proto-print rest)))

(defn _with-action [outcome same action]
  "OUTCOME with ACTION as the value of each of its fields named in SAME."
  (lfor [i v] (enumerate outcome) (if (and (% i 2) (in (get outcome (- i 1)) same)) action v)))

(defn _fresh [value]
  "The list VALUE with every list in it new, its atoms shared."
  (lfor v value (if (isinstance v list) (_fresh v) v)))

(defclass _Replies []
  "The replies read lately, by their text: most outcomes are allows that differ
   only in the action, which the reply leaves out, so the same text comes back
   again and again. Each use gets lists of its own."

  (defn __init__ [self [size 256]]
    (setv self.size size
          self.known (collections.OrderedDict)))

  (defn read [self text]
    (setv known (.get self.known text))
    (if (is known None)
        (do (setv known (proto-read text :max-bytes MAX-FRAME :max-depth (+ MAX-DEPTH 8))
                  (get self.known text) known)
            (when (> (len self.known) self.size)
              (.popitem self.known :last False)))
        (.move-to-end self.known text))
    (_fresh known)))

(defclass GateKeeper []
  "The daemon's gates, judged in a process of their own."

  (defn __init__ [self sources [config None] [budget GATE-BUDGET] [memory GATE-MEMORY]]
    (setv self.sources (dict sources)
          self.config (or config {})
          self.budget budget
          self.memory memory
          self._child None
          self._spare None
          self._queue None
          self._worker None
          self._last-context #(None None None)
          self._replies (_Replies)))

  (defn _setup [self]
    (proto-print [:op :setup :sources (_sources-plist self.sources)
                  :config (json.dumps self.config :default str)
                  :budget self.budget :memory self.memory]))

  (defn :async _spawn [self]
    (await (.spawn (_Child self.budget) (self._setup))))

  (defn _start-spare [self]
    (setv self._spare (asyncio.ensure-future (self._spawn))))

  (defn :async _drop-spare [self]
    (setv task self._spare
          self._spare None)
    (when task
      (.cancel task)
      (try
        (setv child (await task))
        (await (.kill child))
        (except [#(asyncio.CancelledError Exception)]))))

  (defn :async _active [self]
    "The gate process that judges now, the spare taking over when there is none."
    (when (is self._child None)
      (setv task self._spare
            self._spare None
            child None)
      (when task
        (try
          (setv child (await task))
          (except [Exception])))
      (when (is child None)
        (setv child (await (self._spawn))))
      (setv self._child child)
      (self._start-spare))
    self._child)

  (defn :async _discard [self child]
    (when (is self._child child)
      (setv self._child None))
    (await (.kill child)))

  (defn :async start [self]
    "Start the gate process and a spare; the problems met loading the skills."
    (try
      (setv self._child (await (self._spawn)))
      (except [e _Gone]
        (raise (GateKeeperError e.reason))))
    (setv self._queue (asyncio.Queue)
          self._worker (asyncio.ensure-future (self._serve)))
    (self._start-spare)
    (list self._child.problems))

  (defn :async _serve [self]
    (while True
      (setv [handle args future] (await (.get self._queue)))
      (when (.done future)
        (continue))
      (try
        (setv result (await (handle #* args)))
        (when (not (.done future))
          (.set-result future result))
        (except [e Exception]
          (when (not (.done future))
            (.set-exception future e)))
        (except [BaseException]
          ;; closed while this request was under way
          (when (not (.done future))
            (.set-exception future (GateKeeperError "the gate keeper was closed")))
          (raise)))))

  (defn :async _ask [self handle #* args]
    (when (is self._queue None)
      (raise (GateKeeperError "the gate keeper is not started")))
    (setv future (.create-future (asyncio.get-running-loop)))
    (.put-nowait self._queue #(handle args future))
    (await future))

  (defn _prepare [self action ctx]
    "#(action-text numbers rest-text), or the outcome that rejects ACTION at once."
    (try
      (setv text (proto-print action))
      (except [e Exception]
        (return (failed-outcome action "proto" f"the action cannot be written as plist text: {(_describe e)}"))))
    (when (> (len (.encode text "utf-8")) MAX-PROPOSAL-BYTES)
      (return (failed-outcome action "proto"
                              f"the action is larger than {MAX-PROPOSAL-BYTES} bytes as plist text")))
    (setv [seen numbers rest] self._last-context)
    (when (is-not seen ctx)
      (try
        (setv [numbers rest] (_context-parts ctx)
              self._last-context #(ctx numbers rest))
        (except [e Exception]
          (return (failed-outcome action "verify"
                                  f"the context cannot be sent to the gate process: {(_describe e)}")))))
    #(text numbers rest))

  (defn :async verify [self action ctx]
    "The outcome of the gates over ACTION in CTX, as verify gives it."
    (setv prepared (self._prepare action ctx))
    (if (isinstance prepared tuple)
        (await (self._ask self._verify action #* prepared))
        prepared))

  (defn :async _verify [self action text numbers rest]
    (setv child None)
    (try
      (setv child (await (self._active)))
      (await (self._exchange-verify child action text numbers rest))
      (except [e _Gone]
        (when child (await (self._discard child)))
        (failed-outcome action e.name e.reason))
      (except [e Exception]
        ;; whatever went wrong, the process's state is not trusted
        (when child (await (self._discard child)))
        (failed-outcome action "verify" f"verify failed closed: {(_describe e)}"))))

  (defn :async _exchange-verify [self child action text numbers rest]
    (setv [n new forgotten] (.base-for child rest)
          header (+ [_OP _VERIFY _BASE n] (if new [_NEW-BASE True] [])
                    (if forgotten [_DROP forgotten] []) [_CTX numbers])
          data (+ (_frame (proto-print header)) (if new (_frame rest) b"") (_frame text)))
    (try
      (setv reply (.read self._replies (await (.exchange child data ":verify"
                                                          (max (* GATE-WAIT self.budget) 1.0)))))
      (except [e ProtoError]
        (raise (_Gone "verify" f"the gate process answered unreadably: {e}"))))
    (when (proto-get reply _DISCARD)
      (await (self._discard child)))
    (setv outcome (proto-get reply _OUTCOME)
          same (proto-get reply _SAME))
    (cond (not (is-plist outcome))
          (failed-outcome action "verify" "the gate process answered without an outcome")
          same (_with-action outcome same action)
          True outcome))

  (defn :async load [self sources]
    "Judge with the skills of SOURCES from now on, if they all load and pass the
     smoke check; the problems, and the skills as they were when there are any."
    (await (self._ask self._load (dict sources))))

  (defn :async _load [self sources]
    (setv child None)
    (try
      (setv child (await (self._active))
            reply (proto-read (await (.exchange child (_frame (proto-print [:op :load :sources (_sources-plist sources)]))
                                                ":load" LOAD-WAIT))
                              :max-bytes MAX-FRAME))
      (except [e Exception]
        (when child (await (self._discard child)))
        (return [(if (isinstance e _Gone) e.reason f"loading failed: {(_describe e)}")])))
    (setv problems (list (proto-get reply ':problems [])))
    (when (proto-get reply ':discard)
      (await (self._discard child)))
    (when (not problems)
      (setv self.sources sources
            child.gates (list (proto-get reply ':gates [])))
      (await (self._drop-spare))
      (self._start-spare))
    problems)

  (defn pids [self]
    "The process ids of the gate processes: the one judging, then the spare
     once it is ready."
    (setv spare (when (and self._spare (.done self._spare) (not (.cancelled self._spare))
                           (is (.exception self._spare) None))
                  (.result self._spare)))
    (lfor c [self._child spare] :if (and c c.proc) c.proc.pid))

  (defn :async close [self]
    "Stop the gate processes; requests still queued are rejected."
    (when self._worker
      (.cancel self._worker)
      (try (await self._worker) (except [asyncio.CancelledError]))
      (setv self._worker None))
    (when self._queue
      (while (not (.empty self._queue))
        (setv [_ _ future] (.get-nowait self._queue))
        (when (not (.done future))
          (.set-exception future (GateKeeperError "the gate keeper was closed")))))
    (await (self._drop-spare))
    (when self._child
      (setv child self._child
            self._child None)
      (await (.kill child)))
    (setv self._queue None)))

;; * The daemon's gates

(import logging
        passepartout.skills [all-skills]
        passepartout.context [context-runtime])

(setv log (logging.getLogger "passepartout.gatekeeper"))

(defn skill-sources [config registry [forms None] [files None]]
  "The sources a gate process loads to hold the skills of REGISTRY for CONFIG:
   the files it loaded, with their text as loaded, and the forms of the skills
   defined at the REPL. FORMS, when given, stands for those forms; FILES (path
   to #(builtin text)) for the files it names."
  (setv table (.get config "skills" {})
        loaded (| (with [registry.lock] (dict registry.files)) (or files {})))
  {"files" (lfor [path [builtin text]] (.items loaded) [path builtin text])
   "disabled" (list (.get table "disabled" []))
   "forms" (if (is forms None)
               (lfor s (all-skills registry) :if (.get s "form") (get s "form"))
               (list forms))})

(defn _unshipped [registry]
  "The skills of REGISTRY with a gate a gate process cannot hold: no file, no form."
  (lfor s (all-skills registry)
        :if (and (get s "gate") (not (.get s "form")) (not (get s "source")))
        (get s "name")))

(defclass ProcessGates []
  "The gates of the daemon SERVICES, judged in a gate process kept in step
   with its registry."

  (defn __init__ [self services]
    (setv self.services services
          self.keeper None
          self.version None
          self.problem None))

  (defn _sources [self [forms None] [files None]]
    (skill-sources self.services.config self.services.skills forms files))

  (defn :async start [self]
    "Start the gate process; the problems it met loading the skills."
    (setv self.keeper (GateKeeper (self._sources) :config (json.loads (json.dumps self.services.config :default str)))
          problems (await (.start self.keeper))
          self.version (registry-version self.services.skills))
    problems)

  (defn :async check [self [forms None] [files None]]
    "Give the gate process the skills the daemon is about to hold (with FORMS
     for the REPL's, FILES for the skill files about to be reloaded); the
     problems, empty when it took them."
    (await (.load self.keeper (self._sources forms files))))

  (defn :async _sync [self]
    (setv version (registry-version self.services.skills)
          unshipped (_unshipped self.services.skills))
    (setv self.problem
          (if unshipped
              (+ "the gate process cannot hold the skills " (.join ", " unshipped)
                 " (defined with neither a file nor a form); define them with defskill")
              (do (setv problems (await (.load self.keeper (self._sources))))
                  (when problems
                    (+ "the gate process could not load the daemon's skills: " (.join "; " problems))))))
    (when self.problem
      (.error log "%s" self.problem))
    (setv self.version version))

  (defn :async verify [self action ctx]
    "The outcome of the gates over ACTION in CTX, judged in the gate process."
    (when (!= (registry-version self.services.skills) self.version)
      (await (self._sync)))
    (if self.problem
        (failed-outcome action "verify" self.problem)
        (await (.verify self.keeper action ctx))))

  (defn :async close [self]
    (when self.keeper
      (await (.close self.keeper)))))
