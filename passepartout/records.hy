;; * Why

"What the store keeps is plist text: a value goes in as the text proto-print
writes and comes out as proto-read reads it, checked on the way in against the
limits it will be read with. On that rest the simplest of its records: the
events the daemon saw and did, small pieces of key-value state, and the
sessions it has spoken in. The file they live in, its schema and its opening
are store.org's."

(import re time
        hy.models [Keyword]
        passepartout.proto [ProtoError proto-print proto-read MAX-DEPTH])

;; * Values as plist text

(setv MAX-DATA-BYTES (* 16 1024 1024)
      _max-data-depth (* 4 MAX-DEPTH)
      _surrogate-re (re.compile r"[\ud800-\udfff]"))

(defn _escape-surrogate [m]
  f"\\u{(ord (.group m 0)) :04x}")

(defn data-print [value]
  "VALUE as stored text; a ProtoError when it would not read back."
  (setv text (_surrogate-re.sub _escape-surrogate (proto-print value _max-data-depth)))
  (when (> (len (.encode text "utf-8")) MAX-DATA-BYTES)
    (raise (ProtoError f"larger than {MAX-DATA-BYTES} bytes")))
  text)

(defn data-read [text]
  "The value of stored TEXT, read with the store's wider limits."
  (proto-read text :max-bytes MAX-DATA-BYTES :max-depth _max-data-depth))

(defn _name [x what]
  "The text of X, a string or a keyword naming WHAT."
  (setv s (cond (isinstance x Keyword) x.name
                (isinstance x str) x
                True (raise (TypeError f"{what} must be a string, not {(. (type x) __name__)}"))))
  (when (_surrogate-re.search s)
    (raise (ValueError f"{what} must be Unicode text: {(ascii s)} holds a lone surrogate")))
  s)

(defn _now [ts]
  (if (is ts None) (time.time) (float ts)))

;; * Events

(defn event-append [store kind session data [ts None]]
  "Append an event of KIND in SESSION carrying the plist DATA; its id."
  (.write store "INSERT INTO events (ts, kind, session, data) VALUES (?, ?, ?, ?)"
          #((_now ts) (_name kind "an event kind")
            (if (is session None) None (_name session "a session"))
            (data-print data))))

(defn events [store [kind None] [session None] [since-id 0] [limit 100] [latest False] [kinds None]]
  "The events after SINCE-ID, oldest first, as plists
   (:id N :ts T :kind K :session S :data PLIST); KIND (or any of KINDS) and
   SESSION filter, LIMIT None means all. With LATEST, the last LIMIT events
   (still oldest first)."
  (setv where ["id > ?"]
        params [since-id])
  (when (is-not kind None)
    (.append where "kind = ?")
    (.append params (_name kind "an event kind")))
  (when kinds
    (.append where (+ "kind IN (" (.join ", " (* ["?"] (len kinds))) ")"))
    (.extend params (lfor k kinds (_name k "an event kind"))))
  (when (is-not session None)
    (.append where "session = ?")
    (.append params (_name session "a session")))
  (.append params (if (is limit None) -1 limit))
  (setv rows (.query store (+ "SELECT id, ts, kind, session, data FROM events WHERE "
                              (.join " AND " where)
                              (if latest " ORDER BY id DESC LIMIT ?" " ORDER BY id LIMIT ?"))
                     params))
  (lfor [i ts k s data] (if latest (reversed rows) rows)
        [:id i :ts ts :kind k :session s :data (data-read data)]))

;; * Key-value state

(setv HEARTBEAT-KEY "daemon:heartbeat")

(defn kv-get [store key [default None]]
  "The value stored under KEY, or DEFAULT."
  (setv rows (.query store "SELECT value FROM kv WHERE key = ?" #((_name key "a key"))))
  (if rows (data-read (get rows 0 0)) default))

(defn kv-put [store key value]
  "Store VALUE under KEY, replacing what was there."
  (.write store "INSERT INTO kv (key, value) VALUES (?, ?)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value"
          #((_name key "a key") (data-print value)))
  None)

(defn kv-delete [store key]
  "Forget KEY."
  (.write store "DELETE FROM kv WHERE key = ?" #((_name key "a key")))
  None)

;; * Sessions

(defn session-touch [store name gateway [ts None]]
  "Record that session NAME on GATEWAY was active at TS (now by default)."
  (setv ts (_now ts))
  (.write store "INSERT INTO sessions (name, gateway, created, last_seen) VALUES (?, ?, ?, ?)
                 ON CONFLICT (name) DO UPDATE SET gateway = excluded.gateway,
                                                  last_seen = excluded.last_seen"
          #((_name name "a session") (if (is gateway None) None (_name gateway "a gateway"))
            ts ts))
  None)

(defn session-list [store]
  "Every session, most recently seen first, as plists
   (:name N :gateway G :created T :last-seen T)."
  (lfor [name gateway created seen]
        (.query store "SELECT name, gateway, created, last_seen FROM sessions
                       ORDER BY last_seen DESC, name")
        [:name name :gateway gateway :created created :last-seen seen]))
