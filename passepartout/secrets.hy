;; * Why

"The daemon holds keys (a provider's API key, a bot token) and works beside
files that hold more. A model can be talked into repeating one: a message that
quotes a .env file, a curl command with a token pasted in, a URL with a
password, a note sent to long-term memory. The secret bouncer
(skills/secret_bouncer.hy, at the end of secrets.org) refuses such proposals,
and blanks secrets out of tool output before the model reads it. This module is
the part that looks at text: pure functions, no I/O, nothing that depends on
the time or the machine."

(import base64 binascii math re
        collections [Counter]
        functools [lru-cache]
        urllib.parse [quote :as url-quote quote-plus])

;; * Provider rules

(defn _rule [kind words pattern [group 0] [check None] [flags 0]]
  {"kind" kind "words" words "pattern" pattern "flags" flags "group" group "check" check})

(defn _mixed [s]
  "True when S holds at least two of lower-case letters, upper-case letters and
   digits, and is not mostly one repeated character (=sk-test-0000…=)."
  (and (>= (+ (any (gfor c s (.islower c))) (any (gfor c s (.isupper c)))
              (any (gfor c s (.isdigit c))))
           2)
       (>= (len (set s)) 10)))

(setv _start "(?<![A-Za-z0-9_-])")

(setv RULES
  [(_rule "private key" ["private key"]
          #[re[-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----(?=(?:[^-]|-(?!----END)){0,400}?[A-Za-z0-9+/=]{40})(?:.*?-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----|.*)]re]
          0 None re.S)
   (_rule "private key" ["putty-user-key-file"]
          #[re[PuTTY-User-Key-File-\d+:.*?(?:Private-MAC: *[0-9a-fA-F]+|\Z)]re] 0 None re.S)
   (_rule "Anthropic API key" ["sk-ant-"] (+ _start #[re[sk-ant-[A-Za-z0-9_-]{20,}]re]))
   (_rule "OpenRouter API key" ["sk-or-"] (+ _start #[re[sk-or-v1-[0-9a-f]{64}]re]))
   (_rule "OpenAI API key" ["sk-"]
          (+ _start #[re[sk-(?:proj-|svcacct-|admin-)?([A-Za-z0-9_-]{20,})]re]) 0
          (fn [m] (_mixed (.group m 1))))
   (_rule "GitHub token" ["ghp_" "gho_" "ghu_" "ghs_" "ghr_"]
          (+ _start #[re[gh[pousr]_[A-Za-z0-9]{36,}]re]))
   (_rule "GitHub token" ["github_pat_"] (+ _start #[re[github_pat_[A-Za-z0-9_]{60,}]re]))
   (_rule "GitLab token" ["glpat-"] (+ _start #[re[glpat-[A-Za-z0-9_-]{20,}]re]))
   (_rule "Slack token" ["xox" "xapp-"] (+ _start #[re[(?:xox[abposre]|xapp)-[A-Za-z0-9-]{10,}]re]))
   (_rule "Slack webhook" ["hooks.slack.com"]
          #[re[hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+]re])
   (_rule "Stripe key" ["_live_" "_test_" "whsec_"]
          (+ _start #[re[(?:(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}|whsec_[A-Za-z0-9]{24,})]re]))
   (_rule "Google API key" ["aiza"] (+ _start #[re[AIza[0-9A-Za-z_-]{35}]re]))
   (_rule "Google OAuth secret" ["gocspx-" "ya29."]
          (+ _start #[re[(?:GOCSPX-[A-Za-z0-9_-]{28}|ya29\.[0-9A-Za-z_-]{30,})]re]))
   (_rule "Telegram bot token" [":"]
          #[re[(?<![0-9])[0-9]{6,12}:[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])]re] 0
          (fn [m] (_mixed (cut (.group m 0) (+ (.index (.group m 0) ":") 1) None))))
   (_rule "AWS access key id" ["akia" "asia" "abia" "acca" "a3t"]
          #[re[(?<![A-Z0-9])(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Z0-9])]re])
   (_rule "AWS secret access key" ["aws"]
          #[re[(?i)aws.{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?['"]([0-9a-zA-Z/+]{40})['"]]re] 1)
   (_rule "JSON web token" ["eyj"]
          (+ _start #[re[eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*]re]))
   (_rule "Hugging Face token" ["hf_"] (+ _start #[re[hf_[A-Za-z]{34}(?![A-Za-z0-9])]re]))
   (_rule "npm token" ["npm_"] (+ _start #[re[npm_[A-Za-z0-9]{36}]re]))
   (_rule "PyPI token" ["pypi-"] (+ _start #[re[pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}]re]))
   (_rule "SendGrid API key" ["sg."] (+ _start #[re[SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}]re]))
   (_rule "Groq API key" ["gsk_"] (+ _start #[re[gsk_[A-Za-z0-9]{48,}]re]))
   (_rule "xAI API key" ["xai-"] (+ _start #[re[xai-[A-Za-z0-9]{60,}]re]))
   (_rule "Azure storage key" ["accountkey="] #[re[AccountKey=([A-Za-z0-9+/]{86}==)]re] 1)
   (_rule "age secret key" ["age-secret-key-1"] #[re[AGE-SECRET-KEY-1[0-9A-Z]{58}]re])])

(setv _rule-words (sorted (sfor r RULES w (get r "words") w))
      _rules-by-word (dfor w _rule-words
                           w (lfor [i r] (enumerate RULES) :if (in w (get r "words")) i)))

(defn _rule-findings [text lowered]
  (setv out [])
  (for [i (sorted (sfor w _rule-words :if (in w lowered) i (get _rules-by-word w) i))]
    (setv rule (get RULES i))
    (for [m (re.finditer (get rule "pattern") text (get rule "flags"))]
      (when (or (is (get rule "check") None) ((get rule "check") m))
        (setv g (get rule "group"))
        (.append out #((.start m g) (.end m g) (get rule "kind"))))))
  out)

;; * Does a token look random?

(setv _c-log-c (lfor c (range 1025) (if c (* c (math.log2 c)) 0.0)))

(defn entropy [s]
  "The Shannon entropy of S, in bits per character."
  (setv n (len s))
  (cond (= n 0) 0.0
        (<= n 1024) (- (math.log2 n) (/ (sum (map _c-log-c.__getitem__ (.values (Counter s)))) n))
        True (- (math.log2 n) (/ (sum (gfor c (.values (Counter s)) (* c (math.log2 c)))) n))))

(defn [(lru-cache :maxsize 4096)] expected-entropy [n k]
  "The mean entropy of N characters drawn at random from an alphabet of K."
  (when (> n 256)
    (return (- (math.log2 k) (/ (- k 1) (* 2 n (math.log 2))))))
  (setv p (/ 1 k)
        odds (/ p (- 1 p))
        pmf (** (- 1 p) n)
        total 0.0)
  (for [x (range 1 (+ n 1))]
    (setv pmf (* pmf (/ (+ (- n x) 1) x) odds))
    (+= total (* pmf (/ x n) (math.log2 (/ x n)))))
  (* (- k) total))

(setv _class-table (dfor i (range 128)
                         i (cond (.islower (chr i)) "a" (.isupper (chr i)) "A"
                                 (.isdigit (chr i)) "0" True " "))
      _non-class-re (re.compile "[^aA0]")
      _run-re (re.compile "a+|A+|0+"))

(defn _classes [token]
  (.sub _non-class-re " " (.translate token _class-table)))

(defn _mixing [classes]
  "The share of neighbouring letter or digit pairs that change class, from CLASSES (see _classes)."
  (setv segments (.split classes)
        pairs (- (sum (map len segments)) (len segments))
        changes (- (len (.findall _run-re classes)) (len segments)))
  (if (> pairs 0) (/ changes pairs) 0.0))

(setv _word-re (re.compile r"[A-Z]?[a-z]{4,}|[A-Z]{5,}")
      _separator-re (re.compile r"[-_/+]")
      _hex-re (re.compile r"[0-9a-fA-F]+\Z")
      RANDOM-MARGIN 0.45)

(defn _wordiness [token]
  (/ (sum (gfor w (.findall _word-re token) (len w))) (len token)))

(defn _random-enough [token k]
  (>= (entropy token) (- (expected-entropy (len token) k) RANDOM-MARGIN)))

(defn looks-random [token]
  "True when TOKEN reads as random characters (a key) rather than words, a
   path, an identifier or a number.
   (looks-random \"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\") ⇒ True
   (looks-random \"home/user1/data1/2012/mainDir\") ⇒ False"
  (setv n (len token))
  (when (or (< n 24) (< (len (set (cut token 256))) 10)) (return False))
  (setv classes (_classes token)
        lower (.count classes "a")
        upper (.count classes "A")
        digits (.count classes "0"))
  (cond
    (.match _hex-re token)
    (and (>= n 32) (< 0 digits n)
         (>= (_mixing classes) 0.2)
         (_random-enough token 16))
    (and lower upper)
    (do (setv mixing (_mixing classes)
              longest (max (.split _separator-re token) :key len))
        (and (>= mixing 0.3)
             (or digits (>= mixing 0.45))
             (< (_wordiness token) 0.55)
             (or (= longest token)
                 (and (>= (len longest) 12) (>= (_mixing (_classes longest)) 0.2)))
             (_random-enough token (if (< (+ lower upper digits) n) 64 62))))
    (and digits (or lower upper))
    (if (.search _separator-re token)
        (any (gfor part (.split _separator-re token) (looks-random part)))
        (and (>= n 32) (>= (* 10 digits) n)
             (>= (_mixing classes) 0.25)
             (_random-enough token 36)))
    True False))

;; * Encoded text

(setv _printable (bytes (+ [9 10 13] (list (range 32 127)))))

(defn _text-bytes [data]
  (and (>= (len data) 24)
       (<= (* 20 (len (.translate data None _printable))) (len data))))

(defn encoded-text [token]
  "\"base64\" or \"hex\" when TOKEN is an encoding of at least 24 bytes of text, else None."
  (setv core (.rstrip token "="))
  (when (or (< (len core) 32) (< (len (set (cut core 256))) 12)) (return None))
  (when (and (.match _hex-re core) (= (% (len core) 2) 0))
    (return (when (_text-bytes (bytes.fromhex core)) "hex")))
  (when (= (% (len core) 4) 1) (return None))
  (setv padded (+ core (* "=" (% (- (len core)) 4))))
  (try
    (setv data (if (or (in "-" core) (in "_" core))
                   (base64.urlsafe-b64decode padded)
                   (base64.b64decode padded :validate True)))
    (except [[binascii.Error ValueError]] (return None)))
  (when (_text-bytes data) "base64"))

;; * Bare tokens

(setv _token-re (re.compile r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{24,}={0,2}(?![A-Za-z0-9+/_=-])")
      _digest-word-re (re.compile
                        #[re[(?i)(?<![a-z])(?:md5|sha(?:-?(?:1|2|3|224|256|384|512))?|[a-z0-9]*sum|hash(?:es|ed)?|digests?|checksums?|fingerprints?|integrity|etags?|crc32|blake2[bs]?|signatures?|ssh-(?:rsa|dss|ed25519|ed448)|ecdsa-sha2-nistp\d+|public[ _-]?keys?|pubkey)(?![a-z])]re])
      _vcs-word-re (re.compile
                     #[re[(?i)(?<![a-z])(?:commits?|committed|parents?|git|hg|svn|rev(?:ision)?s?|objects?|blobs?|trees?|refs?|images?|containers?|docker|podman|layers?|uuids?|guids?|builds?|changesets?|merged?|tags?|branch(?:es)?|cherry-pick|revert(?:ed)?|bisect|head)(?![a-z])]re])
      _field-before-re (re.compile #[re[([A-Za-z0-9_-]+)["']?[ \t]*[:=][ \t]*["']?\Z]re]))

(defn _id-field [prefix]
  "True when PREFIX ends with the name of an identifier field and its
   separator (id, request_id, toolUseId). Session ids are secrets."
  (setv m (.search _field-before-re prefix))
  (when (not m) (return False))
  (setv name (.group m 1))
  (and (not (in "session" (.lower name)))
       (or (in (.lower name) #("id" "ids"))
           (re.match r".*[_-](?:id|ID|Id)s?\Z" name)
           (re.match r".*[a-z0-9](?:Id|ID)s?\Z" name))))

(setv _hex-run-re (re.compile r"(?<![0-9A-Za-z])[0-9a-fA-F]{32,}(?![0-9A-Za-z])"))

(defn _digest-context [text start end hex]
  "True when the line of TEXT around START..END says the token is a digest or a public key."
  (setv line-start (+ (.rfind text "\n" 0 start) 1)
        line-end (.find text "\n" end)
        line (cut text line-start (if (< line-end 0) (len text) line-end)))
  (or (.search _digest-word-re line)
      (and hex (.search _vcs-word-re line))
      (_id-field (cut text (max line-start (- start 60)) start))
      (and hex (= (.strip (cut text line-start start)) "")
           (.startswith (cut text end (+ end 2)) "  "))))

(defn _bare-findings [text]
  (setv out [])
  (for [m (.finditer _token-re text)]
    (setv core (.rstrip (.group m 0) "=")
          encoded (encoded-text core)
          hex (bool (.search _hex-run-re core))
          kind (cond encoded f"{encoded}-encoded text"
                     (looks-random core) (if (.match _hex-re core) "high-entropy hex string" "high-entropy string")
                     True None))
    (when (and kind (not encoded) (_digest-context text (.start m) (.end m) hex))
      (setv kind None))
    (when kind
      (.append out #((.start m) (.end m) kind))))
  out)

;; * Key and value

(setv _password-name-re (re.compile #[re[(?:passw(?:or)?d|passphrase|pwd)(?:[_.-]?(?:confirm(?:ation)?|again|\d))?$|[^a-z]pass$]re])
      _credential-name-re (re.compile #[re[(?:secret|token|credentials?|(?:api|access|private|auth|secret)[_.-]?key|apikey|authkey|client[_.-]?secret|authorization|bearer)\d?$]re])
      _key-name-re (re.compile #[re[(?:^|[^a-z])key$]re])
      _name-word-re (re.compile "passw|passphrase|secret|token|key|credential")
      _reference-re (re.compile #[re[[$%{<@\[!&*]|.*(?:\$\{|\$\(|\$[A-Z_][A-Z0-9_]+\b|<[^<>\s]+>|\{\{|\{[A-Za-z0-9_.:-]*\}|\(|environ|getenv|process\.env|secrets\.)|[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+\Z|[A-Z][A-Z0-9_]*\Z]re])
      _mask-re (re.compile #[re[\*{3,}|x{4,}|X{4,}|\.\.\.|…]re])
      _path-re (re.compile #[re[[~.]{0,2}/[^\s/]+(?:/[^\s/]*)*\Z]re])
      _placeholder-re (re.compile #[re[(?i)(?:(.)\1*|your[_-].*|.*[_-]here|changeme|change[_-]me|example.*|sample.*|dummy|placeholder|redacted|none|null|nil|true|false|undefined|required|optional|secret|password|passwd|pass|pwd|token|api[_-]?key|x+|\*+)\Z]re]))

(defn name-strength [name [separator "="]]
  "\"password\", \"credential\", \"key\" or None: what the field NAME promises.
   A bare =pass= is a password only when assigned (=pass=…=), not in prose (=pass: …=)."
  (setv name (.lower name))
  (cond (or (.search _password-name-re name) (and (= name "pass") (= separator "=")))
        "password"
        (.search _credential-name-re name) "credential"
        (.search _key-name-re name) "key"
        True None))

(defn secret-variable [name]
  "True when the environment variable NAME holds a secret by its name: a
   password or a credential (=GITHUB_TOKEN=, =AWS_SECRET_ACCESS_KEY=,
   =PGPASSWORD=, =OPENAI_API_KEY=), not a bare key (=SORT_KEY=) nor the
   shell's folder (=PWD=, =OLDPWD=).
   (secret-variable \"GITHUB_TOKEN\") ⇒ True"
  (and (isinstance name str)
       (not (in name #("PWD" "OLDPWD")))
       (in (name-strength name "=") #("password" "credential"))))

(setv ORDINARY-VARIABLES
      #{"HOME" "PATH" "PWD" "OLDPWD" "USER" "LOGNAME" "USERNAME" "SHELL" "TERM" "LANG" "LANGUAGE"
        "TZ" "TMPDIR" "TMP" "TEMP" "EDITOR" "VISUAL" "PAGER" "MANPATH" "INFOPATH" "HOSTNAME"
        "HOSTTYPE" "OSTYPE" "MACHTYPE" "SHLVL" "UID" "EUID" "PPID" "GROUPS" "RANDOM" "SRANDOM"
        "SECONDS" "EPOCHSECONDS" "EPOCHREALTIME" "LINENO" "FUNCNAME" "PIPESTATUS" "REPLY"
        "OPTARG" "OPTIND" "OPTERR" "IFS" "PS1" "PS2" "PS3" "PS4" "COLUMNS" "LINES" "DIRSTACK"
        "SHELLOPTS" "BASHOPTS" "BASHPID" "DISPLAY" "WAYLAND_DISPLAY" "COLORTERM" "TERM_PROGRAM"
        "NO_COLOR" "CI" "VIRTUAL_ENV" "CONDA_PREFIX" "CONDA_DEFAULT_ENV" "GOPATH" "GOROOT"
        "GOBIN" "JAVA_HOME" "CARGO_HOME" "RUSTUP_HOME" "NVM_DIR" "PYENV_ROOT" "NODE_ENV"
        "PYTHONPATH" "PYTHONHOME" "LD_LIBRARY_PATH" "PKG_CONFIG_PATH" "CC" "CXX" "CFLAGS"
        "CXXFLAGS" "CPPFLAGS" "LDFLAGS" "MAKEFLAGS" "HISTFILE" "HISTSIZE" "HISTFILESIZE"
        "MAIL" "MAILPATH" "SSH_TTY" "TERMINFO" "CDPATH"})

(defn ordinary-variable [name]
  "True when the variable NAME is the shell's own (=$1=, =$?=, =$RANDOM=) or an
   ordinary one of a system (=HOME=, =LANG=, =LC_ALL=, =XDG_CONFIG_HOME=).
   (ordinary-variable \"LC_ALL\") ⇒ True"
  (and (isinstance name str)
       (or (not (re.fullmatch r"[A-Za-z_][A-Za-z0-9_]*" name))
           (in name ORDINARY-VARIABLES)
           (.startswith name #("LC_" "XDG_" "BASH_" "BASH" "COMP_" "HIST"))
           (and (!= name (.upper name)) (not (.endswith (.lower name) "_proxy"))))))

(defn _variety [v]
  (+ (any (gfor c v (.islower c)))
     (any (gfor c (cut v 1 None) (.isupper c)))
     (any (gfor c v (.isdigit c)))
     (any (gfor c v (not (or (.isalnum c) (in c "-_. ")))))))

(defn secret-value [value strength]
  "True when VALUE, found after a name of STRENGTH (see name-strength, or
   \"url\" for a URL's password), is a literal secret rather than a reference,
   a placeholder or an ordinary word."
  (setv v (.rstrip value ".,;:!?)=")
        n (len v))
  (cond
    (or (< n (if (= strength "url") 4 6))
        (.match _reference-re v) (.match _placeholder-re v)
        (>= (max (.values (Counter v))) (* 0.6 n))
        (.search _mask-re v)) False
    (and (!= strength "url")
         (or (.match _path-re v)
             (and (.search _name-word-re (.lower v)) (re.search "[-_ ]" v)))) False
    (and (= strength "credential") (re.search r"\s" v)) False
    (= strength "key") (looks-random v)
    (= strength "url") True
    (.isdigit v) (= strength "password")
    (= strength "password") (or (>= (_variety v) 2) (>= n 10))
    True (or (looks-random v)
             (and (>= n 8) (any (gfor c v (.isalpha c)))
                  (any (gfor c v (not (.isalpha c))))
                  (>= (_variety v) 2)))))

(setv _kv-words #("pass" "pwd" "secret" "token" "key" "auth" "credential" "sig" "bearer")
      _kv-re (re.compile
               #[re[(?<![A-Za-z0-9_])([A-Za-z0-9_.-]*(?:pass|pwd|secret|token|key|auth|credential|sig)[A-Za-z0-9_.-]*)["'\]]{0,2}[ \t]*(:=|=>|=|:)[ \t]*(?:(["'`])([^"'`\n]{1,256}?)\3|([^\s"'`,;&|)(<>\[\]{}]+))]re]
               re.I)
      _flag-re (re.compile
                 #[re[(?<![A-Za-z0-9_-])--?([A-Za-z0-9][A-Za-z0-9_-]*)([ \t]+)(?:(["'])([^"'\n]{1,256}?)\3|([^\s"'`;&|)(<>\[\]{}]+))]re])
      _user-flag-re (re.compile
                      #[re[(?<![A-Za-z0-9_-])(?:-u|--user)[ \t]+(["']?)[^\s:"'@]+:([^\s"']+)\1]re])
      _bearer-re (re.compile #[re[\bbearer[ \t]+([A-Za-z0-9._~+/-]{16,}=*)]re] re.I)
      _basic-re (re.compile #[re[\bauthorization["']?[ \t]*[:=][ \t]*["']?basic[ \t]+([A-Za-z0-9+/]{8,}={0,2})]re] re.I))

(setv _snake-re (re.compile r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+\Z")
      _camel-re (re.compile r"_*[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*\Z"))

(defn _value-span [m]
  (if (is (.group m 4) None) #((.start m 5) (.end m 5)) #((.start m 4) (.end m 4))))

(defn _code-value [text m a b]
  "True when the unquoted value at A..B of the match M is code: a call, an
   attribute or an index (=password = get_password()=), a snake_case name,
   or a class name after a colon (=token: AccessToken=, a type annotation)."
  (setv value (cut text a b))
  (and (is (.group m 4) None)
       (or (in (cut text b (+ b 1)) #("(" "." "[" "<" "{" "$"))
           (.match _snake-re value)
           (and (= (.group m 2) ":") (.match _camel-re value)))))

(defn _kv-findings [text lowered]
  (setv out [])
  (when (or (in "-u " text) (in "--user" text))
    (for [m (.finditer _user-flag-re text)]
      (when (secret-value (.group m 2) "password")
        (.append out #((.start m 2) (.end m 2) "password")))))
  (when (not (any (gfor w _kv-words (in w lowered))))
    (return out))
  (when (in "bearer" lowered)
    (for [m (.finditer _bearer-re text)]
      (when (secret-value (.group m 1) "credential")
        (.append out #((.start m 1) (.end m 1) "bearer token")))))
  (when (in "basic" lowered)
    (for [m (.finditer _basic-re text)]
      (.append out #((.start m 1) (.end m 1) "basic auth credentials"))))
  (for [pattern [_kv-re _flag-re]
        m (.finditer pattern text)]
    (setv strength (name-strength (.group m 1) (.strip (.group m 2))))
    (when strength
      (setv [a b] (_value-span m))
      (when (and (not (_code-value text m a b)) (secret-value (cut text a b) strength))
        (.append out #(a b (if (= strength "password") "password" "credential value"))))))
  out)

;; * URLs

(setv _url-re (re.compile #[re[\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s"'<>`]+]re])
      _url-password-re (re.compile #[re[\b[A-Za-z][A-Za-z0-9+.-]{1,20}://([^\s:/?#@"'<>]+):([^\s/?#@"'<>]+)@]re])
      _url-token-re (re.compile #[re[\b[A-Za-z][A-Za-z0-9+.-]{1,20}://([A-Za-z0-9_-]{24,})@]re]))

(defn _url-findings [text]
  (setv out [])
  (when (in "://" text)
    (for [m (.finditer _url-password-re text)]
      (when (secret-value (.group m 2) "url")
        (.append out #((.start m 2) (.end m 2) "password in a URL"))))
    (for [m (.finditer _url-token-re text)]
      (when (looks-random (.group m 1))
        (.append out #((.start m 1) (.end m 1) "token in a URL")))))
  out)

;; * The daemon's own secrets

(setv OWN-KIND "the daemon's own secret"
      _short-secret 8
      _tiny-secret 4)

(defn [(lru-cache :maxsize 64)] _usable [secrets]
  (tuple (sorted (sfor s secrets :if (and (isinstance s str) (>= (len s) _tiny-secret)) s)
                 :key (fn [s] #((- (len s)) s)))))

(defn secret-tuple [secrets]
  "The usable secret values of SECRETS (a list from the context), as a tuple, longest first."
  (if secrets (_usable (tuple secrets)) #()))

(defn _base64-cores [raw]
  "The parts of every base64 text that holds the bytes RAW, whatever their alignment."
  (setv out [])
  (for [shift (range 3)]
    (setv enc (.rstrip (.decode (base64.b64encode (+ (* b"\x00" shift) raw)) "ascii") "=")
          core (cut enc (math.ceil (/ (* 8 shift) 6)) (// (* 8 (+ shift (len raw))) 6)))
    (when (>= (len core) 8)
      (for [c [core (.translate core (str.maketrans "+/" "-_"))]]
        (when (not (in c out)) (.append out c)))))
  out)

(defn [(lru-cache :maxsize 64)] _needles [secrets]
  "For the tuple SECRETS: the (needle kind) pairs to look for, and a regex for short values."
  (setv pairs []
        short [])
  (for [s secrets]
    (if (< (len s) _short-secret)
        (.append short (re.escape s))
        (do
          (.append pairs #(s OWN-KIND))
          (setv raw (.encode s "utf-8"))
          (for [core (_base64-cores raw)]
            (.append pairs #(core f"{OWN-KIND}, base64-encoded")))
          (for [q [(url-quote s :safe "") (quote-plus s :safe "")]]
            (when (!= q s)
              (for [variant [q (re.sub "%[0-9A-F]{2}" (fn [m] (.lower (.group m 0))) q)]]
                (.append pairs #(variant f"{OWN-KIND}, URL-encoded")))))
          (for [h [(.hex raw) (.upper (.hex raw))]]
            (.append pairs #(h f"{OWN-KIND}, hex-encoded"))))))
  #((list (dict.fromkeys pairs))
    (when short
      (re.compile (+ "(?<![A-Za-z0-9])(?:" (.join "|" short) ")(?![A-Za-z0-9])")))))

(defn own-secret-findings [text secrets]
  "Where the values of SECRETS appear in TEXT. SECRETS is best the tuple of
   secret-tuple; any other sequence (the context's list) is made into one."
  (setv out [])
  (when (not secrets) (return out))
  (when (not (isinstance secrets tuple))
    (setv secrets (secret-tuple secrets)))
  (setv [pairs short] (_needles secrets))
  (for [[needle kind] pairs]
    (setv i (.find text needle))
    (while (>= i 0)
      (.append out #(i (+ i (len needle)) kind))
      (setv i (.find text needle (+ i (len needle))))))
  (when short
    (for [m (.finditer short text)]
      (.append out #((.start m) (.end m) OWN-KIND))))
  out)

;; * Finding and redacting

(defn _merge [findings]
  "FINDINGS without overlaps, sorted by start; an overlap keeps the kind of the first found."
  (setv kept [])
  (for [[a b kind] findings]
    (setv joined False)
    (for [[i [ka kb kk]] (enumerate kept)]
      (when (and (< a kb) (< ka b))
        (setv (get kept i) #((min a ka) (max b kb) kk)
              joined True)
        (break)))
    (when (not joined) (.append kept #(a b kind))))
  (setv kept (sorted kept)
        out [])
  (for [[a b kind] kept]
    (if (and out (< a (get out -1 1)))
        (setv (get out -1) #((get out -1 0) (max b (get out -1 1)) (get out -1 2)))
        (.append out #(a b kind))))
  out)

(defn find-secrets [text [secrets #()]]
  "Every secret in TEXT as #(start end kind), merged and sorted. SECRETS is a
   tuple from secret-tuple: the daemon's own values.
   (find-secrets \"key AKIAIOSFODNN7EXAMPLE\") ⇒ [#(4 24 \"AWS access key id\")]"
  (when (not (and (isinstance text str) text))
    (return []))
  (setv lowered (.lower text))
  (_merge (+ (own-secret-findings text secrets)
             (_rule-findings text lowered)
             (_url-findings text)
             (_kv-findings text lowered)
             (_bare-findings text))))

(defn find-in-urls [text [secrets #()]]
  "The secrets inside the URLs of TEXT, with offsets in TEXT."
  (setv out [])
  (when (and (isinstance text str) (in "://" text))
    (for [m (.finditer _url-re text)]
      (for [[a b kind] (find-secrets (.group m 0) secrets)]
        (.append out #((+ a (.start m)) (+ b (.start m)) kind)))))
  (_merge out))

(defn secret-kinds [findings]
  "The distinct kinds of FINDINGS, in order of first appearance."
  (list (dict.fromkeys (gfor f findings (get f 2)))))

(defn redact-text [text [secrets #()]]
  "#(TEXT-with-secrets-replaced count)."
  (setv findings (find-secrets text secrets))
  (when (not findings)
    (return #(text 0)))
  (setv parts []
        at 0)
  (for [[a b kind] findings]
    (.append parts (cut text at a))
    (.append parts f"[redacted: {kind}]")
    (setv at b))
  (.append parts (cut text at None))
  #((.join "" parts) (len findings)))

(defn redact-value [value [secrets #()]]
  "#(VALUE-with-every-string-redacted count): strings anywhere in nested lists
   and plists are redacted; keywords and other values are kept."
  (cond
    (isinstance value str) (redact-text value secrets)
    (isinstance value list)
    (do (setv out [] total 0)
        (for [v value]
          (setv [new n] (redact-value v secrets))
          (.append out new)
          (+= total n))
        (if total #(out total) #(value 0)))
    True #(value 0)))
