;; * Why

"The gates are the law: they read a command and decide whether it may run. A
law can be wrong (a program the policy misreads, an option nobody modelled),
so every :shell action also runs inside an operating-system sandbox that
makes the worst of those mistakes impossible rather than forbidden. That is
the physics under the law."

(import functools [lru-cache]
        os shutil subprocess
        hyrule [distinct]
        passepartout.proto [proto-get]
        passepartout.config [config-defaults]
        passepartout.limits [action-limits tmpfs-bytes]
        passepartout.relay [BOX-SOCKET boxed-command find-relay proxy-env])

(setv MARKER "PASSEPARTOUT_SANDBOX"
      MODES #("auto" "bubblewrap" "off")
      NETWORK-MODES #("off" "policy" "on")
      SETTINGS (config-defaults "sandbox")
      SYSTEM-DIRS ["/usr" "/bin" "/sbin" "/lib" "/lib32" "/lib64" "/libx32" "/etc" "/opt"])

;; * Which protection is in force

(defn sandbox-settings [config]
  "The [sandbox] table of CONFIG with the defaults filled in."
  (| SETTINGS (or (.get (or config {}) "sandbox") {})))

(defn _probe-argv [bwrap]
  [bwrap "--ro-bind" "/" "/" "--proc" "/proc" "--dev" "/dev"
   "--unshare-pid" "--unshare-net" "--unshare-ipc" "--unshare-uts" "--unshare-cgroup-try"
   "--die-with-parent" "--new-session" "/bin/sh" "-c" ":"])

(setv _probe-tries 3
      _probe-seconds 4)

(defn [(lru-cache :maxsize 16)] probe [bwrap]
  "None when the bubblewrap binary BWRAP runs a sandbox here, else why not.
   A trial run that hangs is tried again: one was seen to stall once, right
   after a burst of other processes, and then run in milliseconds."
  (for [attempt (range _probe-tries)]
    (try
      (setv r (subprocess.run (_probe-argv bwrap) :capture-output True :timeout _probe-seconds
                              :stdin subprocess.DEVNULL :env {"PATH" "/usr/bin:/bin"}))
      (break)
      (except [FileNotFoundError]
        (return f"{bwrap} is not there"))
      (except [e OSError]
        (return f"{bwrap} cannot be run ({(or e.strerror e)})"))
      (except [subprocess.TimeoutExpired]
        (when (= attempt (- _probe-tries 1))
          (return f"{bwrap} did not finish a trial run in {_probe-seconds} s, {_probe-tries} times")))))
  (if (= r.returncode 0)
      None
      (do (setv lines (.splitlines (.decode r.stderr "utf-8" "replace")))
          (+ f"{bwrap} failed a trial run (exit {r.returncode})"
             (if lines f": {(.strip (get lines -1))}" "")))))

(defn _home-paths [paths]
  (setv home (os.path.expanduser "~"))
  (lfor p paths :if (and (isinstance p str) p)
        (os.path.normpath (os.path.join home (os.path.expanduser p)))))

(defn [(lru-cache :maxsize 16)] _status [mode network bwrap home-paths hosts]
  (when (= mode "off")
    (return [:kind "off" :mode mode :network "on" :allowed-hosts (list hosts)
             :why "the config turns the sandbox off ([sandbox] mode = \"off\")"]))
  (setv found (if bwrap bwrap (shutil.which "bwrap"))
        why (if found (probe found) "bubblewrap (bwrap) is not installed"))
  (if why
      [:kind "none" :mode mode :network network :allowed-hosts (list hosts) :why why]
      [:kind "bubblewrap" :mode mode :network network :allowed-hosts (list hosts)
       :relay (find-relay) :bwrap found :home-paths (list home-paths)]))

