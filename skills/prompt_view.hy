;; * Why

"A fixed system prompt says the same to every task: the rules of the house, the
tool belt, and nothing of what the daemon knows about the person. The prompt is
therefore assembled for each model call from sections, each with a name, so
that a person can see what a message would be given (passepartout prompt,
/prompt) and edit what is theirs to edit."

;; * /prompt

;; * prompt-view: /prompt, the prompt a message would get

(require passepartout.macros [defskill])
(import re
        passepartout.context [context-runtime]
        passepartout.perceive [reply-signal sensor-of]
        passepartout.proto [proto-get proto-put]
        passepartout.prompt [prompt-report report-text configured-model]
        passepartout.history [task-history history-budget])

(setv _command-re (re.compile r"\s*/prompt(?:\s+(.*))?\Z" re.S))

(defn on-prompt [signal ctx]
  (setv text (proto-get (proto-get signal ':payload) ':text)
        m (when (and (in (sensor-of signal) #{"user-input" "chat-message"}) (isinstance text str))
            (.match _command-re text)))
  (when m
    (setv session (proto-get signal ':session)
          store (context-runtime ctx "store")
          services (context-runtime ctx "services")
          words (or (.group m 1) "")
          asked (proto-put signal ':payload (proto-put (proto-get signal ':payload) ':text words))
          config (or (context-runtime ctx "config") {})
          history (if store
                      (get (task-history store session None (getattr services "histories" None)
                                         :budget (history-budget config (getattr services "cascade" None)))
                           0)
                      [])
          report (prompt-report asked ctx history
                                :model (configured-model config)))
    [(reply-signal signal (report-text report :full False))]))

(setv on-prompt.commands [["/prompt [TEXT]" "the prompt TEXT would get here: each section with its token count, the history, the total"]])

(defskill prompt-view
  "/prompt: the prompt a message would get, section by section, answered here and never by the model."
  :priority 100
  :handlers [on-prompt])
