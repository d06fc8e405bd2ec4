;; * Why

"passepartout chat and passepartout daemon start the agent: the chat in
this process with the terminal as its one gateway, the daemon headless with the
configured gateways. passepartout prompt shows what one of its steps would
give the model for a message, without starting it."

(import sys
        passepartout.tools.cli [_gate-context]
        passepartout.tools.records [_journal-store])

;; * chat

(defn :async _chat [env interactive]
  (import asyncio
          pathlib [Path]
          passepartout.gateways.hub [Hub]
          passepartout.daemon [start-services stop-services]
          passepartout.console [serve-repl]
          passepartout.reload [watch-skills]
          passepartout.approvals.hitl [approvals-service]
          passepartout.gateways.terminal [chat-terminal chat-lines format-reply progress-kept])
  (setv progress {})
  (defn :async show [r] (print (format-reply r) :flush True))
  (defn :async deliver [r]
    ;; a running workflow's progress goes to the status line of the full terminal
    (when (not (and interactive (progress-kept progress r)))
      (await (show r))))
  (setv hub (Hub env [{"name" "terminal" "deliver" deliver}] :fallback show
                 :concurrency (get env.config "limits" "model_concurrency"))
        background [(asyncio.create-task (serve-repl env hub))
                    (asyncio.create-task (watch-skills env))
                    (asyncio.create-task (approvals-service env hub))
                    (asyncio.create-task (.outbox-service hub))])
  (await (start-services env))
  (try
    ;; what was left unfinished is answered before the first prompt
    (when (await (.resume hub "terminal"))
      (for [s (.sessions hub)] (await (.idle hub s))))
    (if interactive
        (await (chat-terminal hub :history-path (/ (Path (get env.config "data_dir")) "chat_history")
                              :progress progress))
        (await (chat-lines hub)))
    ;; what is still held back in the outbox (behind a reply a chat killed
    ;; before it was marked shown) is shown before the chat goes
    (await (.settle-outbox hub))
    (finally
      (for [t background] (.cancel t))
      (await (asyncio.gather #* background :return-exceptions True))
      (await (.close hub))
      (await (stop-services env)))))

(defn cmd-chat [args]
  (import asyncio
          passepartout.daemon [boot shutdown skill-failures]
          passepartout.sandbox [sandbox-summary])
  (setv env (boot :config-path args.config :workspace args.workspace :gates "process" :warm True))
  (for [line (skill-failures env)] (print "passepartout:" line :file sys.stderr))
  (print (+ "Passepartout — workspace " (get env.config "workspace") ". Type /help for the commands, /quit or Ctrl-D to leave."))
  (print (+ "Protection: " (sandbox-summary env.sandbox) "."))
  (try
    (asyncio.run (_chat env (and (.isatty sys.stdin) (.isatty sys.stdout))))
    (except [KeyboardInterrupt] (print)))
  (shutdown env)
  0)

;; * daemon

(defn cmd-daemon [args]
  (import passepartout.daemon [cmd-daemon :as run-daemon])
  (run-daemon args))

;; * prompt

(defn cmd-prompt [args]
  (import passepartout.prompt [prompt-report report-text configured-model]
          passepartout.history [task-history history-budget]
          passepartout.proto [proto-get proto-put])
  (setv ctx (_gate-context args)
        runtime (proto-get ctx ':runtime)
        config (get runtime "config")
        store (_journal-store args)
        session args.session
        signal [:type :event :session session :source [:gateway :terminal]
                :payload [:sensor :user-input :text (.join " " args.text)]])
  (setv (get runtime "store") store
        ctx (proto-put ctx ':session session))
  (try
    (setv history (if store (get (task-history store session None :budget (history-budget config)) 0) []))
    (print (report-text (prompt-report signal ctx history :model (configured-model config))
                        :full (not args.brief)))
    (finally (when store (.close store))))
  0)
