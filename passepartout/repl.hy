;; * Why

"A Lisp core invites a developer to reach into the running program: look at the
registry, call a gate on an action, redefine a skill, all without a restart. The
daemon listens on a Unix socket in its runtime dir, and repl '(form)' (the
standard-library client, passepartout_repl.py) sends forms to it and prints
what they return."

(import asyncio logging os sys
        threading time traceback types
        importlib
        hy.errors [HyLanguageError]
        passepartout.proto [proto-get proto-put]
        passepartout.perceive [reply-signal sensor-of]
        passepartout.context [context-runtime]
        passepartout.records [event-append])

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
