;; Tests of passepartout/records.hy: events, key-value state and sessions in the store.

(import pytest
        passepartout.proto [proto-print ProtoError]
        passepartout.records [event-append events kv-get kv-put kv-delete session-touch session-list]
        steps [expect :as check open-store])

(defn test-event-round-trip [tmp-path]
  (with [store (open-store tmp-path)]
    (setv data [:type :event :source [:gateway :telegram :chat 42]
                :payload [:text "hi" :n 1.5 :ok True :none None :items [1 2 3]]]
          i (event-append store "signal" "telegram:42" data :ts 1000.5)
          j (event-append store ':reply "telegram:42" [:text "hello"]))
    (assert (< i j) f"ids {i} {j}")
    (setv got (events store))
    (check (get got 0) [:id i :ts 1000.5 :kind "signal" :session "telegram:42" :data data])
    (check (get got 1 7) "telegram:42")
    (check (get got 1 5) "reply" "a keyword kind is stored by name")
    (assert (isinstance (get got 1 3) float) "ts defaults to now")
    (check (get (.query store "SELECT data FROM events WHERE id = ?" #(i)) 0 0)
           (proto-print data) "stored as plist text")))

(defn test-event-filters [tmp-path]
  (with [store (open-store tmp-path)]
    (setv ids (lfor n (range 10)
                    (event-append store (if (% n 2) "odd" "even") (if (< n 5) "s1" "s2") [:n n])))
    (defn ns [#** kw] (lfor e (events store #** kw) (get e 9 1)))
    (check (ns) (list (range 10)) "all")
    (check (ns :kind "odd") [1 3 5 7 9] "kind")
    (check (ns :session "s2") [5 6 7 8 9] "session")
    (check (ns :kind "even" :session "s1") [0 2 4] "kind and session")
    (check (ns :since-id (get ids 6)) [7 8 9] "since-id")
    (check (ns :limit 3) [0 1 2] "limit")
    (check (ns :since-id (get ids 2) :limit 2) [3 4] "since-id and limit")
    (check (ns :limit None) (list (range 10)) "no limit")
    (check (ns :kind "none such") [] "unknown kind")))

(defn test-data-that-would-not-read-back-is-refused [tmp-path]
  (with [store (open-store tmp-path)]
    (with [(pytest.raises ProtoError)]
      (event-append store "x" None [:f (float "inf")]))
    (with [(pytest.raises ProtoError)]
      (event-append store "x" None [:obj (object)]))
    (setv deep [])
    (for [_ (range 200)] (setv deep [deep]))
    (with [(pytest.raises ProtoError)]
      (event-append store "x" None deep))
    (with [(pytest.raises TypeError)]
      (event-append store 42 None [:a 1]))
    (check (events store) [] "nothing was stored")))

(defn test-large-data-round-trips [tmp-path]
  ;; bigger than a network message may be, well within the store's limit
  (with [store (open-store tmp-path)]
    (setv big (* "x" 200000))
    (event-append store "tool-result" "s" [:output big])
    (check (get (events store) 0 9) [:output big])))

(setv hostile
  ["'); DROP TABLE events; --"
   "\" OR 1=1 --"
   "(:approved t)"
   "#.(os.system \"rm -rf /\")"
   "\\\" ) (:evil"
   "a\x00b"
   "line\nbreak\r\ttab\x1b[31mred"
   "\u2028\u2029 separators"
   "emoji 🦀 and ünïcödé and 中文"
   "lone \ud800 surrogate \udfff"
   ";; a comment"
   "%_ like wildcards \\"
   ""])

(defn test-hostile-strings-round-trip [tmp-path]
  (with [store (open-store tmp-path)]
    (setv data [:strings hostile :nested [:k (get hostile 0) :list hostile]])
    (setv names (lfor s hostile :if (not (in "\ud800" s)) s))
    (for [s names]
      (event-append store s s [:text s])
      (kv-put store s s))
    (event-append store "all" None data)
    (setv got (events store :limit None))
    (check (lfor e (cut got (len names)) (get e 5)) names "kinds")
    (check (lfor e (cut got (len names)) (get e 7)) names "sessions")
    (check (lfor e (cut got (len names)) (get e 9 1)) names "data")
    (check (get got -1 9) data "nested data, lone surrogates included")
    (check (lfor s names (kv-get store s)) names "kv")
    (for [bad ["lone \ud800" (hy.models.Keyword "k\udfff")]]
      (with [(pytest.raises ValueError)]
        (event-append store bad None [:a 1]))
      (with [(pytest.raises ValueError)]
        (kv-put store bad 1)))
    (check (len (.query store "SELECT name FROM sqlite_master WHERE name = 'events'")) 1
           "the events table is still there")))

(defn test-kv [tmp-path]
  (with [store (open-store tmp-path)]
    (check (kv-get store "missing") None "missing")
    (check (kv-get store "missing" 7) 7 "default")
    (kv-put store "offset" 41)
    (kv-put store "offset" 42)
    (check (kv-get store "offset") 42 "replaced")
    (kv-put store "plist" [:until 12.5 :names ["a" "b"] :on True])
    (check (kv-get store "plist") [:until 12.5 :names ["a" "b"] :on True] "plist")
    (kv-put store "nil" None)
    (check (kv-get store "nil" "default") None "a stored nil is not missing")
    (kv-delete store "offset")
    (check (kv-get store "offset") None "deleted")))

(defn test-session-touch [tmp-path]
  (with [store (open-store tmp-path)]
    (session-touch store "telegram:42" "telegram" :ts 100.0)
    (session-touch store "terminal" "terminal" :ts 150.0)
    (session-touch store "telegram:42" "telegram" :ts 200.0)
    (check (session-list store)
           [[:name "telegram:42" :gateway "telegram" :created 100.0 :last-seen 200.0]
            [:name "terminal" :gateway "terminal" :created 150.0 :last-seen 150.0]])))
