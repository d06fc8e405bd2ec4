;; * Why

"Without the sandbox, running code the agent wrote is asked about, and a file
the agent wrote is code the agent wrote when something runs it: make after a
:write-file Makefile, npm test after a package.json with a postinstall,
pytest after a conftest.py. The shell gate sees one command line at a time,
so what earlier actions wrote has to reach it in the context, which is all a
gate may consult. This module is that one place: which files the agent's
actions wrote, as the journal tells it, for context-for to put in every
context as :written."

(import posixpath
        passepartout.proto [proto-get]
        passepartout.records [data-read])

(setv WRITTEN-LIMIT 512
      FIRST-SCAN 20000
      _write-file ':write-file
      _ok ':ok)

;; * What one result says it wrote

(defn wrote-paths [action result]
  "The files the RESULT of ACTION says were written: a :write-file's :path,
   and every path of the result's :wrote.
   (wrote-paths [:action :write-file :path \"a\"] [:status :ok :path \"/ws/a\"]) ⇒ [\"/ws/a\"]"
  (setv out [])
  (when (and (= (proto-get action ':action) _write-file) (= (proto-get result ':status) _ok))
    (setv path (proto-get result ':path))
    (when (isinstance path str) (.append out path)))
  (setv more (proto-get result ':wrote))
  (when (isinstance more list)
    (.extend out (gfor p more :if (isinstance p str) p)))
  out)

;; * From the journal

(defn written-files [store]
  "The files the agent's actions wrote, resolved, newest last, after the
   folders older ones gave way to (at most WRITTEN-LIMIT in all), as a tuple;
   #() without a store."
  (when (is store None) (return #()))
  (setv memo (.setdefault store.memo "written" {"last" None "paths" {} "folders" {} "tuple" #()}))
  (when (is (get memo "last") None)
    (setv top (.query store "SELECT MAX(id) FROM events WHERE kind = 'result'")
          top (or (get (get top 0) 0) 0)
          (get memo "last") (max 0 (- top FIRST-SCAN))))
  (setv rows (.query store (+ "SELECT id, data FROM events WHERE kind = 'result' AND id > ? "
                              "AND (data LIKE '%:write-file%' OR data LIKE '%:wrote %') ORDER BY id")
                     #((get memo "last")))
        paths (get memo "paths")
        folders (get memo "folders")
        changed False)
  (for [[id text] rows]
    (setv (get memo "last") (max (get memo "last") id))
    (try (setv data (data-read text))
         (except [Exception] (continue)))
    (for [p (wrote-paths (or (proto-get data ':action) []) (or (proto-get data ':result) []))]
      (.pop paths p None)
      (setv (get paths p) True
            changed True)))
  (when changed
    ;; the oldest give way to the folder they lie in, never to nothing: writing
    ;; many files must not make the gate forget the Makefile written first
    (while (> (+ (len paths) (len folders)) WRITTEN-LIMIT)
      (setv kept (if paths paths folders)
            oldest (next (iter kept))
            parent (posixpath.dirname (.rstrip oldest "/"))
            parent (if (in parent #("" "/")) "/" (+ parent "/")))
      (.pop kept oldest)
      (.pop folders parent None)
      (setv (get folders parent) True))
    (setv (get memo "tuple") (+ (tuple folders) (tuple paths))))
  (get memo "tuple"))
