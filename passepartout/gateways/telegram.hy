;; * Why

"Telegram is how a person reaches the agent from a phone. The gateway long-polls
the Bot API with python-telegram-bot's Bot, turns each message of an allowed
person into a signal, and sends the replies back as plain text."

(import asyncio logging os re sqlite3 time warnings
        aiohttp
        datetime [timedelta]
        functools [partial]
        telegram [Bot InlineKeyboardButton InlineKeyboardMarkup Update]
        telegram.error [BadRequest Conflict Forbidden InvalidToken NetworkError RetryAfter TelegramError
                        TimedOut]
        telegram.request [BaseRequest]
        telegram.warnings [PTBUserWarning]
        passepartout.config [ConfigError config-defaults]
        passepartout.proto [kw proto-get]
        passepartout.display [display-text]
        passepartout.store [StoreError]
        passepartout.records [kv-get kv-put]
        passepartout.gateways.hub [send-pieces Undeliverable MAX-PIECES-KEPT]
        passepartout.backoff [growing-pause])

(setv log (logging.getLogger "passepartout.gateways.telegram"))
(warnings.filterwarnings "ignore" :message "Please use 'Bot.send_message'" :category PTBUserWarning)

;; * Settings

(setv DEFAULTS (config-defaults "gateways" "telegram")
      MESSAGE-LIMIT 4096
      MAX-ATTEMPTS 6
      MAX-BACKOFF 30.0)

