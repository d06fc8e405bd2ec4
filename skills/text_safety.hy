;; * Why

"Everything a person is shown, by whichever gateway, is made safe here: the
characters a terminal or a chat app would obey rather than show are made
visible, and actions, results and approvals are put into words. The
text-safety gate at the end judges what a model proposes to say by the same
rules."

;; * The gate: text-safety

(require passepartout.macros [defskill])
(import passepartout.act [action-name]
        passepartout.proto [kw proto-put]
        passepartout.display [control-sequences display-text plain-text unicode-problem])

(setv SHOWN-WORDS {"message" #{"text"}}
      _everywhere #{"explanation"})

(defn _strings [value]
  "Every string in VALUE, a string or nested lists."
  (cond (isinstance value str) [value]
        (isinstance value list) (lfor v value s (_strings v) s)
        True []))

(defn _fields [action]
  "#(field text) for each string of ACTION, FIELD the name of the top-level key above it."
  (lfor i (range 0 (- (len action) 1) 2)
        :setv field (getattr (get action i) "name" None)
        :if (and field (!= field "action"))
        s (_strings (get action (+ i 1)))
        #(field s)))

(defn _plain [value]
  "True when every string in VALUE is plain text."
  (cond (isinstance value str) (plain-text value)
        (isinstance value list) (all (gfor v value (_plain v)))
        True True))

(defn text-gate [action ctx]
  (for [i (range 1 (len action) 2)]
    (when (not (_plain (get action i)))
      (return (_judge action))))
  [:verdict :allow])

(defn _judge [action]
  "The verdict on ACTION, which holds a string that is not plain text."
  (setv name (action-name action)
        words (| (.get SHOWN-WORDS name #{}) _everywhere)
        found {})
  (for [[field text] (_fields action)]
    (setv why (unicode-problem text))
    (when why
      (return [:verdict :reject
               :reason (+ f":{field} of this :{name} action is not valid Unicode: it holds {why}, "
                          "which no screen, file, chat service or model can take. Write the character "
                          "you meant, or leave it out, and propose it again.")]))
    (for [k (control-sequences text)]
      (setv kinds (.setdefault found field []))
      (when (not (in k kinds)) (.append kinds k))))
  (setv parts (.join "; " (gfor [f kinds] (.items found) f":{f} holds {(.join ", " kinds)}"))
        values (_field-values action))
  (cond
    (not found) [:verdict :allow]
    (all (gfor f found (and (in f words) (isinstance (.get values f) str))))
    (do (setv new action)
        (for [f found]
          (setv new (proto-put new (kw f) (display-text (get values f)))))
        [:verdict :modify :action new
         :reason f"made terminal control characters visible ({parts}): a terminal would have obeyed them"])
    True
    [:verdict :reject
     :reason (+ f"{parts}. These are characters a terminal obeys, or that reorder "
                f"the text shown, and in this :{name} action they would hide from the person what it does. "
                "Write them in the notation the program decodes (printf '\\033[1m', $'\\e'), or leave "
                "them out, and propose it again.")]))

(defn _field-values [action]
  "The top-level fields of ACTION by name."
  (dfor i (range 0 (- (len action) 1) 2)
        :if (getattr (get action i) "name" None)
        (. (get action i) name) (get action (+ i 1))))

(defskill text-safety
  "Refuses invalid Unicode in a proposal; makes terminal control sequences in words
   for the person visible, and refuses them in commands, paths and contents."
  :priority 98
  :gate text-gate)
