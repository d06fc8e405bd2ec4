;; * Why

"The core loop can do nothing by itself: every action it can take is an
actuator some skill registered. The built-in ones are ordinary skill files,
loaded like any person's own, so they can be read, replaced or disabled the
same way. skills-core.org is the source of the ones that act on the
workspace, the shell, memory and the conversation, and of /stop, /help
and /status; each of its blocks names the skill file it tangles into."

;; * memory-actions: the model's long-term notes

(require passepartout.macros [defskill])
(import re
        passepartout.act [error-result]
        passepartout.context [context-runtime]
        passepartout.perceive [reply-signal sensor-of]
        passepartout.proto [proto-get]
        passepartout.secrets [find-secrets secret-kinds secret-tuple])

(setv MAX-HITS 50)

(defn _store [ctx]
  (context-runtime ctx "store"))

(defn run-memory-add [action ctx]
  (setv text (proto-get action ':text)
        store (_store ctx))
  (cond (not (and (isinstance text str) (.strip text)))
        (error-result "memory-add needs :text")
        (is store None)
        (error-result "there is no memory store")
        True
        [:status :ok
         :id (hy.I.passepartout/memory.memory-add store text :session (proto-get ctx ':session))]))

(defn run-memory-search [action ctx]
  (setv query (proto-get action ':query)
        limit (proto-get action ':limit 5)
        store (_store ctx))
  (when (or (not (isinstance limit int)) (isinstance limit bool) (< limit 1))
    (setv limit 5))
  (cond (not (and (isinstance query str) (.strip query)))
        (error-result "memory-search needs :query")
        (is store None)
        (error-result "there is no memory store")
        True
        [:status :ok
         :hits (list (hy.I.passepartout/memory.memory-search store query :limit (min limit MAX-HITS)))]))

(setv _command-re (re.compile r"\s*/(remember|forget|memories|dream)(?:\s+(.*))?\Z" (| re.S re.I)))

(defn _command [signal]
  "#(command rest) when SIGNAL is a person saying a memory command, else None."
  (setv text (proto-get (proto-get signal ':payload) ':text)
        m (when (and (in (sensor-of signal) #{"user-input" "chat-message"}) (isinstance text str))
            (.match _command-re text)))
  (when m #((.lower (.group m 1)) (.strip (or (.group m 2) "")))))

(defn _remember [store text ctx session]
  (setv found (find-secrets text (secret-tuple (proto-get ctx ':secrets))))
  (cond (not text) "Say what to remember: /remember TEXT."
        found (+ "Not remembered: the text holds a secret (" (.join ", " (secret-kinds found))
                 "). Keep it where it is kept, and remember where that is.")
        True (do (setv i (hy.I.passepartout/memory.memory-add store text :session session))
                 f"Remembered as note {i}.")))

(defn _forget [store text session]
  (setv memory hy.I.passepartout/memory)
  (cond (not text) "Say what to forget: /forget N (a note's number) or /forget WORDS."
        (.isdigit text)
        (if (memory.memory-forget-id store (int text) session)
            f"Forgot note {text}."
            f"There is no note {text}.")
        True (do (setv [turn n] (memory.memory-forget store text session))
                 f"Forgot {n} notes holding {text !r}; a note saying it again will be dropped when memory is consolidated (change #{turn}).")))

(defn _memories [store text]
  (setv memory hy.I.passepartout/memory
        hits (if text
                 (memory.memory-search store text :limit 20)
                 (lfor [i ts t] (.query store "SELECT id, ts, text FROM memory ORDER BY id DESC LIMIT 20")
                       [:id i :ts ts :text t])))
  (if hits
      (.join "\n" (gfor h hits f"[{(proto-get h ':id)}] {(proto-get h ':text)}"))
      (if text f"No note matches {text !r}." "Memory is empty.")))

(defn _dream [store]
  (setv r (hy.I.passepartout/memory.dream store))
  (+ f"Memory consolidated: {(proto-get r ':before)} notes before, {(proto-get r ':after)} after; "
     f"{(proto-get r ':merged)} merged, {(proto-get r ':forgotten)} forgotten, {(proto-get r ':stale)} marked stale. "
     "`passepartout memory history` lists the changes, `passepartout memory revert TURN` undoes one."))

(defn on-memory-command [signal ctx]
  (setv found (_command signal))
  (when found
    (setv [command text] found
          store (_store ctx)
          session (proto-get signal ':session))
    [(reply-signal signal
                   (cond (is store None) "There is no memory store here."
                         (= command "remember") (_remember store text ctx session)
                         (= command "forget") (_forget store text session)
                         (= command "memories") (_memories store text)
                         True (_dream store)))]))

(setv on-memory-command.commands
      [["/remember TEXT" "keep TEXT in long-term memory (a text holding a secret is refused)"]
       ["/forget N|WORDS" "drop note N, or the notes holding all of WORDS (and any that say it later)"]
       ["/memories [WORDS]" "the latest notes, or those matching WORDS"]
       ["/dream" "consolidate memory now: merge near-duplicates, drop what was forgotten, mark stale notes"]])

(defskill memory-actions
  "Adds to and searches the long-term memory; /remember, /forget, /memories and /dream."
  :priority 10
  :handlers [on-memory-command]
  :actuators {"memory-add" {"run" run-memory-add
                            "schema" [:text [:type "string" :required True
                                             :doc "the fact or note to remember"]]
                            "doc" "Store a note in long-term memory."
                            "effect" True}
              "memory-search" {"run" run-memory-search
                               "schema" [:query [:type "string" :required True
                                                 :doc "words to look for"]
                                         :limit [:type "integer" :required False
                                                 :doc "at most this many hits (default 5)"]]
                               "doc" "Search long-term memory for notes matching QUERY."
                               "effect" False}})
