;; * Why

"Each family of models writes its calls in the syntax its chat template taught
it: tags, special tokens, Python-looking calls, harmony's channels. A server
that does not parse that syntax hands the text over as it is. This module has
a reader for each, which finds that family's calls in an answer and says where
each one stands, so that extract.org judges every family's calls by the same
rules of position and framing."

(import ast re
        passepartout.proto [ProtoError]
        passepartout.lenient [MAX-DEPTH MAX-TEXT _span-end loads-lenient]
        passepartout.calls [action-name call-action object-proposals])

;; * Python-looking calls

(defn _literal [node]
  (cond
    (isinstance node ast.Constant)
    (if (isinstance node.value #(str int float bool (type None)))
        node.value
        (raise (ProtoError "only literal arguments are accepted")))
    (isinstance node #(ast.List ast.Tuple)) (lfor e node.elts (_literal e))
    (isinstance node ast.Dict)
    (dfor [k v] (zip node.keys node.values) (_literal k) (_literal v))
    (and (isinstance node ast.UnaryOp) (isinstance node.op ast.USub)
         (isinstance node.operand ast.Constant) (isinstance node.operand.value #(int float)))
    (- node.operand.value)
    True (raise (ProtoError "only literal arguments are accepted"))))

(defn _call-name [func]
  (setv parts [])
  (while (isinstance func ast.Attribute)
    (.insert parts 0 func.attr)
    (setv func func.value))
  (when (not (isinstance func ast.Name))
    (raise (ProtoError "a call must name its tool")))
  (.insert parts 0 func.id)
  (when (and (> (len parts) 1) (= (get parts -1) "call"))
    (setv parts (cut parts -1)))
  (get parts -1))

(defn pythonic-proposals [source]
  "The proposal plists of the Python-looking calls in SOURCE, or ProtoError."
  (when (> (len source) MAX-TEXT)
    (raise (ProtoError f"call larger than {MAX-TEXT} characters")))
  (try
    (setv body (. (ast.parse (.strip source) :mode "eval") body))
    (except [e #(SyntaxError ValueError RecursionError MemoryError)]
      (raise (ProtoError f"the call is not readable: {(. (type e) __name__)}"))))
  (setv calls (if (isinstance body #(ast.List ast.Tuple)) body.elts [body]))
  (lfor c calls
        (do (when (and (isinstance c ast.Call) (isinstance c.func ast.Name) (= c.func.id "print")
                       (= (len c.args) 1))
              (setv c (get c.args 0)))
            (when (not (isinstance c ast.Call))
              (raise (ProtoError "expected a call such as shell(cmd=\"ls\")")))
            (when c.args
              (raise (ProtoError "name every argument, as in shell(cmd=\"ls\")")))
            (call-action (_call-name c.func)
                         (dfor k c.keywords
                               (do (when (is k.arg None)
                                     (raise (ProtoError "name every argument")))
                                   k.arg)
                               (_literal k.value))))))

;; * Readers by family

(setv _tool-call-re (re.compile r"<(tool_call|function_call)>\s*(.*?)\s*(?:</\1>|\Z)" (| re.S re.I))
      _function-tag-re (re.compile r"<function=([^>\s]+)>\s*(.*?)\s*(?:</function>|(?=<function=)|\Z)" re.S)
      _parameter-re (re.compile r"<parameter=([^>\s]+)>\n?(.*?)\n?(?:</parameter>|(?=<parameter=)|(?=</function>)|\Z)" re.S)
      _glm-re (re.compile r"\A([A-Za-z][\w.-]*)\s*(<arg_key>.*)\Z" re.S)
      _arg-pair-re (re.compile r"<arg_key>\s*(.*?)\s*</arg_key>\s*<arg_value>(.*?)</arg_value>" re.S)
      _invoke-block-re (re.compile r"<(function_calls|minimax:tool_call)>(.*?)(?:</\1>|\Z)" re.S)
      _invoke-re (re.compile r"<invoke(?:\s+name=\"([^\"]*)\")?\s*>(.*?)(?:</invoke>|\Z)" re.S)
      _named-param-re (re.compile r"<parameter\s+name=\"([^\"]*)\"\s*>(.*?)</parameter>" re.S)
      _old-invoke-re (re.compile r"<tool_name>\s*(.*?)\s*</tool_name>\s*(?:<parameters>(.*?)</parameters>)?" re.S)
      _xml-field-re (re.compile r"<([A-Za-z_][\w-]*)>(.*?)</\1>" re.S)
      _deepseek-re (re.compile r"<｜tool▁calls▁begin｜>(.*?)(?:<｜tool▁calls▁end｜>|\Z)" re.S)
      _deepseek-call-re (re.compile (+ r"<｜tool▁call▁begin｜>(?:function<｜tool▁sep｜>([^\n<]+?)\s*\n"
                                       r"|([^<｜]+?)<｜tool▁sep｜>)(.*?)(?:<｜tool▁call▁end｜>|\Z)")
                                    re.S)
      _kimi-re (re.compile r"(?:\A|(?<=[\s>.:!?\"'`(}\]]))functions\.([A-Za-z][\w-]*):\d+\s*(?=[{\[])")
      _mistral-re (re.compile r"\[TOOL_CALLS\]")
      _mistral-args-re (re.compile r"\s*([A-Za-z][\w.-]*)\s*(?:\[CALL_ID\]\s*[\w-]*\s*)?\[ARGS\]")
      _functionary-re (re.compile r"(?:^|(?<=[}\].!?:]))>>>\s*([A-Za-z][\w.-]*)[ \t]*\n?" re.M)
      _qwen-agent-re (re.compile r"✿FUNCTION✿\s*:\s*([^\n✿]+?)\s*✿ARGS✿\s*:\s*")
      _qwen-agent-tail-re (re.compile r"\s*✿RESULT✿\s*:?")
      _react-re (re.compile r"^[ \t]*Action[ \t]*:[ \t]*([A-Za-z][\w.-]*)[ \t]*\n[ \t]*Action[ \t]+Input[ \t]*:[ \t]*" re.M)
      _react-tail-re (re.compile r"\s*Observation\s*:?")
      _bare-name-re (re.compile r"^[ \t]*([A-Za-z][\w-]*)[ \t]*\n?[ \t]*(?=\{)" re.M)
      _json-lead-re (re.compile r"[ \t]*\n?[ \t]*(?:```(?:json)?[ \t]*\n?)?\s*")
      _json-trail-re (re.compile r"\s*```")
      _json-open-re (re.compile r"[\[{]")
      _SOLE-FIELD {"shell" "cmd" "read-file" "path" "memory-search" "query" "message" "text"})

(defn _json-at [text pos]
  "#(value end) of the JSON value that starts at POS of TEXT, after blanks and a
   =json= fence (whose closing is taken too); ProtoError when none reads."
  (setv start (.end (.match _json-lead-re text pos)))
  (when (or (>= start (len text)) (not (in (get text start) "{[")))
    (raise (ProtoError "the call's arguments are not a JSON object")))
  (setv [end closed depth] (_span-end text start))
  (when (> depth MAX-DEPTH)
    (raise (ProtoError f"the call's JSON is nested deeper than {MAX-DEPTH}")))
  (when (not closed)
    (raise (ProtoError "the call's JSON is not closed (was the answer cut off?)")))
  (setv value (loads-lenient (cut text start end))
        fence (.match _json-trail-re text end))
  #(value (if fence (.end fence) end)))

(defn _json-values [text]
  "Each balanced JSON object or array in TEXT, decoded; ProtoError when one does not read."
  (setv out []
        i 0)
  (while True
    (setv found (.search _json-open-re text i))
    (when (not found) (break))
    (setv [value i] (_json-at text (.start found)))
    (.append out value))
  out)

(defn _from-values [values what]
  (setv out [])
  (for [v values]
    (setv p (object-proposals v))
    (when (is p None)
      (raise (ProtoError f"{what} does not hold a call: give {{\"name\": …, \"arguments\": {{…}}}}")))
    (.extend out p))
  out)

(defn _span [start end read]
  "#(start end proposals error) for the call at START..END, READ being the function that reads it."
  (try #(start end (read) None)
       (except [e ProtoError]
         #(start end None (str e)))))

(defn _xml-value [text]
  "An XML argument's value: its text, trimmed of the newline templates put around it."
  (.strip text "\n"))

(defn _function-calls [body]
  "The calls of Qwen3-Coder's (or Llama 3.1's) =<function=…>= elements in BODY."
  (lfor m (.finditer _function-tag-re body)
        (do (setv inner (.group m 2))
            (when (and (in "<parameter=" inner) (not (.endswith (.group m 0) "</function>")))
              (raise (ProtoError "the <function=…> call is not closed (was the answer cut off?)")))
            (if (in "<parameter=" inner)
                (call-action (.group m 1) (dfor p (.finditer _parameter-re inner)
                                                (.group p 1) (_xml-value (.group p 2))))
                (call-action (.group m 1) inner)))))

(defn _tool-call-body [body]
  "The calls inside one =<tool_call>= (JSON, Qwen3-Coder's XML or GLM's pairs)."
  (setv glm (.match _glm-re body))
  (cond
    (.startswith (.lstrip body) "<function=") (_function-calls body)
    glm (do (setv args (dfor p (.finditer _arg-pair-re (.group glm 2))
                             (.group p 1) (_xml-value (.group p 2))))
            (when (not args) (raise (ProtoError "the <arg_key>/<arg_value> pairs do not read")))
            [(call-action (.group glm 1) args)])
    True (_from-values (_json-values body) "<tool_call>")))

(defn _invoke-calls [body]
  "The calls of the =<invoke>= elements in BODY (MiniMax and Anthropic-style XML)."
  (setv out [])
  (for [m (.finditer _invoke-re body)]
    (if (.group m 1)
        (.append out (call-action (.group m 1) (dfor p (.finditer _named-param-re (.group m 2))
                                                     (.group p 1) (_xml-value (.group p 2)))))
        (do (setv old (.search _old-invoke-re (.group m 2)))
            (when (not old) (raise (ProtoError "an <invoke> names no tool")))
            (.append out (call-action (.group old 1)
                                      (dfor p (.finditer _xml-field-re (or (.group old 2) ""))
                                            (.group p 1) (_xml-value (.group p 2))))))))
  (when (not out) (raise (ProtoError "the block holds no <invoke>")))
  out)

(defn _deepseek-calls [body]
  (setv out (lfor m (.finditer _deepseek-call-re body)
                  (call-action (.strip (or (.group m 1) (.group m 2))) (get (_json-at (.group m 3) 0) 0))))
  (when (not out) (raise (ProtoError "the tool-call block holds no call")))
  out)

(defn _mistral-calls [text pos]
  "#(calls end) of the Mistral call whose =[TOOL_CALLS]= ends at POS."
  (setv named (.match _mistral-args-re text pos))
  (if named
      (do (setv out [])
          (while named
            (setv [value end] (_json-at text (.end named)))
            (.append out (call-action (.group named 1) value))
            (setv pos end
                  named (.match _mistral-args-re text pos)))
          #(out pos))
      (do (setv [value end] (_json-at text pos))
          #((_from-values [value] "[TOOL_CALLS]") end))))

(defn _react-input [name text pos]
  "#(arguments end) of a ReAct =Action Input= at POS: JSON, or a line for the action's one field."
  (setv start (.end (.match _json-lead-re text pos)))
  (if (and (< start (len text)) (in (get text start) "{["))
      (_json-at text pos)
      (do (setv line-end (if (>= (.find text "\n" pos) 0) (.find text "\n" pos) (len text))
                value (.strip (.strip (cut text pos line-end)) "\"'`")
                field (.get _SOLE-FIELD (action-name name)))
          (when (not field)
            (raise (ProtoError f"Action Input for {name} must be a JSON object of its fields")))
          #({field value} line-end))))

(setv MAX-CALLS 64)

(defn _count-markers [text]
  "How many call markers of any family TEXT holds, counting up to MAX-CALLS + 1."
  (setv n 0)
  (for [r [_tool-call-re _invoke-re _function-tag-re _deepseek-call-re _mistral-re _kimi-re
           _qwen-agent-re _react-re _functionary-re]]
    (for [_ (.finditer r text)]
      (+= n 1)
      (when (> n MAX-CALLS) (return n))))
  n)

(defn _family-spans [text known]
  "#(start end proposals error) of every call written in a family's call syntax in TEXT.
   More than MAX-CALLS calls in one answer is no proposal but a ProtoError: no
   model means that many, and reading each would cost the loop seconds."
  (when (> (_count-markers text) MAX-CALLS)
    (raise (ProtoError f"the answer holds more than {MAX-CALLS} calls: propose one action")))
  (setv out []
        unclosed-from (len text))
  (defn free [start]
    ;; a call that starts inside one already read, or after one left open (all
    ;; the rest of the answer is inside that one), is not read again
    (and (< start unclosed-from)
         (not (any (gfor s out (<= (get s 0) start (- (get s 1) 1)))))))
  (defn add [start end read]
    (when (free start) (.append out (_span start end read))))
  (for [m (.finditer _tool-call-re text)]
    (add (.start m) (.end m) (fn [[body (.group m 2)]] (_tool-call-body body))))
  (for [m (.finditer _invoke-block-re text)]
    (add (.start m) (.end m) (fn [[body (.group m 2)]] (_invoke-calls body))))
  (for [m (.finditer _function-tag-re text)]
    (add (.start m) (.end m) (fn [[body (.group m 0)]] (_function-calls body))))
  (for [m (.finditer _deepseek-re text)]
    (add (.start m) (.end m) (fn [[body (.group m 1)]] (_deepseek-calls body))))
  (defn add-at [m read]
    "A call whose end only reading it tells."
    (nonlocal unclosed-from)
    (when (free (.start m))
      (try (setv [calls end] (read))
           (.append out #((.start m) end calls None))
           (except [e ProtoError]
             (when (in "not closed" (str e))
               (setv unclosed-from (.start m)))
             (.append out #((.start m) (.end m) None (str e)))))))
  (for [m (.finditer _mistral-re text)]
    (add-at m (fn [[m m]] (_mistral-calls text (.end m)))))
  (for [m (.finditer _kimi-re text)]
    (add-at m (fn [[m m]] (setv [v end] (_json-at text (.end m)))
                #([(call-action (.group m 1) v)] end))))
  (for [m (.finditer _qwen-agent-re text)]
    (add-at m (fn [[m m]] (setv [v end] (_json-at text (.end m))
                                tail (.match _qwen-agent-tail-re text end))
                #([(call-action (.group m 1) v)] (if tail (.end tail) end)))))
  (for [m (.finditer _react-re text)]
    (add-at m (fn [[m m]] (setv [v end] (_react-input (.group m 1) text (.end m))
                                tail (.match _react-tail-re text end))
                #([(call-action (.group m 1) v)] (if tail (.end tail) end)))))
  (for [m (.finditer _functionary-re text)]
    (when (!= (.group m 1) "all")
      (add-at m (fn [[m m]] (setv [v end] (_json-at text (.end m)))
                  #([(call-action (.group m 1) v)] end)))))
  (for [m (.finditer _bare-name-re text)]
    (when (>= (len out) MAX-CALLS) (break))
    (when (in (try (action-name (.group m 1)) (except [ProtoError] "")) known)
      (add-at m (fn [[m m]] (setv [v end] (_json-at text (.end m)))
                  #([(call-action (.group m 1) v)] end)))))
  (sorted out :key (fn [s] (get s 0))))

;; ** Harmony

(setv _harmony-token-re
      (re.compile (+ r"(?:<\|start\|>\s*assistant)?(?:\s*to=([\w.-]+))?\s*<\|channel\|>\s*(analysis|commentary|final)"
                     r"(?:\s+to=([\w.-]+))?\s*(?:<\|constrain\|>\s*\w+|json)?\s*<\|message\|>"
                     r"(.*?)(?=<\|end\|>|<\|call\|>|<\|return\|>|<\|start\|>|<\|channel\|>|\Z)")
                  re.S)
      _harmony-bare-start-re (re.compile r"\A\s*(?:analysis|commentary|final)(?:[^\s]| to=)")
      _harmony-bare-re
      (re.compile (+ r"(?:\A\s*|assistant)(?:\s*to=(functions\.[\w-]+?))?(analysis|commentary|final)"
                     r"(?:\s+to=([\w.-]+))?(?:\s*json)?(?=\W|[A-Z]|\Z)"
                     r"(.*?)(?=assistant(?:\s*to=functions\.[\w-]+?)?(?:analysis|commentary|final)|\Z)")
                  re.S))

(defn harmony-parts [text]
  "(calls preamble final) of a harmony answer TEXT, calls being #(recipient arguments);
   None when TEXT is not written in harmony's channels."
  (setv parts (cond (in "<|channel|>" text) (list (.finditer _harmony-token-re text))
                    (.match _harmony-bare-start-re text) (list (.finditer _harmony-bare-re text))
                    True []))
  (when (not parts)
    (return None))
  (setv calls []
        preamble []
        final [])
  (for [m parts]
    (setv channel (.group m 2)
          recipient (or (.group m 1) (.group m 3))
          body (.strip (.group m 4)))
    (cond (= channel "analysis") None
          recipient (.append calls #(recipient body))
          (= channel "commentary") (.append preamble body)
          True (.append final body)))
  [calls (.join "\n" (gfor p preamble :if p p)) (.join "\n" (gfor f final :if f f))])
