;; * Why

"The gates can be wrong and the sandbox keeps a wrong command inside the
workspace, but inside the workspace it can still do damage: delete the work
of an afternoon, rewrite .git, fill a file with nonsense. So before every
action that may write, the workspace is checkpointed, and /undo puts it back
as it was before the last action (/undo N: before the N-th last), /changes
says what an action changed. A checkpoint is a turn of the journal, and so is
an undo."

;; * /undo and /changes

(require passepartout.macros [defskill])
(import asyncio re time
        passepartout.checkpoint [keeper-for keeper-why counts]
        passepartout.context [context-runtime]
        passepartout.approvals.hitl [identity-of]
        passepartout.journal [journal-append]
        passepartout.limits [size-text]
        passepartout.perceive [reply-signal sensor-of]
        passepartout.proto [proto-get])

(setv SENSORS #{"user-input" "chat-message"}
      _command-re (re.compile r"\s*/(undo|changes)(?:@[A-Za-z0-9_]+)?(?:\s+(.*?))?\s*\Z" (| re.S re.I))
      SHOWN 40)

(defn parse-command [text]
  "#(name n) for /undo [N] or /changes [N] in TEXT, #(name None) when N is not
   a positive number, or None when TEXT is neither."
  (setv m (and (isinstance text str) (.match _command-re text)))
  (when (not m) (return None))
  (setv arg (.strip (or (.group m 2) "")))
  #((.lower (.group m 1))
    (cond (not arg) 1
          (and (.isdigit arg) (> (int arg) 0)) (int arg)
          True None)))

(defn _size [d]
  (cond (is d None) "—"
        (= (get d "kind") "dir") "folder"
        (= (get d "kind") "link") f"link to {(get d "target")}"
        True (size-text (get d "size"))))

(defn _ago [t now]
  (setv s (int (max 0 (- now t))))
  (cond (< s 90) f"{s} s ago"
        (< s 5400) f"{(// s 60)} min ago"
        (< s 172800) f"{(// s 3600)} h ago"
        True f"{(// s 86400)} days ago"))

(defn changes-text [m now]
  "What the checkpoint manifest M records, as lines for a person."
  (setv changes (get m "changes")
        [a c r] (counts changes)
        lines [(+ f"Checkpoint {(get m "id")}, {(_ago (get m "time") now)}: {(get m "what")}"
                  f" — {a} added, {c} changed, {r} removed:")])
  (for [[rel before after] (cut changes SHOWN)]
    (.append lines (cond (is before None) f"  + {rel} ({(_size after)})"
                         (is after None) f"  - {rel} (was {(_size before)})"
                         True f"  ~ {rel} ({(_size before)} → {(_size after)})")))
  (when (> (len changes) SHOWN)
    (.append lines f"  … and {(- (len changes) SHOWN)} more"))
  (.join "\n" lines))

(defn :async _on-changes [signal ctx n keeper]
  (setv kept (await (asyncio.to-thread keeper.kept)))
  (if (< (len kept) n)
      (if kept
          f"Only {(len kept)} checkpoint{(if (= (len kept) 1) "" "s")} kept; /changes {(len kept)} is the oldest."
          "No action has changed the workspace since the checkpoints began (or all were undone).")
      (changes-text (get kept (- n 1)) (proto-get ctx ':now))))

(defn :async _on-undo [signal ctx n keeper]
  (setv out (await (asyncio.to-thread keeper.undo n)))
  (when (in "error" out)
    (return (reply-signal signal (+ "Nothing was undone: " (get out "error") ".") "notice")))
  (setv ids (lfor m (get out "undone") (get m "id"))
        store (context-runtime ctx "store"))
  (when store
    (journal-append store [:event "undo" :session (proto-get signal ':session) :turn "action"
                           :data [:undone ids :restored (get out "restored") :removed (get out "removed")
                                  :missing (get out "missing")
                                  :who (identity-of (proto-get signal ':source))]]))
  (setv oldest (get (get out "undone") -1))
  (reply-signal signal
                (+ f"Undone: the workspace is back to before {(get oldest "what")}"
                   (if (> (len ids) 1) f" and the {(- (len ids) 1)} action{(if (> (len ids) 2) "s" "")} after it" "")
                   f" (checkpoint{(if (> (len ids) 1) "s" "")} {(.join ", " (map str ids))}): "
                   f"{(get out "restored")} restored, {(get out "removed")} removed."
                   (if (get out "missing")
                       (+ " Not restored (too large to keep, unreadable, or in the way): "
                          (.join ", " (cut (get out "missing") 10)) ".")
                       ""))))

(defn on-undo-or-changes [signal ctx]
  (setv payload (proto-get signal ':payload [])
        command (when (in (sensor-of signal) SENSORS) (parse-command (proto-get payload ':text))))
  (when (is command None) (return None))
  (setv [name n] command
        keeper (keeper-for ctx))
  (cond
    (is n None)
    [(reply-signal signal f"Write /{name} for the last action, or /{name} N for the N-th last." "notice")]
    (is keeper None)
    [(reply-signal signal f"No checkpoints are kept here: {(keeper-why ctx)}." "notice")]
    (= name "changes")
    ((fn :async [] [(reply-signal signal (await (_on-changes signal ctx n keeper)))]))
    True
    ((fn :async [] [(await (_on-undo signal ctx n keeper))]))))

(setv on-undo-or-changes.commands
      [["/undo [N]" "put the workspace back as it was before the last action that changed it (or the N-th last)"]
       ["/changes [N]" "what the last action that changed the workspace changed (or the N-th last)"]])

(defskill undo
  "/undo and /changes: checkpoints of the workspace, answered here, never by the model."
  :priority 100
  :handlers [on-undo-or-changes])
