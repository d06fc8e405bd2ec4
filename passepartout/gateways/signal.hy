;; * Why

"Signal has no bot API. What speaks for a Signal account on a server is
signal-cli, and the usual way to reach it from another program is
signal-cli-rest-api, a small HTTP server in front of it. This gateway talks to
that server with requests: it fetches the messages sent to one account
number, hands the ones from people on the allow-list to the hub, and sends the
replies back."

(import asyncio ipaddress json logging re
        urllib.parse [urlsplit quote :as url-quote]
        requests
        passepartout.proto [proto-get]
        passepartout.display [display-text]
        passepartout.config [ConfigError]
        passepartout.gateways.hub [send-pieces Undeliverable])

(setv log (logging.getLogger "passepartout.gateways.signal"))

;; * Settings

(setv DEFAULT-URL "http://127.0.0.1:8080"
      MAX-DELAY 60.0
      _number-re (re.compile r"\+[1-9][0-9]{5,14}\Z")
      _uuid-re (re.compile r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z"))

(defn _identity [x]
  "X as a number or UUID the allow-list can hold, or None."
  (when (isinstance x str)
    (setv s (.lower (.strip x))
          n (re.sub r"[\s().-]" "" s))
    (cond (_uuid-re.match s) s
          (_number-re.match n) n)))

(defn _loopback [host]
  (or (= (.lower host) "localhost")
      (try
        (. (ipaddress.ip-address host) is-loopback)
        (except [ValueError] False))))

(defn check-server-url [url [allow-remote False]]
  "URL without its trailing slash; a ConfigError when it is not an http(s)
   address, or not on this machine and ALLOW-REMOTE is false."
  (when (not (isinstance url str))
    (raise (ConfigError "gateways.signal.url should be a string")))
  (setv parts (urlsplit url))
  (try
    (. parts port)
    (except [ValueError]
      (raise (ConfigError f"gateways.signal.url {(repr url)} has a malformed port"))))
  (when (or (not (in parts.scheme #("http" "https"))) (not parts.hostname))
    (raise (ConfigError f"gateways.signal.url {(repr url)} is not an http:// or https:// address")))
  (when (and (not allow-remote) (not (_loopback parts.hostname)))
    (raise (ConfigError
             (+ f"gateways.signal.url {(repr url)} is not on this machine, and signal-cli-rest-api "
                "has no authentication: whoever reaches it reads and sends as your number. "
                "Run it on 127.0.0.1 (reach a remote one through an ssh tunnel), or set "
                "allow_remote = true if the network in between is yours."))))
  (.rstrip url "/"))

(defn _number-setting [section key default minimum]
  (setv v (.get section key default))
  (when (or (isinstance v bool) (not (isinstance v #(int float))) (< v minimum))
    (raise (ConfigError f"gateways.signal.{key} should be a number of at least {minimum}, not {(repr v)}")))
  v)

(defn signal-settings [section]
  "The checked settings of SECTION (the [gateways.signal] table), as a dict."
  (when (not (isinstance section dict))
    (raise (ConfigError "gateways.signal should be a table")))
  (setv allow-remote (.get section "allow_remote" False)
        number (_identity (.get section "number"))
        allowed (.get section "allowed_numbers" []))
  (when (not (isinstance allow-remote bool))
    (raise (ConfigError "gateways.signal.allow_remote should be true or false")))
  (when (or (is number None) (not (.startswith number "+")))
    (setv given (.get section "number"))
    (raise (ConfigError (+ "gateways.signal.number should be the account's number in "
                           f"international form (+ and digits), not {(repr given)}"))))
  (when (not (isinstance allowed list))
    (raise (ConfigError "gateways.signal.allowed_numbers should be an array of numbers")))
  (setv bad (lfor a allowed :if (is (_identity a) None) a))
  (when bad
    (raise (ConfigError (+ "gateways.signal.allowed_numbers: " (.join ", " (map repr bad))
                           " is not a number in international form (+ and digits) or a Signal UUID"))))
  (when (not allowed)
    (.warning log "signal: allowed_numbers is empty, so every message will be refused"))
  {"url" (check-server-url (.get section "url" DEFAULT-URL) allow-remote)
   "number" number
   "allowed" (frozenset (map _identity allowed))
   "poll-interval" (_number-setting section "poll_interval" 1.0 0)
   "receive-timeout" (int (_number-setting section "receive_timeout" 1 1))
   "retry-delay" (_number-setting section "retry_delay" 1.0 0.001)
   "max-input" (int (_number-setting section "max_input_chars" 16000 1))
   "show-traces" (bool (.get section "show_traces" False))})

;; * Reading what the server returns

(defn _int [x]
  (when (and (isinstance x int) (not (isinstance x bool))) x))

(defn _not-a-message [envelope]
  (cond (in "receiptMessage" envelope) "a receipt"
        (in "typingMessage" envelope) "a typing notice"
        (in "syncMessage" envelope) "a sync message from the account's own devices"
        (in "callMessage" envelope) "a call"
        (in "storyMessage" envelope) "a story"
        True "an envelope without a message"))

(defn _group-id [data]
  (setv info (or (.get data "groupInfo") (.get data "groupV2")))
  (str (or (when (isinstance info dict) (or (.get info "groupId") (.get info "id"))) "?")))

(defn _sender [envelope]
  "The identity to answer, and every identity the allow-list may know the sender by."
  (setv number (_identity (or (.get envelope "sourceNumber") (.get envelope "source")))
        uuid (_identity (.get envelope "sourceUuid")))
  #((or number uuid) (lfor i [number uuid] :if i i)))

(defn triage [item settings]
  "What the received ITEM calls for, as a plist whose :do is :persist, :refuse,
   :stranger or :ignore."
  (setv envelope (when (isinstance item dict) (.get item "envelope")))
  (when (not (isinstance envelope dict))
    (return [:do :ignore :why "an item without an envelope"]))
  (setv [chat ids] (_sender envelope))
  (when (is chat None)
    (return [:do :ignore :why "an envelope without a sender"]))
  (setv data (.get envelope "dataMessage"))
  (when (not (isinstance data dict))
    (return [:do :ignore :why (+ (_not-a-message envelope) " from " chat)]))
  (when (not (any (gfor i ids (in i (get settings "allowed")))))
    (return [:do :stranger :to chat]))
  (setv text (.get data "message")
        ts (or (_int (.get data "timestamp")) (_int (.get envelope "timestamp")))
        name (.get envelope "sourceName")
        key f"{chat}:{ts}"
        limit (get settings "max-input"))
  (cond
    (is ts None)
    [:do :ignore :why f"a message from {chat} without a timestamp"]
    (or (.get data "groupInfo") (.get data "groupV2"))
    [:do :refuse :to chat :key f"group:{(_group-id data)}:{chat}" :why "a group message"
     :text "I only read direct messages: please write to me here rather than in a group."]
    (or (.get data "attachments") (.get data "sticker"))
    [:do :refuse :to chat :key key :why "an attachment"
     :text (+ "I cannot read attachments, pictures or stickers, so this message was not read. "
              "Please send what you need as text.")]
    (not (isinstance text str))
    [:do :ignore :why f"a message without text from {chat} (a reaction, deletion or timer change)"]
    (not (.strip text))
    [:do :ignore :why f"an empty message from {chat}"]
    (> (len text) limit)
    [:do :refuse :to chat :key key :why f"a message of {(len text)} characters"
     :text (+ f"Your message is {(len text)} characters long and I read at most {limit}, "
              "so it was not read. Please send it in parts.")]
    True
    [:do :persist :key key
     :signal [:type :event
              :source (+ [:gateway :signal :chat chat :user chat :message ts]
                         (if (and (isinstance name str) (.strip name))
                             [:name (cut (.strip name) 100)]
                             []))
              :payload [:sensor :user-input :text text]]]))

;; * Writing replies

(setv MESSAGE-BYTES 2000
      MAX-PARTS 8)

(defn _prefix [text limit]
  "The longest start of TEXT that is at most LIMIT bytes of UTF-8 (at least one character)."
  (if (<= (* 4 (len text)) limit)
      text
      (cut text (max 1 (len (.decode (cut (.encode (cut text limit) "utf-8") limit) "utf-8" "ignore"))))))

(defn split-text [text [limit MESSAGE-BYTES] [max-parts MAX-PARTS]]
  "TEXT as a list of parts of at most LIMIT bytes, cut at the last paragraph,
   line or word break in each part's second half; at most MAX-PARTS parts.

   (split-text \"one two\" 4) ⇒ [\"one\" \"two\"]"
  (setv rest (.decode (.encode text "utf-8" "replace") "utf-8")
        parts [])
  (while rest
    (setv head (_prefix rest limit))
    (when (= (len head) (len rest))
      (.append parts rest)
      (break))
    (setv at (len head))
    (for [sep ["\n\n" "\n" " "]]
      (setv i (.rfind head sep (// (len head) 2)))
      (when (> i 0)
        (setv at (+ i (len sep)))
        (break)))
    (setv part (.rstrip (cut rest at)))
    (when part (.append parts part))
    (setv rest (.lstrip (cut rest at None))))
  (if (<= (len parts) max-parts)
      parts
      (+ (cut parts (- max-parts 1))
         [f"[… the rest of this reply, {(sum (gfor p (cut parts (- max-parts 1) None) (len p)))} characters, was not sent]"])))

(defn reply-text [payload]
  "The text to send for a reply whose payload is PAYLOAD."
  (setv kind (proto-get payload ':kind)
        text (str (or (proto-get payload ':text) ""))
        code (proto-get (proto-get payload ':approval []) ':code))
  (when (not (.strip text))
    (setv text "(the answer was empty)"))
  (display-text
    (cond
      (and (= kind ':approval) code (not (in f"/approve {code}" text)))
      (+ text f"\n\nAnswer /approve {code} to let it run, or /deny {code}.")
      (= kind ':trace) (+ "· " text)
      True text)))

;; * Talking to the server

(defclass SignalError [Exception]
  "An answer from the server that is not the one asked for."
  (defn __init__ [self message [status None]]
    (.__init__ (super) message)
    (setv self.status status
          self.retry (or (is status None) (>= status 500)))))

(defn _error-text [r]
  (try
    (setv body (.json r))
    (if (and (isinstance body dict) (isinstance (.get body "error") str))
        (get body "error")
        (cut r.text 200))
    (except [ValueError] (cut r.text 200))))

(defn _call [method url [params None] [body None] [timeout 10]]
  "The response to one request; a SignalError for an error status."
  (with [s (requests.Session)]
    (setv s.trust-env False
          r (.request s method url :params params :json body :timeout timeout)))
  (when (>= r.status-code 400)
    (raise (SignalError f"HTTP {r.status-code}: {(_error-text r)}" r.status-code)))
  r)

(defn _json [r what]
  "The JSON body of R; a SignalError (worth retrying) when it is not JSON."
  (try
    (json.loads r.text)
    (except [e ValueError]
      (raise (SignalError f"{what}: the server's answer is not JSON ({e}): {(repr (cut r.text 80))}")))))

;; * The gateway

(setv PERSIST-ATTEMPTS 5
      SEND-ATTEMPTS 5
      MAX-BATCH 100
      MAX-STRANGERS 4096
      STRANGER-TEXT "This is a private assistant and it does not answer this number. Sorry.")

(defclass SignalState []
  "What the Signal gateway of one account keeps between calls."
  (defn __init__ [self settings]
    (setv self.settings settings
          self.url (get settings "url")
          self.number (get settings "number")
          self.stopping (asyncio.Event)
          self.ready False
          self.outage None
          self.delay (get settings "retry-delay")
          self.strangers (set)
          self.sent-pieces {})))

(defn _failed [gw what e]
  "Log the failure E of WHAT once per outage; the wait before trying again."
  (setv text (str e))
  (if (!= gw.outage text)
      (.warning log "signal: %s failed at %s: %s (trying again, less and less often)" what gw.url text)
      (.debug log "signal: %s failed again: %s" what text))
  (setv gw.outage text
        wait gw.delay
        gw.delay (min (* 2 gw.delay) MAX-DELAY))
  wait)

(defn _answered [gw]
  (when (is-not gw.outage None)
    (.info log "signal: the server at %s answers again" gw.url))
  (setv gw.outage None
        gw.delay (get gw.settings "retry-delay")))

;; ** Polling

(defn :async signal-run [gw hub]
  "Poll the server and hand what arrives to HUB, until signal-stop."
  (.info log "signal: polling %s for %s" gw.url gw.number)
  (while (not (.is-set gw.stopping))
    (setv wait (if gw.ready
                   (await (_poll gw hub))
                   (await (_check-server gw))))
    (when (> wait 0)
      (try
        (await (asyncio.wait-for (.wait gw.stopping) wait))
        (except [asyncio.TimeoutError] None))))
  (.info log "signal: stopped"))

(defn :async signal-stop [gw]
  "Ask signal-run to return once the poll in progress is handled."
  (.set gw.stopping))

(defn :async _check-server [gw]
  (try
    (setv about (_json (await (asyncio.to-thread _call "GET" f"{gw.url}/v1/about")) "about"))
    (except [e #(requests.RequestException SignalError)]
      (when (and (isinstance e SignalError) (not e.retry))
        (.warning log "signal: %s/v1/about answered %s; polling anyway" gw.url e)
        (_answered gw)
        (setv gw.ready True)
        (return 0))
      (return (_failed gw "reaching the server" e))))
  (setv mode (when (isinstance about dict) (.get about "mode")))
  (when (and (isinstance mode str) (.startswith mode "json-rpc"))
    (when (!= gw.outage "json-rpc")
      (.error log (+ "signal: the server at %s runs in %s mode, where messages are dropped "
                     "while no websocket reader is attached; run it in normal or native mode "
                     "(MODE=native) so that it can be polled")
              gw.url mode))
    (setv gw.outage "json-rpc")
    (return MAX-DELAY))
  (_answered gw)
  (.info log "signal: connected to signal-cli-rest-api %s in %s mode"
         (if (isinstance about dict) (.get about "version" "?") "?") (or mode "an unknown"))
  (setv gw.ready True)
  0)

(defn :async _poll [gw hub]
  (setv timeout (get gw.settings "receive-timeout")
        path (url-quote gw.number :safe ""))
  (try
    (setv items (_json (await (asyncio.to-thread
                                _call "GET" f"{gw.url}/v1/receive/{path}"
                                :params {"timeout" timeout
                                         "ignore_attachments" "true"
                                         "ignore_stories" "true"
                                         "max_messages" MAX-BATCH}
                                :timeout #(10 (+ timeout 60))))
                       "receive"))
    (except [e #(requests.RequestException SignalError)]
      (return (_failed gw "receiving" e))))
  (_answered gw)
  (when (not (isinstance items list))
    (.error log "signal: a receive answered %s instead of a list; whatever it held is lost"
            (. (type items) __name__))
    (return (get gw.settings "poll-interval")))
  (setv decisions (lfor item items (_triage-safely item gw.settings))
        rows (lfor t decisions (_row gw t))
        new (await (_store-batch hub (lfor r rows :if r r))))
  (if (is new None)
      (for [t decisions]
        (await (_one-by-one gw hub t)))
      (do (setv new (iter new))
          (for [[t row] (zip decisions rows)]
            (await (_answer gw t (when row (next new)))))))
  (if (>= (len items) MAX-BATCH) 0 (get gw.settings "poll-interval")))

;; ** One item

(defn _triage-safely [item settings]
  (try
    (triage item settings)
    (except [e Exception]
      [:do :ignore :why f"an item that could not be read ({(. (type e) __name__)}: {e})"])))

(defn _row [gw t]
  "The inbox row the triage T calls for, as hub.receive-batch takes it, or None."
  (setv what (. (proto-get t ':do) name)
        to (proto-get t ':to))
  (cond
    (= what "persist") #((proto-get t ':key) (proto-get t ':signal))
    (= what "refuse") #((proto-get t ':key) [:note f"refused: {(proto-get t ':why)}"] True)
    (and (= what "stranger") (not (in to gw.strangers)))
    #(f"stranger:{to}" [:note "a number not on allowed_numbers, refused once"] True)))

(defn :async _store-batch [hub rows]
  "For each of ROWS, True when its key is new, all stored in one transaction;
   None when the store would not take them together."
  (when (not rows)
    (return []))
  (try
    (await (.receive-batch hub "signal" rows))
    (except [e Exception]
      (.warning log "signal: could not store a batch of %d items together (%s); storing them one by one"
                (len rows) e)
      None)))

(defn :async _answer [gw t new]
  "Do what the triage T says, once its row (if any) is stored: NEW is True
   when the row's key is new, False when it was seen before."
  (setv what (. (proto-get t ':do) name)
        to (proto-get t ':to)
        key (proto-get t ':key))
  (cond
    (= what "ignore")
    (.debug log "signal: ignored %s" (proto-get t ':why))
    (= what "persist")
    (when (not new)
      (.info log "signal: message %s was delivered again; it was handled before" key))
    (= what "stranger")
    (await (_refuse-stranger gw to new))
    new
    (do (.info log "signal: refused %s from %s" (proto-get t ':why) to)
        (await (_send gw to (proto-get t ':text))))
    True
    (.info log "signal: %s was answered before; not again" key)))

(defn :async _claim [hub key note]
  "True when KEY is new (and now recorded as answered), False when it was seen before."
  (try
    (await (.claim hub "signal" key note))
    (except [e Exception]
      (.warning log "signal: could not record %s (%s); answering it anyway" key e)
      True)))

(defn :async _one-by-one [gw hub t]
  "Store the row of the triage T on its own, then do what T says."
  (setv row (_row gw t))
  (cond
    (= (proto-get t ':do) ':persist) (await (_persist gw hub #* row))
    row (await (_answer gw t (await (_claim hub (get row 0) (proto-get (get row 1) ':note)))))
    True (await (_answer gw t None))))

(defn :async _persist [gw hub key signal]
  (setv delay (get gw.settings "retry-delay"))
  (for [attempt (range PERSIST-ATTEMPTS)]
    (try
      (setv new (await (.receive hub "signal" key signal)))
      (when (not new)
        (.info log "signal: message %s was delivered again; it was handled before" key))
      (return new)
      (except [e Exception]
        (.warning log "signal: could not persist message %s (attempt %d): %s" key (+ attempt 1) e)
        (await (asyncio.sleep delay))
        (setv delay (min (* 2 delay) MAX-DELAY)))))
  (setv chat (proto-get (proto-get signal ':source) ':chat))
  (.error log "signal: message %s from %s was lost: the store would not take it" key chat)
  (await (_send gw chat "Your message could not be saved, so it was not read. Please send it again."))
  None)

(defn :async _refuse-stranger [gw chat new]
  "Refuse CHAT, not on the allow-list, if NEW (its record was just written);
   None when the gateway already knew it in this run."
  (cond
    (is new None)
    (.debug log "signal: another message from %s, who is not on allowed_numbers" chat)
    new
    (do (.info log "signal: refused a message from %s, who is not on allowed_numbers" chat)
        (await (_send gw chat STRANGER-TEXT)))
    True
    (.info log "signal: a message from %s, who is not on allowed_numbers and was refused before" chat))
  (when (>= (len gw.strangers) MAX-STRANGERS)
    (.clear gw.strangers))
  (.add gw.strangers chat))

;; ** Sending

(defclass SignalUnreachable [ConnectionError]
  "A reply the server did not take after every try; it may take it later.")

(defn :async _send-parts [gw to text]
  "Send TEXT to TO, in parts; raises Undeliverable for a refusal no retry
   changes, SignalUnreachable when the tries run out. Parts that went out
   before a failure are not sent again when the same text is (send-pieces)."
  (defn :async one [_ part]
    (setv delay (get gw.settings "retry-delay"))
    (for [attempt (range SEND-ATTEMPTS)]
      (try
        (await (asyncio.to-thread _call "POST" f"{gw.url}/v2/send"
                                  :body {"message" part
                                         "number" gw.number
                                         "recipients" [to]}
                                  :timeout #(10 60)))
        (return)
        (except [e #(requests.RequestException SignalError)]
          (when (and (isinstance e SignalError) (not e.retry))
            (raise (Undeliverable f"signal: the server refused a message to {to}: {e}") :from e))
          (when (= attempt (- SEND-ATTEMPTS 1))
            (raise (SignalUnreachable f"signal: could not send to {to} after {SEND-ATTEMPTS} tries: {e}") :from e))
          (.warning log "signal: sending to %s failed (attempt %d): %s" to (+ attempt 1) e)
          (await (asyncio.sleep delay))
          (setv delay (min (* 2 delay) MAX-DELAY))))))
  (await (send-pieces gw.sent-pieces #(to (hash text)) (split-text text) one)))

(defn :async _send [gw to text]
  "Send the gateway's own TEXT to TO; True when every part was accepted."
  (try
    (await (_send-parts gw to text))
    True
    (except [e #(Undeliverable SignalUnreachable)]
      (.error log "%s" e)
      False)))

(defn :async signal-deliver [gw reply]
  "Send the reply signal REPLY to its chat; True when it was sent, False when
   it is not for sending (a trace, no chat, a number not allowed)."
  (setv payload (or (proto-get reply ':payload) [])
        chat (_identity (proto-get (or (proto-get reply ':source) []) ':chat)))
  (cond
    (and (= (proto-get payload ':kind) ':trace) (not (get gw.settings "show-traces")))
    False
    (is chat None)
    (do (.warning log "signal: a reply without a chat to send it to: %r" (proto-get payload ':text))
        False)
    (not (in chat (get gw.settings "allowed")))
    (do (.warning log "signal: not sending a reply to %s, who is not on allowed_numbers" chat)
        False)
    True
    (do (await (_send-parts gw chat (reply-text payload)))
        True)))

;; * Registration

(defn signal-state [gw]
  "One line: what the gateway GW is doing."
  (cond (is gw.outage None) (if gw.ready "polling" "starting")
        (= gw.outage "json-rpc") "not polling: the server runs in json-rpc mode"
        True f"the server does not answer ({gw.outage}); trying again"))

(defn make-signal [section env]
  "The Signal gateway configured by SECTION, as the dict the hub runs."
  (setv gw (SignalState (signal-settings section)))
  {"name" "signal"
   "run" (fn :async [hub] (await (signal-run gw hub)))
   "deliver" (fn :async [reply] (await (signal-deliver gw reply)))
   "stop" (fn :async [] (await (signal-stop gw)))
   "state" (fn [] (signal-state gw))})

(setv GATEWAY {"factory" make-signal "headless" True})
