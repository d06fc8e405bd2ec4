;; * Why

"A model that loops, or a task that grows, spends tokens and money without
anyone watching. Each task and each day has a budget of tokens and of cost,
taken from LiteLLM's usage figures, and it is checked before every model call
and before every action, not after the bill: once a limit is reached the task
stops and the person is told the figure."

(import time
        passepartout.proto [proto-values]
        passepartout.records [kv-get kv-put]
        passepartout.config [config-defaults])

(setv DEFAULTS (config-defaults "budget")
      ZERO [:prompt-tokens 0 :completion-tokens 0 :cost 0.0])

(setv _COMPLETION-TOKENS ':completion-tokens
      _COST              ':cost
      _PROMPT-TOKENS     ':prompt-tokens)

;; * Adding up

(defn usage-values [u]
  "#(prompt-tokens completion-tokens cost) of the usage plist U, 0 where absent."
  (setv [p c x] (proto-values u _PROMPT-TOKENS _COMPLETION-TOKENS _COST))
  #((or p 0) (or c 0) (or x 0.0)))

(defn usage-add [a b]
  "The sum of two usage plists (:prompt-tokens N :completion-tokens N :cost X)."
  ;; most sums add nothing: what a step has spent before its model call
  (cond (or (is b None) (is b ZERO)) (or a ZERO)
        (or (is a None) (is a ZERO)) b
        True (do (setv [pa ca xa] (usage-values a)
                       [pb cb xb] (usage-values b))
                 [_PROMPT-TOKENS (+ pa pb) _COMPLETION-TOKENS (+ ca cb) _COST (+ xa xb)])))

(defn usage-tokens [u]
  (setv [p c _] (usage-values u))
  (+ p c))

;; * The day's usage, in the store

(defn _day-key [now]
  (+ "usage-day:" (time.strftime "%Y-%m-%d" (time.localtime now))))

(defn day-usage [store now]
  "The usage recorded for the day of NOW."
  (or (kv-get store (_day-key now)) ZERO))

(defn day-record [store now usage]
  "Add USAGE to the day of NOW (read and write in one transaction, so two
   sessions adding at once lose nothing)."
  (with [_ (.transaction store)]
    (kv-put store (_day-key now) (usage-add (day-usage store now) usage))))

;; * The check

(defn budget-limits [config]
  "The budget limits of CONFIG, defaults filled in."
  (| DEFAULTS (.get config "budget" {})))

(defn over-budget [task-usage day-usage limits]
  "None while within LIMITS, else the sentence that tells the person which limit was reached."
  (setv [tp tc tx] (usage-values task-usage)
        [dp dc dx] (usage-values day-usage)
        checks [#("task" "tokens" (+ tp tc) (get limits "task_tokens"))
                #("task" "cost" tx (get limits "task_cost"))
                #("day" "tokens" (+ dp dc) (get limits "day_tokens"))
                #("day" "cost" dx (get limits "day_cost"))])
  (for [[scope what used limit] checks]
    (when (and limit (>= used limit))
      (return (if (= what "cost")
                  f"the {scope}'s cost budget is spent: ${used :.4f} of ${limit :.2f}"
                  f"the {scope}'s token budget is spent: {used} of {limit} tokens"))))
  None)
