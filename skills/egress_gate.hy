;; * Why

"Private data, text from strangers and an open network together are how an
agent's data leaves: a command that reads a secret and a curl on the same
line need nothing else. So a shell action has no network of its own. Its
sandbox is a network namespace with only a loopback device; the one way out is
an HTTP proxy the daemon runs for that action (proxy.org), which lets through
what the policy or a person allowed for that action and writes down
everything that went by."

;; * The gate

(require passepartout.macros [defskill])
(import passepartout.act [action-name]
        passepartout.egress [action-asks use-text]
        passepartout.proto [proto-get])

(defn egress-gate [action ctx]
  "Escalate a :shell action whose command line uploads, or names a host that is
   not allowed, naming the hosts."
  (when (!= (action-name action) "shell")
    (return [:verdict :allow]))
  (setv asks (action-asks action ctx))
  (if (not asks)
      [:verdict :allow]
      [:verdict :escalate
       :rule (if (any (gfor u asks (proto-get u ':upload))) "egress-upload" "egress-host")
       :reason (+ (.join "; " (dict.fromkeys (map use-text asks)))
                  ". Approving lets it through for this action; /approve CODE 1h HOST also lets "
                  "HOST through in this conversation for an hour")]))

(defskill egress
  "Asks before a shell command uploads, or reaches a host that is not allowed."
  :priority 55
  :gate egress-gate)
