;; * Why

"What comes into the daemon and what goes out of it is kept in the store until
it has been handled: a message a gateway received stays in the inbox until it
is answered, a reply stays in the outbox until its gateway took it, and a
notice stays until the daemon that serves its conversation delivered it. A
daemon killed at any moment finds them at its next start, and a service that
delivers the same message twice has it answered once. The tables are steps 3,
4, 5 and 15 of the schema in store.org."

(import passepartout.proto [proto-get]
        passepartout.records [data-print data-read _name _now])

;; * The inbox

(defn inbox-add [store gateway key signal [done False] [ts None]]
  "Record SIGNAL (a plist) that GATEWAY received under KEY: its id, or None
   when GATEWAY gave KEY before. With DONE, the row needs no further work."
  (setv ts (_now ts))
  (with [conn (.transaction store)]
    (setv cur (.execute conn
                        "INSERT INTO inbox (gateway, key, signal, state, created, done)
                         VALUES (?, ?, ?, ?, ?, ?)
                         ON CONFLICT (gateway, key) DO NOTHING"
                        #((_name gateway "a gateway") (_name (str key) "an inbox key")
                          (data-print signal) (if done "done" "pending") ts (if done ts None))))
    (if (= cur.rowcount 1) cur.lastrowid None)))

(defn inbox-done [store id [ts None]]
  "Mark the inbox row ID done; True when it was pending."
  (with [conn (.transaction store)]
    (setv done (. (.execute conn "UPDATE inbox SET state = 'done', done = ? WHERE id = ? AND state = 'pending'"
                            #((_now ts) id))
                  rowcount))
    (.execute conn "DELETE FROM inbox_next WHERE inbox = ?" #(id))
    (= done 1)))

(defn inbox-continue [store id signal]
  "The pending row ID now holds SIGNAL, the next step of its task (see
   =task.org=); True when the row was pending."
  (with [conn (.transaction store)]
    (= 1 (. (.execute conn "INSERT OR REPLACE INTO inbox_next (inbox, signal)
                            SELECT id, ? FROM inbox WHERE id = ? AND state = 'pending'"
                      #((data-print signal) id))
            rowcount))))

(defn inbox-pending [store [gateway None]]
  "The pending rows, oldest first, as plists (:id N :gateway G :key K :signal S :created T);
   S is the task's next step when it has one, else the message."
  (lfor [i g k s c] (if (is gateway None)
                        (.query store "SELECT id, gateway, key, COALESCE(n.signal, i.signal), created
                                       FROM inbox i LEFT JOIN inbox_next n ON n.inbox = i.id
                                       WHERE state = 'pending' ORDER BY id")
                        (.query store "SELECT id, gateway, key, COALESCE(n.signal, i.signal), created
                                       FROM inbox i LEFT JOIN inbox_next n ON n.inbox = i.id
                                       WHERE state = 'pending' AND gateway = ? ORDER BY id"
                                #((_name gateway "a gateway"))))
        [:id i :gateway g :key k :signal (data-read s) :created c]))

(defn inbox-count [store [state "pending"]]
  "How many inbox rows are in STATE."
  (get (.query store "SELECT count(*) FROM inbox WHERE state = ?" #(state)) 0 0))

(defn inbox-prune [store before]
  "Forget the rows done before the time BEFORE; how many were forgotten."
  (with [conn (.transaction store)]
    (. (.execute conn "DELETE FROM inbox WHERE state = 'done' AND done < ?" #((float before)))
       rowcount)))

;; * The outbox

(defn outbox-add [store gateway session reply [inbox None] [ts None]]
  "Keep REPLY for GATEWAY's SESSION until it is sent; its id. INBOX, if given,
   is the row it answers, marked done in the same transaction."
  (setv ts (_now ts))
  (with [conn (.transaction store)]
    (setv id (. (.execute conn "INSERT INTO outbox (gateway, session, reply, state, created, next_try)
                                VALUES (?, ?, ?, 'pending', ?, ?)"
                          #((_name gateway "a gateway") session (data-print reply) ts ts))
                lastrowid))
    (when (is-not inbox None)
      (.execute conn "UPDATE inbox SET state = 'done', done = ? WHERE id = ? AND state = 'pending'"
                #(ts inbox))
      (.execute conn "DELETE FROM inbox_next WHERE inbox = ?" #(inbox))))
  id)

(defn outbox-sent [store id [ts None]]
  "Mark the reply ID sent, and forget its text."
  (with [conn (.transaction store)]
    (.execute conn "UPDATE outbox SET state = 'sent', done = ?, reply = '()' WHERE id = ? AND state = 'pending'"
              #((_now ts) id))))

(defn outbox-failed [store id next-try]
  "Count a failed try of the reply ID; the next is at NEXT-TRY."
  (with [conn (.transaction store)]
    (.execute conn "UPDATE outbox SET attempts = attempts + 1, next_try = ? WHERE id = ? AND state = 'pending'"
              #(next-try id))))

(defn outbox-give-up [store id [ts None]]
  "Give up the reply ID now: it can never be sent (its person is told on their next message)."
  (with [conn (.transaction store)]
    (.execute conn "UPDATE outbox SET state = 'expired', done = ? WHERE id = ? AND state = 'pending'"
              #((_now ts) id))))

(defn outbox-pending [store [due None] [session None]]
  "The replies not yet sent (those due by DUE, of SESSION, if given), oldest
   first, as plists (:id N :gateway G :session S :reply R :attempts A :created T :next-try T)."
  (setv where ["state = 'pending'"]
        params [])
  (when (is-not due None)
    (.append where "next_try <= ?")
    (.append params due))
  (when (is-not session None)
    (.append where "session = ?")
    (.append params session))
  (lfor [i g s r a c n] (.query store (+ "SELECT id, gateway, session, reply, attempts, created, next_try
                                          FROM outbox WHERE " (.join " AND " where) " ORDER BY id")
                                (tuple params))
        [:id i :gateway g :session s :reply (data-read r) :attempts a :created c :next-try n]))

(defn outbox-expire [store before [ts None]]
  "Give up the replies still pending that were made before BEFORE; their sessions."
  (with [conn (.transaction store)]
    (setv sessions (lfor [s] (.fetchall (.execute conn "SELECT DISTINCT session FROM outbox
                                                        WHERE state = 'pending' AND created < ?"
                                                  #(before)))
                         s))
    (.execute conn "UPDATE outbox SET state = 'expired', done = ? WHERE state = 'pending' AND created < ?"
              #((_now ts) before)))
  sessions)

(defn outbox-untold [store session]
  "The replies to SESSION that expired and their person was not told of, as
   (id reply) pairs; they are marked told."
  (with [conn (.transaction store)]
    (setv rows (lfor [i r] (.fetchall (.execute conn "SELECT id, reply FROM outbox
                                                      WHERE session = ? AND state = 'expired' ORDER BY id"
                                                #(session)))
                     #(i (data-read r))))
    (.execute conn "UPDATE outbox SET state = 'told' WHERE session = ? AND state = 'expired'" #(session)))
  rows)

(defn outbox-sessions [store state]
  "The sessions with replies in STATE."
  (lfor [s] (.query store "SELECT DISTINCT session FROM outbox WHERE state = ?" #(state)) s))

(defn outbox-prune [store before]
  "Forget the replies sent (or told of) before the time BEFORE; how many."
  (with [conn (.transaction store)]
    (. (.execute conn "DELETE FROM outbox WHERE state IN ('sent', 'told') AND done < ?" #((float before)))
       rowcount)))

;; * Notices

(defn notice-add [store signal [ts None]]
  "Keep the reply SIGNAL for the daemon to deliver; its id."
  (with [conn (.transaction store)]
    (. (.execute conn "INSERT INTO notices (created, session, signal) VALUES (?, ?, ?)"
                 #((_now ts) (str (proto-get signal ':session "")) (data-print signal)))
       lastrowid)))

(defn notices-waiting [store [limit 100]]
  "The notices not yet delivered, oldest first, as (id signal) pairs."
  (lfor [i s] (.query store "SELECT id, signal FROM notices WHERE delivered IS NULL ORDER BY id LIMIT ?"
                      #(limit))
        #(i (data-read s))))

(defn notice-delivered [store id [ts None]]
  "Mark the notice ID delivered; True when it was waiting."
  (with [conn (.transaction store)]
    (= 1 (. (.execute conn "UPDATE notices SET delivered = ? WHERE id = ? AND delivered IS NULL"
                      #((_now ts) id))
            rowcount))))
