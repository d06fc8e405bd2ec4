;; * shell: one command in the workspace

(require passepartout.macros [defskill])
(import os selectors signal subprocess time
        passepartout.act [clip-output doing error-result]
        passepartout.context [context-limit]
        passepartout.proto [literal-keywords :as hy proto-get]
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

(defn _collect [fd head total limit deadline]
  (with [sel (selectors.DefaultSelector)]
    (.register sel fd selectors.EVENT-READ)
    (while True
      (setv left (- deadline (time.monotonic)))
      (when (<= left 0)
        (return #(total False)))
      (when (.select sel left)
        (setv chunk (os.read fd 65536))
        (when (not chunk)
          (return #(total True)))
        (+= total (len chunk))
        (when (< (len head) limit)
          (.extend head (cut chunk (- limit (len head)))))))))

(defn _kill-group [proc]
  ;; The group id is the pid of sh, which is not reaped yet, so it cannot
  ;; have been reused.
  (when (is proc.returncode None)
    (try (os.killpg proc.pid signal.SIGKILL)
         (except [[ProcessLookupError PermissionError]] None))))

(defn _stoppable [cmd ctx procs]
  "The registration of CMD with the stop registry: a stop kills the groups in PROCS."
  (doing (proto-get ctx ':session) f"the command `{cmd}`"
         (fn [] (for [p (list procs)] (_kill-group p)))
         :mark (proto-get ctx ':stop-mark)))

(defn run-shell [action ctx]
  (setv cmd (proto-get action ':cmd)
        workspace (proto-get ctx ':workspace))
  (when (not (and (isinstance cmd str) (.strip cmd)))
    (return (error-result "the command is empty")))
  (when (not (_real-folder workspace))
    (return (error-result f"the workspace {workspace !r} is not a real folder; nothing was run")))
  (setv limit (context-limit ctx "output-limit" 16000)
        timeout (_timeout action ctx)
        [argv env] (shell-argv cmd action ctx (shell-env ctx))
        deadline (+ (time.monotonic) timeout)
        head (bytearray)
        procs [])
  (with [running (_stoppable cmd ctx procs)]
    (when (get running "stopped")
      (return (+ (error-result "stopped by the person before it started; nothing was run")
                 [:stopped True])))
    (_run-shell argv env workspace limit timeout deadline head procs running)))

(defn _run-shell [argv env workspace limit timeout deadline head procs running]
  (setv total 0
        timed-out False)
  (try
    (setv proc (subprocess.Popen argv
                                 :cwd workspace
                                 :env env
                                 :stdin subprocess.DEVNULL
                                 :stdout subprocess.PIPE
                                 :stderr subprocess.STDOUT
                                 :start-new-session True))
    (except [e OSError]
      (return (error-result f"the command could not be started: {(get argv 0)}: {(or e.strerror e)}"))))
  ;; a stop between the check and the start finds the process here, or sees it below
  (.append procs proc)
  (when (get running "stopped")
    (_kill-group proc))
  (try
    (setv fd (.fileno proc.stdout)
          [total ended] (_collect fd head total limit deadline))
    (if ended
        (try (.wait proc :timeout (max 0 (- deadline (time.monotonic))))
             (except [subprocess.TimeoutExpired]
               (setv timed-out True)))
        (setv timed-out True))
    (when timed-out
      (_kill-group proc)
      (.wait proc)
      (setv [total _] (_collect fd head total limit (+ (time.monotonic) 0.5))))
    (finally
      (when (is proc.returncode None)
        (_kill-group proc)
        (.wait proc))
      (.close proc.stdout)))
  (setv stopped (get running "stopped")
        status (if (or stopped timed-out (!= proc.returncode 0)) ':error ':ok)
        result [:status status :exit proc.returncode
                :output (clip-output head limit total) :timed-out timed-out])
  (cond stopped (+ result [:stopped True :error "stopped by the person; the command and its children were killed"])
        timed-out (+ result [:error f"timed out after {timeout} s; the command and its children were killed"])
        (= status ':error) (+ result [:error f"exit status {proc.returncode}"])
        True result))

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
