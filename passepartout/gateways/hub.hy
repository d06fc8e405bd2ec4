;; * Why

"A gateway is where people reach the agent: a Telegram bot, a Signal number.
The headless daemon (daemon.org) is one asyncio process that runs the
configured gateways and one runner (loop.org) for all of them. This module
is what stands between the gateways and that runner: the registry gateways
join, and the hub they hand what they receive to."

(import asyncio importlib logging re sqlite3 time uuid
        hy.models [Keyword]
        passepartout.config [ConfigError]
        passepartout.proto [ProtoError proto-get proto-put is-plist]
        passepartout.perceive [normalize-signal reply-signal session-name]
        passepartout.runner [Runner]
        passepartout.backoff [growing-pause]
        passepartout.task [ends-task ending]
        passepartout.display [display-text unicode-problem valid-unicode]
        passepartout.journal [journal-event]
        passepartout.mailbox [inbox-add inbox-done inbox-pending outbox-add outbox-sent outbox-failed outbox-give-up outbox-pending outbox-expire outbox-untold outbox-sessions])

(setv log (logging.getLogger "passepartout.gateways.hub"))

(setv _ATTEMPTS ':attempts
      _GATEWAY  ':gateway
      _ID       ':id
      _INBOX    ':inbox
      _KIND     ':kind
      _NEXT-TRY ':next-try
      _OUTBOX   ':outbox
      _PAYLOAD  ':payload
      _REPLY    ':reply
      _SESSION  ':session
      _SIGNAL   ':signal
      _SOURCE   ':source
      _TASK     ':task
      _TEXT     ':text
      _TYPE     ':type)

;; * The registry

(setv _name-re (re.compile r"[a-z][a-z0-9_]*\Z"))

(defn _module-gateway [name]
  "The GATEWAY of the module passepartout.gateways.NAME, or None when there is none."
  (setv module f"passepartout.gateways.{name}")
  (try
    (getattr (importlib.import-module module) "GATEWAY" None)
    (except [e ModuleNotFoundError]
      (when (!= e.name module) (raise))
      None)))

(defn find-gateway [services name]
  "The GATEWAY dict of the gateway NAME for the daemon SERVICES, or None."
  (or (.get services.gateways name)
      (when (_name-re.match name) (_module-gateway name))))

(defn configured-gateways [services]
  "The gateways the config of SERVICES enables and a daemon can run, built."
  (setv sections (.get services.config "gateways" {})
        out [])
  (when (not (isinstance sections dict))
    (raise (ConfigError "gateways should be a table of gateway tables")))
  (for [[name section] (.items sections)]
    (when (not (isinstance section dict))
      (raise (ConfigError f"gateways.{name} should be a table")))
    (when (not (.get section "enabled" True))
      (continue))
    (setv g (find-gateway services name))
    (cond
      (is g None) (.info log "gateways.%s: no such gateway here; left out" name)
      (not (.get g "headless" True)) (.info log "gateways.%s needs a terminal; the daemon leaves it out" name)
      True (.append out ((get g "factory") section services))))
  out)

;; * The hub

(defn _sent [store id session reply shown]
  "Mark the kept reply ID sent and, when it was SHOWN, journal that it reached
   its person: a turn of the task it ends, when it names one."
  (setv payload (or (proto-get reply _PAYLOAD) []))
  (outbox-sent store id)
  (when shown
    (journal-event store "delivered" session [_OUTBOX id _KIND (proto-get payload _KIND)
                                              _TASK (proto-get payload _TASK)])))

(defclass Undeliverable [Exception]
  "What a gateway's deliver raises for a reply that no retry will get out (the
   service refused the request as malformed, the person blocked the bot)."
  None)

(setv MAX-PIECES-KEPT 1024
      SEND-GRACE 10.0)

(defn :async send-pieces [sent key pieces send-one]
  "Send PIECES of one reply in order with (send-one index piece). SENT (a
   dict, the gateway's own) remembers under KEY how many went out, so that
   when a piece fails and the hub tries the reply again, the pieces before it
   are not sent twice; KEY is forgotten once the last piece is out."
  (setv start (.get sent key 0))
  (try
    (for [[i piece] (enumerate pieces)]
      (when (>= i start)
        (await (send-one i piece))
        (when (>= (len sent) MAX-PIECES-KEPT)
          (.clear sent))
        (setv (get sent key) (+ i 1))))
    (except [Undeliverable]
      ;; given up: it is not tried again, so nothing of it is kept
      (.pop sent key None)
      (raise)))
  (.pop sent key None))

(defn _gateway-of [source]
  (setv g (proto-get source _GATEWAY))
  (cond (is g None) None
        (isinstance g Keyword) g.name
        True (str g)))

