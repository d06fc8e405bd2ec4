;; * Why

"A model names files as text, and text can lie about where it leads: ..
climbs, ~ jumps home, a symlink inside the workspace can point at
/etc/passwd, and an escaped %2e%2e is harmless to the filesystem but not to
the next tool that decodes it. resolve-path is the one answer to \"where does
this path really lead, and may we go there?\". The workspace gate asks it before
a proposal is allowed, and the file actuators ask it again at the last moment,
because the world may have changed in between and because an actuator can be
called without any gate."

(import fnmatch os posixpath re unicodedata
        urllib.parse [unquote-to-bytes]
        passepartout.proto [proto-get])

;; * Text that cannot be a path

(setv MAX-PATH 4096
      _control-re (re.compile "[\x00-\x1f\x7f-\x9f]"))

(defn _refuse [reason]
  [:ok False :reason reason])

(defn _char-name [c]
  (if (= c "\x00") "NUL" f"\\x{(ord c) :02x}"))

(defn _text-problem [path]
  "Why PATH is not acceptable path text, or None."
  (when (not (isinstance path str))
    (return "a path must be text"))
  (when (not (.strip path))
    (return "the path is empty"))
  (try (setv size (len (.encode path "utf-8")))
       (except [UnicodeEncodeError]
         (return "the path is not valid Unicode")))
  (when (> size MAX-PATH)
    (return f"the path is longer than {MAX-PATH} bytes"))
  (setv m (.search _control-re path))
  (when m
    (return f"the path contains a control character ({(_char-name (.group m 0))})")))

;; * Percent escapes

(setv _escape-re (re.compile r"%([0-9A-Fa-f]{2})")
      _decode-layers 4
      _escaped-meaning {"/" "separator" "\\" "backslash" "." "dot" "~" "tilde"})

(defn _layer-note [layer]
  (cond (= layer 1) ""
        (= layer 2) ", double-encoded"
        True f", encoded {layer} times"))

(defn _escape-problem [path]
  "Why the percent-escapes of PATH are dangerous, or None."
  (setv text path)
  (for [layer (range 1 (+ _decode-layers 1))]
    (setv escapes (.findall _escape-re text))
    (when (not escapes)
      (return None))
    (setv note (_layer-note layer))
    (for [h escapes]
      (setv b (int h 16))
      (cond
        (or (< b 0x20) (= b 0x7f))
        (return f"it carries a percent-encoded control character (%{h}{note}); a reader that decodes it cuts the path there")
        (in (chr b) _escaped-meaning)
        (return f"it carries a percent-encoded {(get _escaped-meaning (chr b))} (%{h}{note}); read decoded, it could lead out of the workspace")))
    (try (setv text (.decode (unquote-to-bytes text) "utf-8"))
         (except [UnicodeDecodeError]
           (return f"its percent-escapes are not valid UTF-8{note} (overlong forms such as %c0%af hide a / or a .)")))
    (setv m (.search _control-re text))
    (when m
      (return f"it carries a percent-encoded control character ({(_char-name (.group m 0))}{note})")))
  f"it is percent-encoded more than {_decode-layers} times")

;; * Readings

(defn _other-readings [path]
  "The (label text) pairs of the ways PATH could be read besides as written."
  (setv folded (unicodedata.normalize "NFKC" path)
        out [])
  (for [[label text] [["read with \\ as a separator" (.replace path "\\" "/")]
                      ["read with Unicode forms folded (NFKC)" folded]
                      ["read folded and with \\ as a separator" (.replace folded "\\" "/")]]]
    (when (and (!= text path) (not (in text (lfor [_ t] out t))))
      (.append out [label text])))
  out)

;; * Locating one reading

(defn _real [p]
  (when (and (isinstance p str) p)
    (os.path.realpath p)))

(defn path-inside [path root]
  "True when the resolved PATH is ROOT or lies under it."
  (or (= path root)
      (.startswith path (+ (.rstrip root "/") "/"))))

(defn _dot-run [p]
  (for [part (.split p "/")]
    (when (and (>= (len part) 3) (= (.strip part ".") ""))
      (return part))))

(defn _unresolved-link [real]
  "True when REAL still goes through a symlink (realpath gave up on a loop)."
  (setv p real)
  (while (and (not (os.path.lexists p)) (!= p (posixpath.dirname p)))
    (setv p (posixpath.dirname p)))
  (os.path.islink p))

