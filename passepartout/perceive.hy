;; * Why

"Every gateway hands the loop what a person did, in its own shape. Perceive turns
it into one shape, a signal, names the session it belongs to, and gives the
pre-reason handlers their chance at it. A handler that claims a signal ends its
journey here: approval commands, slash commands and REPL forms are answered by
deterministic code and never reach a model. That matters most for approvals:
/approve CODE must not be something a model can see, repeat or imitate."

(import inspect re
        hy.models [Keyword]
        passepartout.proto [ProtoError kw proto-get proto-put proto-values
                            proto-normalize is-plist]
        passepartout.context [context-runtime]
        passepartout.skills [pre-reason-handlers registry-view])

(setv _CHAT       ':chat
      _EMIT       ':emit
      _EVENT      ':event
      _GATEWAY    ':gateway
      _HANDLED-BY ':handled-by
      _KIND       ':kind
      _PAYLOAD    ':payload
      _REPLY      ':reply
      _SENSOR     ':sensor
      _SESSION    ':session
      _SOURCE     ':source
      _TEXT       ':text
      _TYPE       ':type)

;; * Sessions

(defn session-name [source]
  "The session name of SOURCE, e.g. \"telegram:42\"."
  (setv gateway (proto-get source _GATEWAY)
        chat (proto-get source _CHAT))
  (setv g (if (isinstance gateway Keyword) gateway.name (str (or gateway "local"))))
  (if (is chat None) g f"{g}:{chat}"))

;; * Normalising

(setv REASONED-SENSORS #{"user-input" "chat-message" "tool-result" "worker-objective"})

(defn normalize-signal [signal]
  "SIGNAL in the one shape the loop handles, or a ProtoError."
  (when (not (is-plist signal))
    (raise (ProtoError "a signal must be a plist")))
  (setv signal (proto-normalize signal)
        payload (proto-get signal _PAYLOAD))
  (when (not (is-plist payload))
    (raise (ProtoError "a signal needs a :payload plist")))
  (when (not (isinstance (proto-get payload _SENSOR) Keyword))
    (raise (ProtoError "a signal's payload needs a :sensor keyword")))
  (setv source (proto-get signal _SOURCE [:gateway :local]))
  (when (not (is-plist source))
    (raise (ProtoError "a signal's :source must be a plist")))
  (setv signal (proto-put (proto-put signal _TYPE _EVENT) _SOURCE source))
  (if (proto-get signal _SESSION)
      signal
      (proto-put signal _SESSION (session-name source))))

(defn as-signal [signal]
  "SIGNAL itself when it already has the shape =normalize-signal= gives (the
   hub normalised it at the edge), else SIGNAL normalised: the check of the
   stages after the edge, which costs a few lookups instead of a walk."
  (setv [kind session source payload] (proto-values signal _TYPE _SESSION _SOURCE _PAYLOAD))
  (if (and (= kind _EVENT)
           (isinstance session str)
           (is-plist source)
           (is-plist payload)
           (isinstance (proto-get payload _SENSOR) Keyword))
      signal
      (normalize-signal signal)))

(defn sensor-of [signal]
  "The sensor name of SIGNAL, as a string."
  (setv s (proto-get (proto-get signal _PAYLOAD []) _SENSOR))
  (if (isinstance s Keyword) s.name None))

;; * Pre-reason handlers

(setv SLASH (re.compile r"\s*/"))

(defn slash-concerns [sensors]
  "The =concerns= of a handler that answers commands beginning with / from SENSORS."
  (dfor s sensors s SLASH))

(defn reply-signal [signal text [kind "answer"]]
  "A reply to SIGNAL's session carrying TEXT."
  [_TYPE _REPLY
   _SESSION (proto-get signal _SESSION)
   _SOURCE (proto-get signal _SOURCE)
   _PAYLOAD [_KIND (kw kind) _TEXT text]])

(defn _handlers [registry]
  "#(handlers immediate) of REGISTRY: each handler as #(name handler concerns),
   in skill order, and the handlers that must not wait their turn."
  (registry-view registry "perceive-handlers"
                 (fn []
                   (setv all (lfor [name h] (pre-reason-handlers registry)
                                   #(name h (getattr h "concerns" None))))
                   #(all (lfor [name h concerns] all
                               :if (callable (getattr h "immediate" None))
                               #(name h concerns))))))

(defn _concerned [concerns payload]
  "True when a handler declaring CONCERNS is to see a signal with PAYLOAD."
  (when (is concerns None) (return True))
  (setv sensor (proto-get payload _SENSOR)
        pattern (.get concerns (if (isinstance sensor Keyword) sensor.name sensor) False))
  (cond (is pattern False) False
        (is pattern None) True
        True (do (setv text (proto-get payload _TEXT))
                 (and (isinstance text str) (is-not (.match pattern text) None)))))

(defn immediate [signal registry]
  "True when a handler of REGISTRY that must not wait its turn claims SIGNAL."
  (setv handlers (get (_handlers registry) 1))
  (and handlers
       (do (setv payload (proto-get signal _PAYLOAD))
           (any (gfor [_ handler concerns] handlers
                      :if (_concerned concerns payload)
                      ((. handler immediate) signal))))))

(defn :async perceive [signal ctx]
  "(:signal S) when S goes on to reason, (:handled-by NAME :emit [...]) when a
   handler answered, (:ignored REASON) when there is nothing to do. The
   handlers are those of the registry in CTX."
  (setv signal (as-signal signal)
        payload (proto-get signal _PAYLOAD))
  (for [[name handler concerns] (get (_handlers (context-runtime ctx "skills")) 0)]
    (when (not (_concerned concerns payload))
      (continue))
    (try
      (setv emitted (handler signal ctx))
      (when (inspect.isawaitable emitted)
        (setv emitted (await emitted)))
      (except [e Exception]
        (return [_HANDLED-BY name
                 _EMIT [(reply-signal signal f"{name} failed: {(. (type e) __name__)}: {e}" "error")]])))
    (when (is-not emitted None)
      (return [_HANDLED-BY name _EMIT (list emitted)])))
  (if (in (sensor-of signal) REASONED-SENSORS)
      [:signal signal]
      [:ignored (+ "no handler for sensor :" (str (sensor-of signal)))]))
