;; * Why

"A Lisp core invites a developer to reach into the running program: look at the
registry, call a gate on an action, redefine a skill, all without a restart. The
daemon listens on a Unix socket in its runtime dir, and repl '(form)' (the
standard-library client, passepartout_repl.py) sends forms to it and prints
what they return."

(import asyncio json logging os secrets socket stat struct sys
        threading time traceback types
        importlib
        pathlib [Path]
        hy.errors [HyLanguageError]
        passepartout.config [ConfigError]
        passepartout.proto [proto-get proto-put]
        passepartout.perceive [reply-signal sensor-of]
        passepartout.sandbox [in-action-process]
        passepartout.context [context-runtime]
        passepartout.store [event-append]
        passepartout.skills [set-immutable-skills]
        passepartout.reload [config-immutable reload-skills])

(setv log (logging.getLogger "passepartout.repl"))

;; * Limits

(setv SOCKET-NAME "repl.sock"
      MAX-REQUEST (* 1024 1024)
      MAX-VALUE 100000
      MAX-OUTPUT 100000
      RECORD-CHARS 4000
      DEFAULT-TIMEOUT 30.0
      READ-TIMEOUT 10.0)

(defclass ReplError [Exception]
  "A REPL socket that cannot be served.")

(defn truncate [text limit]
  "TEXT cut to LIMIT characters, with a marker saying how long it was."
  (if (<= (len text) limit)
      text
      (+ (cut text limit) f"\n… [truncated: {(len text)} characters in all]")))

;; * Output of a form

(setv _capture (threading.local))

(defclass _Capture []
  "What one evaluation printed, up to LIMIT characters."

  (defn __init__ [self [limit MAX-OUTPUT]]
    (setv self.parts []
          self.size 0
          self.dropped 0
          self.limit limit))

  (defn write [self text]
    (setv room (max 0 (- self.limit self.size)))
    (when room
      (.append self.parts (cut text room))
      (+= self.size (min room (len text))))
    (+= self.dropped (max 0 (- (len text) room))))

  (defn text [self]
    (+ (.join "" self.parts)
       (if self.dropped f"\n… [truncated: {self.dropped} more characters]" ""))))

(defclass _ThreadOutput []
  "Stands in for sys.stdout or sys.stderr: a thread's writes go to its capture when it has one."

  (defn __init__ [self stream]
    (setv self._stream stream))

  (defn write [self text]
    (setv c (getattr _capture "current" None))
    (cond (is-not c None) (do (.write c (str text)) (len text))
          (is-not self._stream None) (.write self._stream text)
          True (len text)))

  (defn writelines [self lines]
    (for [line lines] (.write self line)))

  (defn flush [self]
    (when (and (is (getattr _capture "current" None) None) (is-not self._stream None))
      (.flush self._stream)))

  (defn __getattr__ [self name]
    (getattr self._stream name)))

(defn _capture-output []
  "Route sys.stdout and sys.stderr through the per-thread capture."
  (for [name ["stdout" "stderr"]]
    (when (not (isinstance (getattr sys name) _ThreadOutput))
      (setattr sys name (_ThreadOutput (getattr sys name))))))

;; * The namespace

(setv _declare-head (hy.read "hy.I.passepartout/skills.declare-skill"))

