;; * Why

"The daemon's gates run in a process of their own, and GateKeeper is the
daemon's side of it. A gate that hangs or grows without bound costs a
rejection naming it and a killed process, never a stuck daemon, a held lock or
a thread left running."

(import asyncio collections json mmap os resource signal struct sys time types
        passepartout.proto [kw proto-get proto-read proto-print proto-without
                            is-plist ProtoError MAX-DEPTH]
        passepartout.verify [verify run-gate strip-authority GateTimeout GateMemory GATE-BUDGET GATE-WAIT GATE-MEMORY MAX-PROPOSAL-BYTES])

;; * The wire

(setv MAX-FRAME (* 16 1024 1024)
      LOAD-WAIT 120
      _CONTEXTS 32
      _SLOT (struct.Struct "<dd64s")
      _RUNTIME (kw "runtime")
      _OP (kw "op")
      _VERIFY (kw "verify")
      _LOAD (kw "load")
      _BASE (kw "base")
      _NEW-BASE (kw "new-base")
      _DROP (kw "drop")
      _CTX (kw "ctx")
      _OUTCOME (kw "outcome")
      _SAME (kw "same")
      _DISCARD (kw "discard"))

(defn _frame [text]
  "TEXT as one frame."
  (setv data (.encode text "utf-8"))
  (+ (.to-bytes (len data) 4 "big") data))

(defn _describe [e]
  "E as \"Type: message\", even when its message cannot be made."
  (try f"{(. (type e) __name__)}: {e}"
       (except [Exception] (. (type e) __name__))))

(defn _label [phase]
  "PHASE as the slot holds it."
  (cut (.encode phase "utf-8") 64))

(defn _mark [slot phase allowance]
  "Write into SLOT that PHASE began now and may take ALLOWANCE seconds."
  (_SLOT.pack-into slot 0 (time.monotonic) allowance (_label phase)))

(defn _read-slot [slot]
  "#(started allowance phase) from SLOT, read until two reads agree (the other
   side may be writing it)."
  (setv seen (_SLOT.unpack-from slot 0))
  (while True
    (setv again (_SLOT.unpack-from slot 0))
    (when (= again seen)
      (break))
    (setv seen again))
  (setv [started allowance name] seen)
  #(started allowance (.decode (.rstrip name b"\x00") "utf-8" "replace")))

;; * The gate process

;; ** Which skills it judges with

(import pathlib [Path]
        passepartout.skills [Registry load-skills load-skill-file skill-functions gates-for registry-version
                             install-declared unregister-skill SMOKE-ACTIONS])

