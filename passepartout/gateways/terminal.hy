(import asyncio sys time
        pathlib [Path]
        passepartout.proto [proto-get]
        passepartout.perceive [session-name])

(setv SOURCE [:gateway :terminal :chat "local" :user "local"]
      SESSION (session-name SOURCE)
      MARKS {"answer" "" "trace" "  · " "decision" "  ✗ " "notice" "! " "refusal" "✗ "
             "error" "✗ " "approval" "? "})

(defn format-reply [signal]
  "The text a terminal shows for the reply SIGNAL."
  (setv payload (proto-get signal ':payload [])
        kind (proto-get payload ':kind)
        mark (.get MARKS (if kind kind.name "answer") ""))
  (+ mark (str (or (proto-get payload ':text) ""))))

(defn user-input [text]
  "The signal of the person at the terminal saying TEXT."
  [:type :event :source SOURCE :payload [:sensor :user-input :text text]])

(defn :async chat-lines [runner [read-line None] [show print]]
  "Chat over plain lines until end of input."
  (setv read-line (or read-line (fn [] (input "you> "))))
  (while True
    (try
      (setv line (await (asyncio.to-thread read-line)))
      (except [EOFError] (break)))
    (when (.strip line)
      (await (.submit runner (user-input line)))
      (await (.idle runner SESSION)))))

(defn _busy [runner]
  (or (in SESSION runner.busy)
      (and (in SESSION runner.queues) (not (.empty (get runner.queues SESSION))))))

(defn _key-bindings []
  (import prompt_toolkit.key_binding [KeyBindings])
  (setv kb (KeyBindings))
  (defn [(.add kb "escape" "enter")] newline [event]
    (.insert-text event.current-buffer "\n"))
  kb)

(defn :async chat-terminal [runner [history-path None] [input None] [output None] [show print]]
  "Chat in a prompt_toolkit terminal until Ctrl-D."
  (import prompt_toolkit [PromptSession]
          prompt_toolkit.history [FileHistory InMemoryHistory]
          prompt_toolkit.patch_stdout [patch-stdout])
  (setv started [None])
  (defn toolbar []
    (if (_busy runner)
        (do (when (is (get started 0) None) (setv (get started 0) (time.monotonic)))
            f"thinking… {(- (time.monotonic) (get started 0)) :.1f} s   (Ctrl-C stops it)")
        (do (setv (get started 0) None)
            "Enter sends · Esc Enter: new line · Ctrl-C stops a task · Ctrl-D leaves")))
  (setv session (PromptSession :history (if history-path (FileHistory (str history-path)) (InMemoryHistory))
                               :key-bindings (_key-bindings)
                               :bottom-toolbar toolbar
                               :refresh-interval 0.5
                               :input input
                               :output output))
  (with [_ (patch-stdout :raw True)]
    (while True
      (try
        (setv text (await (.prompt-async session "you> ")))
        (except [KeyboardInterrupt]
          (if (_busy runner)
              (await (.submit runner (user-input "/stop")))
              (show "(Ctrl-D leaves)"))
          (continue))
        (except [EOFError] (break)))
      (when (.strip text)
        (await (.submit runner (user-input text))))))
  (await (.idle runner SESSION)))
