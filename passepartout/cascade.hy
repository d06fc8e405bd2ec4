(import json os socket threading time
        importlib.util [find-spec]
        urllib.parse [urlsplit]
        passepartout.config [did-you-mean schema-keys]
        passepartout.proto [proto-get]
        passepartout.symbolic [symbolic-complete])

(setv SYMBOLIC "symbolic"
      DEFAULT-TIMEOUT 60.0
      LOCAL-TIMEOUT 30.0
      PROBE-TIMEOUT 0.25
      OLLAMA-BASE "http://127.0.0.1:11434"
      DEFAULT-MAX-TOKENS 1024
      _provider-keys (schema-keys "providers"))

(defn _local-model [model]
  (.startswith model #("ollama/" "ollama_chat/")))

(defn make-provider [model [name None] [api-base None] [api-key-env None] [timeout None] [probe None]
                     [max-tokens None]]
  "A provider dict for a LiteLLM MODEL string, or for \"symbolic\".

   (make-provider \"openai/gpt-4o-mini\" :api-key-env \"OPENAI_API_KEY\")"
  (when (not (and (isinstance model str) (.strip model)))
    (raise (ValueError f"a provider needs a model string, got {model !r}")))
  (setv model (.strip model)
        local (_local-model model)
        timeout (if (is timeout None) (if local LOCAL-TIMEOUT DEFAULT-TIMEOUT) timeout))
  (when (or (isinstance timeout bool) (not (isinstance timeout #(int float))) (<= timeout 0))
    (raise (ValueError f"provider {model}: timeout must be a positive number of seconds, got {timeout !r}")))
  (setv max-tokens (if (is max-tokens None) DEFAULT-MAX-TOKENS max-tokens))
  (when (or (isinstance max-tokens bool) (not (isinstance max-tokens int)) (<= max-tokens 0))
    (raise (ValueError f"provider {model}: max_tokens must be a positive whole number, got {max-tokens !r}")))
  {"name" (or name model)
   "model" model
   "api_base" (or api-base (when local OLLAMA-BASE))
   "api_key_env" (or api-key-env None)
   "timeout" (float timeout)
   "probe" (if (is probe None) local (bool probe))
   "max_tokens" max-tokens})

(defn default-providers []
  "What runs with no configuration: a local Ollama if one answers, then the symbolic provider."
  [(make-provider "ollama_chat/llama3.2" :api-base OLLAMA-BASE :probe True :timeout LOCAL-TIMEOUT)
   (make-provider SYMBOLIC)])

(defn _provider-from-table [entry]
  (when (isinstance entry str)
    (return (make-provider entry)))
  (when (not (isinstance entry dict))
    (raise (ValueError f"a [[providers]] entry must be a table, got {entry !r}")))
  (setv table (dfor [k v] (.items entry) (.replace k "-" "_") v)
        unknown (sorted (- (set table) (set _provider-keys))))
  (when unknown
    (raise (ValueError (+ f"unknown key {(get unknown 0) !r} in a [[providers]] table; "
                          (did-you-mean (get unknown 0) _provider-keys)))))
  (when (not (.get table "model"))
    (raise (ValueError "a [[providers]] table needs a model, e.g. model = \"openai/gpt-4o-mini\"")))
  (make-provider (get table "model")
                 :name (.get table "name")
                 :api-base (.get table "api_base")
                 :api-key-env (.get table "api_key_env")
                 :timeout (.get table "timeout")
                 :probe (.get table "probe")
                 :max-tokens (.get table "max_tokens")))

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
                      (lfor t tables (_provider-from-table t))))
  (when (not providers)
    (setv providers (default-providers)))
  (when (not (any (gfor p providers (= (get p "model") SYMBOLIC))))
    (.append providers (make-provider SYMBOLIC)))
  (_unique-names providers))

(defn make-cascade [providers [cooldown 60.0] [failure-threshold 3] [clock time.monotonic]]
  "The state of a cascade over PROVIDERS, with one circuit breaker each."
  (setv providers (list providers))
  {"providers" providers
   "cooldown" (float cooldown)
   "failure-threshold" (max 1 (int failure-threshold))
   "clock" clock
   "breakers" (lfor _ providers {"failures" 0 "opened-at" None})
   "lock" (threading.Lock)})

(defn _admit [cascade i]
  "True when provider I may be called now."
  (with [(get cascade "lock")]
    (setv b (get cascade "breakers" i))
    (cond (< (get b "failures") (get cascade "failure-threshold")) True
          (>= (- ((get cascade "clock")) (get b "opened-at")) (get cascade "cooldown"))
          (do (setv (get b "opened-at") ((get cascade "clock")))
              True)
          True False)))

(defn _record [cascade i ok]
  (with [(get cascade "lock")]
    (setv b (get cascade "breakers" i))
    (if ok
        (setv (get b "failures") 0
              (get b "opened-at") None)
        (do (+= (get b "failures") 1)
            (when (>= (get b "failures") (get cascade "failure-threshold"))
              (setv (get b "opened-at") ((get cascade "clock"))))))))

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

(defclass _Failure [Exception]
  (defn __init__ [self outcome detail]
    (.__init__ (super) detail)
    (setv self.outcome outcome
          self.detail detail)))

(defn _short [text [limit 200]]
  "TEXT on one line, cut to LIMIT characters."
  (setv text (.join " " (.split (str text))))
  (if (> (len text) limit) (+ (cut text (- limit 1)) "…") text))

(defn _probe [provider]
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
    (.close (socket.create-connection #(host port) PROBE-TIMEOUT))
    None
    (except [e OSError]
      f"nothing accepts connections at {host}:{port} ({(or e.strerror (. (type e) __name__))})")))

(setv _litellm None
      _tool-flags {}
      _litellm-lock (threading.Lock))

(defn _litellm-module []
  (global _litellm _tool-flags)
  (with [_litellm-lock]
    (when (is _litellm None)
      (os.environ.setdefault "LITELLM_LOCAL_MODEL_COST_MAP" "True")
      (import litellm)
      (setv litellm.suppress-debug-info True
            _tool-flags (if (and (is (find-spec "mcp") None)
                                 (is-not (find-spec "litellm.responses.mcp.chat_completions_handler") None))
                            {"_skip_mcp_handler" True}
                            {})
            _litellm litellm)))
  _litellm)

(setv DEADLINE-GRACE 5.0)

(defn _with-deadline [f seconds]
  "The value of (F), or a :timeout _Failure when it takes longer than SECONDS."
  (setv box {})
  (defn run []
    (try (setv (get box "value") (f))
         (except [e BaseException]
           (setv (get box "error") e))))
  (setv t (threading.Thread :target run :daemon True :name "passepartout-provider"))
  (.start t)
  (.join t seconds)
  (cond (.is-alive t) (raise (_Failure ':timeout f"no complete answer within {seconds :g} s"))
        (in "error" box) (raise (get box "error"))
        True (get box "value")))

(defn _litellm-call [litellm provider request]
  "LiteLLM's response from PROVIDER to REQUEST."
  (setv key-env (get provider "api_key_env")
        tools (proto-get request ':tools)
        kwargs {"model" (get provider "model")
                "messages" (proto-get request ':messages [])
                "timeout" (get provider "timeout")
                "max_tokens" (.get provider "max_tokens" DEFAULT-MAX-TOKENS)
                "num_retries" 0})
  (when key-env
    (when (not (.get os.environ key-env))
      (raise (_Failure ':error f"the environment variable {key-env} (the API key) is not set")))
    (setv (get kwargs "api_key") (get os.environ key-env)))
  (when (get provider "api_base")
    (setv (get kwargs "api_base") (get provider "api_base")))
  (when tools
    (.update kwargs {"tools" tools #** _tool-flags}))
  (_with-deadline (fn [] (litellm.completion #** kwargs))
                  (+ (get provider "timeout") DEADLINE-GRACE)))

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

(defn _classify [litellm provider e]
  "(outcome detail) for the exception E raised while calling PROVIDER."
  (setv bad-json (_cause-of e json.JSONDecodeError))
  (cond
    (isinstance e _Failure) #(e.outcome e.detail)
    (or (and litellm (isinstance e litellm.Timeout)) (_cause-of e TimeoutError))
    #(':timeout (+ "no answer within " (format (get provider "timeout") "g") " s"))
    bad-json #(':garbage (_short f"the answer is not JSON ({bad-json})"))
    True #(':error (_short (_error-text e)))))

(defn _attempt [provider request]
  "(outcome detail answer) for one call of PROVIDER; answer is (:text :tool-calls :usage) on :ok."
  (when (= (get provider "model") SYMBOLIC)
    (setv r (symbolic-complete request))
    (return #(':ok "deterministic answer"
              [:text (proto-get r ':text) :tool-calls (proto-get r ':tool-calls [])
               :usage (proto-get r ':usage)])))
  (when (get provider "probe")
    (setv why (_probe provider))
    (when why
      (return #(':unreachable why None))))
  (setv litellm None)
  (try
    (setv litellm (_litellm-module)
          response (_litellm-call litellm provider request)
          [text calls] (_answer response)
          usage (_usage litellm response))
    #(':ok (_short f"{(proto-get usage ':prompt-tokens)} prompt and {(proto-get usage ':completion-tokens)} completion tokens")
      [:text text :tool-calls calls :usage usage])
    (except [e Exception]
      (setv [outcome detail] (_classify litellm provider e))
      #(outcome detail None))))

(defn _failure-reason [attempts]
  (+ "all providers failed: "
     (if attempts
         (.join "; " (gfor a attempts
                           f"{(proto-get a ':provider)} {(. (proto-get a ':outcome) name)} ({(proto-get a ':detail)})"))
         "no providers are configured")))

(defn _skip-detail [cascade i]
  (setv b (get cascade "breakers" i)
        wait (- (get cascade "cooldown") (- ((get cascade "clock")) (get b "opened-at"))))
  (setv failures (get b "failures"))
  f"circuit open after {failures} failures in a row; next try in {(max wait 0) :.0f} s")

(defn cascade-complete [cascade request]
  "Ask the providers of CASCADE in order; the first real answer, or a :failed plist.

   (cascade-complete (make-cascade (default-providers))
                     [:messages [{\"role\" \"user\" \"content\" \"help\"}] :tools None
                      :signal SIGNAL :rejections []])"
  (setv attempts [])
  (for [[i provider] (enumerate (get cascade "providers"))]
    (setv name (.get provider "name" (.get provider "model")))
    (try
      (if (not (_admit cascade i))
          (.append attempts
                   [:provider name :outcome :skipped
                    :detail (_skip-detail cascade i)])
          (do (setv start (time.perf-counter)
                    [outcome detail answer] (_attempt provider request)
                    seconds (round (- (time.perf-counter) start) 3))
              (_record cascade i (= outcome ':ok))
              (.append attempts [:provider name :outcome outcome :detail detail :seconds seconds])
              (when (= outcome ':ok)
                (return [:status :ok
                         :provider name
                         :text (proto-get answer ':text)
                         :tool-calls (proto-get answer ':tool-calls [])
                         :usage (proto-get answer ':usage)
                         :attempts attempts]))))
      (except [e Exception]
        (_record cascade i False)
        (.append attempts [:provider name :outcome :error :detail (_short (_error-text e))]))))
  [:status :failed :reason (_failure-reason attempts) :attempts attempts])
