;; Tests of passepartout/routines.hy and skills/routines.hy: :when and its
;; arithmetic across DST, the gate, the store's claims, and routines running
;; in a daemon on an injected clock with the scripted model on loopback.

(import asyncio datetime zoneinfo
        pytest
        passepartout.proto [kw proto-get proto-read]
        passepartout.config [config-defaults]
        passepartout.context [make-context]
        passepartout.verify [verify]
        passepartout.routines [parse-when next-due shortest-gap show-time routine-add routine-get
                               routine-claim routine-runs routines-due]
        passepartout.store [store-open store-close]
        passepartout.records [events]
        steps [expect user-says text-of kind-of V until])

(setv BERLIN "Europe/Berlin")

(defn at [y mo d h mi [tz BERLIN]]
  "The POSIX time of that wall-clock time in TZ."
  (.timestamp (datetime.datetime y mo d h mi :tzinfo (zoneinfo.ZoneInfo tz))))

(defn local [t [tz BERLIN]]
  (datetime.datetime.fromtimestamp t (zoneinfo.ZoneInfo tz)))

;; * :when

(defn test-when-reads-a-cron-line-a-time-and-an-interval []
  (setv now (at 2030 1 1 12 0))
  (expect (proto-get (get (parse-when "0 9 * * 1" BERLIN now) 0) ':kind) "cron" "a cron line")
  (expect (proto-get (get (parse-when "every 2h" BERLIN now) 0) ':seconds) 7200 "an interval")
  (expect (proto-get (get (parse-when "every 30 minutes" BERLIN now) 0) ':seconds) 1800 "minutes")
  (setv [spec why] (parse-when "2030-05-01T07:00" BERLIN now))
  (expect why None "an ISO time")
  ;; a time without a zone is the person's
  (expect (proto-get spec ':at) (at 2030 5 1 7 0) "the time, read in Berlin"))

(defn test-anything-else-is-refused-with-the-shapes-there-are []
  (setv now (at 2030 1 1 12 0))
  (for [bad ["tomorrow-ish" "every fortnight" "61 * * * *" "2020-01-01T00:00" "" "every 0h"]]
    (setv [spec why] (parse-when bad BERLIN now))
    (expect spec None f"{bad !r} is read")
    (assert (isinstance why str) f"{bad !r}: no reason")
    (assert (or (in "every 2h" why) (in "past" why) (in "every 0" why) (in ":when is needed" why))
            f"{bad !r}: the reason does not say what to write: {why}")))

;; * DST: a routine at 02:30 daily in Europe/Berlin runs once a day

(defn runs-between [text start end [tz BERLIN]]
  (setv [spec _] (parse-when text tz start)
        t start out [])
  (while True
    (setv t (next-due spec tz t start))
    (when (or (is t None) (> t end)) (break))
    (.append out t))
  out)

(defn test-spring-forward-runs-once-at-the-end-of-the-gap []
  (setv runs (runs-between "30 2 * * *" (at 2026 3 27 12 0) (at 2026 3 31 12 0))
        days (lfor t runs (. (local t) day)))
  (expect days [28 29 30 31] "one run a day")
  ;; 02:30 on the 29th does not exist: it runs at 03:00 CEST, as cron does
  (expect (.strftime (local (get runs 1)) "%H:%M %Z") "03:00 CEST" "the run in the gap"))

(defn test-fall-back-runs-once-not-twice []
  (setv runs (runs-between "30 2 * * *" (at 2026 10 23 12 0) (at 2026 10 27 12 0))
        days (lfor t runs (. (local t) day)))
  (expect days [24 25 26 27] "one run a day")
  (expect (.strftime (local (get runs 1)) "%H:%M %Z") "02:30 CEST" "the first 02:30 of the 25th"))

(defn test-an-hourly-line-runs-every-hour-there-is []
  ;; a wildcard hour runs by the clock: the repeated hour has its run too
  (setv runs (runs-between "0 * * * *" (at 2026 10 25 0 30) (at 2026 10 25 4 30)))
  (expect (len runs) 5 "hourly runs across the fall-back (01, 02 CEST, 02 CET, 03, 04)")
  (expect (sorted (set (gfor [a b] (zip runs (cut runs 1 None)) (- b a)))) [3600.0] "an hour apart"))

(defn test-an-interval-runs-from-when-it-was-set []
  (setv [spec _] (parse-when "every 2h" BERLIN 0))
  (expect (next-due spec BERLIN 1000.0 100.0) 7300.0 "the first run")
  (expect (next-due spec BERLIN 7300.0 100.0) 14500.0 "the second")
  (expect (next-due spec BERLIN 20000.0 100.0) 21700.0 "after a gap: the next on the grid")
  (expect (shortest-gap spec BERLIN 0) 7200.0 "the gap"))

;; * The gate

(setv NOW (at 2030 1 1 12 0))

(defn judge [registry text [config None]]
  (verify (proto-read text)
          (make-context :workspace "/tmp" :session "test:1" :skills registry :now NOW
                        :config (or config {"routines" (| (config-defaults "routines") {"time_zone" BERLIN})})
                        :sandbox [:kind :none])))

(defn test-a-routine-and-a-reminder-are-allowed [registry]
  (for [text ["(:action :schedule :when \"0 9 * * 1\" :objective \"summarise my open issues\" :explanation \"asked for\")"
              "(:action :schedule :when \"2030-05-01T07:00\" :say \"call the dentist\" :explanation \"a reminder\")"
              "(:action :schedule :when \"every 2h\" :objective \"check the backup\" :quiet true :catch-up \"skip\" :until \"2031-01-01T00:00\" :explanation \"asked for\")"]]
    (setv out (judge registry text))
    (expect (V out) "allow" f"{text}: {(proto-get out ':reason)}")))

(defn test-what-could-not-run-is-refused-saying-what-to-change [registry]
  (for [[text words] [["(:action :schedule :when \"someday\" :objective \"x\" :explanation \"e\")" "every 2h"]
                      ["(:action :schedule :when \"* * * * *\" :objective \"x\" :explanation \"e\")" "at most every 5 minutes"]
                      ["(:action :schedule :when \"every 1m\" :objective \"x\" :explanation \"e\")" "at most every 5 minutes"]
                      ["(:action :schedule :when \"every 1h\" :explanation \"e\")" "needs :objective"]
                      ["(:action :schedule :when \"every 1h\" :objective \"x\" :say \"y\" :explanation \"e\")" "not both"]
                      ["(:action :schedule :when \"every 1h\" :objective \"x\" :until \"2020-01-01T00:00\" :explanation \"e\")" "past"]
                      ["(:action :schedule :when \"every 1h\" :objective \"x\" :catch-up \"twice\" :explanation \"e\")" "neither"]
                      ["(:action :routine :op :explode :id \"r1\" :explanation \"e\")" ":op must be"]]]
    (setv out (judge registry text))
    (expect (V out) "reject" text)
    (expect (proto-get out ':gate) "routines" f"the gate of {text}")
    (assert (in words (proto-get out ':reason)) f"{text}: {(proto-get out ':reason)}")))

(defn test-the-frequency-limit-is-the-configs [registry]
  (setv config {"routines" {"time_zone" BERLIN "min_minutes" 0}})
  (setv out (judge registry "(:action :schedule :when \"* * * * *\" :objective \"x\" :explanation \"the person asked\")" config))
  (expect (V out) "allow" f"every minute, with no limit: {(proto-get out ':reason)}"))


(defn test-scheduling-needs-an-explanation-like-any-effect [registry]
  (setv out (judge registry "(:action :schedule :when \"every 1h\" :objective \"x\")"))
  (expect (V out) "reject" "verdict")
  (expect (proto-get out ':gate) "explanation" "gate"))

;; * The store: one claim wins

(defn [pytest.fixture] store [tmp-path]
  (setv s (store-open (str (/ tmp-path "s.sqlite3"))))
  (yield s)
  (store-close s))

(defn add-reminder [store id when due [now 100.0]]
  (routine-add store [:id id :session "test:1" :source [:gateway :test :chat "1"]
                      :spec (get (parse-when when BERLIN now) 0) :say "hello" :tz BERLIN :next-due due]
               now))

(defn test-two-daemons-on-one-file-claim-a-run-once [store tmp-path]
  (add-reminder store "r1" "every 1h" 3700.0)
  (setv other (store-open (str (/ tmp-path "s.sqlite3"))))
  (try
    ;; both read the routine due, then both claim it
    (setv [mine] (routines-due store 4000.0)
          [theirs] (routines-due other 4000.0))
    (assert (routine-claim store mine 4000.0 "claimed" 4000.0) "the first claim")
    (assert (not (routine-claim other theirs 4000.0 "claimed" 4000.0)) "the second claim won too")
    (finally (store-close other)))
  (expect (lfor r (routine-runs store "r1") (proto-get r ':due)) [3700.0] "the runs")
  (expect (proto-get (routine-get store "r1") ':next-due) 7300.0 "the next run")
  (setv kinds (lfor e (events store :kind "routine") (proto-get (proto-get e ':data) ':event)))
  (expect kinds ["created"] "the journal's routine turns"))

(defn test-a-one-time-routine-is-done-after-its-run [store]
  (setv due (at 2030 5 1 7 0))
  (add-reminder store "r2" "2030-05-01T07:00" due :now NOW)
  (setv [r] (routines-due store (+ due 1)))
  (assert (routine-claim store r (+ due 1) "claimed" (+ due 1)) "the claim")
  (setv r (routine-get store "r2"))
  (expect [(proto-get r ':state) (proto-get r ':next-due)] ["done" None] "after its one run"))

;; * Routines running in a daemon, on an injected clock

(import passepartout.providers [make-provider]
        passepartout.daemon [boot shutdown]
        passepartout.gateways.hub [Hub]
        passepartout.routines [routines-of]
        passepartout.journal [journal-export]
        steps [last-said says]
        time)

(setv KEY-ENV "PASSEPARTOUT_TEST_SCRIPTED_KEY")

(defclass Clock []
  "A clock a test moves."
  (defn __init__ [self t] (setv self.t t))
  (defn __call__ [self] self.t))

(defn [pytest.fixture] daemon [tmp-path openai-server monkeypatch]
  (.setenv monkeypatch KEY-ENV "sk-scripted-test")
  (setv config (/ tmp-path "config.toml"))
  (.write-text config "[sandbox]\nmode = \"off\"\n[routines]\ntime_zone = \"Europe/Berlin\"\n")
  (setv services (boot :config-path (str config)
                       :environ {"PASSEPARTOUT_DATA_DIR" (str (/ tmp-path "data")) "HOME" (str tmp-path)}
                       :providers [(make-provider "openai/scripted" :api-base (.url openai-server "ok")
                                                  :api-key-env KEY-ENV :tool-results "native")]))
  (yield services)
  (shutdown services))

(defn texts [replies]
  (lfor r replies (str (text-of r))))

(defn :async with-hub [services scenario]
  "Run (SCENARIO hub replies) on a hub of SERVICES with the test gateway."
  (setv replies [])
  (defn :async deliver [reply] (.append replies reply))
  (setv hub (Hub services [{"name" "test" "deliver" deliver}]))
  (try
    (await (.resume hub))
    (await (scenario hub replies))
    (finally (await (.close hub)))))

(defn test-a-scheduled-routine-runs-as-a-worker-and-its-result-comes-to-the-chat [daemon openai-server]
  (setv clock (Clock (at 2030 1 7 8 0))
        daemon.clock clock
        openai-server.responder
        (fn [body]
          (setv last (last-said body))
          (cond (in "Your objective:\nsummarise my open issues" last) (says "3 open issues, 1 urgent")
                (.startswith last "Result of (:action :schedule") (says "Scheduled.")
                True "(:action :schedule :when \"0 9 * * 1\" :objective \"summarise my open issues\" :explanation \"asked for\")")))
  (defn :async scenario [hub replies]
    (await (.receive hub "test" "m1" (user-says "every Monday at 9, summarise my open issues" "1")))
    (await (until (fn [] (in "Scheduled." (texts replies)))))
    (setv [r] (routines-of daemon.store "test:1"))
    ;; Monday 2030-01-07 09:00 in Berlin, stated back in the person's zone
    (expect (proto-get r ':next-due) (at 2030 1 7 9 0) "the next run")
    (await (.receive hub "test" "m2" (user-says "/routines" "1")))
    (await (until (fn [] (any (gfor t (texts replies) (in "Routines of this conversation" t))))))
    (setv listing (next (gfor t (texts replies) :if (in "Routines of this conversation" t) t)))
    (assert (in "next Mon 2030-01-07 09:00 CET" listing) listing)
    ;; nothing is due before its time
    (expect (await (.run-due hub.routines)) 0 "runs before 09:00")
    (setv clock.t (+ (at 2030 1 7 9 0) 1))
    (expect (await (.run-due hub.routines)) 1 "runs at 09:00")
    (expect (await (.run-due hub.routines)) 0 "a second pass")
    (await (until (fn [] (any (gfor t (texts replies) (in "3 open issues, 1 urgent" t)))))))
  (asyncio.run (with-hub daemon scenario))
  (setv [r] (routines-of daemon.store "test:1")
        runs (routine-runs daemon.store (proto-get r ':id)))
  (expect (lfor x runs (proto-get x ':state)) ["done"] "the runs")
  (expect (proto-get r ':next-due) (at 2030 1 14 9 0) "the run after")
  (setv kinds (lfor e (events daemon.store :kind "routine") (proto-get (proto-get e ':data) ':event)))
  (expect kinds ["created" "run" "done"] "the routine's turns")
  (setv exported (.join "" (journal-export daemon.store)))
  (assert (in "\"routine\"" exported) "journal export shows no routine turn"))

(defn add-direct [services id when [say None] [objective None] [quiet False] [catch-up "once"] [due None]]
  (setv now (services.clock)
        [spec _] (parse-when when BERLIN now))
  (routine-add services.store [:id id :session "test:1" :source [:gateway :test :chat "1"] :spec spec
                               :say say :objective objective :quiet quiet :catch-up catch-up :tz BERLIN
                               :next-due (or due (next-due spec BERLIN now now))]
               now))

(defn test-a-quiet-routine-tells-only-of-a-failure [daemon openai-server]
  (setv clock (Clock (at 2030 1 1 12 0))
        daemon.clock clock
        openai-server.responder
        (fn [body]
          (setv last (last-said body))
          (cond (in "Your objective:\ncheck the backup" last) (says "the backup is fine")
                True
                ;; the mail worker proposes only what its gate refuses, so its run fails
                "(:action :schedule :when \"whenever\" :objective \"x\" :explanation \"try it anyway\")")))
  (add-direct daemon "rok" "every 1h" :objective "check the backup" :quiet True)
  (add-direct daemon "rbad" "every 1h" :objective "check the mail" :quiet True)
  (defn :async scenario [hub replies]
    (setv clock.t (at 2030 1 1 13 1))
    ;; the loop may claim one of them first: each runs once either way
    (await (.run-due hub.routines))
    (await (until (fn [] (all (gfor id ["rok" "rbad"] (routine-runs daemon.store id))))))
    (await (until (fn [] (= (sorted (lfor id ["rok" "rbad"] (proto-get (get (routine-runs daemon.store id) 0) ':state)))
                            ["done" "failed"])))))
  (asyncio.run (with-hub daemon scenario))
  (setv told (lfor [id text] daemon.routines.told id))
  (expect told ["rbad"] "the routines that told the chat"))

(defn test-reminders-say-their-text-once-a-day-across-dst [daemon]
  ;; 02:30 daily, Berlin, from the Friday before spring-forward to the Tuesday after fall-back's week
  (setv clock (Clock (at 2026 3 27 12 0))
        daemon.clock clock)
  (add-direct daemon "rdst" "30 2 * * *" :say "water the plants")
  (setv said [])
  (defn :async scenario [hub replies]
    (for [start [(at 2026 3 27 12 0) (at 2026 10 23 12 0)]]
      (when (!= start (clock))
        ;; the routine was paused in between; resumed, it runs next after now
        (await (.set-state hub.routines "rdst" "paused"))
        (setv clock.t start)
        (await (.set-state hub.routines "rdst" "active")))
      ;; every 10 minutes for four days
      (for [i (range (* 4 24 6))]
        (setv clock.t (+ start (* 600 (+ i 1))))
        (await (.run-due hub.routines))))
    (await (until (fn [] (= (len (lfor t (texts replies) :if (in "water the plants" t) t)) 8))))
    (.extend said (texts replies)))
  (asyncio.run (with-hub daemon scenario))
  (setv days (lfor r (routine-runs daemon.store "rdst") (.strftime (local (proto-get r ':due)) "%m-%d %H:%M")))
  (expect days ["03-28 02:30" "03-29 03:00" "03-30 02:30" "03-31 02:30"
                "10-24 02:30" "10-25 02:30" "10-26 02:30" "10-27 02:30"]
          "one run a day")
  (expect (len (lfor t said :if (= t "Reminder: water the plants") t)) 8 "said once a run"))

(defn test-a-restart-catches-up-once-or-skips-by-policy-and-says-which [daemon]
  (setv clock (Clock (at 2030 1 1 12 0))
        daemon.clock clock)
  (add-direct daemon "ronce" "every 1h" :say "stretch")
  (add-direct daemon "rskip" "every 1h" :say "drink water" :catch-up "skip")
  ;; the daemon was down across three due runs of each
  (setv clock.t (at 2030 1 1 15 30))
  (defn :async scenario [hub replies]
    (await (until (fn [] (>= (len replies) 3)))))
  (asyncio.run (with-hub daemon scenario))
  (setv told (dict (gfor [id text] daemon.routines.told :if (in "While I was not running" text) #(id text))))
  (assert (in "missed 3 runs" (get told "ronce")) (get told "ronce"))
  (assert (in "runs once now" (get told "ronce")) (get told "ronce"))
  (assert (in "missed 3 runs" (get told "rskip")) (get told "rskip"))
  (assert (in "skipped" (get told "rskip")) (get told "rskip"))
  (assert (in "16:00 CET" (get told "rskip")) (get told "rskip"))
  (expect (lfor r (routine-runs daemon.store "ronce") (proto-get r ':state)) ["said"] "ronce's runs")
  (expect (lfor r (routine-runs daemon.store "rskip") (proto-get r ':state)) ["skipped"] "rskip's runs")
  (expect [(proto-get (routine-get daemon.store "ronce") ':next-due) (proto-get (routine-get daemon.store "rskip") ':next-due)]
          [(at 2030 1 1 16 0) (at 2030 1 1 16 0)] "the next runs")
  (setv kinds (lfor e (events daemon.store :kind "routine") (proto-get (proto-get e ':data) ':event)))
  (for [k ["catch-up" "missed" "said"]]
    (assert (in k kinds) f"no {k} turn: {kinds}")))

(defn test-routines-pause-resume-and-delete-by-slash-command [daemon]
  (setv daemon.clock (Clock (at 2030 1 1 12 0)))
  (add-direct daemon "rp" "every 1h" :say "hi")
  (defn :async scenario [hub replies]
    (for [[key text] [["m1" "/routines pause rp"] ["m2" "/routines"] ["m3" "/routines resume rp"]
                      ["m4" "/routines delete rp"] ["m5" "/routines delete rp"] ["m6" "/routines"]]]
      (setv n (len replies))
      (await (.receive hub "test" key (user-says text "1")))
      (await (until (fn [] (> (len replies) n))))))
  (setv out [])
  (defn :async run [hub replies]
    (await (scenario hub replies))
    (.extend out (texts replies)))
  (asyncio.run (with-hub daemon run))
  (expect (get out 0) "The routine rp is paused." "pause")
  (assert (in "— paused" (get out 1)) (get out 1))
  (expect (get out 2) "The routine rp is active." "resume")
  (expect (get out 3) "The routine rp is deleted." "delete")
  (assert (in "deleted already" (get out 4)) (get out 4))
  (expect (get out 5) "No routines are set in this conversation." "the list after"))

;; * A run's escalation, asked in the chat that set the routine; a grant covers its later runs

(import pathlib [Path])

(defn test-a-runs-escalation-names-the-routine-and-a-grant-covers-its-later-runs [daemon openai-server]
  (.write-text (/ (Path (get daemon.config "workspace")) ".env") "A=1\n")
  ;; grants expire by the clock: this one starts from now
  (setv clock (Clock (time.time))
        daemon.clock clock
        openai-server.responder
        (fn [body]
          (setv last (last-said body))
          (cond (in "Your objective:\nread the env file" last) "(:action :read-file :path \".env\")"
                (.startswith last "Result of (:action :read-file")
                (says (if (in "A=1" last) "the env file sets A" "the env file was not read"))
                True (says "?"))))
  (add-direct daemon "renv" "every 1h" :objective "read the env file")
  (defn asks [replies] (lfor r replies :if (= (kind-of r) "approval") r))
  (defn results [replies] (lfor t (texts replies) :if (in "the env file sets A" t) t))
  (setv seen [])
  (defn :async scenario [hub replies]
    (setv clock.t (+ clock.t 3601))
    (await (.run-due hub.routines))
    (await (until (fn [] (asks replies))))
    (setv ask (get (asks replies) 0)
          code (proto-get (proto-get (proto-get ask ':payload) ':approval) ':code))
    (await (.receive hub "test" "m1" (user-says f"/approve {code} 4h" "1")))
    (await (until (fn [] (= (len (results replies)) 1))))
    (setv clock.t (+ clock.t 3600))
    (await (.run-due hub.routines))
    (await (until (fn [] (= (len (results replies)) 2))))
    (.extend seen replies))
  (asyncio.run (with-hub daemon scenario))
  (setv [ask] (asks seen))
  (expect (proto-get ask ':session) "test:1" "where the run's question was asked")
  (assert (in "The worker renv of the workflow 'routine renv (every 1h: read the env file)'" (text-of ask))
          (text-of ask))
  (expect (lfor r (routine-runs daemon.store "renv") (proto-get r ':state)) ["done" "done"] "the runs")
  (expect (.query daemon.store "SELECT session FROM grants") [#("routine:renv")] "where the grant is kept"))

(defn test-until-ends-a-routine [store]
  (routine-add store [:id "ru" :session "test:1" :source [:gateway :test :chat "1"]
                      :spec (get (parse-when "every 1h" BERLIN 0) 0) :say "hi" :tz BERLIN
                      :next-due 3700.0 :until 5000.0]
               100.0)
  (setv [r] (routines-due store 3800.0))
  (assert (routine-claim store r 3800.0 "claimed" 3800.0) "the claim")
  (expect (proto-get (routine-get store "ru") ':state) "done" "after its last run before :until"))

(defn test-news-go-only-to-a-chat-the-daemon-has-spoken-in [registry store]
  (.write store "INSERT INTO sessions (name, gateway, created, last_seen) VALUES ('test:2', 'test', 0, 0)" #())
  (defn judge-here [text]
    (verify (proto-read text)
            (make-context :workspace "/tmp" :session "test:1" :skills registry :now NOW :store store
                          :config {"routines" (| (config-defaults "routines") {"time_zone" BERLIN})}
                          :sandbox [:kind :none])))
  (expect (V (judge-here "(:action :schedule :when \"every 1h\" :say \"hi\" :chat \"test:2\" :explanation \"for the other chat\")"))
          "allow" "a chat it has spoken in")
  (setv out (judge-here "(:action :schedule :when \"every 1h\" :say \"hi\" :chat \"telegram:666\" :explanation \"for a stranger\")"))
  (expect (V out) "reject" "a stranger's chat")
  (assert (in "no chat this daemon has spoken in" (proto-get out ':reason)) (proto-get out ':reason)))

(import subprocess sys)

(defn test-passepartout-verify-judges-a-schedule-like-any-action [tmp-path]
  (setv exe (/ (. (Path sys.executable) parent) "passepartout")
        p (subprocess.run [(str exe) "verify"]
                          :input "(:type :request :payload (:action :schedule :when \"every 1m\" :objective \"x\" :explanation \"the person asked\"))"
                          :capture-output True :text True :timeout 300
                          :env {"HOME" (str tmp-path) "PATH" "/usr/bin:/bin"
                                "PASSEPARTOUT_DATA_DIR" (str (/ tmp-path "data"))}))
  (assert (in "\"gate\": \"routines\"" p.stdout) (+ p.stdout p.stderr))
  (assert (in "at most every 5 minutes" p.stdout) p.stdout))

(defn test-a-routine-of-another-conversation-cannot-be-deleted [registry store]
  (add-reminder store "rmine" "every 1h" 3700.0)
  (defn judge-in [session text]
    (verify (proto-read text)
            (make-context :workspace "/tmp" :session session :skills registry :now NOW :store store
                          :config {"routines" (config-defaults "routines")} :sandbox [:kind :none])))
  (setv delete "(:action :routine :op :delete :id \"rmine\" :explanation \"the person no longer wants it\")")
  (expect (V (judge-in "test:1" delete)) "allow" "from the conversation that set it")
  (setv out (judge-in "test:2" delete))
  (expect (V out) "reject" "from another conversation")
  (assert (in "another conversation" (proto-get out ':reason)) (proto-get out ':reason))
  (setv out (judge-in "test:1" "(:action :routine :op :delete :id \"rnone\" :explanation \"the person no longer wants it\")"))
  (assert (in "is no routine" (proto-get out ':reason)) (proto-get out ':reason)))
