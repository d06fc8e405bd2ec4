;; * Why

"Reason builds one neutral conversation; each provider receives it in the form
its server can render: the tools as definitions or only as text in the system
prompt, the results of tool calls as tool messages or as turns of text. This
module decides the form for a provider and writes the messages in it; the call
that sends them is llm.org's."

(import json re)

;; * Tools, natively or as text

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

;; ** The conversation after a tool call

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
