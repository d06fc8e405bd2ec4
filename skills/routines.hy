;; * Why

":schedule sets a routine and :routine pauses, resumes or deletes one; both
are actions like any other: the schema check reads their fields from the
actuators declared here, the gates judge them, and the act stage carries them
out through the daemon's routines runtime (routines.org). /routines lists
the routines of the conversation with their next run in the person's zone, and
/routines pause|resume|delete ID is the person's own hand on them."

;; * The gate

(require passepartout.macros [defskill])
(import hy.models [Keyword]
        passepartout.act [action-name error-result]
        passepartout.context [context-runtime]
        passepartout.proto [proto-get kw]
        passepartout.routines [parse-when next-due shortest-gap config-zone show-time
                               routine-get routines-text source-of new-routine-id]
        passepartout.workflow [parse-time conversation-of])

(defn _config [ctx] (or (context-runtime ctx "config") {}))

(defn _text [v]
  (cond (isinstance v Keyword) v.name
        (isinstance v str) (.strip v)
        True None))

(defn _min-minutes [ctx]
  (.get (.get (_config ctx) "routines" {}) "min_minutes" 5))

(defn schedule-problem [action ctx]
  "Why the :schedule ACTION may not be a routine, or None."
  (setv now (proto-get ctx ':now)
        tz (config-zone (_config ctx))
        [spec why] (parse-when (proto-get action ':when) tz now)
        objective (proto-get action ':objective)
        say (proto-get action ':say)
        until (proto-get action ':until)
        catch-up (proto-get action ':catch-up)
        chat (proto-get action ':chat)
        least (* 60 (_min-minutes ctx)))
  (cond
    why why
    (and (is objective None) (is say None))
    "a routine needs :objective (what each run does, as a worker) or :say (a reminder's text)"
    (and (is-not objective None) (is-not say None))
    "give :objective or :say, not both: a reminder only says something, a routine with an objective does work"
    (not (isinstance (or objective say) str))
    ":objective and :say are text"
    (not (.strip (or objective say)))
    "the routine's :objective or :say is empty: say what it is to do"
    (and (is-not until None) (is (parse-time until) None))
    f":until {until !r} is not a time; write it as ISO 8601, e.g. \"2030-12-31T23:59\""
    (and (is-not until None) (<= (parse-time until) now))
    f":until {until !r} is past; give a time ahead, or leave it out"
    (and (is-not catch-up None) (not (in (_text catch-up) #("once" "skip"))))
    f":catch-up {catch-up !r} is neither \"once\" (a run missed while the daemon was down runs once at start) nor \"skip\""
    (and (is-not chat None) (not (and (isinstance chat str) (in ":" chat))))
    f":chat {chat !r} is no chat; name one as its session is named, e.g. \"telegram:42\", or leave it out for this one"
    (and (is-not chat None) (context-runtime ctx "store")
         (not (.query (context-runtime ctx "store") "SELECT 1 FROM sessions WHERE name = ?" #(chat))))
    f":chat {chat !r} is no chat this daemon has spoken in; leave it out to use this one"
    (and least (is-not (shortest-gap spec tz now) None) (< (shortest-gap spec tz now) least))
    (+ f"{(proto-get action ':when) !r} would run every {(round (/ (shortest-gap spec tz now) 60) 1)} minutes; "
       f"routines may run at most every {(_min-minutes ctx)} minutes here: choose a longer interval")
    True None))

(setv OPS #("pause" "resume" "delete"))

(defn routine-problem [action ctx]
  "Why the :routine ACTION may not be carried out, or None."
  (setv op (_text (proto-get action ':op))
        id (_text (proto-get action ':id))
        store (context-runtime ctx "store"))
  (cond
    (not (in op OPS)) f":op must be one of :pause, :resume, :delete; not {(proto-get action ':op) !r}"
    (not id) ":id names the routine (its id, as /routines lists it)"
    (is store None) None
    (is (routine-get store id) None) f"{id !r} is no routine; /routines lists them"
    (!= (proto-get (routine-get store id) ':session) (conversation-of store (proto-get ctx ':session)))
    f"{id !r} is a routine of another conversation"
    (= (proto-get (routine-get store id) ':state) "deleted") f"{id !r} was deleted already"
    True None))

(defn routines-gate [action ctx]
  (setv name (action-name action)
        why (cond (= name "schedule") (schedule-problem action ctx)
                  (= name "routine") (routine-problem action ctx)
                  True None))
  (if why
      [:verdict :reject :reason (+ name " refused: " why)]
      [:verdict :allow]))

;; * The actuators

(defn _runtime [ctx]
  (getattr (context-runtime ctx "services") "routines" None))

(defn _refused [check kind nothing action ctx]
  "The error result when ACTION may not be carried out (what CHECK finds wrong
   with it, refusing the KIND) or no routines run here (so NOTHING); else None."
  (setv why (check action ctx))
  (cond why (error-result f"{kind} refused: {why}")
        (is (_runtime ctx) None) (error-result f"routines are not running in this daemon, so {nothing}")))

(defn :async run-schedule [action ctx]
  (setv runtime (_runtime ctx)
        refused (_refused schedule-problem "schedule" "nothing was scheduled" action ctx))
  (when refused (return refused))
  (setv now (proto-get ctx ':now)
        tz (config-zone (_config ctx))
        [spec _] (parse-when (proto-get action ':when) tz now)
        store (context-runtime ctx "store")
        session (or (_text (proto-get action ':chat)) (conversation-of store (proto-get ctx ':session)))
        until (proto-get action ':until)
        id (new-routine-id)
        due (next-due spec tz now now)
        routine [:id id :session session :source (source-of session) :spec spec
                 :objective (proto-get action ':objective) :say (proto-get action ':say)
                 :quiet (bool (proto-get action ':quiet))
                 :catch-up (or (_text (proto-get action ':catch-up))
                               (.get (.get (_config ctx) "routines" {}) "catch_up" "once"))
                 :until (when until (parse-time until)) :tz tz :next-due due])
  (await (.add runtime routine))
  [:status :ok :routine id :next-run (show-time due tz) :time-zone tz
   :note (+ "scheduled; /routines lists it" (if (proto-get action ':quiet) ", and it tells only of a failed run" ""))])

(defn :async run-routine [action ctx]
  (setv runtime (_runtime ctx)
        refused (_refused routine-problem "routine" "nothing was changed" action ctx))
  (when refused (return refused))
  (setv op (_text (proto-get action ':op))
        id (_text (proto-get action ':id))
        state (get {"pause" "paused" "resume" "active" "delete" "deleted"} op))
  (if (await (.set-state runtime id state (str (or (proto-get action ':explanation) ""))))
      [:status :ok :routine id :state state]
      (error-result f"the routine {id} is {(proto-get (routine-get (context-runtime ctx "store") id) ':state)} already")))

;; * /routines

(import passepartout.perceive [reply-signal sensor-of])

(defn :async on-routines [signal ctx]
  (setv text (proto-get (proto-get signal ':payload) ':text)
        store (context-runtime ctx "store"))
  (when (and (= (sensor-of signal) "user-input")
             (isinstance text str)
             (.startswith (.strip text) "/routines")
             (is-not store None))
    (setv words (.split (.strip text)))
    (cond
      (= (len words) 1)
      [(reply-signal signal (routines-text store (proto-get signal ':session)) "notice")]
      (and (= (len words) 3) (in (get words 1) OPS))
      (do (setv action [:action :routine :op (kw (get words 1)) :id (get words 2)
                        :explanation "asked for with /routines"]
                result (await (run-routine action ctx)))
          [(reply-signal signal (if (= (proto-get result ':status) ':ok)
                                    f"The routine {(get words 2)} is {(proto-get result ':state)}."
                                    (str (proto-get result ':error)))
                         "notice")])
      True
      [(reply-signal signal "Use /routines, or /routines pause|resume|delete ID." "notice")])))

(setv on-routines.commands [["/routines" "the routines of this conversation and their next runs"]
                            ["/routines pause|resume|delete ID" "pause, resume or delete a routine"]])

;; * The skill

(defskill routines
  "Routines and reminders: work or words that come back on a schedule (:schedule), and their pause, resume and delete (:routine)."
  :priority 91
  :gate routines-gate
  :handlers [on-routines]
  :actuators {"schedule" {"run" run-schedule
                          "schema" [:when [:type "string" :required True
                                           :doc "a cron line (\"0 9 * * 1\"), an ISO time (\"2030-05-01T07:00\", the person's zone when it names none) or an interval (\"every 2h\")"]
                                    :objective [:type "string" :required False
                                                :doc "what each run does, as a worker with the actions of the daemon"]
                                    :say [:type "string" :required False
                                          :doc "a reminder's text, said at each run (instead of :objective)"]
                                    :chat [:type "string" :required False
                                           :doc "the chat its news goes to, e.g. \"telegram:42\"; this one when left out"]
                                    :until [:type "string" :required False
                                            :doc "ISO time after which it runs no more"]
                                    :catch-up [:type "any" :required False
                                               :doc "\"once\" (a run missed while the daemon was down runs once at start) or \"skip\""]
                                    :quiet [:type "any" :required False
                                            :doc "true: tell the chat only when a run fails"]]
                          "doc" "Schedule a routine (each run a worker with :objective) or a reminder (:say); times are the person's."
                          "effect" True}
              "routine" {"run" run-routine
                         "schema" [:op [:type "any" :required True
                                        :doc ":pause, :resume or :delete"]
                                   :id [:type "string" :required True
                                        :doc "the routine's id, as /routines lists it"]]
                         "doc" "Pause, resume or delete a routine of this conversation."
                         "effect" True}})
