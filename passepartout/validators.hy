;; * Why

"A model's answer is checked against what its task actually ran before the
person reads it. Reply validators, which skills bring, look for claims with no
action behind them; this module runs them and decides whether the answer goes
out, goes back to the model for one correction, or is withheld."

(import time
        passepartout.proto [proto-get proto-put]
        passepartout.context [context-runtime]
        passepartout.skills [reply-validators])

;; * Which validators run

(defn _enabled [spec ctx]
  (setv config (or (proto-get ctx ':config) (context-runtime ctx "config") {})
        table (if (isinstance config dict) (.get config "validators" {}) {})
        said (if (isinstance table dict) (.get table (get spec "name")) None))
  (if (is None said) (get spec "enabled") (bool said)))

;; * Findings

(defn findings [text ctx [executed None] [fired None]]
  "The findings of the enabled reply validators on TEXT, in skill order.
   EXECUTED is the task's (name status) list; FIRED the validators that
   already held one of its answers."
  (setv ctx (proto-put ctx ':executed (list (or executed [])))
        fired (list (or fired []))
        out [])
  (for [spec (reply-validators (context-runtime ctx "skills"))
        :if (_enabled spec ctx)]
    (setv name (get spec "name")
          raised False)
    (try
      (setv says ((get spec "check") text ctx))
      (except [e Exception]
        (setv raised True
              says f"the check {name} could not run ({(. (type e) __name__)}: {e})")))
    (when says
      (.append out [:validator name :says (str says) :raised raised
                    :halt (or raised (get spec "halt")) :kill (get spec "kill")
                    :again (in name fired)])))
  out)

;; * The review

(defn _bullets [fs]
  (.join "\n" (gfor f fs (+ "- " (proto-get f ':validator) ": " (proto-get f ':says)))))

(defn judge [fs]
  "The review of the findings FS: (:verdict V :findings FS …), with the
   correction for the model and the line for the person when V is :hold, and
   the note when it is :note or :withhold."
  (setv new (lfor f fs :if (and (proto-get f ':halt) (not (proto-get f ':again))) f)
        names (fn [xs] (.join ", " (gfor f xs (proto-get f ':validator)))))
  (cond
    (not fs)
    [:verdict :deliver :findings []]
    new
    [:verdict :hold :findings fs
     :fire (lfor f new (proto-get f ':validator))
     :kill (any (gfor f new (proto-get f ':kill)))
     :correction (+ "Your answer was not delivered. The checks on answers found:\n"
                    (_bullets new)
                    "\nAnswer again: propose the action that does it, or tell the person plainly what was and was not done in this task.")
     :line "The answer was checked against what ran and is being corrected."]
    (any (gfor f fs (and (proto-get f ':again) (or (proto-get f ':raised) (proto-get f ':kill)))))
    [:verdict :withhold :findings fs
     :note "The answer was withheld: it did not match what was done in this task, also after a correction. The journal holds what the checks found."]
    True
    [:verdict :note :findings fs
     :note "(This answer may not match what was done in this task: the checks on answers questioned it.)"]))

(defn review-reply [text ctx state [clock time.perf-counter]]
  "The review of the answer TEXT in the task of STATE, with :took (seconds)."
  (setv t (clock)
        r (judge (findings text ctx (proto-get state ':ran []) (proto-get state ':fired []))))
  (+ r [:took (- (clock) t)]))