(defclass Hub []
  "Between the gateways and the runner: what comes in is persisted before it
   is queued, and each reply goes to the gateway of its chat."

  (defn __init__ [self services gateways [concurrency 4] [fallback None]]
    "SERVICES are the daemon's. FALLBACK, if given, delivers the replies whose
     gateway is not running (the terminal chat shows them all)."
    (setv self.services services
          self.store services.store
          self.gateways (dfor g gateways (get g "name") g)
          self.fallback fallback
          self.runner (Runner services self.deliver :concurrency concurrency)
          self.writer services.writer
          self.accepting True
          self.held (set)
          self.unmarked {}
          self.locks {}
          self.untold (set)
          self.outstanding {}
          self.watchers {}
          self.sending (set))
    ;; background work: its workers' objectives come in, and their replies go out, here
    (setv self.workflows (hy.I.passepartout/background.Workflows services self))
    ;; routines: runs on a schedule, as workers (=routines.org=)
    (setv self.routines (hy.I.passepartout/routines.Routines services self)))

  (defn :async receive [self gateway key signal]
    "Persist SIGNAL, received by GATEWAY under KEY, then queue it. False when
     KEY was received before (a redelivery): it is neither stored nor queued again."
    (get (await (self._keep gateway [#(key signal)])) 0))

  (defn :async receive-batch [self gateway items]
    "Persist ITEMS that GATEWAY received together, in one transaction, then
     queue the new ones in order. An item is #(key signal), or #(key note True)
     for one the gateway answers itself (as claim records it, NOTE a plist). For each item,
     True when it is new, False for a redelivery."
    (await (self._keep gateway items)))

  (defn :async _keep [self gateway items [durable True]]
    "What receive, receive-batch and claim do: store ITEMS in one transaction
     and queue the new ones that need work; for each, whether it was new. With
     DURABLE, they are on the disk before this returns (and the gateway tells
     its service they arrived)."
    (setv ids (await (.call self.writer
                            (fn [store] (lfor item items (inbox-add store gateway #* item))))))
    (when durable
      (await (.durable self.writer)))
    (when self.accepting
      (for [[id item] (zip ids items)]
        (when (and (is-not id None) (not (and (> (len item) 2) (get item 2))))
          (await (self._submit id (get item 1))))))
    (lfor id ids (is-not id None)))

  (defn :async submit [self signal [key None]]
    "Persist SIGNAL under KEY (a fresh one when None) for the gateway of its
     source, then queue it; its session. The way in for what has no service
     to redeliver: the terminal, the REPL, the approvals service."
    (setv name (or (_gateway-of (or (proto-get signal _SOURCE) [])) "repl"))
    (await (self._keep name [#((or key (+ "local-" (. (uuid.uuid4) hex))) signal)] :durable False))
    (when (is-plist signal)
      (setv source (proto-get signal _SOURCE))
      (or (proto-get signal _SESSION) (when (is-plist source) (session-name source)))))

  (defn :async emit [self signal [key None]]
    "Deliver SIGNAL if it is a reply, else submit it under KEY (a service's output)."
    (if (= (proto-get signal _TYPE) _REPLY)
        (await (self.deliver signal))
        (await (self.submit signal key))))

  (defn :async idle [self session]
    (await (.idle self.runner session)))

  (defn :async stop [self session]
    (await (.stop self.runner session)))

  (defn [property] busy [self] self.runner.busy)

  (defn [property] queues [self] self.runner.queues)

  (defn :async claim [self gateway key [note "answered by the gateway"]]
    "Record KEY of GATEWAY as received and done; False when it was received before."
    (get (await (self._keep gateway [#(key [:note note] True)])) 0))

  (defn :async resume [self [gateway None]]
    "Queue again what was received and not answered before the last stop (of
     GATEWAY only, if given); how many. The replies still in the outbox wait
     for the outbox service, and their sessions' new replies behind them."
    (setv self.held (set (outbox-sessions self.store "pending"))
          self.untold (set (outbox-sessions self.store "expired"))
          rows (+ (inbox-pending self.store gateway)
                  ;; the workers' own rows come back with any gateway's
                  (if (and gateway (!= gateway "worker")) (inbox-pending self.store "worker") [])))
    (for [row rows]
      (await (self._submit (proto-get row _ID) (proto-get row _SIGNAL))))
    (await (.resume self.workflows))
    (await (.start self.routines))
    (len rows))

  (defn :async receive-with [self gateway key signal write #* args]
    "Receive SIGNAL as receive does, with (WRITE store #* ARGS) in the same
     commit: what its arrival changes besides. When WRITE returns False (what
     it would change was changed already), nothing is received. True when
     SIGNAL was received and KEY was new."
    (setv id (await (.call self.writer (fn [store]
                                         (when (is-not (write store #* args) False)
                                           (inbox-add store gateway key signal))))))
    (await (.durable self.writer))
    (when (and self.accepting (is-not id None))
      (await (self._submit id signal)))
    (is-not id None))

  (defn :async _submit [self id signal]
    (try
      (setv signal (normalize-signal signal)
            signal (proto-put signal _SOURCE (proto-put (proto-get signal _SOURCE) _INBOX id))
            why (unicode-problem (proto-get signal _PAYLOAD)))
      (when why
        (.info log "inbox row %s is not valid text (%s); its sender is told it was not read" id why)
        (await (self.deliver (ending (reply-signal signal (+ f"Your message was not read: it is not valid text ({why}). "
                                                             "Nothing was done with it; please send it again.")
                                                   "refusal"))))
        (return))
      (setv session (await (.submit self.runner (valid-unicode signal))))
      (except [e ProtoError]
        (.error log "inbox row %s holds a signal that cannot be handled (%s); it is set aside" id e)
        (await (.call self.writer inbox-done id))
        (return)))
    (.add (.setdefault self.outstanding session (set)) id)
    (when (in session self.untold)
      (await (self._tell-untold signal)))
    (when (not (in session self.watchers))
      (setv (get self.watchers session) (asyncio.create-task (self._watch session)))))

  (defn _quiet [self session]
    (and (.empty (get self.runner.queues session))
         (not (in session self.runner.busy))))

  (defn :async _watch [self session]
    "Mark the rows of SESSION done whenever it has nothing left to do."
    (try
      (while (.get self.outstanding session)
        (await (.idle self.runner session))
        (when (self._quiet session)
          (setv ids (.pop self.outstanding session))
          (for [id ids]
            (await (.call self.writer inbox-done id)))))
      (finally
        (.pop self.watchers session None))))

  (defn :async deliver [self reply]
    "Keep REPLY in the outbox, then send it through the gateway of its source.
     A reply that ends its task marks the task's inbox row done in the same
     commit; one to a session whose earlier replies wait is kept behind them."
    (setv source (proto-get reply _SOURCE [])
          session (proto-get reply _SESSION)
          name (or (_gateway-of source) "none")
          inbox (when (ends-task reply) (proto-get source _INBOX))
          reply (valid-unicode reply))
    (with [:async (self._lock session)]
      (setv waiting (in session self.held)
            id (await (.call self.writer outbox-add name session reply inbox)))
      (when (is-not inbox None)
        (.discard (.get self.outstanding session (set)) inbox))
      (when (not waiting)
        (await (self._sending (self._send id name session reply 0))))))

  (defn :async _sending [self send]
    "Run SEND (a reply going out) to its end even when whoever waits for it is
     cancelled (the daemon closing): a reply that went out is marked sent, so
     the next start does not send it again."
    (setv task (asyncio.ensure-future send))
    (.add self.sending task)
    (.add-done-callback task self.sending.discard)
    (await (asyncio.shield task)))

  (defn _lock [self session]
    "The lock that keeps the replies of SESSION in order."
    (or (.get self.locks session) (.setdefault self.locks session (asyncio.Lock))))

  (defn :async _send [self id name session reply attempts]
    "Send the kept reply ID; True when it went out. One that did not holds its
     session's later replies behind it until the retries get it out."
    (setv gateway (.get self.gateways name (when self.fallback {"deliver" self.fallback}))
          reply (valid-unicode reply)
          why None
          shown True)
    (if (is gateway None)
        (setv why "it has no running gateway to go to")
        (try
          (setv shown (is-not (await ((get gateway "deliver") reply)) False))
          (except [asyncio.CancelledError] (raise))
          (except [e Undeliverable]
            (.error log "gateway %s could not deliver a reply to %s and never will (%s); it is given up"
                    name session e)
            (await (.call self.writer outbox-give-up id))
            (.add self.untold session)
            (return True))
          (except [e Exception]
            (setv why f"{(. (type e) __name__)}: {e}"))))
    (when (is None why)
      ;; a crash between the send and this commit sends the reply again at the
      ;; next start: the one window of a reply given twice, kept to one commit
      (try
        (await (.call self.writer _sent id session reply shown))
        (except [e sqlite3.Error]
          ;; it went out: the step that gave it must not be taken again, and
          ;; the outbox pass marks it once the store takes writes again
          (.warning log "a reply to %s went out but could not be marked sent (%s); it is marked when the store allows"
                    session e)
          (setv (get self.unmarked id) #(session reply shown))))
      (return True))
    (setv pause (growing-pause (+ attempts 1) 300))
    (.warning log "a reply to %s could not be sent through %s (%s); it is kept and tried again in %s s: %s"
              session name why pause (display-text (cut (str (proto-get (proto-get reply _PAYLOAD []) _TEXT "")) 200)))
    (.add self.held session)
    (await (.call self.writer outbox-failed id (+ (time.time) pause)))
    False)

  (defn :async outbox-service [self [max-age 86400] [every 1.0]]
    "Send again what could not be sent, in order within each session, until
     it goes out or is older than MAX-AGE seconds; until cancelled."
    (while True
      (try
        (await (self._outbox-pass max-age))
        (when self.writer.dirty
          (await (.durable self.writer)))
        (except [asyncio.CancelledError] (raise))
        (except [Exception]
          (.exception log "the outbox pass failed")))
      (await (asyncio.sleep every))))

  (defn :async settle-outbox [self [timeout 10.0] [max-age 86400]]
    "Send what the outbox holds back now, until nothing is held or TIMEOUT
     seconds have passed; True when nothing is held. For a chat about to
     close: what it answered is shown before it goes."
    (setv deadline (+ (time.monotonic) timeout))
    (while (and self.held (< (time.monotonic) deadline))
      (await (self._outbox-pass max-age))
      (when self.held
        (await (asyncio.sleep 0.05))))
    (not self.held))

  (defn :async _outbox-pass [self max-age]
    ;; what went out is marked first, so that it is never taken as given up
    (for [[id args] (list (.items self.unmarked))]
      (try
        (await (.call self.writer _sent id #* args))
        (except [sqlite3.Error]
          (return)))
      (del (get self.unmarked id)))
    (setv now (time.time)
          expired (outbox-expire self.store (- now max-age)))
    (when expired
      (.warning log "replies to %s could not be sent for %s s and were given up; each person is told on their next message"
                (.join ", " (map str expired)) max-age)
      (.update self.untold expired))
    (for [session (list self.held)]
      ;; under the session's lock no new reply slips in between the last
      ;; pending one going out and the session being let go
      (with [:async (self._lock session)]
        (setv rows (outbox-pending self.store None session)
              clear True)
        (for [row rows]
          (when (or (> (proto-get row _NEXT-TRY) now)
                    (not (await (self._send (proto-get row _ID) (proto-get row _GATEWAY) session
                                            (proto-get row _REPLY) (proto-get row _ATTEMPTS)))))
            (setv clear False)
            (break)))
        (when clear
          (.discard self.held session)))))

  (defn :async _tell-untold [self signal]
    "Tell the person of SIGNAL's session of replies that expired unsent, once."
    (setv session (proto-get signal _SESSION))
    (.discard self.untold session)
    (setv rows (outbox-untold self.store session))
    (when rows
      (setv shown (lfor [_ r] (cut rows 3) (+ "  " (cut (str (proto-get (proto-get r _PAYLOAD []) _TEXT "")) 200)))
            text (+ f"{(len rows)} {(if (= (len rows) 1) "reply" "replies")} to you could not be delivered "
                    "while the service could not be reached, and " (if (= (len rows) 1) "was" "were")
                    " given up:\n" (.join "\n" shown)
                    (if (> (len rows) 3) "\n  …" "")))
      (await (self.deliver (reply-signal signal text "notice")))))

  (defn sessions [self]
    "The sessions the runner has seen."
    (list self.runner.queues))

  (defn :async drain [self [timeout None]]
    "Take no more input and wait, at most TIMEOUT seconds, until every session
     has finished; True when they all did."
    (setv self.accepting False)
    (defn :async all-done []
      (while (not (all (gfor s (list self.runner.queues) (self._quiet s))))
        (for [s (list self.runner.queues)]
          (await (.idle self.runner s))))
      ;; the watchers mark the last rows done once their sessions are quiet
      (await (asyncio.gather #* (list (.values self.watchers)))))
    (try
      (await (asyncio.wait-for (all-done) timeout))
      True
      (except [asyncio.TimeoutError] False)))

  (defn :async close [self]
    (.close self.routines)
    (.close self.workflows)
    (for [t (list (.values self.watchers))] (.cancel t))
    (await (asyncio.gather #* (.values self.watchers) :return-exceptions True))
    (await (.close self.runner))
    ;; replies already on their way are let go out, and marked, for a while
    (when self.sending
      (await (asyncio.wait (list self.sending) :timeout SEND-GRACE)))
    (.flush self.writer)))
