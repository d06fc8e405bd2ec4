;; * Why

"A model's answer is text, and this module reads it into what the model meant:
the actions it proposed, as plists, or a message for the person, or, when it
tried to propose and failed, a precise error the model is told about. It reads
the forms models actually write, and it reads them as data only: nothing in an
answer is evaluated."

(import json re
        passepartout.proto [ProtoError proto-get proto-has proto-read proto-normalize is-plist]
        passepartout.lenient [MAX-DEPTH MAX-TEXT _span-end loads-lenient]
        passepartout.calls [action-name call-action object-proposals plist-proposal]
        passepartout.families [_family-spans harmony-parts pythonic-proposals])

(setv _ACTION    ':action
      _ARGUMENTS ':arguments
      _MESSAGE   ':message
      _NAME      ':name
      _PAYLOAD   ':payload
      _PROPOSAL  ':proposal
      _UNRUN     ':unrun)

;; * Bounds and vocabulary

(setv MAX-UNCLOSED 64
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
                           (call-action (proto-get c _NAME) (proto-get c _ARGUMENTS)))
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
  (setv inner (proto-get p _PAYLOAD))
  (setv a (if (and (is-plist inner) (proto-has inner _ACTION)) inner p))
  (dfor i (range 0 (len a) 2) (. (get a i) name) (get a (+ i 1))))

(defn classify [case [known None]]
  "#(got detail) for one labelled CASE: got is \"action\", \"message\" or \"retry\"."
  (setv calls (lfor c (or (.get case "tool_calls") [])
                    [:name (get c "name") :arguments (.get c "arguments" "{}")]))
  (try
    (setv r (extract (.get case "text") calls known))
    (except [e ProtoError]
      (return #("retry" (str e)))))
  (if (proto-has r _MESSAGE)
      #("message" (proto-get r _MESSAGE))
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
                         (= (_fields (proto-get detail _PROPOSAL)) (_expected-fields want))
                         (= (len (proto-get detail _UNRUN)) (.get case "unrun" 0)))))
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
