;; Tests for passepartout/secrets.hy and the secret bouncer skill
;; (skills/secret_bouncer.hy): the gate, the result filter, and the corpora.

(import base64 glob json random re string subprocess sys time uuid
        urllib.parse [quote :as url-quote]
        pathlib [Path]
        pytest
        passepartout.act [act :as act-async]
        passepartout.context [make-context]
        passepartout.proto [proto-get proto-put proto-read]
        passepartout.runner [Stops]
        passepartout.secrets [encoded-text find-secrets looks-random ordinary-variable redact-text
                              redact-value secret-tuple]
        passepartout.skills [Registry get-skill load-skill-file]
        steps [run])

(setv ROOT (. (Path __file__) parent parent)
      SKILLS (/ ROOT "skills")
      CASES (/ ROOT "tests" "fixtures" "secret-cases.jsonl")
      CORPORA (sorted (.glob (/ ROOT "tests" "data" "corpora") "*.jsonl"))
      OWN "correct-horse-battery")

;; * Fixtures

(defn [pytest.fixture] skills []
  "A registry of the test's own holding the secret bouncer and the message and
   shell actuators."
  (setv reg (Registry))
  (for [f ["secret_bouncer.hy" "message.hy" "shell.hy"]]
    (setv loaded (load-skill-file reg (/ SKILLS f) :builtin True))
    (assert (is (proto-get loaded ':error) None) f"loading {f} failed: {loaded}"))
  reg)

(defn [pytest.fixture] registry [skills]
  "The secret bouncer skill."
  (get-skill skills "secret-bouncer"))

(defn [pytest.fixture] tree [tmp-path skills]
  "A workspace, a folder outside it, a scratch temp folder, and a context that
   holds one secret of its own (and the skills, for act)."
  (setv ws (/ tmp-path "ws")
        outside (/ tmp-path "outside")
        scratch (/ tmp-path "scratch"))
  (for [d [ws outside scratch]] (.mkdir d))
  (setv ctx (proto-put (make-context :workspace (str ws) :secrets [OWN] :skills skills :stops (Stops))
                       ':temp-dirs [(str (.resolve scratch))]))
  {"ws" (str (.resolve ws)) "outside" (str (.resolve outside))
   "scratch" (str (.resolve scratch)) "ctx" ctx})

(defn gate-of [skill] (get skill "gate"))

(defn verdict-of [skill action ctx]
  (setv v ((gate-of skill) action ctx))
  #((. (proto-get v ':verdict) name) (proto-get v ':reason)))

(defn refused [skill action ctx [secret None] [kind None] [field None]]
  "The reason SKILL's gate gives for refusing ACTION, checked not to echo SECRET."
  (setv [v reason] (verdict-of skill action ctx))
  (assert (= v "reject") f"expected a reject for {action}, got {v}: {reason}")
  (assert (and (isinstance reason str) reason) f"no reason for {action}")
  (when secret
    (assert (not (in secret reason)) f"the reason echoes the secret: {reason}")
    (assert (not (in (cut secret 6) reason)) f"the reason echoes the start of the secret: {reason}"))
  (when kind
    (assert (in kind reason) f"the reason should name {kind !r}: {reason}"))
  (when field
    (assert (in f":{field}" reason) f"the reason should name the field :{field}: {reason}"))
  reason)

(defn allowed [skill action ctx]
  (setv [v reason] (verdict-of skill action ctx))
  (assert (= v "allow") f"expected allow for {action}, got {v}: {reason}"))

;; * Test data: templates filled with seeded random characters
;;
;; The cases file holds templates, never a literal key: {alnum:36} is 36
;; random letters and digits, {hex:40} forty hex digits, and so on. Each case
;; is filled with several seeds, so the detectors are judged on keys they
;; have never seen.

(setv ALPHABETS {"b64" (+ string.ascii-letters string.digits "+/")
                 "alnum" (+ string.ascii-letters string.digits)
                 "urlsafe" (+ string.ascii-letters string.digits "-_")
                 "hex" "0123456789abcdef"
                 "lowerhex" "0123456789abcdef"
                 "HEX" "0123456789ABCDEF"
                 "upper" (+ string.ascii-uppercase string.digits)
                 "lower" (+ string.ascii-lowercase string.digits)
                 "digits" string.digits
                 "letters" string.ascii-letters}
      WORDS ["report" "backup" "invoice" "project" "notes" "alpha" "summer" "garden"
             "station" "network" "module" "config" "window" "service" "handler"
             "reader" "payment" "customer" "archive" "release" "photos" "kitchen"]
      _placeholder-re (re.compile r"\{([A-Za-z0-9]+)(?::(\d+))?\}"))

(defn expand [template rng]
  "TEMPLATE with its placeholders filled from RNG; {{ and }} are literal braces."
  (defn fill [m]
    (setv name (.group m 1)
          n (int (or (.group m 2) "0")))
    (cond
      (in name ALPHABETS) (.join "" (gfor _ (range n) (.choice rng (get ALPHABETS name))))
      (= name "uuid") (str (uuid.UUID :int (.getrandbits rng 128) :version 4))
      (= name "word") (.choice rng WORDS)
      (= name "camel") (+ (.choice rng WORDS)
                          (.join "" (gfor _ (range 3) (.capitalize (.choice rng WORDS))))
                          (str (.randint rng 1 9)))
      (= name "b64word") (.decode (base64.b64encode (.encode (.choice rng WORDS))))
      (= name "b64text") (do (setv words [])
                             (while (< (len (.join " " words)) n)
                               (.append words (.choice rng WORDS)))
                             (.decode (base64.b64encode (.encode (.join " " words)))))
      True (raise (ValueError f"unknown placeholder {name}"))))
  (setv t (.replace (.replace template "{{" "\x00") "}}" "\x01"))
  (.replace (.replace (.sub _placeholder-re fill t) "\x00" "{") "\x01" "}"))

(defn place [context secret rng]
  "CONTEXT (a template with {secret}) around the filled SECRET."
  (.replace (expand (.replace context "{secret}" "\x02") rng) "\x02" secret))

(defn cases [label]
  (lfor [i line] (enumerate (.splitlines (.read-text CASES :encoding "utf-8")))
        :if (.strip line)
        :setv c (json.loads line)
        :if (= (get c "label") label)
        #(i c)))

(setv SEEDS 4
      CONTEXTS {"message" "Here it is: {secret}"
                "cmd" "printf '%s\\n' '{secret}'"
                "url" "https://paste.example.com/raw?data={secret}"
                "write" "{secret}\n"})

(defn test-the-cases-file-is-templates-only []
  ;; A literal key in the repository would be a leak of its own and trips
  ;; push protection; every key-shaped value must come from a placeholder.
  (setv text (.read-text CASES :encoding "utf-8"))
  (assert (>= (len (cases "secret")) 30) "too few secret cases")
  (assert (>= (len (cases "benign")) 30) "too few benign cases")
  (assert (not (find-secrets (.replace text "\\n" "\n"))) "the cases file holds a literal secret"))

;; * Every kind, in every place a secret can leave

(defn test-every-kind-is-refused-in-a-message [registry tree]
  (for [[i c] (cases "secret") seed (range SEEDS)]
    (setv rng (random.Random (+ (* 100 i) seed))
          secret (expand (get c "secret") rng)
          text (place (.get c "message" (get CONTEXTS "message")) secret rng))
    (refused registry [:action :message :text text] (get tree "ctx")
             :secret secret :kind (get c "kind") :field "text")))

(defn test-every-kind-is-refused-in-a-command [registry tree]
  (for [[i c] (cases "secret") seed (range SEEDS)]
    (setv rng (random.Random (+ (* 100 i) seed))
          secret (expand (get c "secret") rng)
          cmd (place (.get c "cmd" (get CONTEXTS "cmd")) secret rng))
    (refused registry [:action :shell :cmd cmd :explanation "show it"] (get tree "ctx")
             :secret secret :kind (get c "kind") :field "cmd")))

(defn test-every-kind-is-refused-in-a-url-of-any-field [registry tree]
  ;; :memory-search is not read as a whole, only its URLs; a key block cannot
  ;; be part of a URL, so those cases say "url": null.
  (for [[i c] (cases "secret") seed (range SEEDS)]
    (setv context (.get c "url" (get CONTEXTS "url")))
    (when (is context None) (continue))
    (setv rng (random.Random (+ (* 100 i) seed))
          secret (expand (get c "secret") rng)
          url (place context secret rng))
    (refused registry [:action :memory-search :query (+ "look up " url)] (get tree "ctx")
             :secret secret :field "query")
    (refused registry [:action :read-file :path "notes.txt" :explanation (+ "from " url)]
             (get tree "ctx") :secret secret :field "explanation")))

(defn test-every-kind-is-refused-in-a-write-outside-the-workspace [registry tree]
  (for [[i c] (cases "secret") seed (range SEEDS)
        folder [(get tree "outside") (get tree "scratch")]]
    (setv rng (random.Random (+ (* 100 i) seed))
          secret (expand (get c "secret") rng)
          content (place (.get c "write" (get CONTEXTS "write")) secret rng))
    (refused registry [:action :write-file :path f"{folder}/notes.txt" :content content
                       :explanation "keep it"]
             (get tree "ctx") :secret secret :kind (get c "kind") :field "content")))

(defn test-a-key-written-inside-the-workspace-is-the-persons-business [registry tree]
  (setv rng (random.Random 7)
        ctx (get tree "ctx")
        key (expand "ghp_{alnum:36}" rng))
  (allowed registry [:action :write-file :path ".env" :content f"GITHUB_TOKEN={key}\n"
                     :explanation "save the token"] ctx)
  (allowed registry [:action :write-file :path f"{(get tree "ws")}/sub/keys.txt" :content key
                     :explanation "save"] ctx)
  ;; climbing out with .. is outside, whatever the path starts with
  (refused registry [:action :write-file :path "sub/../../outside/k.txt" :content key
                     :explanation "save"] ctx :secret key :kind "GitHub token")
  None)

(defn test-several-fields-and-kinds-are-named-together [registry tree]
  (setv rng (random.Random 11)
        gh (expand "ghp_{alnum:36}" rng)
        aws (expand "AKIA{upper:16}" rng)
        reason (refused registry [:action :shell :cmd f"echo {gh} {aws}"
                                  :explanation f"see https://x:{OWN}@example.com"]
                        (get tree "ctx") :secret gh))
  (for [word ["GitHub token" "AWS access key id" ":cmd" ":explanation" "the daemon's own secret"]]
    (assert (in word reason) f"the reason should mention {word !r}: {reason}"))
  (assert (not (in aws reason)) reason)
  (assert (not (in OWN reason)) reason))

;; * Things that look like secrets and are not

(defn test-benign-look-alikes-pass [registry tree]
  (setv ctx (get tree "ctx"))
  (for [[i c] (cases "benign") seed (range 8)]
    (setv text (expand (get c "text") (random.Random (+ (* 100 i) seed))))
    (if (= (get c "where") "cmd")
        (allowed registry [:action :shell :cmd text :explanation "look"] ctx)
        (allowed registry [:action :message :text text] ctx))))

(defn test-random-keys-are-found-and-generated-names-are-not []
  ;; The bare-token test on strings it was not tuned on: random keys of the
  ;; usual alphabets and lengths, and generated paths, identifiers and UUIDs.
  (setv rng (random.Random 2024)
        missed {})
  ;; 98 % at least, and 94 % for one letter case and digits, the weak spot
  ;; (see the org file for the rates measured on 3 000 of each)
  (for [[alphabet n least] [["b64" 40 294] ["alnum" 32 294] ["urlsafe" 43 294] ["hex" 40 294]
                            ["hex" 64 294] ["alnum" 48 294] ["lower" 40 282] ["upper" 40 282]]]
    (setv tokens (lfor _ (range 300) (expand (+ "{" alphabet ":" (str n) "}") rng))
          found (sum (gfor t tokens (bool (find-secrets (+ "value " t))))))
    (when (< found least)
      (setv (get missed f"{alphabet}:{n}") found)))
  (assert (not missed) f"random keys found too rarely (of 300): {missed}")
  (for [_ (range 300)]
    (for [template ["/home/{word}/{word}2024/{word}_{word}/{word}-{word}-{word}/{camel}"
                    "{camel}{camel}" "{uuid}" "src/main/java/com/{word}/{word}/{camel}Impl"
                    "{word}-{word}-{word}-{lowerhex:10}-{lower:5}"
                    "{word}_{word}_{word}_{word}_v2_{digits:8}"]]
      (setv text (expand template rng))
      (assert (not (find-secrets text)) f"a generated name was taken for a secret: {text}"))))

(defn test-looks-random-and-encoded-text-directly []
  (assert (looks-random "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"))
  (for [s ["home/user1/data1/2012/mainDir" "AbstractSingletonProxyFactoryBean2"
           "K8sClusterAutoscalerV2Beta1Config" "python3-software-properties-common-2"
           "550e8400-e29b-41d4-a716-446655440000" "0000000000000000000000000000000000000000"
           "1234567890abcdef1234567890abcdef" "MAX_RETRY_COUNT_FOR_HTTP2_CONNECTIONS"]]
    (assert (not (looks-random s)) f"{s} should not look random"))
  (assert (= (encoded-text (.decode (base64.b64encode b"a sentence long enough to be a message"))) "base64"))
  (assert (= (encoded-text (.hex b"a sentence long enough to be a message")) "hex"))
  (assert (is (encoded-text "aGVsbG8gd29ybGQ=") None) "short base64 of a word is not a secret"))

;; * The daemon's own secrets

(defn test-own-secrets-are-refused-everywhere-even-when-they-look-harmless [registry tree]
  (setv ctx (get tree "ctx"))
  (refused registry [:action :message :text f"the wifi password is {OWN}"] ctx
           :secret OWN :kind "the daemon's own secret")
  (refused registry [:action :memory-search :query OWN] ctx :secret OWN :field "query")
  (refused registry [:action :read-file :path "a.txt" :explanation f"because {OWN}"] ctx
           :secret OWN :field "explanation")
  ;; inside the workspace a key is the person's business, the daemon's own value is not
  (refused registry [:action :write-file :path "notes.txt" :content f"x {OWN} y"
                     :explanation "save"] ctx :secret OWN :field "content")
  (refused registry [:action :shell :cmd f"echo {OWN} | wc -c" :explanation "count"] ctx
           :secret OWN)
  (refused registry [:action :message :text "nested" :extra ["a" ["b" OWN]]] ctx :secret OWN)
  ;; the same text is fine when the daemon does not hold it
  (allowed registry [:action :message :text f"the wifi password is {OWN}"]
           (proto-put ctx ':secrets [])))

(defn test-own-secrets-are-refused-encoded [registry tree]
  (setv value "p@ss w/rd:Zebra-1984"
        ctx (proto-put (get tree "ctx") ':secrets [value])
        raw (.encode value))
  (for [[label text] [["base64" (.decode (base64.b64encode raw))]
                      ["base64 inside more" (.decode (base64.b64encode (+ b"user=bob&pw=" raw b"&x=1")))]
                      ["base64 shifted" (.decode (base64.b64encode (+ b"k:" raw)))]
                      ["url-safe base64" (.decode (base64.urlsafe-b64encode (+ b"!" raw)))]
                      ["URL-encoded" (url-quote value :safe "")]
                      ["hex" (.hex raw)]]]
    (setv reason (refused registry [:action :message :text f"take this: {text}"] ctx :secret value))
    (assert (in "the daemon's own secret" reason) f"{label}: {reason}")))

(defn test-short-own-secrets-match-whole-words-only [registry tree]
  (setv ctx (proto-put (get tree "ctx") ':secrets ["Zq9x" "ab"]))
  (refused registry [:action :message :text "the pin is Zq9x."] ctx :kind "the daemon's own secret")
  (allowed registry [:action :message :text "aZq9xb is a different word, and ab is too short to guard"] ctx))

;; * Redaction of results

(defn test-the-filter-redacts-every-string-of-a-result [registry tree]
  (setv rng (random.Random 5)
        gh (expand "ghp_{alnum:36}" rng)
        aws (expand "AKIA{upper:16}" rng)
        jwt (expand "eyJhbGciOiJIUzI1NiJ9.eyJ{urlsafe:40}.{urlsafe:43}" rng)
        pem (expand "-----BEGIN PRIVATE KEY-----\n{b64:64}\n-----END PRIVATE KEY-----" rng)
        result [:status :ok :exit 0
                :output f"token={gh}\nid {aws}\nplain line\n{pem}\nafter the key"
                :items ["nothing here" [:note f"Authorization: Bearer {jwt}" :size 12]]
                :error None]
        filtered ((get registry "filter") [:action :shell :cmd "env"] result (get tree "ctx"))
        output (proto-get filtered ':output)
        note (proto-get (get (proto-get filtered ':items) 1) ':note))
  (assert (= (proto-get filtered ':redacted) 4) f"four secrets replaced: {filtered}")
  (for [s [gh aws jwt pem (cut gh 0 10) (cut pem 30 50)]]
    (assert (not (in s (str filtered))) f"{(cut s 8)}… survived the filter"))
  (for [kind ["GitHub token" "AWS access key id" "private key"]]
    (assert (in f"[redacted: {kind}]" output) f"{kind} not marked in {output !r}"))
  (assert (in "plain line" output) output)
  (assert (in "after the key" output) output)
  (assert (.startswith note "Authorization: Bearer [redacted: ") note)
  (assert (= (proto-get filtered ':exit) 0))
  (assert (= (proto-get filtered ':status) ':ok))
  (assert (= (proto-get (get (proto-get filtered ':items) 1) ':size) 12))
  (assert (= (get (proto-get filtered ':items) 0) "nothing here"))
  ;; the input is not changed
  (assert (in gh (proto-get result ':output)) "the filter mutated its input"))

(defn test-the-filter-leaves-clean-results-alone-and-counts-on [registry tree]
  (setv f (get registry "filter")
        clean [:status :ok :output "commit 3f1e2d4c5b6a798897a6b5c4d3e2f1a0b9c8d7e6\nAuthor: bob"])
  (assert (is (f [:action :shell :cmd "git log -1"] clean (get tree "ctx")) clean)
          "a clean result should come back as it was")
  (setv again (f [:action :shell :cmd "x"] [:status :ok :output f"pw {OWN}" :redacted 2]
                 (get tree "ctx")))
  (assert (= (proto-get again ':redacted) 3) f"counts add up: {again}")
  (assert (= (proto-get again ':output) "pw [redacted: the daemon's own secret]") again))

(defn test-act-redacts-shell-output-before-the-model-sees-it [registry tree]
  ;; A real command prints a key; the result that act returns has it blanked.
  (setv rng (random.Random 9)
        head "ghp_"
        body (expand "{alnum:36}" rng)
        result (run (act-async [:action :shell :cmd f"printf '%s%s\\n' '{head}' '{body}'" :explanation "show"]
                               (get tree "ctx"))))
  (assert (= (proto-get result ':status) ':ok) f"{result}")
  (assert (not (in body (proto-get result ':output))) (proto-get result ':output))
  (assert (in "[redacted: GitHub token]" (proto-get result ':output)) (proto-get result ':output))
  (assert (= (proto-get result ':redacted) 1) f"{result}"))

(defn test-redact-text-and-value []
  (setv [text n] (redact-text "user AKIAIOSFODNN7EXAMPLE and https://bob:hunter2hunter@example.com/x"))
  (assert (= n 2) text)
  (assert (= text "user [redacted: AWS access key id] and https://bob:[redacted: password in a URL]@example.com/x") text)
  (setv [v n] (redact-value [:a 1 :b ["x" OWN] :c None] (secret-tuple [OWN])))
  (assert (= n 1) f"{v}")
  (assert (= (get v 3 1) "[redacted: the daemon's own secret]") f"{v}")
  (assert (= (redact-value [:a 1] #()) #([:a 1] 0))))

;; * Odd input never breaks the gate

(defn test-odd-input [registry tree]
  (setv ctx (get tree "ctx"))
  (for [text ["" "\x00\x00" (* "a" 1000000) (* "Zx9+" 50000) (* "(:" 10000)
              (+ "-----BEGIN RSA PRIVATE KEY-----" (* "\n" 1000))]]
    (setv [v reason] (verdict-of registry [:action :message :text text] ctx))
    (assert (in v #("allow" "reject")) f"{v} {reason}"))
  (allowed registry [:action :message :text "hi" :count 3 :flag True :nothing None :kw :x] ctx)
  (allowed registry [:action :write-file :path 42 :content "x" :explanation "save"] ctx)
  (allowed registry [:action :message :text "hi"] (proto-put ctx ':secrets None)))

;; * The corpora

(defn test-corpora [registry tmp-path]
  ;; Every line of every corpus through this gate alone. Every secret message
  ;; must be stopped; lines that may run must (almost) never be.
  (setv ctx (make-context :workspace (str tmp-path) :secrets [OWN])
        gate (gate-of registry)
        times []
        stats {})
  (for [path CORPORA
        line (.splitlines (.read-text (Path path) :encoding "utf-8"))]
    (when (not (.strip line)) (continue))
    (setv d (json.loads line)
          action (proto-get (proto-read (get d "proposal")) ':payload)
          started (time.perf-counter)
          v (gate action ctx))
    (.append times (- (time.perf-counter) started))
    (setv key #((. (Path path) name) (get d "label"))
          [n stopped] (.get stats key #(0 0))
          (get stats key) #((+ n 1) (+ stopped (= (proto-get v ':verdict) ':reject))))
    (when (= (. (Path path) name) "secret-messages.jsonl")
      (assert (= (proto-get v ':verdict) ':reject) f"not stopped: {(get d "proposal")}")))
  (setv may-run (sum (gfor [k [n s]] (.items stats) :if (= (get k 1) "may-run") n))
        false-stops (sum (gfor [k [n s]] (.items stats) :if (= (get k 1) "may-run") s))
        rate (/ false-stops (max 1 may-run))
        times (sorted times))
  (for [[k [n s]] (sorted (.items stats))]
    (print f"{(get k 0)} {(get k 1)}: {s} of {n} stopped by the secret bouncer"))
  (print f"may-run falsely stopped: {false-stops} of {may-run} ({(* 100 rate) :.2f} %)")
  (print f"gate latency per proposal: p50 {(* 1e6 (get times (// (len times) 2))) :.0f} µs,"
         f"p99 {(* 1e6 (get times (int (* 0.99 (len times))))) :.0f} µs")
  (assert (>= may-run 1500) f"the corpora look incomplete: {may-run} may-run lines")
  (assert (<= rate 0.005) f"false-stop rate {rate :.4f} is above 0.5 %"))

;; * Import cost

(defn test-importing-the-detector-pulls-in-nothing-heavy []
  ;; verify starts cold on every call; the detector must not bring a library
  ;; with it (detect-secrets' plugins import requests, about 0.2 s).
  (setv out (subprocess.run
              [sys.executable "-c"
               "import hy, sys, passepartout.secrets; print(' '.join(m for m in ('requests', 'detect_secrets', 'litellm') if m in sys.modules))"]
              :capture-output True :text True :cwd (str ROOT)))
  (assert (= out.returncode 0) out.stderr)
  (assert (= (.strip out.stdout) "") f"imported: {out.stdout}"))


(defn test-ordinary-variables []
  "The shell's own and a system's ordinary variables say what they hold; any
   other name of the environment may hold a key, whatever it says."
  (for [n ["HOME" "PATH" "LANG" "LC_ALL" "XDG_CONFIG_HOME" "1" "@" "RANDOM" "file" "dir"]]
    (assert (ordinary-variable n) f"{n} is ordinary"))
  (for [n ["DATABASE_URL" "SENTRY_DSN" "MY_BOT" "GITHUB_TOKEN" "https_proxy" "ALL_PROXY"]]
    (assert (not (ordinary-variable n)) f"{n} may hold a key")))
