;; * Why

"One attempt of one provider at one request, and all that can go wrong in it:
the probe of a local model, LiteLLM imported once and off the loop, the call
under a deadline and cancelled with the task that awaits it, the answer read
into text and tool calls, and a failure told in words a person can act on.
An attempt never raises but for a cancellation: it answers an outcome, which
the cascade (cascade.org) counts against the provider's breaker and tells
the person."

(import asyncio json os re socket threading time warnings
        importlib.util [find-spec]
        urllib.parse [urlsplit]
        passepartout.proto [proto-get]
        passepartout.display [valid-unicode]
        passepartout.symbolic [symbolic-complete]
        passepartout.providers [SYMBOLIC DEFAULT-MAX-TOKENS]
        passepartout.wire [_native-tools _tool-results native-messages text-messages
                           without-text-protocol])

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

(setv PROBE-TIMEOUT 0.25)

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
   tools is asked once more without them (see =wire.org=)."
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