(defn sandbox-status [[config None]]
  "The protection in force for CONFIG's shell actions, as a plist:
   (:kind \"bubblewrap\" :network \"policy\" :bwrap \"/usr/bin/bwrap\" …),
   (:kind \"none\" :why …) when bubblewrap does not work, (:kind \"off\" …)
   when the config turns it off."
  (setv s (sandbox-settings config)
        mode (get s "mode")
        network (get s "network"))
  (list (_status (if (in mode MODES) mode "auto")
                 (if (in network NETWORK-MODES) network "off")
                 (or (get s "bwrap") None)
                 (tuple (_home-paths (get s "home_paths")))
                 (tuple (lfor h (or (get s "allowed_hosts") []) :if (isinstance h str) h)))))

(defn network-text [status]
  "What the network of a shell action under STATUS is, in words; loud when it
   is the host's own."
  (setv network (proto-get status ':network)
        hosts (len (proto-get status ':allowed-hosts [])))
  (cond (= network "on")
        "NETWORK ON: the host's own network, unfiltered and unrecorded ([sandbox] network = \"on\")"
        (= network "off") "no network"
        (not (proto-get status ':relay))
        "no network: neither perl nor python3 is installed to reach the egress proxy from inside"
        True
        f"network only through the egress proxy: reads from {hosts} allowed hosts, other hosts and uploads asked about"))

(defn sandbox-summary [status]
  "One line saying which protection STATUS puts in force."
  (setv kind (proto-get status ':kind))
  (cond
    (= kind "bubblewrap")
    (+ "shell actions run in a bubblewrap sandbox, " (network-text status))
    (= kind "off")
    "no sandbox: the config turns it off, so shell actions run unconfined as the gates allow"
    True
    f"no sandbox ({(proto-get status ':why)}): every shell action asks a person first"))

;; * Network through the egress proxy

(defn network-shared [ctx]
  "True when the box of a shell action in CTX shares the host's network
   ([sandbox] network = \"on\")."
  (= (proto-get (or (proto-get ctx ':sandbox) []) ':network "off") "on"))

;; * The command line

(setv READ-ONLY-SHELL "shell:read-only"
      _workers-key ':workers _tools-key ':tools)

(defn workspace-read-only [ctx]
  "True when the task of CTX may run shell commands only on a read-only workspace:
   a worker whose tools name =shell:read-only= and not =shell=."
  (setv tools (proto-get (or (proto-get ctx _workers-key) []) _tools-key))
  (and (is-not tools None) (in READ-ONLY-SHELL tools) (not (in "shell" tools))))

(defn _under [path root]
  (or (= path root) (.startswith path (+ (.rstrip root "/") "/"))))

(defn _system-mounts []
  (setv out [])
  (for [d SYSTEM-DIRS]
    (cond (os.path.islink d) (.extend out ["--symlink" (os.readlink d) d])
          (os.path.isdir d) (.extend out ["--ro-bind" d d])))
  out)

(defn _safe-target [p]
  "True for a folder that may be replaced by an empty one: absolute, not the
   root, not inside the system."
  (and (isinstance p str) (os.path.isabs p) (!= (os.path.normpath p) "/")
       (not (any (gfor d SYSTEM-DIRS (_under p d))))))

(defn _daemon-files [ctx]
  (setv config (or (.get (or (proto-get ctx ':runtime) {}) "config") {})
        out (list (or (proto-get ctx ':protected) [])))
  (for [key ["config_path" "runtime_dir" "data_dir"]]
    (when (.get config key) (.append out (os.path.realpath (get config key)))))
  (when (.get config "data_dir")
    (.append out (os.path.realpath (os.path.join (get config "data_dir") "logs"))))
  (list (distinct out)))

(defn [(lru-cache :maxsize 4)] _takes-size [bwrap]
  "True when the bubblewrap BWRAP sizes a tmpfs (--size)."
  (try
    (setv out (subprocess.run [bwrap "--help"] :capture-output True :text True :timeout 10))
    (in "--size" (+ out.stdout out.stderr))
    (except [#(OSError subprocess.SubprocessError)] False)))

(defn _tmpfs [path size]
  (+ (if size ["--size" (str size)] []) ["--tmpfs" path]))

(defn _masks [ctx workspace bound [size None]]
  (setv out [])
  (for [p (_daemon-files ctx)]
    (when (and (os.path.lexists p)
               (not (_under workspace p))
               (any (gfor b bound (_under p b))))
      (if (os.path.isdir p)
          (.extend out (_tmpfs p size))
          (.extend out ["--ro-bind" "/dev/null" p]))))
  out)

(defn _resolver [network]
  (setv conf "/etc/resolv.conf")
  (if (and network (os.path.islink conf))
      (do (setv target (os.path.realpath conf))
          (if (_under target "/run") ["--ro-bind-try" target target] []))
      []))

(defn sandbox-argv [status ctx argv env [network False] [proxy None]]
  "The bwrap command line that runs ARGV (a list) in the sandbox STATUS for the
   context CTX, with exactly the environment ENV, the host's network when
   NETWORK, and the egress proxy's socket (the path PROXY) bound in."
  (setv workspace (os.path.realpath (proto-get ctx ':workspace))
        home (os.path.realpath (or (proto-get ctx ':home) (os.path.expanduser "~")))
        home-paths (lfor p (or (proto-get status ':home-paths) [])
                         :if (os.path.exists p) (os.path.realpath p))
        temps (lfor t (+ ["/tmp" "/var/tmp"] (list (or (proto-get ctx ':temp-dirs) [])))
                    :if (_safe-target t) (os.path.normpath t))
        size (when (_takes-size (or (proto-get status ':bwrap) "bwrap")) (tmpfs-bytes (action-limits ctx)))
        home-mounts (+ (if (_safe-target home) (_tmpfs home size) [])
                       (lfor p home-paths x ["--ro-bind" p p] x))
        home-inside (and (!= home workspace) (_under home workspace))
        bound (+ SYSTEM-DIRS [workspace] home-paths)
        out [(proto-get status ':bwrap)
             "--unshare-pid" "--unshare-ipc" "--unshare-uts" "--unshare-cgroup-try"
             "--die-with-parent" "--new-session" "--clearenv"])
  (when (not network) (.append out "--unshare-net"))
  ;; As root, bwrap keeps its capabilities inside unless told otherwise.
  (when (= (os.geteuid) 0) (.extend out ["--cap-drop" "ALL"]))
  (.extend out (_system-mounts))
  (.extend out ["--proc" "/proc" "--dev" "/dev"])
  (for [t (distinct temps)] (.extend out (_tmpfs t size)))
  (when (not home-inside) (.extend out home-mounts))
  (.extend out [(if (workspace-read-only ctx) "--ro-bind" "--bind") workspace workspace])
  (when home-inside (.extend out home-mounts))
  (.extend out (_run-later-binds workspace))
  (.extend out (_masks ctx workspace bound size))
  (.extend out (_resolver network))
  (when (and proxy (not network)) (.extend out ["--bind" proxy BOX-SOCKET]))
  (.extend out ["--chdir" workspace])
  (for [[k v] (.items env)] (.extend out ["--setenv" k v]))
  (+ out argv))

(setv _holder "/bin/sh -c \"$1\"; exit $?")

(defn shell-argv [cmd action ctx env [proxy None]]
  "#(argv env) that run the shell command CMD of ACTION in CTX: under the
   sandbox when bubblewrap is in force, under a marked parent shell otherwise.
   ENV gains the marker either way. PROXY is the path of the action's egress
   proxy socket (=proxy.org=), or None: then the box has no way out."
  (setv env (| env {MARKER "1"})
        status (proto-get ctx ':sandbox))
  (when (is status None)
    (setv status (sandbox-status (.get (or (proto-get ctx ':runtime) {}) "config"))))
  (if (= (proto-get status ':kind) "bubblewrap")
      (do (setv home (os.path.realpath (or (proto-get ctx ':home) (os.path.expanduser "~")))
                network (network-shared ctx)
                relay (when (and proxy (not network)) (proto-get status ':relay))
                env (| env {"HOME" home} (if relay (proxy-env) {})))
          #((sandbox-argv status ctx (boxed-command cmd relay) env :network network
                          :proxy (when relay proxy))
            env))
      #(["/bin/sh" "-c" _holder "/bin/sh" cmd] env)))

(setv RUN-LATER #(".git/hooks" ".git/config" ".husky" ".envrc" ".vscode/tasks.json"))

(defn _run-later-binds [workspace]
  (setv out [])
  (for [rel RUN-LATER]
    (setv p (os.path.join workspace rel)
          real (os.path.realpath p))
    (when (and (os.path.lexists p) (= real (os.path.normpath p)) (_under real workspace))
      (.extend out ["--ro-bind" real real])))
  out)

;; * Telling an action from a person

(defn _pid-ns [pid]
  (os.readlink f"/proc/{pid}/ns/pid"))

(defn _parent [pid]
  (setv stat (with [f (open f"/proc/{pid}/stat" "rb")] (.read f)))
  (int (get (.split (get (.rsplit stat b")" 1) 1)) 1)))

(defn _marked [pid]
  "True when PID was started with the marker, False when not, None when its
   environment cannot be read."
  (try
    (with [f (open f"/proc/{pid}/environ" "rb")]
      (setv data (.read f)))
    (except [OSError] (return None)))
  (setv key (+ (.encode MARKER) b"="))
  (any (gfor e (.split data b"\x00") (.startswith e key))))

(defn in-action-process [pid]
  "Why the process PID runs inside an action, or None when nothing says so."
  (try
    (when (!= (_pid-ns pid) (_pid-ns "self"))
      (return "it runs in another pid namespace, as an action's sandbox does"))
    (except [e OSError]
      (return f"its pid namespace cannot be read ({(or e.strerror e)})")))
  (setv p pid
        steps 0)
  (while (and (> p 0) (< steps 512))
    (setv marked (_marked p))
    (cond (is marked True)
          (return (if (= p pid)
                      f"it was started with {MARKER} set, as every action's shell is"
                      f"its ancestor {p} was started with {MARKER} set: it descends from a shell action"))
          (and (is marked None) (= p pid))
          (return "its environment cannot be read, so it cannot be told apart from an action"))
    (try (setv p (_parent p))
         (except [OSError] (break)))
    (+= steps 1))
  None)

(defn inside-action []
  "Why this process runs inside an action, or None."
  (if (in MARKER os.environ)
      f"{MARKER} is set, as in every action's shell"
      (in-action-process (os.getpid))))
