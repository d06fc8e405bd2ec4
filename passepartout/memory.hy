;; * Why

":memory-add and :memory-search give the model a notebook that outlives a
conversation. The notes are rows of the store's memory table, in the same
SQLite file as everything else, and a full-text index (FTS5, built by
store-open) finds them by their words, best match first."

(import re time)

;; * Adding

(setv _surrogate-re (re.compile r"[\ud800-\udfff]"))

(defn memory-add [store text [session None] [ts None]]
  "Remember TEXT (from SESSION, at TS or now); its id."
  (when (not (isinstance text str))
    (raise (TypeError f"memory text must be a string, not {(. (type text) __name__)}")))
  (when (not (.strip text))
    (raise (ValueError "nothing to remember: the text is empty")))
  ;; a lone surrogate cannot be stored as UTF-8; it was never a character anyway
  (.write store "INSERT INTO memory (ts, session, text) VALUES (?, ?, ?)"
          #((if (is ts None) (time.time) (float ts)) session
            (_surrogate-re.sub "\ufffd" text))))

;; * Searching

(setv MAX-TERMS 32
      _word-re (re.compile r"[^\W_]+"))

(defn memory-terms [query]
  "The distinct lower-case words of QUERY that a search looks for."
  (when (not (isinstance query str))
    (raise (TypeError f"a memory query must be a string, not {(. (type query) __name__)}")))
  (setv terms [])
  (for [m (.finditer _word-re query)]
    (setv w (.lower (.group m 0)))
    (when (not (in w terms))
      (.append terms w)
      (when (>= (len terms) MAX-TERMS) (break))))
  terms)

