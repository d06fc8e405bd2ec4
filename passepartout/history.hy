;; * Why

"The model is given what its task depends on, not the last turns of its
session: the conversation (what the person said and what was answered) and its
own thread (its input and the result of every action it took, approvals
answered elsewhere included: they carry the task's id). The actions of earlier
tasks and their raw results are not in it; they reach the task through the
answers that reported them, which is what the person saw too. The turns come
from the events table, so a restart loses none of them. What the built-in
fallback answered while no model could is left out (its answers are marked
:by \"fallback\"): a model must not read those words as its own."

(import inspect logging math sys threading time
        collections [OrderedDict]
        passepartout.proto [proto-get proto-print]
        passepartout.reason [with-call]
        passepartout.secrets [redact-text secret-tuple]
        passepartout.records [events data-read])

(setv log (logging.getLogger "passepartout.history"))

(setv HISTORY-TURNS 20
      HISTORY-KEEP 120
      HISTORY-KINDS ["input" "answer" "result"]
      SAID-KINDS ["input" "answer"]
      DEFAULT-CONTEXT 8192
      LOW-WATER 0.5)

(defn _turn [e]
  "#(kind task message id) for the event E."
  (setv data (proto-get e _DATA [])
        kind (proto-get e _KIND)
        task (proto-get data _TASK))
  #(kind (if (is task None) None (str task))
    (cond
      (= kind "input")
      {"role" "user" "content" (str (or (proto-get data _TEXT) ""))}
      (= kind "answer")
      {"role" "assistant" "content" (str (or (proto-get data _TEXT) ""))}
      True
      (with-call {"role" "user"
                  "content" (+ "Result of " (proto-print (proto-get data _ACTION []))
                               ":\n" (proto-print (proto-get data _RESULT [])))}
                 (proto-get data _CALL)))
    (proto-get e _ID)))

(defn turns-since [store session since]
  "#(newest n turns): the id of the newest turn of SESSION after the id
   SINCE, how many turns came after SINCE, and the last HISTORY-KEEP of them."
  (setv new (events store :session session :kinds HISTORY-KINDS :since-id since
                    :limit HISTORY-KEEP :latest True)
        turns (lfor e new
                    :if (!= (proto-get (proto-get e _DATA []) _BY) "fallback")
                    (_turn e)))
  (when (< (len new) HISTORY-KEEP)
    (return #((if new (proto-get (get new -1) _ID) since) (len new) turns)))
  (setv newest (proto-get (get new -1) _ID)
        kinds (.join ", " (* ["?"] (len HISTORY-KINDS))))
  #(newest
    (get (.query store f"SELECT count(*) FROM events WHERE session = ? AND id > ? AND id <= ? AND kind IN ({kinds})"
                 #(session since newest #* HISTORY-KINDS))
         0 0)
    turns))

(setv _ACTION   ':action
      _BY       ':by
      _CALL     ':call
      _DATA     ':data
      _ID       ':id
      _KIND     ':kind
      _OK       ':ok
      _PROVIDER ':provider
      _RESULT   ':result
      _STATUS   ':status
      _TASK     ':task
      _TEXT     ':text
      _THROUGH  ':through
      _TURNS    ':turns)

;; * The budget

(defn message-tokens [m]
  "The estimated tokens of the chat message M (four characters a token, and a few for its role)."
  (+ 4 (math.ceil (/ (len (str (.get m "content" ""))) 4))))

(defn context-tokens [config [cascade None]]
  "The model's context in tokens: the config's, else what LiteLLM's model list
   says of the first model of CASCADE (when LiteLLM is loaded already), else
   DEFAULT-CONTEXT."
  (setv settings (hy.I.passepartout/prompt.memory-settings config)
        n (int (get settings "context_tokens"))
        litellm (.get sys.modules "litellm"))
  (when (> n 0) (return n))
  (when (and litellm cascade)
    (for [p (get cascade "providers")]
      (when (!= (get p "model") "symbolic")
        (try (setv info (litellm.get-model-info (get p "model"))
                   m (or (.get info "max_input_tokens") (.get info "max_tokens")))
             (when m (return (int m)))
             (except [Exception] None))
        (break))))
  DEFAULT-CONTEXT)

(defn history-budget [config [cascade None]]
  "The tokens a session's history may fill."
  (setv settings (hy.I.passepartout/prompt.memory-settings config))
  (max 1 (int (* (float (get settings "history_share")) (context-tokens config cascade)))))

;; * The cone

(defn summary-message [summary]
  "The chat message that gives the model SUMMARY (a summary event's data)."
  {"role" "user"
   "content" (+ f"Earlier in this conversation ({(proto-get summary ':turns 0)} turns, summarised):\n"
                (str (proto-get summary _TEXT "")))})

(defn plan-cone [turns task [summary None] [budget None] [keep 6]]
  "#(messages due): of TURNS (#(kind task message id), oldest first), the chat
   messages TASK is given after SUMMARY (a summary event's data, or None)
   within BUDGET tokens, and the id of the newest conversation turn left for
   a summary (None when none is). Once over BUDGET, the turns kept are those
   that fit in LOW-WATER of it."
  (setv [messages due] (_plan-cone turns task summary budget keep))
  (if (and (is-not due None) (is-not budget None))
      (_plan-cone turns task summary (int (* LOW-WATER budget)) keep)
      #(messages due)))

(defn _plan-cone [turns task summary budget keep]
  (setv through (if summary (proto-get summary _THROUGH 0) 0)
        kept []
        used (if summary (message-tokens (summary-message summary)) 0)
        said 0
        due None)
  (for [[kind of message id] (reversed turns)]
    (setv t (message-tokens message))
    (cond
      (and task (= of task)) (do (.append kept message) (+= used t))
      (= kind "result") None
      (<= id through) None
      (is-not due None) None
      (or (< said keep) (is budget None) (<= (+ used t) budget))
      (do (+= said 1) (+= used t) (.append kept message))
      True (setv due id)))
  #((+ (if summary [(summary-message summary)] [])
       (lfor m (reversed kept) (dict m)))
    due))

(defn cone [turns task]
  "Of TURNS, the chat messages TASK depends on, with no budget and no summary."
  (get (plan-cone turns task) 0))

(defn latest-summary [store session]
  "The data of the newest summary of SESSION, with its :id, or None."
  (setv found (events store :kind "summary" :session session :limit 1 :latest True))
  (when found
    (+ (proto-get (get found 0) _DATA) [:id (proto-get (get found 0) _ID)])))

(defn _older-said [store session through first]
  "The id of the newest conversation turn of SESSION after THROUGH and before
   FIRST (the oldest turn remembered), or None: a turn older than what is
   remembered and newer than the summary is due too."
  (get (.query store "SELECT max(id) FROM events WHERE session = ? AND kind IN ('input', 'answer') AND id > ? AND id < ?"
               #(session through first))
       0 0))

(defn task-history [store session task [histories None] [budget None] [keep 6]]
  "#(messages size): the turns of SESSION that TASK depends on, as chat
   messages, oldest first, and how many turns the session has. HISTORIES, if
   given, remembers the session's turns between calls. Turns due for a summary
   are named as left out (=step-history= summarises them)."
  (setv budget (if (is budget None) (history-budget {}) budget)
        [messages size due] (plan-history store session task histories budget keep))
  (when (is-not due None)
    (setv messages (+ [(left-out-message (get due 1) (get due 0))] messages)))
  #(messages size))

(defn plan-history [store session task [histories None] [budget None] [keep 6]]
  "#(messages size due): as task-history, DUE #(through upto) the range of ids
   a summary should cover, or None."
  (if (is histories None)
      (do (setv [_ size turns] (turns-since store session 0)))
      (setv [size turns] (.turns histories store session)))
  (setv summary (latest-summary store session)
        [messages due] (plan-cone turns task summary budget keep)
        through (if summary (proto-get summary _THROUGH 0) 0))
  (when (and (is due None) turns (> size (len turns)))
    (setv due (_older-said store session through (get turns 0 3))))
  #(messages size (when (is-not due None) #(through due))))

(defclass SessionHistories []
  "The recent turns of the sessions served last, each with the id of the
   newest event it includes and how many turns its session has."

  (defn __init__ [self [sessions 1000]]
    (setv self.known (OrderedDict)
          self.sessions sessions
          self.lock (threading.Lock)))

  (defn turns [self store session]
    "#(size turns): how many turns SESSION has, and the last HISTORY-KEEP of them."
    (with [self.lock]
      (setv [last size turns] (.get self.known session #(0 0 []))))
    (setv [newest n new] (turns-since store session last)
          size (+ size n)
          turns (cut (+ turns new) (- HISTORY-KEEP) None))
    (with [self.lock]
      (setv (get self.known session) #(newest size turns))
      (.move-to-end self.known session)
      (while (> (len self.known) self.sessions)
        (.popitem self.known :last False)))
    #(size turns))

  (defn cone [self store session task]
    (setv [size turns] (.turns self store session))
    #((cone turns task) size)))

;; * Compaction

(setv COMPACTION-PROMPT "You keep the memory of a conversation between a person and their agent. Write a summary of the earlier summary and the turns below, which the agent will read instead of them: keep every fact the person stated (names, dates, numbers, places, preferences, decisions), what was asked and promised, and what is still open. Plain sentences, at most 300 words. Answer with the summary alone."
      SUMMARY-CAP 6000)

(defn _when [ts]
  (time.strftime "%Y-%m-%d %H:%M" (time.gmtime ts)))

(defn left-out-text [rows]
  "The note that names ROWS (#(id ts kind text)) as left out."
  (setv first (get rows 0) last (get rows -1))
  (+ f"{(len rows)} turns (#{(get first 0)} to #{(get last 0)}, {(_when (get first 1))} to {(_when (get last 1))} UTC) "
     "are left out: no model was free to summarise them."))

(defn left-out-message [upto through]
  {"role" "user"
   "content" f"The turns of this conversation after #{through} up to #{upto} are not shown here: they are due to be summarised."})

(defn _due-rows [store session through upto secrets]
  "The conversation turns of SESSION after THROUGH up to UPTO, #(id ts kind text), redacted."
  (lfor [i ts kind data] (.query store "SELECT id, ts, kind, data FROM events WHERE session = ? AND kind IN ('input', 'answer') AND id > ? AND id <= ? ORDER BY id"
                                 #(session through upto))
        :setv d (data-read data)
        :if (!= (proto-get d _BY) "fallback")
        #(i ts kind (get (redact-text (str (or (proto-get d _TEXT) "")) secrets) 0))))

(defn compaction-request [previous rows session]
  "The request that asks a model to summarise ROWS after the summary PREVIOUS."
  (setv body (+ (if previous (+ "Earlier summary:\n" (str (proto-get previous _TEXT "")) "\n\n") "")
                "Turns:\n"
                (.join "\n" (gfor [i ts kind text] rows
                                  f"{(if (= kind "input") "person" "agent")}: {text}"))))
  [:messages [{"role" "system" "content" COMPACTION-PROMPT} {"role" "user" "content" body}]
   :tools None :signal [:session session :payload [:sensor :compaction]] :rejections []])

(defn :async _ask [complete request]
  (setv answer (complete request))
  (when (inspect.isawaitable answer) (setv answer (await answer)))
  answer)

(defn :async summarise [services request]
  "#(text model): a summary from the compaction model, else the configured
   ones; text None when no model answered."
  (setv model (.strip (get (hy.I.passepartout/prompt.memory-settings services.config) "compaction_model")))
  (setv answers [])
  (when model
    (import passepartout.cascade [make-cascade cascade-complete]
            passepartout.providers [make-provider])
    (setv named (lfor p (get (or services.cascade {"providers" []}) "providers")
                      :if (= (get p "name") model) p))
    (.append answers (await (cascade-complete (make-cascade [(if named (get named 0) (make-provider model))])
                                              request))))
  (when (not (and answers (= (proto-get (get answers 0) _STATUS) _OK)))
    (.append answers (await (_ask services.complete request))))
  (for [a answers]
    (setv text (proto-get a _TEXT))
    (when (and (= (proto-get a _STATUS) _OK)
               (not (in (proto-get a _PROVIDER) #("symbolic" "fallback")))
               (isinstance text str) (.strip text))
      (return #((.strip text) (proto-get a _PROVIDER)))))
  #(None None))

(defn :async compact [services session through upto]
  "Summarise the conversation turns of SESSION after THROUGH up to UPTO into
   a summary turn; its id, or None when there was nothing to summarise."
  (setv store services.store
        secrets (secret-tuple services.secrets)
        previous (latest-summary store session)
        rows (_due-rows store session through upto secrets))
  (when (not rows)
    (return None))
  (setv [text model] (try (await (summarise services (compaction-request previous rows session)))
                          (except [e Exception]
                            (.warning log "compaction failed: %s" e)
                            #(None None))))
  (if text
      (setv text (get (redact-text text secrets) 0))
      (setv text (.strip (+ (if previous (+ (str (proto-get previous _TEXT "")) "\n") "")
                            (left-out-text rows)))))
  (setv text (if (> (len text) SUMMARY-CAP) (+ "…" (cut text (- SUMMARY-CAP) None)) text)
        parents (+ (lfor r rows (get r 0)) (if previous [(proto-get previous _ID)] [])))
  (hy.I.passepartout/journal.journal-append
    store [:event "summary" :session session :parents parents
           :data [:text text :through upto
                  :turns (+ (len rows) (if previous (proto-get previous _TURNS 0) 0))
                  :by model :left-out (is model None)]]))

(defn :async step-history [services session task]
  "#(messages size): the history a step of TASK in SESSION is given, its
   older turns summarised first when they no longer fit."
  (setv settings (hy.I.passepartout/prompt.memory-settings services.config)
        budget (history-budget services.config services.cascade)
        keep (int (get settings "keep_turns")))
  (for [_ (range 3)]
    (setv [messages size due] (plan-history services.store session task services.histories budget keep))
    (when (is due None)
      (return #(messages size)))
    (await (compact services session #* due)))
  #(messages size))

(defn cone-figures [history size]
  "(:turns K :history N :compression C) for a model given HISTORY of a session of SIZE turns."
  (setv k (len history))
  [:turns k :history size :compression (if (> size 0) (round (- 1 (/ (min k size) size)) 3) 0.0)])