(defn _settings [section]
  (setv s (| DEFAULTS section))
  (for [k ["poll_timeout" "poll_limit" "max_input"]]
    (when (or (isinstance (get s k) bool) (not (isinstance (get s k) #(int float))) (< (get s k) 0))
      (raise (ConfigError f"gateways.telegram.{k} should be a number ≥ 0"))))
  (when (or (not (isinstance (get s "allowed_users") list))
            (not (all (gfor u (get s "allowed_users") (and (isinstance u int) (not (isinstance u bool)))))))
    (raise (ConfigError "gateways.telegram.allowed_users should be an array of Telegram user ids (numbers)")))
  s)

;; * Replies

(defn _units [ch]
  (if (> (ord ch) 0xFFFF) 2 1))

(defn split-text [text [limit MESSAGE-LIMIT]]
  "TEXT as pieces of at most LIMIT UTF-16 code units, cut at a line break or a
   space in the last half of a piece when there is one."
  ;; a character is at most two UTF-16 code units
  (when (<= (* 2 (len text)) limit)
    (return [text]))
  (setv pieces []
        start 0
        n (len text))
  (while (< start n)
    (setv end start
          used 0)
    (while (and (< end n) (<= (+ used (_units (get text end))) limit))
      (+= used (_units (get text end)))
      (+= end 1))
    (when (< end n)
      (setv half (+ start (// (- end start) 2))
            cut-at (max (.rfind text "\n" half end) (.rfind text " " half end)))
      (when (> cut-at start)
        (setv end (+ cut-at 1))))
    (.append pieces (cut text start end))
    (setv start end))
  (or pieces [""]))

;; * Buttons

(setv _verbs {"approve" "/approve {}"
              "deny" "/deny {}"
              "approve30" "/approve {} 30m"}
      _token-re (re.compile r"[A-Za-z0-9_\-]{1,60}\Z"))

(defn approval-buttons [approval]
  "The inline keyboard for the APPROVAL plist (:code C :token T), or None."
  (setv token (or (proto-get approval ':token) (proto-get approval ':code)))
  (when (and token (> (len (.encode f"approve30:{token}")) 64))
    (setv token (proto-get approval ':code)))
  (when (or (not token) (not (_token-re.match (str token))))
    (return None))
  (InlineKeyboardMarkup [[(InlineKeyboardButton "Approve" :callback-data f"approve:{token}")
                          (InlineKeyboardButton "Deny" :callback-data f"deny:{token}")]
                         [(InlineKeyboardButton "Approve for 30 min" :callback-data f"approve30:{token}")]]))

(defn button-command [data]
  "The command a button's callback DATA stands for, or None."
  (setv [verb _ token] (.partition (str (or data "")) ":"))
  (if (and (in verb _verbs) (_token-re.match token))
      (.format (get _verbs verb) token)
      None))

;; * Calling the Bot API

(defn _seconds [e]
  "The wait a RetryAfter asks for, in seconds."
  (with [_ (warnings.catch-warnings)]
    (warnings.simplefilter "ignore")
    (setv r e.retry-after))
  (if (isinstance r timedelta) (.total-seconds r) (float r)))

(defn _transient [e]
  (or (and (isinstance e NetworkError) (not (isinstance e BadRequest)))
      (= (type e) TelegramError)))

(defn _backoff [failures]
  (* 0.5 (growing-pause failures (* 2 MAX-BACKOFF))))

;; * The HTTP transport

(setv FORM {"Content-Type" "application/x-www-form-urlencoded"})

(defn _timeout [value default]
  "VALUE when the caller gave seconds (or None, for no limit), else DEFAULT."
  (if (or (is value None) (and (isinstance value #(int float)) (not (isinstance value bool))))
      value
      default))

(defclass AiohttpRequest [BaseRequest]
  "python-telegram-bot's network layer on an aiohttp session."

  (defn __init__ [self [pool-size 16] [read-timeout 5.0] [connect-timeout 5.0] [pool-timeout 1.0]]
    (setv self.pool-size pool-size
          self.default-read read-timeout
          self.default-connect connect-timeout
          self.default-pool pool-timeout
          self.session None))

  (defn [property] read-timeout [self]
    self.default-read)

  (defn :async initialize [self]
    (when (or (is self.session None) self.session.closed)
      (setv self.session (aiohttp.ClientSession
                           :connector (aiohttp.TCPConnector :limit self.pool-size)
                           :headers {"User-Agent" self.USER-AGENT}))))

  (defn :async shutdown [self]
    (when (and self.session (not self.session.closed))
      (await (.close self.session))))

  (defn :async do-request [self url method [request-data None]
                           [read-timeout BaseRequest.DEFAULT-NONE] [write-timeout BaseRequest.DEFAULT-NONE]
                           [connect-timeout BaseRequest.DEFAULT-NONE] [pool-timeout BaseRequest.DEFAULT-NONE]]
    (when (or (is self.session None) self.session.closed)
      (raise (RuntimeError "this AiohttpRequest is not initialized")))
    (setv connect (_timeout connect-timeout self.default-connect)
          pool (_timeout pool-timeout self.default-pool)
          timeout (aiohttp.ClientTimeout
                    :total None
                    :connect (if (or (is connect None) (is pool None)) None (+ connect pool))
                    :sock-connect connect
                    :sock-read (_timeout read-timeout self.default-read))
          [data headers] (cond (is request-data None) [None None]
                               request-data.contains-files [(_form request-data) None]
                               True [(.encode (.url-encoded-parameters request-data) "utf-8") FORM]))
    (try
      (with [:async response (.request self.session method url :data data :headers headers
                                       :timeout timeout)]
        #(response.status (await (.read response))))
      (except [e TimeoutError]
        (raise (TimedOut f"aiohttp: no answer in time ({(. (type e) __name__)})") :from e))
      (except [e aiohttp.ClientError]
        (raise (NetworkError f"aiohttp.{(. (type e) __name__)}: {e}") :from e)))))

(defn _form [request-data]
  "A multipart body for a request that uploads files."
  (setv form (aiohttp.FormData))
  (for [[k v] (.items request-data.json-parameters)]
    (.add-field form k v))
  (for [[k [filename content mime]] (.items request-data.multipart-data)]
    (.add-field form k content :filename filename :content-type mime))
  form)

;; * The gateway

(setv REFUSAL "Sorry, this is a private assistant: it only answers the people it was set up for."
      NOT-TEXT "I can only read text messages."
      REFUSED-KEY "telegram:refused")

(defn _update-kind [update]
  "The kinds an update carries, by their Bot API field names."
  (.join ", " (or (lfor k (.to-dict update) :if (!= k "update_id") k) ["nothing"])))

(defclass TelegramGateway []
  "A Telegram bot, long-polled; see make-telegram."

  (defn __init__ [self section env]
    (setv self.settings (_settings section)
          self.env env
          self.store env.store
          environ env.environ
          token (.get environ (get self.settings "token_env")))
    (when (not token)
      (raise (ConfigError (+ f"gateways.telegram: the bot token is not set: put it in the environment variable "
                             (get self.settings "token_env")))))
    (setv self.allowed (set (get self.settings "allowed_users"))
          self.requests [(AiohttpRequest :pool-size 16 :read-timeout 15.0)
                         (AiohttpRequest :pool-size 1 :read-timeout 10.0)]
          self.bot (Bot token :base-url (get self.settings "api_base")
                        :request (get self.requests 0)
                        :get-updates-request (get self.requests 1))
          self.hub None
          self.stopping False
          self.poll None
          self.ready (asyncio.Lock)
          self.started False
          self.state "starting"
          self.refused None
          self.sent-pieces {}
          self.progress {}
          self.typing {})
    (when (not self.allowed)
      (.warning log "gateways.telegram.allowed_users is empty: every message will be refused")))

  (defn as-gateway [self]
    "The gateway dict of the contract in gateway.org."
    {"name" "telegram"
     "run" (partial _run self)
     "deliver" (partial _deliver self)
     "stop" (partial _stop self)
     "close" (partial _close self)
     "state" (fn [] self.state)}))

(defn :async _call [gw what thunk]
  "The result of (THUNK), retried as the Bot API's answers say."
  (setv failures 0)
  (while True
    (try
      (return (await (thunk)))
      (except [e RetryAfter]
        (+= failures 1)
        (when (> failures (* 2 MAX-ATTEMPTS)) (raise))
        (.warning log "telegram %s: flood control, waiting %s s as asked" what (_seconds e))
        (await (asyncio.sleep (_seconds e))))
      (except [e TelegramError]
        (+= failures 1)
        (when (or (not (_transient e)) (>= failures MAX-ATTEMPTS)) (raise))
        (.warning log "telegram %s failed (%s); retrying in %s s" what e (_backoff failures))
        (await (asyncio.sleep (_backoff failures)))))))

(defn :async _start [gw]
  "Initialise the bot once: getMe checks the token, and a webhook, which
   would make getUpdates fail, is removed."
  (with [:async gw.ready]
    (when (not gw.started)
      (await (.initialize gw.bot))
      (await (.delete-webhook gw.bot))
      (setv gw.started True)
      (.info log "telegram: polling as @%s (id %s)" gw.bot.username gw.bot.id))))

;; ** Receiving

(defn :async _run [gw hub]
  (setv gw.hub hub
        offset None
        failures 0
        conflicts 0)
  (while (not gw.stopping)
    (try
      (await (_start gw))
      ;; started: it polls from now on, not after its first long poll returns
      (when (= gw.state "starting") (setv gw.state "polling"))
      (setv updates (await (_poll gw offset)))
      (when (is updates None) (break))
      (await (asyncio.gather #* (gfor u updates (_handle gw u))))
      (when updates
        (setv offset (+ (. (get updates -1) update-id) 1)))
      (when conflicts
        (.warning log "telegram: polling again after %s 409 Conflicts" conflicts))
      (setv failures 0
            conflicts 0
            gw.state "polling")
      (except [e Conflict]
        (+= conflicts 1)
        (setv wait (growing-pause conflicts)
              gw.state (+ "409 Conflict: another program polls this bot (or a webhook is set); "
                          f"retrying every {wait} s"))
        (if (= conflicts 1)
            (.error log (+ "telegram: 409 Conflict from the Bot API: another program is polling this bot "
                           "(or a webhook is set); both get half of the messages while it lasts. "
                           "Retrying with a growing pause. (%s)")
                    e)
            (.warning log "telegram: still 409 Conflict (%s times); retrying in %s s" conflicts wait))
        (await (_pause gw wait)))
      (except [e #(InvalidToken Forbidden)]
        ;; the library's words quote the token itself
        (setv gw.state f"stopped: the Bot API refused the token in {(get gw.settings "token_env")}")
        (.error log "telegram: the Bot API refused the token (%s); this gateway stops" e)
        (break))
      (except [e RetryAfter]
        (.warning log "telegram getUpdates: flood control, waiting %s s as asked" (_seconds e))
        (await (_pause gw (_seconds e))))
      (except [e Exception]
        (+= failures 1)
        (setv gw.state f"polling failed {failures} times ({(. (type e) __name__)}); retrying")
        (.warning log "telegram: polling failed (%s: %s); retrying in %s s"
                  (. (type e) __name__) e (_backoff failures))
        (await (_pause gw (_backoff failures))))))
  (.info log "telegram: polling stopped"))

(defn :async _pause [gw seconds]
  (setv t (time-left seconds))
  (while (and (not gw.stopping) (> (t) 0))
    (await (asyncio.sleep (min 0.2 (t))))))

(defn :async _poll [gw offset]
  "The next updates after OFFSET, or None when stop was asked meanwhile."
  (setv gw.poll (asyncio.ensure-future (_get-updates gw offset)))
  (try
    (await gw.poll)
    (except [asyncio.CancelledError]
      (when (or (.cancelling (asyncio.current-task)) (not gw.stopping)) (raise))
      None)
    (finally (setv gw.poll None))))

(defn :async _get-updates [gw offset]
  (setv kwargs {"limit" (get gw.settings "poll_limit")
                "timeout" (get gw.settings "poll_timeout")
                "allowed_updates" ["message" "edited_message" "callback_query"]})
  (when (is-not offset None)
    (setv (get kwargs "offset") offset))
  (try
    (await (gw.bot.get-updates #** kwargs))
    (except [e Exception]
      (when (isinstance e TelegramError) (raise))
      ;; the batch holds an update the library cannot read: read them one by one
      (await (_get-updates-raw gw kwargs)))))

(defn :async _get-updates-raw [gw kwargs]
  (with [_ (warnings.catch-warnings)]
    (warnings.simplefilter "ignore")
    (setv raw (await (gw.bot.do-api-request "get_updates" :api-kwargs (| kwargs {"timeout" 0})))))
  (setv out [])
  (for [u raw]
    (try
      (.append out (Update.de-json u gw.bot))
      (except [e Exception]
        (.error log "telegram: update %s cannot be read (%s); passed over"
                (.get u "update_id" "?") e)
        (when (isinstance (.get u "update_id") int)
          (.append out (Update (get u "update_id")))))))
  out)

(defn :async _stop [gw]
  (setv gw.stopping True)
  (for [chat (list gw.typing)] (_stop-typing gw chat))
  (when gw.poll (.cancel gw.poll)))

(defn :async _close [gw]
  (when gw.started
    (await (.shutdown gw.bot))
    (setv gw.started False))
  ;; a start that failed (a refused token) opened the sessions but never
  ;; finished, so the bot does not shut them down itself
  (for [r gw.requests]
    (await (.shutdown r))))

;; ** Typing

(setv TYPING-EVERY 4.0
      TYPING-MAX 120.0)

(defn _start-typing [gw chat]
  "Show CHAT that the bot is typing until its next reply (at most TYPING-MAX s)."
  (_stop-typing gw chat)
  (setv (get gw.typing chat) (asyncio.ensure-future (_typing gw chat))))

(defn _stop-typing [gw chat]
  (setv task (.pop gw.typing chat None))
  (when task (.cancel task)))

(defn :async _typing [gw chat]
  (setv t (time-left TYPING-MAX))
  (while (and (not gw.stopping) (> (t) 0))
    (try
      (await (.send-chat-action gw.bot :chat-id chat :action "typing"))
      (except [e Exception]
        ;; a hint only: a failure costs the person nothing but the dots
        (.debug log "telegram: sendChatAction in chat %s failed (%s)" chat e)
        (break)))
    (await (_pause gw TYPING-EVERY))))

(defn :async _handle [gw update]
  (setv key f"{gw.bot.id}:{update.update-id}")
  (try
    (cond
      update.message (await (_on-message gw key update.message))
      update.callback-query (await (_on-button gw key update.callback-query))
      update.edited-message
      (.info log "telegram: ignored an edit of message %s in chat %s (the original was answered)"
             update.edited-message.message-id update.edited-message.chat-id)
      True
      (.info log "telegram: ignored update %s of a kind this gateway does not read (%s)"
             update.update-id (_update-kind update)))
    (except [#(OSError sqlite3.Error StoreError)]
      (raise))
    (except [e Exception]
      (.exception log "telegram: update %s could not be handled; passed over" update.update-id))))

(defn _source [gw chat user [message None] #** extra]
  (setv source [:gateway :telegram :chat chat :user user.id])
  (when (is-not message None) (+= source [:message message]))
  (when user.full-name (+= source [:name user.full-name]))
  (for [[k v] (.items extra)]
    (when (is-not v None) (+= source [(kw k) v])))
  source)

(defn :async _on-message [gw key message]
  (setv user message.from-user
        chat message.chat-id)
  (cond
    (or (is user None) user.is-bot)
    (.info log "telegram: ignored message %s in chat %s, not from a person" message.message-id chat)
    (not (in user.id gw.allowed))
    (await (_refuse gw key user chat))
    (is message.text None)
    (when (await (.claim gw.hub "telegram" key "not text"))
      (.info log "telegram: message %s in chat %s has no text" message.message-id chat)
      (await (_say gw chat NOT-TEXT)))
    (> (len message.text) (get gw.settings "max_input"))
    (when (await (.claim gw.hub "telegram" key "too long"))
      (.info log "telegram: message %s in chat %s is %s characters long; not read"
             message.message-id chat (len message.text))
      (await (_say gw chat (+ f"That message is too long for me: {(len message.text)} characters, "
                              f"and I read at most {(get gw.settings "max_input")}."))))
    True
    (when (await (.receive gw.hub "telegram" key
                           [:type :event
                            :source (_source gw chat user message.message-id)
                            :payload [:sensor :user-input :text message.text]]))
      (_start-typing gw chat))))

(defn :async _refuse [gw key user chat]
  "One short refusal per stranger, and one log line."
  (when (is gw.refused None)
    (setv known (set (or (kv-get gw.store REFUSED-KEY) [])))
    ;; the updates of a batch are handled side by side: another stranger's may
    ;; have read the list, and added to it, while this one waited
    (when (is gw.refused None)
      (setv gw.refused known)))
  (when (and (await (.claim gw.hub "telegram" key "stranger"))
             (not (in user.id gw.refused)))
    (.add gw.refused user.id)
    (kv-put gw.store REFUSED-KEY (sorted gw.refused))
    (.warning log "telegram: refused user %s (%s), who is not in allowed_users; later messages are dropped"
              user.id user.full-name)
    (await (_say gw chat REFUSAL))))

(defn :async _on-button [gw key query]
  (setv user query.from-user
        message query.message
        chat (if message message.chat.id user.id)
        command (button-command query.data))
  (cond
    (not (in user.id gw.allowed))
    (do (await (_refuse gw key user chat))
        (await (_answer-button gw query.id "Not allowed.")))
    (is command None)
    (do (.info log "telegram: a button with unknown data %r was pressed" query.data)
        (await (.claim gw.hub "telegram" key "unknown button"))
        (await (_answer-button gw query.id "This button is no longer understood.")))
    True
    (when (await (.receive gw.hub "telegram" key
                           [:type :event
                            :source (_source gw chat user (when message message.message-id)
                                             :callback query.id
                                             :shown (getattr message "text" None))
                            :payload [:sensor :user-input :text command]]))
      (await (_answer-button gw query.id (button-toast command))))))

(defn button-toast [command]
  "The short words a pressed button shows, for the approvals COMMAND it sent."
  (setv words (.split command))
  (cond (= (get words 0) "/deny") "Denying…"
        (> (len words) 2) f"Approving, and allowing this kind for {(get words 2)}…"
        True "Approving…"))

(defn :async _answer-button [gw query-id text]
  "Stop the button's spinner; a query too old to answer is no matter."
  (try
    (await (_call gw "answerCallbackQuery"
                  (fn [] (gw.bot.answer-callback-query query-id :text text))))
    (except [e TelegramError]
      (.info log "telegram: could not answer a button press (%s)" e))))

(defn :async _say [gw chat text [markup None]]
  "Send TEXT to CHAT, cut to the message limit, MARKUP on the last piece.
   Telegram refuses a message of white space only, so such pieces are left out."
  (setv pieces (or (lfor p (split-text text) :if (.strip p) p) ["(no text)"]))
  (defn :async one [i piece]
    (setv fields {"chat_id" chat "text" piece})
    (when (and markup (= i (- (len pieces) 1)))
      (setv (get fields "reply_markup") markup))
    (await (_call gw "sendMessage"
                  (fn [] (gw.bot.do-api-request "send_message" :api-kwargs fields)))))
  (await (send-pieces gw.sent-pieces #(chat (hash text)) pieces one)))

;; ** Delivering

(defn :async _deliver [gw reply]
  (setv payload (proto-get reply ':payload [])
        kind (getattr (proto-get payload ':kind) "name" "answer")
        text (display-text (str (or (proto-get payload ':text) "")))
        source (proto-get reply ':source [])
        chat (proto-get source ':chat))
  (cond
    (and (= kind "trace") (not (get gw.settings "show_traces"))) False
    (is chat None) (do (.warning log "telegram: a reply with no chat to go to: %s" (cut text 200))
                       False)
    True
    (do (when (not gw.started)
          (await (_call gw "getMe" (partial _start gw))))
        (_stop-typing gw chat)
        (when (proto-get payload ':progress-key)
          (return (await (_progress gw chat (proto-get payload ':progress-key) text))))
        (when (and (proto-get source ':callback) (proto-get source ':message)
                   (await (_show-outcome gw chat (proto-get source ':message)
                                         (proto-get source ':shown) text)))
          (return))
        (try
          (await (_say gw chat text (when (= kind "approval")
                                      (approval-buttons (proto-get payload ':approval [])))))
          (except [e #(BadRequest Forbidden)]
            ;; malformed for Telegram, or the person blocked the bot: no retry helps
            (raise (Undeliverable f"{(. (type e) __name__)}: {e}") :from e))))))

(defn :async _progress [gw chat key text]
  "Show TEXT as the one message of KEY in CHAT: sent the first time, edited after."
  (setv at #(chat key)
        message (.get gw.progress at))
  (when (and (is-not message None) (await (_show-outcome gw chat message None text)))
    (return True))
  (setv sent (await (_call gw "sendMessage"
                           (fn [] (gw.bot.do-api-request "send_message"
                                                         :api-kwargs {"chat_id" chat
                                                                      "text" (cut text MESSAGE-LIMIT)})))))
  (when (>= (len gw.progress) MAX-PIECES-KEPT)
    (.clear gw.progress))
  (when (isinstance sent dict)
    (setv (get gw.progress at) (.get sent "message_id")))
  True)

(defn :async _show-outcome [gw chat message shown text]
  "Edit MESSAGE, which showed SHOWN, to show TEXT below it; False when it cannot be edited."
  (setv text (if shown (+ (display-text shown) "\n\n" text) text))
  (when (> (len text) MESSAGE-LIMIT)
    (return False))
  (try
    (await (_call gw "editMessageText"
                  (fn [] (gw.bot.edit-message-text text :chat-id chat :message-id message))))
    True
    (except [e BadRequest]
      (if (in "not modified" (.lower (str e)))
          True
          (do (.info log "telegram: could not edit message %s (%s); sending the outcome instead" message e)
              False)))))

(defn time-left [seconds]
  "A function giving the seconds left of SECONDS from now."
  (setv end (+ (time.monotonic) seconds))
  (fn [] (- end (time.monotonic))))

;; * Registration

(defn make-telegram [section env]
  "The Telegram gateway for the config SECTION in the daemon ENV."
  (.as-gateway (TelegramGateway section env)))

(setv GATEWAY {"factory" make-telegram "headless" True})
