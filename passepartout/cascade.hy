;; * Why

"The reason stage needs one thing from the outside world: an answer to a prompt.
Any single provider can be down, slow, out of credit, or answer nonsense, so the
cascade asks an ordered list of them and takes the first real answer. Whatever
happens it returns a plist and never raises: a failure is data the reason stage
can tell the person about. The one exception is cancellation: a turn the person
stopped ends where it is, and nothing of it goes on."

(import asyncio inspect json logging os re socket threading time warnings
        importlib.util [find-spec]
        urllib.parse [urlsplit]
        passepartout.config [did-you-mean schema-keys]
        passepartout.proto [proto-get is-plist]
        passepartout.display [valid-unicode]
        passepartout.symbolic [symbolic-complete])

;; The log is the daemon's when it has one; elsewhere (the chat, a script) the
;; person already heard the line, and Python's last-resort printing to stderr
;; would say it again over the terminal.
(setv log (logging.getLogger "passepartout.cascade"))
(.addHandler log (logging.NullHandler))

;; * Providers

(setv SYMBOLIC "symbolic"
      DEFAULT-TIMEOUT 60.0
      LOCAL-TIMEOUT 30.0
      PROBE-TIMEOUT 0.25
      OLLAMA-BASE "http://127.0.0.1:11434"
      DEFAULT-MAX-TOKENS 1024
      TOOL-RESULTS #("native" "text")
      RETRY-AFTER-SHORT 5.0
      PROBE-DEADLINE 3.0
      _provider-keys (schema-keys "providers"))

