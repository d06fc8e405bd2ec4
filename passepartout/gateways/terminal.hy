;; * Why

"passepartout chat is the first thing a person runs, on a fresh machine, and
the place a developer watches the gates work. So it shows everything: each
action that ran, each proposal a gate refused and why, approvals with their code
(answered by typing /approve CODE at the same prompt), and, while the cascade
works, a \"thinking\" line with the time spent."

(import asyncio re sys time
        pathlib [Path]
        passepartout.act [action-name]
        passepartout.display [display-text]
        passepartout.proto [ProtoError proto-get proto-read is-plist]
        passepartout.perceive [session-name])

;; * What a reply looks like

(setv SOURCE [:gateway :terminal :chat "local" :user "local"]
      SESSION (session-name SOURCE)
      MARKS {"answer" "" "trace" "  · " "decision" "  ✗ " "notice" "! " "refusal" "✗ "
             "error" "✗ " "approval" "? "})

(setv KEYS-HINT "\nOr press y (once), a (also for 30 minutes) or n (deny), while it is the only one waiting.")

(defn _short [value [limit 60]]
  (setv text (if (isinstance value str) value (str value)))
  (if (> (len text) limit) (+ (cut text (- limit 1)) "…") text))

(defn action-text [action]
  "ACTION in a few words: `ls -la` for a shell command, read-file notes.txt, …"
  (setv name (action-name action))
  (cond (= name "shell") f"`{(proto-get action ':cmd)}`"
        (proto-get action ':path) f"{name} {(proto-get action ':path)}"
        True (.join " " (+ [(str name)]
                           (lfor [k v] (zip (cut action 0 None 2) (cut action 1 None 2))
                                 :if (not (in k.name #("action" "explanation")))
                                 f"{k.name}={(_short v)}")))))

(defn _split-action [text sep]
  "#(ACTION REST) when TEXT is a plist, SEP and the rest; else None."
  (for [m (re.finditer (re.escape sep) text)]
    (try (setv action (proto-read (cut text (.start m))))
         (except [ProtoError] (continue)))
    (when (and (is-plist action) (action-name action))
      (return #(action (cut text (.end m) None)))))
  None)

(defn readable [kind text]
  "TEXT of a trace or decision line with its action in words."
  (cond
    (and (= kind "trace") (.startswith text "ran "))
    (do (setv found (_split-action (cut text 4 None) " → "))
        (if found
            (+ "ran " (action-text (get found 0)) " → " (get found 1))
            text))
    (and (= kind "decision") (.startswith text "gate ") (in " refused " text))
    (do (setv [gate rest] (.split (cut text 5 None) " refused " 1)
              found (_split-action rest ": "))
        (if found
            (do (setv what (action-text (get found 0))
                      reason (get found 1))
                (when (.startswith reason what)
                  (setv reason (.lstrip (cut reason (len what) None) " —:")))
                f"{gate} refused {what}: {reason}")
            text))
    True text))

(defn format-reply [signal]
  "The text a terminal shows for the reply SIGNAL."
  (setv payload (proto-get signal ':payload [])
        kind (proto-get payload ':kind)
        name (if kind kind.name "answer")
        mark (.get MARKS name ""))
  (display-text (+ mark (readable name (str (or (proto-get payload ':text) "")))
                   (if (proto-get payload ':approval) KEYS-HINT ""))))

(defn user-input [text]
  "The signal of the person at the terminal saying TEXT."
  [:type :event :source SOURCE :payload [:sensor :user-input :text text]])

;; * What a typed line becomes

(setv LEAVE #{"/quit" "/exit" "exit" "quit"}
      ONE-KEY {"y" "/approve {code}" "a" "/approve {code} 30m" "n" "/deny {code}"})

(defn one-key [text codes]
  "#(LINE NOTE): the LINE to send for the typed TEXT when CODES are the codes of
   the approvals waiting here (None: send nothing), and a NOTE to show, if any."
  (setv key (.lower (.strip text)))
  (cond (or (not (in key ONE-KEY)) (not codes)) #(text None)
        (= (len codes) 1) #((.format (get ONE-KEY key) :code (get codes 0)) None)
        True #(None (+ (str (len codes)) " approvals are waiting here (" (.join ", " codes) "): "
                       "answer one with /approve CODE, /approve CODE 30m or /deny CODE."))))

(defn _waiting-codes [hub]
  (setv services (getattr hub "services" None)
        store (when services services.store))
  (if (is store None)
      []
      (lfor a (hy.I.passepartout/approvals/hitl.pending-approvals store SESSION) (proto-get a ':code))))

(defn :async _send [hub text show]
  "Send the typed TEXT; False when it asks to leave."
  (when (in (.lower (.strip text)) LEAVE)
    (return False))
  (setv [line note] (one-key text (_waiting-codes hub)))
  (when note (show note))
  (when line
    (await (.submit hub (user-input line))))
  True)

;; * Line by line

(defn :async chat-lines [hub [read-line None] [show print]]
  "Chat over plain lines until end of input or /quit."
  (when (and (is read-line None) (callable (getattr sys.stdin "reconfigure" None)))
    (.reconfigure sys.stdin :errors "surrogateescape"))
  (setv read-line (or read-line (fn [] (input "you> "))))
  (while True
    (try
      (setv line (await (asyncio.to-thread read-line)))
      (except [EOFError] (break)))
    (when (.strip line)
      (when (not (await (_send hub line show)))
        (break))
      (await (.idle hub SESSION)))))

;; * The full terminal

(defn progress-kept [progress signal]
  "True when the reply SIGNAL is a running workflow's progress, now kept in
   PROGRESS for the status line rather than printed; a finished workflow's
   progress leaves PROGRESS and is printed."
  (setv payload (proto-get signal ':payload [])
        key (proto-get payload ':progress-key))
  (cond (is key None) False
        (proto-get payload ':finished) (do (.pop progress key None) False)
        True (do (setv (get progress key) (display-text (str (or (proto-get payload ':text) ""))))
                 True)))

(defn status-line [busy-for progress]
  "The toolbar's text: how long the task has been thinking (BUSY-FOR seconds,
   or None when idle) and the progress of each running workflow."
  (setv head (if (is busy-for None)
                 "Enter sends · Esc Enter: new line · /help · Ctrl-C stops a task · Ctrl-D or /quit leaves"
                 f"thinking… {busy-for :.1f} s   (Ctrl-C stops it)"))
  (.join "\n" [#* (.values progress) head]))

(defn _busy [hub]
  (or (in SESSION hub.busy)
      (and (in SESSION hub.queues) (not (.empty (get hub.queues SESSION))))))

(defn _key-bindings [[hub None]]
  (import prompt_toolkit.key_binding [KeyBindings]
          prompt_toolkit.filters [Condition]
          prompt_toolkit.application [get-app])
  (setv kb (KeyBindings))
  (defn [(.add kb "escape" "enter")] newline [event]
    (.insert-text event.current-buffer "\n"))
  (when hub
    (setv one-waiting (Condition (fn [] (and (= (. (get-app) current-buffer text) "")
                                             (= (len (_waiting-codes hub)) 1)))))
    (for [key ONE-KEY]
      (defn answer [event [key key]]
        (setv buffer event.current-buffer
              buffer.text key)
        (.validate-and-handle buffer))
      ((.add kb key :filter one-waiting) answer)))
  kb)

(defn command-words [hub]
  "The slash commands a person can type here, for Tab to complete."
  (setv services (getattr hub "services" None)
        registry (when services (getattr services "skills" None))
        words (set LEAVE))
  (when registry
    (for [[_ handler] (hy.I.passepartout/skills.pre-reason-handlers registry)
          [usage _] (or (getattr handler "commands" None) [])]
      (.add words (get (.split usage) 0))))
  (sorted (gfor w words :if (.startswith w "/") w)))

(defn _completer [hub]
  (import prompt_toolkit.completion [WordCompleter])
  (WordCompleter (command-words hub) :sentence True
                 :pattern (re.compile r"^/\S*")))

(defn _private-file [path]
  "Make the file PATH if it is missing, readable by its owner alone (0600)."
  (import os)
  (os.close (os.open (str path) (| os.O-WRONLY os.O-CREAT os.O-APPEND) 0o600))
  (os.chmod (str path) 0o600))

(defn :async chat-terminal [hub [history-path None] [input None] [output None] [show print]
                            [progress None]]
  "Chat in a prompt_toolkit terminal until Ctrl-D or /quit. PROGRESS is the
   table of running workflows' progress lines (see =progress-kept=)."
  (import prompt_toolkit [PromptSession]
          prompt_toolkit.history [FileHistory InMemoryHistory]
          prompt_toolkit.patch_stdout [patch-stdout])
  (setv started [None]
        progress (if (is progress None) {} progress))
  (defn toolbar []
    (if (_busy hub)
        (when (is (get started 0) None) (setv (get started 0) (time.monotonic)))
        (setv (get started 0) None))
    (status-line (when (get started 0) (- (time.monotonic) (get started 0))) progress))
  (when history-path
    (_private-file history-path))
  (setv session (PromptSession :history (if history-path (FileHistory (str history-path)) (InMemoryHistory))
                               :key-bindings (_key-bindings hub)
                               :completer (_completer hub)
                               :complete-while-typing False
                               :bottom-toolbar toolbar
                               :refresh-interval 0.5
                               :input input
                               :output output))
  (with [_ (patch-stdout :raw True)]
    (while True
      (try
        (setv text (await (.prompt-async session "you> ")))
        (except [KeyboardInterrupt]
          (if (_busy hub)
              (await (.submit hub (user-input "/stop")))
              (show "(Ctrl-D leaves)"))
          (continue))
        (except [EOFError] (break)))
      (when (and (.strip text) (not (await (_send hub text show))))
        (break))))
  (await (.idle hub SESSION)))
