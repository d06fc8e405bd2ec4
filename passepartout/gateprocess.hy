;; * Why

"The gate process runs the daemon's gates, and only them: it loads the skills
the daemon names, answers each proposal with verify's outcome, and bounds
every gate by its CPU budget and a memory limit, so that a gate that hangs or
grows ends in a rejection naming it and a process the daemon throws away.
It is started by the daemon as python -P -m passepartout.gateprocess; why it
is a process of its own, and the daemon's side of it, are gatekeeper.org's,
and what the two say to each other is gatewire.org's."

(import json mmap os resource signal sys time types
        passepartout.proto [kw proto-get proto-read proto-print proto-without is-plist ProtoError]
        passepartout.verify [verify run-gate GateTimeout GateMemory GATE-BUDGET GATE-WAIT GATE-MEMORY MAX-PROPOSAL-BYTES]
        passepartout.gatewire [MAX-FRAME _SLOT _RUNTIME _OP _VERIFY _LOAD _BASE _NEW-BASE _DROP _CTX
                               _frame _describe _label failed-outcome _sources-dict])

;; * Which skills it judges with

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

;; * Deadlines inside

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

;; * Answering

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

;; * Starting

(defn _die-with-parent []
  (try
    (import ctypes)
    (setv PR-SET-PDEATHSIG 1)
    (.prctl (ctypes.CDLL None :use-errno True) PR-SET-PDEATHSIG signal.SIGKILL)
    (except [Exception] None)))

(defn main [[argv None]]
  "The gate process: python -m passepartout.gateprocess --slot FD."
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
