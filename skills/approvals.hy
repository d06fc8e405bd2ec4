;; * Why

"A person answers an approval by typing a command in the conversation they are
in, whatever the gateway. The commands are a pre-reason handler, so they are
answered by deterministic code in perceive and never reach a model: a model
cannot see a code being typed, and nothing it says can approve anything."

(require passepartout.macros [defskill])
(import re
        hy.models [Keyword]
        passepartout.proto [proto-get]
        passepartout.perceive [reply-signal]
        passepartout.context [context-runtime]
        passepartout.approvals.hitl [answer-approval revoke-grant pending-text grants-text
                           context-env identity-of pending-approvals]
        passepartout.approvals.grants [duration-minutes]
        passepartout.egress [host-word])

;; * Reading a command

(setv SENSORS #{"user-input" "chat-message" "callback"}
      _command-re (re.compile r"\s*/(approve|deny|pending|grants|revoke)(?:@[A-Za-z0-9_]+)?(?:\s+(.*?))?\s*\Z"
                              (| re.S re.I))
      _key-re (re.compile r"[A-Za-z0-9_-]{6,64}\Z")
      USAGE {"approve" "Write /approve CODE to run it once, /approve CODE 30m to also allow this kind of action here for 30 minutes, or /approve CODE 1h HOST to also let HOST through here for an hour."
             "deny" "Write /deny CODE, optionally followed by a reason."
             "revoke" "Write /revoke ID, with the number /grants shows."})

(defn parse-command [text]
  "The approvals command in TEXT as a plist, or None when TEXT is not one.
   (parse-command \"/approve kxmprt 30m\") ⇒ (:command \"approve\" :key \"kxmprt\" :minutes 30)"
  (setv m (and (isinstance text str) (.match _command-re text)))
  (when (not m) (return None))
  (setv name (.lower (.group m 1))
        words (.split (or (.group m 2) "") None 1)
        key (if words (get words 0) None)
        tail (if (> (len words) 1) (get words 1) ""))
  (cond
    (in name #("pending" "grants")) [:command name]
    (= name "revoke")
    (if (and key (not tail) (.isdigit (.lstrip key "#")))
        [:command name :id (int (.lstrip key "#"))]
        [:command "usage" :for name])
    (not (and key (.match _key-re key))) [:command "usage" :for name]
    (= name "deny") [:command name :key key :reason (or (.strip tail) None)]
    (not tail) [:command name :key key :minutes None]
    True
    (do (setv [minutes hosts] (grant-words tail))
        (cond (not (and minutes (> minutes 0))) [:command "usage" :for name]
              hosts [:command name :key key :minutes minutes :hosts hosts]
              True [:command name :key key :minutes minutes]))))

(defn grant-words [text]
  "#(minutes hosts) that the words TEXT after a code ask for (\"1h github.com\"),
   hosts None when it names none; #(None None) when TEXT is not a duration
   followed only by hosts."
  (setv words (.split text))
  (for [n [3 2 1]]
    (setv minutes (duration-minutes (.join " " (cut words 0 n)))
          rest (cut words n None))
    (when (and minutes (all (gfor w rest (host-word w))))
      (return #(minutes (or rest None)))))
  #(None None))

;; * Answering it

(setv ONE-WORD {"y" "/approve {code}" "yes" "/approve {code}" "a" "/approve {code} 30m"
                "n" "/deny {code}" "no" "/deny {code}"})

(defn one-word-command [text ctx session]
  "The approvals command that the single word TEXT stands for in SESSION, or None."
  (setv word (when (isinstance text str) (.lower (.strip text))))
  (when (not (in word ONE-WORD)) (return None))
  (setv services (context-runtime ctx "services")
        store (when services (getattr services "store" None)))
  (when (is store None) (return None))
  (setv waiting (pending-approvals store session))
  (when (= (len waiting) 1)
    (.format (get ONE-WORD word) :code (proto-get (get waiting 0) ':code))))

(defn approvals-handler [signal ctx]
  "The replies to an approvals command, or None when SIGNAL is not one."
  (setv payload (proto-get signal ':payload [])
        sensor (proto-get payload ':sensor))
  (when (not (and (isinstance sensor Keyword) (in sensor.name SENSORS)))
    (return None))
  (setv text (proto-get payload ':text)
        command (parse-command (or (one-word-command text ctx (proto-get signal ':session)) text)))
  (when (is command None)
    (return None))
  (setv name (proto-get command ':command)
        env (context-env ctx)
        who (identity-of (proto-get signal ':source))
        session (proto-get signal ':session))
  (defn answer [r]
    (+ [(reply-signal signal (proto-get r ':text) (if (proto-get r ':ok) "answer" "notice"))]
       (proto-get r ':emit)))
  (defn :async answered [choice #** more]
    (answer (await (answer-approval env who session (proto-get command ':key) choice #** more))))
  (cond
    (= name "usage") [(reply-signal signal (get USAGE (proto-get command ':for)) "notice")]
    (= name "pending") (answer (pending-text env who session))
    (= name "grants") [(reply-signal signal (grants-text env session))]
    (= name "revoke") (answer (revoke-grant env who session (proto-get command ':id)))
    (= name "deny") (answered "deny" :reason (proto-get command ':reason))
    True (answered "approve" :minutes (proto-get command ':minutes) :hosts (proto-get command ':hosts))))

(setv approvals-handler.commands
      [["/approve CODE [30m]" "run the action waiting for approval once, or also allow its kind here for a while (30m HOST: let HOST through)"]
       ["/deny CODE [reason]" "refuse it; the task that asked ends and is told why"]
       ["/pending" "the approvals waiting"]
       ["/grants" "the grants in force in this conversation"]
       ["/revoke ID" "end a grant now"]])

(defskill approvals
  "Answers /approve, /deny, /pending, /grants and /revoke before any model sees them."
  :priority 100
  :handlers [approvals-handler])
