;; * Why

"The core loop can do nothing by itself: every action it can take is an
actuator some skill registered. The built-in ones are ordinary skill files,
loaded like any person's own, so they can be read, replaced or disabled the
same way. skills-core.org is the source of the ones that act on the
workspace, the shell, memory and the conversation, and of /stop, /help
and /status; each of its blocks names the skill file it tangles into."

;; * shell: one command in the workspace

(require passepartout.macros [defskill])
(import asyncio os signal subprocess threading time
        passepartout.act [clip-output error-result]
        passepartout.runner [doing]
        passepartout.context [context-limit context-runtime]
        passepartout.proto [proto-get]
        passepartout.checkpoint [keeper-for]
        passepartout.limits [action-limits action-group enter-limits rlimits DiskWatch
                             limit-hit limit-text waiting-argv with-room file-too-large]
        passepartout.proxy [egress-result open-egress]
        passepartout.sandbox [shell-argv])

(setv ENV-NAMES #{"PATH" "HOME" "LANG" "TERM" "USER" "LOGNAME" "SHELL" "TZ" "TMPDIR"}
      _default-path "/usr/local/bin:/usr/bin:/bin")

(defn _holds-secret [value secrets]
  (any (gfor s secrets (or (= value s) (and (>= (len s) 8) (in s value))))))

