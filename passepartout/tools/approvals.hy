;; * Why

"passepartout approvals lists the approvals waiting and answers them as the
person at the machine; the answer is recorded in the store and carried out by
the daemon (hitl.org). Only a person may use it: run from inside one of the
agent's actions, it refuses."

(import sys)

;; * approvals

(defn cmd-approvals [args]
  (import passepartout.sandbox [inside-action])
  (setv why (inside-action))
  (when why
    (print (+ "passepartout approvals: refused: approvals are answered by people, "
              f"and this runs inside one of the agent's actions ({why})")
           :file sys.stderr)
    (return 1))
  (approvals-on-host args))

(defn _handed-over-text [store approval choice]
  "What the host is told after handing CHOICE on APPROVAL to the daemon."
  (import passepartout.proto [proto-get]
          passepartout.approvals.hitl [approvals-served])
  (setv pid (approvals-served store)
        session (proto-get approval ':session))
  (if (= choice "approve")
      (if pid
          f"Handed to the running daemon (pid {pid}), which runs it and continues the task in {session}."
          f"No daemon is running; it will be carried out when the daemon starts, and {session} told then.")
      (if pid
          f"The running daemon (pid {pid}) tells {session}."
          f"No daemon is running; {session} will be told when the daemon starts.")))

(defn approvals-on-host [args]
  "The approvals command once it is known to be a person's: ARGS has .action
   (list, approve, deny), .code, .duration (\"30m\"), .reason, .config."
  (import asyncio
          passepartout.daemon [boot shutdown]
          passepartout.proto [proto-get]
          passepartout.mailbox [notice-add]
          passepartout.approvals.grants [duration-minutes]
          passepartout.egress [host-word]
          passepartout.approvals.hitl [HOST-IDENTITY answer-approval find-approval pending-text]
          passepartout.display [display-text])
  (setv env (boot :config-path args.config))
  (try
    (setv store env.store
          action args.action
          duration (getattr args "duration" None)
          minutes (when duration (duration-minutes duration))
          hosts (or (getattr args "hosts" None) None))
    (cond
      (= action "list")
      (do (print (display-text (proto-get (pending-text env HOST-IDENTITY None :host True) ':text))) 0)
      (not (in action #("approve" "deny")))
      (do (print f"passepartout approvals: unknown action {action !r}" :file sys.stderr) 2)
      (not (getattr args "code" None))
      (do (print f"passepartout approvals {action}: give the code" :file sys.stderr) 2)
      (and duration (or (= action "deny") (not minutes)))
      (do (print f"passepartout approvals {action}: {duration !r} is not a duration such as 30m"
                 :file sys.stderr)
          2)
      (and hosts (not (all (gfor h hosts (host-word h)))))
      (do (print (+ f"passepartout approvals {action}: "
                    (.join ", " (gfor h hosts :if (not (host-word h)) (repr h)))
                    " is not a host such as github.com or 127.0.0.2:8080")
                 :file sys.stderr)
          2)
      True
      (do (setv r (asyncio.run (answer-approval env HOST-IDENTITY None args.code action
                                                :reason (getattr args "reason" None) :minutes minutes
                                                :host True :hosts hosts)))
          (for [s (proto-get r ':emit)]
            (notice-add store s (env.clock)))
          (print (display-text (if (proto-get r ':handed-over)
                                   (+ (proto-get r ':text) " "
                                      (_handed-over-text store (find-approval store args.code) action))
                                   (proto-get r ':text))))
          (if (proto-get r ':ok) 0 1)))
    (finally (shutdown env))))
