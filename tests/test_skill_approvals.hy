;; Tests of skills/approvals.hy: reading the commands, and which signals are commands at all.

(import pytest
        passepartout.proto [kw proto-get]
        passepartout.skills [get-skill]
        passepartout.context [make-context]
        passepartout.perceive [perceive]
        passepartout.services [Services]
        steps [expect run])

(defn [(pytest.fixture :scope "module")] skill [registry]
  (setv s (get-skill registry "approvals"))
  (assert s "the approvals skill did not load")
  s)

(defn parse [text]
  ((. (hy.I.importlib.import-module "passepartout_skills.approvals") parse-command) text))

(defn test-approve-once-and-for-a-while [skill]
  (expect (parse "/approve KXMPRT") [:command "approve" :key "KXMPRT" :minutes None] "once")
  (expect (parse "  /approve kxmprt  ") [:command "approve" :key "kxmprt" :minutes None] "spaces and case")
  (expect (parse "/APPROVE KXMPRT") [:command "approve" :key "KXMPRT" :minutes None] "command in capitals")
  (expect (parse "/approve@passepartout_bot KXMPRT") [:command "approve" :key "KXMPRT" :minutes None]
          "Telegram's @bot form")
  (for [[tail minutes] [["30m" 30] ["30 min" 30] ["45 minutes" 45] ["for 30 minutes" 30]
                        ["1h" 60] ["2 hours" 120] ["for 1 hour" 60]]]
    (expect (parse f"/approve KXMPRT {tail}") [:command "approve" :key "KXMPRT" :minutes minutes] tail))
  (setv token "Zq3-8_a2b4c6d8e0f2g4h6j8k0m2n4p6")
  (expect (parse f"/approve {token}") [:command "approve" :key token :minutes None] "a long token"))

(defn test-approve-for-a-while-naming-hosts [skill]
  (expect (parse "/approve KXMPRT 1h github.com") [:command "approve" :key "KXMPRT" :minutes 60
                                                   :hosts ["github.com"]]
          "one host")
  (expect (parse "/approve KXMPRT for 2 hours pypi.org 127.0.0.2:8080")
          [:command "approve" :key "KXMPRT" :minutes 120 :hosts ["pypi.org" "127.0.0.2:8080"]]
          "a duration of several words, and two hosts")
  (for [text ["/approve KXMPRT github.com" "/approve KXMPRT 1h https://github.com"
              "/approve KXMPRT 1h github.com please"]]
    (expect (proto-get (parse text) ':command) "usage" text)))

(defn test-deny-with-and-without-a-reason [skill]
  (expect (parse "/deny KXMPRT") [:command "deny" :key "KXMPRT" :reason None] "no reason")
  (expect (parse "/deny KXMPRT not on a Friday") [:command "deny" :key "KXMPRT" :reason "not on a Friday"]
          "a reason"))

(defn test-the-other-commands [skill]
  (expect (parse "/pending") [:command "pending"] "pending")
  (expect (parse "/grants") [:command "grants"] "grants")
  (expect (parse "/revoke 3") [:command "revoke" :id 3] "revoke")
  (expect (parse "/revoke #3") [:command "revoke" :id 3] "revoke #N"))

(defn test-a-command-with-wrong-arguments-is-answered-with-its-usage [skill]
  (for [text ["/approve" "/approve KXMPRT no wait" "/approve KXMPRT 0m" "/approve KXMPRT 30 parsecs"
              "/approve KX" "/deny" "/revoke" "/revoke three" "/revoke 3 4"]]
    (expect (proto-get (parse text) ':command) "usage" text)))

(defn test-text-that-is-not-a-command-is-not-claimed [skill]
  (for [text ["yes" "approve KXMPRT" "ok /approve KXMPRT" "/approved KXMPRT" "/approveKXMPRT"
              "/pendingx" "" "/help"]]
    (expect (parse text) None text))
  (expect (parse None) None "no text"))

(defn ctx [registry]
  "A context whose services hold REGISTRY (and no store: nothing here is stored)."
  (make-context :workspace "." :session "test:t1" :skills registry
                :services (Services {} None registry None)))

(defn signal [sensor text]
  [:type :event :source [:gateway :test :chat "t1" :user "a"] :session "test:t1"
   :payload [:sensor (kw sensor) :text text]])

(defn test-only-what-people-send-is-read-as-a-command [registry skill]
  (setv handler (get skill "handlers" 0))
  (expect (handler (signal "tool-result" "/approve KXMPRT") (ctx registry)) None "a tool result")
  (expect (handler (signal "timer" "/approve KXMPRT") (ctx registry)) None "another sensor")
  (expect (handler (signal "user-input" "hello") (ctx registry)) None "plain text")
  (setv usage (handler (signal "user-input" "/approve") (ctx registry)))
  (expect (. (proto-get (proto-get (get usage 0) ':payload) ':kind) name) "notice" "usage reply kind"))

(defn test-perceive-stops-a-command-before-reason [registry]
  (setv seen (run (perceive (signal "user-input" "/revoke") (ctx registry))))
  (expect (proto-get seen ':handled-by) "approvals" "handled by"))
