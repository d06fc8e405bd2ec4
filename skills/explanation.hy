;; * Why

"An action that changes the world (runs a command, writes a file, adds to
memory) is read later by people who were not there: the person asked to
approve it, the one reading the journal next week, the one replaying
yesterday's proposals against today's policy. A command alone says what; only
the model knew why, and only at the moment it proposed it. So a proposal that
changes something must carry an :explanation, and one without is refused
with a reason that tells the model how to fix it; verify's retry loop gives it
the chance."

(require passepartout.macros [defskill])
(import passepartout.act [action-name]
        passepartout.proto [proto-get]
        passepartout.context [context-runtime]
        passepartout.skills [actuator-for])

(setv MIN-EXPLANATION 3
      _explanation-key ':explanation)

(defn explanation-gate [action ctx]
  (setv name (action-name action)
        spec (when name (actuator-for (context-runtime ctx "skills") name)))
  (when (not (and spec (get spec "effect")))
    (return [:verdict :allow]))
  (setv why (proto-get action _explanation-key))
  (cond
    (not (isinstance why str))
    [:verdict :reject
     :reason f"a :{name} action changes things: add :explanation \"why\" (a few words on what it is for) and propose it again"]
    (< (len (.strip why)) MIN-EXPLANATION)
    [:verdict :reject
     :reason f"a :{name} action changes things, and its :explanation is empty or too short: say in a few words why it is needed (:explanation \"…\") and propose it again"]
    True [:verdict :allow]))

(defskill explanation
  "Refuses an action that changes something unless it says why (:explanation)."
  :priority 70
  :gate explanation-gate)
