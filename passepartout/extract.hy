;; * Why

"A model's answer is text, and this module reads it into what the model meant:
the actions it proposed, as plists, or a message for the person, or, when it
tried to propose and failed, a precise error the model is told about. It reads
the forms models actually write, and it reads them as data only: nothing in an
answer is evaluated."

(import ast json re
        hy.models [Keyword]
        passepartout.proto [ProtoError kw proto-get proto-put proto-has proto-without
                            proto-read proto-normalize proto-from-data is-plist])

;; * Bounds and vocabulary

(setv MAX-TEXT 65536
      MAX-DEPTH 32
      MAX-UNCLOSED 64
      ACTIONS #{"message" "shell" "read-file" "write-file" "memory-add" "memory-search"
                "spawn" "schedule"})

;; * Reasoning and stop tokens

(setv _THINK-TAGS "think|thinking|reasoning|reflection|thought"
      _closed-re (re.compile (+ r"<(" _THINK-TAGS r")>.*?</\1>|\[THINK\].*?\[/THINK\]"
                                r"|<\|channel\|>analysis<\|message\|>.*?(?:<\|end\|>|$)")
                             (| re.S re.I))
      _close-only-re (re.compile (+ r"\A.*?(?:</(?:" _THINK-TAGS r")>|\[/THINK\])") (| re.S re.I))
      _open-re (re.compile (+ r"<(?:" _THINK-TAGS r")>|\[THINK\]") re.I)
      _stop-re (re.compile
                 (+ r"<\|channel\|>\w+(?:\s+to=[\w.]+)?(?:\s*<\|constrain\|>\w+)?<\|message\|>"
                    r"|<\|[a-z_]+\|>"
                    r"|<end_of_turn>|<start_of_turn>model|</s>|^assistant\s*\n"
                    r"|<｜(?:end▁of▁sentence|begin▁of▁sentence|Assistant|User)｜>")
                 re.I))

(defn strip-reasoning [text]
  "TEXT without its reasoning blocks and chat-template stop tokens.
   Raises ProtoError when the answer ends inside an unclosed reasoning block."
  (setv text (.sub _closed-re "" text))
  (when (.search _close-only-re text)
    (setv text (.sub _close-only-re "" text :count 1)))
  (setv m (.search _open-re text))
  (when m
    (setv before (cut text (.start m)))
    (when (not (.strip (.sub _stop-re "" before)))
      (raise (ProtoError (+ "the answer ended inside an unclosed " (.group m 0)
                            " block: close the reasoning and give the action after it"))))
    (setv text before))
  (.strip (.sub _stop-re "" text)))

;; * Lenient JSON

(setv _json5 None)

(defn _json5-loads [text]
  (global _json5)
  (when (is _json5 None)
    (import json5)
    (setv _json5 json5))
  (_json5.loads text))

(defn _escape-controls [text]
  "TEXT with raw control characters inside its quoted strings escaped."
  (setv out []
        quote None
        escaped False)
  (for [c text]
    (cond
      escaped (do (.append out c) (setv escaped False))
      (and quote (= c "\\")) (do (.append out c) (setv escaped True))
      (and quote (= c quote)) (do (.append out c) (setv quote None))
      (and quote (< (ord c) 32)) (.append out (.format "\\u{:04x}" (ord c)))
      (and (not quote) (in c "\"'")) (do (.append out c) (setv quote c))
      True (.append out c)))
  (.join "" out))