(defn _local-model [model]
  (.startswith model #("ollama/" "ollama_chat/")))

(defn make-provider [model [name None] [api-base None] [api-key-env None] [timeout None] [probe None]
                     [max-tokens None] [tools None] [tool-results None]]
  "A provider dict for a LiteLLM MODEL string, or for \"symbolic\".

   (make-provider \"openai/gpt-4o-mini\" :api-key-env \"OPENAI_API_KEY\")"
  (when (not (and (isinstance model str) (.strip model)))
    (raise (ValueError f"a provider needs a model string, got {model !r}")))
  (setv model (.strip model)
        local (_local-model model)
        timeout (if (is timeout None) (if local LOCAL-TIMEOUT DEFAULT-TIMEOUT) timeout))
  (when (or (isinstance timeout bool) (not (isinstance timeout #(int float))) (<= timeout 0))
    (raise (ValueError f"timeout must be a positive number of seconds, got {timeout !r}")))
  (setv max-tokens (if (is max-tokens None) DEFAULT-MAX-TOKENS max-tokens))
  (when (or (isinstance max-tokens bool) (not (isinstance max-tokens int)) (<= max-tokens 0))
    (raise (ValueError f"max_tokens must be a positive whole number, got {max-tokens !r}")))
  (when (not (in tool-results #(None #* TOOL-RESULTS)))
    (raise (ValueError (+ f"tool_results must be "
                          (.join " or " (gfor f TOOL-RESULTS f"{f !r}")) f", got {tool-results !r}"))))
  {"name" (or name model)
   "model" model
   "api_base" (or api-base (when local OLLAMA-BASE))
   "api_key_env" (or api-key-env None)
   "timeout" (float timeout)
   "probe" (if (is probe None) local (bool probe))
   "max_tokens" max-tokens
   "tools" (if (is tools None) None (bool tools))
   "tool_results" tool-results})

(defn default-providers []
  "What runs with no configuration: a local Ollama if one answers, then the symbolic provider."
  [(make-provider "ollama_chat/llama3.2" :api-base OLLAMA-BASE :probe True :timeout LOCAL-TIMEOUT)
   (make-provider SYMBOLIC)])

;; ** From the configuration

(defn _provider-from-table [entry [where "a [[providers]] table"]]
  "The provider of ENTRY, a table of the config called WHERE in what is wrong with it."
  (when (isinstance entry str)
    (return (make-provider entry)))
  (when (not (isinstance entry dict))
    (raise (ValueError f"{where} should be a table, not {entry !r}")))
  (setv table (dfor [k v] (.items entry) (.replace k "-" "_") v)
        unknown (sorted (- (set table) (set _provider-keys))))
  (when unknown
    (raise (ValueError (+ f"{where} {(get unknown 0)} — unknown key; "
                          (did-you-mean (get unknown 0) _provider-keys)))))
  (when (not (.get table "model"))
    (raise (ValueError f"{where} has no model, which it needs; e.g. model = \"openai/gpt-4o-mini\"")))
  (try
    (make-provider (get table "model")
                   :name (.get table "name")
                   :api-base (.get table "api_base")
                   :api-key-env (.get table "api_key_env")
                   :timeout (.get table "timeout")
                   :probe (.get table "probe")
                   :max-tokens (.get table "max_tokens")
                   :tools (.get table "tools")
                   :tool-results (.get table "tool_results"))
    (except [e ValueError]
      (raise (ValueError f"{where} {e}")))))

(defn _unique-names [providers]
  "PROVIDERS with repeated names made distinct (name, name#2, …): attempts name them."
  (setv seen {})
  (lfor p providers
        (do (setv name (get p "name")
                  n (+ (.get seen name 0) 1)
                  (get seen name) n)
            (if (= n 1) p (| p {"name" f"{name}#{n}"})))))

(defn providers-from-config [cfg [env None]]
  "The provider list for the config dict CFG and the environment ENV (os.environ by default)."
  (setv env (if (is env None) os.environ env)
        listed (.strip (.get env "PASSEPARTOUT_MODELS" ""))
        tables (.get (or cfg {}) "providers")
        tables (cond (is tables None) [] (isinstance tables dict) [tables] True tables)
        providers (if listed
                      (lfor m (.split listed ",") :if (.strip m) (make-provider m))
                      (lfor [i t] (enumerate tables) (_provider-from-table t f"[[providers]] #{(+ i 1)}"))))
  (when (not providers)
    (setv providers (default-providers)))
  (when (not (any (gfor p providers (= (get p "model") SYMBOLIC))))
    (.append providers (make-provider SYMBOLIC)))
  (_unique-names providers))

;; * The circuit breaker

(defn make-cascade [providers [cooldown 60.0] [failure-threshold 3] [clock time.monotonic]
                    [store None] [probe-deadline PROBE-DEADLINE]]
  "The state of a cascade over PROVIDERS, with one circuit breaker each; with a
   STORE, the breakers are read from it and written back (see below)."
  (setv providers (list providers)
        cascade {"providers" providers
                 "cooldown" (float cooldown)
                 "failure-threshold" (max 1 (int failure-threshold))
                 "clock" clock
                 "probe-deadline" (float probe-deadline)
                 "store" store
                 "breakers" (lfor _ providers {"failures" 0 "opened-at" None
                                               "incident" None "clause" None "heard" (set)})
                 "lock" (threading.Lock)})
  (when store
    (_load-breakers cascade))
  cascade)

(defn _admit [cascade i]
  "True when provider I may be called now."
  (with [(get cascade "lock")]
    (setv b (get cascade "breakers" i))
    (cond (< (get b "failures") (get cascade "failure-threshold")) True
          (>= (- ((get cascade "clock")) (get b "opened-at")) (get cascade "cooldown"))
          (do (setv (get b "opened-at") ((get cascade "clock")))
              True)
          True False)))

(defn _first-hearing [b session]
  "True the first time SESSION asks about the incident of breaker B."
  (if (in session (get b "heard"))
      False
      (do (.add (get b "heard") session)
          True)))

(defn _record [cascade i ok [kind None] [clause None] [session None] [open-for None]]
  "Count a call of provider I. After a failure of KIND (told by CLAUSE), True
   when SESSION has not heard of this incident yet. OPEN-FOR, when given, opens
   the breaker at once for that many seconds (a long retry-after, a timeout with
   a healthy provider behind)."
  (with [(get cascade "lock")]
    (setv b (get cascade "breakers" i)
          was (get b "failures"))
    (if ok
        (do (setv (get b "failures") 0
                  (get b "opened-at") None
                  (get b "incident") None
                  (get b "clause") None)
            (.clear (get b "heard"))
            (setv fresh False))
        (do (+= (get b "failures") 1)
            (setv now ((get cascade "clock")))
            (cond (is-not open-for None)
                  (setv (get b "failures") (max (get b "failures") (get cascade "failure-threshold"))
                        (get b "opened-at") (- now (- (get cascade "cooldown") open-for)))
                  (>= (get b "failures") (get cascade "failure-threshold"))
                  (setv (get b "opened-at") now))
            (when (!= (get b "incident") kind)
              (setv (get b "incident") kind)
              (.clear (get b "heard")))
            (setv (get b "clause") clause
                  fresh (_first-hearing b session))))
    (when (or (not ok) was)
      (_save-breaker cascade i b))
    fresh))

(defn _suspect [cascade i]
  "True when provider I's last call timed out: it gets a short probe before a full deadline."
  (with [(get cascade "lock")]
    (= (get cascade "breakers" i "incident") "timeout")))

(defn _healthy-after [cascade i]
  "True when a model after provider I (not the built-in commands) has not failed lately."
  (with [(get cascade "lock")]
    (any (gfor [p b] (cut (list (zip (get cascade "providers") (get cascade "breakers"))) (+ i 1) None)
               (and (!= (get p "model") SYMBOLIC) (= (get b "failures") 0))))))

(defn cascade-status [cascade]
  "One plist per provider: (:provider NAME :model M :state :closed|:open|:half-open :failures N)."
  (with [(get cascade "lock")]
    (setv now ((get cascade "clock")))
    (lfor [p b] (zip (get cascade "providers") (get cascade "breakers"))
          [:provider (.get p "name")
           :model (.get p "model")
           :state (cond (< (get b "failures") (get cascade "failure-threshold")) ':closed
                        (>= (- now (get b "opened-at")) (get cascade "cooldown")) ':half-open
                        True ':open)
           :failures (get b "failures")])))

;; ** The breakers outlive the process

(defn _load-breakers [cascade]
  (setv store (get cascade "store")
        now ((get cascade "clock"))
        wall (time.time))
  (try (setv rows (.query store "SELECT provider, failures, opened_at, incident, clause FROM breakers"))
       (except [e Exception]
         (.warning log "could not read the breakers: %s" e)
         (return None)))
  (setv saved (dfor [name failures opened incident clause] rows name #(failures opened incident clause)))
  (for [[p b] (zip (get cascade "providers") (get cascade "breakers"))]
    (setv row (.get saved (.get p "name")))
    (when row
      (setv [failures opened incident clause] row)
      (.update b {"failures" (int failures)
                  "opened-at" (when (is-not opened None) (- now (- wall opened)))
                  "incident" incident
                  "clause" clause}))))

(defn _save-breaker [cascade i b]
  (setv store (get cascade "store"))
  (when store
    (setv opened (get b "opened-at")
          wall (when (is-not opened None) (- (time.time) (- ((get cascade "clock")) opened))))
    (try (.write store (+ "INSERT INTO breakers (provider, failures, opened_at, incident, clause, updated) "
                          "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (provider) DO UPDATE SET "
                          "failures = excluded.failures, opened_at = excluded.opened_at, "
                          "incident = excluded.incident, clause = excluded.clause, updated = excluded.updated")
                 #((.get (get cascade "providers" i) "name") (get b "failures") wall
                   (get b "incident") (get b "clause") (time.time)))
         (except [e Exception]
           (.warning log "could not keep the breaker of %s: %s" (.get (get cascade "providers" i) "name") e)))))

;; * Calling one provider

(defclass _Failure [Exception]
  (defn __init__ [self outcome detail [kind None]]
    (.__init__ (super) detail)
    (setv self.outcome outcome
          self.detail detail
          self.kind (or kind outcome.name))))

(defn _short [text [limit 200]]
  "TEXT on one line, cut to LIMIT characters."
  (setv text (.join " " (.split (str text))))
  (if (> (len text) limit) (+ (cut text (- limit 1)) "…") text))

;; ** The probe

(defn _os-words [e]
  "What the OSError E says, in the system's words."
  (cond (isinstance e socket.gaierror) (or e.strerror (str e))
        (and (isinstance e.errno int) (> e.errno 0)) (os.strerror e.errno)
        e.strerror e.strerror
        True (. (type e) __name__)))

(defn :async _connect [host port]
  "Connect to HOST:PORT and close again; the last address's OSError when none accepts."
  (setv loop (asyncio.get-running-loop)
        error None)
  (for [[family kind proto _ address] (await (.getaddrinfo loop host port :type socket.SOCK-STREAM))]
    (with [s (socket.socket family kind proto)]
      (.setblocking s False)
      (try
        (await (.sock-connect loop s address))
        (return None)
        (except [e OSError]
          (setv error e)))))
  (raise (or error (OSError f"{host} resolves to no address"))))

(defn :async _probe [provider]
  "None when something accepts connections at the provider's api_base, else why not."
  (setv base (get provider "api_base"))
  (when (not base)
    (return None))
  (try
    (setv parts (urlsplit (if (in "://" base) base (+ "http://" base)))
          host (or parts.hostname "127.0.0.1")
          port (or parts.port (if (= parts.scheme "https") 443 80)))
    (except [e ValueError]
      (return f"api_base {base !r} is not a URL: {e}")))
  (try
    (with [:async (asyncio.timeout PROBE-TIMEOUT)]
      (await (_connect host port)))
    None
    (except [e OSError]
      f"nothing accepts connections at {host}:{port} ({(_os-words e)})")))

;; ** LiteLLM, imported on first use

(setv _litellm None
      _tool-flags {}
      _litellm-lock (threading.Lock))

(defn _litellm-module []
  (global _litellm _tool-flags)
  (with [_litellm-lock]
    (when (is _litellm None)
      (os.environ.setdefault "LITELLM_LOCAL_MODEL_COST_MAP" "True")
      (import litellm)
      ;; a server that sends a call's arguments as an object rather than JSON text
      ;; makes the response model warn on every answer; the arguments are read
      ;; either way (see /Reading the answer/), so the warning tells no one anything
      (warnings.filterwarnings "ignore" :message "Pydantic serializer warnings" :category UserWarning)
      (setv litellm.suppress-debug-info True
            _tool-flags (if (and (is (find-spec "mcp") None)
                                 (is-not (find-spec "litellm.responses.mcp.chat_completions_handler") None))
                            {"_skip_mcp_handler" True}
                            {})
            _litellm litellm)))
  _litellm)

(defn warm-litellm [providers]
  "Import LiteLLM in a background thread when PROVIDERS name a model it serves;
   the thread, or None. A daemon or a chat calls it as it starts, so the first
   message does not wait for the import (seconds, on a small machine)."
  (when (and (is _litellm None)
             (any (gfor p providers (and (!= (get p "model") SYMBOLIC) (not (get p "probe"))))))
    (setv t (threading.Thread :target _litellm-module :name "litellm-import" :daemon True))
    (.start t)
    t))

(defn :async _litellm-ready []
  "LiteLLM, imported in a worker thread if it is not yet."
  (if (is _litellm None)
      (await (asyncio.to-thread _litellm-module))
      _litellm))

(setv DEADLINE-GRACE 5.0)

(defn :async _litellm-call [litellm provider request [offer-tools True]]
  "LiteLLM's response from PROVIDER to REQUEST; without OFFER-TOOLS, its tools are left out."
  (setv key-env (get provider "api_key_env")
        tools (proto-get request ':tools)
        kwargs {"model" (get provider "model")
                "messages" (valid-unicode (proto-get request ':messages []))
                "timeout" (get provider "timeout")
                "max_tokens" (.get provider "max_tokens" DEFAULT-MAX-TOKENS)
                "num_retries" 0
                "max_retries" 0})
  (when key-env
    (when (not (.get os.environ key-env))
      (raise (_Failure ':error f"the environment variable {key-env} (the API key) is not set" "no-key")))
    (setv (get kwargs "api_key") (get os.environ key-env)))
  (when (get provider "api_base")
    (setv (get kwargs "api_base") (get provider "api_base")))
  (setv native (and tools offer-tools (_native-tools litellm provider)))
  (when native
    (.update kwargs {"tools" tools "tool_choice" "auto" #** _tool-flags})
    (setv (get kwargs "messages") (without-text-protocol (get kwargs "messages")
                                                         (proto-get request ':text-protocol))))
  (setv (get kwargs "messages") (if (and native (= (_tool-results litellm provider) "native"))
                                    (native-messages (get kwargs "messages"))
                                    (text-messages (get kwargs "messages"))))
  (setv seconds (+ (get provider "timeout") (.get provider "grace" DEADLINE-GRACE))
        deadline (asyncio.timeout seconds))
  (try
    (with [:async deadline]
      (return (await (litellm.acompletion #** kwargs))))
    (except [e Exception]
      (when (.expired deadline)
        (raise (_Failure ':timeout f"no complete answer within {seconds :g} s" "timeout") :from e))
      (raise))))

;; ** Tools, natively or as text

(setv CALL-KEY "passepartout_call")

(defn _known-model [litellm model]
  "True when LiteLLM's model list has MODEL."
  (or (in model litellm.model-cost)
      (in (get (.split model "/" 1) -1) litellm.model-cost)))

(defn _native-tools [litellm provider]
  "True when PROVIDER gets the tools as tool definitions."
  (setv flag (.get provider "tools"))
  (when (is-not flag None)
    (return (bool flag)))
  (setv model (get provider "model"))
  (if (not (_known-model litellm model))
      True
      (try (bool (litellm.supports-function-calling :model model))
           (except [Exception] True))))

;; *** The conversation after a tool call

(defn _tool-results [litellm provider]
  "\"native\" or \"text\": the form the results of tool calls take for PROVIDER."
  (setv form (.get provider "tool_results"))
  (cond (is-not form None) form
        (not (_known-model litellm (get provider "model"))) "text"
        True (try (if (litellm.supports-function-calling :model (get provider "model")) "native" "text")
                  (except [Exception] "text"))))

(defn without-text-protocol [messages protocol]
  "MESSAGES with each text of PROTOCOL taken out of the system message: a model
   that receives the tools as definitions is not also told to write them as text."
  (if (and protocol messages (= (.get (get messages 0) "role") "system"))
      (do (setv content (or (.get (get messages 0) "content") ""))
          (for [part protocol]
            (setv content (.replace (.replace content (+ part " ") "") part "")))
          (+ [(| (get messages 0) {"content" (.strip (re.sub r"\n{3,}" "\n\n" content))})]
             (cut messages 1 None)))
      messages))

(defn _alternating [messages]
  "MESSAGES with turns of one role in a row (user or assistant, with no tool
   call) joined into one, and no assistant turn right after the system message:
   the order every chat template renders."
  (setv out [])
  (for [m messages]
    (setv prev (when out (get out -1)))
    (cond
      (and prev (in (get m "role") #("user" "assistant")) (= (get prev "role") (get m "role"))
           (not (.get prev "tool_calls")) (not (.get m "tool_calls")))
      (setv (get out -1) (| prev {"content" (.join "\n\n" (gfor c [(get prev "content") (get m "content")]
                                                                 :if c c))}))
      (and (= (get m "role") "assistant") (not (.get m "tool_calls")) prev (= (get prev "role") "system"))
      None
      True (.append out m)))
  out)

(defn _with-content [m]
  "The message M with a content, \"\" when it has none."
  (if (is (.get m "content") None) (| m {"content" ""}) m))

(defn _call-made [call]
  "The tool CALL (a dict of id, name and JSON arguments) as the assistant turn carries it."
  {"id" (get call "id") "type" "function"
   "function" {"name" (get call "name") "arguments" (get call "arguments")}})

(defn _joins [opened call]
  "True when CALL belongs to the answer OPENED (#(index answer)) began."
  (and opened (.get call "answer") (= (.get call "answer") (get opened 1))))

(defn native-messages [messages]
  "MESSAGES with each result of a tool call as the assistant's call and a tool
   message; the calls of one answer as one assistant turn, their tool messages after it."
  (setv out []
        opened None)
  (for [m messages]
    (setv call (.get m CALL-KEY))
    (cond
      (not call)
      (do (.append out (_with-content m))
          (setv opened None))
      (_joins opened call)
      (do (.append (get out (get opened 0) "tool_calls") (_call-made call))
          (.append out {"role" "tool" "tool_call_id" (get call "id") "content" (or (.get m "content") "")}))
      True
      (do (setv opened #((len out) (.get call "answer")))
          (.extend out [{"role" "assistant" "content" (.get call "said" "") "tool_calls" [(_call-made call)]}
                        {"role" "tool" "tool_call_id" (get call "id") "content" (or (.get m "content") "")}]))))
  (_alternating out))

(defn call-text [call]
  "The tool CALL (a dict of name and JSON arguments) as the text protocol writes it."
  (setv args (try (json.loads (or (get call "arguments") "{}")) (except [ValueError] None)))
  (json.dumps (if (isinstance args dict)
                  {"action" (get call "name") #** (dfor [k v] (.items args) :if (!= k "action") k v)}
                  {"action" (get call "name") "arguments" (get call "arguments")})
              :ensure-ascii False))

(defn text-messages [messages]
  "MESSAGES as plain chat messages: each call a result answers as the
   assistant's turn in text (the calls of one answer in one turn), and turns of
   one role in a row joined into one."
  (setv out []
        opened None)
  (for [m messages]
    (setv call (.get m CALL-KEY))
    (cond
      (not call) (setv opened None)
      (_joins opened call)
      (do (setv turn (get out (get opened 0))
                (get out (get opened 0)) (| turn {"content" (+ (get turn "content") "\n\n" (call-text call))})))
      True
      (do (setv opened #((len out) (.get call "answer")))
          (.append out {"role" "assistant" "content" (.join "\n\n" (gfor c [(.get call "said") (call-text call)]
                                                                       :if c c))})))
    (.append out (_with-content (if call (dfor [k v] (.items m) :if (!= k CALL-KEY) k v) m))))
  (_alternating out))

;; ** Reading the answer

(defn _field [obj name [default None]]
  (if (isinstance obj dict) (.get obj name default) (getattr obj name default)))

(defn _text-of [content]
  (cond (or (is content None) (isinstance content str)) content
        (isinstance content list)
        (.join "" (gfor part content
                        (if (isinstance part str) part (or (_field part "text") ""))))
        True (str content)))

(defn _tool-call [call]
  (setv f (_field call "function")
        args (_field f "arguments")
        out [:name (_field f "name")
             :arguments (cond (isinstance args str) args
                              (is args None) "{}"
                              True (json.dumps args))])
  (if (_field call "id") (+ out [:id (_field call "id")]) out))

(defn _answer [response]
  "(text tool-calls) of a chat completion RESPONSE."
  (setv choices (_field response "choices"))
  (when (not choices)
    (raise (_Failure ':garbage "the answer holds no choices")))
  (setv message (_field (get choices 0) "message"))
  (when (is message None)
    (raise (_Failure ':garbage "the first choice holds no message")))
  (setv text (_text-of (_field message "content"))
        text (if (and text (.strip text)) text None)
        calls (lfor c (or (_field message "tool_calls") []) (_tool-call c)))
  (when (and (is text None) (not calls))
    (raise (_Failure ':empty "the answer holds no text and no tool call")))
  #(text calls))

(defn _usage [litellm response]
  "The usage plist of RESPONSE; the cost is 0.0 for a model LiteLLM has no price for."
  (setv u (_field response "usage"))
  (defn tokens [k]
    (try (int (or (_field u k) 0)) (except [Exception] 0)))
  (setv cost (try (float (or (litellm.completion-cost :completion-response response) 0.0))
                  (except [Exception] 0.0)))
  [:prompt-tokens (tokens "prompt_tokens")
   :completion-tokens (tokens "completion_tokens")
   :cost cost])

;; ** Classifying a failure

(defn _cause-of [e classes]
  "E or the first exception in its cause chain that is one of CLASSES, else None."
  (setv seen (set))
  (while (and (is-not e None) (not (in (id e) seen)) (< (len seen) 16))
    (when (isinstance e classes)
      (return e))
    (.add seen (id e))
    (setv e (or e.__cause__ e.__context__)))
  None)

(defn _error-text [e]
  (setv text (str e)
        kind (. (type e) __name__))
  (if (in kind text) text f"{kind}: {text}"))

(setv _class-prefix-re (re.compile r"\A(?:\s*(?:litellm\.)?\w*(?:Error|Exception)\s*[:-]\s*)+"))

(defn _provider-message [e]
  "What the provider said in the error E, without LiteLLM's class names."
  (setv text (.strip (_class-prefix-re.sub "" (str e) 1)))
  (when (.startswith text "{")
    (try
      (setv body (json.loads text)
            inner (if (isinstance (.get body "error") dict) (get body "error") body)
            said (or (.get inner "message") (.get inner "detail")))
      (when (isinstance said str) (setv text said))
      (except [Exception])))
  (_short (or text (. (type e) __name__)) 160))

(defn _status-of [e]
  "The HTTP status E carries, when it is an error status."
  (setv status (getattr e "status_code" None))
  (when (and (isinstance status int) (<= 400 status 599)) status))

(setv _page-re (re.compile r"<!doctype html|<html[\s>]" re.I))

(defn _host [provider]
  (setv base (get provider "api_base"))
  (if base (or (. (urlsplit (if (in "://" base) base (+ "http://" base))) hostname) base) (get provider "model")))

(defn _retry-after [e]
  "The seconds the =retry-after= (or =retry-after-ms=) header of the error E asks
   to wait, or None."
  (setv seen (set))
  (while (and (is-not e None) (not (in (id e) seen)) (< (len seen) 16))
    (.add seen (id e))
    (for [headers [(getattr e "litellm_response_headers" None)
                   (getattr (getattr e "response" None) "headers" None)]]
      (when headers
        (try
          (setv ms (.get headers "retry-after-ms")
                value (.get headers "retry-after"))
          (when ms (return (/ (float ms) 1000)))
          (when value
            (return (try (max 0.0 (float value))
                         (except [ValueError]
                           (import email.utils [parsedate-to-datetime])
                           (max 0.0 (- (.timestamp (parsedate-to-datetime value)) (time.time)))))))
          (except [Exception]))))
    (setv e (or e.__cause__ e.__context__)))
  None)

(defn _host-port [host port]
  "HOST, with PORT when it is not the web's own (80, 443)."
  (if (and (isinstance port int) (not (in port #(80 443)))) f"{host}:{port}" host))

(defn _failed-host [e provider]
  "The host a connection that failed with E was made to: the one the
   connector names (=aiohttp='s =host=), else the innermost request's address
   in the chain (an outer wrapper may carry a placeholder), else PROVIDER's;
   with its port unless that is the web's own."
  (setv seen (set)
        found None)
  (while (and (is-not e None) (not (in (id e) seen)) (< (len seen) 16))
    (.add seen (id e))
    (when (isinstance (getattr e "host" None) str)
      (return (_host-port (getattr e "host") (getattr e "port" None))))
    (setv request (try (getattr e "request" None) (except [Exception] None))
          url (getattr request "url" None)
          host (getattr url "host" None))
    (when (and (isinstance host str) host)
      (setv found (_host-port host (getattr url "port" None))))
    (setv e (or e.__cause__ e.__context__)))
  (or found (_host provider)))

(setv _missing-key-re (re.compile r"(?i)missing credentials|api_key client option must be set|no (?:api )?key is set|missing [\w ]*api key")
      _key-var-re (re.compile r"\b([A-Z][A-Z0-9_]*_(?:API_)?KEY)\b"))

(defn _missing-key [e]
  "The words for E when it says the call had no API key (a library's own
   check, before any request), else None."
  (setv text (str e))
  (when (_missing-key-re.search text)
    (setv var (_key-var-re.search text))
    (if var
        f"the environment variable {(.group var 1)} (the API key) is not set"
        "no API key is set")))

(defn _classify [litellm provider e]
  "(outcome detail kind) for the exception E raised while calling PROVIDER."
  (setv bad-json (_cause-of e json.JSONDecodeError)
        cut-off (_cause-of e #(ConnectionError socket.gaierror))
        status (_status-of e))
  (cond
    (isinstance e _Failure) #(e.outcome e.detail e.kind)
    (.search _page-re (str e))
    #(':garbage f"{(_host provider)} answered with a web page, not an API answer" "not-api")
    (or (and litellm (isinstance e litellm.Timeout)) (_cause-of e TimeoutError))
    #(':timeout (+ "no answer within " (format (get provider "timeout") "g") " s") "timeout")
    bad-json #(':garbage (_short f"the answer is not JSON ({bad-json})") "garbage")
    cut-off #(':error (_short f"{(_os-words cut-off)} at {(_failed-host e provider)}")
              "connect")
    (_missing-key e) #(':error (_missing-key e) "no-key")
    status #(':error f"{status}: {(_provider-message e)}" f"http-{status}")
    True #(':error (_short (_error-text e)) "error")))

;; ** One attempt

(defn _cancelling []
  "How many requests to cancel the current task has pending (0 outside a task)."
  (setv task (asyncio.current-task))
  (if task (.cancelling task) 0))

(defn :async _answer-of [litellm provider request]
  "#(response text tool-calls) of PROVIDER for REQUEST; an empty answer to the
   tools is asked once more without them (see /The conversation after a tool call/)."
  (setv response (await (_litellm-call litellm provider request)))
  (try
    (setv [text calls] (_answer response))
    (except [e _Failure]
      (when (not (and (= e.outcome ':empty) (proto-get request ':tools) (_native-tools litellm provider)))
        (raise))
      (setv response (await (_litellm-call litellm provider request :offer-tools False))
            [text calls] (_answer response))))
  #(response text calls))

(defn :async _attempt [provider request]
  "(outcome detail answer kind) for one call of PROVIDER; answer is
   (:text :tool-calls :usage) on :ok, kind the failure's (see above)."
  (when (= (get provider "model") SYMBOLIC)
    (setv r (symbolic-complete request))
    (return #(':ok "deterministic answer"
              [:text (proto-get r ':text) :tool-calls (proto-get r ':tool-calls [])
               :usage (proto-get r ':usage)]
              "ok")))
  (when (get provider "probe")
    (setv why (await (_probe provider)))
    (when why
      (return #(':unreachable why None "unreachable"))))
  (setv litellm None
        cancelling (_cancelling))
  (try
    (setv litellm (await (_litellm-ready))
          [response text calls] (await (_answer-of litellm provider request))
          usage (_usage litellm response))
    #(':ok (_short f"{(proto-get usage ':prompt-tokens)} prompt and {(proto-get usage ':completion-tokens)} completion tokens")
      [:text text :tool-calls calls :usage usage]
      "ok")
    (except [e Exception]
      (when (> (_cancelling) cancelling)
        (raise (asyncio.CancelledError) :from e))
      (setv [outcome detail kind] (_classify litellm provider e)
            wait (when (= kind "http-429") (_retry-after e)))
      (if (is wait None)
          #(outcome detail None kind)
          #(outcome (+ detail f"; retry after {wait :g} s") [:retry-after wait] kind)))))

;; * Telling the person

(defn _clause [provider kind detail]
  "What went wrong with PROVIDER, as the words after its name."
  (setv kind (or kind "error"))
  (cond
    (= kind "timeout") f"did not answer in {(.get provider "timeout" DEFAULT-TIMEOUT) :g} s"
    (= kind "no-key") (if (.get provider "api_key_env")
                          f"has no API key: the environment variable {(.get provider "api_key_env")} is not set"
                          f"has no API key: {(.replace detail " (the API key)" "")}")
    (= kind "connect") f"could not be reached ({detail})"
    (= kind "unreachable") f"is not running: {detail}"
    (= kind "http-401") f"refused the key ({detail})"
    (= kind "http-403") f"refused access ({detail})"
    (= kind "http-429") f"is over its quota or rate limit ({detail})"
    (= kind "http-404") f"does not know this model or address ({detail})"
    (.startswith kind "http-") f"answered with an error ({detail})"
    (= kind "garbage") f"answered something that is not a chat completion ({detail})"
    (= kind "not-api") f"gave no API answer: {detail} (is api_base right, or is a login page in the way?)"
    (= kind "empty") "answered nothing"
    True f"failed ({detail})"))

(defn _skip [cascade i session]
  "#(detail kind clause fresh) for provider I, skipped while its breaker is open;
   FRESH when SESSION has not heard of the incident that opened it."
  (with [(get cascade "lock")]
    (setv b (get cascade "breakers" i)
          failures (get b "failures")
          wait (max 0 (- (get cascade "cooldown") (- ((get cascade "clock")) (get b "opened-at")))))
    #(f"circuit open after {failures} failures in a row; next try in {wait :.0f} s"
      (get b "incident")
      (+ f"is paused for {wait :.0f} s"
         (if (in (get b "incident") #("timeout" "http-429")) "" f" after {failures} failures in a row")
         (if (get b "clause") f" (it {(get b "clause")})" ""))
      (_first-hearing b session))))

(defn _next-words [provider]
  "What the line says comes next, when PROVIDER is the next model asked."
  (if (= (.get provider "model") SYMBOLIC)
      "falling back to the built-in commands"
      f"trying {(.get provider "name" (.get provider "model"))}"))

;; * The cascade

(setv _PROBE-REQUEST [:messages [{"role" "user" "content" "Say ok."}]])

(defn :async _try [cascade i provider request say]
  "The attempt of provider I at REQUEST: after a short probe when its last call
   timed out, and once more after a short retry-after (SAY tells the person)."
  (setv name (.get provider "name" (.get provider "model")))
  (when (and (!= (get provider "model") SYMBOLIC) (_suspect cascade i))
    (setv probe (await (_attempt (| provider {"timeout" (get cascade "probe-deadline") "grace" 1.0
                                              "max_tokens" 1})
                                 _PROBE-REQUEST)))
    (when (not (in (get probe 0) #(':ok ':empty)))
      (return #((get probe 0) (+ "the short probe after a timeout: " (get probe 1))
                (get probe 2) (get probe 3)))))
  (setv result (await (_attempt provider request))
        wait (when (and (!= (get result 0) ':ok) (is-plist (get result 2)))
               (proto-get (get result 2) ':retry-after)))
  (when (and (is-not wait None) (<= wait RETRY-AFTER-SHORT))
    (await (say f"model {name} is over its rate limit; asking it again in {wait :g} s"))
    (await (asyncio.sleep wait))
    (setv result (await (_attempt provider request))))
  result)

(defn _failure-reason [attempts]
  (+ "all providers failed: "
     (if attempts
         (.join "; " (gfor a attempts
                           f"{(proto-get a ':provider)} {(. (proto-get a ':outcome) name)} ({(proto-get a ':detail)})"))
         "no providers are configured")))

(defn :async cascade-complete [cascade request]
  "Ask the providers of CASCADE in order; the first real answer, or a :failed plist.
   Cancelling the task that awaits it cancels the model call under way.

   (await (cascade-complete (make-cascade (default-providers))
                            [:messages [{\"role\" \"user\" \"content\" \"help\"}] :tools None
                             :signal SIGNAL :rejections [] :notify (fn [text] (print text))]))"
  (setv attempts []
        notify (proto-get request ':notify)
        session (proto-get (proto-get request ':signal) ':session)
        waiting []
        told []
        untold []
        kinds []
        fresh-any False)
  (defn failed [name kind clause fresh]
    (nonlocal fresh-any)
    (.append kinds kind)
    (when fresh (setv fresh-any True))
    (.append (if fresh waiting untold) f"model {name} {clause}"))
  (defn :async say [line]
    (.warning log "%s" line)
    (when notify
      (try (setv said (notify line))
           (when (inspect.isawaitable said)
             (await said))
           (except [e Exception]
             (.warning log "could not tell the person: %s" (_error-text e))))))
  (defn :async tell [next-words]
    (for [what waiting]
      (await (say f"{what}, {next-words}")))
    (.extend (if notify told untold) waiting)
    (.clear waiting))
  (for [[i provider] (enumerate (get cascade "providers"))]
    (setv name (.get provider "name" (.get provider "model")))
    (try
      (if (not (_admit cascade i))
          (do (setv [detail kind clause fresh] (_skip cascade i session))
              (.append attempts [:provider name :outcome :skipped :detail detail])
              (failed name kind clause fresh))
          (do (await (tell (_next-words provider)))
              (setv asked (if (and kinds (= (.get provider "model") SYMBOLIC))
                              (+ (list (or request []))
                                 [:fallback [:told (list told) :untold (list untold) :kinds (list kinds)
                                             :fresh fresh-any]])
                              request)
                    start (time.perf-counter)
                    [outcome detail answer kind] (await (_try cascade i provider asked say))
                    seconds (round (- (time.perf-counter) start) 3)
                    ok (= outcome ':ok)
                    wait (when (and (not ok) (is-plist answer)) (proto-get answer ':retry-after))
                    open-for (cond (and wait (> wait RETRY-AFTER-SHORT)) wait
                                   (and (= kind "timeout") (_healthy-after cascade i)) (get cascade "cooldown")
                                   True None)
                    clause (when (not ok) (_clause provider kind detail))
                    fresh (_record cascade i ok kind clause session open-for))
              (.append attempts [:provider name :outcome outcome :detail detail :seconds seconds])
              (when ok
                (return [:status :ok
                         :provider name
                         :text (proto-get answer ':text)
                         :tool-calls (proto-get answer ':tool-calls [])
                         :usage (proto-get answer ':usage)
                         :attempts attempts]))
              (failed name kind clause fresh)))
      (except [e Exception]
        (setv detail (_short (_error-text e))
              clause f"failed ({detail})")
        (.append attempts [:provider name :outcome :error :detail detail])
        (failed name "error" clause (_record cascade i False "error" clause session)))))
  (await (tell "and no other model is left"))
  [:status :failed :reason (_failure-reason attempts) :attempts attempts])

;; * Checking one provider

(setv CHECK-DEADLINE 5.0
      _check-tools [{"type" "function"
                     "function" {"name" "shell" "description" "run a shell command"
                                 "parameters" {"type" "object"
                                               "properties" {"cmd" {"type" "string"}}
                                               "required" ["cmd"]}}}])

(defn _check-request [result]
  "The two-turn tool conversation doctor sends, the tool's output being RESULT."
  [:messages [{"role" "system" "content" "You propose actions. Say ok when you have read the result."}
              {"role" "user" "content" "What is in the workspace?"}
              {"role" "user" "content" (+ "Result of (:action :shell :cmd \"ls\"):\n" result)
               CALL-KEY {"id" "call_doctor_1" "name" "shell" "arguments" "{\"cmd\": \"ls\"}"}}]
   :tools _check-tools])

(defn :async _check-form [provider]
  "\"native\" or \"text\": the form PROVIDER's tool results take."
  (setv litellm (await (_litellm-ready)))
  (if (and (_native-tools litellm provider) (= (_tool-results litellm provider) "native"))
      "native"
      "text"))

(defn _prompt-tokens [answer]
  (when (and answer (proto-get answer ':usage))
    (proto-get (proto-get answer ':usage) ':prompt-tokens)))

(defn :async check-provider [provider [deadline CHECK-DEADLINE]]
  "#(status detail) for PROVIDER after a one-token call of at most DEADLINE
   seconds: status \"ok\", \"warn\" (a probed local model is not running) or \"fail\".

   (await (check-provider (make-provider \"symbolic\"))) ⇒ #(\"ok\" \"the built-in commands, always there\")"
  (when (= (.get provider "model") SYMBOLIC)
    (return #("ok" "the built-in commands, always there")))
  (setv quick (| provider {"timeout" (min (float (get provider "timeout")) deadline) "max_tokens" 1})
        start (time.perf-counter)
        [outcome detail answer kind] (await (_attempt quick (_check-request "notes.txt")))
        seconds (- (time.perf-counter) start)
        native (and (in outcome #(':ok ':error ':empty)) (= (await (_check-form quick)) "native")))
  (cond (and native (= outcome ':error) (.startswith kind "http-")
             (not (in kind #("http-401" "http-403" "http-404" "http-429"))))
        (do (setv [again _ _ _] (await (_attempt (| quick {"tool_results" "text"})
                                                 (_check-request "notes.txt"))))
            (if (in again #(':ok ':empty))
                #("fail" (+ f"cannot render the results of tool calls as tool messages ({detail}); "
                            "set tool_results = \"text\" in its [[providers]] table"))
                #("fail" (_clause quick kind detail))))
        (and native (= outcome ':ok))
        (do (setv longer (await (_attempt quick (_check-request (.join "\n" (gfor i (range 40) f"file-{i}.txt")))))
                  [short long] [(_prompt-tokens answer) (_prompt-tokens (get longer 2))])
            (if (and short long (= short long))
                #("fail" (+ "drops the results of tool calls: its template renders no tool messages "
                            f"({short} prompt tokens with a short result and a long one); "
                            "set tool_results = \"text\" in its [[providers]] table"))
                #("ok" f"answered in {seconds :.2f} s")))
        (in outcome #(':ok ':empty)) #("ok" f"answered in {seconds :.2f} s")
        (= outcome ':unreachable) #("warn" (+ (_clause quick kind detail) "; the next model answers"))
        True #("fail" (_clause quick kind detail))))
