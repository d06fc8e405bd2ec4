;; * Why

"The core loop can do nothing by itself: every action it can take is an
actuator some skill registered. The built-in ones are ordinary skill files,
loaded like any person's own, so they can be read, replaced or disabled the
same way. skills-core.org is the source of the ones that act on the
workspace, the shell, memory and the conversation, and of /stop, /help
and /status; each of its blocks names the skill file it tangles into."

;; * status: what the daemon is doing for this conversation

(require passepartout.macros [defskill])
(import passepartout.budget [budget-limits day-usage usage-tokens]
        passepartout.context [context-runtime]
        passepartout.approvals.hitl [active-grants describe-scope pending-approvals]
        passepartout.perceive [reply-signal sensor-of slash-concerns]
        passepartout.proto [proto-get]
        passepartout.repl [running-text]
        passepartout.limits [limits-summary]
        passepartout.sandbox [sandbox-summary]
        passepartout.records [events kv-get HEARTBEAT-KEY])

(defn said [signal words]
  (setv text (proto-get (proto-get signal ':payload) ':text))
  (and (in (sensor-of signal) #{"user-input" "chat-message"})
       (isinstance text str)
       (in (.lower (.strip text)) words)))

(defn last-provider [store session]
  "The provider that answered SESSION last, from the outcomes in STORE, or None."
  (for [e (reversed (events store :kind "outcome" :session session :limit 20 :latest True))]
    (setv p (proto-get (proto-get e ':data) ':provider))
    (when p (return p)))
  None)

(defn _models [cascade last]
  (if (is cascade None)
      ["Models: not known in this process."]
      (+ ["Models (in the order they are tried):"]
         (lfor p (hy.I.passepartout/cascade.cascade-status cascade)
               :setv name (proto-get p ':provider)
               :setv state (. (proto-get p ':state) name)
               :setv model (proto-get p ':model)
               (+ f"  {name}" (if (= model name) "" f" ({model})") f": breaker {state}"
                  (if (proto-get p ':failures) f", {(proto-get p ':failures)} failures in a row" "")
                  (if (= name last) " — answered last" ""))))))

(defn _budget [store config now]
  (setv used (day-usage store now)
        limits (budget-limits config)
        cost (or (proto-get used ':cost) 0.0)
        tokens (get limits "day_tokens")
        dollars (get limits "day_cost"))
  [f"Spent today: {(usage-tokens used)} of {tokens} tokens, ${cost :.4f} of ${dollars :.2f}."])

(defn _approvals [store session now]
  (setv pending (pending-approvals store session)
        grants (active-grants store session now))
  [(if pending
       (+ f"Approvals waiting here: {(len pending)} (" (.join ", " (lfor a pending (proto-get a ':code))) ")")
       "Approvals waiting here: none")
   (if grants
       (+ "Grants in force here: " (.join "; " (lfor g grants (describe-scope (proto-get g ':scope)))))
       "Grants in force here: none")])

(defn _gateways [store now]
  "The gateways' states as the daemon's last heartbeat gave them, when one
   beat lately; the terminal chat, which has none, says it is alone."
  (setv beat (kv-get store HEARTBEAT-KEY))
  (when (or (not beat) (> (- now (or (proto-get beat ':time) 0)) 300))
    (return ["Gateways: this terminal chat only (no daemon runs the others)"]))
  (setv pairs (list (proto-get beat ':gateways []))
        states (lfor i (range 0 (len pairs) 2) f"{(get pairs i)}: {(get pairs (+ i 1))}"))
  [(+ "Gateways" (if (proto-get beat ':degraded) " (degraded)" "") ": "
      (or (.join "; " states) "none"))])

(defn status-text [ctx session]
  "The lines /status answers with, for SESSION in CTX."
  (setv store (context-runtime ctx "store")
        config (or (context-runtime ctx "config") {})
        now (proto-get ctx ':now))
  (.join "\n" (+ (_models (context-runtime ctx "cascade") (when store (last-provider store session)))
                 (if store (+ (_budget store config now) (_approvals store session now)
                              (_gateways store now))
                     [])
                 (_repl-forms ctx)
                 (if store [(+ "Memory: recalled " (hy.I.passepartout/memory.recall-summary store config) ".")
                            (+ "Dreaming: " (hy.I.passepartout/memory.dream-summary store config) ".")]
                     [])
                 [f"Workspace: {(proto-get ctx ':workspace)}"
                  (+ "Protection: " (sandbox-summary (proto-get ctx ':sandbox)) ".")
                  (+ "Limits: " (limits-summary config) ".")])))

(defn _repl-forms [ctx]
  "A line for each REPL request whose forms still run past their time."
  (setv repl (getattr (context-runtime ctx "services") "repl" None))
  (if repl
      (running-text repl.running)
      []))

(defn on-status [signal ctx]
  (when (said signal #{"/status"})
    [(reply-signal signal (status-text ctx (proto-get signal ':session)))]))

(setv on-status.commands [["/status" "the models and their breakers, today's spending, approvals and grants here, the gateways, the workspace and the sandbox"]])

(setv on-status.concerns (slash-concerns #{"user-input" "chat-message"}))

(defskill status
  "/status: what the daemon is doing for this conversation, answered here, never by the model."
  :priority 100
  :handlers [on-status])
