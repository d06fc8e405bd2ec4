;; * Why

"A skill is data (a name, a priority, some functions) and could be written as a
call to make-skill. defskill exists so that a skill file reads like a
declaration, the way the original Common Lisp skills did, and so that a person
at the REPL can redefine one with the same form that defined it."

;; * defskill

(defmacro defskill [name #* body]
  "Define a skill and declare it in this module: (defskill NAME [DOC] :key value …).

   Keys: :priority (int, higher runs first), :trigger, :gate, :filter,
   :validator, :validators, :augment, :prompt, :actuators, :handlers,
   :immutable. See passepartout/skills.hy for what each one receives and
   returns; a reply validator looks like this:

     (defskill no-guarantees
       \"Holds a reply that promises what no one can.\"
       :validators {\"guarantee\" {\"check\" (fn [text ctx]
                                              (when (in \"guaranteed\" text)
                                                \"Do not promise a guarantee.\"))
                                   \"kill\" False}})

     (defskill no-rm
       \"Refuses any shell command that mentions rm.\"
       :priority 60
       :gate (fn [action ctx]
               (if (in \"rm\" (or (hy.I.passepartout/proto.proto-get action ':cmd) \"\"))
                   [:verdict :reject :reason \"no rm here\"]
                   [:verdict :allow])))"
  (setv body (list body)
        doc None)
  (when (and body (isinstance (get body 0) hy.models.String))
    (setv doc (str (.pop body 0))))
  `(hy.I.passepartout/skills.declare-skill
     (globals)
     (hy.I.passepartout/skills.make-skill ~(str name) :doc ~doc ~@body)))
