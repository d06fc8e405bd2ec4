;; Tests of passepartout/memory.hy: notes found by their words, queries that cannot break out.

(import pytest
        hypothesis [given settings strategies :as st HealthCheck]
        passepartout.store [store-open store-path-for]
        passepartout.memory [memory-add memory-search memory-terms MAX-TERMS]
        steps [expect :as check])

(defn ids [results] (lfor r results (get r 1)))
(defn texts [results] (lfor r results (get r 3)))

(setv notes
  ["The boiler is serviced every October by Hamid."
   "Anna's birthday is on the 3rd of March; she likes orchids."
   "The wifi password for the cabin is written on the fridge."
   "Backups of the photo library run every Sunday night to the NAS."
   "Orchids need watering once a week, less in winter."])

(defn filled [tmp-path [fts True]]
  (setv store (store-open (store-path-for tmp-path) :fts fts))
  (for [[i n] (enumerate notes)]
    (memory-add store n :session "terminal" :ts (+ 1000.0 i)))
  store)

(defn check-ranking [store]
  "Shared by the FTS5 and the LIKE stores."
  (setv got (memory-search store "orchids"))
  (check (sorted (texts got)) (sorted [(get notes 1) (get notes 4)]) "both orchid notes")
  (setv got (memory-search store "when are the orchids watered in winter"))
  (check (get (texts got) 0) (get notes 4) "more shared words rank first")
  (check (get got 0 5) 1004.0 "ts")
  (assert (>= (get got 0 7) (get got -1 7)) f"best first: {got}")
  (setv got (memory-search store "BOILER"))
  (check (texts got) [(get notes 0)] "case does not matter")
  (check (memory-search store "zeppelin") [] "no match")
  (check (len (memory-search store "the" :limit 2)) 2 "limit")
  (check (memory-search store "the" :limit 0) [] "limit 0"))

;; * Adding and finding

(defn test-add-returns-increasing-ids [tmp-path]
  (with [store (store-open (store-path-for tmp-path))]
    (setv a (memory-add store "first note")
          b (memory-add store "second note"))
    (assert (< 0 a b) f"ids {a} {b}")
    (check (get (.query store "SELECT session FROM memory WHERE id = ?" #(a)) 0 0) None)))

(defn test-fts5-is-used-when-present [tmp-path]
  (with [store (filled tmp-path)]
    (assert store.fts "this SQLite has FTS5")
    (check (len (.query store "SELECT rowid FROM memory_fts WHERE memory_fts MATCH 'orchids'"))
           2 "the index follows the table")))

(defn test-search-ranks-with-fts5 [tmp-path]
  (with [store (filled tmp-path)]
    (check-ranking store)
    (setv got (memory-search store "photo backups"))
    (check (get got 0)
           [:id 4 :text (get notes 3) :ts 1003.0 :score (get got 0 7)] "result shape")
    (assert (isinstance (get got 0 7) float) "score is a float")))

(defn test-search-ranks-with-like [tmp-path]
  (with [store (filled tmp-path :fts False)]
    (assert (not store.fts) "FTS5 turned off")
    (check (.query store "SELECT name FROM sqlite_master WHERE name = 'memory_fts'") []
           "no index built")
    (check-ranking store)
    (check (get (memory-search store "orchids watering winter") 0 7) 3.0
           "LIKE score counts the words")))

(defn test-notes-written-without-the-index-are-found-once-it-exists [tmp-path]
  (.close (filled tmp-path :fts False))
  (with [store (store-open (store-path-for tmp-path))]
    (assert store.fts "index built on the second open")
    (check (texts (memory-search store "boiler")) [(get notes 0)] "old note indexed")
    (memory-add store "A new boiler was fitted in 2025.")
    (check (len (memory-search store "boiler")) 2 "new note indexed")))

(defn test-accents-and-other-scripts [tmp-path]
  (with [store (store-open (store-path-for tmp-path))]
    (memory-add store "Rendez-vous au café à 15h")
    (memory-add store "東京 trip in April")
    (check (len (memory-search store "cafe")) 1 "diacritics folded")
    (check (len (memory-search store "東京")) 1 "other scripts")))

(defn test-what-cannot-be-remembered [tmp-path]
  (with [store (store-open (store-path-for tmp-path))]
    (with [(pytest.raises ValueError)] (memory-add store "   \n"))
    (with [(pytest.raises TypeError)] (memory-add store None))
    (with [(pytest.raises TypeError)] (memory-search store None))
    (setv i (memory-add store "broken \ud800 text"))
    (check (get (.query store "SELECT text FROM memory WHERE id = ?" #(i)) 0 0)
           "broken \ufffd text" "a lone surrogate becomes U+FFFD")))

;; * Hostile queries

(defn test-terms-are-plain-words [tmp-path]
  (check (memory-terms "\"NEAR(a b) OR c:d* ^e -f AND g\"") ["near" "a" "b" "or" "c" "d" "e" "f" "and" "g"])
  (check (memory-terms "snake_case x--y") ["snake" "case" "x" "y"])
  (check (memory-terms "a a A") ["a"] "no repeats")
  (check (len (memory-terms (.join " " (gfor i (range 100) f"w{i}")))) MAX-TERMS "capped"))

(setv hostile-queries
  ["\"" "\"\"" "'" "NEAR(" "NEAR(orchids boiler, 2)" "*" "orch*" "a:b" "text:orchids"
   ") OR (" "(" ")" "AND" "OR" "NOT" "orchids NOT boiler" "^orchids" "-orchids" "+"
   "\x00" "orchids\x00boiler" "{text}: orchids" "memory_fts" "'; DROP TABLE memory; --"
   "%" "_" "\\" "%orchids%" "" "   " "?!.,;" "\ud800" (* "orchids " 10000)
   (* "(" 5000)])

(defn test-hostile-queries-never-raise [tmp-path]
  (for [fts [True False]]
    (with [store (filled (/ tmp-path (str fts)) :fts fts)]
      (for [q hostile-queries]
        (setv got (memory-search store q))
        (assert (isinstance got list) f"{q !r}: {got !r}")
        (when (not (memory-terms q))
          (check got [] f"{q !r} has no words"))
        (when (in "orchids" (.lower q))
          (assert (in (get notes 4) (texts got)) f"{q !r} still finds the word: {got !r}")))
      (check (get (.query store "SELECT count(*) FROM memory") 0 0) (len notes)
             "the table is intact"))))

(defn test-operators-in-a-query-are-words [tmp-path]
  (with [store (filled tmp-path)]
    ;; read as FTS5 syntax, each of these would find something else
    (assert (in (get notes 4) (texts (memory-search store "orchids NOT winter")))
            "NOT is a word, not an exclusion")
    (check (memory-search store "orch*") [] "* is not a prefix search")
    (check (sorted (texts (memory-search store "NEAR(boiler orchids)")))
           (sorted [(get notes 0) (get notes 1) (get notes 4)])
           "NEAR is a word, and its arguments are words")))

(defn [(settings :max-examples 150 :deadline None
                 :suppress-health-check [HealthCheck.function-scoped-fixture])
       (given (st.text :max-size 60))]
      test-any-text-is-a-safe-query [tmp-path q]
  (with [store (store-open (store-path-for (/ tmp-path "p")))]
    (when (not (memory-search store "seed"))
      (memory-add store "seed note with some words"))
    (assert (isinstance (memory-search store q) list) f"{q !r}")))
