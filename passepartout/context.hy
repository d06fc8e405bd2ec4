;; * Why

"A gate is a pure function of an action and a context. Everything a gate may
consult (the workspace, the temp dirs, the clock, the secrets to guard) is in the
context, so the same proposal and the same context always get the same verdict,
today or in a replay next month. Gates read no clock and open no file; if they
need a fact, it goes here."

(import os tempfile time
        functools [lru-cache]
        pathlib [Path]
        passepartout.proto [kw proto-get proto-put proto-without]
        passepartout.config [config-defaults]
        passepartout.sandbox [sandbox-status]
        passepartout.workspace [path-inside]
        passepartout.written [written-files]
        passepartout.agenda [agenda-facts])

;; * Building one

(defn [(lru-cache :maxsize 256)] _real [p]
  (str (.resolve (.expanduser (Path p)))))

(defn temp-dirs [[env None] [keep-out #()]]
  "The system temp folders, resolved, without duplicates. The last is the one
   =$TMPDIR= means: the shell gate reads the variable so, and the shell actuator
   exports it so. A folder that holds one of KEEP-OUT (the home folder, the
   daemon's files) is not a temp folder: writing anywhere in it would reach them."
  (setv env (if (is env None) os.environ env)
        chosen (_real (or (.get env "TMPDIR") (tempfile.gettempdir)))
        out [])
  (for [p ["/tmp" "/var/tmp"]]
    (setv r (_real p))
    (when (not (in r [#* out chosen])) (.append out r)))
  (lfor t (+ out [chosen]) :if (not (any (gfor k keep-out (path-inside k t)))) t))

(defn protected-paths [config]
  "The daemon's own files: its config, its store, its runtime folder, its logs,
   skills, checkpoints and editable prompt (=prompt.org=). The workspace usually lives in the data folder, so the data folder as a
   whole is not on the list, only what the daemon keeps there."
  (setv data (.get config "data_dir")
        out [])
  (for [p [(.get config "config_path") (.get config "runtime_dir")]]
    (when p (.append out (_real p))))
  (when data
    (for [name ["passepartout.sqlite3" "passepartout.sqlite3-wal" "passepartout.sqlite3-shm"
                "skills" "logs" "checkpoints" "daemon.pid" "prompt"]]
      (.append out (_real (os.path.join data name)))))
  out)

(setv _limit-defaults (config-defaults "limits"))

(defn make-context [[workspace "."] [session "local"] [config None] [store None]
                    [secrets None] [now None] [env None] [sandbox None] [cascade None]
                    [notify None] [skills None] [stops None] [services None] [written None] [workers None]
                    [agenda None]]
  "The context plist for one signal. SANDBOX is the protection in force (the
   daemon finds it at boot); by default it is found from CONFIG, once."
  (setv config (or config {})
        env (if (is env None) os.environ env)
        limits (| _limit-defaults (.get config "limits" {}))
        protected (protected-paths config))
  (when (proto-get (or workers []) ':id)
    ;; a worker's task has the step budget of workers
    (setv limits (| limits {"step_budget" (.get (.get config "workers" {}) "step_budget"
                                                (get limits "step_budget"))})))
  ;; the runtime handles first: every stage reads them, and a read scans from the front
  [:runtime {"store" store "config" config "cascade" cascade "notify" notify
             "skills" skills "stops" stops "services" services}
   :workspace (_real workspace)
   :temp-dirs (temp-dirs env [(_real "~") #* protected])
   :home (_real "~")
   :search-path (.get env "PATH" "/usr/local/bin:/usr/bin:/bin")
   :protected protected
   :session session
   :now (if (is now None) (time.time) now)
   :limits (lfor [k v] (.items limits) x [(kw (.replace k "_" "-")) v] x)
   :secrets (list (or secrets []))
   :sandbox (if (is sandbox None) (sandbox-status config) sandbox)
   :written (tuple (or written #()))
   ;; where the session stands in background work (=workflow.org=)
   #* (if workers [:workers workers] [])
   ;; the open agenda items and what the task ran, for the evidence check (=agenda.org=)
   #* (if agenda [:agenda agenda] [])])

(defn context-for [services session [notify None] [now None] [task None]]
  "The context of a step of SESSION in the daemon whose parts are SERVICES
   (=services.org=); NOTIFY tells the person something at once; TASK is the
   task the step continues, if any. The one way a
   step, an approval carried out or a REPL form gets its context."
  (setv config services.config)
  (make-context :workspace (.get config "workspace" ".")
                :session session
                :config config
                :store services.store
                :secrets services.secrets
                :sandbox services.sandbox
                :cascade services.cascade
                :skills services.skills
                :stops services.stops
                :services services
                :written (written-files services.store)
                :notify notify
                :now (if (is now None) (services.clock) now)
                :workers (when (getattr services "workflows" None)
                           (.session-workers services.workflows session))
                :agenda (agenda-facts services.store task)))

(defn context-limit [ctx name [default None]]
  "The limit NAME (a string like \"shell-timeout\") from CTX."
  (proto-get (proto-get ctx ':limits []) name default))

(defn context-runtime [ctx name]
  "The runtime handle NAME (\"store\", \"config\", \"cascade\", \"notify\",
   \"skills\", \"stops\", \"services\") from CTX, or None."
  (.get (or (proto-get ctx ':runtime) {}) name))

(defn context-data [ctx]
  "CTX without its runtime handles and secrets: what may be printed or journaled."
  (proto-without ctx [':runtime ':secrets]))
