;; * Why

(import time
        passepartout.proto [kw proto-get]
        passepartout.store [kv-get kv-put]
        passepartout.config [config-defaults])

(setv DEFAULTS (config-defaults "budget")
      ZERO [:prompt-tokens 0 :completion-tokens 0 :cost 0.0])

;; * Adding up

(setv _prompt (kw "prompt-tokens")
      _completion (kw "completion-tokens")
      _cost (kw "cost"))

(defn _usage-values [u]
  #((or (proto-get u _prompt) 0) (or (proto-get u _completion) 0) (or (proto-get u _cost) 0.0)))

(defn usage-add [a b]
  "The sum of two usage plists (:prompt-tokens N :completion-tokens N :cost X)."
  (setv [pa ca xa] (_usage-values (or a ZERO))
        [pb cb xb] (_usage-values (or b ZERO)))
  [_prompt (+ pa pb) _completion (+ ca cb) _cost (+ xa xb)])

(defn usage-tokens [u]
  (+ (or (proto-get u _prompt) 0) (or (proto-get u _completion) 0)))

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
  (setv checks [#("task" "tokens" (usage-tokens task-usage) (get limits "task_tokens"))
                #("task" "cost" (or (proto-get task-usage _cost) 0.0) (get limits "task_cost"))
                #("day" "tokens" (usage-tokens day-usage) (get limits "day_tokens"))
                #("day" "cost" (or (proto-get day-usage _cost) 0.0) (get limits "day_cost"))])
  (for [[scope what used limit] checks]
    (when (and limit (>= used limit))
      (return (if (= what "cost")
                  f"the {scope}'s cost budget is spent: ${used :.4f} of ${limit :.2f}"
                  f"the {scope}'s token budget is spent: {used} of {limit} tokens"))))
  None)
