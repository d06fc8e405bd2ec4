;; * Why

"Private data, text from strangers and an open network together are how an
agent's data leaves: a command that reads a secret and a curl on the same
line need nothing else. So a shell action has no network of its own. Its
sandbox is a network namespace with only a loopback device; the one way out is
an HTTP proxy the daemon runs for that action (proxy.org), which lets through
what the policy or a person allowed for that action and writes down
everything that went by."

;; ** The policy in one table

(import functools [lru-cache]
        ipaddress os re shutil
        passepartout.proto [proto-get proto-put]
        passepartout.config [config-defaults]
        passepartout.shell.walk [analyse])

(setv PROXY-PORT 3128
      BOX-SOCKET "/run/passepartout-egress.sock"
      READ-METHODS #{"GET" "HEAD" "OPTIONS"}
      ALLOWED-HOSTS (get (config-defaults "sandbox") "allowed_hosts"))

;; * Hosts

(setv _label r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
      _name-re (re.compile (+ r"(?:" _label r"\.)*" _label))
      _bracketed-re (re.compile r"\[([0-9a-f:.]+)\](?::([0-9]{1,5}))?"))

(defn _ip [text]
  (try (ipaddress.ip-address text)
       (except [ValueError] None)))

(defn split-host [text [wildcard False]]
  "#(host port) for TEXT written as HOST, HOST:PORT or [IPV6]:PORT, port None
   when not given; None when TEXT is not a host. With WILDCARD, *.NAME is one.
   (split-host \"PyPI.org.:8443\") ⇒ #(\"pypi.org\" 8443)"
  (when (not (and (isinstance text str) (< 0 (len text) 300)))
    (return None))
  (setv t (.lower (.strip text))
        port None
        m (.fullmatch _bracketed-re t))
  (cond m (setv [host port] (.groups m))
        (= (.count t ":") 1) (setv [host _ port] (.partition t ":"))
        True (setv host t))
  (when (and (isinstance port str) (not (and (.isdigit port) (< 0 (int port) 65536))))
    (return None))
  (setv port (when port (int port))
        host (.rstrip host ".")
        star (and wildcard (.startswith host "*."))
        bare (if star (cut host 2 None) host)
        ip (_ip bare))
  (cond (and ip (not star) (or m (= ip.version 4)))
        #((str ip) port)
        (and ip (not star) (is port None))
        #((str ip) None)
        (and (not ip) (.fullmatch _name-re bare) (<= (len bare) 253)
             (not (.isdigit (.replace (get (.split bare ".") -1) "_" "0"))))
        #(host port)
        True None))

(defn host-text [host port]
  "HOST and PORT written back as one text: \"pypi.org\", \"[::1]:8080\"."
  (setv h (if (in ":" host) f"[{host}]" host))
  (if (is port None)
      (if (in ":" host) h host)
      f"{h}:{port}"))

(defn host-word [text]
  "True when TEXT, a word a person wrote after /approve CODE 1h, names a host:
   a name with a dot, an address, or anything with a port (a bare word such as
   \"thanks\" is not one)."
  (setv found (split-host text))
  (and (is-not found None)
       (or (in "." (get found 0)) (in ":" (get found 0)) (is-not (get found 1) None))))

(defn [(lru-cache :maxsize 64)] _host-entries [texts]
  (tuple (gfor t texts
               :setv e (split-host t :wildcard True)
               :if e e)))

(defn host-entries [texts]
  "The allowed-host entries TEXTS (strings) as #(host port) pairs; what is not a
   host is left out. Every gate call reads the same list, so the pairs of a
   list are made once."
  (try (list (_host-entries (tuple (or texts []))))
       (except [TypeError]
         (lfor t (or texts [])
               :setv e (split-host t :wildcard True)
               :if e e))))

(defn entry-covers [entry host port]
  "True when the allowed-host ENTRY #(pattern port) covers HOST on PORT (None:
   the web's ports)."
  (setv [pattern p] entry)
  (and (if (.startswith pattern "*.")
           (.endswith host (cut pattern 1 None))
           (= host pattern))
       (if (is p None)
           (in port #(None 80 443))
           (= port p))))

(defn in-box-host [host]
  "True for the loopback names the box keeps to itself: a server an action
   starts and reaches on the same line never goes through the proxy."
  (in host #("localhost" "127.0.0.1" "::1")))

(defn allowed-hosts [status]
  "The allowed-host entries of the sandbox STATUS (the defaults when it has none)."
  (host-entries (proto-get (or status []) ':allowed-hosts ALLOWED-HOSTS)))

;; * The proxy's decision

(defn decide [policy method host port now]
  "#(allowed why) for a request METHOD to HOST:PORT under POLICY at NOW."
  (setv target (host-text host port)
        upload (not (in method (| READ-METHODS #{"CONNECT"}))))
  (for [[h p expires] (proto-get policy ':grants [])]
    (when (and (> expires now) (entry-covers #(h p) host port))
      (return #(True f"{(host-text h p)} is granted by a person"))))
  (when (any (gfor e (proto-get policy ':named []) (entry-covers e host port)))
    (return #(True f"{target} is on the command line a person approved")))
  (when (and (not upload) (any (gfor e (proto-get policy ':named-reads []) (entry-covers e host port))))
    (return #(True f"{target} is on the command line a person approved, to be read")))
  (setv allowed (any (gfor e (proto-get policy ':allowed []) (entry-covers e host port))))
  (cond (and allowed (not upload))
        #(True f"{target} is an allowed host")
        allowed
        #(False (+ f"{method} to {target} is an upload; uploads are asked about before "
                   f"the action runs, and let through only for a host a person granted "
                   f"(/approve CODE 1h {target})"))
        True
        #(False (+ f"{target} is not an allowed host ([sandbox] allowed_hosts); a command "
                   f"line that names it is asked about first, and a person can grant it "
                   f"(/approve CODE 1h {target})"))))

;; * Reading a command line

(setv TEXT-PROGRAMS #{"echo" "printf" "grep" "egrep" "fgrep" "rg" "ag" "ack" "sed" "awk"
                      "gawk" "mawk" "tr" "cut" "sort" "uniq" "wc" "head" "tail" "cat" "tac"
                      "less" "more" "column" "fold" "fmt" "nl" "jq" "yq" "test" "[" "[["
                      "true" "false" ":" "read" "export" "local" "declare" "printenv"
                      "basename" "dirname" "realpath" "readlink" "stat" "ls" "file" "touch"
                      "mkdir" "rm" "cp" "mv" "ln" "chmod" "diff" "cmp" "comm" "tee"}
      DOWNLOADERS #{"curl" "wget" "http" "https" "xh" "xhs"}
      SSH-LIKE #{"ssh" "scp" "sftp" "rsync"}
      SCHEME-PORTS {"http" None "https" None "ws" None "wss" None "ftp" 21 "ftps" 990
                    "ssh" 22 "sftp" 22 "git" 9418 "rsync" 873 "svn" 3690}
      WRITE-METHODS #{"POST" "PUT" "PATCH" "DELETE"}
      PUBLISHERS {"npm" #("publish" "registry.npmjs.org") "pnpm" #("publish" "registry.npmjs.org")
                  "yarn" #("publish" "registry.npmjs.org") "bun" #("publish" "registry.npmjs.org")
                  "cargo" #("publish" "crates.io") "twine" #("upload" "upload.pypi.org")
                  "poetry" #("publish" "upload.pypi.org") "flit" #("publish" "upload.pypi.org")
                  "hatch" #("publish" "upload.pypi.org") "uv" #("publish" "upload.pypi.org")
                  "gem" #("push" "rubygems.org") "docker" #("push" None) "podman" #("push" None)}
      _url-re (re.compile r"\b([a-z][a-z0-9+.-]{0,20})://(?:[^\s/?#@'\"]*@)?(\[[0-9a-f:.]+\]|[^\s/?#:'\"\\()<>,;]+)(?::([0-9]{1,5}))?" re.I)
      _scp-re (re.compile r"(?:[^\s@/:]+@)?(\[[0-9a-f:.]+\]|[a-z0-9_.-]+):(?!//)" re.I))

(setv _curl-values (set (.split "-o --output -H --header -A --user-agent -e --referer -m --max-time
                               --connect-timeout --retry --retry-delay --retry-max-time -w --write-out
                               -X --request -r --range -C --continue-at --max-redirs --max-filesize -z
                               --time-cond --limit-rate --output-dir --resolve --cacert --capath -d --data
                               --data-ascii --data-binary --data-raw --data-urlencode --json -F --form
                               --form-string -T --upload-file -u --user -x --proxy -U --proxy-user -K
                               --config -b --cookie -c --cookie-jar -D --dump-header -E --cert --key
                               --cert-type --key-type --trace --trace-ascii --stderr --connect-to
                               --interface --local-port --url --proxy-header --noproxy -Y --speed-limit
                               -y --speed-time -Q --quote --socks5 --socks5-hostname --preproxy
                               --dns-servers --doh-url --unix-socket --abstract-unix-socket --mail-from
                               --mail-rcpt -t --telnet-option --variable --url-query --oauth2-bearer
                               --netrc-file --ciphers --tls-max --pinnedpubkey --expect100-timeout"))
      _curl-uploads (set (.split "-d --data --data-ascii --data-binary --data-raw --data-urlencode --json
                                -F --form --form-string -T --upload-file"))
      _wget-values (set (.split "-O --output-document -o --output-file -a --append-output -P
                               --directory-prefix -t --tries -T --timeout -w --wait -l --level -A --accept
                               -R --reject -U --user-agent --header -Q --quota --max-redirect -D --domains
                               -i --input-file -e --execute --post-data --post-file --body-data --body-file
                               --method --user --password --http-user --http-password --load-cookies
                               --save-cookies --ca-certificate --certificate --private-key --referer -B
                               --base --bind-address --limit-rate --exclude-domains -I -X"))
      _wget-uploads #{"--post-data" "--post-file" "--body-data" "--body-file"}
      _httpie-values (set (.split "-a --auth -A --auth-type -o --output --session --session-read-only
                                 --verify --cert --cert-key --proxy --timeout --max-redirects --pretty
                                 -s --style -p --print"))
      _ssh-values (set (.split "-b -c -D -E -e -F -I -i -J -L -l -m -O -o -p -Q -R -S -W -w -P"))
      _git-values #{"-C" "-c" "--git-dir" "--work-tree" "--namespace" "--super-prefix" "--config-env"}
      GIT-REMOTE #{"clone" "fetch" "pull" "push" "ls-remote" "remote" "submodule" "send-email"})

(defn _options [argv values]
  "#(operands options) of ARGV (without the program): the operands, and each
   option as #(name value), value None for a flag. VALUES are the options that
   take one; a short cluster (-sSLo FILE, -XPOST) is read letter by letter."
  (setv operands []
        options []
        i 0
        n (len argv))
  (while (< i n)
    (setv w (get argv i))
    (+= i 1)
    (cond
      (= w "--") (do (.extend operands (cut argv i None)) (break))
      (.startswith w "--")
      (do (setv [name eq value] (.partition w "="))
          (cond eq (.append options #(name value))
                (and (in name values) (< i n)) (do (.append options #(name (get argv i))) (+= i 1))
                True (.append options #(name None))))
      (and (.startswith w "-") (> (len w) 1))
      (for [j (range 1 (len w))]
        (setv flag (+ "-" (get w j)))
        (if (in flag values)
            (do (setv rest (cut w (+ j 1) None))
                (cond rest (.append options #(flag rest))
                      (< i n) (do (.append options #(flag (get argv i))) (+= i 1))
                      True (.append options #(flag None)))
                (break))
            (.append options #(flag None))))
      True (.append operands w)))
  #(operands options))


(defn _static [w]
  "True when the word W is known before the command runs (no $(…), no $VAR)."
  (and (isinstance w str) (not (in "\x00" w))))

(defn _web-port [port]
  (if (in port #(80 443)) None port))

(defn _url-hosts [text [whole True]]
  "The hosts of the network URLs inside TEXT, as texts, in order. TEXT not
   WHOLE is the start of a word whose rest is known only when the command
   runs: a URL counts there when its host and port end before that rest does."
  (setv out [])
  (for [m (.finditer _url-re text)]
    (setv scheme (get (.split (.lower (.group m 1)) "+") -1)
          found (split-host (.strip (.group m 2) "[]"))
          port (.group m 3))
    (when (and found (in scheme SCHEME-PORTS) (or (not port) (< 0 (int port) 65536))
               (or whole (and (< (.end m) (len text)) (in (get text (.end m)) "/?#"))))
      (.append out (host-text (get found 0)
                              (_web-port (if port (int port) (get SCHEME-PORTS scheme)))))))
  out)

(defn _words-hosts [words]
  "The hosts of the URLs in WORDS. A word with a part known only when it runs
   (=http://h/$(whoami)=) still names the host its known start spells out in
   full: what the substitution adds to the path is data sent to that host."
  (lfor w words
        :if (isinstance w str)
        h (if (_static w) (_url-hosts w) (_url-hosts (get (.split w "\x00" 1) 0) False))
        h))

(defn _bare-host [word]
  "The host of WORD read as a downloader reads an operand without a scheme
   (example.org/x, user@h:8080/y), or None."
  (when (or (not (_static word)) (in "://" word) (.startswith word "-"))
    (return None))
  (setv hostport (get (.split (get (re.split r"[/?#]" word 1) 0) "@") -1)
        found (split-host hostport))
  (when (and found (or (in "." (get found 0)) (in ":" (get found 0)) (= (get found 0) "localhost")))
    (host-text (get found 0) (_web-port (get found 1)))))

(defn _repo-host [word [loose False]]
  "The host a repository or remote WORD names (a URL or [user@]host:path), or None.
   LOOSE takes host:path for any name, as scp and rsync do; otherwise it needs a
   dot or a user@."
  (when (not (_static word))
    (return None))
  (setv urls (_url-hosts word))
  (when urls
    (return (get urls 0)))
  (setv m (.match _scp-re word))
  (when m
    (setv found (split-host (.strip (.group m 1) "[]")))
    (when (and found (or loose (in "@" word) (in "." (get found 0))))
      (host-text (get found 0) 22))))

(defn _use [program host upload how]
  [:program program :host host :upload upload :how how])

(defn _uses [program hosts upload how]
  "One use per host of HOSTS, or one with no host for an upload that names none."
  (setv hosts (list (dict.fromkeys hosts)))
  (if hosts
      (lfor h hosts (_use program h upload how))
      (if upload [(_use program None True how)] [])))

(defn _writes [method]
  (and (isinstance method str) (not (in (.upper method) READ-METHODS))))

(defn _httpie-data [item]
  (setv m (re.search r"==|:=|=|@|:" item))
  (and m (in (.group m 0) #(":=" "=" "@"))))

(defn _downloader-uses [name args]
  (setv values (cond (= name "curl") _curl-values (= name "wget") _wget-values True _httpie-values)
        [operands options] (_options args values)
        hosts (_words-hosts args))
  (cond
    (= name "curl")
    (setv upload (next (gfor [o v] options
                             :if (or (in o _curl-uploads) (and (in o #("-X" "--request")) (_writes v)))
                             (if (in o _curl-uploads) o f"{o} {v}"))
                       None)
          urls (+ operands (lfor [o v] options :if (and (= o "--url") v) v)))
    (= name "wget")
    (setv upload (next (gfor [o v] options
                             :if (or (in o _wget-uploads) (and (= o "--method") (_writes v)))
                             (if (in o _wget-uploads) o f"{o}={v}"))
                       None)
          urls operands)
    True
    (do (setv method (when (and operands (re.fullmatch "[A-Z]+" (get operands 0)))
                       (get operands 0))
              rest (if method (cut operands 1 None) operands)
              urls (cut rest 0 1)
              upload (cond (_writes method) method
                           (any (gfor i (cut rest 1 None) (_httpie-data i))) "with data"
                           True None))))
  (_uses name (+ hosts (lfor w urls :setv h (_bare-host w) :if h h)) (bool upload)
         (if upload f"{name} {upload}" name)))

(setv _git-sub-values #{"-o" "--push-option" "--receive-pack" "--exec" "--upload-pack" "-b"
                        "--branch" "--depth" "--origin" "--template" "--reference" "-j" "--jobs"
                        "--filter" "--separate-git-dir" "--shallow-since" "--shallow-exclude"})

(defn _git-uses [args remotes]
  (setv i 0
        aliased-push False)
  (while (and (< i (len args)) (.startswith (get args i) "-"))
    (setv w (get args i))
    (+= i 1)
    (when (and (in w _git-values) (< i (len args)))
      (setv value (get args i))
      (+= i 1)
      (when (and (= w "-c") (_static value) (.startswith (.lower value) "alias.")
                 (re.search r"\b(push|send-email)\b" value))
        (setv aliased-push True))))
  (when (>= i (len args))
    (return []))
  (setv sub (get args i)
        [operands options] (_options (cut args (+ i 1) None) _git-sub-values)
        first (when operands (get operands 0)))
  (cond
    (and (= sub "remote") (>= (len operands) 3) (in first #("add" "set-url")))
    (do (setv h (_repo-host (get operands 2)))
        (when h (setv (get remotes (get operands 1)) h))
        [])
    (= sub "push")
    (do (setv repo (or (next (gfor [o v] options :if (= o "--repo") v) None) first)
              h (or (_repo-host (or repo "")) (.get remotes repo)))
        (if (or h (not (and repo (= i 0) (re.fullmatch r"[A-Za-z0-9_.-]{1,100}" repo))))
            (_uses "git" (if h [h] []) True "git push")
            [(+ (_use "git" None True "git push") [:remote repo])]))
    (= sub "send-email") (_uses "git" [] True "git send-email")
    (not (in sub GIT-REMOTE))
    (if aliased-push (_uses "git" [] True "git push (through an alias)") [])
    (= sub "submodule")
    (_uses "git" (lfor w (cut operands 1 None) :setv h (_repo-host w) :if h h) False "git submodule")
    True
    (do (setv h (when first (or (_repo-host first) (.get remotes first))))
        (_uses "git" (if h [h] []) False f"git {sub}"))))

(setv _scp-values (set (.split "-c -F -i -l -o -P -S -J -D -X"))
      _rsync-values (set (.split "-e --rsh --rsync-path --exclude --include --exclude-from
                                --include-from --filter -f --max-size --min-size --bwlimit --chmod
                                --log-file --backup-dir --suffix --timeout --out-format --link-dest
                                --compare-dest --copy-dest -T --temp-dir --port -B --block-size")))

(defn _ssh-uses [name args]
  (setv values (get {"ssh" _ssh-values "sftp" _scp-values "scp" _scp-values "rsync" _rsync-values} name)
        [operands _] (_options args values))
  (when (not operands)
    (return []))
  (if (in name #("ssh" "sftp"))
      (do (setv dest (get operands 0)
                found (when (_static dest) (split-host (get (.split dest "@") -1)))
                h (or (_repo-host dest :loose True)
                      (when found (host-text (get found 0) 22))))
          (_uses name (if h [h] []) True name))
      (do (setv last (_repo-host (get operands -1) :loose True)
                sources (lfor w (cut operands 0 -1) :setv h (_repo-host w :loose True) :if h h))
          (+ (if last (_uses name [last] True name) [])
             (_uses name sources False name)))))

(defn _publish-uses [name args]
  (setv [sub default] (.get PUBLISHERS name #(None None))
        [operands _] (_options args #{})
        yarn-npm (and (= name "yarn") (= (cut operands 0 2) ["npm" "publish"])))
  (if (and sub (or yarn-npm (= (cut operands 0 1) [sub])))
      (_uses name (or (cut (_words-hosts args) 0 1) (if default [default] [])) True f"{name} {sub}")
      []))

(defn _record-uses [rec remotes]
  (setv name (os.path.basename (or (get rec "name") ""))
        args (cut (get rec "argv") 1 None))
  (cond
    (or (get rec "launcher") (not name) (get rec "code")) []
    (= name "git") (_git-uses args remotes)
    (in name DOWNLOADERS) (_downloader-uses name args)
    (in name SSH-LIKE) (_ssh-uses name args)
    (in name TEXT-PROGRAMS) []
    True (+ (_publish-uses name args) (_uses name (_words-hosts args) False name))))

(defn [(lru-cache :maxsize 1024)] _command-uses [cmd]
  (setv remotes {}
        uses [])
  (try
    (setv records (get (analyse cmd) "commands"))
    (except [Exception]
      (return #())))
  (for [rec records
        u (_record-uses rec remotes)]
    (when (not (in u uses))
      (.append uses u)))
  (tuple uses))

(defn command-egress [cmd]
  "What the command line CMD will want to leave the box for, read before it runs:
   (:hosts HOSTS :uploads USES :uses USES), each use
   (:program P :host H :upload BOOL :how TEXT), H None when the line does not say.
   (command-egress \"git push https://github.com/a/b\")
   ⇒ (:hosts (\"github.com\") :uploads ((:program \"git\" :host \"github.com\" :upload True :how \"git push\")) …)"
  (setv uses (if (and (isinstance cmd str) (.strip cmd)) (list (_command-uses cmd)) []))
  [:hosts (list (dict.fromkeys (gfor u uses :if (proto-get u ':host) (proto-get u ':host))))
   :uploads (lfor u uses :if (proto-get u ':upload) u)
   :uses uses])

(defn _leaves [host]
  (setv found (when host (split-host host)))
  (not (and found (in-box-host (get found 0)))))

(defn _named-remote [use remotes]
  "USE with the host of the git remote it pushes to, when REMOTES knows it."
  (setv h (.get (or remotes {}) (proto-get use ':remote)))
  (if (and h (is (proto-get use ':host) None))
      (proto-put use ':host h)
      use))

(defn egress-asks [cmd allowed [remotes None]]
  "The uses of the command line CMD a person is asked about before it runs, given
   the allowed-host entries ALLOWED: every upload that leaves the box, and every
   host neither allowed nor kept in the box. REMOTES maps the workspace's git
   remotes to their hosts (=workspace-remotes=)."
  (lfor u (proto-get (command-egress cmd) ':uses)
        :setv u (_named-remote u remotes)
        :setv host (proto-get u ':host)
        :setv found (when host (split-host host))
        :if (if (proto-get u ':upload)
                (_leaves host)
                (and found (_leaves host)
                     (not (any (gfor e allowed (entry-covers e #* found))))))
        u))

(defn use-text [use]
  "A use as a person reads it: \"`git push` uploads to github.com\"."
  (setv host (proto-get use ':host)
        how (proto-get use ':how))
  (if (proto-get use ':upload)
      (if host
          f"`{how}` uploads to {host}"
          f"`{how}` uploads to a host the command line does not name")
      f"`{how}` reaches {host}, which is not an allowed host"))

(defn ask-pairs [asks]
  "The (program what) pairs the uses ASKS give a grant of their kind: the
   program with the host it uploads to or reaches."
  (sorted (sfor u asks
                #((proto-get u ':program)
                  (cond (not (proto-get u ':upload)) f"reaches {(proto-get u ':host)}"
                        (proto-get u ':host) f"uploads to {(proto-get u ':host)}"
                        True "uploads to a host the line does not name")))))

;; ** The remote a push names

(setv _section-re (re.compile #[re[\[\s*([A-Za-z0-9.-]+)(?:\s+"([^"\\]*)")?\s*\]\s*(?:[#;].*)?]re])
      _key-re (re.compile r"([A-Za-z][A-Za-z0-9-]*)\s*=\s*(.*)"))

(defn _plain-config [path]
  "The text of the git config file PATH when it can be read plainly, else None."
  (try
    (when (and (os.path.isfile path) (not (os.path.islink path)) (< (os.path.getsize path) 65536))
      (with [f (open path :encoding "utf-8")]
        (.read f)))
    (except [[OSError UnicodeDecodeError]] None)))

(defn _config-remotes [text]
  "{name host} of the remotes in the git config TEXT; {} when it rewrites URLs,
   includes other files or is not plainly written."
  (setv sections {}
        current None)
  (for [line (.splitlines text)]
    (setv l (.strip line))
    (cond
      (or (not l) (in (get l 0) "#;")) None
      (.endswith l "\\") (return {})
      (.startswith l "[")
      (do (setv m (.fullmatch _section-re l))
          (when (not m) (return {}))
          (setv [kind sub] (.groups m)
                kind (.lower kind))
          (when (or (.startswith kind "include") (.startswith kind "remote.")) (return {}))
          (setv current (when (and (= kind "remote") sub) sub)))
      True
      (do (setv m (.fullmatch _key-re l))
          (when (not m) (return {}))
          (setv key (.lower (.group m 1))
                value (.strip (get (re.split r"\s[#;]" (.group m 2) 1) 0)))
          (when (in key #("insteadof" "pushinsteadof")) (return {}))
          (when (and current (in key #("url" "pushurl")))
            (.append (.setdefault (.setdefault sections current {}) key []) value)))))
  (dfor [name keys] (.items sections)
        :setv urls (or (.get keys "pushurl") (.get keys "url") [])
        :setv h (when (and (= (len urls) 1) (not (re.search #[re["\\]]re] (get urls 0))))
                  (_repo-host (get urls 0)))
        :if h
        name h))

(defn workspace-remotes [workspace]
  "{name host} of the git remotes the configuration of the repository at the
   top of WORKSPACE names plainly (see =_config-remotes=), {} otherwise."
  (setv git (os.path.join (or workspace "") ".git"))
  (when (or (not workspace) (os.path.islink git) (not (os.path.isdir git)))
    (return {}))
  (setv text (_plain-config (os.path.join git "config")))
  (when (is text None)
    (return {}))
  (for [other ["/etc/gitconfig"]]
    (when (os.path.exists other)
      (setv t (_plain-config other))
      (when (or (is t None) (re.search r"(?i)insteadof|^\s*\[\s*include" t re.M))
        (return {}))))
  (_config-remotes text))

(defn _one-push [cmd]
  (try
    (setv a (analyse cmd))
    (except [Exception]
      (return False)))
  (setv recs (get a "commands"))
  (and (= (len recs) 1) (not (get a "assigns")) (not (get a "issues"))
       (= (os.path.basename (or (get (get recs 0) "name") "")) "git")))

(defn action-asks [action ctx]
  "egress-asks for the shell ACTION in CTX: the allowed hosts of its sandbox,
   and, with bubblewrap in force and a line that is one git push, the
   workspace's remotes."
  (setv cmd (proto-get action ':cmd)
        status (proto-get ctx ':sandbox)
        remotes (when (and (= (proto-get (or status []) ':kind) "bubblewrap")
                           (isinstance cmd str) (in "push" cmd) (_one-push cmd))
                  (workspace-remotes (proto-get ctx ':workspace))))
  (egress-asks cmd (allowed-hosts status) remotes))

;; * Inside the box

(setv RELAY-PERL #[[
my ($path, $port) = @ARGV;
socket(my $l, 2, 1, 0) or exit 1;
setsockopt($l, 1, 2, pack("i", 1));
bind($l, pack("S n C4 x8", 2, $port, 127, 0, 0, 1)) or exit 1;
listen($l, 64) or exit 1;
$SIG{CHLD} = "IGNORE";
my $pid = fork;
exit(defined $pid ? 0 : 1) if !defined $pid || $pid;
while (1) {
  accept(my $c, $l) or do { select(undef, undef, undef, 0.05); next };
  my $k = fork;
  if (defined $k && $k == 0) {
    close $l;
    socket(my $u, 1, 1, 0) or exit 1;
    connect($u, pack("S a*", 1, $path)) or exit 1;
    pump($c, $u);
    exit 0;
  }
  close $c;
}
sub pump {
  my @s = @_;
  my @fd = (fileno $s[0], fileno $s[1]);
  my @open = (1, 1);
  while ($open[0] || $open[1]) {
    my $rin = "";
    for my $i (0, 1) { vec($rin, $fd[$i], 1) = 1 if $open[$i] }
    my $n = select(my $r = $rin, undef, undef, undef);
    next if $n < 0 && $! == 4;
    return if $n < 0;
    for my $i (0, 1) {
      next unless $open[$i] && vec($r, $fd[$i], 1);
      my $got = sysread($s[$i], my $buf, 65536);
      if (!$got) { $open[$i] = 0; shutdown($s[1 - $i], 1); next }
      my $off = 0;
      while ($off < $got) {
        my $w = syswrite($s[1 - $i], $buf, $got - $off, $off);
        return unless $w;
        $off += $w;
      }
    }
  }
}
]]
      RELAY-PYTHON #[[
import os, select, signal, socket, sys
path, port = sys.argv[1], int(sys.argv[2])
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(64)
if os.fork():
    os._exit(0)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)

def pump(a, b):
    peer = {a: b, b: a}
    reading = [a, b]
    while reading:
        for s in select.select(reading, [], [])[0]:
            data = s.recv(65536)
            if data:
                peer[s].sendall(data)
            else:
                reading.remove(s)
                peer[s].shutdown(socket.SHUT_WR)

while True:
    try:
        conn, _ = listener.accept()
    except OSError:
        continue
    if os.fork() == 0:
        listener.close()
        try:
            up = socket.socket(socket.AF_UNIX)
            up.connect(path)
            pump(conn, up)
        finally:
            os._exit(0)
    conn.close()
]])

(defn find-relay []
  "The program that runs the relay inside the box, as [kind path] (kind
   \"perl\" or \"python\"), or None when the system has neither."
  (for [[kind name] [#("perl" "perl") #("python" "python3")]]
    (setv p (shutil.which name :path "/usr/bin:/bin"))
    (when p
      (return [kind p])))
  None)

(defn relay-argv [relay [socket BOX-SOCKET] [port PROXY-PORT]]
  "The command line that starts the relay RELAY ([kind path])."
  (setv [kind path] relay)
  (if (= kind "perl")
      [path "-e" RELAY-PERL socket (str port)]
      [path "-I" "-S" "-c" RELAY-PYTHON socket (str port)]))

(setv _holder "c=$1; shift; \"$@\" </dev/null >/dev/null 2>&1; exec /bin/sh -c \"$c\"")

(defn boxed-command [cmd relay]
  "The argv that runs the shell command CMD inside the box: through /bin/sh -c,
   after the relay RELAY ([kind path], or None for none) listens."
  (if relay
      ["/bin/sh" "-c" _holder "/bin/sh" cmd #* (relay-argv relay)]
      ["/bin/sh" "-c" cmd]))

(defn proxy-env [[port PROXY-PORT]]
  "The variables that send a box's HTTP(S) traffic to the relay on PORT."
  (setv url f"http://127.0.0.1:{port}"
        local "localhost,127.0.0.1,::1")
  (dict (+ (lfor k ["HTTP_PROXY" "HTTPS_PROXY" "ALL_PROXY"] x [#(k url) #((.lower k) url)] x)
           [#("NO_PROXY" local) #("no_proxy" local)])))

;; ** Lines that never go out

(setv LOCAL-PROGRAMS #{"echo" "printf" "grep" "egrep" "fgrep" "sed" "awk" "gawk" "mawk" "tr"
                       "cut" "sort" "uniq" "wc" "head" "tail" "cat" "tac" "column" "fold" "fmt"
                       "nl" "paste" "join" "expand" "unexpand" "rev" "jq" "test" "[" "[[" "true"
                       "false" ":" "cd" "pwd" "export" "read" "printenv" "basename" "dirname"
                       "realpath" "readlink" "stat" "ls" "file" "touch" "mkdir" "rmdir" "rm" "cp"
                       "mv" "ln" "chmod" "diff" "cmp" "comm" "tee" "seq" "date" "du" "df" "expr"
                       "md5sum" "sha1sum" "sha256sum" "sha512sum" "b2sum" "cksum" "base64" "od"
                       "xxd" "hexdump" "strings" "sleep" "tree" "patch" "split" "csplit" "truncate"})

(defn [(lru-cache :maxsize 1024)] _local-only [cmd]
  (try
    (setv a (analyse cmd))
    (except [Exception]
      (return False)))
  (and (get a "commands")
       (not (or (get a "issues") (get a "overflow") (get a "too-large") (get a "stopped")))
       (all (gfor rec (get a "commands")
                  (and (not (get rec "launcher")) (not (get rec "code"))
                       (in (os.path.basename (or (get rec "name") "")) LOCAL-PROGRAMS))))))

(defn may-reach-network [cmd]
  "False when the command line CMD is made only of programs that never reach the
   network (LOCAL-PROGRAMS), so its box needs no way out; True otherwise.
   (may-reach-network \"ls -la | grep x > out\") ⇒ False"
  (not (and (isinstance cmd str) (.strip cmd) (_local-only cmd))))