(defn _repl-defskill [name #* body]
  "defskill as the REPL reads it: the same form, installed by replace-skill."
  (setv macro (get (. (importlib.import-module "passepartout.macros") _hy_macros) "defskill")
        form (macro name #* body))
  (when (!= (get form 0) _declare-head)
    (raise (ReplError "defskill no longer expands to declare-skill; the REPL cannot swap it safely")))
  ;; hy.repr writes a model quoted ('(defskill …)); the form is the text after the quote
  (setv text (cut (hy.repr (hy.models.Expression [(hy.models.Symbol "defskill") name #* body])) 1 None))
  `(replace-skill ~(get form 2) :form ~text))

(setv _prelude "(import passepartout.proto [kw proto-read proto-print proto-get proto-put proto-merge]
                        passepartout.skills [make-skill])"
      _namespaces (iter (range 1 (** 2 62))))

(defn make-namespace [[bindings None] [registry None] [check None]]
  "A fresh module for REPL forms, holding BINDINGS (a dict of Hy names) besides
   the usual ones; the skill functions act on REGISTRY. CHECK, when given, is
   asked with the forms of the REPL's skills as they would be and answers the
   problems of the gate process that judges with them (none: go ahead)."
  (import passepartout.skills :as sk)
  (setv name f"passepartout_repl_ns{(next _namespaces)}"
        ns (types.ModuleType name "Forms evaluated at the REPL."))
  (setv (. ns hy) hy
        (. ns _hy_macros) {"defskill" _repl-defskill}
        (get sys.modules name) ns)
  (hy.eval (hy.read _prelude) :globals (. ns __dict__) :module ns)
  (defn replace [skill [form None]]
    (when form (setv (get skill "form") form))
    (if (is check None)
        (sk.replace-skill registry skill)
        (do (setv forms (+ (lfor s (sk.all-skills registry)
                                 :if (and (.get s "form") (!= (get s "name") (get skill "name")))
                                 (get s "form"))
                           (if form [form] []))
                  problems (or (sk.smoke-check skill :gates False :registry registry) (check forms)))
            (when problems
              (raise (sk.SkillError (if (isinstance problems str) problems (.join "; " problems)))))
            (sk.replace-skill registry skill :gates False))))
  (for [[k v] (.items (| {"registry" registry
                           "skills" (fn [] (lfor s (sk.all-skills registry) (get s "name")))
                           "skill" (fn [name] (sk.get-skill registry name))
                           "get-skill" (fn [name] (sk.get-skill registry name))
                           "all-skills" (fn [] (sk.all-skills registry))
                           "register-skill" (fn [skill] (sk.register-skill registry skill))
                           "replace-skill" replace
                           "unregister-skill" (fn [name] (sk.unregister-skill registry name))}
                          (or bindings {})))]
    (setv (get (. ns __dict__) (hy.mangle k)) v))
  ns)

;; * Evaluating with a timeout

(defclass EvaluationTimeout [BaseException]
  "Raised in a form's own code, on its own thread, once its time is up.")

(setv STOP-GRACE 1.0
      _own-files #{(os.path.realpath __file__)
                   (os.path.realpath (. (importlib.import-module "hy.compiler") __file__))})

(defclass Evaluation []
  "One request's forms on their thread: their text, when they began, whether
   they were asked to stop, and their answer once they ended."
  (defn __init__ [self text]
    (setv self.text text
          self.started (time.monotonic)
          self.stop False
          self.answer None
          self.thread None)))

(defn _tracer [evaluation]
  "A trace function that stops EVALUATION's own code once it was asked to."
  (defn local [frame event arg]
    (when (and evaluation.stop (= event "line"))
      (raise (EvaluationTimeout "the time given to the forms is up")))
    local)
  (fn [frame event arg]
    (when (= frame.f-code.co-filename "<repl>")
      local)))

(defn _traceback [e]
  "The traceback of E from the first frame of the forms on; for a form that is
   not valid Hy, only Hy's message (which points into the form)."
  (when (isinstance e HyLanguageError)
    (return (.join "" (traceback.format-exception-only (type e) e))))
  (setv tb e.__traceback__)
  (while (and tb (in (os.path.realpath tb.tb-frame.f-code.co-filename) _own-files))
    (setv tb tb.tb-next))
  (.join "" (traceback.format-exception (type e) e tb)))

(defn _error-answer [e]
  {"ok" False
   "error" (truncate f"{(. (type e) __name__)}: {e}" MAX-VALUE)
   "traceback" (truncate (_traceback e) MAX-VALUE)})

(defn _run-forms [ns text]
  (setv forms (list (hy.read-many text :filename "<repl>"))
        value None)
  (for [form forms]
    ;; the file name read-many was given stays with the sequence, not with
    ;; each form: the compiler names the code after the form's own filename
    (setv form.filename "<repl>"
          value (hy.eval form :globals (. ns __dict__) :module ns)))
  (try
    (hy.repr value)
    (except [Exception]
      (repr value))))

(defn _work [ns evaluation capture]
  "The body of EVALUATION's thread."
  (setv (. _capture current) capture)
  (sys.settrace (_tracer evaluation))
  (try
    (setv answer {"ok" True "value" (truncate (_run-forms ns evaluation.text) MAX-VALUE)})
    (except [e BaseException]
      (setv answer (if (isinstance e EvaluationTimeout)
                       {"ok" False "traceback" ""
                        "error" "Timeout: the forms did not finish in time; they were interrupted"}
                       (_error-answer e))))
    (finally
      (sys.settrace None)))
  (setv evaluation.answer answer))

(defn :async evaluate-async [ns text [timeout DEFAULT-TIMEOUT] [running None]]
  "Evaluate the forms TEXT in the namespace NS on a thread of their own, for at
   most TIMEOUT seconds, without holding up the event loop. RUNNING, a list,
   holds the Evaluation for as long as its thread runs on past its answer.
   A dict: {ok: true, value, output} or {ok: false, error, traceback, output}."
  (_capture-output)
  (setv loop (asyncio.get-running-loop)
        capture (_Capture)
        evaluation (Evaluation text)
        ended (asyncio.Event))
  (defn body []
    (try
      (_work ns evaluation capture)
      (finally
        (try (.call-soon-threadsafe loop ended.set)
             (except [RuntimeError])))))
  (setv evaluation.thread (threading.Thread :target body :name "repl-eval" :daemon True))
  (.start evaluation.thread)
  (try
    (await (asyncio.wait-for (.wait ended) (min timeout threading.TIMEOUT-MAX)))
    (except [asyncio.TimeoutError]
      (setv evaluation.stop True)
      (try
        (await (asyncio.wait-for (.wait ended) STOP-GRACE))
        (except [asyncio.TimeoutError]))))
  (setv answer evaluation.answer)
  (when (is answer None)
    (when (is-not running None)
      (.append running evaluation)
      (defn :async forget []
        (await (.wait ended))
        (when (in evaluation running) (.remove running evaluation)))
      (setv evaluation.watch (asyncio.ensure-future (forget))))
    (setv answer {"ok" False "traceback" ""
                  "error" (+ f"the forms did not finish within {timeout :g} s and did not stop when asked to: "
                             "they are still running in the daemon (/status shows them; restart the daemon to end them)")}))
  (when (and (not (get answer "ok")) (.startswith (get answer "error") "Timeout:"))
    (setv answer (| answer {"error" f"Timeout: the forms did not finish within {timeout :g} s; they were interrupted"})))
  (| answer {"output" (.text capture)}))

(defn evaluate [ns text [timeout DEFAULT-TIMEOUT]]
  "evaluate-async run to its end, for a caller with no event loop of its own."
  (asyncio.run (evaluate-async ns text timeout)))

(defn running-text [running [now None]]
  "One line per form of RUNNING still running past its answer, for /status."
  (setv now (or now (time.monotonic)))
  (lfor e running
        f"REPL forms still running for {(int (- now e.started))} s (restart the daemon to end them): {(truncate (.join " " (.split e.text)) 80)}"))

;; * The handler

(defn record-evaluation [store session uid forms answer [seconds None] [refused None]]
  "Append the kind \"repl\" event of one evaluation (or refusal) to STORE."
  (when (is store None)
    (return None))
  (setv data [:uid uid])
  (when refused
    (+= data [:refused refused]))
  (when (is-not forms None)
    (+= data [:forms (truncate forms RECORD-CHARS)]))
  (when answer
    (+= data [:ok (get answer "ok")])
    (+= data (if (get answer "ok")
                 [:value (truncate (get answer "value") RECORD-CHARS)]
                 [:error (truncate (get answer "error") RECORD-CHARS)]))
    (when (.get answer "output")
      (+= data [:output (truncate (get answer "output") RECORD-CHARS)])))
  (when (is-not seconds None)
    (+= data [:seconds (round seconds 6)]))
  (try
    (event-append store "repl" session data)
    (except [e Exception]
      (.exception log "could not record a REPL evaluation"))))

(defn answer-signal [signal answer]
  "The reply to SIGNAL carrying ANSWER (a wire answer dict)."
  (setv ok (get answer "ok")
        reply (reply-signal signal (if ok (get answer "value") (get answer "error"))
                            (if ok "repl" "error")))
  (proto-put reply ':payload
             (+ (proto-get reply ':payload)
                [:repl True :ok ok :output (.get answer "output" "")]
                (if ok
                    [:value (get answer "value")]
                    [:error (get answer "error") :traceback (.get answer "traceback" "")]))))

(defn handle-repl-eval [signal ctx]
  "Evaluate a :repl-eval SIGNAL that the socket registered; None for other signals."
  (when (!= (sensor-of signal) "repl-eval")
    (return None))
  (setv payload (proto-get signal ':payload)
        rid (proto-get payload ':request)
        services (context-runtime ctx "services")
        server (getattr services "repl" None)
        repl (if (and server (isinstance rid str)) (.pop server.pending rid None) None)
        store (context-runtime ctx "store")
        forms (proto-get payload ':forms)
        uid (proto-get payload ':uid))
  (when (is repl None)
    (record-evaluation store (proto-get signal ':session) uid None None
                       :refused "a :repl-eval signal that did not come from the socket")
    (return [(reply-signal signal "refused: only forms that come through the REPL socket are evaluated" "error")]))
  (defn :async evaluated []
    (setv started (time.monotonic)
          answer (await (evaluate-async repl.namespace forms (proto-get payload ':timeout DEFAULT-TIMEOUT)
                                        repl.running)))
    (record-evaluation store (proto-get signal ':session) uid forms answer
                       :seconds (- (time.monotonic) started))
    [(answer-signal signal answer)])
  (evaluated))

(defn _answer-of [emitted]
  "The wire answer in what step emitted for a :repl-eval signal."
  (for [s emitted]
    (setv p (or (proto-get s ':payload) []))
    (when (proto-get p ':repl)
      (return (if (proto-get p ':ok)
                  {"ok" True "value" (proto-get p ':value) "output" (proto-get p ':output "")}
                  {"ok" False "error" (proto-get p ':error) "traceback" (proto-get p ':traceback "")
                   "output" (proto-get p ':output "")}))))
  (setv texts (lfor s emitted (str (proto-get (or (proto-get s ':payload) []) ':text ""))))
  {"ok" False
   "error" (if texts
               (.join "\n" texts)
               "nothing evaluated the forms: the repl skill is not loaded (is it disabled in the config?)")
   "traceback" ""
   "output" ""})

;; * The socket

;; ** Who may connect

(defn peer-credentials [sock]
  "#(pid uid gid) of the process at the other end of the Unix socket SOCK."
  (struct.unpack "3i" (.getsockopt sock socket.SOL-SOCKET socket.SO-PEERCRED (struct.calcsize "3i"))))

(defn peer-allowed [uid [own-uid None]]
  "True when a peer running as UID may use the REPL of a daemon running as
   OWN-UID (this process's user by default): only the same user may."
  (= uid (if (is own-uid None) (os.getuid) own-uid)))

;; ** Where it listens

(defn socket-path [config]
  "The REPL socket of the daemon that CONFIG describes."
  (os.path.join (get config "runtime_dir") SOCKET-NAME))

(defn _private-dir [d]
  (setv d (Path d))
  (when (not (.is-dir d))
    (.mkdir d :parents True :exist-ok True :mode 0o700)
    (os.chmod d 0o700))
  (setv st (os.stat d))
  (when (!= st.st-uid (os.getuid))
    (raise (ReplError f"{d}: belongs to uid {st.st-uid}, not to this user")))
  (when (& st.st-mode 0o022)
    (raise (ReplError f"{d}: others may write to it; make it private (chmod 700)"))))

(defn _clear-stale [path]
  (when (not (os.path.lexists path))
    (return None))
  (when (not (stat.S-ISSOCK (. (os.lstat path) st-mode)))
    (raise (ReplError f"{path}: exists and is not a socket; not replacing it")))
  (with [probe (socket.socket socket.AF-UNIX socket.SOCK-STREAM)]
    (.settimeout probe 1.0)
    (try
      (.connect probe (str path))
      (except [[ConnectionRefusedError FileNotFoundError]]
        (when (os.path.lexists path) (os.unlink path))
        (return None))))
  (raise (ReplError f"{path}: another daemon is already listening there")))

;; ** Serving

(defn _request [line]
  "#(forms timeout) from a request LINE, or a ValueError saying what is wrong."
  (setv data (json.loads (.decode line "utf-8")))
  (when (not (isinstance data dict))
    (raise (ValueError "a request is a JSON object")))
  (setv forms (.get data "forms")
        timeout (.get data "timeout" DEFAULT-TIMEOUT))
  (when (not (and (isinstance forms str) (.strip forms)))
    (raise (ValueError "the request has no forms")))
  (when (or (isinstance timeout bool) (not (isinstance timeout #(int float)))
            (not (< 0 timeout (float "inf"))))
    (raise (ValueError "the timeout must be a positive number of seconds")))
  #(forms (float timeout)))

(defn _refusal [why]
  {"ok" False "error" f"refused: {why}" "traceback" "" "output" ""})

(defn :async _read-away [reader]
  "Read and drop the request line of a refused peer, if it comes in time."
  (try
    (await (asyncio.wait-for (.readline reader) READ-TIMEOUT))
    (except [#(asyncio.TimeoutError ValueError OSError)])))

(defclass Repl []
  "The REPL socket of one daemon."

  (defn __init__ [self env [runner None] [path None] [uid None]]
    "ENV is the daemon's services; RUNNER its hub or runner, when it has one."
    (setv self.env env
          self.runner runner
          self.path (Path (or path (socket-path env.config)))
          self.uid (if (is uid None) (os.getuid) uid)
          self.pending {}
          self.running []
          self.connections (set)
          self.server None
          self.inode None
          self.loop None
          self.namespace None))

  (defn _bindings [self]
    {"services" self.env
     "env" self.env
     "config" self.env.config
     "store" self.env.store
     "runner" self.runner
     "reload-skills" (fn [[force False]]
                       (.result (asyncio.run-coroutine-threadsafe (reload-skills self.env :force force)
                                                                  self.loop)
                                120))
     "submit" (fn [signal] (self.submit signal))
     "stop" (fn [session] (self.stop session))})

  (defn _checker [self]
    "The check of the daemon's gate process, callable from a form's thread; None
     when the daemon judges in its own process."
    (setv gates self.env.gates)
    (when (hasattr gates "check")
      (fn [forms]
        (.result (asyncio.run-coroutine-threadsafe (.check gates forms) self.loop) 60))))

  (defn submit [self signal]
    "Hand SIGNAL to the runner from any thread; the session it was queued on."
    (when (is self.runner None)
      (raise (ReplError "this REPL has no runner")))
    (.result (asyncio.run-coroutine-threadsafe (.submit self.runner signal) self.loop) 30))

  (defn stop [self session]
    "Stop SESSION's task from any thread, as a /stop said there; what the person was told."
    (defn :async stopped []
      (if (is self.runner None)
          (hy.I.passepartout/runner.stop-task self.env.stops session)
          (await (.stop self.runner session))))
    (.result (asyncio.run-coroutine-threadsafe (stopped) self.loop) 30))

  (defn :async start [self]
    "Listen on the socket."
    (set-immutable-skills self.env.skills (config-immutable self.env.config))
    (when (> (len (os.fsencode self.path)) 107)
      (raise (ReplError f"{self.path}: too long for a Unix socket path")))
    (_private-dir self.path.parent)
    (_clear-stale self.path)
    (setv self.loop (asyncio.get-running-loop)
          self.namespace (make-namespace (self._bindings) self.env.skills (self._checker))
          self.env.repl self
          self.server (await (asyncio.start-unix-server self._serve :path (str self.path)
                                                        :limit (+ MAX-REQUEST 2))))
    (os.chmod self.path 0o600)
    (setv self.inode (. (os.stat self.path) st-ino))
    self)

  (defn :async close [self]
    "Stop listening, end open connections and remove the socket."
    (when self.server
      (.close self.server)
      (for [t (list self.connections)] (.cancel t))
      (await (asyncio.gather #* self.connections :return-exceptions True))
      (await (.wait-closed self.server))
      (setv self.server None))
    (try
      (when (= (. (os.stat self.path) st-ino) self.inode)
        (os.unlink self.path))
      (except [FileNotFoundError]))
    (when (is (getattr self.env "repl" None) self)
      (setv self.env.repl None))
    (when self.namespace
      (.pop sys.modules (. self.namespace __name__) None)))

  (defn :async _serve [self reader writer]
    (setv task (asyncio.current-task))
    (.add self.connections task)
    (try
      (setv answer (await (self._answer reader writer)))
      (when answer
        (.write writer (.encode (+ (json.dumps answer) "\n") "utf-8"))
        (await (.drain writer)))
      (except [OSError])
      (finally
        (.discard self.connections task)
        (.close writer))))

  (defn :async _answer [self reader writer]
    (try
      (setv [pid uid gid] (peer-credentials (.get-extra-info writer "socket")))
      (except [e OSError]
        (await (_read-away reader))
        (return (_refusal f"the peer's credentials cannot be read ({e})"))))
    (when (not (peer-allowed uid self.uid))
      (record-evaluation self.env.store "repl" uid None None
                         None f"peer uid {uid} (pid {pid}) is not the daemon's")
      (await (_read-away reader))
      (return (_refusal "this REPL answers only the user the daemon runs as")))
    (setv inside (in-action-process pid))
    (when inside
      (record-evaluation self.env.store "repl" uid None None
                         None f"peer pid {pid} runs inside an action: {inside}")
      (await (_read-away reader))
      (return (_refusal (+ "this REPL answers people only, and the caller runs inside "
                           f"one of the agent's actions ({inside})"))))
    (try
      (setv line (await (asyncio.wait-for (.readline reader) READ-TIMEOUT)))
      (except [asyncio.TimeoutError]
        (return (_refusal f"no request within {READ-TIMEOUT :g} s")))
      (except [ValueError]
        (return (_refusal f"a request is at most {MAX-REQUEST} bytes"))))
    (when (not (.strip line))
      (return None))
    (try
      (setv [forms timeout] (_request line))
      (except [e ValueError]
        (return {"ok" False "error" f"bad request: {e}" "traceback" "" "output" ""})))
    (await (self.evaluate-request forms timeout uid)))

  (defn :async evaluate-request [self forms timeout uid]
    "The wire answer to FORMS from user UID: a :repl-eval signal through step."
    (import passepartout.loop [step])
    (setv rid (secrets.token-hex 16)
          signal [:type :event
                  :source [:gateway :repl :user uid]
                  :session "repl"
                  :payload [:sensor :repl-eval :forms forms :timeout timeout :uid uid :request rid]])
    (setv (get self.pending rid) self)
    (try
      (_answer-of (await (step signal self.env)))
      (except [e Exception]
        (.exception log "a REPL request failed")
        {"ok" False "error" f"Internal error: {(. (type e) __name__)}: {e}" "traceback" "" "output" ""})
      (finally
        (.pop self.pending rid None)))))

;; ** Running it

(defn :async start-repl [env [runner None] [path None] [uid None]]
  "A Repl listening on PATH (the runtime dir's repl.sock by default)."
  (await (.start (Repl env runner path uid))))

(defn :async serve-repl [env [runner None] [path None] [uid None]]
  "Serve the REPL socket until cancelled, then remove it."
  (try
    (setv repl (await (start-repl env runner path uid)))
    (except [e [ReplError OSError ConfigError]]
      (.error log "the REPL socket is not served: %s" e)
      (return None)))
  (try
    (await (.create-future (asyncio.get-running-loop)))
    (finally
      (await (.close repl)))))

(defclass ReplThread []
  "A REPL server on an event loop of its own thread."

  (defn __init__ [self env [path None] [uid None]]
    (setv self.env env
          self.want-path path
          self.uid uid
          self.ready (threading.Event)
          self.error None
          self.repl None
          self.path None
          self.loop None
          self.stopping None
          self.thread (threading.Thread :target (fn [] (asyncio.run (self._main)))
                                        :name "repl-server" :daemon True))
    (.start self.thread)
    (.wait self.ready 60)
    (when self.error
      (raise self.error)))

  (defn :async _main [self]
    (setv self.loop (asyncio.get-running-loop)
          self.stopping (asyncio.Event))
    (try
      (setv self.repl (await (start-repl self.env :path self.want-path :uid self.uid))
            self.path (str self.repl.path))
      (except [e Exception]
        (setv self.error e)
        (.set self.ready)
        (return None)))
    (.set self.ready)
    (await (.wait self.stopping))
    (await (.close self.repl)))

  (defn stop [self]
    "Close the socket and end the thread."
    (when (and self.loop (.is-alive self.thread))
      (.call-soon-threadsafe self.loop (. self.stopping set))
      (.join self.thread 30))))