(defn _locate [p ctx write]
  "(:ok true :path REAL :root ROOT) for the reading P, or a refusal."
  (setv workspace (_real (proto-get ctx ':workspace)))
  (when (not workspace)
    (return (_refuse "there is no workspace")))
  (setv run (_dot-run p))
  (when run
    (return (_refuse f"its component {run !r} is only dots, which some tools read as a parent folder")))
  (when (.startswith p "~")
    (when (not (or (= p "~") (.startswith p "~/")))
      (return (_refuse "~name is another user's home, outside the workspace")))
    (setv home (proto-get ctx ':home))
    (when (not home)
      (return (_refuse "~ has no meaning here: the context names no home")))
    (setv p (+ (.rstrip home "/") "/" (cut p 2 None))))
  (when (not (posixpath.isabs p))
    (setv lexical (posixpath.normpath p))
    (when (or (= lexical "..") (.startswith lexical "../"))
      (return (_refuse "its .. climbs out of the workspace")))
    (setv p (posixpath.join workspace p)))
  (setv real (os.path.realpath p))
  (when (_unresolved-link real)
    (return (_refuse "it goes through a symlink that cannot be resolved (a loop)")))
  (for [protected (or (proto-get ctx ':protected) [])]
    (setv r (_real protected))
    (when (and r (path-inside real r))
      (return (_refuse "it is one of the daemon's own files"))))
  (when (path-inside real workspace)
    (return [:ok True :path real :root workspace]))
  (when write
    (for [t (or (proto-get ctx ':temp-dirs) [])]
      (setv r (_real t))
      (when (and r (path-inside real r))
        (return [:ok True :path real :root r]))))
  (_refuse (if write
               f"it resolves to {real}, outside the workspace and the temp folders"
               f"it resolves to {real}, outside the workspace (reads are confined to it)")))

;; * Files that run later

(setv RUNS-LATER [".git/hooks" ".git/config" ".git/info" ".git/modules" ".gitattributes"
                  ".gitmodules" ".gitconfig" ".envrc" ".husky" ".vscode/tasks.json"
                  ".vscode/launch.json" ".vscode/settings.json" ".github/workflows"
                  ".github/actions" ".gitlab-ci.yml" ".gitlab-ci" ".circleci" ".travis.yml"
                  ".buildkite" "Jenkinsfile" ".drone.yml" "azure-pipelines.yml"
                  ".pre-commit-config.yaml" "sitecustomize.py" "usercustomize.py" "*.pth"
                  ".bashrc" ".bash_profile" ".profile" ".zshrc" ".zshenv"]
      BUILD-FILES ["Makefile" "makefile" "GNUmakefile" "*.mk" "package.json" ".npmrc"
                   ".yarnrc" ".yarnrc.yml" "setup.py" "setup.cfg" "pyproject.toml"
                   "conftest.py" "pytest.ini" "tox.ini" "noxfile.py" "Rakefile" "Gemfile"
                   "build.rs" "Cargo.toml" ".cargo" "CMakeLists.txt" "meson.build" "justfile"
                   "Justfile" "Taskfile.yml" "build.gradle" "pom.xml" "Dockerfile"
                   "docker-compose.yml" "compose.yaml"])

(defn _components-match [parts pattern]
  "True when the components of PATTERN match PARTS in a row somewhere, so that
   the pattern names PARTS or a folder that holds them."
  (setv want (.split pattern "/")
        n (len want))
  (for [i (range (+ (- (len parts) n) 1))]
    (when (all (gfor [p w] (zip (cut parts i (+ i n)) want) (fnmatch.fnmatchcase p w)))
      (return True)))
  False)

(defn runs-later [path root [patterns None]]
  "The pattern of RUNS-LATER (or PATTERNS) that the path PATH below ROOT lies in, or None.
   (runs-later \"/ws/a/.git/hooks/pre-commit\" \"/ws\") ⇒ \".git/hooks\""
  (when (not (path-inside path root))
    (return None))
  (setv parts (lfor p (.split (posixpath.relpath path root) "/") :if (!= p ".") p))
  (for [pattern (if (is patterns None) RUNS-LATER patterns)]
    (when (_components-match parts pattern)
      (return pattern)))
  None)

;; * Secret files

(setv SECRET-PATTERNS [".env" ".env.*" "*.pem" "*.key" "id_rsa*" "id_ed25519*"
                       "id_ecdsa*" "id_dsa*" ".netrc" "credentials*" ".pgpass"
                       ".git-credentials" "*.p12" "*.pfx"]
      SECRET-FOLDERS #{".ssh" ".gnupg" ".aws"})

(defn secret-name [name]
  "The pattern that marks the file NAME as a secret, or None.
   (secret-name \".env.local\") ⇒ \".env.*\""
  (setv low (.lower name))
  (for [pattern SECRET-PATTERNS]
    (when (fnmatch.fnmatchcase low pattern)
      (return pattern))))

(defn _secret-path [real root requested]
  (setv parts (+ (.split (posixpath.relpath real root) "/")
                 [(posixpath.basename (.rstrip requested "/"))]))
  (any (gfor part parts
             (or (in (.lower part) SECRET-FOLDERS) (secret-name part)))))

;; * Resolving

(defn resolve-path [path ctx [write False]]
  "Where PATH leads and whether it may be read (or, with WRITE, written):
   (:ok true :path \"/real/path\" :secret false) or (:ok false :reason \"…\").
   (resolve-path \"notes/../a.txt\" ctx) ⇒ (:ok true :path \"/ws/a.txt\" :secret false)"
  (setv problem (or (_text-problem path) (_escape-problem path)))
  (when problem
    (return (_refuse problem)))
  (setv found (_locate path ctx write))
  (when (not (proto-get found ':ok))
    (return found))
  (for [[label text] (_other-readings path)]
    (setv other (_locate text ctx write))
    (when (not (proto-get other ':ok))
      (return (_refuse f"{label}, {(proto-get other ':reason)}"))))
  (setv real (proto-get found ':path))
  [:ok True :path real :secret (_secret-path real (proto-get found ':root) path)])
