;; * Why

(import threading
        collections [OrderedDict]
        passepartout.proto [literal-keywords :as hy proto-get proto-print]
        passepartout.reason [with-call]
        passepartout.store [events])

(setv HISTORY-TURNS 20
      HISTORY-KEEP 120
      HISTORY-KINDS ["input" "answer" "result"])

(defn _turn [e]
  "#(kind task message) for the event E."
  (setv data (proto-get e ':data [])
        kind (proto-get e ':kind)
        task (proto-get data ':task))
  #(kind (if (is task None) None (str task))
    (cond
      (= kind "input")
      {"role" "user" "content" (str (or (proto-get data ':text) ""))}
      (= kind "answer")
      {"role" "assistant" "content" (str (or (proto-get data ':text) ""))}
      True
      (with-call {"role" "user"
                  "content" (+ "Result of " (proto-print (proto-get data ':action []))
                               ":\n" (proto-print (proto-get data ':result [])))}
                 (proto-get data ':call)))))

(defn turns-since [store session since]
  "#(newest n turns): the id of the newest turn of SESSION after the id
   SINCE, how many turns came after SINCE, and the last HISTORY-KEEP of them."
  (setv new (events store :session session :kinds HISTORY-KINDS :since-id since
                    :limit HISTORY-KEEP :latest True)
        turns (lfor e new
                    :if (!= (proto-get (proto-get e ':data []) ':by) "fallback")
                    (_turn e)))
  (when (< (len new) HISTORY-KEEP)
    (return #((if new (proto-get (get new -1) ':id) since) (len new) turns)))
  (setv newest (proto-get (get new -1) ':id)
        kinds (.join ", " (* ["?"] (len HISTORY-KINDS))))
  #(newest
    (get (.query store f"SELECT count(*) FROM events WHERE session = ? AND id > ? AND id <= ? AND kind IN ({kinds})"
                 #(session since newest #* HISTORY-KINDS))
         0 0)
    turns))

(defn cone [turns task]
  "Of TURNS (#(kind task message), oldest first), those TASK depends on, as
   chat messages: its own, and the last HISTORY-TURNS said or answered."
  (setv kept []
        said 0)
  (for [[kind of message] (reversed turns)]
    (cond
      (and task (= of task)) (.append kept message)
      (and (!= kind "result") (< said HISTORY-TURNS)) (do (+= said 1)
                                                          (.append kept message))))
  (lfor m (reversed kept) (dict m)))

(defn task-history [store session task [histories None]]
  "#(messages size): the turns of SESSION that TASK depends on, as chat
   messages, oldest first, and how many turns the session has. HISTORIES, if
   given, remembers the session's turns between calls."
  (if (is histories None)
      (do (setv [_ size turns] (turns-since store session 0))
          #((cone turns task) size))
      (.cone histories store session task)))

(defclass SessionHistories []
  "The recent turns of the sessions served last, each with the id of the
   newest event it includes and how many turns its session has."

  (defn __init__ [self [sessions 1000]]
    (setv self.known (OrderedDict)
          self.sessions sessions
          self.lock (threading.Lock)))

  (defn cone [self store session task]
    (with [self.lock]
      (setv [last size turns] (.get self.known session #(0 0 []))))
    (setv [newest n new] (turns-since store session last)
          size (+ size n)
          turns (cut (+ turns new) (- HISTORY-KEEP) None))
    (with [self.lock]
      (setv (get self.known session) #(newest size turns))
      (.move-to-end self.known session)
      (while (> (len self.known) self.sessions)
        (.popitem self.known :last False)))
    #((cone turns task) size)))

(defn cone-figures [history size]
  "(:turns K :history N :compression C) for a model given HISTORY of a session of SIZE turns."
  (setv k (len history))
  [:turns k :history size :compression (if (> size 0) (round (- 1 (/ (min k size) size)) 3) 0.0)])
