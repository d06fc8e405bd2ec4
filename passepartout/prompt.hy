;; * Why

"A fixed system prompt says the same to every task: the rules of the house, the
tool belt, and nothing of what the daemon knows about the person. The prompt is
therefore assembled for each model call from sections, each with a name, so
that a person can see what a message would be given (passepartout prompt,
/prompt) and edit what is theirs to edit."

(import math os sys
        pathlib [Path]
        passepartout.proto [proto-get proto-print]
        passepartout.config [config-defaults]
        passepartout.context [context-runtime]
        passepartout.secrets [redact-text secret-tuple]
        passepartout.skills [all-skills actuator-table skill-functions registry-view]
        passepartout.reason [RULES tool-belt _call-each])

(setv _ACTION   ':action
      _ID       ':id
      _NAME     ':name
      _PAYLOAD  ':payload
      _SECRETS  ':secrets
      _SECTIONS ':sections
      _TEXT     ':text
      _TOKENS   ':tokens
      _TOOLS    ':tools
      _WORKERS  ':workers)

;; * Settings

(setv _defaults (config-defaults "memory"))

(defn memory-settings [config]
  "The [memory] settings of CONFIG, defaults filled in."
  (| _defaults (.get (or config {}) "memory" {})))

;; * The editable files

(setv BASE-DEFAULT "You are Passepartout, a personal agent. You act only by proposing one action at a time; deterministic gates check every proposal before it runs."
      PERSONA-DEFAULT "Be brief and plain. Say what you did and what you found, and ask when a request is unclear rather than guessing."
      PROMPT-FILES {"base" #("base.md" BASE-DEFAULT) "persona" #("persona.md" PERSONA-DEFAULT)})

(defn prompt-file [config name]
  "The path of the editable prompt file NAME (\"base\" or \"persona\"), created
   with its default when missing; None when CONFIG names no data folder."
  (setv data (.get (or config {}) "data_dir"))
  (when (not data) (return None))
  (setv [file default] (get PROMPT-FILES name)
        path (/ (Path data) "prompt" file))
  (when (not (.exists path))
    (try (.mkdir path.parent :parents True :exist-ok True)
         (.write-text path (+ default "\n") :encoding "utf-8")
         (except [OSError] (return None))))
  path)

(defn capped [text cap]
  "TEXT cut to CAP characters, with a line saying so when it was longer."
  (if (<= (len text) cap)
      text
      (+ (cut text cap) f"\n[cut: the file holds {(len text)} characters; the first {cap} are used]")))

(setv _file-texts {})

(defn prompt-file-text [config name]
  "The text of the prompt file NAME, capped; its default when there is no file.
   The file is read again when it changed (its time or size), or the config did."
  (setv data (.get (or config {}) "data_dir")
        path (when data (os.path.join data "prompt" (get PROMPT-FILES name 0))))
  (try (setv st (os.stat path))
       (except [[OSError TypeError]] (setv st None)))
  (setv key #(name path (id config) (when st st.st-mtime-ns) (when st st.st-size))
        kept (.get _file-texts name))
  (if (and kept (= (get kept 0) key))
      (get kept 1)
      (do (setv text (_read-prompt-file config name))
          (setv (get _file-texts name) #(key text))
          text)))

(defn _read-prompt-file [config name]
  (setv path (prompt-file config name)
        cap (int (get (memory-settings config) "file_cap"))
        text (if path
                 (try (.read-text path :encoding "utf-8" :errors "replace")
                      (except [OSError] (get PROMPT-FILES name 1)))
                 (get PROMPT-FILES name 1)))
  (capped (.strip text) cap))

;; * What a task may do

(defn allowed-actions [ctx]
  "The names of the actions the task of CTX may take."
  (get (_may ctx) 0))

(defn may-change [ctx]
  "True when the task of CTX may take an action that changes something."
  (get (_may ctx) 1))

(defn may-spawn [ctx]
  (get (_may ctx) 2))

(defn _may [ctx]
  "#(allowed may-change may-spawn) for the task of CTX, worked out once per
   registry and worker profile."
  (setv registry (context-runtime ctx "skills")
        tools (proto-get (or (proto-get ctx _WORKERS) []) _TOOLS))
  (registry-view registry #("may" (when (is-not tools None) (tuple (map str tools))))
                 (fn []
                   (setv table (actuator-table registry)
                         allowed (if (is tools None)
                                     (set table)
                                     (& (| (set (map str tools)) #{"message"}) (set table))))
                   #(allowed
                     (any (gfor a allowed (.get (get table a) "effect")))
                     (bool (& allowed #{"spawn" "plan"}))))))

;; * The sections

(setv APPROVALS "Some actions need a person's approval: the gates escalate them and the action waits for the answer, which you are told. Never say an action ran before its result came back."
      SPAWNING "Long or independent work can go to background workers with :spawn (one) or :plan (several, with dependencies); each worker may use only the tools its profile allows, and its result comes back to this conversation.")

(defn _config [ctx] (or (context-runtime ctx "config") {}))

(defn signal-text [signal]
  "The words of SIGNAL a memory search looks for: what the person said, or the
   action whose result it brings."
  (setv payload (or (proto-get signal _PAYLOAD) [])
        text (proto-get payload _TEXT))
  (cond (isinstance text str) text
        (proto-get payload _ACTION) (proto-print (proto-get payload _ACTION))
        True ""))

(defn relevant-memories [store text secrets k [model None]]
  "The K notes best matching TEXT (by words, and by meaning when the embedding
   MODEL has embedded it), each (:id N :text T) with secrets redacted."
  (when (or (is store None) (not (.strip text)) (<= k 0))
    (return []))
  (lfor hit (hy.I.passepartout/memory.memory-recall store text :limit k :model model)
        [:id (proto-get hit _ID)
         :text (get (redact-text (proto-get hit _TEXT) secrets) 0)]))

(defn _memories [signal ctx]
  (setv k (int (get (memory-settings (_config ctx)) "prompt_memories"))
        settings (hy.I.passepartout/memory.embedding-settings (_config ctx))
        hits (relevant-memories (context-runtime ctx "store") (signal-text signal)
                                (secret-tuple (proto-get ctx _SECRETS)) k
                                (when settings (get settings 0))))
  (when hits
    (+ "Long-term memory that may bear on this (search it for more):\n"
       (.join "\n" (gfor h hits f"- [{(proto-get h ':id)}] {(proto-get h ':text)}")))))

(defn _agenda [signal ctx]
  (setv store (context-runtime ctx "store"))
  (when (is store None) (return None))
  (setv text (hy.I.passepartout/agenda.agenda-brief store))
  (when (and (isinstance text str) (.strip text))
    (+ "Open agenda items:\n" (.strip text))))

(defn first-sentence [text [cap 120]]
  "The first sentence of TEXT, on one line, at most CAP characters."
  (setv one (.join " " (.split (or text "")))
        end (.find one ". "))
  (setv one (if (>= end 0) (cut one (+ end 1)) one))
  (if (> (len one) cap) (+ (cut one (- cap 1)) "…") one))

(defn _skills [signal ctx]
  (setv registry (context-runtime ctx "skills"))
  (registry-view registry "prompt-skills"
                 (fn []
                   (setv lines (lfor s (all-skills registry)
                                     :if (any (gfor k ["actuators" "gate" "filter" "augment" "prompt" "validators"]
                                                    (.get s k)))
                                     f"- {(get s "name")}: {(first-sentence (get s "doc"))}"))
                   (when lines
                     (+ "Skills loaded:\n" (.join "\n" lines))))))

(defn _actions [signal ctx]
  (+ "Actions:\n" (tool-belt (context-runtime ctx "skills"))))

(setv SECTIONS
      [#("base" (fn [s c] (prompt-file-text (_config c) "base")))
       #("persona" (fn [s c] (prompt-file-text (_config c) "persona")))
       #("rules" (fn [s c] RULES))
       #("approvals" (fn [s c] (when (get (_may c) 1) APPROVALS)))
       #("spawning" (fn [s c] (when (get (_may c) 2) SPAWNING)))
       #("actions" _actions)
       #("skills" _skills)
       #("memories" _memories)
       #("agenda" _agenda)
       #("workspace" (fn [s c] f"Workspace: {(proto-get c ':workspace)}"))])

(defn prompt-sections [signal ctx]
  "The sections of the system prompt for SIGNAL in CTX, in order, as plists
   (:name N :text T); those that do not apply are left out. A section that
   fails is left out too: a broken agenda must not stop a reply."
  (setv out [])
  (for [[name f] SECTIONS]
    (try (setv text (f signal ctx))
         (except [Exception] (setv text None)))
    (when (and (isinstance text str) (.strip text))
      (.append out [_NAME name _TEXT text])))
  (setv registry (context-runtime ctx "skills"))
  (for [[name f] (skill-functions registry "augment")]
    (for [text (_call-each [#(name f)] ctx)]
      (.append out [_NAME f"augment:{name}" _TEXT text])))
  out)

(defn system-text [sections]
  "The system prompt made of SECTIONS."
  (.join "\n\n" (gfor s sections (proto-get s _TEXT))))

;; * Showing it

(defn configured-model [config [env None]]
  "The first model configured other than the symbolic one, or None."
  (setv env (if (is env None) os.environ env))
  (when (not (or (.strip (.get env "PASSEPARTOUT_MODELS" "")) (.get (or config {}) "providers")))
    (return None))
  (for [p (hy.I.passepartout/providers.providers-from-config config env)]
    (when (!= (get p "model") "symbolic") (return (get p "model"))))
  None)

(defn estimate-tokens [text]
  (math.ceil (/ (len text) 4)))

(defn token-counter [model]
  "#(count how): a function of a text to its tokens, and what counts them."
  (if (is model None)
      #(estimate-tokens "an estimate (4 characters a token; no model is configured)")
      (try (import litellm)
           (defn count [text]
             (try (litellm.token-counter :model model :text text)
                  (except [Exception] (estimate-tokens text))))
           #(count f"LiteLLM's token_counter for {model}")
           (except [Exception]
             #(estimate-tokens "an estimate (4 characters a token; LiteLLM is not available)")))))

(defn prompt-report [signal ctx history [model None]]
  "(:sections ((:name N :text T :tokens K) …) :history-turns N :history-tokens K
    :total K :counted-by TEXT) for the prompt SIGNAL would get in CTX after HISTORY."
  (setv [count how] (token-counter model)
        sections (lfor s (prompt-sections signal ctx)
                       (+ s [:tokens (count (proto-get s _TEXT))]))
        hist (sum (gfor m history (count (str (.get m "content" "")))))
        message (count (signal-text signal)))
  [:sections sections :history-turns (len history) :history-tokens hist
   :message-tokens message
   :total (+ (sum (gfor s sections (proto-get s _TOKENS))) hist message)
   :counted-by how])

(defn report-text [report [full True]]
  "REPORT as lines a person reads: each section with its token count (and its
   text, when FULL), the history, the total."
  (setv lines [])
  (for [s (proto-get report _SECTIONS)]
    (.append lines f"── {(proto-get s ':name)} ({(proto-get s ':tokens)} tokens)")
    (when full (.append lines (proto-get s _TEXT))))
  (.append lines f"── history ({(proto-get report ':history-turns)} messages, {(proto-get report ':history-tokens)} tokens)")
  (.append lines f"── the message ({(proto-get report ':message-tokens)} tokens)")
  (.append lines f"Total: {(proto-get report ':total)} tokens, counted by {(proto-get report ':counted-by)}.")
  (.join "\n" lines))
