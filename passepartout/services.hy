;; * Why

"A daemon is a handful of parts: its config, its store, the skills it loaded, the
models it asks, the gateways it may run, the stop registry, a clock. Every stage
needs some of them. They are gathered in one object, made by boot
(daemon.org), and passed to whatever needs a part of it: the runner, each
step, the hub, the services a daemon runs beside its gateways. Nothing of it is
module state, so two daemons in one process (as in the tests) share nothing, and
a test builds the parts it needs instead of patching globals."

(import os time
        passepartout.runner [Stops]
        passepartout.history [SessionHistories]
        passepartout.writer [GroupWriter]
        passepartout.cascade [cascade-complete])

;; * Judging in the daemon's own process

(defclass InlineGates []
  "Runs the gates of REGISTRY in this process (see =verify.org=)."
  (defn __init__ [self registry]
    (setv self.registry registry))
  (defn :async verify [self action ctx]
    (hy.I.passepartout/verify.verify action ctx
                                     :gates (hy.I.passepartout/skills.skill-functions self.registry "gate"))))

;; * The services

(defclass Services []
  "The parts of one running daemon (see the table above)."
  (defn __init__ [self config store skills cascade
                  [complete None] [gates None] [escalate None] [clock time.time]
                  [secrets None] [sandbox None] [gateways None] [skill-report None] [environ None]]
    (setv self.config config
          self.store store
          self.writer (GroupWriter store)
          self.skills skills
          self.cascade cascade
          self.complete (or complete (fn :async [request] (await (cascade-complete cascade request))))
          self.gates (or gates (InlineGates skills))
          self.escalate escalate
          self.clock clock
          self.secrets (list (or secrets []))
          self.sandbox sandbox
          self.gateways (dict (or gateways {}))
          self.skill-report (list (or skill-report []))
          self.environ (if (is environ None) os.environ environ)
          self.repl None
          self.checkpoints None
          self.workflows None
          self.routines None
          self.stops (Stops)
          self.histories (SessionHistories))))
