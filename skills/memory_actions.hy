;; * memory-actions: the model's long-term notes

(require passepartout.macros [defskill])
(import passepartout.act [error-result]
        passepartout.context [context-runtime]
        passepartout.proto [literal-keywords :as hy proto-get])

(setv MAX-HITS 50)

(defn _store [ctx]
  (context-runtime ctx "store"))

(defn run-memory-add [action ctx]
  (setv text (proto-get action ':text)
        store (_store ctx))
  (cond (not (and (isinstance text str) (.strip text)))
        (error-result "memory-add needs :text")
        (is store None)
        (error-result "there is no memory store")
        True
        [:status :ok
         :id (hy.I.passepartout/memory.memory-add store text :session (proto-get ctx ':session))]))

(defn run-memory-search [action ctx]
  (setv query (proto-get action ':query)
        limit (proto-get action ':limit 5)
        store (_store ctx))
  (when (or (not (isinstance limit int)) (isinstance limit bool) (< limit 1))
    (setv limit 5))
  (cond (not (and (isinstance query str) (.strip query)))
        (error-result "memory-search needs :query")
        (is store None)
        (error-result "there is no memory store")
        True
        [:status :ok
         :hits (list (hy.I.passepartout/memory.memory-search store query :limit (min limit MAX-HITS)))]))

(defskill memory-actions
  "Adds to and searches the long-term memory."
  :priority 10
  :actuators {"memory-add" {"run" run-memory-add
                            "schema" [:text [:type "string" :required True
                                             :doc "the fact or note to remember"]]
                            "doc" "Store a note in long-term memory."
                            "effect" True}
              "memory-search" {"run" run-memory-search
                               "schema" [:query [:type "string" :required True
                                                 :doc "words to look for"]
                                         :limit [:type "integer" :required False
                                                 :doc "at most this many hits (default 5)"]]
                               "doc" "Search long-term memory for notes matching QUERY."
                               "effect" False}})