(defn _fts-search [store terms limit]
  (setv match (.join " OR " (gfor t terms f"\"{t}\"")))
  (lfor [i text ts rank]
        (.query store "SELECT m.id, m.text, m.ts, bm25(memory_fts) AS rank
                       FROM memory_fts JOIN memory AS m ON m.id = memory_fts.rowid
                       WHERE memory_fts MATCH ?
                       ORDER BY rank, m.id DESC LIMIT ?"
                #(match limit))
        [:id i :text text :ts ts :score (- rank)]))

(defn _like-search [store terms limit]
  (setv score (.join " + " (gfor _ terms "(text LIKE ?)")))
  (lfor [i text ts n]
        (.query store (+ "SELECT id, text, ts, score FROM
                            (SELECT id, text, ts, " score " AS score FROM memory)
                          WHERE score > 0 ORDER BY score DESC, id DESC LIMIT ?")
                #(#* (gfor t terms f"%{t}%") limit))
        [:id i :text text :ts ts :score (float n)]))

(defn memory-search [store query [limit 5]]
  "The notes that best match the words of QUERY, best first, as plists
   (:id N :text T :ts T :score F); a higher score is a better match."
  (setv terms (memory-terms query)
        limit (int limit))
  (cond (or (not terms) (<= limit 0)) []
        store.fts (_fts-search store terms limit)
        True (_like-search store terms limit)))

;; * Meaning: vectors beside the words

(import array asyncio hashlib logging math operator
        hyrule [distinct]
        passepartout.proto [proto-get])

(setv log (logging.getLogger "passepartout.memory")
      RRF-K 60
      CANDIDATES 20
      EMBED-BATCH 32
      QUERY-WAIT 2.0)

(setv _defaults None)

(defn embedding-settings [config]
  "#(model api-base key-env) of the embedding model CONFIG names, or None."
  (global _defaults)
  ;; asked for every message: the defaults are built once
  (when (is _defaults None)
    (setv _defaults (hy.I.passepartout/config.config-defaults "memory")))
  (setv m (| _defaults (.get (or config {}) "memory" {}))
        model (.strip (or (.get m "embedding_model") "")))
  (when model
    #(model (or (.get m "embedding_api_base") None) (or (.get m "embedding_api_key_env") None))))

(defn content-hash [text]
  (.hexdigest (hashlib.sha256 (.encode text "utf-8" "surrogatepass"))))

(defn pack [vector]
  "VECTOR (numbers) as the bytes of a normalised float32 array."
  (setv norm (math.sqrt (sum (gfor x vector (* x x))))
        norm (if (> norm 0) norm 1.0))
  (.tobytes (array.array "f" (gfor x vector (/ x norm)))))

(defn unpack [blob]
  (setv a (array.array "f"))
  (.frombytes a blob)
  a)

(defn cached-vector [store model text]
  "The cached vector of TEXT by MODEL, or None."
  (setv rows (.query store "SELECT vector FROM embeddings WHERE hash = ? AND model = ?"
                     #((content-hash text) model)))
  (when rows (unpack (get rows 0 0))))

(defn _meaning-search [store model query limit]
  "The notes whose vectors by MODEL are nearest to the vector QUERY, best first."
  (setv scored (lfor [i text ts blob]
                     (.query store "SELECT m.id, m.text, m.ts, v.vector FROM memory_vectors AS v
                                    JOIN memory AS m ON m.id = v.memory WHERE v.model = ?"
                             #(model))
                     :setv v (unpack blob)
                     :if (= (len v) (len query))
                     #((sum (map operator.mul v query)) i text ts)))
  (.sort scored :key (fn [s] #((- (get s 0)) (- (get s 1)))))
  (lfor [score i text ts] (cut scored limit) [:id i :text text :ts ts :score score]))

(defn rrf [rankings limit]
  "RANKINGS (lists of hits, best first) fused by Reciprocal Rank Fusion: the
   LIMIT best hits, each with its fused :score."
  (setv score {} hit {})
  (for [ranking rankings]
    (for [[rank h] (enumerate ranking 1)]
      (setv i (proto-get h ':id)
            (get score i) (+ (.get score i 0.0) (/ 1.0 (+ RRF-K rank))))
      (when (not (in i hit)) (setv (get hit i) h))))
  (lfor i (cut (sorted score :key (fn [i] #((- (get score i)) (- i)))) limit)
        [:id i :text (proto-get (get hit i) ':text) :ts (proto-get (get hit i) ':ts)
         :score (round (get score i) 6)]))

(defn memory-recall [store text [limit 5] [model None]]
  "The notes that bear on TEXT, best first: by words, fused with the ranking by
   meaning when MODEL (an embedding model) has embedded TEXT already."
  (setv words (memory-search store text :limit (max limit CANDIDATES))
        query (when (and model (.strip text)) (cached-vector store model text)))
  (if (is query None)
      (cut words limit)
      (rrf [words (_meaning-search store model query CANDIDATES)] limit)))

;; ** Embedding

(defn :async embed [settings texts]
  "The vectors of TEXTS by the embedding model of SETTINGS, through LiteLLM."
  (import os litellm)
  (setv [model base key-env] settings
        response (await (litellm.aembedding :model model :input (list texts)
                                            :api-base base
                                            :api-key (when key-env (.get os.environ key-env))))
        data (sorted (. response data) :key (fn [d] (if (isinstance d dict) (get d "index") d.index))))
  (lfor d data (if (isinstance d dict) (get d "embedding") d.embedding)))

(defn :async embed-cached [store settings texts]
  "Embed those of TEXTS whose vectors are not cached yet, in one call, and cache them."
  (setv model (get settings 0)
        missing (list (distinct (gfor t texts :if (is (cached-vector store model t) None) t))))
  (when missing
    (setv vectors (await (embed settings missing)))
    (with [conn (.transaction store)]
      (for [[t v] (zip missing vectors)]
        (.execute conn "INSERT OR REPLACE INTO embeddings (hash, model, vector) VALUES (?, ?, ?)"
                  #((content-hash t) model (pack v))))))
  (len missing))

(defn pending-memories [store model [limit EMBED-BATCH]]
  "#(id text) of the notes with no vector by MODEL yet, oldest first."
  (lfor r (.query store "SELECT id, text FROM memory WHERE id NOT IN
                          (SELECT memory FROM memory_vectors WHERE model = ?) ORDER BY id LIMIT ?"
                  #(model limit))
        #(#* r)))

(defn :async embed-pending [store settings]
  "Embed every note that has no vector yet, a batch at a time; how many were."
  (setv model (get settings 0)
        done 0)
  (while True
    (setv batch (pending-memories store model))
    (when (not batch) (return done))
    (await (embed-cached store settings (lfor [_ t] batch t)))
    (with [conn (.transaction store)]
      (for [[i t] batch]
        (setv v (cached-vector store model t))
        (when v
          (.execute conn "INSERT OR REPLACE INTO memory_vectors (memory, model, vector) VALUES (?, ?, ?)"
                    #(i model (.tobytes v))))))
    (+= done (len batch))))

(defn :async prepare-recall [store config text]
  "Before a step's prompt: start embedding the notes not embedded yet (in the
   background, one run at a time) and wait at most QUERY-WAIT seconds for the
   vector of TEXT. Nothing when no embedding model is configured."
  (setv settings (embedding-settings config))
  (when (is settings None) (return None))
  (setv running (.get store.memo "embedding"))
  (when (or (is running None) (.done running))
    (setv (get store.memo "embedding") (asyncio.ensure-future (_quietly (embed-pending store settings)))))
  (when (.strip text)
    (try (await (asyncio.wait-for (embed-cached store settings [text]) QUERY-WAIT))
         (except [e Exception]
           (.warning log "could not embed the message: %s" e)))))

(defn :async _quietly [coroutine]
  (try (await coroutine)
       (except [e Exception]
         (.warning log "could not embed the notes: %s" e))))

(defn recall-summary [store config]
  "How memory is recalled here, in one line."
  (setv words (if store.fts "words (FTS5)" "words (LIKE: this SQLite has no FTS5)")
        settings (embedding-settings config))
  (if (is settings None)
      (+ "by " words "; no embedding model is configured")
      (do (setv model (get settings 0)
                total (get (.query store "SELECT count(*) FROM memory") 0 0)
                done (get (.query store "SELECT count(*) FROM memory_vectors WHERE model = ?" #(model)) 0 0))
          f"by {words} and meaning ({model}, {done} of {total} notes embedded), fused by reciprocal rank")))

;; * Changes, and dreaming

(import passepartout.proto [proto-get proto-print])

(setv CONTAINED-WORDS 4
      SMALL-WORD 3
      NEGATIONS #{"no" "not" "nor" "non" "never"}
      MEMORY-SESSION "memory"
      LAST-DREAM-KEY "memory:last-dream")

(defn _note [store i]
  "Note I as (:id :ts :session :text), or None."
  (setv rows (.query store "SELECT id, ts, session, text FROM memory WHERE id = ?" #(i)))
  (when rows
    (setv [i ts session text] (get rows 0))
    [:id i :ts ts :session session :text text]))

(defn _change [store data [session None]]
  "Journal the memory change DATA; its turn's id."
  (hy.I.passepartout/journal.journal-event store "memory" (or session MEMORY-SESSION) data))

(defn _drop [store notes]
  (with [conn (.transaction store)]
    (for [n notes]
      (.execute conn "DELETE FROM memory WHERE id = ?" #((proto-get n ':id))))))

(defn memory-forget-id [store i [session None]]
  "Forget note I; the change's turn id, or None when there is no such note."
  (setv note (_note store i))
  (when note
    (_drop store [note])
    (_change store [:change "forget" :removed [note]] session)))

(defn _words [text] (set (memory-terms text)))

(defn memory-forget [store words [session None]]
  "Forget the notes holding every word of WORDS, and keep the request for
   dreaming; #(turn-id notes-dropped)."
  (setv wanted (_words words))
  (when (not wanted)
    (raise (ValueError "nothing to forget: name a note's number or some of its words")))
  (setv notes (lfor [i ts s text] (.query store "SELECT id, ts, session, text FROM memory ORDER BY id")
                    :if (<= wanted (_words text))
                    [:id i :ts ts :session s :text text]))
  (_drop store notes)
  #((_change store [:change "forget" :forget words :removed notes] session) (len notes)))

(defn forget-requests [store]
  "The word sets of every standing forget request (one reverted stands no more)."
  (setv changes (hy.I.passepartout/records.events store :kind "memory" :limit None)
        reverted (sfor e changes :setv r (proto-get (proto-get e ':data) ':reverts) :if r r))
  (lfor e changes
        :setv w (proto-get (proto-get e ':data) ':forget)
        :if (and w (not (in (proto-get e ':id) reverted)))
        (_words w)))

(defn _small [w]
  "True for a word too small to change what a note says: a few letters, no
   digit, no negation."
  (and (<= (len w) SMALL-WORD) (not (in w NEGATIONS)) (not (any (gfor c w (.isdigit c))))))

(defn same-note [a b]
  "True when the notes of word sets A and B (the shorter of at least
   CONTAINED-WORDS words) say the same: every word of the shorter is in the
   longer, or they differ only in small words."
  (setv shorter (min (len a) (len b)))
  (and (>= shorter CONTAINED-WORDS)
       (or (= (len (& a b)) shorter)
           (all (gfor w (^ a b) (_small w))))))

(defn near-duplicates [notes]
  "Pairs #(kept dropped) of NOTES (#(id ts text)) that say the same."
  (setv words (dfor [i ts text] notes i (_words text))
        when-of (dfor [i ts text] notes i ts)
        by-word {})
  (for [[i ts text] notes]
    (for [w (get words i)]
      (.append (.setdefault by-word w []) i)))
  (setv gone (set)
        pairs [])
  (for [[i ts text] notes]
    (setv mine (get words i)
          telling (or (lfor w mine :if (not (_small w)) w) (list mine)))
    (when (or (in i gone) (not telling)) (continue))
    ;; a note that says the same as this one holds its rarest telling word
    (setv rarest (min telling :key (fn [w] #((len (get by-word w)) w))))
    (for [j (get by-word rarest)]
      (when (or (= j i) (in j gone)) (continue))
      (setv theirs (get words j))
      (when (same-note mine theirs)
        (setv better (cond (> (len theirs) (len mine)) j
                           (< (len theirs) (len mine)) i
                           (> (get when-of j) (get when-of i)) j
                           (< (get when-of j) (get when-of i)) i
                           (> j i) j
                           True i)
              worse (if (= better i) j i))
        (.add gone worse)
        (.append pairs #(better worse))
        (when (= worse i) (break)))))
  pairs)

(defn dream [store [now None] [stale-days 365] [session None]]
  "Consolidate memory: drop what was asked to be forgotten, merge near-duplicates,
   mark stale notes. (:forgotten N :merged N :stale N :turns (ids) :before N :after N)."
  (setv now (if (is now None) (time.time) now)
        turns []
        before (get (.query store "SELECT count(*) FROM memory") 0 0)
        requests (forget-requests store)
        rows (.query store "SELECT id, ts, session, text FROM memory ORDER BY id")
        forgotten 0)
  (for [[i ts s text] rows]
    (setv mine (_words text))
    (when (any (gfor r requests (<= r mine)))
      (setv note [:id i :ts ts :session s :text text])
      (_drop store [note])
      (+= forgotten 1)
      (.append turns (_change store [:change "forget" :removed [note] :by "dream"] session))))
  (setv rows (.query store "SELECT id, ts, text FROM memory ORDER BY id")
        pairs (near-duplicates (lfor r rows #(#* r))))
  (for [[kept worse] pairs]
    (setv note (_note store worse))
    (_drop store [note])
    (.append turns (_change store [:change "merge" :into kept :removed [note] :by "dream"] session)))
  (setv old (lfor [i] (.query store "SELECT id FROM memory WHERE stale IS NULL AND ts < ? ORDER BY id"
                              #((- now (* stale-days 86400))))
                  i))
  (when old
    (with [conn (.transaction store)]
      (for [i old] (.execute conn "UPDATE memory SET stale = ? WHERE id = ?" #(now i))))
    (.append turns (_change store [:change "stale" :marked old :by "dream"] session)))
  (setv r [:forgotten forgotten :merged (len pairs) :stale (len old) :turns turns
           :before before :after (get (.query store "SELECT count(*) FROM memory") 0 0)])
  (hy.I.passepartout/records.kv-put store LAST-DREAM-KEY (+ [:at now] r))
  r)

(defn memory-history [store [limit 50]]
  "The last LIMIT memory changes, oldest first, as (:turn ID :ts T :change C :data D)."
  (lfor e (hy.I.passepartout/records.events store :kind "memory" :limit limit :latest True)
        [:turn (proto-get e ':id) :ts (proto-get e ':ts)
         :change (proto-get (proto-get e ':data) ':change) :data (proto-get e ':data)]))

(defn change-line [c]
  "One line about the memory change C."
  (setv d (proto-get c ':data)
        removed (proto-get d ':removed [])
        what (cond (proto-get d ':forget) f"forget {(proto-get d ':forget) !r}"
                   (= (proto-get c ':change) "merge") f"merged into note {(proto-get d ':into)}"
                   (= (proto-get c ':change) "stale") f"marked {(len (proto-get d ':marked []))} notes stale"
                   (= (proto-get c ':change) "revert") f"reverted turn {(proto-get d ':reverts)}"
                   True (str (proto-get c ':change))))
  (+ f"#{(proto-get c ':turn)} {what}"
     (if removed
         (+ ": removed " (.join "; " (gfor n removed f"[{(proto-get n ':id)}] {(proto-get n ':text)}")))
         "")))

(defn memory-revert [store turn [session None]]
  "Undo the memory change of journal turn TURN: its removed notes come back
   (with their ids), its stale marks go. The revert's own turn id."
  (setv found (.query store "SELECT data FROM events WHERE id = ? AND kind = 'memory'" #(turn)))
  (when (not found)
    (raise (ValueError f"turn {turn} is no memory change")))
  (setv d (hy.I.passepartout/records.data-read (get found 0 0))
        removed (proto-get d ':removed [])
        marked (proto-get d ':marked []))
  (with [conn (.transaction store)]
    (for [n removed]
      (.execute conn "INSERT OR IGNORE INTO memory (id, ts, session, text) VALUES (?, ?, ?, ?)"
                #((proto-get n ':id) (proto-get n ':ts) (proto-get n ':session) (proto-get n ':text))))
    (for [i marked]
      (.execute conn "UPDATE memory SET stale = NULL WHERE id = ?" #(i))))
  (hy.I.passepartout/journal.journal-append
    store [:event "memory" :session (or session MEMORY-SESSION) :parents [turn]
           :data [:change "revert" :reverts turn :restored (lfor n removed (proto-get n ':id))
                  :unmarked marked]]))

;; * Dreaming at night

(import datetime zoneinfo)

(setv DREAM-NIGHT-KEY "memory:dream-night"
      DREAM-POLL 60
      _dream-at-re (re.compile r"^(\d{1,2}):(\d{2})$"))

(defn dream-at [config]
  "The local time of CONFIG's [memory] dream_at as #(hour minute); None for
   off. A ValueError for text that is neither.
   (dream-at {\"memory\" {\"dream_at\" \"3:30\"}}) ⇒ #(3 30)"
  (setv text (.get (| (hy.I.passepartout/config.config-defaults "memory") (.get (or config {}) "memory" {}))
                   "dream_at")
        t (.lower (.strip (str (if (is text None) "" text)))))
  (when (in t #("" "off" "no" "none" "false" "never"))
    (return None))
  (setv m (.match _dream-at-re t))
  (when (or (not m) (> (int (.group m 1)) 23) (> (int (.group m 2)) 59))
    (raise (ValueError f"[memory] dream_at: {text !r} is no time of day; write one such as \"03:00\", or \"off\"")))
  #((int (.group m 1)) (int (.group m 2))))

(defn dream-night [now at tz]
  "The night the POSIX time NOW is in, for dreams at AT (#(hour minute)) in
   the zone TZ (a name): the local date of the last AT not after NOW."
  (setv zone (zoneinfo.ZoneInfo tz)
        local (datetime.datetime.fromtimestamp now zone)
        day (.date local)
        first (.timestamp (datetime.datetime day.year day.month day.day #* at :tzinfo zone)))
  ;; the wall clock past AT (the spring's gap), or the first AT passed (the autumn's hour again)
  (when (and (< #(local.hour local.minute) at) (< now first))
    (setv day (- day (datetime.timedelta :days 1))))
  (.isoformat day))

(defn _take-night [store night]
  "Take NIGHT to dream: True when it is later than the last night taken,
   False when it is not, None when no night was ever taken (NIGHT is taken,
   to be the first not dreamed)."
  (setv kv hy.I.passepartout/records)
  (with [_ (.transaction store)]
    (setv last (kv.kv-get store DREAM-NIGHT-KEY))
    (when (and (is-not last None) (>= last night))
      (return False))
    (kv.kv-put store DREAM-NIGHT-KEY night)
    (if (is last None) None True)))

(defn dream-pass [services at tz]
  "Dream when the night at the services' clock is not dreamed yet; the
   dream's result, or None."
  (setv now (services.clock)
        night (dream-night now at tz)
        last (hy.I.passepartout/records.kv-get services.store DREAM-NIGHT-KEY))
  (when (or (and (is-not last None) (>= last night))
            (not (_take-night services.store night)))
    (return None))
  (setv r (dream services.store :now now))
  (when (proto-get r ':turns)
    (.info log "dreamed (the night of %s): %s" night (dream-text r)))
  r)

(defn dream-text [r]
  "What the dream R changed, in a few words."
  (if (proto-get r ':turns)
      (+ f"{(proto-get r ':merged)} merged, {(proto-get r ':forgotten)} forgotten, "
         f"{(proto-get r ':stale)} marked stale; {(proto-get r ':before)} notes before, {(proto-get r ':after)} after")
      "nothing changed"))

(defn dream-summary [store config]
  "When memory is consolidated and what the last time changed, in one line."
  (setv schedule (try (setv at (dream-at config))
                      (if at
                          (+ f"nightly at {(get at 0) :02d}:{(get at 1) :02d} "
                             f"({(hy.I.passepartout/routines.config-zone config)})")
                          "never at night ([memory] dream_at is off)")
                      (except [e ValueError] (str e)))
        last (hy.I.passepartout/records.kv-get store LAST-DREAM-KEY))
  (+ schedule "; "
     (if last
         (+ "last " (hy.I.passepartout/routines.show-time
                      (proto-get last ':at) (hy.I.passepartout/routines.config-zone config))
            ": " (dream-text last))
         "not yet")))

(defn :async dream-service [env hub]
  "Dream once a night in the daemon ENV while it runs, unless [memory]
   dream_at is off."
  (setv routines hy.I.passepartout/routines)
  (try (setv at (dream-at env.config))
       (except [e ValueError]
         (.error log "%s; memory is not consolidated at night" e)
         (return)))
  (setv tz (routines.config-zone env.config)
        problem (routines.zone-problem tz))
  (when problem
    (.error log "[routines] time_zone: %s; memory is not consolidated at night" problem)
    (return))
  (when (is at None) (return))
  (while True
    (try (await (asyncio.to-thread dream-pass env at tz))
         (except [asyncio.CancelledError] (raise))
         (except [e Exception] (.error log "memory could not be consolidated: %s" e)))
    (await (asyncio.sleep DREAM-POLL))))