(setv _form-prelude "(require passepartout.macros [defskill])
                     (import passepartout.proto [kw proto-read proto-print proto-get proto-put proto-merge])")

(defn _eval-forms [registry text]
  "Evaluate the Hy forms TEXT (defskill forms given at the REPL) in a namespace
   of their own, and install in REGISTRY the skills they declare."
  (setv ns (types.ModuleType "passepartout_gate_forms")
        (. ns hy) hy)
  (for [form (+ (list (hy.read-many _form-prelude)) (list (hy.read-many text :filename "<repl>")))]
    (hy.eval form :globals (. ns __dict__) :module ns))
  (install-declared registry ns))

(defn _disk-text [path]
  (try (.read-text (Path path) :encoding "utf-8")
       (except [Exception] None)))

(defn _load-text [registry path builtin text]
  "Load the skill file PATH as TEXT says into REGISTRY: a result plist as
   load-skill-file gives."
  (if (= (_disk-text path) text)
      (load-skill-file registry path :builtin builtin)
      (try
        (setv ns (types.ModuleType (+ "passepartout_gate_file_" (.replace (. (Path path) stem) "-" "_"))))
        (setv (. ns hy) hy)
        (for [form (hy.read-many text :filename path)]
          (hy.eval form :globals (. ns __dict__) :module ns))
        (install-declared registry ns path)
        (setv (get registry.files path) #(builtin text))
        [:file path :skills [] :error None]
        (except [e Exception]
          [:file path :skills [] :error (_describe e)]))))

(defn build-registry [sources]
  "A registry filled from SOURCES (a dict: \"files\" (path builtin text), or
   \"folders\" and \"builtin\"; then \"forms\" and \"disabled\"):
   #(registry problems), the problems met as text; the skills that did load
   are in it."
  (setv registry (Registry)
        results (if (in "files" sources)
                    (lfor [path builtin text] (get sources "files")
                          (_load-text registry (str path) (bool builtin) (str text)))
                    (load-skills registry :folders (.get sources "folders" [])
                                 :builtin (.get sources "builtin" True)))
        problems (lfor r results
                       :if (proto-get r ':error)
                       f"skill file {(proto-get r ':file)} failed to load: {(proto-get r ':error)}"))
  (for [text (.get sources "forms" [])]
    (try
      (_eval-forms registry text)
      (except [e Exception]
        (.append problems f"a defskill form failed: {(_describe e)}"))))
  (for [name (.get sources "disabled" [])]
    (unregister-skill registry name))
  #(registry problems))

(defn _registry-gates [registry]
  "#(version gates): the version of REGISTRY and its (name gate) pairs, in order."
  #((registry-version registry) (skill-functions registry "gate")))

(defn _sources-plist [sources]
  (+ [:folders (lfor f (.get sources "folders" []) (str f))
      :disabled (lfor n (.get sources "disabled" []) (str n))
      :builtin (bool (.get sources "builtin" True))
      :forms (lfor t (.get sources "forms" []) (str t))]
     (if (in "files" sources)
         [:files (lfor [p b t] (get sources "files") [(str p) (bool b) (str t)])]
         [])))

(defn _sources-dict [plist]
  (| {"folders" (list (proto-get plist ':folders []))
      "disabled" (list (proto-get plist ':disabled []))
      "builtin" (bool (proto-get plist ':builtin True))
      "forms" (list (proto-get plist ':forms []))}
     (if (is (proto-get plist ':files) None)
         {}
         {"files" (lfor f (proto-get plist ':files) (list f))})))

;; ** Deadlines inside

(setv _OUT-OF-MEMORY (object))

(defn _address-space []
  "This process's virtual size in bytes, or None where /proc does not say."
  (try
    (with [f (open "/proc/self/statm" "rb")]
      (* (int (get (.split (.read f)) 0)) (os.sysconf "SC_PAGE_SIZE")))
    (except [Exception] None)))

(defclass _Judge []
  "The gate process's state: its config and runtime, its gates (wrapped with
   their deadlines), the contexts the daemon sent, and the gate running now."

  (defn __init__ [self slot config budget memory]
    (setv self.slot slot
          self.config config
          self.registry (Registry)
          self.runtime {"config" config "skills" self.registry}
          self.budget budget
          self.allowance (* GATE-WAIT budget)
          self.memory memory
          self.contexts {}
          self.version None
          self.wrapped []
          self.wrapped-of None
          self.chosen {}
          self.running None
          self.started 0.0
          self.cpu-mark 0.0
          self.wall-mark (- (time.monotonic) budget)
          self.tainted False
          self.grown 0)
    (signal.signal signal.SIGPROF self._on-timer)
    None)

  (defn _on-timer [self signum frame]
    (setv name self.running)
    (when (is name None)
      ;; verify's own work between gates: not a gate's time
      (signal.setitimer signal.ITIMER-PROF self.budget)
      (return))
    (setv waited (- (time.monotonic) self.started)
          ;; at most the gate's CPU time, plus an eighth of a budget when read
          used (if (< waited self.budget) waited (- (time.thread-time) self.cpu-mark))
          left (- self.budget used))
    (if (> left 0)
        (signal.setitimer signal.ITIMER-PROF (max left 0.001))
        (do (setv self.tainted True)
            (raise (GateTimeout name)))))

  (defn _wrap [self name gate]
    (setv label (_label name))
    (fn [action ctx]
      (setv started (time.monotonic))
      (_SLOT.pack-into self.slot 0 started self.allowance label)
      (when (> (- started self.wall-mark) (/ self.budget 8))
        (setv self.cpu-mark (time.thread-time)
              self.wall-mark started))
      (setv self.started started
            self.running name)
      (try
        (setv answer (gate action ctx))
        (except [MemoryError]
          (setv answer _OUT-OF-MEMORY))
        (finally
          (setv self.running None)))
      ;; raised here, after the gate's frames (and what they held) are gone
      (when (is answer _OUT-OF-MEMORY)
        (setv self.tainted True)
        (raise (GateMemory self.memory)))
      answer))

  (defn use [self registry]
    "Judge with the skills of REGISTRY from now on."
    (setv self.registry registry
          (get self.runtime "skills") registry))

  (defn gates [self]
    "The registry's gates, each wrapped with its deadlines."
    (setv [version gates] (_registry-gates self.registry))
    (when (or (!= version self.version) (is-not self.registry self.wrapped-of))
      (setv self.wrapped (lfor [name gate] gates #(name (self._wrap name gate)))
            self.chosen {}
            self.version version
            self.wrapped-of self.registry))
    self.wrapped)

  (defn judging [self action-name]
    "The wrapped gates that judge an action called ACTION-NAME (all for None),
     as =gates-for= chooses them."
    (setv wrapped (self.gates))
    (when (not (in action-name self.chosen))
      (setv by-name (dict wrapped)
            (get self.chosen action-name) (lfor [n _] (gates-for self.registry action-name)
                                                #(n (get by-name n)))))
    (get self.chosen action-name))

  (defn rebound [self]
    "Limit the address space to what the process uses now plus the memory bound."
    (setv size (_address-space)
          self.grown (. (resource.getrusage resource.RUSAGE-SELF) ru-maxrss))
    (when size
      (setv [soft hard] (resource.getrlimit resource.RLIMIT-AS)
            want (+ size self.memory))
      (resource.setrlimit resource.RLIMIT-AS
                          #((if (= hard resource.RLIM-INFINITY) want (min want hard)) hard))))

  (defn rebound-if-grown [self]
    (when (> (. (resource.getrusage resource.RUSAGE-SELF) ru-maxrss) self.grown)
      (self.rebound))))

;; ** Answering

(defn failed-outcome [action gate reason]
  "A rejection by GATE for REASON, in the shape of verify's outcome."
  (setv proposed action
        stripped [])
  (when (is-plist action)
    (setv [action stripped] (strip-authority action)))
  [:verdict :reject :gate gate :reason reason :action action :proposed proposed
   :stripped stripped :decisions [[:gate gate :verdict :reject :reason reason]]])

(defn _print-outcome [outcome action]
  (try
    (proto-print outcome)
    (except [e Exception]
      (proto-print (failed-outcome action (or (proto-get outcome ':gate) "verify")
                                   f"the outcome could not be written as plist text: {(_describe e)}")))))

(defn _read-frame [inp]
  "The text of the next frame on INP, or None at its end."
  (setv head (.read inp 4))
  (when (< (len head) 4)
    (return None))
  (setv size (int.from-bytes head "big"))
  (when (> size MAX-FRAME)
    (raise (ProtoError f"a frame of {size} bytes is larger than {MAX-FRAME}")))
  (setv body (.read inp size))
  (when (< (len body) size)
    (return None))
  (.decode body "utf-8"))

(defn _write-all [fd data]
  (setv view (memoryview data))
  (while view
    (setv view (cut view (os.write fd view) None))))

(defn _verify-request [judge header inp]
  "The reply plist text to a verify request whose HEADER was read; its other frames come from INP."
  (for [i (or (proto-get header _DROP) [])]
    (.pop judge.contexts i None))
  (setv base-id (proto-get header _BASE))
  (when (proto-get header _NEW-BASE)
    (setv text (_read-frame inp))
    (setv (get judge.contexts base-id)
          (try (proto-read text :max-bytes MAX-FRAME)
               (except [e ProtoError] e))))
  (setv text (_read-frame inp)
        base (.get judge.contexts base-id))
  (try
    (setv action (proto-read text :max-bytes MAX-PROPOSAL-BYTES))
    (except [e ProtoError]
      ;; the daemon's own copy of the action goes in the outcome
      (return (_verify-reply judge (failed-outcome None "proto" f"the action cannot be read: {e}") None))))
  (when (not (is-plist base))
    (return (_verify-reply judge (failed-outcome action "verify"
                                                 f"the context cannot be read: {(or base "unknown context")}")
                           action)))
  (setv ctx (+ (list (proto-get header _CTX [])) base [_RUNTIME judge.runtime]))
  (signal.setitimer signal.ITIMER-PROF judge.budget)
  (try
    (setv outcome (verify action ctx :gates judge.judging :budget judge.budget))
    (except [e BaseException]
      (setv judge.tainted True
            outcome (failed-outcome action (or judge.running "verify")
                                    f"{(if judge.running f"gate {judge.running}" "verify")} failed closed: {(_describe e)}")))
    (finally
      (signal.setitimer signal.ITIMER-PROF 0)))
  (_verify-reply judge outcome action))

(defn _verify-reply [judge outcome action]
  "The reply text carrying OUTCOME, the fields that hold ACTION itself named
   rather than written."
  (setv same (lfor i (range 0 (len outcome) 2) :if (= (get outcome (+ i 1)) action) (get outcome i)))
  (when same
    (setv outcome (lfor [i v] (enumerate outcome) (if (and (% i 2) (in (get outcome (- i 1)) same)) None v))))
  (+ "(:outcome " (_print-outcome outcome action)
     (if same (+ " :same " (proto-print same)) "")
     (if judge.tainted " :discard true)" ")")))

(defn _smoke [judge]
  "The problems the smoke check finds in the registry's gates."
  (import passepartout.context [make-context])
  (setv ctx (+ (proto-without (make-context :session "smoke-check" :config judge.config) [_RUNTIME])
               [_RUNTIME judge.runtime])
        problems [])
  (for [[name gate] (judge.gates)]
    (for [action SMOKE-ACTIONS]
      (signal.setitimer signal.ITIMER-PROF judge.budget)
      (try
        (setv [kind reason _ _ _] (run-gate name gate action ctx :budget judge.budget))
        (finally
          (signal.setitimer signal.ITIMER-PROF 0)))
      (when (= kind "fail")
        (.append problems f"skill {name}: its gate failed the smoke check on {(proto-print action)}: {reason}")
        (break)))
    (when judge.tainted
      (break)))
  problems)

(defn _load-request [judge header]
  (setv saved judge.registry)
  (.rebound judge)
  (try
    (setv [registry problems] (build-registry (_sources-dict (proto-get header ':sources []))))
    (.use judge registry)
    (.rebound judge)
    (when (not problems)
      (setv problems (_smoke judge)))
    (except [e BaseException]
      (setv judge.tainted True
            problems [f"loading the skills failed: {(_describe e)}"])))
  (when problems
    (.use judge saved))
  (proto-print (+ [:problems problems :gates (lfor [n _] (judge.gates) n)]
                  (if judge.tainted [:discard True] []))))

(defn serve [judge inp out]
  "Answer requests from INP on the file descriptor OUT until INP ends."
  (while True
    (setv text (_read-frame inp))
    (when (is text None)
      (return))
    (setv header (proto-read text :max-bytes MAX-FRAME)
          op (proto-get header _OP)
          reply (cond (= op _VERIFY) (_verify-request judge header inp)
                      (= op _LOAD) (_load-request judge header)
                      True (proto-print [:error f"unknown request {(proto-print op)}"])))
    (_write-all out (_frame reply))
    (when judge.tainted
      ;; the daemon kills it; until then it takes no more work
      (while (.read inp 65536))
      (return))
    (.rebound-if-grown judge)))

;; ** Starting

(defn _die-with-parent []
  (try
    (import ctypes)
    (setv PR-SET-PDEATHSIG 1)
    (.prctl (ctypes.CDLL None :use-errno True) PR-SET-PDEATHSIG signal.SIGKILL)
    (except [Exception] None)))

(defn main [[argv None]]
  "The gate process: python -m passepartout.gatekeeper --slot FD."
  (setv argv (if (is argv None) (cut sys.argv 1 None) argv)
        slot-fd (int (get argv (+ (.index argv "--slot") 1)))
        slot (mmap.mmap slot-fd _SLOT.size))
  (os.close slot-fd)
  (_die-with-parent)
  (signal.signal signal.SIGINT signal.SIG-IGN)
  (setv inp (os.fdopen (os.dup 0) "rb")
        out (os.dup 1)
        null (os.open os.devnull os.O-RDONLY))
  (os.dup2 null 0)
  (os.close null)
  (os.dup2 2 1)
  (setv setup (proto-read (_read-frame inp) :max-bytes MAX-FRAME)
        judge (_Judge slot (json.loads (proto-get setup ':config "{}"))
                      (proto-get setup ':budget GATE-BUDGET) (proto-get setup ':memory GATE-MEMORY)))
  (.rebound judge)
  (setv [registry problems] (build-registry (_sources-dict (proto-get setup ':sources []))))
  (.use judge registry)
  (.rebound judge)
  (_write-all out (_frame (proto-print [:ready True :problems problems
                                        :gates (lfor [n _] (.gates judge) n)])))
  (serve judge inp out)
  0)

(when (= __name__ "__main__")
  (sys.exit (main)))

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
                               (_python) "-P" "-m" "passepartout.gatekeeper" "--slot" (str fd)
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
    "The outcome of the gates over ACTION in CTX, as reason.verify gives it."
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
