;; * Why

"The reason stage needs one thing from the outside world: an answer to a prompt.
Any single provider can be down, slow, out of credit, or answer nonsense, so the
cascade asks an ordered list of them and takes the first real answer. Whatever
happens it returns a plist and never raises: a failure is data the reason stage
can tell the person about. The one exception is cancellation: a turn the person
stopped ends where it is, and nothing of it goes on."

(import asyncio inspect logging threading time
        passepartout.proto [proto-get is-plist]
        passepartout.providers [DEFAULT-TIMEOUT SYMBOLIC]
        passepartout.llm [_attempt _error-text _litellm-ready _short]
        passepartout.wire [CALL-KEY _native-tools _tool-results])

;; The log is the daemon's when it has one; elsewhere (the chat, a script) the
;; person already heard the line, and Python's last-resort printing to stderr
;; would say it again over the terminal.
(setv log (logging.getLogger "passepartout.cascade"))
(.addHandler log (logging.NullHandler))

;; * The circuit breaker

(setv RETRY-AFTER-SHORT 5.0
      PROBE-DEADLINE 3.0)

(defn make-cascade [providers [cooldown 60.0] [failure-threshold 3] [clock time.monotonic]
                    [store None] [probe-deadline PROBE-DEADLINE]]
  "The state of a cascade over PROVIDERS, with one circuit breaker each; with a
   STORE, the breakers are read from it and written back (see below)."
  (setv providers (list providers)
        cascade {"providers" providers
                 "cooldown" (float cooldown)
                 "failure-threshold" (max 1 (int failure-threshold))
                 "clock" clock
                 "probe-deadline" (float probe-deadline)
                 "store" store
                 "breakers" (lfor _ providers {"failures" 0 "opened-at" None
                                               "incident" None "clause" None "heard" (set)})
                 "lock" (threading.Lock)})
  (when store
    (_load-breakers cascade))
  cascade)

(defn _admit [cascade i]
  "True when provider I may be called now."
  (with [(get cascade "lock")]
    (setv b (get cascade "breakers" i))
    (cond (< (get b "failures") (get cascade "failure-threshold")) True
          (>= (- ((get cascade "clock")) (get b "opened-at")) (get cascade "cooldown"))
          (do (setv (get b "opened-at") ((get cascade "clock")))
              True)
          True False)))

(defn _first-hearing [b session]
  "True the first time SESSION asks about the incident of breaker B."
  (if (in session (get b "heard"))
      False
      (do (.add (get b "heard") session)
          True)))

(defn _record [cascade i ok [kind None] [clause None] [session None] [open-for None]]
  "Count a call of provider I. After a failure of KIND (told by CLAUSE), True
   when SESSION has not heard of this incident yet. OPEN-FOR, when given, opens
   the breaker at once for that many seconds (a long retry-after, a timeout with
   a healthy provider behind)."
  (with [(get cascade "lock")]
    (setv b (get cascade "breakers" i)
          was (get b "failures"))
    (if ok
        (do (setv (get b "failures") 0
                  (get b "opened-at") None
                  (get b "incident") None
                  (get b "clause") None)
            (.clear (get b "heard"))
            (setv fresh False))
        (do (+= (get b "failures") 1)
            (setv now ((get cascade "clock")))
            (cond (is-not open-for None)
                  (setv (get b "failures") (max (get b "failures") (get cascade "failure-threshold"))
                        (get b "opened-at") (- now (- (get cascade "cooldown") open-for)))
                  (>= (get b "failures") (get cascade "failure-threshold"))
                  (setv (get b "opened-at") now))
            (when (!= (get b "incident") kind)
              (setv (get b "incident") kind)
              (.clear (get b "heard")))
            (setv (get b "clause") clause
                  fresh (_first-hearing b session))))
    (when (or (not ok) was)
      (_save-breaker cascade i b))
    fresh))

(defn _suspect [cascade i]
  "True when provider I's last call timed out: it gets a short probe before a full deadline."
  (with [(get cascade "lock")]
    (= (get cascade "breakers" i "incident") "timeout")))

(defn _healthy-after [cascade i]
  "True when a model after provider I (not the built-in commands) has not failed lately."
  (with [(get cascade "lock")]
    (any (gfor [p b] (cut (list (zip (get cascade "providers") (get cascade "breakers"))) (+ i 1) None)
               (and (!= (get p "model") SYMBOLIC) (= (get b "failures") 0))))))

