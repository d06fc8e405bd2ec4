;; * Why

"A shell action's box lets out only what the policy (egress.org) or a person
allows, and a person can allow only what they are asked about. This module
reads a command line before it runs: the hosts its commands name, the commands
that upload, the remote a push goes to; and from that, what the egress gate
asks a person about, with the host named."

(import functools [lru-cache]
        os re
        passepartout.proto [proto-get proto-put]
        passepartout.shell.walk [analyse]
        passepartout.shell.parse [CACHE-SIZE]
        passepartout.egress [READ-METHODS allowed-hosts entry-covers host-text in-box-host split-host])

(setv _program-key ':program _host-key ':host _upload-key ':upload _how-key ':how
      _remote-key ':remote _hosts-key ':hosts _uploads-key ':uploads _uses-key ':uses
      _cmd-key ':cmd _sandbox-key ':sandbox _kind-key ':kind _workspace-key ':workspace)

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
  [_program-key program _host-key host _upload-key upload _how-key how])

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
            [(+ (_use "git" None True "git push") [_remote-key repo])]))
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

(defn [(lru-cache :maxsize CACHE-SIZE)] _command-uses [cmd]
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
  (setv uses (_uses-of cmd))
  [_hosts-key (list (dict.fromkeys (gfor u uses :if (proto-get u _host-key) (proto-get u _host-key))))
   _uploads-key (lfor u uses :if (proto-get u _upload-key) u)
   _uses-key uses])

(defn _uses-of [cmd]
  (if (and (isinstance cmd str) (.strip cmd)) (list (_command-uses cmd)) []))

(defn _leaves [host]
  (setv found (when host (split-host host)))
  (not (and found (in-box-host (get found 0)))))

(defn _named-remote [use remotes]
  "USE with the host of the git remote it pushes to, when REMOTES knows it."
  (setv h (.get (or remotes {}) (proto-get use _remote-key)))
  (if (and h (is (proto-get use _host-key) None))
      (proto-put use _host-key h)
      use))

(defn egress-asks [cmd allowed [remotes None]]
  "The uses of the command line CMD a person is asked about before it runs, given
   the allowed-host entries ALLOWED: every upload that leaves the box, and every
   host neither allowed nor kept in the box. REMOTES maps the workspace's git
   remotes to their hosts (=workspace-remotes=)."
  (lfor u (_uses-of cmd)
        :setv u (_named-remote u remotes)
        :setv host (proto-get u _host-key)
        :setv found (when host (split-host host))
        :if (if (proto-get u _upload-key)
                (_leaves host)
                (and found (_leaves host)
                     (not (any (gfor e allowed (entry-covers e #* found))))))
        u))

(defn use-text [use]
  "A use as a person reads it: \"`git push` uploads to github.com\"."
  (setv host (proto-get use _host-key)
        how (proto-get use _how-key))
  (if (proto-get use _upload-key)
      (if host
          f"`{how}` uploads to {host}"
          f"`{how}` uploads to a host the command line does not name")
      f"`{how}` reaches {host}, which is not an allowed host"))

(defn ask-pairs [asks]
  "The (program what) pairs the uses ASKS give a grant of their kind: the
   program with the host it uploads to or reaches."
  (sorted (sfor u asks
                #((proto-get u _program-key)
                  (cond (not (proto-get u _upload-key)) f"reaches {(proto-get u _host-key)}"
                        (proto-get u _host-key) f"uploads to {(proto-get u _host-key)}"
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
  (setv cmd (proto-get action _cmd-key))
  ;; A line that names no host and uploads nothing has nothing to ask about:
  ;; neither the allowed hosts nor the remotes are read for it.
  (when (not (_uses-of cmd))
    (return []))
  (setv status (proto-get ctx _sandbox-key)
        remotes (when (and (= (proto-get (or status []) _kind-key) "bubblewrap")
                           (isinstance cmd str) (in "push" cmd) (_one-push cmd))
                  (workspace-remotes (proto-get ctx _workspace-key))))
  (egress-asks cmd (allowed-hosts status) remotes))
