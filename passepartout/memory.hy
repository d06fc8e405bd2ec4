;; * Why

(import re time
        passepartout.proto [literal-keywords :as hy])

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

;; * Recall

(defn memory-recall [store text [limit 5]]
  "The notes that bear on TEXT, best first, as memory-search gives them."
  (memory-search store text :limit limit))