(defn cascade-status [cascade]
  "One plist per provider: (:provider NAME :model M :state :closed|:open|:half-open :failures N)."
  (with [(get cascade "lock")]
    (setv now ((get cascade "clock")))
    (lfor [p b] (zip (get cascade "providers") (get cascade "breakers"))
          [:provider (.get p "name")
           :model (.get p "model")
           :state (cond (< (get b "failures") (get cascade "failure-threshold")) ':closed
                        (>= (- now (get b "opened-at")) (get cascade "cooldown")) ':half-open
                        True ':open)
           :failures (get b "failures")])))

;; ** The breakers outlive the process

(defn _load-breakers [cascade]
  (setv store (get cascade "store")
        now ((get cascade "clock"))
        wall (time.time))
  (try (setv rows (.query store "SELECT provider, failures, opened_at, incident, clause FROM breakers"))
       (except [e Exception]
         (.warning log "could not read the breakers: %s" e)
         (return None)))
  (setv saved (dfor [name failures opened incident clause] rows name #(failures opened incident clause)))
  (for [[p b] (zip (get cascade "providers") (get cascade "breakers"))]
    (setv row (.get saved (.get p "name")))
    (when row
      (setv [failures opened incident clause] row)
      (.update b {"failures" (int failures)
                  "opened-at" (when (is-not opened None) (- now (- wall opened)))
                  "incident" incident
                  "clause" clause}))))

(defn _save-breaker [cascade i b]
  (setv store (get cascade "store"))
  (when store
    (setv opened (get b "opened-at")
          wall (when (is-not opened None) (- (time.time) (- ((get cascade "clock")) opened))))
    (try (.write store (+ "INSERT INTO breakers (provider, failures, opened_at, incident, clause, updated) "
                          "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (provider) DO UPDATE SET "
                          "failures = excluded.failures, opened_at = excluded.opened_at, "
                          "incident = excluded.incident, clause = excluded.clause, updated = excluded.updated")
                 #((.get (get cascade "providers" i) "name") (get b "failures") wall
                   (get b "incident") (get b "clause") (time.time)))
         (except [e Exception]
           (.warning log "could not keep the breaker of %s: %s" (.get (get cascade "providers" i) "name") e)))))

;; * Telling the person

(defn _clause [provider kind detail]
  "What went wrong with PROVIDER, as the words after its name."
  (setv kind (or kind "error"))
  (cond
    (= kind "timeout") f"did not answer in {(.get provider "timeout" DEFAULT-TIMEOUT) :g} s"
    (= kind "no-key") (if (.get provider "api_key_env")
                          f"has no API key: the environment variable {(.get provider "api_key_env")} is not set"
                          f"has no API key: {(.replace detail " (the API key)" "")}")
    (= kind "connect") f"could not be reached ({detail})"
    (= kind "unreachable") f"is not running: {detail}"
    (= kind "http-401") f"refused the key ({detail})"
    (= kind "http-403") f"refused access ({detail})"
    (= kind "http-429") f"is over its quota or rate limit ({detail})"
    (= kind "http-404") f"does not know this model or address ({detail})"
    (.startswith kind "http-") f"answered with an error ({detail})"
    (= kind "garbage") f"answered something that is not a chat completion ({detail})"
    (= kind "not-api") f"gave no API answer: {detail} (is api_base right, or is a login page in the way?)"
    (= kind "empty") "answered nothing"
    True f"failed ({detail})"))

(defn _skip [cascade i session]
  "#(detail kind clause fresh) for provider I, skipped while its breaker is open;
   FRESH when SESSION has not heard of the incident that opened it."
  (with [(get cascade "lock")]
    (setv b (get cascade "breakers" i)
          failures (get b "failures")
          wait (max 0 (- (get cascade "cooldown") (- ((get cascade "clock")) (get b "opened-at")))))
    #(f"circuit open after {failures} failures in a row; next try in {wait :.0f} s"
      (get b "incident")
      (+ f"is paused for {wait :.0f} s"
         (if (in (get b "incident") #("timeout" "http-429")) "" f" after {failures} failures in a row")
         (if (get b "clause") f" (it {(get b "clause")})" ""))
      (_first-hearing b session))))

(defn _next-words [provider]
  "What the line says comes next, when PROVIDER is the next model asked."
  (if (= (.get provider "model") SYMBOLIC)
      "falling back to the built-in commands"
      f"trying {(.get provider "name" (.get provider "model"))}"))

;; * The cascade

(setv _PROBE-REQUEST [:messages [{"role" "user" "content" "Say ok."}]])

(defn :async _try [cascade i provider request say]
  "The attempt of provider I at REQUEST: after a short probe when its last call
   timed out, and once more after a short retry-after (SAY tells the person)."
  (setv name (.get provider "name" (.get provider "model")))
  (when (and (!= (get provider "model") SYMBOLIC) (_suspect cascade i))
    (setv probe (await (_attempt (| provider {"timeout" (get cascade "probe-deadline") "grace" 1.0
                                              "max_tokens" 1})
                                 _PROBE-REQUEST)))
    (when (not (in (get probe 0) #(':ok ':empty)))
      (return #((get probe 0) (+ "the short probe after a timeout: " (get probe 1))
                (get probe 2) (get probe 3)))))
  (setv result (await (_attempt provider request))
        wait (when (and (!= (get result 0) ':ok) (is-plist (get result 2)))
               (proto-get (get result 2) ':retry-after)))
  (when (and (is-not wait None) (<= wait RETRY-AFTER-SHORT))
    (await (say f"model {name} is over its rate limit; asking it again in {wait :g} s"))
    (await (asyncio.sleep wait))
    (setv result (await (_attempt provider request))))
  result)

(defn _failure-reason [attempts]
  (+ "all providers failed: "
     (if attempts
         (.join "; " (gfor a attempts
                           f"{(proto-get a ':provider)} {(. (proto-get a ':outcome) name)} ({(proto-get a ':detail)})"))
         "no providers are configured")))

(defn :async cascade-complete [cascade request]
  "Ask the providers of CASCADE in order; the first real answer, or a :failed plist.
   Cancelling the task that awaits it cancels the model call under way.

   (await (cascade-complete (make-cascade (default-providers))
                            [:messages [{\"role\" \"user\" \"content\" \"help\"}] :tools None
                             :signal SIGNAL :rejections [] :notify (fn [text] (print text))]))"
  (setv attempts []
        notify (proto-get request ':notify)
        session (proto-get (proto-get request ':signal) ':session)
        waiting []
        told []
        untold []
        kinds []
        fresh-any False)
  (defn failed [name kind clause fresh]
    (nonlocal fresh-any)
    (.append kinds kind)
    (when fresh (setv fresh-any True))
    (.append (if fresh waiting untold) f"model {name} {clause}"))
  (defn :async say [line]
    (.warning log "%s" line)
    (when notify
      (try (setv said (notify line))
           (when (inspect.isawaitable said)
             (await said))
           (except [e Exception]
             (.warning log "could not tell the person: %s" (_error-text e))))))
  (defn :async tell [next-words]
    (for [what waiting]
      (await (say f"{what}, {next-words}")))
    (.extend (if notify told untold) waiting)
    (.clear waiting))
  (for [[i provider] (enumerate (get cascade "providers"))]
    (setv name (.get provider "name" (.get provider "model")))
    (try
      (if (not (_admit cascade i))
          (do (setv [detail kind clause fresh] (_skip cascade i session))
              (.append attempts [:provider name :outcome :skipped :detail detail])
              (failed name kind clause fresh))
          (do (await (tell (_next-words provider)))
              (setv asked (if (and kinds (= (.get provider "model") SYMBOLIC))
                              (+ (list (or request []))
                                 [:fallback [:told (list told) :untold (list untold) :kinds (list kinds)
                                             :fresh fresh-any]])
                              request)
                    start (time.perf-counter)
                    [outcome detail answer kind] (await (_try cascade i provider asked say))
                    seconds (round (- (time.perf-counter) start) 3)
                    ok (= outcome ':ok)
                    wait (when (and (not ok) (is-plist answer)) (proto-get answer ':retry-after))
                    open-for (cond (and wait (> wait RETRY-AFTER-SHORT)) wait
                                   (and (= kind "timeout") (_healthy-after cascade i)) (get cascade "cooldown")
                                   True None)
                    clause (when (not ok) (_clause provider kind detail))
                    fresh (_record cascade i ok kind clause session open-for))
              (.append attempts [:provider name :outcome outcome :detail detail :seconds seconds])
              (when ok
                (return [:status :ok
                         :provider name
                         :text (proto-get answer ':text)
                         :tool-calls (proto-get answer ':tool-calls [])
                         :usage (proto-get answer ':usage)
                         :attempts attempts]))
              (failed name kind clause fresh)))
      (except [e Exception]
        (setv detail (_short (_error-text e))
              clause f"failed ({detail})")
        (.append attempts [:provider name :outcome :error :detail detail])
        (failed name "error" clause (_record cascade i False "error" clause session)))))
  (await (tell "and no other model is left"))
  [:status :failed :reason (_failure-reason attempts) :attempts attempts])

;; * Checking one provider

(setv CHECK-DEADLINE 5.0
      _check-tools [{"type" "function"
                     "function" {"name" "shell" "description" "run a shell command"
                                 "parameters" {"type" "object"
                                               "properties" {"cmd" {"type" "string"}}
                                               "required" ["cmd"]}}}])

(defn _check-request [result]
  "The two-turn tool conversation doctor sends, the tool's output being RESULT."
  [:messages [{"role" "system" "content" "You propose actions. Say ok when you have read the result."}
              {"role" "user" "content" "What is in the workspace?"}
              {"role" "user" "content" (+ "Result of (:action :shell :cmd \"ls\"):\n" result)
               CALL-KEY {"id" "call_doctor_1" "name" "shell" "arguments" "{\"cmd\": \"ls\"}"}}]
   :tools _check-tools])

(defn :async _check-form [provider]
  "\"native\" or \"text\": the form PROVIDER's tool results take."
  (setv litellm (await (_litellm-ready)))
  (if (and (_native-tools litellm provider) (= (_tool-results litellm provider) "native"))
      "native"
      "text"))

(defn _prompt-tokens [answer]
  (when (and answer (proto-get answer ':usage))
    (proto-get (proto-get answer ':usage) ':prompt-tokens)))

(defn :async check-provider [provider [deadline CHECK-DEADLINE]]
  "#(status detail) for PROVIDER after a one-token call of at most DEADLINE
   seconds: status \"ok\", \"warn\" (a probed local model is not running) or \"fail\".

   (await (check-provider (make-provider \"symbolic\"))) ⇒ #(\"ok\" \"the built-in commands, always there\")"
  (when (= (.get provider "model") SYMBOLIC)
    (return #("ok" "the built-in commands, always there")))
  (setv quick (| provider {"timeout" (min (float (get provider "timeout")) deadline) "max_tokens" 1})
        start (time.perf-counter)
        [outcome detail answer kind] (await (_attempt quick (_check-request "notes.txt")))
        seconds (- (time.perf-counter) start)
        native (and (in outcome #(':ok ':error ':empty)) (= (await (_check-form quick)) "native")))
  (cond (and native (= outcome ':error) (.startswith kind "http-")
             (not (in kind #("http-401" "http-403" "http-404" "http-429"))))
        (do (setv [again _ _ _] (await (_attempt (| quick {"tool_results" "text"})
                                                 (_check-request "notes.txt"))))
            (if (in again #(':ok ':empty))
                #("fail" (+ f"cannot render the results of tool calls as tool messages ({detail}); "
                            "set tool_results = \"text\" in its [[providers]] table"))
                #("fail" (_clause quick kind detail))))
        (and native (= outcome ':ok))
        (do (setv longer (await (_attempt quick (_check-request (.join "\n" (gfor i (range 40) f"file-{i}.txt")))))
                  [short long] [(_prompt-tokens answer) (_prompt-tokens (get longer 2))])
            (if (and short long (= short long))
                #("fail" (+ "drops the results of tool calls: its template renders no tool messages "
                            f"({short} prompt tokens with a short result and a long one); "
                            "set tool_results = \"text\" in its [[providers]] table"))
                #("ok" f"answered in {seconds :.2f} s")))
        (in outcome #(':ok ':empty)) #("ok" f"answered in {seconds :.2f} s")
        (= outcome ':unreachable) #("warn" (+ (_clause quick kind detail) "; the next model answers"))
        True #("fail" (_clause quick kind detail))))
