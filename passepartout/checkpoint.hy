;; * Why

"The gates can be wrong and the sandbox keeps a wrong command inside the
workspace, but inside the workspace it can still do damage: delete the work
of an afternoon, rewrite .git, fill a file with nonsense. So before every
action that may write, the workspace is checkpointed, and /undo puts it back
as it was before the last action (/undo N: before the N-th last), /changes
says what an action changed. A checkpoint is a turn of the journal, and so is
an undo."

;; * How: a copy kept in step, and the kernel saying what changed

(import asyncio ctypes errno json logging os shutil stat struct threading time weakref
        passepartout.proto [proto-get proto-put]
        passepartout.config [config-defaults parse-size]
        passepartout.context [context-runtime protected-paths]
        passepartout.journal [journal-append]
        passepartout.limits [size-text])

(setv log (logging.getLogger "passepartout.checkpoint")
      SETTINGS (config-defaults "undo")
      FOLDER "checkpoints")

;; * The kernel's reports

(setv IN-MODIFY 0x2 IN-ATTRIB 0x4 IN-MOVED-FROM 0x40 IN-MOVED-TO 0x80 IN-CREATE 0x100
      IN-DELETE 0x200 IN-DELETE-SELF 0x400 IN-MOVE-SELF 0x800 IN-Q-OVERFLOW 0x4000
      IN-IGNORED 0x8000 IN-ONLYDIR 0x1000000 IN-DONT-FOLLOW 0x2000000 IN-ISDIR 0x40000000
      _watched (| IN-MODIFY IN-ATTRIB IN-MOVED-FROM IN-MOVED-TO IN-CREATE IN-DELETE
                  IN-DELETE-SELF IN-MOVE-SELF IN-ONLYDIR IN-DONT-FOLLOW)
      _event (struct.Struct "iIII"))

