;; Tests of passepartout/written.hy: the files the agent wrote, from the journal,
;; into every context as :written.

(import pathlib [Path]
        passepartout.proto [proto-get]
        passepartout.store [store-open store-path-for]
        passepartout.records [event-append]
        passepartout.journal [journal-append]
        passepartout.context [make-context context-for]
        passepartout.services [Services]
        passepartout.written [written-files wrote-paths WRITTEN-LIMIT]
        steps [expect :as check])

(defn result [store action res [session "s"]]
  (journal-append store [:event "result" :session session
                         :data [:action action :result res :task "t" :step 0]]))

(defn test-what-a-result-says-it-wrote []
  (check (wrote-paths [:action :write-file :path "a"] [:status :ok :path "/ws/a"]) ["/ws/a"] "write-file")
  (check (wrote-paths [:action :write-file :path "a"] [:status :error :error "no"]) [] "a failed write")
  (check (wrote-paths [:action :shell :cmd "make"] [:status :ok :wrote ["/ws/x" "/ws/y"]])
         ["/ws/x" "/ws/y"] "a shell action's :wrote")
  (check (wrote-paths [:action :shell :cmd "ls"] [:status :ok :output "wrote nothing"]) [] "nothing"))

(defn test-the-journal-tells-which-files-were-written [tmp-path]
  (with [store (store-open (store-path-for (/ tmp-path "data")))]
    (check (written-files store) #() "an empty journal")
    (result store [:action :write-file :path "Makefile" :content "x"] [:status :ok :path "/ws/Makefile"])
    (result store [:action :shell :cmd "ls"] [:status :ok :output ":wrote nothing here"])
    (result store [:action :shell :cmd "gen"] [:status :ok :wrote ["/ws/gen.c" "/ws/Makefile"]] "other")
    (setv first (written-files store))
    (check first #("/ws/gen.c" "/ws/Makefile") "newest last, one entry each, every session")
    (assert (is (written-files store) first) "the same tuple while nothing new was written")
    (for [i (range (+ WRITTEN-LIMIT 3))]
      (result store [:action :write-file :path f"f{i}"] [:status :ok :path f"/ws/f{i}"]))
    (setv many (written-files store))
    (check (len many) WRITTEN-LIMIT "at most WRITTEN-LIMIT")
    (check (get many -1) f"/ws/f{(+ WRITTEN-LIMIT 2)}" "the newest kept")
    (assert (in "/ws/" many) f"the oldest give way to their folder, not to nothing: {(cut many 0 3)}")
    (assert (not (in "/ws/Makefile" many)) "the Makefile itself is coarsened into /ws/")
    ;; files in as many folders as the limit allows, and more: coarser still, bounded
    (for [i (range (+ WRITTEN-LIMIT 3))]
      (result store [:action :write-file :path f"d{i}/x"] [:status :ok :path f"/ws/d{i}/x"]))
    (setv coarse (written-files store))
    (assert (<= (len coarse) WRITTEN-LIMIT) f"{(len coarse)} entries")
    (assert (in "/ws/" coarse) "the workspace's folder stands for what was written below it")))

(defn test-a-daemon-context-carries-what-was-written [tmp-path]
  (with [store (store-open (store-path-for (/ tmp-path "data")))]
    (result store [:action :write-file :path "conftest.py" :content "x"]
            [:status :ok :path (str (/ tmp-path "ws" "conftest.py"))])
    (setv services (Services {"workspace" (str (/ tmp-path "ws"))} store None None)
          ctx (context-for services "terminal:local"))
    (check (proto-get ctx ':written) #((str (/ tmp-path "ws" "conftest.py"))) "context-for fills :written")
    (check (proto-get (make-context :workspace (str tmp-path)) ':written) #() "a context of its own: nothing")))

(defn test-a-build-after-the-agent-wrote-its-makefile-is-asked-about [tmp-path]
  "Two actions of one task: :write-file Makefile, then make. Without the
   sandbox the second is asked about, because the journal says the first wrote
   the file make runs."
  (import steps [symbolic-env scripted run-task user-says]
          passepartout.records [events])
  (setv gen (symbolic-env tmp-path)
        env (next gen))
  (try
    (scripted env ["(:action :write-file :path \"Makefile\" :content \"all:\\n\\ttrue\\n\" :explanation \"write the build file\")"
                   "(:action :shell :cmd \"make\" :explanation \"run the build\")"
                   "(:action :message :text \"done\")"])
    (run-task env (user-says "build it"))
    (setv outcomes (lfor e (events env.store :kind "outcome" :limit None)
                         (proto-get e ':data))
          make (next (gfor o outcomes :if (= (proto-get (proto-get o ':action) ':cmd) "make") o)))
    (check [(. (proto-get make ':verdict) name) (proto-get make ':rule)] ["escalate" "agent-code"]
           "make after the agent wrote its Makefile")
    (finally (next gen None))))
