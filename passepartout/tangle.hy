(import os re
        pathlib [Path])

(setv _begin-re (re.compile r"^[ \t]*#\+begin_src[ \t]+(\S+)(.*)$" re.I)
      _end-re (re.compile r"^[ \t]*#\+end_src\b" re.I)
      _property-re (re.compile r"^[ \t]*#\+property:[ \t]+header-args:(\S+)[ \t]+(.*)$" re.I)
      _escape-re (re.compile r"^([ \t]*),(,*(?:\*|#\+))"))

(defn _header-args [text]
  "The :name value pairs of a header-argument string, as a dict."
  (setv words (.split text)
        args {})
  (for [[i w] (enumerate words)]
    (when (and (.startswith w ":") (< (+ i 1) (len words))
               (not (.startswith (get words (+ i 1)) ":")))
      (setv (get args (cut w 1 None)) (get words (+ i 1)))))
  args)

(defn _strip-indent [lines]
  "LINES without the indentation they all share (blank lines do not count)."
  (setv widths (lfor l lines :if (.strip l) (- (len l) (len (.lstrip l " \t")))))
  (if widths
      (lfor l lines (cut l (min widths) None))
      lines))

(defn _block-body [lines]
  "The tangled text of a block's LINES, as Emacs writes it."
  (setv unescaped (lfor l lines (_escape-re.sub r"\1\2" l)))
  (.strip (.join "\n" (_strip-indent unescaped)) "\n \t"))

(defn _target [org-path tangle]
  "The absolute target of a block whose :tangle value is TANGLE, or None."
  (cond (or (is tangle None) (= tangle "no")) None
        (= tangle "yes") (.with-suffix (Path org-path) ".hy")
        True (.resolve (/ (. (Path org-path) parent) tangle))))

(defn org-blocks [org-path]
  "The (target body) pairs of the hy blocks of ORG-PATH, in order."
  (setv lines (.splitlines (.read-text (Path org-path) :encoding "utf-8"))
        default None
        blocks []
        i 0)
  (while (< i (len lines))
    (setv line (get lines i)
          prop (.match _property-re line)
          begin (.match _begin-re line))
    (cond
      (and prop (= (.lower (.group prop 1)) "hy"))
      (setv default (.get (_header-args (.group prop 2)) "tangle" default))
      begin
      (do
        (setv start i
              body [])
        (+= i 1)
        (while (and (< i (len lines)) (not (.match _end-re (get lines i))))
          (.append body (get lines i))
          (+= i 1))
        (when (>= i (len lines))
          (raise (ValueError f"{org-path}:{(+ start 1)}: #+begin_src without #+end_src")))
        (when (= (.lower (.group begin 1)) "hy")
          (setv target (_target org-path (.get (_header-args (.group begin 2)) "tangle" default)))
          (when target
            (.append blocks #(target (_block-body body)))))))
    (+= i 1))
  blocks)

(defn tangle-files [org-paths]
  "A dict from target Path to the text the ORG-PATHS say it holds."
  (setv out {}
        owner {})
  (for [org (sorted (map Path org-paths))]
    (for [[target body] (org-blocks org)]
      (when (and (in target owner) (!= (get owner target) org))
        (raise (ValueError f"{target} is tangled from both {(get owner target)} and {org}")))
      (setv (get owner target) org)
      (.append (.setdefault out target []) body)))
  (dfor [target bodies] (.items out)
        target (+ (.join "\n\n" bodies) "\n")))

(defn org-sources [root]
  "The org files under ROOT/org, sorted."
  (sorted (.glob (/ (Path root) "org") "*.org")))

(defn tangle [root [check False]]
  "Tangle ROOT/org into ROOT. With CHECK, write nothing and return the targets that differ."
  (setv differ [])
  (for [[target text] (.items (tangle-files (org-sources root)))]
    (setv current (when (.exists target) (.read-text target :encoding "utf-8")))
    (when (!= current text)
      (.append differ target)
      (when (not check)
        (.mkdir (. target parent) :parents True :exist-ok True)
        (.write-text target text :encoding "utf-8"))))
  (sorted differ))
