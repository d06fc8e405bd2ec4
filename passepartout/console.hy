;; * Why

"The REPL (repl.org) evaluates forms in the running daemon; this is the door
they come in by. A Unix socket in the runtime dir, private to the daemon's
user, answers one JSON request per connection: it checks who is at the other
end before it reads anything, turns the forms into a :repl-eval signal for
step, and writes back the answer. serve-repl runs it beside the daemon's
runner, and ReplThread on a thread of its own for a program that has no
event loop."

(import asyncio json logging os secrets socket stat struct sys threading
        pathlib [Path]
        passepartout.config [ConfigError]
        passepartout.proto [proto-get]
        passepartout.sandbox [in-action-process]
        passepartout.skills [set-immutable-skills]
        passepartout.reload [config-immutable reload-skills]
        passepartout.repl [SOCKET-NAME MAX-REQUEST DEFAULT-TIMEOUT READ-TIMEOUT ReplError
                           make-namespace record-evaluation])

(setv log (logging.getLogger "passepartout.console"))

;; * The socket

;; ** Who may connect

(defn peer-credentials [sock]
  "#(pid uid gid) of the process at the other end of the Unix socket SOCK."
  (struct.unpack "3i" (.getsockopt sock socket.SOL-SOCKET socket.SO-PEERCRED (struct.calcsize "3i"))))

