;; * Why

"The sandbox decides what a command can reach; it says nothing of how much it
may take. Without limits, yes > big.txt writes half a gigabyte a second until
the disk is full, a fork bomb fills the process table, and one runaway
allocation pushes the machine into swap, all inside a sandbox that works as
designed. So every shell action runs under limits, and a limit hit ends the
action with a result that names the limit and the key that sets it, so that a
model (or a person) knows what happened and what to change."

(import asyncio itertools os re resource signal
        functools [lru-cache]
        passepartout.proto [proto-get]
        passepartout.config [config-defaults parse-size])

(setv SETTINGS (config-defaults "limits")
      KEYS #("file_size" "workspace_quota" "keep_free" "processes" "memory" "cpu_time" "cgroup"))

;; * The limits of an action

(defn physical-memory []
  "The machine's memory, in bytes."
  (* (os.sysconf "SC_PHYS_PAGES") (os.sysconf "SC_PAGE_SIZE")))

(defn _raw [ctx key]
  (setv v (proto-get (or (proto-get ctx ':limits) []) (.replace key "_" "-")))
  (if (is v None) (get SETTINGS key) v))

(defn _count [v]
  (if (and (isinstance v #(int float)) (not (isinstance v bool)) (> v 0)) (int v) 0))

(defn action-limits [ctx]
  "The limits of a shell action in CTX, as a dict: bytes for the sizes, a
   count for processes, seconds for cpu_time (0: no limit); keep_free as
   written (see disk-keep); cgroup as written."
  (setv size (fn [key [whole None]] (or (parse-size (_raw ctx key) whole) 0)))
  {"file_size" (size "file_size")
   "workspace_quota" (size "workspace_quota")
   "keep_free" (_raw ctx "keep_free")
   "processes" (_count (_raw ctx "processes"))
   "memory" (size "memory" (physical-memory))
   "cpu_time" (_count (_raw ctx "cpu_time"))
   "cgroup" (str (_raw ctx "cgroup"))})

(defn size-text [n]
  "N bytes as a person reads them: (size-text 1536) ⇒ \"1.5 KiB\"."
  (setv n (int n))
  (for [[unit factor] [["TiB" (** 1024 4)] ["GiB" (** 1024 3)] ["MiB" (** 1024 2)] ["KiB" 1024]]]
    (when (>= n factor)
      (setv v (/ n factor))
      (return (if (= v (int v)) f"{(int v)} {unit}" f"{v :.1f} {unit}"))))
  f"{n} B")

;; * Limits of each process

(defn _tasks-now []
  "The processes and threads that exist on the machine now."
  (try
    (with [f (open "/proc/loadavg")]
      (int (get (.split (get (.split (.read f)) 3) "/") 1)))
    (except [#(OSError ValueError IndexError)] 0)))

(defn _lowered [res value]
  (setv [soft hard] (resource.getrlimit res)
        cap (fn [v lim] (if (= lim resource.RLIM-INFINITY) v (min v lim)))
        hard (cap value hard))
  #(res (min (cap value soft) hard) hard))

(defn rlimits [limits [controls #()]]
  "The resource limits of LIMITS (action-limits) as #(resource soft hard)
   triples, leaving out what the cgroup CONTROLS (\"memory\", \"pids\") cover."
  (setv out []
        fsize (_fsize limits)
        cpu (get limits "cpu_time"))
  (when fsize
    (.append out (_lowered resource.RLIMIT-FSIZE fsize)))
  (when cpu
    (setv [res soft hard] (_lowered resource.RLIMIT-CPU (+ cpu 1)))
    (.append out #(res (min cpu soft) hard)))
  (when (and (get limits "memory") (not (in "memory" controls)))
    (.append out (_lowered resource.RLIMIT-DATA (get limits "memory"))))
  (when (and (get limits "processes") (not (in "pids" controls)) (!= (os.geteuid) 0))
    (.append out (_lowered resource.RLIMIT-NPROC (+ (_tasks-now) (get limits "processes")))))
  out)

(defn tmpfs-bytes [limits]
  "The size of each tmpfs of an action's sandbox, or None for the kernel's default."
  (min (gfor v [(get limits "workspace_quota") (get limits "memory")] :if v v) :default None))

;; * A cgroup per action

(defn _unescape [field]
  (re.sub r"\\([0-7]{3})" (fn [m] (chr (int (.group m 1) 8))) field))

(defn _mounts []
  "The cgroup mounts, as #(mount-point fstype super-options root)."
  (setv out [])
  (try
    (with [f (open "/proc/self/mountinfo")]
      (for [line f]
        (setv [left _ right] (.partition (.rstrip line "\n") " - ")
              a (.split left)
              b (.split right))
        (when (and (>= (len a) 5) (>= (len b) 3) (in (get b 0) #("cgroup" "cgroup2")))
          (.append out #((_unescape (get a 4)) (get b 0) (.split (get b 2) ",") (_unescape (get a 3)))))))
    (except [OSError]))
  out)

(defn _own []
  "This process's cgroups: {\"\" v2-path, \"memory\" path, \"pids\" path, …}."
  (setv out {})
  (try
    (with [f (open "/proc/self/cgroup")]
      (for [line f]
        (setv [_ controllers path] (.split (.rstrip line "\n") ":" 2))
        (for [c (.split controllers ",")]
          (setv (get out c) path))))
    (except [#(OSError ValueError)]))
  out)

(defn _read [path]
  (with [f (open path)] (.read f)))

(defn _write [path text]
  (with [f (open path "w")] (.write f text)))

(defn _inside [mount root path]
  "The folder of cgroup PATH in a hierarchy mounted at MOUNT from its ROOT."
  (setv rel (if (and (!= root "/") (.startswith path root)) (cut path (len root) None) path))
  (os.path.normpath (+ mount "/" (.lstrip rel "/"))))

(defn _give [base wanted]
  "Enable the controllers WANTED for the children of BASE; those it has."
  (setv have (.split (_read (os.path.join base "cgroup.subtree_control")))
        missing (lfor c wanted :if (not (in c have)) c))
  (when missing
    (_write (os.path.join base "cgroup.subtree_control") (.join " " (gfor c missing f"+{c}"))))
  (setv have (.split (_read (os.path.join base "cgroup.subtree_control"))))
  (lfor c wanted :if (in c have) c))

(defn _v2 [mount root path]
  "The v2 cgroup the actions' cgroups go in, or why there is none."
  (setv base (_inside mount root path)
        wanted (lfor c ["memory" "pids"]
                     :if (in c (.split (_read (os.path.join base "cgroup.controllers")))) c))
  (when (not wanted)
    (return f"the cgroup {base} has no memory or pids controller"))
  (when (not (os.access base os.W-OK))
    (return f"the daemon may not write its cgroup {base}"))
  (try
    (return #(base (_give base wanted)))
    (except [e OSError]
      (when (!= e.errno 16)         ; EBUSY: processes in the cgroup itself
        (return f"its controllers could not be given to the actions ({(or e.strerror e)})"))))
  (setv procs (.split (_read (os.path.join base "cgroup.procs"))))
  (when (!= procs [(str (os.getpid))])
    (return (+ f"the daemon shares its cgroup {base} with other processes; "
               "run it as a service with a cgroup of its own (Delegate=yes), or name one in [limits] cgroup")))
  (try
    (setv leaf (os.path.join base "daemon"))
    (os.makedirs leaf :exist-ok True)
    (_write (os.path.join leaf "cgroup.procs") (str (os.getpid)))
    #(base (_give base wanted))
    (except [e OSError]
      f"the daemon could not move into a leaf of its cgroup {base} ({(or e.strerror e)})")))

(defn [(lru-cache :maxsize 8)] cgroup-setup [setting]
  "Where the actions' cgroups go under SETTING (\"auto\", \"off\" or a
   folder): {\"version\" 1|2 \"dirs\" {controller folder}}, or {\"why\" …}."
  (when (= setting "off")
    (return {"why" "the config turns cgroups off ([limits] cgroup = \"off\")"}))
  (setv mounts (_mounts)
        own (_own))
  (try
    (when (!= setting "auto")
      (setv found (_v2 setting "/" "/"))
      (return (if (isinstance found str)
                  {"why" found}
                  {"version" 2 "dirs" (dfor c (get found 1) c (get found 0))})))
    (setv v2 (next (gfor m mounts :if (= (get m 1) "cgroup2") m) None)
          why None)
    (when (and v2 (in "" own) (os.path.exists (os.path.join (get v2 0) "cgroup.subtree_control")))
      (setv found (_v2 (get v2 0) (get v2 3) (get own "")))
      (if (isinstance found str)
          (setv why found)
          (when (get found 1)
            (return {"version" 2 "dirs" (dfor c (get found 1) c (get found 0))}))))
    (setv dirs {})
    (for [c ["memory" "pids"]]
      (setv m (next (gfor m mounts :if (and (= (get m 1) "cgroup") (in c (get m 2))) m) None))
      (when (and m (in c own))
        (setv d (_inside (get m 0) (get m 3) (get own c)))
        (when (and (os.path.isdir d) (os.access d os.W-OK))
          (setv (get dirs c) d))))
    (if dirs
        {"version" 1 "dirs" dirs}
        {"why" (or why "there is no cgroup the daemon may write")})
    (except [e OSError]
      {"why" f"the cgroups could not be read ({(or e.strerror e)})"})))

(setv _serial (itertools.count 1)
      _prefix "passepartout-")

(defn _alive [pid]
  (try (os.kill pid 0) True
       (except [ProcessLookupError] False)
       (except [PermissionError] True)))

(defn _sweep [base]
  "Remove the empty cgroups this daemon, or a daemon that is gone, left in BASE."
  (for [name (try (os.listdir base) (except [OSError] []))]
    (setv parts (.split name "-"))
    (when (and (.startswith name _prefix) (= (len parts) 3) (.isdigit (get parts 1)))
      (setv pid (int (get parts 1)))
      (when (or (= pid (os.getpid)) (not (_alive pid)))
        (try (os.rmdir (os.path.join base name)) (except [OSError]))))))

(defn _counter [path key]
  "The value of KEY in the flat-keyed file PATH (\"max 3\"), 0 when absent."
  (try
    (for [line (.splitlines (_read path))]
      (setv words (.split line))
      (when (and (= (len words) 2) (= (get words 0) key))
        (return (int (get words 1)))))
    (except [#(OSError ValueError)]))
  0)

(defclass ActionGroup []
  "The cgroup (one folder per hierarchy) of one shell action."

  (defn __init__ [self setup limits]
    (setv self.version (get setup "version")
          self.dirs {}
          name f"{_prefix}{(os.getpid)}-{(next _serial)}"
          wanted {"memory" (get limits "memory") "pids" (get limits "processes")})
    (for [[c base] (.items (get setup "dirs"))]
      (when (get wanted c)
        (_sweep base)
        (setv d (os.path.join base name))
        (when (not (in d (.values self.dirs)))
          (os.mkdir d))
        (setv (get self.dirs c) d)))
    (try
      (self._limit wanted)
      (except [OSError]
        (self.close)
        (raise)))
    None)

  (defn _limit [self wanted]
    (setv mem (.get self.dirs "memory")
          pids (.get self.dirs "pids"))
    (when mem
      (if (= self.version 2)
          (do (_write (os.path.join mem "memory.max") (str (get wanted "memory")))
              (for [[f v] [["memory.swap.max" "0"] ["memory.oom.group" "1"]]]
                (when (os.path.exists (os.path.join mem f))
                  (_write (os.path.join mem f) v))))
          (do (_write (os.path.join mem "memory.limit_in_bytes") (str (get wanted "memory")))
              (when (os.path.exists (os.path.join mem "memory.memsw.limit_in_bytes"))
                (_write (os.path.join mem "memory.memsw.limit_in_bytes") (str (get wanted "memory")))))))
    (when pids
      (_write (os.path.join pids "pids.max") (str (get wanted "pids")))))

  (defn controls [self]
    "The controllers this cgroup bounds the action with."
    (list self.dirs))

  (defn join [self pid]
    "Move the process PID (which has started nothing yet) into the cgroup."
    (for [d (sorted (set (.values self.dirs)))]
      (_write (os.path.join d "cgroup.procs") (str pid))))

  (defn hit [self]
    "\"memory\" or \"processes\" when the action hit that limit, else None."
    (setv mem (.get self.dirs "memory")
          pids (.get self.dirs "pids"))
    (cond (and mem (> (_counter (os.path.join mem (if (= self.version 2) "memory.events" "memory.oom_control"))
                                "oom_kill")
                      0))
          "memory"
          (and pids (> (_counter (os.path.join pids "pids.events") "max") 0))
          "processes"
          True None))

  (defn kill [self]
    "Kill every process in the cgroup."
    (for [d (sorted (set (.values self.dirs)))]
      (if (os.path.exists (os.path.join d "cgroup.kill"))
          (try (_write (os.path.join d "cgroup.kill") "1") (except [OSError]))
          (for [p (try (.split (_read (os.path.join d "cgroup.procs"))) (except [OSError] []))]
            (try (os.kill (int p) signal.SIGKILL)
                 (except [#(ProcessLookupError PermissionError ValueError)]))))))

  (defn close [self]
    "Remove the cgroup; one whose processes are still ending is removed later."
    (for [d (sorted (set (.values self.dirs)))]
      (try (os.rmdir d) (except [OSError])))))

(defn action-group [limits]
  "#(ActionGroup-or-None why): the cgroup of an action with LIMITS, or None and
   why there is none. An OSError when one should be made and cannot."
  (setv setup (cgroup-setup (get limits "cgroup")))
  (cond (in "why" setup) #(None (get setup "why"))
        (not (or (get limits "memory") (get limits "processes"))) #(None "no limit asks for one")
        True #((ActionGroup setup limits) None)))

;; * Putting them in force

(setv _wait "read -r go || exit 125; exec \"$@\" </dev/null")

(defn waiting-argv [argv]
  "ARGV run by a first process that waits for a line on its standard input
   (see enter-limits), with /dev/null as ARGV's standard input."
  (+ ["/bin/sh" "-c" _wait "/bin/sh"] argv))

(defn enter-limits [proc triples group]
  "Put the resource limits TRIPLES and the cgroup GROUP (or None) in force for
   the waiting process PROC, then let it go on; an OSError (with PROC told to
   exit) when that fails."
  (try
    (for [[res soft hard] triples]
      (resource.prlimit proc.pid res #(soft hard)))
    (when group (.join group proc.pid))
    (.write proc.stdin b"go\n")
    (except [OSError]
      (try (.close proc.stdin) (except [OSError]))
      (raise)))
  (.close proc.stdin))

;; * The disk, watched

(setv _slowest 0.25
      _fastest 0.01)

(defn _free [path]
  (setv st (os.statvfs path))
  #((* st.f-bavail st.f-frsize) (* st.f-blocks st.f-frsize)))

(defn disk-keep [limits total]
  "The bytes =keep_free= keeps free on a disk of TOTAL bytes."
  (or (parse-size (get limits "keep_free") total) 0))

(defn with-room [limits workspace]
  "LIMITS with \"room\": the bytes the disk of WORKSPACE can take now before
   it is less free than keep_free (at least 1). The largest file the action may
   write is no larger, so that one file written at once (a preallocation the
   watch would see too late) cannot take what is kept free."
  (try
    (setv [free total] (_free workspace))
    (except [OSError] (return limits)))
  (setv keep (disk-keep limits total))
  (if keep (| limits {"room" (max 1 (- free keep))}) limits))

(defclass DiskWatch []
  "Watches the disk of WORKSPACE and the cgroup GROUP while an action runs."

  (defn __init__ [self workspace limits [group None] [measure None]]
    (setv [free total] (_free workspace)
          self.workspace workspace
          self.group group
          self.measure measure
          self.start free
          self.quota (get limits "workspace_quota")
          self.keep (disk-keep limits total)
          self.confirm-at self.quota
          self.last #(0 None)
          self.rate 0
          self.hit None))

  (defn :async check [self now]
    "#(key detail) for a limit hit now, else None; NOW is the loop's time."
    (when self.group
      (setv h (.hit self.group))
      (when h (return #(h None))))
    (setv [free _] (_free self.workspace)
          used (- self.start free)
          [last-used last-time] self.last
          self.rate (if (and last-time (> now last-time)) (/ (- used last-used) (- now last-time)) 0)
          self.last #(used now))
    (when (and self.keep (< free self.keep) (> used 0))
      (return #("keep_free" free)))
    (when (and self.quota (>= used self.confirm-at))
      (if (is self.measure None)
          (return #("workspace_quota" used))
          (do (setv written (await (asyncio.to-thread self.measure)))
              (when (> written self.quota)
                (return #("workspace_quota" written)))
              ;; not the action's bytes (yet): look again once as much more is gone
              (setv self.confirm-at (+ used (- self.quota written))))))
    None)

  (defn delay [self]
    "Seconds until the next look."
    (setv [used _] self.last
          [free _] (_free self.workspace)
          left (min (gfor v [(when self.quota (- self.confirm-at used))
                             (when self.keep (- free self.keep))]
                          :if (is-not v None) v)
                    :default None)
          rate self.rate)
    (if (or (is left None) (<= rate 0))
        _slowest
        (max _fastest (min _slowest (/ left rate 2)))))

  (defn :async run [self kill]
    "Look until a limit is hit; then note it and call KILL."
    (setv loop (asyncio.get-running-loop))
    (while True
      (await (asyncio.sleep (self.delay)))
      (setv h (await (self.check (.time loop))))
      (when h
        (setv self.hit h)
        (kill)
        (return h)))))

;; * Which limit, in words

(setv _out-of-memory (re.compile (.join "|" [r"MemoryError" r"Cannot allocate memory" r"[Oo]ut of memory"
                                            r"std::bad_alloc" r"memory allocation of \d+ bytes failed"]))
      file-too-large (re.compile r"File size limit exceeded|File too large")
      _out-of-processes (re.compile r"[Cc]annot fork|can't fork|fork: (?:retry: )?Resource temporarily unavailable|Cannot create thread|pthread_create"))

(defn _by-signal [code sig]
  (and (is-not code None) (in code #((- sig) (+ 128 sig)))))

(defn limit-hit [limits exit-code output [group None] [watched None] [written #()]]
  "#(key detail) for the limit the action hit, or None: from the watch's
   WATCHED, the cgroup GROUP, the EXIT-CODE, the files WRITTEN (#(path size)
   pairs) and the OUTPUT (text)."
  (setv fsize (_fsize limits)
        controls (if group (.controls group) []))
  (when watched (return watched))
  (setv h (when group (.hit group)))
  (when h (return #(h None)))
  (setv big (when fsize (next (gfor [p n] written :if (>= n fsize) p) None)))
  (when (or big (_by-signal exit-code signal.SIGXFSZ))
    (return #((_fsize-key limits) big)))
  (when (_by-signal exit-code signal.SIGXCPU)
    (return #("cpu_time" None)))
  (when (and (!= exit-code 0) (isinstance output str))
    (when (and fsize (.search file-too-large output))
      (return #((_fsize-key limits) None)))
    (when (and (get limits "memory") (not (in "memory" controls)) (.search _out-of-memory output))
      (return #("memory" "ran out")))
    (when (and (get limits "processes") (not (in "pids" controls)) (.search _out-of-processes output))
      (return #("processes" "ran out"))))
  None)

(setv _FSIZE-KEYS #("file_size" "workspace_quota" "room"))

(defn _fsize [limits]
  "The largest file LIMITS let one action write (0: no limit)."
  (min (gfor k _FSIZE-KEYS :if (.get limits k) (get limits k)) :default 0))

(defn _fsize-key [limits]
  "The config key of the limit that bounds a file's size in LIMITS."
  (setv key (min (gfor k _FSIZE-KEYS :if (.get limits k) k) :key (fn [k] (get limits k)) :default "file_size"))
  (if (= key "room") "keep_free" key))

(defn limit-text [key limits [detail None]]
  "The result's words for the limit KEY hit with LIMITS; DETAIL is what the
   check found (a path, a byte count, \"ran out\")."
  (setv n (fn [k] (size-text (get limits k)))
        ran-out (= detail "ran out"))
  (cond
    (= key "file_size")
    (+ "stopped: it tried to write a file larger than " (n "file_size")
       (if (isinstance detail str) f" ({detail})" "")
       ", the largest an action may write ([limits] file_size)")
    (= key "workspace_quota")
    (+ "stopped: it wrote more than " (n "workspace_quota")
       " to the workspace (the quota, [limits] workspace_quota)")
    (= key "keep_free")
    (+ "stopped: the disk that holds the workspace came down to "
       (if (isinstance detail int) (size-text detail) "too little")
       " free, and at least " (str (get limits "keep_free"))
       " is kept free ([limits] keep_free)")
    (and (= key "processes") ran-out)
    f"stopped: it ran out of processes; an action may run {(get limits "processes")} processes and threads at once ([limits] processes)"
    (= key "processes")
    f"stopped: it tried to run more than {(get limits "processes")} processes and threads at once (the limit, [limits] processes)"
    (and (= key "memory") ran-out)
    f"stopped: it ran out of memory; each of its processes may use {(n "memory")} ([limits] memory)"
    (= key "memory")
    f"stopped: it used more than {(n "memory")} of memory (the limit, [limits] memory)"
    (= key "cpu_time")
    f"stopped: a process of it used more than {(get limits "cpu_time")} s of CPU time (the limit, [limits] cpu_time)"
    True f"stopped: it hit the limit {key}"))

;; * What is in force

(defn limits-summary [config]
  "One line saying which limits a shell action runs under with CONFIG."
  (setv limits (action-limits [:limits (lfor [k v] (.items (| SETTINGS (.get (or config {}) "limits" {})))
                                             x [(hy.models.Keyword (.replace k "_" "-")) v] x)])
        setup (cgroup-setup (get limits "cgroup"))
        dirs (.get setup "dirs" {})
        shown (fn [k] (if (get limits k) (size-text (get limits k)) "no limit"))
        parts [f"files up to {(shown "file_size")}"
               f"{(shown "workspace_quota")} written to the workspace"
               f"{(get limits "keep_free")} kept free on its disk"])
  (.append parts (+ (if (get limits "processes") f"{(get limits "processes")} processes" "no process limit")
                    (cond (in "pids" dirs) " (its cgroup)"
                          (= (os.geteuid) 0) " (not in force: root without a cgroup)"
                          True " (RLIMIT_NPROC)")))
  (.append parts (+ f"{(shown "memory")} of memory"
                    (if (in "memory" dirs) " (its cgroup)" " per process (RLIMIT_DATA)")))
  (.append parts (if (get limits "cpu_time") f"{(get limits "cpu_time")} s of CPU per process" "no CPU limit"))
  (+ "each shell action: " (.join ", " parts)
     (if (in "why" setup) f"; no cgroup: {(get setup "why")}" f"; cgroup v{(get setup "version")}")))