(defn shell-env [ctx [environ None]]
  "The environment a command runs with: the allow-listed variables of ENVIRON
   (the daemon's own by default), without any that holds a secret of CTX, and
   TMPDIR set to the context's temp folder."
  (setv environ (if (is environ None) os.environ environ)
        secrets (lfor s (or (proto-get ctx ':secrets) []) :if (and (isinstance s str) s) s)
        env (dfor [k v] (.items environ)
                  :if (and (or (in k ENV-NAMES) (.startswith k "LC_"))
                           (not (_holds-secret v secrets)))
                  k v))
  (when (not (in "PATH" env))
    (setv (get env "PATH") _default-path))
  ;; $TMPDIR names the folder the shell gate judged it to be.
  (setv temps (or (proto-get ctx ':temp-dirs) []))
  (when temps
    (setv (get env "TMPDIR") (get temps -1)))
  env)

(defn _timeout [action ctx]
  (setv cap (context-limit ctx "shell-timeout" 30)
        asked (proto-get action ':timeout))
  (if (and (isinstance asked #(int float)) (not (isinstance asked bool)) (> asked 0))
      (min asked cap)
      cap))

(defn _real-folder [p]
  (and (isinstance p str) (os.path.isabs p)
       (= (os.path.realpath p) p) (os.path.isdir p)))

(defn :async _collect [stream head seen limit]
  "Read STREAM to its end into HEAD (at most LIMIT bytes kept); SEEN counts
   every byte read, also when the read is cut off."
  (while True
    (setv chunk (await (.read stream 65536)))
    (when (not chunk)
      (return (get seen 0)))
    (+= (get seen 0) (len chunk))
    (when (< (len head) limit)
      (.extend head (cut chunk (- limit (len head)))))))

(defn _descendants [pid]
  "The pids of the processes below PID, as /proc lists them now."
  (setv found []
        todo [pid])
  (while todo
    (setv p (.pop todo))
    (try
      (for [task (os.listdir f"/proc/{p}/task")]
        (with [f (open f"/proc/{p}/task/{task}/children")]
          (for [c (.split (.read f))]
            (.append found (int c))
            (.append todo (int c)))))
      (except [OSError])))
  found)

(defn _kill-group [proc]
  ;; The group id is the pid of sh, which is not reaped yet, so it cannot
  ;; have been reused. The processes below it are found while it lives, before
  ;; any of them is handed to another parent, and killed after the group: a
  ;; parent that saw its child killed first would report it in the output.
  (when (is proc.returncode None)
    (setv below (_descendants proc.pid))
    (try (os.killpg proc.pid signal.SIGKILL)
         (except [[ProcessLookupError PermissionError]] None))
    (for [pid below]
      (try (os.kill pid signal.SIGKILL)
           (except [[ProcessLookupError PermissionError]] None)))))

(defn _ended [proc]
  "A future done once PROC has ended, which leaves PROC unreaped."
  (setv loop (asyncio.get-running-loop)
        ended (.create-future loop))
  (defn done []
    (when (not (.done ended)) (.set-result ended None)))
  (defn wait []
    (try (os.waitid os.P-PID proc.pid (| os.WEXITED os.WNOWAIT))
         (except [ChildProcessError]))
    (try (.call-soon-threadsafe loop done)
         (except [RuntimeError])))
  (.start (threading.Thread :target wait :name "shell-wait" :daemon True))
  ended)

(defn _stoppable [cmd ctx procs]
  "The registration of CMD with the stop registry: a stop kills the groups in PROCS."
  (doing (context-runtime ctx "stops") (proto-get ctx ':session) f"the command `{cmd}`"
         (fn [] (for [p (list procs)] (_kill-group p)))
         :mark (proto-get ctx ':stop-mark)))

(defn :async run-shell [action ctx]
  (setv cmd (proto-get action ':cmd)
        workspace (proto-get ctx ':workspace))
  (when (not (and (isinstance cmd str) (.strip cmd)))
    (return (error-result "the command is empty")))
  (when (not (_real-folder workspace))
    (return (error-result f"the workspace {workspace !r} is not a real folder; nothing was run")))
  (setv limit (context-limit ctx "output-limit" 16000)
        timeout (_timeout action ctx)
        limits (with-room (action-limits ctx) workspace)
        procs [])
  (try
    (setv [group _] (action-group limits))
    (except [e OSError]
      (return (error-result (+ f"the command's cgroup could not be made ({(or e.strerror e)}), so nothing was run; "
                               "[limits] cgroup = \"off\" bounds commands by rlimits only")))))
  (setv egress None)
  (try
    (setv egress (await (open-egress action ctx))
          [argv env] (shell-argv cmd action ctx (shell-env ctx) (when egress egress.path))
          argv (waiting-argv argv))
    (with [running (_stoppable cmd ctx procs)]
      (when (get running "stopped")
        (return (+ (error-result "stopped by the person before it started; nothing was run")
                   [:stopped True])))
      (setv result (await (_run-shell argv env workspace limit timeout procs running
                                      limits group (keeper-for ctx)))))
    (finally
      (when egress (await (.close egress)))
      (when group (.close group))))
  (egress-result egress result))

(defn :async _run-shell [argv env workspace limit timeout procs running limits group keeper]
  (setv head (bytearray)
        seen [0]
        timed-out False
        deadline (+ (time.monotonic) timeout))
  (try
    (setv proc (subprocess.Popen argv
                                 :cwd workspace
                                 :env env
                                 :stdin subprocess.PIPE
                                 :stdout subprocess.PIPE
                                 :stderr subprocess.STDOUT
                                 :start-new-session True))
    (except [e OSError]
      (return (error-result f"the command could not be started: {(get argv 0)}: {(or e.strerror e)}"))))
  ;; a stop between the check and the start finds the process here, or sees it below
  (.append procs proc)
  (try
    (enter-limits proc (rlimits limits (if group (.controls group) [])) group)
    (except [e OSError]
      (_kill-group proc)
      (.wait proc)
      (.close proc.stdout)
      (return (error-result f"the command's limits could not be put in force ({(or e.strerror e)}); nothing was run"))))
  (when (get running "stopped")
    (_kill-group proc))
  (defn kill []
    (_kill-group proc)
    (when group (.kill group)))
  (setv ended (_ended proc)
        stream (asyncio.StreamReader)
        pipe None
        watch (try (DiskWatch workspace limits group (when keeper keeper.measure))
                   (except [OSError] None))
        watching (when watch (asyncio.ensure-future (.run watch kill)))
        finished False)
  (try
    (setv [pipe _] (await (.connect-read-pipe (asyncio.get-running-loop)
                                              (fn [] (asyncio.StreamReaderProtocol stream))
                                              proc.stdout)))
    (try
      (await (asyncio.wait-for (_collect stream head seen limit) timeout))
      (await (asyncio.wait-for (asyncio.shield ended) (max 0.001 (- deadline (time.monotonic)))))
      (except [asyncio.TimeoutError]
        (setv timed-out True)))
    (when timed-out
      (_kill-group proc)
      (await ended)
      (try
        (await (asyncio.wait-for (_collect stream head seen limit) 0.5))
        (except [asyncio.TimeoutError])))
    (setv finished True)
    (finally
      (when watching (.cancel watching))
      ;; cancelled or failed: nothing it started outlives it
      (when (not finished)
        (kill))
      (await ended)
      ;; ended: what it left running in the background ends with it, as all
      ;; of a sandboxed command does (its shell, not reaped yet, keeps the
      ;; group's id from being reused)
      (kill)
      (.wait proc)
      (if pipe (.close pipe) (.close proc.stdout))))
  (setv hit (await (_limit-hit limits proc head group watch keeper)))
  (when hit
    ;; what a limit stopped is ended whole, also what it left in the background
    (kill))
  (setv stopped (get running "stopped")
        status (if (or stopped timed-out hit (!= proc.returncode 0)) ':error ':ok)
        result [:status status :exit proc.returncode
                :output (clip-output head limit (get seen 0)) :timed-out timed-out])
  (cond stopped (+ result [:stopped True :error "stopped by the person; the command and its children were killed"])
        hit (+ result [:limit (get hit 0) :error (limit-text (get hit 0) limits (get hit 1))])
        timed-out (+ result [:error f"timed out after {timeout} s; the command and its children were killed"])
        (= status ':error) (+ result [:error f"exit status {proc.returncode}"])
        True result))

(defn :async _limit-hit [limits proc head group watch keeper]
  "#(key detail) for the limit the command hit, or None. The files it wrote
   are looked at only when the disk says they may have reached the file limit
   or the quota (a command that ends between two looks of the watch may have
   passed the quota all the same)."
  (setv quota (get limits "workspace_quota")
        fsize (min (gfor v [(get limits "file_size") quota] :if v v) :default 0)
        used (if watch (_used watch) 0)
        text (.decode (bytes head) "utf-8" "replace")
        ;; the disk's count can lag behind the write, or be offset by other
        ;; programs freeing space: a shell's report of a child stopped by the
        ;; file limit is reason enough to look at the files themselves
        written (if (and keeper watch fsize (or (>= used fsize) (.search file-too-large text)))
                    (await (asyncio.to-thread keeper.pending))
                    [])
        bytes-written (if keeper (sum (gfor [_ n] written n) 0) used)
        over (when (and quota watch (>= used quota) (> bytes-written quota))
               #("workspace_quota" bytes-written)))
  (limit-hit limits proc.returncode text group (or (when watch watch.hit) over) written))

(defn _used [watch]
  "The bytes the disk of WATCH lost since the command started."
  (setv st (os.statvfs watch.workspace))
  (- watch.start (* st.f-bavail st.f-frsize)))

(defskill shell
  "Runs a command in the workspace."
  :priority 10
  :actuators {"shell" {"run" run-shell
                       "schema" [:cmd [:type "string" :required True
                                       :doc "the command line, run by /bin/sh in the workspace"]
                                 :timeout [:type "integer" :required False
                                           :doc "seconds before it is killed (capped by the configured limit)"]]
                       "doc" "Run a shell command in the workspace and return its exit status and output."
                       "effect" True}})