(defn peer-allowed [uid [own-uid None]]
  "True when a peer running as UID may use the REPL of a daemon running as
   OWN-UID (this process's user by default): only the same user may."
  (= uid (if (is own-uid None) (os.getuid) own-uid)))

;; ** Where it listens

(defn socket-path [config]
  "The REPL socket of the daemon that CONFIG describes."
  (os.path.join (get config "runtime_dir") SOCKET-NAME))

(defn _private-dir [d]
  (setv d (Path d))
  (when (not (.is-dir d))
    (.mkdir d :parents True :exist-ok True :mode 0o700)
    (os.chmod d 0o700))
  (setv st (os.stat d))
  (when (!= st.st-uid (os.getuid))
    (raise (ReplError f"{d}: belongs to uid {st.st-uid}, not to this user")))
  (when (& st.st-mode 0o022)
    (raise (ReplError f"{d}: others may write to it; make it private (chmod 700)"))))

(defn _clear-stale [path]
  (when (not (os.path.lexists path))
    (return None))
  (when (not (stat.S-ISSOCK (. (os.lstat path) st-mode)))
    (raise (ReplError f"{path}: exists and is not a socket; not replacing it")))
  (with [probe (socket.socket socket.AF-UNIX socket.SOCK-STREAM)]
    (.settimeout probe 1.0)
    (try
      (.connect probe (str path))
      (except [[ConnectionRefusedError FileNotFoundError]]
        (when (os.path.lexists path) (os.unlink path))
        (return None))))
  (raise (ReplError f"{path}: another daemon is already listening there")))

;; ** Serving

(defn _answer-of [emitted]
  "The wire answer in what step emitted for a :repl-eval signal."
  (for [s emitted]
    (setv p (or (proto-get s ':payload) []))
    (when (proto-get p ':repl)
      (return (if (proto-get p ':ok)
                  {"ok" True "value" (proto-get p ':value) "output" (proto-get p ':output "")}
                  {"ok" False "error" (proto-get p ':error) "traceback" (proto-get p ':traceback "")
                   "output" (proto-get p ':output "")}))))
  (setv texts (lfor s emitted (str (proto-get (or (proto-get s ':payload) []) ':text ""))))
  {"ok" False
   "error" (if texts
               (.join "\n" texts)
               "nothing evaluated the forms: the repl skill is not loaded (is it disabled in the config?)")
   "traceback" ""
   "output" ""})

(defn _request [line]
  "#(forms timeout) from a request LINE, or a ValueError saying what is wrong."
  (setv data (json.loads (.decode line "utf-8")))
  (when (not (isinstance data dict))
    (raise (ValueError "a request is a JSON object")))
  (setv forms (.get data "forms")
        timeout (.get data "timeout" DEFAULT-TIMEOUT))
  (when (not (and (isinstance forms str) (.strip forms)))
    (raise (ValueError "the request has no forms")))
  (when (or (isinstance timeout bool) (not (isinstance timeout #(int float)))
            (not (< 0 timeout (float "inf"))))
    (raise (ValueError "the timeout must be a positive number of seconds")))
  #(forms (float timeout)))

(defn _refusal [why]
  {"ok" False "error" f"refused: {why}" "traceback" "" "output" ""})

(defn :async _read-away [reader]
  "Read and drop the request line of a refused peer, if it comes in time."
  (try
    (await (asyncio.wait-for (.readline reader) READ-TIMEOUT))
    (except [#(asyncio.TimeoutError ValueError OSError)])))

(defclass Repl []
  "The REPL socket of one daemon."

  (defn __init__ [self env [runner None] [path None] [uid None]]
    "ENV is the daemon's services; RUNNER its hub or runner, when it has one."
    (setv self.env env
          self.runner runner
          self.path (Path (or path (socket-path env.config)))
          self.uid (if (is uid None) (os.getuid) uid)
          self.pending {}
          self.running []
          self.connections (set)
          self.server None
          self.inode None
          self.loop None
          self.namespace None))

  (defn _bindings [self]
    {"services" self.env
     "env" self.env
     "config" self.env.config
     "store" self.env.store
     "runner" self.runner
     "reload-skills" (fn [[force False]]
                       (.result (asyncio.run-coroutine-threadsafe (reload-skills self.env :force force)
                                                                  self.loop)
                                120))
     "submit" (fn [signal] (self.submit signal))
     "stop" (fn [session] (self.stop session))})

  (defn _checker [self]
    "The check of the daemon's gate process, callable from a form's thread; None
     when the daemon judges in its own process."
    (setv gates self.env.gates)
    (when (hasattr gates "check")
      (fn [forms]
        (.result (asyncio.run-coroutine-threadsafe (.check gates forms) self.loop) 60))))

  (defn submit [self signal]
    "Hand SIGNAL to the runner from any thread; the session it was queued on."
    (when (is self.runner None)
      (raise (ReplError "this REPL has no runner")))
    (.result (asyncio.run-coroutine-threadsafe (.submit self.runner signal) self.loop) 30))

  (defn stop [self session]
    "Stop SESSION's task from any thread, as a /stop said there; what the person was told."
    (defn :async stopped []
      (if (is self.runner None)
          (hy.I.passepartout/runner.stop-task self.env.stops session)
          (await (.stop self.runner session))))
    (.result (asyncio.run-coroutine-threadsafe (stopped) self.loop) 30))

  (defn :async start [self]
    "Listen on the socket."
    (set-immutable-skills self.env.skills (config-immutable self.env.config))
    (when (> (len (os.fsencode self.path)) 107)
      (raise (ReplError f"{self.path}: too long for a Unix socket path")))
    (_private-dir self.path.parent)
    (_clear-stale self.path)
    (setv self.loop (asyncio.get-running-loop)
          self.namespace (make-namespace (self._bindings) self.env.skills (self._checker))
          self.env.repl self
          self.server (await (asyncio.start-unix-server self._serve :path (str self.path)
                                                        :limit (+ MAX-REQUEST 2))))
    (os.chmod self.path 0o600)
    (setv self.inode (. (os.stat self.path) st-ino))
    self)

  (defn :async close [self]
    "Stop listening, end open connections and remove the socket."
    (when self.server
      (.close self.server)
      (for [t (list self.connections)] (.cancel t))
      (await (asyncio.gather #* self.connections :return-exceptions True))
      (await (.wait-closed self.server))
      (setv self.server None))
    (try
      (when (= (. (os.stat self.path) st-ino) self.inode)
        (os.unlink self.path))
      (except [FileNotFoundError]))
    (when (is (getattr self.env "repl" None) self)
      (setv self.env.repl None))
    (when self.namespace
      (.pop sys.modules (. self.namespace __name__) None)))

  (defn :async _serve [self reader writer]
    (setv task (asyncio.current-task))
    (.add self.connections task)
    (try
      (setv answer (await (self._answer reader writer)))
      (when answer
        (.write writer (.encode (+ (json.dumps answer) "\n") "utf-8"))
        (await (.drain writer)))
      (except [OSError])
      (finally
        (.discard self.connections task)
        (.close writer))))

  (defn :async _answer [self reader writer]
    (try
      (setv [pid uid gid] (peer-credentials (.get-extra-info writer "socket")))
      (except [e OSError]
        (await (_read-away reader))
        (return (_refusal f"the peer's credentials cannot be read ({e})"))))
    (when (not (peer-allowed uid self.uid))
      (record-evaluation self.env.store "repl" uid None None
                         None f"peer uid {uid} (pid {pid}) is not the daemon's")
      (await (_read-away reader))
      (return (_refusal "this REPL answers only the user the daemon runs as")))
    (setv inside (in-action-process pid))
    (when inside
      (record-evaluation self.env.store "repl" uid None None
                         None f"peer pid {pid} runs inside an action: {inside}")
      (await (_read-away reader))
      (return (_refusal (+ "this REPL answers people only, and the caller runs inside "
                           f"one of the agent's actions ({inside})"))))
    (try
      (setv line (await (asyncio.wait-for (.readline reader) READ-TIMEOUT)))
      (except [asyncio.TimeoutError]
        (return (_refusal f"no request within {READ-TIMEOUT :g} s")))
      (except [ValueError]
        (return (_refusal f"a request is at most {MAX-REQUEST} bytes"))))
    (when (not (.strip line))
      (return None))
    (try
      (setv [forms timeout] (_request line))
      (except [e ValueError]
        (return {"ok" False "error" f"bad request: {e}" "traceback" "" "output" ""})))
    (await (self.evaluate-request forms timeout uid)))

  (defn :async evaluate-request [self forms timeout uid]
    "The wire answer to FORMS from user UID: a :repl-eval signal through step."
    (import passepartout.loop [step])
    (setv rid (secrets.token-hex 16)
          signal [:type :event
                  :source [:gateway :repl :user uid]
                  :session "repl"
                  :payload [:sensor :repl-eval :forms forms :timeout timeout :uid uid :request rid]])
    (setv (get self.pending rid) self)
    (try
      (_answer-of (await (step signal self.env)))
      (except [e Exception]
        (.exception log "a REPL request failed")
        {"ok" False "error" f"Internal error: {(. (type e) __name__)}: {e}" "traceback" "" "output" ""})
      (finally
        (.pop self.pending rid None)))))

;; ** Running it

(defn :async start-repl [env [runner None] [path None] [uid None]]
  "A Repl listening on PATH (the runtime dir's repl.sock by default)."
  (await (.start (Repl env runner path uid))))

(defn :async serve-repl [env [runner None] [path None] [uid None]]
  "Serve the REPL socket until cancelled, then remove it."
  (try
    (setv repl (await (start-repl env runner path uid)))
    (except [e [ReplError OSError ConfigError]]
      (.error log "the REPL socket is not served: %s" e)
      (return None)))
  (try
    (await (.create-future (asyncio.get-running-loop)))
    (finally
      (await (.close repl)))))

(defclass ReplThread []
  "A REPL server on an event loop of its own thread."

  (defn __init__ [self env [path None] [uid None]]
    (setv self.env env
          self.want-path path
          self.uid uid
          self.ready (threading.Event)
          self.error None
          self.repl None
          self.path None
          self.loop None
          self.stopping None
          self.thread (threading.Thread :target (fn [] (asyncio.run (self._main)))
                                        :name "repl-server" :daemon True))
    (.start self.thread)
    (.wait self.ready 60)
    (when self.error
      (raise self.error)))

  (defn :async _main [self]
    (setv self.loop (asyncio.get-running-loop)
          self.stopping (asyncio.Event))
    (try
      (setv self.repl (await (start-repl self.env :path self.want-path :uid self.uid))
            self.path (str self.repl.path))
      (except [e Exception]
        (setv self.error e)
        (.set self.ready)
        (return None)))
    (.set self.ready)
    (await (.wait self.stopping))
    (await (.close self.repl)))

  (defn stop [self]
    "Close the socket and end the thread."
    (when (and self.loop (.is-alive self.thread))
      (.call-soon-threadsafe self.loop (. self.stopping set))
      (.join self.thread 30))))