(defclass Inotify []
  "One inotify instance, read without blocking."

  (defn __init__ [self]
    (setv self.libc (ctypes.CDLL None :use-errno True)
          fd (self.libc.inotify-init1 (| os.O-NONBLOCK os.O-CLOEXEC)))
    (when (< fd 0)
      (setv e (ctypes.get-errno))
      (raise (OSError e (os.strerror e))))
    (setv self.fd fd
          self._closer (weakref.finalize self os.close fd)))

  (defn add [self path]
    "The watch of the folder PATH (a new one, or the one it has)."
    (setv wd (self.libc.inotify-add-watch self.fd (os.fsencode path) _watched))
    (when (< wd 0)
      (setv e (ctypes.get-errno))
      (raise (OSError e (os.strerror e) path)))
    wd)

  (defn remove [self wd]
    (self.libc.inotify-rm-watch self.fd wd))

  (defn read [self]
    "The events waiting, as #(wd mask name) triples."
    (setv out [])
    (while True
      (try (setv data (os.read self.fd 65536))
           (except [BlockingIOError] (return out)))
      (setv i 0)
      (while (< i (len data))
        (setv [wd mask _ n] (.unpack-from _event data i)
              name (.rstrip (cut data (+ i 16) (+ i 16 n)) b"\x00")
              i (+ i 16 n))
        (.append out #(wd mask (os.fsdecode name))))))

  (defn close [self]
    (self._closer)))

;; * What a file is, for comparing

(defn _at [base rel]
  (if rel (+ base "/" rel) base))

(defn _child [rel name]
  (if rel (+ rel "/" name) name))

(defn _lstat [p]
  (try (os.lstat p)
       (except [#(FileNotFoundError NotADirectoryError)] None)))

(defn _describe [st path]
  "What the checkpoints keep of the entry at PATH, whose lstat is ST (None: nothing there)."
  (when (is st None) (return None))
  (setv mode (stat.S-IMODE st.st-mode))
  (cond (stat.S-ISREG st.st-mode) {"kind" "file" "size" st.st-size "mode" mode "mtime" st.st-mtime-ns}
        (stat.S-ISDIR st.st-mode) {"kind" "dir" "mode" (| mode 0o700)}
        (stat.S-ISLNK st.st-mode) {"kind" "link" "target" (os.readlink path)}
        True None))

(defn _same [a b]
  (and a b (= (get a "kind") (get b "kind"))
       (cond (= (get a "kind") "file")
             (all (gfor k ["size" "mode" "mtime"] (= (get a k) (get b k))))
             (= (get a "kind") "dir") (= (get a "mode") (get b "mode"))
             True (= (get a "target") (get b "target")))))

;; * Touching the workspace safely

(defn _parent-fd [root rel]
  "#(fd name): the folder holding REL under ROOT, opened without following a
   link, and REL's last name."
  (setv parts (.split rel "/")
        fd (os.open root (| os.O-RDONLY os.O-DIRECTORY os.O-CLOEXEC)))
  (try
    (for [p (cut parts 0 -1)]
      (setv nfd (os.open p (| os.O-RDONLY os.O-DIRECTORY os.O-NOFOLLOW os.O-CLOEXEC) :dir-fd fd))
      (os.close fd)
      (setv fd nfd))
    (except [BaseException]
      (os.close fd)
      (raise)))
  #(fd (get parts -1)))

(defn _copy-fd [src dst]
  (try
    (while (os.copy-file-range src dst (** 2 30)))
    (except [e OSError]
      (when (not (in e.errno #(errno.EXDEV errno.EINVAL errno.ENOSYS errno.EOPNOTSUPP)))
        (raise))
      (while True
        (setv chunk (os.read src (** 2 20)))
        (when (not chunk) (break))
        (os.write dst chunk)))))

(defn _copy-in [src-fd dst-fd name [atomic True]]
  "Copy the open regular file SRC-FD to a new file NAME in the folder DST-FD,
   with its mode and times; its stat. ATOMIC: written beside and renamed into
   place, so that nothing ever sees half of it."
  (setv st (os.fstat src-fd)
        flags (| os.O-WRONLY os.O-CREAT os.O-EXCL os.O-NOFOLLOW os.O-CLOEXEC)
        tmp (if atomic f".{name}.{(os.getpid)}.copying" name))
  (try (setv out (os.open tmp flags 0o600 :dir-fd dst-fd))
       (except [FileExistsError]
         (os.unlink tmp :dir-fd dst-fd)
         (setv out (os.open tmp flags 0o600 :dir-fd dst-fd))))
  (try
    (_copy-fd src-fd out)
    (os.fchmod out (stat.S-IMODE st.st-mode))
    (os.utime out :ns #(st.st-atime-ns st.st-mtime-ns))
    (finally (os.close out)))
  (when atomic
    (os.replace tmp name :src-dir-fd dst-fd :dst-dir-fd dst-fd))
  st)

(defn _open-file [root rel]
  "REL under ROOT opened for reading, never through a link; an OSError when it
   is not a regular file."
  (setv [dfd name] (_parent-fd root rel))
  (try
    (setv fd (os.open name (| os.O-RDONLY os.O-NOFOLLOW os.O-NONBLOCK os.O-CLOEXEC) :dir-fd dfd))
    (finally (os.close dfd)))
  (when (not (stat.S-ISREG (. (os.fstat fd) st-mode)))
    (os.close fd)
    (raise (OSError errno.EINVAL "not a regular file")))
  fd)

(defn _copy-file [src-root rel dst-root [atomic True]]
  "Copy the file REL from SRC-ROOT to DST-ROOT (whose folder exists); its stat."
  (setv fd (_open-file src-root rel)
        [dfd name] (_parent-fd dst-root rel))
  (try
    (_copy-in fd dfd name atomic)
    (finally (os.close fd) (os.close dfd))))

(defn _remove [root rel]
  "Remove REL under ROOT (a folder with all it holds), never through a link."
  (setv [dfd name] (_parent-fd root rel))
  (try
    (setv st (os.lstat name :dir-fd dfd))
    (if (stat.S-ISDIR st.st-mode)
        (shutil.rmtree name :dir-fd dfd)
        (os.unlink name :dir-fd dfd))
    (except [FileNotFoundError])
    (finally (os.close dfd))))

(defn _make [root rel desc]
  "Make the folder or link DESC describes at REL under ROOT."
  (setv [dfd name] (_parent-fd root rel))
  (try
    (if (= (get desc "kind") "dir")
        (do (try (os.mkdir name 0o700 :dir-fd dfd)
                 (except [FileExistsError]))
            (setv fd (os.open name (| os.O-RDONLY os.O-DIRECTORY os.O-NOFOLLOW os.O-CLOEXEC) :dir-fd dfd))
            (try (os.fchmod fd (get desc "mode"))
                 (finally (os.close fd))))
        (os.symlink (get desc "target") name :dir-fd dfd))
    (finally (os.close dfd))))

(defn _walk [base [rel ""]]
  "#(rel lstat) for everything below BASE/REL, folders before what they hold."
  (setv out []
        todo [rel])
  (while todo
    (setv d (.pop todo))
    (for [name (try (sorted (os.listdir (_at base d))) (except [OSError] []))]
      (setv r (_child d name)
            st (_lstat (_at base r)))
      (when st
        (.append out #(r st))
        (when (stat.S-ISDIR st.st-mode) (.append todo r)))))
  out)

(defn _set-aside [src dest]
  "Move SRC to DEST; a folder into one already there, entry by entry."
  (os.makedirs (os.path.dirname dest) :exist-ok True)
  (if (and (os.path.isdir dest) (not (os.path.islink dest))
           (os.path.isdir src) (not (os.path.islink src)))
      (do (for [name (os.listdir src)]
            (_set-aside (os.path.join src name) (os.path.join dest name)))
          (os.rmdir src))
      (os.rename src dest)))

(defn _write-json [path value]
  (setv tmp (+ path ".part"))
  (with [f (open tmp "w")]
    (json.dump value f))
  (os.replace tmp path))

(defn _read-json [path [default None]]
  (try
    (with [f (open path)] (json.load f))
    (except [#(OSError ValueError)] default)))

;; * The keeper

(defclass Keeper []
  "The checkpoints of the workspace WORKSPACE, kept in the folder ROOT; WATCH
   False walks the workspace instead of asking the kernel what changed."

  (defn __init__ [self workspace root [keep 20] [max-bytes 0] [max-file 0] [skip #()] [watch True]]
    (setv self.workspace (os.path.realpath workspace)
          self.root root
          self.mirror (os.path.join root "mirror")
          self.folder (os.path.join root "kept")
          self.keep keep
          self.max-bytes max-bytes
          self.max-file max-file
          self.skip (set skip)
          self.lock (threading.RLock)
          self.notify None
          self.why-walk (if watch None "told to walk")
          self.wds {}
          self.dirty {}
          self.overflow False
          self.ready False
          self.unkept {}
          self.running 0
          self.next 1
          self.slots 0
          self.manifests None))

  (defn close [self]
    (with [self.lock]
      (when self.notify
        (.close self.notify)
        (setv self.notify None))))

;; ** Keeping the mirror in step

(defn _watch [self rel]
  (when (and self.notify (not (in rel self.skip)))
    (try
      (setv (get self.wds (.add self.notify (_at self.workspace rel))) rel)
      (except [e OSError]
        (when (in e.errno #(errno.ENOSPC errno.ENOMEM))
          (self._walk-instead f"no more inotify watches ({e.strerror})"))))))

(defn _walk-instead [self why]
  (.warning log "checkpoints walk the workspace from now on: %s" why)
  (setv self.why-walk why)
  (when self.notify
    (.close self.notify))
  (setv self.notify None
        self.wds {}))

(defn _mirror-desc [self rel]
  (or (.get self.unkept rel)
      (_describe (_lstat (_at self.mirror rel)) (_at self.mirror rel))))

(defn _compare [self rel deep cp changes]
  (when (in rel self.skip) (return))
  (when (and rel (not (os.path.isdir (_at self.mirror (os.path.dirname rel)))))
    (return (self._compare (os.path.dirname rel) True cp changes)))
  (setv w (_describe (_lstat (_at self.workspace rel)) (_at self.workspace rel))
        m (self._mirror-desc rel))
  (when (and (is w None) (is m None)) (return))
  (when (and w m (= (get w "kind") (get m "kind") "dir"))
    (when (!= (get w "mode") (get m "mode"))
      (os.chmod (_at self.mirror rel) (get w "mode"))
      (.append changes [rel m w]))
    (when deep
      (self._watch rel)
      (setv names (set))
      (for [base [self.workspace self.mirror]]
        (try (.update names (os.listdir (_at base rel))) (except [OSError])))
      (for [name (sorted names)]
        (self._compare (_child rel name) True cp changes))
      (for [k (list self.unkept)]
        (when (and (= (os.path.dirname k) rel) (not (in (os.path.basename k) names)))
          (self._compare k True cp changes))))
    (return))
  (when (_same w m) (return))
  (when m (setv m (self._take rel m cp changes)))
  (.append changes [rel m w])
  (when w (self._put rel w cp changes)))

(defn _take [self rel m cp changes]
  "Move the mirror's REL (described by M) into the checkpoint CP, or drop it;
   M as the checkpoint keeps it (=at=: where in CP)."
  (for [k (list self.unkept)]
    (when (.startswith k (+ rel "/"))
      (.append changes [k (.pop self.unkept k) None])))
  (when (in rel self.unkept)
    (.pop self.unkept rel)
    (return m))
  (setv here (_at self.mirror rel)
        slot (str self.slots))
  (+= self.slots 1)
  (when (= (get m "kind") "dir")
    (for [[r st] (_walk self.mirror rel)]
      (setv d (_describe st (_at self.mirror r)))
      (when d
        (.append changes [r (| d {"at" (+ slot (cut r (len rel) None))}) None]))))
  (cond cp (do (os.rename here (os.path.join cp slot))
               (| m {"at" slot}))
        (= (get m "kind") "dir") (do (shutil.rmtree here) m)
        True (do (os.unlink here) m)))

(defn _put [self rel w cp changes]
  "Copy the workspace's REL (described by W) into the mirror."
  (setv kind (get w "kind"))
  (cond
    (= kind "file")
    (if (and self.max-file (> (get w "size") self.max-file))
        (setv (get self.unkept rel) (| w {"kept" False}))
        (try
          (setv st (_copy-file self.workspace rel self.mirror :atomic False))
          (when (!= (_describe st None) w)
            ;; it changed while it was copied: the copy is what the mirror now says
            (setv (get (get changes -1) 2) (_describe st None)))
          (except [e OSError]
            (.info log "checkpoint: %s is not kept: %s" rel (or e.strerror e))
            (setv (get self.unkept rel) (| w {"kept" False})))))
    (= kind "link") (_make self.mirror rel w)
    (= kind "dir")
    (do (_make self.mirror rel w)
        (self._compare rel True cp changes))))

;; ** Reading the kernel's reports

(defn _drain [self]
  "Take in what the kernel reported since the last look."
  (when (is self.notify None) (return))
  (for [[wd mask name] (.read self.notify)]
    (cond
      (& mask IN-Q-OVERFLOW) (setv self.overflow True)
      (& mask IN-IGNORED) (.pop self.wds wd None)
      True
      (do (setv base (.get self.wds wd))
          (when (is-not base None)
            (setv rel (if name (_child base name) base)
                  whole (bool (or (and name (& mask IN-ISDIR)
                                       (& mask (| IN-CREATE IN-MOVED-TO IN-MOVED-FROM IN-DELETE)))
                                  (& mask (| IN-DELETE-SELF IN-MOVE-SELF)))))
            (when (and name (& mask IN-ISDIR) (& mask (| IN-MOVED-FROM IN-DELETE)))
              (self._unwatch rel))
            (setv (get self.dirty rel) (or (.get self.dirty rel False) whole)))))))

(defn _unwatch [self rel]
  "Forget the watches of REL and below (a folder moved or gone): a folder
   moved elsewhere in the workspace is watched again where it arrives."
  (setv under (+ rel "/"))
  (for [[wd r] (list (.items self.wds))]
    (when (or (= r rel) (.startswith r under))
      (.remove self.notify wd)
      (.pop self.wds wd None))))

(defn _sync [self cp]
  "Bring the mirror in step with the workspace; what changed, sorted by path."
  (setv changes [])
  (self._drain)
  (if (or self.overflow (is self.notify None))
      (do (setv self.overflow False
                self.dirty {})
          (self._compare "" True cp changes))
      (do (setv dirty self.dirty
                self.dirty {})
          (for [rel (sorted dirty)]
            (self._compare rel (get dirty rel) cp changes))))
  (sorted changes :key (fn [c] (get c 0))))

(defn _start [self]
  "Make the mirror equal to the workspace: all of it, once per process."
  (os.makedirs self.mirror :exist-ok True)
  (os.makedirs self.folder :exist-ok True)
  (when (!= (.get (_read-json (os.path.join self.root "state.json") {}) "workspace") self.workspace)
    (shutil.rmtree self.mirror)
    (os.makedirs self.mirror)
    (_write-json (os.path.join self.root "state.json") {"workspace" self.workspace}))
  (setv numbers [0])
  (for [name (os.listdir self.folder)]
    (when (.isdigit name)
      (.append numbers (int name))
      ;; one the daemon did not finish (it stopped while recording it) is
      ;; dropped; the mirror takes again what it had moved there
      (when (not (os.path.exists (os.path.join self.folder name "manifest.json")))
        (shutil.rmtree (os.path.join self.folder name) :ignore-errors True))))
  (setv self.next (+ 1 (max numbers)))
  (when (and (is self.notify None) (is self.why-walk None))
    (try (setv self.notify (Inotify))
         (except [e #(OSError AttributeError)]
           (self._walk-instead f"inotify cannot be used ({e})"))))
  (self._compare "" True None [])
  (setv self.ready True))

;; ** Before and after an action

(defn begin [self]
  "Ready the mirror for an action about to run."
  (with [self.lock]
    (if self.ready (self._sync None) (self._start))
    (+= self.running 1)))

(defn end [self what session]
  "Record what changed since begin as a checkpoint: its manifest, or None
   when nothing changed."
  (with [self.lock]
    (-= self.running 1)
    (setv n self.next
          cp (os.path.join self.folder f"{n :08d}")
          self.slots 0)
    (os.mkdir cp)
    (try
      (setv changes (self._sync cp))
      (when (not changes)
        (shutil.rmtree cp :ignore-errors True)
        (return None))
      (setv manifest {"id" n "workspace" self.workspace "what" what "session" session
                      "time" (time.time) "changes" changes
                      "bytes" (sum (gfor [_ b _] changes
                                         :if (and b (= (get b "kind") "file") (.get b "kept" True))
                                         (get b "size"))
                                   0)})
      ;; written last: a folder without it is a checkpoint not finished
      (with [f (open (os.path.join cp "manifest.json") "w")]
        (json.dump manifest f))
      (except [BaseException]
        ;; a checkpoint not finished (a full disk) leaves no folder and its
        ;; number is not used again; the next one compares the whole workspace
        (shutil.rmtree cp :ignore-errors True)
        (setv self.next (+ n 1)
              self.overflow True)
        (raise)))
    (setv (get (self._manifests) n) manifest
          self.next (+ n 1))
    (when (self._over)
      (.start (threading.Thread :target self.prune :name "checkpoint-prune" :daemon True)))
    manifest))

(defn pending [self]
  "#(path size) for each file the workspace holds that the mirror does not
   hold as it is: what was written since the last checkpoint."
  (with [self.lock]
    (when (not self.ready) (return []))
    (self._drain)
    (setv out [])
    (if (or self.overflow (is self.notify None))
        (self._differing "" True out)
        (for [[rel whole] (sorted (.items self.dirty))]
          (self._differing rel whole out)))
    (list (.values (dfor [p n] out p #(p n))))))

(defn measure [self]
  "The bytes written to the workspace since the last checkpoint."
  (sum (gfor [_ n] (self.pending) n) 0))

(defn _differing [self rel deep out]
  (when (in rel self.skip) (return))
  (setv st (_lstat (_at self.workspace rel)))
  (cond (is st None) None
        (stat.S-ISREG st.st-mode)
        (when (not (_same (_describe st None) (self._mirror-desc rel)))
          (.append out #(rel st.st-size)))
        (and deep (stat.S-ISDIR st.st-mode))
        (for [name (try (os.listdir (_at self.workspace rel)) (except [OSError] []))]
          (self._differing (_child rel name) True out))))

;; ** The checkpoints kept

(defn _manifests [self]
  (when (is self.manifests None)
    (setv self.manifests {})
    (for [name (sorted (try (os.listdir self.folder) (except [OSError] [])))]
      (when (.isdigit name)
        (setv m (_read-json (os.path.join self.folder name "manifest.json")))
        (when (and m (= (.get m "workspace") self.workspace))
          (setv (get self.manifests (int name)) m)))))
  self.manifests)

(defn kept [self]
  "The manifests of the checkpoints an undo may restore, the newest first."
  (with [self.lock]
    (lfor [n m] (sorted (.items (self._manifests)) :reverse True)
          :if (not (.get m "undone")) m)))

(defn _total [self]
  (sum (gfor m (.values (self._manifests)) (+ (.get m "bytes" 0) (.get m "undone-bytes" 0))) 0))

(defn _over [self]
  (setv n (len (self._manifests)))
  (and (> n 1) (or (> n self.keep) (and self.max-bytes (> (self._total) self.max-bytes)))))

(defn prune [self]
  "Drop the oldest checkpoints past the bounds (on a thread of its own after
   a checkpoint: what it removes is not the action's time)."
  (with [self.lock]
    (while (self._over)
      (setv n (min (self._manifests)))
      (.pop self.manifests n)
      (shutil.rmtree (os.path.join self.folder f"{n :08d}") :ignore-errors True))))

;; ** Undoing

(defn undo [self n]
  "Restore the workspace to before the N-th last checkpoint: a dict
   {\"undone\" [manifests] \"restored\" k \"removed\" k \"missing\" [paths]},
   or {\"error\" why}."
  (with [self.lock]
    (when self.running
      (return {"error" "an action is running in the workspace; wait for it to end (or /stop it), then undo"}))
    (if self.ready (self._sync None) (self._start))
    (setv kept (lfor [i m] (sorted (.items (self._manifests)) :reverse True)
                     :if (not (.get m "undone")) m))
    (when (< (len kept) n)
      (return {"error" (if kept
                           f"only {(len kept)} checkpoint{(if (= (len kept) 1) "" "s")} kept; /undo {(len kept)} goes back furthest"
                           "there is no checkpoint to go back to")}))
    (setv out {"undone" [] "restored" 0 "removed" 0 "missing" []})
    (for [m (cut kept n)]
      (self._restore m out)
      (.append (get out "undone") m))
    (self._sync None)
    out))

(defn _restore [self m out]
  (setv n (get m "id")
        cp (os.path.join self.folder f"{n :08d}")
        undone (os.path.join cp "undone")
        changes (get m "changes")
        kept-bytes 0)
  (for [[rel before after] (reversed changes)]
    (setv now (_describe (_lstat (_at self.workspace rel)) (_at self.workspace rel)))
    (when (and now (not (and before (= (get before "kind") (get now "kind") "dir"))))
      (try
        (when (os.path.lexists (_at self.mirror rel))
          (_set-aside (_at self.mirror rel) (os.path.join undone rel))
          (+= kept-bytes (if (= (get now "kind") "file") (get now "size") 0)))
        (.pop self.unkept rel None)
        (_remove self.workspace rel)
        (when (is before None) (+= (get out "removed") 1))
        (except [e OSError]
          (.warning log "undo: %s could not be taken away: %s" rel e)
          (.append (get out "missing") rel)))))
  (for [[rel before after] changes]
    (when before
      (try
        (setv kind (get before "kind"))
        (cond
          (!= kind "file")
          (do (_make self.workspace rel before)
              (_make self.mirror rel before)
              (+= (get out "restored") 1))
          (not (.get before "kept" True))
          (.append (get out "missing") rel)
          True
          (do (setv src (os.path.join cp (get before "at")))
              (os.makedirs (os.path.dirname (_at self.mirror rel)) :exist-ok True)
              (os.rename src (_at self.mirror rel))
              (_copy-file self.mirror rel self.workspace)
              (+= (get out "restored") 1)))
        (except [e OSError]
          (.warning log "undo: %s could not be put back: %s" rel e)
          (.append (get out "missing") rel)))))
  (setv (get m "undone") (time.time)
        (get m "undone-bytes") kept-bytes)
  (_write-json (os.path.join cp "manifest.json") m)))

;; * One keeper per daemon

(defn undo-settings [config]
  "The [undo] table of CONFIG with the defaults filled in."
  (| SETTINGS (or (.get (or config {}) "undo") {})))

(defn make-keeper [config workspace]
  "The Keeper for WORKSPACE under CONFIG, or a string saying why there is none."
  (setv s (undo-settings config)
        data (.get config "data_dir"))
  (cond
    (not (get s "enabled")) "the config turns checkpoints off ([undo] enabled = false)"
    (not data) "there is no data dir to keep checkpoints in"
    (not (os.path.isdir workspace)) f"the workspace {workspace} is not a folder"
    True
    (do (setv ws (os.path.realpath workspace)
              root (os.path.join (os.path.realpath data) FOLDER)
              skip (lfor p (+ [root (os.path.realpath data)] (protected-paths config))
                         :if (and (!= p ws) (.startswith p (+ ws "/")))
                         (os.path.relpath p ws)))
        (when (or (= root ws) (.startswith ws (+ root "/")))
          (return f"the workspace {ws} lies inside the checkpoints' folder"))
        (Keeper ws root
                :keep (max 1 (get s "keep"))
                :max-bytes (or (parse-size (get s "max_bytes")) 0)
                :max-file (or (parse-size (get s "max_file")) 0)
                :skip skip))))

(defn keeper-for [ctx]
  "The Keeper of CTX's daemon, or None."
  (setv services (context-runtime ctx "services"))
  (when (is services None) (return None))
  (setv k (getattr services "checkpoints" None))
  (when (is k None)
    (setv k (make-keeper services.config (proto-get ctx ':workspace))
          services.checkpoints k))
  (if (isinstance k Keeper) k None))

(defn keeper-why [ctx]
  "Why CTX's daemon keeps no checkpoints, or None when it does."
  (setv services (context-runtime ctx "services"))
  (cond (is services None) "this context has no daemon"
        (keeper-for ctx) None
        True services.checkpoints))

;; * Around an action

(defclass Mark []
  "A checkpoint begun for an action."
  (defn __init__ [self keeper action ctx]
    (setv self.keeper keeper
          self.action action
          self.ctx ctx)))

(defn :async checkpoint-before [action ctx]
  "A Mark for ACTION in CTX, None when no checkpoints are kept, or an error
   text when one cannot be taken."
  (setv keeper (keeper-for ctx))
  (when (is keeper None) (return None))
  (try
    (await (asyncio.to-thread keeper.begin))
    (Mark keeper action ctx)
    (except [e OSError]
      (.error log "no checkpoint could be taken: %s" e)
      (+ f"no checkpoint of the workspace could be taken ({(or e.strerror e)}), so nothing was run; "
         "free some disk space, or turn checkpoints off ([undo] enabled = false)"))))

(defn action-text [action]
  "A short line saying what ACTION was."
  (setv name (proto-get action ':action)
        name (if (hasattr name "name") name.name (str name))
        what (or (proto-get action ':cmd) (proto-get action ':path) "")
        what (if (isinstance what str) what (str what)))
  (setv line (+ ":" name (if what f" {what}" "")))
  (if (> (len line) 200) (+ (cut line 197) "…") line))

(defn compact-written [changes]
  "The paths CHANGES wrote (added or changed), a folder that was made standing
   for all it holds (\"build/\")."
  (setv out []
        made None)
  (for [[rel before after] changes]
    (cond (is after None) None
          (and made (.startswith rel made)) None
          (and (= (get after "kind") "dir") (or (is before None) (!= (get before "kind") "dir")))
          (do (setv made (+ rel "/"))
              (.append out made))
          (= (get after "kind") "dir") None
          True (.append out rel)))
  out)

(defn counts [changes]
  "#(added changed removed) among CHANGES."
  (setv a 0 c 0 r 0)
  (for [[_ before after] changes]
    (cond (is before None) (+= a 1)
          (is after None) (+= r 1)
          True (+= c 1)))
  #(a c r))

(defn :async _journal [ctx record]
  (setv services (context-runtime ctx "services")
        store (context-runtime ctx "store"))
  (try
    (if (and services (getattr services "writer" None))
        (await (.call services.writer journal-append record))
        (when store (journal-append store record)))
    (except [e Exception]
      (.error log "the checkpoint could not be journaled: %s" e))))

(defn :async checkpoint-after [mark]
  "Record what the action of MARK changed; the manifest, or None."
  (setv action-line (action-text mark.action)
        session (proto-get mark.ctx ':session))
  (try
    (setv m (await (asyncio.to-thread mark.keeper.end action-line session)))
    (except [e OSError]
      (.error log "the checkpoint after %s failed: %s" action-line e)
      (return None)))
  (when m
    (setv [a c r] (counts (get m "changes")))
    (await (_journal mark.ctx [:event "checkpoint" :session session :turn "action"
                              :data [:checkpoint (get m "id") :action action-line
                                     :added a :changed c :removed r
                                     :bytes (sum (gfor [_ _ after] (get m "changes")
                                                       :if (and after (= (get after "kind") "file"))
                                                       (get after "size"))
                                                 0)
                                     :wrote (compact-written (get m "changes"))]])))
  m)

;; * What an action wrote, in its result

(defn wrote-into [result mark manifest]
  "RESULT with :wrote, the resolved paths the action of MARK wrote as its
   checkpoint's MANIFEST tells, when it wrote any."
  (setv rels (if manifest (compact-written (get manifest "changes")) []))
  (if rels
      (proto-put result ':wrote (lfor r rels
                                      (+ (os.path.join mark.keeper.workspace (.rstrip r "/"))
                                         (if (.endswith r "/") "/" ""))))
      result))
