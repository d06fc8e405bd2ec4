;; * Why

"The org files are the source of every core module; the .hy files beside the
package are their tangled output and are committed, so the package works without
Emacs or this module. passepartout tangle writes them, and
passepartout tangle --check fails when any committed file differs from what its
org source says, which is how CI keeps the two honest."

(import re
        itertools [takewhile]
        pathlib [Path])

;; * Header arguments

(setv _quote-end-re (re.compile #[re[[^\\]"]re])
      _argument-re (re.compile r"\s*:(\S+)(?:\s+(.*\S))?\s*$")
      _quoted-re (re.compile #[re[^"((?:[^"\\]|\\.)*)"]re]))

(defn _closing [text i]
  "Where the double quote or bracket that opens at I in TEXT closes, or I."
  (if (= (get text i) "\"")
      (do (setv m (when (or (= i 0) (!= (get text (- i 1)) "\\"))
                    (.search _quote-end-re text i)))
          (if m (- (.end m) 1) i))
      (do (setv opened [])
          (for [j (range i (len text))]
            (setv c (get text j))
            (cond (in c "([") (.append opened c)
                  (and opened (in (+ (get opened -1) c) ["()" "[]"])) (.pop opened))
            (when (not opened)
              (return j)))
          i)))

(defn _split-args [text]
  "TEXT cut into header arguments, the way Org cuts it."
  (setv pieces []
        start 0
        i 0)
  (while (< i (len text))
    (setv c (get text i))
    (cond (and (= c ":") (> i 0) (in (get text (- i 1)) " \t"))
          (do (.append pieces (cut text start i))
              (setv start i))
          (in c "\"([")
          (setv i (_closing text i)))
    (+= i 1))
  (+ pieces [(cut text start None)]))

(defn _unquote [value]
  "VALUE, or the string it starts with when it starts with a double quote."
  (setv m (when value (.match _quoted-re value)))
  (if m (re.sub r"\\(.)" r"\1" (.group m 1)) value))

(defn _header-args [text]
  "The header arguments of TEXT as a dict; a later one wins, and a name with no
  value maps to None."
  (dfor piece (_split-args text)
        :setv m (.match _argument-re piece)
        :if m
        (.group m 1) (_unquote (.group m 2))))

;; * The outline

(setv _heading-re (re.compile r"^\*+ ")
      _title-re (re.compile
                  r"^(\*+)(?: +(?:TODO|DONE))?(?: +\[#.\])?(?: +(.*?))??(?:[ \t]+(:[\w@#%:]+:))?[ \t]*$")
      _planning-re (re.compile r"^[ \t]*(?:CLOSED|DEADLINE|SCHEDULED):" re.I)
      _comment-re (re.compile r"^[ \t]*#(?: |$)")
      _drawer-re (re.compile r"^[ \t]*:PROPERTIES:[ \t]*$" re.I)
      _drawer-end-re (re.compile r"^[ \t]*:END:[ \t]*$" re.I)
      _node-property-re (re.compile r"^[ \t]*:(\S+):(?:[ \t]*$| [ \t]*(.*?)[ \t]*$)"))

(defn _drawer [lines i]
  "The (name value) pairs of the property drawer at line I of LINES, names in
  lower case; [] when there is none."
  (when (and (< i (len lines)) (.match _drawer-re (get lines i)))
    (for [j (range (+ i 1) (len lines))]
      (when (.match _drawer-end-re (get lines j))
        (return (lfor line (cut lines (+ i 1) j)
                      :setv m (.match _node-property-re line)
                      #((.lower (.group m 1)) (or (.group m 2) "")))))
      (when (not (.match _node-property-re (get lines j)))
        (break))))
  [])

(defn _heading [lines i]
  "The outline entry of the heading at line I of LINES."
  (setv [stars title tags] (.groups (.match _title-re (get lines i)))
        j (+ i 1))
  (when (and (< j (len lines)) (.match _planning-re (get lines j)))
    (+= j 1))
  {"level" (len stars)
   "line" i
   "title" (or title "")
   "skip" (or (bool (re.match r"COMMENT(?: |$)" (or title "")))
              (in "ARCHIVE" (.split (or tags "") ":")))
   "drawer" (_drawer lines j)})

(defn _top [lines]
  "The outline entry of the text before the first heading: its drawer may follow
  comment lines only."
  (setv i 0)
  (while (and (< i (len lines)) (.match _comment-re (get lines i)))
    (+= i 1))
  {"level" 0 "skip" False "drawer" (_drawer lines i)})

(defn _add-property [props key value]
  "Record the #+PROPERTY line KEY VALUE in PROPS."
  (setv key (.lower key))
  (if (.endswith key "+")
      (do (setv key (cut key 0 -1))
          (setv (get props key) (if (in key props) f"{(get props key)} {value}" value)))
      (setv (get props key) value)))

(defn _inherited [name outline props]
  "The value of property NAME at the end of OUTLINE, or None."
  (setv parts [])
  (for [entry (reversed outline)]
    (setv drawer (get entry "drawer")
          base (lfor [k v] drawer :if (= k name) v)
          parts (+ (cut base 1) (lfor [k v] drawer :if (= k (+ name "+")) v) parts))
    (when base
      (return (.join " " parts))))
  (setv parts (+ (if (in name props) [(get props name)] []) parts))
  (when parts
    (.join " " parts)))

;; * Reading an org file

(setv _keyword-re (re.compile r"^[ \t]*#\+property:[ \t]*(\S+)[ \t]+(\S.*?)[ \t]*$" re.I)
      _begin-re (re.compile r"^[ \t]*#\+begin_(\S+)[ \t]*(\S*)(.*)$" re.I)
      _raw-blocks #{"example" "export" "comment" "verse"})

(defn _block-end [lines start name]
  "The index of the line that closes the NAME block opened at line START, or None."
  (setv end-re (re.compile (+ r"^[ \t]*#\+end_" (re.escape name) r"[ \t]*$") re.I))
  (for [j (range (+ start 1) (len lines))]
    (cond (.match _heading-re (get lines j)) (return None)
          (.match end-re (get lines j)) (return j))))

(defn _read-org [org-path]
  "The #+PROPERTY values of ORG-PATH, and its source blocks as
  (line language header-arguments body-lines outline)."
  (setv lines (.split (.read-text org-path :encoding "utf-8") "\n")
        props {}
        blocks []
        outline [(_top lines)]
        i 0)
  (while (< i (len lines))
    (setv line (get lines i)
          keyword (.match _keyword-re line)
          begin (.match _begin-re line))
    (cond
      (.match _heading-re line)
      (do (setv entry (_heading lines i))
          (while (>= (get outline -1 "level") (get entry "level"))
            (.pop outline))
          (.append outline entry))
      keyword
      (_add-property props #* (.groups keyword))
      begin
      (do (setv [name lang args] (.groups begin)
                name (.lower name)
                end (_block-end lines i name))
          (cond (and (= name "src") (is end None))
                (raise (ValueError f"{org-path}:{(+ i 1)}: #+begin_src without #+end_src"))
                (= name "src")
                (do (.append blocks #(i lang args (cut lines (+ i 1) end) (list outline)))
                    (setv i end))
                (and end (in name _raw-blocks))
                (setv i end))))
    (+= i 1))
  #(props blocks))

;; * The body of a block

(setv _escape-re (re.compile r"^([ \t]*),(,*(?:\*|#\+))"))

(defn _indent [line]
  "The spaces and tabs that start LINE."
  (cut line (- (len line) (len (.lstrip line " \t")))))

(defn _width [indent]
  "The columns INDENT spans."
  (len (.expandtabs indent 8)))

(defn _dedent [line n]
  "LINE with N columns less indentation."
  (setv indent (_indent line)
        keep (- (_width indent) n)
        k (len indent))
  (while (> (_width (cut indent k)) keep)
    (-= k 1))
  (+ (cut indent k) (* " " (- keep (_width (cut indent k)))) (cut line (len indent) None)))

(defn _strip-indent [lines]
  "LINES without the indentation all their non-blank lines share."
  (setv n (min (gfor l lines :if (.strip l " \t") (_width (_indent l))) :default 0))
  (if n
      (lfor l lines (if (.strip l " \t") (_dedent l n) ""))
      lines))

(defn _block-body [lines]
  "The tangled text of a block's LINES, as Emacs writes it."
  (setv unescaped (lfor l lines (.sub _escape-re r"\1\2" l)))
  (.strip (.join "\n" (_strip-indent unescaped)) " \t\n\r"))

;; * Collecting blocks

(defn _tangle-value [texts]
  "The :tangle value that header-argument TEXTS leave, later ones winning."
  (setv value "no")
  (for [text texts]
    (setv args (_header-args (or text "")))
    (when (in "tangle" args)
      (setv value (get args "tangle"))))
  value)

(defn _target [org-path line lang tangle]
  "The absolute target of the LANG block at LINE of ORG-PATH whose :tangle value
  is TANGLE, or None."
  (cond (is tangle None)
        (raise (ValueError f"{org-path}:{(+ line 1)}: :tangle without a value"))
        (in tangle ["no" ""]) None
        (= tangle "yes") (.resolve (.with-suffix org-path f".{lang}"))
        True (.resolve (/ org-path.parent (.expanduser (Path tangle))))))

(defn org-outlined-blocks [org-path]
  "The (target body headings) of the hy blocks of ORG-PATH, in order; HEADINGS
  are the (line level title) of the headings above the block, outermost first."
  (setv org-path (Path org-path)
        [props blocks] (_read-org org-path))
  (lfor [line lang args body outline] blocks
        :if (and (= (.lower lang) "hy") (not (any (gfor e outline (get e "skip")))))
        :setv tangle (_tangle-value [(_inherited "header-args" outline props)
                                     (_inherited f"header-args:{(.lower lang)}" outline props)
                                     args])
        :setv target (_target org-path line lang tangle)
        :if target
        #(target (_block-body body)
          (lfor e outline :if (get e "level") #((get e "line") (get e "level") (get e "title"))))))

(defn org-blocks [org-path]
  "The (target body) pairs of the hy blocks of ORG-PATH, in order."
  (lfor [target body _] (org-outlined-blocks org-path) #(target body)))

;; * The docstring

(setv _element-re (re.compile r"^[ \t]*(?:#\+|#(?: |$)|\||:(?: |$))")
      _item-re (re.compile r"^([ \t]*)(?:[-+]|\d+[.)])(?:[ \t]|$)")
      _drawer-start-re (re.compile r"^[ \t]*:[\w-]+:[ \t]*$")
      _markup-re (re.compile
                   (+ r"\[\[([^\]]+)\](?:\[([^\]]+)\])?\]"
                      r"|(?<![^\s\-('\"{])([=~*/])(\S|\S[^\n]*?(?:\n[^\n]*?)?\S)\3(?=[\s\-.,:!?;'\")}\[]|$)"))
      _link-type-re (re.compile r"^(?:file|https?|id):(?!//)"))

(defn _plain-match [m]
  "The plain text of the link or emphasis M matched."
  (setv [target description marker body] (.groups m))
  (cond target (_plain (or description (.sub _link-type-re "" target)))
        (in marker "=~") body
        True (_plain body)))

(defn _plain [text]
  "TEXT without its Org markup."
  (.sub _markup-re _plain-match text))

(defn _drawer-end [lines start end]
  "The index of the :END: line that closes the drawer opened at line START,
  before END, or None."
  (for [j (range (+ start 1) end)]
    (when (.match _drawer-end-re (get lines j))
      (return j))))

(defn _paragraph [lines start end]
  "The first paragraph of LINES from START to END, as a list of stripped lines,
  or None."
  (setv found []
        i start)
  (while (< i end)
    (setv line (get lines i)
          begin (.match _begin-re line)
          drawer (.match _drawer-start-re line)
          item (.match _item-re line))
    (cond (not (.strip line))
          (when found (break))
          (or begin drawer item (.match _element-re line))
          (do (when found (break))
              (setv close (cond begin (_block-end lines i (.lower (.group begin 1)))
                                drawer (_drawer-end lines i end)))
              (when close
                (setv i close))
              (when item
                (while (and (< (+ i 1) end)
                            (> (_width (_indent (get lines (+ i 1))))
                               (_width (.group item 1))))
                  (+= i 1))))
          True
          (.append found (.strip line)))
    (+= i 1))
  (or found None))

(defn _why [org-path]
  "The first paragraph of the * Why section of ORG-PATH, in Org text, with the
  (line level title) of the headings above it; None when there is none."
  (setv lines (.split (.read-text (Path org-path) :encoding "utf-8") "\n")
        heads (lfor [i line] (enumerate lines)
                    :if (.match _heading-re line)
                    #(i #* (cut (.groups (.match _title-re line)) 2))))
  (for [[k [i stars title]] (enumerate heads)]
    (when (and (= stars "*") (= title "Why"))
      (setv later (cut heads (+ k 1) None)
            section (list (takewhile (fn [h] (!= (get h 1) "*")) later))
            ends (+ (lfor h later (get h 0)) [(len lines)])
            own (_paragraph lines (+ i 1) (get ends 0))
            why #(i 1 title))
      (return
        (cond own #(own [why])
              section (do (setv [j sub-stars sub-title] (get section 0)
                                sub (_paragraph lines (+ j 1) (get ends 1)))
                          (when sub
                            #(sub [why #(j (len sub-stars) (or sub-title ""))])))
              True None)))))

(defn why-paragraph [org-path]
  "The first paragraph of the * Why section of ORG-PATH as plain text, the
  docstring of the modules it tangles to; None when it has none."
  (setv found (_why org-path))
  (when found
    (_plain (.join "\n" (get found 0)))))

(defn _docstring [text]
  "TEXT as a Hy string literal."
  (+ "\"" (.replace (.replace text "\\" "\\\\") "\"" "\\\"") "\""))

;; * Tangling

(defn _comment-heading [level title]
  "The comment line that stands for a heading of LEVEL titled TITLE."
  (.rstrip (+ ";; " (* "*" level) " " title)))

(defn tangle-files [org-paths [outline True]]
  "A dict from target Path to the text the ORG-PATHS say it holds; with OUTLINE,
  the org headings above its blocks in it as comment headings and its org file's
  Why paragraph as its docstring."
  (setv out {}
        owner {}
        written {})
  (for [org (sorted (map Path org-paths))]
    (setv why (when outline (_why org)))
    (for [[target body headings] (org-outlined-blocks org)]
      (when (and (in target owner) (!= (get owner target) org))
        (raise (ValueError f"{target} is tangled from both {(get owner target)} and {org}")))
      (setv blocks [#(headings body)])
      (when (and why (not-in target out))
        (setv [paragraph above] why)
        (.insert blocks 0 #(above (_docstring (_plain (.join "\n" paragraph))))))
      (setv (get owner target) org
            parts (.setdefault out target [])
            seen (.setdefault written target (set)))
      (for [[headings body] blocks]
        (when outline
          (for [[line level title] headings :if (not-in line seen)]
            (.add seen line)
            (.append parts (_comment-heading level title))))
        (.append parts body))))
  (dfor [target parts] (.items out)
        target (+ (.join "\n\n" parts) "\n")))

(defn org-sources [root]
  "The org files under ROOT/org, sorted."
  (sorted (.glob (/ (Path root) "org") "*.org")))

(defn tangle [root [check False] [outline True]]
  "Tangle ROOT/org into ROOT. With CHECK, write nothing and return the targets that
  differ. OUTLINE as for tangle-files."
  (setv differ [])
  (for [[target text] (.items (tangle-files (org-sources root) :outline outline))]
    (setv current (when (.exists target) (.read-text target :encoding "utf-8")))
    (when (!= current text)
      (.append differ target)
      (when (not check)
        (.mkdir (. target parent) :parents True :exist-ok True)
        (.write-text target text :encoding "utf-8"))))
  (sorted differ))
