;; * Why

"The walk (shell/walk.hy) says which words a command deletes, writes or
reads; the context says where they lead. This module says, for one gate
context, where each word leads and what deleting, writing or reading it
deserves, and the judge (shell/judge.hy) asks it of every path. Of the rules it
knows only the compiled table the judge hands it (the secret locations and
guarded writes of [paths])."

(import fnmatch os posixpath re
        hy.models [Keyword]
        passepartout.proto [proto-get]
        passepartout.shell.parse [HERE HOME MAX-CONTEXTS TMP UNKNOWN _kept _tilde]
        passepartout.shell.state [ALLOW ESCALATE REJECT _clip]
        passepartout.shell.commands [FIND-MATCH]
        passepartout.workspace [path-inside runs-later SECRET-PATTERNS])

;; * A context's folders

(setv _indexes {}
      _written-sets {}
      _context-keys #{"workspace" "home" "temp-dirs" "protected" "sandbox" "written"}
      _kind-key ':kind)

(defn _context-places [ctx]
  "The workspace, home, temp folders and protected paths of the context CTX, by
   name, as proto-get finds them, in one pass over the plist instead of four."
  (setv found {})
  (when (isinstance ctx list)
    (for [i (range 0 (- (len ctx) 1) 2)]
      (setv k (get ctx i))
      (when (and (isinstance k Keyword) (in k.name _context-keys)
                 (not (in k.name found)))
        (setv (get found k.name) (get ctx (+ i 1))))))
  found)

(defn _places [ctx rules]
  "What the judge needs of CTX: its folders, and the index of its secret locations
   (kept between calls for the same folders and rules)."
  (setv fields (_context-places ctx)
        workspace (.get fields "workspace")
        home (.get fields "home")
        temps (tuple (or (.get fields "temp-dirs") []))
        protected (tuple (or (.get fields "protected") []))
        key #(workspace home temps protected (id rules))
        pc (.get _indexes key))
  (when (is pc None)
    (setv temps (lfor t temps :if t (posixpath.normpath t))
          pc {"ws" (posixpath.normpath (or workspace "/nonexistent-workspace"))
              "home" (if home (posixpath.normpath home) None)
              "temps" temps
              "tmp" (if temps (get temps -1) None)
              "protected" (lfor p protected :if p (posixpath.normpath p))})
    (setv (get pc "home-text") (or (get pc "home") UNKNOWN)
          (get pc "tmp-text") (or (get pc "tmp") UNKNOWN))
    (setv (get pc "secrets") (_secret-index pc rules)
          (get pc "ws-real") (os.path.realpath (get pc "ws"))
          (get pc "temps-real") (lfor t temps (os.path.realpath t))
          (get pc "protected-real") (lfor p (get pc "protected") (os.path.realpath p))
          (get pc "named") {})
    (when (>= (len _indexes) MAX-CONTEXTS) (.clear _indexes))
    (setv (get _indexes key) pc))
  (| pc {"ctx" ctx "nested" 0 "resolved" {}
         "confined" (= (proto-get (or (.get fields "sandbox") []) _kind-key) "bubblewrap")
         "written" (_written-set (.get fields "written"))}))

(defn _written-set [paths]
  "The files of the context's =:written= as a set, made once per list."
  (when (not paths) (return (frozenset)))
  (setv found (.get _written-sets (id paths)))
  (when (and found (is (get found 0) paths))
    (return (get found 1)))
  (when (>= (len _written-sets) MAX-CONTEXTS) (.clear _written-sets))
  (setv made (frozenset (gfor p paths :if (isinstance p str) p))
        (get _written-sets (id paths)) #(paths made))
  made)

(setv _control-re (re.compile "[\x00-\x1f\x7f]"))

(defn _lexists [path]
  "os.path.lexists without the exception it raises and catches for a missing path."
  (try (os.access path os.F-OK :follow-symlinks False)
       (except [ValueError] False)))

(defn _realpath [p pc]
  "os.path.realpath of P, once per command; P itself when part of it is
   unknown (an unknown home folder, say), which no file system can resolve."
  (setv memo (get pc "resolved")
        key #("real" p))
  (when (not (in key memo))
    (setv (get memo key) (if (in UNKNOWN p) p (os.path.realpath p))))
  (get memo key))

(defn _resolve [given pc]
  "Where the path GIVEN (absolute, or relative to the workspace) leads, for a
   write: #(True real) or #(False reason). These are resolve-path's rules (a
   relative path may not climb out with .., symlinks are followed, the daemon's
   files are refused, the workspace and temp folders are the only places) with
   the context's folders resolved once, not on every call."
  (setv memo (get pc "resolved"))
  (when (not (in given memo))
    (setv (get memo given) (_resolve-new given pc)))
  (get memo given))

(defn _in-places [real pc]
  "True when the resolved path REAL lies in the workspace or a temp folder,
   the places commands may write (and so where a task can have written)."
  (or (path-inside real (get pc "ws-real"))
      (any (gfor t (get pc "temps-real") (path-inside real t)))))

(defn _resolve-new [given pc]
  (when (.search _control-re given)
    (return #(False "it contains a control character")))
  (if (posixpath.isabs given)
      (setv p given)
      (do (setv lexical (posixpath.normpath given))
          (when (or (= lexical "..") (.startswith lexical "../"))
            (return #(False "its .. climbs out of the workspace")))
          (setv p (posixpath.join (get pc "ws-real") given))))
  (setv real (os.path.realpath p))
  (when (os.path.islink real)
    (return #(False "it goes through a symlink that cannot be resolved (a loop)")))
  (for [r (get pc "protected-real")]
    (when (path-inside real r)
      (return #(False "it is one of the daemon's own files"))))
  (when (_in-places real pc)
    (return #(True real)))
  #(False f"it resolves to {real}, outside the workspace and the temp folders"))

(defn _unmark [text pc]
  (.replace (.replace (.replace text HOME (get pc "home-text"))
                      TMP (get pc "tmp-text"))
            HERE (get pc "ws")))

(setv _abnormal-re (re.compile r"(^|/)\.\.?(/|$)|//|/$|^$"))

(defn _norm [p]
  "P normalised; when part of it is unknown, only the folders before that part
   are (an unknown part followed by .. could be anything)."
  (when (in UNKNOWN p)
    (setv i (.index p UNKNOWN)
          cut-at (+ (.rfind p "/" 0 i) 1))
    (return (if (> cut-at 0)
                (+ (.rstrip (_norm (cut p cut-at)) "/") "/" (cut p cut-at None))
                p)))
  ;; normpath only removes ., .., empty components and a trailing slash; most
  ;; paths have none of them and are returned as they are, without the call
  (when (.search _abnormal-re p)
    (setv p (posixpath.normpath p)))
  (if (.startswith p "//") (+ "/" (.lstrip p "/")) p))

(defn _concrete [text cwds pc]
  "The readings of the path word TEXT: (path maybe given) triples, PATH absolute
   and normalised, MAYBE true when part of it is unknown, GIVEN what resolve-path is handed."
  (setv t (_unmark text pc)
        out [])
  (for [v (if (in UNKNOWN t) [(.replace t UNKNOWN "") t] [t])]
    (when (not v) (continue))
    (setv maybe (in UNKNOWN v))
    (if (.startswith v "/")
        (.append out #((_norm v) maybe v))
        (for [c cwds]
          (setv here (.startswith c HERE)
                c (_unmark c pc))
          (cond (= c (get pc "ws")) (.append out #((_norm (posixpath.join c v)) maybe v))
                (and here (not (in UNKNOWN c)))
                (do (setv joined (_norm (posixpath.join c v)))
                    (.append out #(joined maybe (posixpath.relpath joined (get pc "ws")))))
                (.startswith c "/")
                (.append out #((_norm (posixpath.join c v)) (or maybe (in UNKNOWN c))
                               (posixpath.join c v)))
                True (.append out #((_norm (+ UNKNOWN "/" v)) True v))))))
  out)

(defn _shown [path]
  (setv path (.replace path UNKNOWN "…"))
  (when (= (posixpath.basename path) FIND-MATCH)
    (setv path f"what find matches in {(or (posixpath.dirname path) ".")}"))
  (_clip path 100))

;; * Secret locations

(setv FLOOR-SECRET-DIRS [".ssh" ".aws" ".gnupg"]
      FLOOR-SECRET-FILES [".env" ".env.*"]
      FLOOR-SECRET-PATHS ["/etc/shadow" "/etc/shadow-" "/etc/gshadow" "/etc/gshadow-"
                          "/proc/*/environ"]
      _templates #(".example" ".sample" ".template" ".dist" ".defaults" ".tmpl")
      _glob-re (re.compile r"[*?\[]")
      _glob-chars "*?[")

(defn _globby [s]
  (is-not (.search _glob-re s) None))

(defn _names-regex [names]
  "One compiled pattern matching any of the file-name globs NAMES, or None."
  (when names
    (re.compile (.join "|" (gfor n names (fnmatch.translate n))))))

(defn _name-set [names]
  "The file-name globs NAMES as _name-match reads them: the literal ones, and all
   of them compiled."
  #((tuple (gfor n names :if (not (_globby n)) n)) (_names-regex names)))

(defn _dirs-regex [names]
  "A pattern finding a component named one of the literal NAMES in a path."
  (when names
    (re.compile (+ "(?:^|/)(" (.join "|" (gfor n names (re.escape n))) ")(?:/|$)"))))

(defn _literal-prefix [pattern]
  (setv i 0)
  (while (and (< i (len pattern)) (not (in (get pattern i) (+ _glob-chars UNKNOWN))))
    (+= i 1))
  (cut pattern i))

(defn _comp-match [p s]
  "Whether the path component P may name the secret component S: True, \"maybe\" or False."
  (setv unknown (in UNKNOWN p)
        pattern (.replace p UNKNOWN "*"))
  (cond (= pattern "*") (cond (_globby s) True
                              unknown False
                              True (not (.startswith s ".")))
        (and (_globby pattern) (_globby s)) (if unknown "maybe" True)
        (_globby pattern)
        (cond (and (.startswith s ".") (not (.startswith pattern ".")) (not unknown)) False
              (fnmatch.fnmatchcase s pattern) (if unknown "maybe" True)
              True False)
        (_globby s) (fnmatch.fnmatchcase p s)
        True (= p s)))

(defn _name-match [comp name-set]
  "Whether the path component COMP may be one of the names of NAME-SET (see
   _name-set). A glob counts only when its fixed start covers at least half of
   the name, and only against the literal names."
  (setv [literals regex] name-set
        unknown (in UNKNOWN comp)
        pattern (.replace comp UNKNOWN "*"))
  (if (_globby pattern)
      (do (setv prefix (_literal-prefix comp))
          (for [n literals]
            (when (and (>= (len prefix) (max 2 (// (+ (len n) 1) 2)))
                       (.startswith n prefix)
                       (fnmatch.fnmatchcase n pattern))
              (return (if unknown "maybe" True))))
          False)
      (if regex
          (is-not (.match regex comp) None)
          False)))

(defn _under [comps anchor]
  "Whether the path COMPS lies in ANCHOR (components): True, \"maybe\" or False."
  (when (< (len comps) (len anchor)) (return False))
  (setv result True)
  (for [[p s] (zip comps anchor)]
    (setv m (if (= p s) True (_comp-match p s)))
    (when (not m) (return False))
    (when (= m "maybe") (setv result "maybe")))
  result)

(defn _comps [path]
  (lfor c (.split path "/") :if c c))

(setv _secret-name-regex (_names-regex SECRET-PATTERNS))

(defn _secret-index [pc rules]
  (setv home (get pc "home")
        anchors [])
  (when home
    (for [d FLOOR-SECRET-DIRS]
      (.append anchors #((_comps (posixpath.join home d)) f"~/{d}" REJECT "floor-secret-read"))))
  (for [p FLOOR-SECRET-PATHS]
    (.append anchors #((_comps p) p REJECT "floor-secret-read")))
  (for [p (get pc "protected")]
    (.append anchors #((_comps p) f"{p} (the daemon's own files)" REJECT "floor-secret-read")))
  (for [p (get rules "secret-anchored")]
    (cond (.startswith p "~/")
          (when home
            (.append anchors #((_comps (posixpath.join home (cut p 2 None))) p REJECT "secret-paths")))
          (.startswith p "/") (.append anchors #((_comps p) p REJECT "secret-paths"))))
  (setv startup (_startup-set home)
        by-first {}
        glob-first (lfor a anchors :if (and (get a 0) (_globby (get (get a 0) 0))) a)
        ;; the folders that hold the daemon's own files, listed or read whole
        control-dirs (sfor p (get pc "protected")
                           :setv d (posixpath.dirname p)
                           :if (not (or (= d home) (in d SYSTEM-DIRS) (in d (get pc "temps"))
                                        (= (.count d "/") 1)))
                           d))
  (for [a anchors]
    (.append (.setdefault by-first (if (get a 0) (get (get a 0) 0) "") []) a))
  {"anchors" anchors
   "control-dirs" control-dirs
   "memo" {}
   "searches" {}
   "by-first" by-first
   "by-second" (_by-second by-first)
   "glob-first" glob-first
   "startup" startup
   "startup-prefixes" (tuple startup)
   "floor-dirs-path" (_dirs-regex FLOOR-SECRET-DIRS)
   "rule-dirs-path" (_dirs-regex (get rules "secret-dirs"))
   "floor-dirs" (_name-set FLOOR-SECRET-DIRS)
   "rule-dirs" (_name-set (get rules "secret-dirs"))
   "floor-files" (_name-set FLOOR-SECRET-FILES)
   "rule-files" (_name-set (get rules "secret-files"))})

(defn _by-second [by-first]
  "The anchors of each group of BY-FIRST a path may lie in, by the path's plain
   second component: #(first second) holds those whose second component is
   SECOND or a glob, or that have only one; #(first None) the last two kinds."
  (setv found {})
  (for [[first group] (.items by-first)]
    (defn any-second [a]
      (or (< (len (get a 0)) 2) (_globby (get (get a 0) 1))))
    (setv (get found #(first None)) (lfor a group :if (any-second a) a))
    (for [second (sfor a group :if (not (any-second a)) (get (get a 0) 1))]
      (setv (get found #(first second))
            (lfor a group :if (or (any-second a) (= (get (get a 0) 1) second)) a))))
  found)

(defn _file-secret [name pc rules]
  "The (severity description rule) for the file name NAME, or None."
  (setv index (get pc "secrets")
        floor (_name-match name (get index "floor-files")))
  (when (and floor (not (.endswith (.lower name) _templates)))
    (return #((if (= floor "maybe") ESCALATE REJECT) "a .env file" "floor-secret-read")))
  (setv m (_name-match name (get index "rule-files")))
  (when m
    (return #((if (= m "maybe") ESCALATE REJECT) f"{name}, a file that holds credentials" "secret-paths")))
  (when (and (not (_globby (.replace name UNKNOWN "*")))
             (.match _secret-name-regex (.lower name)))
    (return #(ESCALATE f"{name}, a file that usually holds secrets" "secret-files")))
  None)

(defn _secret-of [path pc rules]
  "How the absolute PATH touches a secret location: (severity description rule), or None."
  (_kept (get (get pc "secrets") "memo") path _find-secret path pc rules))

(setv _dirs-paths #(#("floor-dirs-path" "floor-secret-read") #("rule-dirs-path" "secret-paths")))

(defn _find-secret [path pc rules]
  (when (in path (get (get pc "secrets") "control-dirs"))
    (return #(REJECT f"{path}, the daemon's own folder (its control plane)" "control-plane")))
  (setv comps (_comps path)
        index (get pc "secrets")
        first (if comps (get comps 0) "")
        second (when (> (len comps) 1) (get comps 1))
        candidates (cond (or (_globby first) (in UNKNOWN first))
                         (get index "anchors")
                         (and second (not (_globby second)) (not (in UNKNOWN second)))
                         (+ (.get (get index "by-second") #(first second)
                                  (.get (get index "by-second") #(first None) []))
                            (get index "glob-first"))
                         True
                         (+ (.get (get index "by-first") first []) (get index "glob-first"))))
  (for [[anchor what severity rule] candidates]
    (setv m (_under comps anchor))
    (when m
      (return #((if (= m "maybe") ESCALATE severity) what rule))))
  (when (not (or (_globby path) (in UNKNOWN path)))
    (for [[key rule] _dirs-paths]
      (setv m (and (get index key) (.search (get index key) path)))
      (when m (return #(REJECT f"a {(.group m 1)} folder" rule))))
    (return (when comps (_file-secret (get comps -1) pc rules))))
  (for [c comps]
    (setv m (_name-match c (get index "floor-dirs")))
    (when m (return #((if (= m "maybe") ESCALATE REJECT) f"a {c} folder" "floor-secret-read")))
    (setv m (_name-match c (get index "rule-dirs")))
    (when m (return #((if (= m "maybe") ESCALATE REJECT) f"a {c} folder" "secret-paths"))))
  (when comps
    (_file-secret (get comps -1) pc rules)))

(defn _holds-secret [path pc rules]
  "The secret location inside the folder PATH (read recursively), or None."
  (setv comps (_comps path))
  (for [[anchor what severity rule] (get (get pc "secrets") "anchors")]
    (when (and (< (len comps) (len anchor)) (_under anchor comps))
      (return #(severity what rule))))
  None)

;; * Writes

(setv HARMLESS-DEVICES #{"/dev/null" "/dev/zero" "/dev/full" "/dev/tty" "/dev/stdout"
                         "/dev/stderr" "/dev/stdin" "/dev/random" "/dev/urandom"}
      STARTUP-FILES [".bashrc" ".bash_profile" ".bash_login" ".bash_logout" ".profile"
                     ".zshrc" ".zshenv" ".zprofile" ".zlogin" ".zlogout" ".kshrc" ".mkshrc"
                     ".cshrc" ".tcshrc" ".login" ".logout" ".xprofile" ".xinitrc" ".xsession"
                     ".xsessionrc" ".pam_environment" ".config/fish" ".config/autostart"
                     ".config/environment.d" ".config/systemd/user" ".config/plasma-workspace/env"]
      STARTUP-PATHS ["/etc/profile" "/etc/profile.d" "/etc/bash.bashrc" "/etc/bashrc"
                     "/etc/zshrc" "/etc/zsh" "/etc/zprofile" "/etc/environment" "/etc/sudoers"
                     "/etc/sudoers.d" "/etc/crontab" "/etc/cron.d" "/etc/cron.hourly"
                     "/etc/cron.daily" "/etc/cron.weekly" "/etc/cron.monthly" "/etc/anacrontab"
                     "/var/spool/cron" "/var/spool/anacron" "/etc/rc.local" "/etc/init.d"
                     "/etc/systemd/system" "/etc/ld.so.preload" "/etc/ld.so.conf.d"
                     "/Library/LaunchAgents" "/Library/LaunchDaemons"])

(defn _device [path]
  (and (.startswith path "/dev/")
       (not (in path HARMLESS-DEVICES))
       (not (.startswith path "/dev/fd/"))
       (not (.startswith path "/dev/pts/"))))

(defn _startup-set [home]
  "A dict from every start-up location (for the home folder HOME) to its name."
  (setv found (dfor p STARTUP-PATHS p p))
  (when home
    (for [f (+ STARTUP-FILES ["Library/LaunchAgents"])]
      (setv (get found (posixpath.join home f)) f"~/{f}")))
  found)

(defn _startup [path pc]
  "The start-up, cron or sudoers location PATH is in, or None."
  (setv index (get pc "secrets")
        places (get index "startup"))
  ;; every folder the loop visits is a prefix of PATH: most paths have none
  (when (not (.startswith path (get index "startup-prefixes")))
    (return None))
  (while True
    (when (in path places) (return (get places path)))
    (setv parent (posixpath.dirname path))
    (when (= parent path) (return None))
    (setv path parent)))

(defn _guarded [real pc rules]
  (setv ws (get pc "ws-real"))
  (or (runs-later real ws)
      (runs-later real ws (get rules "guarded-writes"))))

(defn _place-of-unknown [path pc what rule]
  "The verdict for writing or deleting PATH, part of which is unknown."
  (setv prefix (cut path (.index path UNKNOWN))
        folder (cut prefix (+ (.rfind prefix "/") 1)))
  (when (and folder (!= folder "/"))
    (setv [ok reason] (_resolve folder pc))
    (when (not ok)
      (return [REJECT f"{what} {(_shown path)}: {reason}" rule])))
  [ESCALATE f"{what} {(_shown path)}, a path only known when the command runs" "floor-unknown-path"])

(defn _write-verdict [path maybe given pc rules what rule]
  (when maybe (return (_place-of-unknown path pc what rule)))
  (when (_device path)
    (return [REJECT f"{what} the device {path}" "floor-device-write"]))
  (when (or (in path HARMLESS-DEVICES) (.startswith path "/dev/fd/") (.startswith path "/dev/pts/"))
    (return [ALLOW None rule]))
  (setv startup (_startup path pc))
  (when startup
    (return [REJECT f"{what} {startup}, which runs commands later (start-up files, crontabs and sudoers are never written)" "floor-startup-files"]))
  (setv [ok real] (_resolve given pc))
  (when (not ok)
    (return [REJECT f"{what} {(_shown path)}: {real}" rule]))
  (setv startup (_startup real pc))
  (when startup
    (return [REJECT f"{what} {startup} (through {(_shown path)}), which runs commands later" "floor-startup-files"]))
  (setv guarded (_guarded real pc rules))
  (when guarded
    (return [ESCALATE f"{what} {(_shown path)} in {guarded}, which runs commands later, unseen" "guarded-writes"]))
  (when (_in-git real pc)
    (return [ESCALATE f"{what} {(_shown path)}: it is or lies in .git, the repository's history, which no undo of the workspace brings back" "git-history"]))
  (when (or (_secret-of real pc rules) (_secret-of path pc rules))
    (return [ESCALATE f"{what} {(_shown path)}, a file that usually holds secrets" "secret-files"]))
  [ALLOW None rule])

(defn _in-git [real pc]
  "True when the resolved path REAL is a .git folder of the workspace or lies in
   one; a pattern the shell expands counts where it names a .git that is there
   (=.[!.]*=, =.g*=: only a pattern that starts with a dot matches a dot file)."
  (setv ws (get pc "ws-real")
        folder ws)
  (when (or (not (path-inside real ws)) (= real ws))
    (return False))
  (for [c (.split (posixpath.relpath real ws) "/")]
    (when (or (= c ".git")
              (and (.startswith c ".") (_globby c) (fnmatch.fnmatchcase ".git" c)
                   (os.path.lexists (posixpath.join folder ".git"))))
      (return True))
    (setv folder (posixpath.join folder c)))
  False)

(defn _judge-write [text rec pc rules what rule]
  (lfor [path maybe given] (_concrete text (get rec "cwd") pc)
        (_write-verdict path maybe given pc rules what rule)))

;; * Deletions

(setv SYSTEM-DIRS #{"/" "/bin" "/boot" "/dev" "/etc" "/home" "/lib" "/lib32" "/lib64" "/libx32"
                    "/media" "/mnt" "/opt" "/proc" "/root" "/run" "/sbin" "/srv" "/sys" "/tmp"
                    "/usr" "/var" "/var/tmp" "/snap" "/nix" "/usr/bin" "/usr/sbin" "/usr/lib"
                    "/usr/local" "/usr/share" "/usr/include" "/usr/local/bin" "/var/lib"
                    "/var/log" "/var/cache" "/var/spool" "/var/mail" "/etc/ssh" "/Applications"
                    "/Library" "/System" "/Users" "/Volumes" "/private" "/cores"})

(defn _strip-wildcards [path]
  (while (and (!= path "/") (re.fullmatch r"[*?.]*[*?][*?.]*" (posixpath.basename path)))
    (setv path (posixpath.dirname path)))
  path)

(defn _catastrophic [path pc]
  "(severity reason) when deleting PATH would be a disaster, or None. What find
   matches in a folder counts as that folder's contents (a trailing *)."
  (setv base (_strip-wildcards (if (= (posixpath.basename path) FIND-MATCH)
                                   (posixpath.dirname path)
                                   path))
        home (get pc "home")
        ws (get pc "ws")
        temps (get pc "temps"))
  (for [p (if (_globby base) [base] [base (_realpath base pc)])]
    (setv in-temp (any (gfor t temps (path-inside p t))))
    (cond (= p "/") (return #(REJECT "it is the root of the file system"))
          (and home (= p home)) (return #(REJECT "it is the home folder"))
          (and (or (in p SYSTEM-DIRS) (= (.count p "/") 1))
               (not (and (!= base path) (in p temps))))
          (return #(REJECT f"{p} is a system folder"))
          (and home (path-inside home p)) (return #(REJECT "it holds the home folder"))
          (and (!= p ws) (path-inside ws p))
          (return #((if in-temp ESCALATE REJECT) "it holds the workspace"))))
  None)

(defn _delete-verdict [path maybe given pc recursive what rule]
  (when maybe (return (_place-of-unknown path pc what rule)))
  (setv disaster (_catastrophic path pc))
  (when (and disaster (= (get disaster 0) REJECT))
    (return [REJECT f"{what} {(_shown path)}: {(get disaster 1)}" "floor-delete"]))
  (setv [ok real] (_resolve given pc)
        ws (get pc "ws-real"))
  (cond (not ok) [REJECT f"{what} {(_shown path)}: {real}" rule]
        disaster [(get disaster 0) f"{what} {(_shown path)}: {(get disaster 1)}" "floor-delete"]
        (in real (get pc "temps-real"))
        [REJECT f"{what} the temp folder {real} itself" rule]
        (or (= real ws) (= (_strip-wildcards real) ws))
        [ESCALATE f"{what} the workspace itself{(if (= real ws) "" ", all of it")}" rule]
        (_in-git real pc)
        [ESCALATE f"{what} {(_shown path)}: it is or lies in .git, the repository's history, which no undo of the workspace brings back" "git-history"]
        (and (path-inside real ws) (_lexists (posixpath.join real ".git")))
        [ESCALATE f"{what} {(_shown path)}, which holds a git repository and its history" "git-history"]
        True [ALLOW None rule]))

(defn _judge-delete [text rec pc recursive what rule]
  (lfor [path maybe given] (_concrete text (get rec "cwd") pc)
        (_delete-verdict path maybe given pc recursive what rule)))

;; * Reads

(defn _path-candidates [arg]
  (setv out [arg])
  (when (and (in "=" arg) (not (.startswith arg "=")))
    (.append out (get (.partition arg "=") 2)))
  (for [c (list out)]
    (when (and c (in (get c 0) "@<"))
      (.append out (cut c 1 None))))
  (when (.startswith arg "file://")
    (.append out (cut arg 7 None)))
  (when (and (in ":" arg) (not (in "://" arg)))
    (.extend out (.split arg ":")))
  (lfor c out :if c (if (.startswith c "~") (_tilde c) c)))

(defn _named-paths [arg cwds pc rules]
  "Every path the argument ARG may name in the folders CWDS, as (path maybe
   secret startup): the secret location it touches (_secret-of) and the start-up
   file it lies in when all of it is known. The read check and the floor's
   start-up check both ask, so the answer is kept per context, by word."
  (_kept (get pc "named") #(arg (tuple cwds)) _find-named-paths arg cwds pc rules))

(defn _find-named-paths [arg cwds pc rules]
  (tuple (gfor c (_path-candidates arg)
               [path maybe _] (_concrete c cwds pc)
               #(path maybe (_secret-of path pc rules) (when (not maybe) (_startup path pc))))))

(defn _read-verdicts [arg rec pc rules [rule None]]
  (setv out [])
  (for [[path maybe found _] (_named-paths arg (get rec "cwd") pc rules)]
    ;; /proc/self is whichever process reads it: the command's own, not the gate's
    (when (and (not found) (not maybe) (not (.startswith arg "-")) (not (_globby path))
               (not (.startswith path #("/proc/self" "/proc/thread-self" "/dev/fd" "/dev/std")))
               (_lexists path))
      (setv real (_realpath path pc))
      (when (!= real path)
        (setv found (_secret-of real pc rules))))
    (when found
      (setv [severity what by] found)
      (.append out [severity f"reads {what} ({(_shown path)})" (or rule by)])))
  out)

(defn _tree-verdicts [arg rec pc rules rule]
  (setv out [])
  (for [[path maybe _] (_concrete arg (get rec "cwd") pc)]
    (when (not maybe)
      (setv found (_holds-secret path pc rules)
            shown path)
      ;; a link is read as where it leads: ln -s ~ h, then grep -r x h/
      (when (and (not found) (not (_globby path)) (_lexists path))
        (setv real (_realpath path pc))
        (when (!= real path)
          (setv found (or (_holds-secret real pc rules) (_secret-of real pc rules))
                shown f"{path} (a link to {real})")))
      (when found
        (setv [severity what by] found)
        (.append out [severity f"reads everything under {(_shown shown)}, which holds {what}" by]))))
  out)
