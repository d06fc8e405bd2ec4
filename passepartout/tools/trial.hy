;; * Why

"passepartout parse and passepartout rules test try one part of the
judgement on input a person gives, with no model and no daemon: the reader
(extract.org) on raw model answers, and the shell-safety gate on one
command, with the rule that decided it. They read their input and build their
context as verify does (cli.org)."

(import json sys
        passepartout.tools.cli [_gate-context _read-input input-lines])

;; * parse

(defn _arguments-text [a]
  (if (isinstance a str) a (json.dumps a)))

(defn parse-line [line n]
  "The dict parse prints for LINE, the Nth of its input."
  (import passepartout.extract [extract ACTIONS]
          passepartout.proto [ProtoError proto-get proto-has proto-to-data])
  (defn failed [why] {"action" None "error" why "unrun" 0})
  (try (setv value (json.loads line))
       (except [e ValueError]
         (return (failed f"line {n} is not a JSON-encoded string: {e}"))))
  (setv [text calls] (cond (isinstance value str) [value None]
                           (isinstance value dict)
                           [(.get value "text")
                            (lfor c (or (.get value "tool_calls") [])
                                  :if (isinstance c dict)
                                  [:name (.get c "name")
                                   :arguments (_arguments-text (.get c "arguments" "{}"))])]
                           True [None None]))
  (when (and (is text None) (not calls))
    (return (failed f"line {n} is neither a JSON string nor {{\"text\": …, \"tool_calls\": […]}}")))
  (try (setv r (extract text calls))
       (except [e ProtoError]
         (return (failed (str e))))
       (except [e Exception]
         (return (failed f"line {n}: {(. (type e) __name__)}: {e}"))))
  (if (proto-has r ':message)
      {"action" "message" "fields" {"text" (proto-get r ':message)} "unrun" 0}
      (do (setv p (proto-get r ':proposal)
                inner (proto-get p ':payload)
                action (if (and (isinstance inner list) (proto-get inner ':action)) inner p)
                data (proto-to-data action))
          (| {"action" (.pop data "action") "fields" data "unrun" (len (proto-get r ':unrun))}
             (if (proto-get r ':said) {"said" (proto-get r ':said)} {})))))

(defn cmd-parse [args]
  (import passepartout.display [json-line])
  (setv text (_read-input args.file)
        out (getattr sys.stdout "buffer" None))
  (.flush sys.stdout)
  (for [[i line] (enumerate (input-lines text) 1)]
    (setv row (+ (json-line (parse-line line i)) "\n"))
    (if out (.write out (.encode row "utf-8" "replace")) (.write sys.stdout row)))
  (if out (.flush out) (.flush sys.stdout))
  0)

;; * rules test

(defn cmd-rules [args]
  (import passepartout.proto [proto-get]
          passepartout.shell.judge [judge-command])
  (setv ctx (_gate-context args)
        v (judge-command args.cmd ctx)
        out {"verdict" (. (proto-get v ':verdict) name)
             "rule" (proto-get v ':rule)
             "reason" (proto-get v ':reason)
             "confined" (is (proto-get v ':confined) True)})
  (if args.json
      (print (json.dumps out :ensure-ascii False))
      (print (+ (get out "verdict") (if (get out "confined") " (confined)" "")
                " — rule " (str (get out "rule"))
                (if (get out "reason") (+ ": " (get out "reason")) ""))))
  0)
