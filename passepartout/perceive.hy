;; * Why

"Every gateway hands the loop what a person did, in its own shape. Perceive turns
it into one shape, a signal, names the session it belongs to, and gives the
pre-reason handlers their chance at it. A handler that claims a signal ends its
journey here: approval commands, slash commands and REPL forms are answered by
deterministic code and never reach a model. That matters most for approvals:
/approve CODE must not be something a model can see, repeat or imitate."

(import inspect
        hy.models [Keyword]
        passepartout.proto [ProtoError kw proto-get proto-put proto-values
                            proto-normalize is-plist]
        passepartout.context [context-runtime]
        passepartout.skills [pre-reason-handlers])

;; * Sessions

(defn session-name [source]
  "The session name of SOURCE, e.g. \"telegram:42\"."
  (setv gateway (proto-get source ':gateway)
        chat (proto-get source ':chat))
  (setv g (if (isinstance gateway Keyword) gateway.name (str (or gateway "local"))))
  (if (is chat None) g f"{g}:{chat}"))

;; * Normalising

(setv REASONED-SENSORS #{"user-input" "chat-message" "tool-result" "worker-objective"})

(defn normalize-signal [signal]
  "SIGNAL in the one shape the loop handles, or a ProtoError."
  (when (not (is-plist signal))
    (raise (ProtoError "a signal must be a plist")))
  (setv signal (proto-normalize signal)
        payload (proto-get signal ':payload))
  (when (not (is-plist payload))
    (raise (ProtoError "a signal needs a :payload plist")))
  (when (not (isinstance (proto-get payload ':sensor) Keyword))
    (raise (ProtoError "a signal's payload needs a :sensor keyword")))
  (setv source (proto-get signal ':source [:gateway :local]))
  (when (not (is-plist source))
    (raise (ProtoError "a signal's :source must be a plist")))
  (setv signal (proto-put (proto-put signal ':type ':event) ':source source))
  (if (proto-get signal ':session)
      signal
      (proto-put signal ':session (session-name source))))

(defn as-signal [signal]
  "SIGNAL itself when it already has the shape =normalize-signal= gives (the
   hub normalised it at the edge), else SIGNAL normalised: the check of the
   stages after the edge, which costs a few lookups instead of a walk."
  (setv [kind session source payload] (proto-values signal ':type ':session ':source ':payload))
  (if (and (= kind ':event)
           (isinstance session str)
           (is-plist source)
           (is-plist payload)
           (isinstance (proto-get payload ':sensor) Keyword))
      signal
      (normalize-signal signal)))

(defn sensor-of [signal]
  "The sensor name of SIGNAL, as a string."
  (setv s (proto-get (proto-get signal ':payload []) ':sensor))
  (if (isinstance s Keyword) s.name None))

;; * Pre-reason handlers

(defn reply-signal [signal text [kind "answer"]]
  "A reply to SIGNAL's session carrying TEXT."
  [:type :reply
   :session (proto-get signal ':session)
   :source (proto-get signal ':source)
   :payload [:kind (kw kind) :text text]])

(defn immediate [signal registry]
  "True when a handler of REGISTRY that must not wait its turn claims SIGNAL."
  (any (gfor [_ handler] (pre-reason-handlers registry)
             :if (callable (getattr handler "immediate" None))
             ((. handler immediate) signal))))

(defn :async perceive [signal ctx]
  "(:signal S) when S goes on to reason, (:handled-by NAME :emit [...]) when a
   handler answered, (:ignored REASON) when there is nothing to do. The
   handlers are those of the registry in CTX."
  (setv signal (as-signal signal))
  (for [[name handler] (pre-reason-handlers (context-runtime ctx "skills"))]
    (try
      (setv emitted (handler signal ctx))
      (when (inspect.isawaitable emitted)
        (setv emitted (await emitted)))
      (except [e Exception]
        (return [:handled-by name
                 :emit [(reply-signal signal f"{name} failed: {(. (type e) __name__)}: {e}" "error")]])))
    (when (is-not emitted None)
      (return [:handled-by name :emit (list emitted)])))
  (if (in (sensor-of signal) REASONED-SENSORS)
      [:signal signal]
      [:ignored (+ "no handler for sensor :" (str (sensor-of signal)))]))