(defn loads-lenient [text]
  "The value of the JSON (or JSON5) TEXT; ProtoError with the standard parser's
   reason when neither reads it."
  (when (> (len text) MAX-TEXT)
    (raise (ProtoError f"JSON larger than {MAX-TEXT} characters")))
  (try
    (return (json.loads text :strict False))
    (except [e ValueError]
      (setv first-error e)))
  (try
    (return (_json5-loads (_escape-controls text)))
    (except [e #(ValueError RecursionError MemoryError)]))
  (setv value (or (_python-literal text) (_requoted text)))
  (when (is value None)
    (raise (ProtoError f"not valid JSON: {first-error}")))
  value)

(setv _skeleton-re (re.compile r"[\s\"'\\]"))

(defn _python-literal [text]
  "The dict or list TEXT writes as a Python literal, or None."
  (try (setv value (ast.literal-eval (.strip text)))
       (except [Exception] (return None)))
  (when (isinstance value #(dict list)) value))

(defn _requoted [text]
  "The dict or list json-repair reads in TEXT, when its repair only changed quoting; else None."
  (import json-repair)
  (try (setv value (json-repair.loads text :skip-json-loads True))
       (except [Exception] (return None)))
  (when (and (isinstance value #(dict list)) value
             (= (.sub _skeleton-re "" (json.dumps value :ensure-ascii False))
                (.sub _skeleton-re "" text)))
    value))

;; * Spans

(setv _pairs {"{" "}" "[" "]" "(" ")"}
      _plain-re (re.compile r"[^\"'{}\[\]()/;\\]+")
      _in-string-re (re.compile r"[^\"'\\]+"))

(defn _span-end [text start]
  "#(end closed depth) of the form that opens at START in TEXT."
  (setv lisp (= (get text start) "(")
        stack []
        quote None
        escaped False
        depth 0
        i start
        n (len text))
  (while (< i n)
    ;; runs of characters that change nothing are skipped at C speed
    (setv run (cond escaped None
                    quote (.match _in-string-re text i)
                    True (.match _plain-re text i)))
    (when run
      (setv i (.end run))
      (when (>= i n) (break)))
    (setv c (get text i))
    (cond
      quote (cond escaped (setv escaped False)
                  (= c "\\") (setv escaped True)
                  (= c quote) (setv quote None))
      (or (= c "\"") (and (= c "'") (not lisp))) (setv quote c)
      (and lisp (= c ";")) (setv i (- (if (>= (.find text "\n" i) 0) (.find text "\n" i) n) 1))
      (and (not lisp) (.startswith text "//" i) (or (= i 0) (!= (get text (- i 1)) ":")))
      (setv i (- (if (>= (.find text "\n" i) 0) (.find text "\n" i) n) 1))
      (and (not lisp) (.startswith text "/*" i))
      (setv i (+ (if (>= (.find text "*/" (+ i 2)) 0) (.find text "*/" (+ i 2)) n) 1))
      (in c _pairs) (do (.append stack (get _pairs c))
                        (setv depth (max depth (len stack))))
      (in c ")]}") (do (when (or (not stack) (!= (.pop stack) c))
                         (return #((+ i 1) False depth)))
                       (when (not stack) (return #((+ i 1) True depth)))))
    (+= i 1))
  #(n False depth))

;; * Normalising what was read

(setv _NAME-KEYS #("name" "tool" "tool_name" "function" "recipient_name")
      _ARGS-KEYS #("arguments" "parameters" "args" "input" "tool_input" "action_input" "params")
      _ALIASES {"shell" {"command" "cmd"}
                "message" {"message" "text" "content" "text" "response" "text"}})

(defn action-name [name]
  "The action NAME (a call's name as a model wrote it) stands for, or ProtoError."
  (when (not (isinstance name str))
    (raise (ProtoError f"tool name {name !r} is not a name")))
  (setv n (.strip name))
  (for [prefix #("functions." "default_api." "tools." "tool." "api.")]
    (when (.startswith n prefix) (setv n (cut n (len prefix) None))))
  (when (not (re.fullmatch r"[A-Za-z][A-Za-z0-9_-]*" n))
    (raise (ProtoError f"tool name {name !r} is not a name")))
  (.replace (.lower n) "_" "-"))

(defn _aliased [action]
  "The action plist ACTION with its action's argument aliases renamed."
  (setv name (proto-get action ':action)
        table (.get _ALIASES (if (isinstance name Keyword) name.name "") {}))
  (for [[alias field] (.items table)]
    (when (and (proto-has action (kw alias)) (not (proto-has action (kw field))))
      (setv action (proto-put (proto-without action [(kw alias)]) (kw field)
                              (proto-get action (kw alias))))))
  action)

(defn _args-dict [arguments]
  (when (isinstance arguments str)
    (setv arguments (if (.strip arguments) (loads-lenient arguments) {})))
  (when (is arguments None) (setv arguments {}))
  (when (not (isinstance arguments dict))
    (raise (ProtoError "tool-call arguments must be an object")))
  (_given arguments))

(defn _given [d]
  "The dict D without the keys whose value is null: an argument not given."
  (dfor [k v] (.items d) :if (is-not v None) k v))

(defn call-action [name arguments]
  "The action plist of a call NAME with ARGUMENTS (a dict, or JSON text)."
  (setv action (action-name name)
        fields (proto-normalize (proto-from-data (_args-dict arguments))))
  (_aliased (+ [:action (kw action)] (proto-without fields [':action]))))

(defn _name-and-args [data]
  "#(name arguments) when the dict DATA is shaped as a call, else None."
  (setv name-key (next (gfor k _NAME-KEYS :if (isinstance (.get data k) str) k) None)
        args-key (next (gfor k _ARGS-KEYS :if (in k data) k) None))
  (when (and name-key (or args-key (= (len data) 1)))
    #((get data name-key) (if args-key (get data args-key) {}))))

(defn object-proposals [data]
  "The proposal plists in the decoded JSON value DATA, or None when it is not
   shaped as one (a JSON object that is not an action is data, not a proposal)."
  (cond
    (isinstance data list)
    (do (setv each (lfor d data (object-proposals d)))
        (when (and each (all (gfor e each e)))
          (sum each [])))
    (not (isinstance data dict)) None
    (and (isinstance (.get data "tool_calls") list) (.get data "tool_calls"))
    (object-proposals (get data "tool_calls"))
    (isinstance (.get data "function") dict)
    (do (setv f (get data "function")
              pair (_name-and-args f))
        (when pair [(call-action #* pair)]))
    (in "action" data)
    (do (setv action (get data "action"))
        (cond
          (isinstance action dict) (object-proposals action)
          (not (isinstance action str)) None
          True
          (do (setv inner (next (gfor k _ARGS-KEYS :if (isinstance (.get data k) dict) k) None)
                    fields (if inner
                               (| (dfor [k v] (.items data) :if (!= k inner) k v) (get data inner))
                               data))
              [(_aliased (proto-normalize (proto-from-data (| (_given fields) {"action" (action-name action)}))))])))
    (and (= (.get data "type") "request") (isinstance (.get data "payload") dict))
    (do (setv inner (object-proposals (get data "payload")))
        (when inner
          (setv envelope (proto-normalize (proto-from-data (dfor [k v] (.items data)
                                                                 :if (!= k "payload") k v))))
          [(proto-put envelope ':payload (get inner 0))]))
    True
    (do (setv pair (_name-and-args data))
        (when pair [(call-action #* pair)]))))

(defn plist-proposal [value]
  "The proposal plist VALUE (a plist just read) stands for, or None when it is not one."
  (when (not (is-plist value))
    (return None))
  (setv p (proto-normalize value)
        inner (proto-get p ':payload))
  (defn fix [action]
    (setv name (proto-get action ':action))
    (when (isinstance name str)
      (setv action (proto-put action ':action (kw (action-name name)))))
    (if (isinstance (proto-get action ':action) Keyword) (_aliased action) None))
  (cond
    (proto-has p ':action) (fix p)
    (and (is-plist inner) (proto-has inner ':action))
    (do (setv a (fix inner))
        (when a (proto-put p ':payload a)))
    True None))

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

;; * Proposals in prose

(setv _fence-re (re.compile r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)" re.S)
      _opener-re (re.compile r"\(\s*:|\{|\[\s*\{")
      _pycall-re (re.compile r"\A\[?\s*[A-Za-z_][\w.]*\s*\(")
      _boundary-re (re.compile r"[.!?](?=\s)|\n\s*\n")
      _quoting-re (re.compile
                    (+ r"\b(?:e\.g\.|for (?:example|instance)|such as|examples?|like this|look(?:s|ed)? like"
                       r"|would (?:look|be|run|use|call|have)|could (?:run|use|try|do|call|be)|can (?:run|use|call)"
                       r"|might (?:run|use|look)|you (?:could|can|might|would|should)"
                       r"|I (?:did not|didn't|won't|will not|would not|wouldn't|have not|haven't|am not|'m not)"
                       r"|not (?:run|execute|ran|call)|instead of|rather than|do not|don't|never"
                       r"|format|syntax|schema|template|contains?|containing|contained|said|says|reads"
                       r"|printed|output|returned|returns|shows?|showed|quoted?|mentioned"
                       r"|suggests?|suggested|recommends?|hypothetical(?:ly)?|illustrat\w*)\b")
                    re.I)
      _meaning-re (re.compile
                    (+ r"\b(?:I'll|I will|I'm going to|I am going to|let me|let's|running|calling|executing"
                       r"|I need to|I'd like to|proposing|here is the action|here's the action"
                       r"|here is my|here's my|my (?:next )?action|next action|action:|final answer)")
                    re.I)
      _tail-quoting-re (re.compile
                         (+ r"\A[^.!?\n]{0,80}?\b(?:example|did not|didn't|won't|not run|don't run"
                          r"|hypothetical|illustrat\w*|for instance)\b")
                         re.I))

(defn _last-cue [clause]
  "\"quote\", \"mean\" or None: which kind of cue comes last in CLAUSE."
  (setv q (list (.finditer _quoting-re clause))
        m (list (.finditer _meaning-re clause))
        qe (if q (.end (get q -1)) -1)
        me (if m (.end (get m -1)) -1))
  (cond (and (< qe 0) (< me 0)) None
        (> me qe) "mean"
        True "quote"))

(defn _quoted [text start end]
  "True when the form at START..END of TEXT is presented as an example or a quotation."
  (setv line-start (+ (.rfind text "\n" 0 start) 1))
  (when (.startswith (.lstrip (cut text line-start start)) ">")
    (return True))
  (setv lead (cut text (max 0 (- start 400)) start)
        cuts (list (.finditer _boundary-re lead))
        clause (if cuts (cut lead (.end (get cuts -1)) None) lead))
  ;; a block after a blank line is introduced by the line before it when that
  ;; line ends with a colon ("Example of the format:")
  (when (and (not (.strip clause)) cuts (.endswith (.rstrip (cut lead 0 (.start (get cuts -1)))) ":"))
    (setv before (cut lead 0 (.start (get cuts -1)))
          earlier (list (.finditer _boundary-re before))
          clause (if earlier (cut before (.end (get earlier -1)) None) before)))
  (setv cue (_last-cue clause))
  (or (= cue "quote")
      (and (!= cue "mean") (_embedded text start end))
      (and (is cue None) (bool (.search _tail-quoting-re (cut text end (+ end 160)))))))

(setv _sentence-end-re (re.compile r"[.!?;:](?:\s|\Z)")
      _after-end-re (re.compile r"[.!?](?:\s|\Z)|\n")
      _word-re (re.compile r"[^\W\d_]{2,}"))

(defn _embedded [text start end]
  "True when the form at START..END of TEXT sits inside a sentence: words of the
   same sentence on its line before it and after it."
  (setv line-start (+ (.rfind text "\n" 0 start) 1)
        before (cut text line-start start)
        cuts (list (.finditer _sentence-end-re before))
        before (if cuts (cut before (.end (get cuts -1)) None) before)
        after (cut text end (+ end 400))
        stop (.search _after-end-re after)
        after (if stop (cut after 0 (.start stop)) after))
  (and (bool (.search _word-re before)) (bool (.search _word-re after))))

(defn _fences [text]
  "#(start end body-start body-end language) of each Markdown fence in TEXT."
  (lfor m (.finditer _fence-re text)
        #((.start m) (.end m) (.start m 2) (.end m 2) (.lower (.group m 1)))))

(defn _tried [chunk]
  "True when CHUNK, which did not read, was clearly meant as a proposal."
  (bool (re.search r"(?i)[\"']?\b(?:action|tool_calls|tool|function|arguments|parameters|payload)\b[\"']?\s*:|^\(\s*:(?:action|type)\b"
                   chunk)))

(defn _candidates [text known [claimed None]]
  "#(start end proposals error) for each candidate form in TEXT outside the
   CLAIMED #(start end) regions (the family readers' calls), in order."
  (setv out []
        fences (_fences text)
        taken (list (or claimed []))
        unclosed 0)
  (for [[fs fe bs be lang] fences]
    (setv body (cut text bs be)
          stripped (.strip body))
    (when (or (= lang "tool_code")
              (and (in lang #("python" "py" "tool_call" "")) (.match _pycall-re stripped)
                   (not (.startswith stripped "("))))
      (setv names (re.findall r"([A-Za-z_][\w.]*)\s*\(" stripped))
      (when (or (= lang "tool_code") (= lang "tool_call")
                (and names (all (gfor n names (in (try (action-name n) (except [ProtoError] ""))
                                                  (| known #{"print"}))))))
        (.append taken #(bs be))
        (try (.append out #(fs fe (pythonic-proposals stripped) None))
             (except [e ProtoError]
               (.append out #(fs fe None (str e))))))))
  (setv i 0)
  (while True
    (setv m (.search _opener-re text i))
    (when (not m) (break))
    (setv start (.start m))
    (when (any (gfor [a b] taken (<= a start b)))
      (setv i (+ start 1))
      (continue))
    (setv [end closed depth] (_span-end text start)
          chunk (cut text start end)
          fence (next (gfor f fences :if (<= (get f 2) start (get f 3)) f) None)
          [qs qe] (if fence [(get fence 0) (get fence 1)] [start end]))
    (cond
      (> depth MAX-DEPTH)
      (.append out #(qs qe None f"the proposal is nested deeper than {MAX-DEPTH}"))
      (not closed)
      (when (_tried chunk)
        (.append out #(qs qe None (+ "the proposal is not closed (was the answer cut off?): "
                                     (cut chunk 0 80)))))
      (= (get chunk 0) "(")
      (try (setv p (plist-proposal (proto-read chunk)))
           (cond p (.append out #(qs qe [p] None))
                 (_tried chunk) (.append out #(qs qe None "the plist has no :action")))
           (except [e ProtoError]
             (when (_tried chunk)
               (.append out #(qs qe None (str e))))))
      True
      (try (setv ps (object-proposals (loads-lenient chunk)))
           (when ps (.append out #(qs qe ps None)))
           (except [e ProtoError]
             (when (_tried chunk)
               (.append out #(qs qe None (str e)))))))
    (when (not closed)
      (+= unclosed 1)
      (when (> unclosed MAX-UNCLOSED) (break)))
    (setv i (if closed end (+ start 1))))
  (sorted out :key (fn [c] (get c 0))))

;; * The answer

(setv _functionary-tokens-re (re.compile r"<\|from\|>\s*assistant\s*<\|recipient\|>\s*([\w.-]+)\s*<\|content\|>")
      _said-noise-re (re.compile (+ r"^[ \t]*(?:Thought|Question|Observation)[ \t]*:.*$|^>>>\s*all[ \t]*\n?"
                                    r"|✿(?:THOUGHT|RESULT|RETURN)✿\s*:?|<\|[a-z_]+\|>")
                                 re.M)
      _words-channel-re (re.compile r"(?:\A|\n)\s*(?:>>>\s*all[ \t]*\n|✿RETURN✿\s*:|Final Answer\s*:)\s*"))

(defn _said [text spans]
  "The words of TEXT outside SPANS (the calls taken), or None when there are none."
  (setv parts []
        pos 0)
  (for [[start end _ _] spans]
    (.append parts (cut text pos start))
    (setv pos (max pos end)))
  (.append parts (cut text pos None))
  (setv words (.strip (.sub _said-noise-re "" (.join "" parts))))
  (when (.search _word-re words) words))

(defn _message-text [answer]
  "ANSWER as the person reads it: the words of a family's words channel when it has one."
  (setv m (list (.finditer _words-channel-re answer)))
  (.strip (if m (cut answer (.end (get m -1)) None) answer)))

(defn _result [proposals [said None]]
  (+ [:proposal (get proposals 0) :unrun (list (cut proposals 1 None))]
     (if said [:said said] [])))

(defn _harmony-result [parts known]
  "The result of a harmony answer's PARTS (calls preamble final)."
  (setv [calls preamble final] parts)
  (when calls
    (return (_result (lfor [recipient body] calls
                           (call-action recipient (re.sub r"\A\s*json\s*" "" body :count 1)))
                     (or preamble None))))
  (when (or final preamble)
    (return (extract (or final preamble) :known known)))
  (raise (ProtoError "the answer holds only reasoning: give the action after it")))

(defn extract [text [tool-calls None] [known None]]
  "(:proposal P :unrun (…) [:said WORDS]) for the proposal the model meant in TEXT
   or TOOL-CALLS (a list of (:name N :arguments A) plists), (:message TEXT) when
   it said words, or ProtoError with the reason when it tried to propose and
   failed. KNOWN is the set of action names (ACTIONS by default); it decides
   whether a Python-looking call or a bare name line in prose is a call."
  (setv known (set (or known ACTIONS)))
  (when tool-calls
    (return (_result (lfor c tool-calls
                           (call-action (proto-get c ':name) (proto-get c ':arguments)))
                     (when (and text (.strip text)) (try (strip-reasoning text) (except [ProtoError] None))))))
  (setv text (or text ""))
  (when (> (len text) MAX-TEXT)
    (raise (ProtoError f"answer larger than {MAX-TEXT} characters")))
  (setv harmony (harmony-parts text))
  (when harmony
    (return (_harmony-result harmony known)))
  (setv answer (strip-reasoning (.sub _functionary-tokens-re ">>>\\1\n" text)))
  (when (not answer)
    (raise (ProtoError (if (.strip text)
                           "the answer holds only reasoning: give the action after it"
                           "the answer is empty"))))
  (when (and (.match _pycall-re answer) (.endswith answer #(")" "]")))
    (try (return (_result (pythonic-proposals answer)))
         (except [e ProtoError]
           (when (.startswith answer "[")
             (raise)))))
  (when (.startswith answer "(")
    (setv [end closed depth] (_span-end answer 0))
    (when (> depth MAX-DEPTH)
      (raise (ProtoError f"the plist is nested deeper than {MAX-DEPTH}")))
    (when (and closed (= end (len answer)))
      (setv value (try (proto-read answer) (except [ProtoError] None)))
      (when (and (is-not value None) (is (plist-proposal value) None))
        (raise (ProtoError "the plist is not an action: write (:action :NAME …)")))))
  (setv family (_family-spans answer known)
        spans (sorted (+ family (_candidates answer known (lfor s family #((get s 0) (- (get s 1) 1)))))
                      :key (fn [s] (get s 0)))
        fences (_fences answer)
        meant []
        taken []
        failed [])
  (for [[start end proposals error] spans]
    (setv fence (next (gfor f fences :if (and (<= (get f 2) start) (<= end (get f 1)))
                            f)
                      None)
          [qs qe] (if fence [(get fence 0) (get fence 1)] [start end]))
    (when (not (_quoted answer qs qe))
      (if proposals
          (do (.extend meant proposals)
              (.append taken #(qs qe proposals None)))
          (.append failed error))))
  (cond
    meant (_result meant (_said answer taken))
    failed (raise (ProtoError (get failed 0)))
    True [:message (_message-text answer)]))

;; * Figures on the labelled set

(import os)

(setv _markup-re (re.compile
                   (+ r"</?(?:tool_call|function_call|function_calls|invoke|parameter|arg_key|arg_value|" _THINK-TAGS r")\b"
                      r"|<minimax:|<function=|<parameter=|\[/?(?:THINK|TOOL_CALLS|ARGS|CALL_ID)\]|<\|[a-z_]+\|>|<｜[^｜]*｜>"
                      r"|✿[A-Z]+✿|^>>>|^Action(?: Input)?:|to=functions\.|```tool_code|<end_of_turn>"
                      r"|\A(?:analysis|commentary|assistant)")
                   (| re.I re.M)))

(defn _fields [p]
  "The action plist inside proposal P as a dict of field name to value."
  (setv inner (proto-get p ':payload))
  (setv a (if (and (is-plist inner) (proto-has inner ':action)) inner p))
  (dfor i (range 0 (len a) 2) (. (get a i) name) (get a (+ i 1))))

(defn classify [case [known None]]
  "#(got detail) for one labelled CASE: got is \"action\", \"message\" or \"retry\"."
  (setv calls (lfor c (or (.get case "tool_calls") [])
                    [:name (get c "name") :arguments (.get c "arguments" "{}")]))
  (try
    (setv r (extract (.get case "text") calls known))
    (except [e ProtoError]
      (return #("retry" (str e)))))
  (if (proto-has r ':message)
      #("message" (proto-get r ':message))
      #("action" r)))

(defn _expected-fields [want]
  (_fields (proto-normalize (proto-read want))))

(defn default-cases-path []
  (os.path.join (os.path.dirname (os.path.dirname (os.path.abspath __file__)))
                "tests" "data" "model_outputs.jsonl"))

(defn figures [[path None] [known None]]
  "A dict of the figures over the labelled set at PATH, with the cases that went wrong."
  (setv cases (with [f (open (or path (default-cases-path)) :encoding "utf-8")]
                (lfor line f :if (.strip line) (json.loads line)))
        right 0
        markup 0
        retries 0
        wrong [])
  (for [case cases]
    (setv want (get case "expect")
          [got detail] (classify case known)
          ok (cond
               (= want "message") (= got "message")
               (= want "retry") (= got "retry")
               True (and (= got "action")
                         (= (_fields (proto-get detail ':proposal)) (_expected-fields want))
                         (= (len (proto-get detail ':unrun)) (.get case "unrun" 0)))))
    (when (= got "retry") (+= retries 1))
    (when (and (= got "message")
               (or (!= want "message")
                   (and (not (.get case "quoted")) (.search _markup-re detail))))
      (+= markup 1))
    (if ok (+= right 1) (.append wrong {"id" (.get case "id") "want" want "got" got
                                        "detail" (str detail)})))
  (setv n (max 1 (len cases)))
  {"cases" (len cases)
   "right" (/ right n)
   "markup" (/ markup n)
   "retry" (/ retries n)
   "formats" (len (set (gfor c cases (.get c "format"))))
   "wrong" wrong})

(defn print-figures [[path None]]
  "Print the figures of the labelled set, one line each."
  (setv f (figures path))
  (print (.format "labelled real-format answers: {} in {} formats" (get f "cases") (get f "formats")))
  (print (.format "become the right action (or message, or retry): {:.1f} %" (* 100 (get f "right"))))
  (print (.format "shown to the person as raw markup: {:.1f} %" (* 100 (get f "markup"))))
  (print (.format "need a retry: {:.1f} %" (* 100 (get f "retry"))))
  (for [w (get f "wrong")]
    (print (.format "  wrong: {}: expected {}, got {}: {}" (get w "id") (get w "want") (get w "got")
                    (cut (get w "detail") 0 160)))))
