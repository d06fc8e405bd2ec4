;; * Why

"A provider is one model the cascade may ask: its LiteLLM model string, where it
is served, the name of the variable that holds its key, its deadline, how many
tokens it may answer and how it takes tools. This module makes them, one by one
or from the configuration's [[providers]] tables and PASSEPARTOUT_MODELS.
Asking them in order is cascade.org's work, one call of one of them
llm.org's."

(import os
        passepartout.settings [did-you-mean schema-keys])

;; * Providers

(setv SYMBOLIC "symbolic"
      DEFAULT-TIMEOUT 60.0
      LOCAL-TIMEOUT 30.0
      OLLAMA-BASE "http://127.0.0.1:11434"
      DEFAULT-MAX-TOKENS 1024
      TOOL-RESULTS #("native" "text")
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
