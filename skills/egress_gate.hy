;; * Why

"A shell action's box lets out only what the policy (egress.org) or a person
allows, and a person can allow only what they are asked about. This module
reads a command line before it runs: the hosts its commands name, the commands
that upload, the remote a push goes to; and from that, what the egress gate
asks a person about, with the host named."

;; * The gate

(require passepartout.macros [defskill])
(import passepartout.act [action-name]
        passepartout.reach [action-asks use-text]
        passepartout.proto [proto-get])

(setv _verdict ':verdict _allow ':allow _upload-key ':upload)

(defn egress-gate [action ctx]
  "Escalate a :shell action whose command line uploads, or names a host that is
   not allowed, naming the hosts."
  (when (!= (action-name action) "shell")
    (return [_verdict _allow]))
  (setv asks (action-asks action ctx))
  (if (not asks)
      [_verdict _allow]
      [:verdict :escalate
       :rule (if (any (gfor u asks (proto-get u _upload-key))) "egress-upload" "egress-host")
       :reason (+ (.join "; " (dict.fromkeys (map use-text asks)))
                  ". Approving lets it through for this action; /approve CODE 1h HOST also lets "
                  "HOST through in this conversation for an hour")]))

(defskill egress
  "Asks before a shell command uploads, or reaches a host that is not allowed."
  :priority 55
  :gate egress-gate
  :actions ["shell"])
