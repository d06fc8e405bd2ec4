;; * Why

(import contextlib threading
        hy.models [Keyword]
        passepartout.proto [literal-keywords :as hy is-plist proto-get proto-put]
        passepartout.skills [actuator-for skill-functions])

;; * Results

(defn error-result [message]
  "A failed result plist: (:status :error :error MESSAGE)."
  [:status :error :error message])

(defn _is-result [value]
  (and (is-plist value) (isinstance (proto-get value ':status) Keyword)))

(defn clip-output [data limit [total None]]
  "The bytes DATA as text, cut to LIMIT bytes, with a marker saying how much
   of TOTAL (the full size, by default len DATA) was cut.
   (clip-output b\"abcdef\" 3) ⇒ \"abc\\n[… 3 more bytes cut …]\""
  (setv total (if (is total None) (len data) total)
        text (.decode (bytes (cut data limit)) "utf-8" "replace"))
  (if (> total limit)
      (+ text f"\n[… {(- total limit)} more bytes cut …]")
      text))

;; * Dispatch

(defn action-name [action]
  "The name of ACTION's :action as text (\"shell\"), or None."
  (setv a (proto-get action ':action))
  (cond (isinstance a Keyword) a.name
        (isinstance a str) a
        True None))

(defn _run [name action ctx]
  (setv spec (when name (actuator-for name)))
  (when (is spec None)
    (return (error-result (if name f"no actuator for :{name}" "the action names no :action"))))
  (try
    (setv result ((get spec "run") action ctx))
    (except [e [Exception SystemExit]]
      (return (error-result f"actuator {name} failed: {(. (type e) __name__)}: {e}"))))
  (if (_is-result result)
      result
      (error-result f"actuator {name} returned no result plist")))

(defn _filtered [action result ctx]
  (for [[name f] (skill-functions "filter")]
    (setv out (try (f action result ctx)
                   (except [Exception] None)))
    (when (not (_is-result out))
      (return (error-result f"result withheld: filter {name} failed")))
    (setv result out))
  result)

(defn act [action ctx]
  "Run the allowed ACTION through its actuator and the result filters.
   (act [:action :message :text \"hi\"] ctx)
   ⇒ (:status :ok :reply \"hi\" :action-name \"message\")"
  (setv name (action-name action))
  (proto-put (_filtered action (_run name action ctx) ctx) ':action-name name))

;; * Stopping a session's task

(setv _stops-lock (threading.Lock)
      _stop-marks {}
      _doing {}
      _stop-listeners [])

(defn stop-mark [session]
  "How many times SESSION's task has been stopped."
  (with [_stops-lock] (.get _stop-marks session 0)))

(defn stopped-since [session mark]
  "True when SESSION was stopped after its count was MARK (None: never)."
  (and (is-not mark None) (!= (stop-mark session) mark)))

(defn [contextlib.contextmanager] doing [session what [kill None] [mark None]]
  "While the block runs, SESSION is doing WHAT (\"the command `ls`\"); a stop
   calls KILL. Yields a dict whose \"stopped\" turns true when a stop came, or
   is true from the start if SESSION was stopped since MARK."
  (setv record {"what" what "kill" kill "stopped" False})
  (with [_stops-lock]
    (when (and (is-not mark None) (!= (.get _stop-marks session 0) mark))
      (setv (get record "stopped") True))
    (.append (.setdefault _doing session []) record))
  (try
    (yield record)
    (finally
      (with [_stops-lock]
        (setv left (lfor r (.get _doing session []) :if (is-not r record) r))
        (if left
            (setv (get _doing session) left)
            (.pop _doing session None))))))

(defn add-stop-listener [f]
  "Call F with the session's name after each stop."
  (with [_stops-lock] (.append _stop-listeners f)))

(defn remove-stop-listener [f]
  (with [_stops-lock]
    (when (in f _stop-listeners) (.remove _stop-listeners f))))

(defn stop-session [session]
  "Stop SESSION's task: count the stop, kill what runs for it, tell the
   listeners. What was interrupted: a list of (what killed) pairs, oldest first."
  (with [_stops-lock]
    (setv (get _stop-marks session) (+ (.get _stop-marks session 0) 1)
          records (lfor r (.get _doing session []) :if (not (get r "stopped")) r)
          listeners (list _stop-listeners))
    (for [r records] (setv (get r "stopped") True)))
  (for [r records :if (get r "kill")]
    (try ((get r "kill"))
         (except [Exception] None)))
  (for [f listeners]
    (try (f session)
         (except [Exception] None)))
  (lfor r records #((get r "what") (bool (get r "kill")))))

(defn stop-text [interrupted]
  "The sentence that tells the person what the (what killed) pairs INTERRUPTED were.
   (stop-text []) ⇒ \"Stopped: nothing was running.\""
  (setv killed (lfor [w k] interrupted :if k w)
        abandoned (lfor [w k] interrupted :if (not k) w)
        parts (+ (lfor w killed f"{w} was killed")
                 (lfor w abandoned f"{w} was abandoned")))
  (if parts
      (+ "Stopped: " (.join "; " parts) ". Nothing more of that task will run.")
      "Stopped: nothing was running."))

(defn stop-task [session]
  "Stop SESSION's task now and say what was interrupted."
  (stop-text (stop-session session)))
