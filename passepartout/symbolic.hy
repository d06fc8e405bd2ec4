;; * Why

"Passepartout must answer on a machine with no configuration, no API key and no
local model. The symbolic provider is the last rung of the cascade: a plain
function from a request to a proposal, written as the same text a model would
write, so everything after it (parsing, the gates, the act stage, the journal)
runs exactly as it does with a real model. Nothing it proposes skips a gate: a
!rm -rf ~ typed by the person is a proposal like any other."

(import re
        hy.models [Keyword]
        passepartout.proto [proto-get proto-print proto-without]
        passepartout.display [output-words status-words])

;; * Answering a request

(setv MAX-SHOWN 3000)

(defn symbolic-action [request]
  "The action plist the symbolic provider proposes for REQUEST.

   (symbolic-action [:signal [:type :event :payload [:sensor :user-input :text \"!ls\"]]])
   ⇒ [:action :shell :cmd \"ls\" :explanation \"the person asked to run this command\"]"
  (setv rejections (or (proto-get request ':rejections) [])
        payload (proto-get (proto-get request ':signal) ':payload))
  (cond rejections (_refusal rejections)
        (= (proto-get payload ':sensor) ':tool-result)
        (_presentation (proto-get payload ':action) (proto-get payload ':result))
        True (_command (proto-get payload ':text) (proto-get request ':fallback)
                       (_operator (proto-get request ':signal)))))

(defn _operator [signal]
  "True when SIGNAL comes from the terminal of the person who runs the daemon."
  (in (proto-get (or (proto-get (or signal []) ':source) []) ':gateway) #(None ':terminal)))

(defn symbolic-complete [request]
  "The cascade result of the symbolic provider for REQUEST: its action as plist text."
  [:status :ok
   :provider "symbolic"
   :text (proto-print (symbolic-action request))
   :tool-calls []
   :usage [:prompt-tokens 0 :completion-tokens 0 :cost 0.0]
   :attempts [[:provider "symbolic" :outcome :ok :detail "deterministic answer"]]])

;; * Commands

(setv _command-re (re.compile r"\s*/?(\S+)(.*)\Z" re.S)
      OWN-COMMAND "the person asked to run this command")

(defn _message [text]
  [:action :message :text text])

(defn _unquote [s]
  "S without one pair of surrounding quotes, so read \"my notes.txt\" works."
  (setv s (.strip s))
  (if (and (>= (len s) 2) (= (get s 0) (get s -1)) (in (get s 0) "\"'"))
      (cut s 1 -1)
      s))

(defn _command [text [fallback None] [operator True]]
  "The action the person's TEXT asks for, or the help message (said as the
   fallback when FALLBACK tells what failed; with how to set a model up only
   for the OPERATOR)."
  (when (not (and (isinstance text str) (.strip text)))
    (return (_help :fallback fallback :operator operator)))
  (setv stripped (.strip text))
  (when (.startswith stripped "!")
    (setv cmd (.strip (cut stripped 1 None)))
    (return (if cmd
                [:action :shell :cmd cmd :explanation OWN-COMMAND]
                (_message "Write the command right after the !, e.g. !ls -la"))))
  (setv m (.match _command-re text)
        word (.lower (.group m 1))
        tail (.group m 2)
        [first-line _ content] (.partition tail "\n")
        arg (_unquote first-line))
  (cond
    (in word #("help" "?" "commands" "start")) (_help :fallback fallback :operator operator)
    (= word "read")
    (if arg
        [:action :read-file :path arg :explanation "the person asked to read this file"]
        (_message "Say which file: read PATH, e.g. read notes.txt"))
    (= word "write")
    (if (and arg content)
        [:action :write-file :path arg :content content
         :explanation "the person asked to write this file"]
        (_message "Put the path on the first line and the content on the lines after it:\nwrite notes.txt\nfirst line of the file\nsecond line"))
    (= word "remember")
    (if (.strip tail)
        [:action :memory-add :text (.strip tail) :explanation "the person asked to remember this"]
        (_message "Say what to remember: remember TEXT"))
    (= word "recall")
    (if (.strip tail)
        [:action :memory-search :query (.strip tail) :explanation "the person asked to search memory"]
        (_message "Say what to look for: recall QUERY"))
    (or (in word #("ls" "dir" "files"))
        (and (in word #("list" "show")) (re.search r"\bfiles?\b|\bfolder\b|\bdirectory\b|\A\s*\Z" first-line)))
    [:action :shell :cmd "ls -la" :explanation "the person asked to list the files"]
    (and fallback (= (proto-get fallback ':fresh True) False))
    (_message (+ "I could not read that as a command (no model is answering; I am the built-in fallback). "
                 "`help` lists what I understand."))
    True (_help "I could not read that as a command." fallback operator)))

(setv COMMANDS-TEXT "  !COMMAND        run a shell command, e.g. !ls -la
  read PATH       show a file
  write PATH      write a file; its content goes on the lines after this one
  remember TEXT   keep a note in memory
  recall QUERY    search the notes in memory
  help            this list"
      SETUP-TEXT "To use a real model, set one environment variable and the provider's usual key:
  PASSEPARTOUT_MODELS=openai/gpt-4o-mini   with   OPENAI_API_KEY=...
or add a table to ~/.config/passepartout/config.toml:
  [[providers]]
  model = \"openai/gpt-4o-mini\"
  api_key_env = \"OPENAI_API_KEY\"
With no configuration, a local Ollama serving llama3.2 is used whenever it is running."
      DOCTOR-TEXT "`passepartout doctor` checks each configured model and says what is wrong."
      HELP-TEXT (+ "No language model is answering, so I understand only these commands:\n"
                   COMMANDS-TEXT "\n\n" SETUP-TEXT)
      CHAT-HELP-TEXT (+ "No language model is answering right now, so I understand only these commands:\n"
                        COMMANDS-TEXT "\n\n"
                        "The person who runs this assistant can set a model up; `passepartout doctor` tells them what is wrong."))

(defn _fallback-help [fallback]
  "The help as said by the fallback, after the failures FALLBACK describes."
  (setv untold (or (proto-get fallback ':untold) [])
        told (or (proto-get fallback ':told) [])
        kinds (or (proto-get fallback ':kinds) [])
        setup (all (gfor k kinds (in k #("unreachable" "no-key")))))
  (+ "I am the built-in fallback, not a language model"
     (cond (and untold told) (+ ": " (.join "; " untold) ", and as said above.")
           untold (+ ": " (.join "; " untold) ".")
           True " (why is said just above).")
     "\nI understand only these commands:\n" COMMANDS-TEXT "\n\n"
     (if setup SETUP-TEXT DOCTOR-TEXT)))

(defn _help [[preface None] [fallback None] [operator True]]
  (setv text (cond (not operator) CHAT-HELP-TEXT
                   fallback (_fallback-help fallback)
                   True HELP-TEXT))
  (_message (if preface (+ preface "\n" text) text)))

;; * Presenting a tool result

(defn _name [value]
  "VALUE as plain text; a keyword without its colon."
  (if (isinstance value Keyword) value.name (str value)))

(defn _clip [text [limit MAX-SHOWN]]
  (if (> (len text) limit)
      (+ (cut text limit) f"\n… ({(- (len text) limit)} more characters)")
      text))

(defn _field [plist key]
  "The value of KEY in PLIST as text, empty when absent."
  (setv v (proto-get plist key))
  (if (is v None) "" (_name v)))

(defn _describe [action]
  "A few words naming ACTION, e.g. run `ls`."
  (setv kind (proto-get action ':action))
  (cond
    (= kind ':shell) (+ "run `" (_field action ':cmd) "`")
    (= kind ':read-file) (+ "read " (_field action ':path))
    (= kind ':write-file) (+ "write " (_field action ':path))
    (= kind ':memory-add) "remember a note"
    (= kind ':memory-search) (+ "search memory for \"" (_field action ':query) "\"")
    (= kind ':message) "send that message"
    (is kind None) "do that"
    True (+ "do the " (_name kind) " action")))

(defn _first-text [plist keys]
  (for [k keys]
    (setv v (proto-get plist k))
    (when (and (isinstance v str) (.strip v))
      (return v)))
  None)

(defn _hit-text [hit]
  (cond (isinstance hit str) hit
        (isinstance hit list) (or (_first-text hit [':text ':content ':snippet]) (proto-print hit))
        True (str hit)))

(defn _hits [action hits]
  (setv query (_field action ':query)
        hits (if (isinstance hits list) hits [hits])
        about (if query (+ " for \"" query "\"") ""))
  (if hits
      (+ f"Found {(len hits)}{about}:"
         (.join "" (gfor [i hit] (enumerate hits 1) f"\n{i}. {(_hit-text hit)}")))
      (if query (+ "Nothing in memory matches \"" query "\".") "Nothing in memory matches.")))

(defn _presentation [action result]
  "A :message presenting RESULT of ACTION to the person."
  (when (not (isinstance result list))
    (return (_message (+ "I tried to " (_describe action) " but got no result back."))))
  (setv kind (proto-get action ':action)
        status (proto-get result ':status)
        exit (proto-get result ':exit)
        exit-note (if (in exit #(None 0)) "" f"\n(exit status {exit})")
        content (proto-get result ':content)
        output (proto-get result ':output))
  (_message
    (_clip
      (cond
        (and (= status ':error) (isinstance output str) (.strip output))
        (+ (if (= kind ':shell) (+ "`" (_field action ':cmd) "`") (_describe action))
           " " (status-words result) ":\n" (output-words output))
        (= status ':error)
        (+ "Could not " (_describe action) ": "
           (or (_first-text result [':error ':reason ':message ':stderr])
               (status-words result)))
        (is-not (proto-get result ':hits) None)
        (_hits action (proto-get result ':hits))
        (isinstance content str)
        (+ (or (_field action ':path) "The file") ":\n" (or content "(empty file)"))
        (or (isinstance output str) (is-not exit None))
        (+ (if (= kind ':shell) (+ "$ " (_field action ':cmd) "\n") "")
           (or output "(no output)")
           exit-note)
        (= kind ':write-file)
        (+ "Wrote " (_field action ':path)
           (if (is (proto-get result ':bytes) None) "." f" ({(proto-get result ':bytes)} bytes)."))
        (= kind ':memory-add)
        (if (is (proto-get result ':id) None) "Remembered." f"Remembered (note {(proto-get result ':id)}).")
        True
        (+ "Done: " (_describe action) ".")))))

;; * Answering a refusal

(defn _refusal [rejections]
  "A :message telling the person which actions the gates refused."
  (setv lines [])
  (for [r rejections]
    (setv line (+ "I did not " (_describe (proto-get r ':action)) ": the gates refused it."))
    (when (not (in line lines)) (.append lines line)))
  (_message (+ (.join "\n" lines)
               "\nAsk for something else, or ask in a way the rules allow.")))
