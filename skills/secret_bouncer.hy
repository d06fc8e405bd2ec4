;; * Why

"The daemon holds keys (a provider's API key, a bot token) and works beside
files that hold more. A model can be talked into repeating one: a message that
quotes a .env file, a curl command with a token pasted in, a URL with a
password, a note sent to long-term memory. The secret bouncer
(skills/secret_bouncer.hy, at the end of secrets.org) refuses such proposals,
and blanks secrets out of tool output before the model reads it. This module is
the part that looks at text: pure functions, no I/O, nothing that depends on
the time or the machine."

;; * The secret bouncer skill

(require passepartout.macros [defskill])
(import os
        passepartout.act [action-name]
        passepartout.proto [proto-get proto-put]
        passepartout.secrets [find-secrets find-in-urls own-secret-findings redact-value
                              secret-kinds secret-tuple]
        passepartout.workspace [path-inside resolve-path])

(setv SCANNED {"message" #{"text"} "shell" #{"cmd"} "memory-add" #{"text"}}
      _secrets-key ':secrets
      _path-key ':path
      _workspace-key ':workspace)

(defn _strings [value]
  "Every string in VALUE, a string or nested lists."
  (cond (isinstance value str) [value]
        (isinstance value list) (lfor v value s (_strings v) s)
        True []))

(defn _inside-workspace [path ctx]
  (setv workspace (proto-get ctx _workspace-key))
  (when (not (and (isinstance path str) (isinstance workspace str)))
    (return False))
  (setv lexical (os.path.normpath path))
  (when (or (.startswith lexical "~") (= lexical "..") (.startswith lexical "../")
            (and (os.path.isabs lexical) (not (path-inside lexical workspace))))
    (return False))
  (setv found (resolve-path path ctx :write True))
  (and (proto-get found ':ok)
       (path-inside (proto-get found ':path) (os.path.realpath workspace))))

(defn _reason [name hits]
  (setv parts (lfor [field kinds] (.items hits)
                    f":{field} holds {(.join ", " kinds)}"))
  (+ f"secret bouncer: this :{name} action carries a secret ({(.join "; " parts)}). "
     "Secrets never leave in a message, a command, a URL, a note or a file outside the workspace: "
     "leave the value out (refer to it by where it is kept, e.g. an environment variable) and propose again."))

(defn secret-gate [action ctx]
  (setv name (action-name action)
        secrets (secret-tuple (proto-get ctx _secrets-key))
        full (.get SCANNED name #{})
        own-only #{}
        hits {})
  (when (= name "write-file")
    (if (_inside-workspace (proto-get action _path-key) ctx)
        (setv own-only #{"content"})
        (setv full #{"content"})))
  (for [i (range 0 (- (len action) 1) 2)]
    (setv field (getattr (get action i) "name" None)
          value (get action (+ i 1)))
    (when (or (is field None) (= field "action")) (continue))
    (for [text (_strings value)]
      (setv findings (cond (in field full) (find-secrets text secrets)
                           (in field own-only) (own-secret-findings text secrets)
                           True (+ (own-secret-findings text secrets) (find-in-urls text secrets))))
      (for [kind (secret-kinds findings)]
        (setv kinds (.setdefault hits field []))
        (when (not (in kind kinds)) (.append kinds kind)))))
  (if hits
      [:verdict :reject :reason (_reason name hits)]
      [:verdict :allow]))

(defn secret-filter [action result ctx]
  (setv [new count] (redact-value result (secret-tuple (proto-get ctx ':secrets))))
  (if count
      (proto-put new ':redacted (+ count (or (proto-get result ':redacted) 0)))
      result))

(defskill secret-bouncer
  "Keeps keys and tokens out of messages, commands, URLs, notes and files outside
   the workspace, and out of tool output before the model reads it."
  :priority 95
  :gate secret-gate
  :filter secret-filter)
