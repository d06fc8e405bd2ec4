;; The symbolic provider: commands, tool results, refusals and help.

(import passepartout.symbolic [symbolic-complete symbolic-action HELP-TEXT]
        passepartout.proto [proto-read proto-print proto-get])

(defn user-says [text [rejections None]]
  [:messages []
   :tools None
   :signal [:type :event :source [:gateway :terminal :chat 1]
            :payload [:sensor :user-input :text text]]
   :rejections (or rejections [])])

(defn tool-result [action result]
  [:messages []
   :signal [:type :event :source [:gateway :terminal :chat 1]
            :payload [:sensor :tool-result :action action :result result]]
   :rejections []])

(defn answer [request]
  "The action of symbolic-complete, read back from its text as the reason stage would."
  (setv r (symbolic-complete request))
  (assert (= (proto-get r ':status) ':ok) f"status: {r}")
  (assert (= (proto-get r ':provider) "symbolic") f"provider: {r}")
  (proto-read (proto-get r ':text)))

(defn message-text [request]
  (setv action (answer request))
  (assert (= (proto-get action ':action) ':message) f"not a message: {action}")
  (proto-get action ':text))

;; * Commands

(defn test-shell-command []
  (setv a (answer (user-says "  !ls -la ~/notes ")))
  (assert (= a [:action :shell :cmd "ls -la ~/notes" :explanation "the person asked to run this command"])
          f"got {a}"))

(defn test-read []
  (setv a (answer (user-says "read notes/list.txt")))
  (assert (= (proto-get a ':action) ':read-file) f"got {a}")
  (assert (= (proto-get a ':path) "notes/list.txt") f"got {a}")
  (assert (proto-get a ':explanation) f"no explanation: {a}")
  (setv quoted (answer (user-says "READ \"my notes.txt\"")))
  (assert (= (proto-get quoted ':path) "my notes.txt") f"got {quoted}"))

(defn test-write-keeps-the-content-exactly []
  (setv a (answer (user-says "write out/a.txt\nfirst line\n  indented\n")))
  (assert (= (proto-get a ':action) ':write-file) f"got {a}")
  (assert (= (proto-get a ':path) "out/a.txt") f"got {a}")
  (assert (= (proto-get a ':content) "first line\n  indented\n") f"got {a}")
  (assert (proto-get a ':explanation) f"no explanation: {a}"))

(defn test-write-without-content-explains-itself []
  (setv text (message-text (user-says "write out/a.txt")))
  (assert (in "write notes.txt" text) f"got {text}")
  (assert (in "lines after" text) f"got {text}"))

(defn test-remember-and-recall []
  (setv a (answer (user-says "remember the boiler code is 4521")))
  (assert (= a [:action :memory-add :text "the boiler code is 4521"
                :explanation "the person asked to remember this"]) f"got {a}")
  (setv b (answer (user-says "recall boiler")))
  (assert (= (proto-get b ':action) ':memory-search) f"got {b}")
  (assert (= (proto-get b ':query) "boiler") f"got {b}"))

(defn test-commands-without-arguments-ask-for-them []
  (for [[text expected] [["read" "read PATH"] ["remember" "remember TEXT"]
                         ["recall   " "recall QUERY"] ["!" "after the !"]]]
    (setv reply (message-text (user-says text)))
    (assert (in expected reply) f"{text !r} answered {reply !r}")))

;; * Help

(defn test-help-lists-commands-and-configuration []
  (for [text ["help" "/help" "HELP"]]
    (setv reply (message-text (user-says text)))
    (assert (= reply HELP-TEXT) f"{text !r} answered {reply !r}"))
  (for [needle ["!COMMAND" "read PATH" "write PATH" "remember TEXT" "recall QUERY"
                "PASSEPARTOUT_MODELS=openai/gpt-4o-mini" "OPENAI_API_KEY"
                "[[providers]]" "~/.config/passepartout/config.toml"]]
    (assert (in needle HELP-TEXT) f"help lacks {needle}")))

(defn test-anything-else-gets-the-help []
  (for [request [(user-says "what's the weather like?") (user-says "") [] None
                 [:signal [:type :event :payload [:sensor :user-input]]]]]
    (setv reply (message-text request))
    (assert (.endswith reply HELP-TEXT) f"{request !r} answered {reply !r}")))

;; * As the fallback

(defn test-the-fallback-says-so-and-names-the-reason-once []
  (setv why "model m refused the key (401: bad key)"
        untold (message-text (+ (user-says "hello")
                                [:fallback [:told [] :untold [why] :kinds ["http-401"]]]))
        told (message-text (+ (user-says "help") [:fallback [:told [why] :untold [] :kinds ["http-401"]]])))
  (assert (.startswith untold (+ "I could not read that as a command.\n"
                                 "I am the built-in fallback, not a language model: " why ".\n"))
          f"untold: {untold !r}")
  (assert (= (.count untold "refused the key") 1) f"the reason once: {untold !r}")
  (assert (.startswith told "I am the built-in fallback, not a language model (why is said just above).")
          f"told: {told !r}")
  (assert (not (in "refused the key" told)) f"told just above, not again: {told !r}")
  (for [text [untold told]]
    (assert (and (in "!COMMAND" text) (in "passepartout doctor" text) (not (in "PASSEPARTOUT_MODELS" text)))
            f"a configured model failed: the commands and doctor, not the setup: {text !r}")))

(defn test-the-fallback-with-no-model-set-up-says-how []
  (setv text (message-text (+ (user-says "help")
                              [:fallback [:told [] :untold ["model o is not running: nothing listens"]
                                          :kinds ["unreachable" "no-key"]]])))
  (assert (in "PASSEPARTOUT_MODELS=openai/gpt-4o-mini" text) f"setup: {text !r}")
  (assert (in "not a language model: model o is not running" text) f"why: {text !r}"))

(defn test-the-fallback-runs-commands-without-a-word []
  (setv a (answer (+ (user-says "!ls") [:fallback [:told ["model m answered nothing"] :untold [] :kinds ["empty"]]])))
  (assert (= a [:action :shell :cmd "ls" :explanation "the person asked to run this command"]) f"got {a}"))

;; * Tool results

(defn test-shell-output []
  (setv text (message-text (tool-result [:action :shell :cmd "ls"]
                                        [:status :ok :output "a.txt\nb.txt\n" :exit 0])))
  (assert (= text "$ ls\na.txt\nb.txt\n") f"got {text !r}")
  (setv failed (message-text (tool-result [:action :shell :cmd "false"] [:status :ok :output "" :exit 1])))
  (assert (= failed "$ false\n(no output)\n(exit status 1)") f"got {failed !r}"))

(defn test-file-content-and-write []
  (setv text (message-text (tool-result [:action :read-file :path "notes.txt"]
                                        [:status :ok :content "milk\neggs"])))
  (assert (= text "notes.txt:\nmilk\neggs") f"got {text !r}")
  (setv wrote (message-text (tool-result [:action :write-file :path "a.txt" :content "hi"]
                                         [:status :ok :bytes 2])))
  (assert (= wrote "Wrote a.txt (2 bytes).") f"got {wrote !r}"))

(defn test-search-hits []
  (setv text (message-text (tool-result [:action :memory-search :query "boiler"]
                                        [:status :ok :hits [[:id 3 :text "the boiler code is 4521"]
                                                            "boiler serviced in May"]])))
  (assert (= text "Found 2 for \"boiler\":\n1. the boiler code is 4521\n2. boiler serviced in May")
          f"got {text !r}")
  (setv none (message-text (tool-result [:action :memory-search :query "yacht"] [:status :ok :hits []])))
  (assert (= none "Nothing in memory matches \"yacht\".") f"got {none !r}"))

(defn test-errors-are-said []
  (setv text (message-text (tool-result [:action :read-file :path "/etc/nope"]
                                        [:status :error :error "no such file"])))
  (assert (= text "Could not read /etc/nope: no such file") f"got {text !r}")
  (setv shell (message-text (tool-result [:action :shell :cmd "make"]
                                         [:status :error :output "make: *** No targets." :exit 2])))
  (assert (= shell "`make` failed with exit status 2:\nmake: *** No targets.") f"got {shell !r}")
  (setv late (message-text (tool-result [:action :shell :cmd "sleep 99"]
                                        [:status :error :output "started\n" :exit -9 :timed-out True
                                         :error "timed out after 30 s; the command and its children were killed"])))
  (assert (= late "`sleep 99` timed out after 30 s; the command and its children were killed:\nstarted")
          f"got {late !r}"))

(defn test-long-output-is-cut []
  (setv text (message-text (tool-result [:action :shell :cmd "yes"]
                                        [:status :ok :output (* "y\n" 5000) :exit 0])))
  (assert (< (len text) 3200) f"{(len text)} characters")
  (assert (in "more characters)" text) f"got tail {(cut text -60 None) !r}"))

(defn test-other-results-are-said-without-a-plist []
  (setv text (message-text (tool-result [:action :spawn :objective "tidy"] [:status :ok :session 7])))
  (assert (= text "Done: do the spawn action.") f"got {text !r}"))

(defn test-a-tool-result-is-never-a-command []
  (setv action (answer (tool-result [:action :shell :cmd "echo !rm"] [:status :ok :output "!rm -rf /" :exit 0])))
  (assert (= (proto-get action ':action) ':message) f"got {action}"))

;; * Refusals

(defn test-rejections-are-explained-not-repeated []
  (setv refused [:action :shell :cmd "rm -rf /" :explanation "the person asked to run this command"]
        trace [:gate "shell-safety" :reason "deletes outside the workspace" :action refused]
        text (message-text (user-says "!rm -rf /" [trace trace])))
  (assert (.startswith text "I did not run `rm -rf /`: the gates refused it.\n") f"got {text !r}")
  (assert (= (.count text "rm -rf") 1) f"repeated: {text !r}")
  (assert (not (in "deletes outside" text)) f"the gate's reason, shown in the decision line, said again: {text !r}"))

(defn test-every-refusal-is-listed []
  (setv text (message-text (user-says "read /etc/shadow"
                                      [[:gate :workspace :reason "outside the workspace"
                                        :action [:action :read-file :path "/etc/shadow"]]
                                       [:gate "secrets" :reason "a secret location"
                                        :action [:action :read-file :path "~/.ssh/id_ed25519"]]])))
  (assert (in "I did not read /etc/shadow: the gates refused it." text) f"got {text !r}")
  (assert (in "I did not read ~/.ssh/id_ed25519: the gates refused it." text) f"got {text !r}"))

;; * The answer is a cascade result whose text is a plist

(defn test-result-shape-and-round-trip []
  (for [text ["!echo \"quoted\" \\ back" "write a.txt\n(:not \"a form\")\n" "remember ünïcödé ✓" "help"]]
    (setv r (symbolic-complete (user-says text))
          action (proto-read (proto-get r ':text)))
    (assert (= (proto-print action) (proto-get r ':text)) f"round trip of {text !r}")
    (assert (= (proto-get r ':tool-calls) []) f"got {r}")
    (assert (= (proto-get r ':usage) [:prompt-tokens 0 :completion-tokens 0 :cost 0.0]) f"got {r}")
    (assert (= (symbolic-action (user-says text)) action) f"symbolic-action differs for {text !r}")))

(defn test-a-chat-service-user-is-not-shown-the-operators-details []
  (setv request (+ [:messages [] :tools None
                    :signal [:type :event :source [:gateway :telegram :chat 1 :user 2]
                             :payload [:sensor :chat-message :text "hello"]]
                    :rejections []]
                   [:fallback [:told [] :untold ["model o is not running: nothing listens at 127.0.0.1:11434"]
                               :kinds ["unreachable"]]])
        text (message-text request))
  (for [detail ["127.0.0.1" "PASSEPARTOUT_MODELS" "OPENAI_API_KEY" "config.toml"]]
    (assert (not (in detail text)) f"{detail} shown to a chat user: {text !r}"))
  (assert (and (in "!COMMAND" text) (in "runs this assistant" text)) text))

(defn test-the-fallback-gives-its-commands-once-per-incident []
  (setv later (message-text (+ (user-says "hello")
                               [:fallback [:told [] :untold ["model m refused the key"] :kinds ["http-401"]
                                           :fresh False]])))
  (assert (in "`help`" later) f"a pointer to help: {later}")
  (assert (not (in "remember TEXT" later)) f"no block of commands again: {later}")
  (assert (= (len (.splitlines later)) 1) f"one line: {later}"))

(defn test-list-the-files-is-understood []
  (for [text ["list the files" "ls" "list" "show files"]]
    (setv a (symbolic-action (user-says text)))
    (assert (= (proto-get a ':cmd) "ls -la") f"{text}: {a}")))
