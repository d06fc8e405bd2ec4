;; Tests of the fail-safe swap (replace-skill, reload-skill-file in skills.hy)
;; and of hot reload (reload-skills, watch-skills, /reload in reload.hy).

(require passepartout.macros [defskill])
(import asyncio os time
        pathlib [Path]
        pytest
        passepartout.proto [kw proto-get]
        passepartout.skills [Registry make-skill register-skill get-skill replace-skill smoke-check
                             reload-skill-file set-immutable-skills SkillError]
        passepartout.services [Services]
        passepartout.providers [make-provider]
        passepartout.daemon [boot shutdown]
        passepartout.loop [step]
        passepartout.reload [reload-skills note-skill-files changed-skill-files watch-skills
                             reload-summary]
        steps [expect run])

(defn [pytest.fixture] reg []
  "A registry of the test's own."
  (Registry))

(defn allow [a c] [:verdict :allow])

(defn verdict-of [reg name action]
  ((get (get-skill reg name) "gate") action []))

(setv rm-action [:action :shell :cmd "rm x" :explanation "clean"])

(defn skill-text [verdict [name "edited"] [extra ""]]
  (+ "(require passepartout.macros [defskill])\n"
     f"(defskill {name} :priority 40 :gate (fn [a c] [:verdict :{verdict} :reason \"v\"])){extra}\n"))

(defn write [path text]
  "Write TEXT to PATH and move its modification time on, as a later edit would."
  (.write-text path text)
  (setv t (+ (time.time) (* 10 (len text))))
  (os.utime path #(t t))
  path)

;; * replace-skill

(defn test-replace-skill-swaps-a-sound-definition [reg]
  (register-skill reg (make-skill "swap" :gate allow))
  (replace-skill reg (make-skill "swap" :gate (fn [a c] [:verdict :reject :reason "new"])))
  (expect (verdict-of reg "swap" rm-action) [:verdict :reject :reason "new"] "new gate"))

(defn test-replace-skill-keeps-the-old-skill-on-a-failed-smoke-check [reg]
  (register-skill reg (make-skill "swap" :gate allow))
  (setv old (get-skill reg "swap"))
  (for [[bad words] [[(make-skill "swap" :gate (fn [a c] (/ 1 0))) "gate raised"]
                     [(make-skill "swap" :gate (fn [a c] None)) "not a verdict"]
                     [(make-skill "swap" :gate (fn [a c] [:verdict :maybe])) "not a verdict"]
                     [(make-skill "swap" :gate allow :filter (fn [a r c] (get r 99))) "filter raised"]
                     [(make-skill "swap" :gate allow :validator (fn [t c] (.nope t))) "validator raised"]
                     [(make-skill "swap" :gate allow :augment (fn [c] (raise (KeyError "k")))) "augment raised"]]]
    (with [e (pytest.raises SkillError)]
      (replace-skill reg bad))
    (assert (in words (str e.value)) (str e.value))
    (assert (is (get-skill reg "swap") old) f"old skill replaced by a definition that failed: {words}")))

(defn test-smoke-check-passes-the-built-in-skills [reg]
  (import passepartout.skills [all-skills load-skills])
  (load-skills reg)
  (assert (get-skill reg "repl") "the built-in skills are loaded")
  (setv problems (lfor s (all-skills reg) :setv p (smoke-check s :registry reg) :if p p))
  (expect problems [] "built-in skills failing the smoke check"))

(defn test-immutable-skills-refuse-replacement [reg]
  (register-skill reg (make-skill "guard" :gate allow))
  (register-skill reg (make-skill "sealed" :gate allow :immutable True))
  (set-immutable-skills reg ["guard"])
  (for [name ["guard" "sealed"]]
    (with [e (pytest.raises SkillError)]
      (replace-skill reg (make-skill name :gate (fn [a c] [:verdict :reject :reason "x"]))))
    (assert (in "immutable" (str e.value)) (str e.value))
    (expect (verdict-of reg name rm-action) [:verdict :allow] f"{name} after a refused replacement"))
  (replace-skill reg (make-skill "not-yet-there" :gate allow))
  (assert (get-skill reg "not-yet-there") "a new skill is not a replacement"))

(defn test-an-action-of-another-skill-keeps-the-old-definition [reg]
  (setv spec {"run" (fn [a c] [:status :ok]) "schema" []})
  (register-skill reg (make-skill "owner" :actuators {"ping" spec}))
  (register-skill reg (make-skill "other" :gate allow))
  (setv old (get-skill reg "other"))
  (with [(pytest.raises SkillError)]
    (replace-skill reg (make-skill "other" :gate allow :actuators {"ping" spec})))
  (assert (is (get-skill reg "other") old) "other replaced"))

;; * reload-skill-file

(defn test-an-edited-file-is-reloaded [reg tmp-path]
  (setv f (write (/ tmp-path "edited.hy") (skill-text "allow")))
  (reload-skill-file reg f)
  (expect (proto-get (verdict-of reg "edited" rm-action) ':verdict) (kw "allow") "before the edit")
  (write f (skill-text "reject"))
  (setv r (reload-skill-file reg f))
  (expect (proto-get r ':error) None "error")
  (expect (proto-get r ':skills) ["edited"] "skills")
  (expect (proto-get (verdict-of reg "edited" rm-action) ':verdict) (kw "reject") "after the edit"))

(defn test-a-broken-edit-keeps-the-old-skills [reg tmp-path]
  (setv f (write (/ tmp-path "edited.hy") (skill-text "reject" :extra "\n(defskill helper :gate (fn [a c] [:verdict :allow]))")))
  (reload-skill-file reg f)
  (setv old (get-skill reg "edited"))
  (for [[text words] [[(skill-text "reject" :extra " (") "PrematureEndOfInput"]
                      [(skill-text "maybe") "not a verdict"]
                      [(+ (skill-text "allow") "(raise (RuntimeError \"half-way\"))\n") "half-way"]
                      [(.replace (skill-text "allow") ":priority 40" ":priority \"high\"") "priority"]]]
    (write f text)
    (setv r (reload-skill-file reg f))
    (assert (in words (or (proto-get r ':error) "")) f"{words}: {r}")
    (assert (is (get-skill reg "edited") old) f"{words}: the old skill was replaced")
    (assert (get-skill reg "helper") f"{words}: the file's other skill went away")))

(defn test-a-reload-installs-the-whole-file-or-nothing [reg tmp-path]
  (setv f (write (/ tmp-path "pair.hy") (+ (skill-text "allow" "first") (skill-text "allow" "second"))))
  (reload-skill-file reg f)
  (setv first (get-skill reg "first"))
  (write f (+ (skill-text "reject" "first") (skill-text "nonsense" "second")))
  (assert (proto-get (reload-skill-file reg f) ':error) "a broken second skill must fail the file")
  (assert (is (get-skill reg "first") first) "the sound first skill was installed alone"))

(defn test-a-skill-dropped-from-the-file-goes-and-disabled-ones-stay-out [reg tmp-path]
  (setv f (write (/ tmp-path "pair.hy") (+ (skill-text "allow" "kept") (skill-text "allow" "dropped"))))
  (reload-skill-file reg f)
  (write f (+ (skill-text "reject" "kept") (skill-text "allow" "unwanted")))
  (setv r (reload-skill-file reg f :disabled ["unwanted"]))
  (expect (proto-get r ':removed) ["dropped"] "removed")
  (expect (get-skill reg "dropped") None "dropped skill")
  (expect (get-skill reg "unwanted") None "disabled skill")
  (expect (proto-get (verdict-of reg "kept" rm-action) ':verdict) (kw "reject") "kept skill"))

(defn test-an-immutable-skill-refuses-its-file-reload [reg tmp-path]
  (setv f (write (/ tmp-path "guarded.hy") (skill-text "allow" "guarded")))
  (reload-skill-file reg f)
  (set-immutable-skills reg ["guarded"])
  (write f (skill-text "reject" "guarded"))
  (setv r (reload-skill-file reg f))
  (assert (in "immutable" (or (proto-get r ':error) "")) f"{r}")
  (expect (proto-get (verdict-of reg "guarded" rm-action) ':verdict) (kw "allow") "guarded"))

(defn test-an-edit-within-the-same-second-is-not-lost [reg tmp-path]
  ;; the same size and modification time: only the text tells them apart
  (setv f (/ tmp-path "quick.hy")
        before (.replace (skill-text "allow" "quick") "\"v\"" "\"vv\"")
        after (skill-text "reject" "quick"))
  (expect (len before) (len after) "sizes")
  (.write-text f before)
  (setv t (. (os.stat f) st-mtime))
  (reload-skill-file reg f)
  (.write-text f after)
  (os.utime f #(t t))
  (reload-skill-file reg f)
  (expect (proto-get (verdict-of reg "quick" rm-action) ':verdict) (kw "reject") "same mtime, new text"))

;; * reload-skills and the watcher

(defn services-for [reg folder]
  "Services whose config loads the skill files of FOLDER into REG; no store
   nor models: reloading needs neither."
  (Services {"skills" {"dirs" [(str folder)] "disabled" []}} None reg None))

(defn test-reload-skills-reloads-only-what-changed [reg tmp-path]
  (setv a (write (/ tmp-path "a.hy") (skill-text "allow" "skill-a"))
        b (write (/ tmp-path "b.hy") (skill-text "allow" "skill-b"))
        services (services-for reg tmp-path))
  (reload-skill-file reg a)
  (reload-skill-file reg b)
  (note-skill-files services)
  (expect (changed-skill-files services) [] "nothing changed yet")
  (expect (run (reload-skills services)) [] "nothing to reload")
  (write b (skill-text "reject" "skill-b"))
  (setv results (run (reload-skills services)))
  (expect (lfor r results (proto-get r ':file)) [(str b)] "reloaded files")
  (expect (proto-get (verdict-of reg "skill-b" rm-action) ':verdict) (kw "reject") "skill-b")
  (assert (in "b.hy: reloaded (skill-b)" (reload-summary results)) (reload-summary results))
  (expect (run (reload-skills services)) [] "a reloaded file is not reloaded again")
  (write (/ tmp-path "c.hy") (skill-text "allow" "skill-c"))
  (run (reload-skills services))
  (assert (get-skill reg "skill-c") "a new file is loaded"))

(defn test-the-watcher-picks-up-an-edit-and-survives-a-broken-one [reg tmp-path]
  (setv f (write (/ tmp-path "watched.hy") (skill-text "allow" "watched"))
        services (services-for reg tmp-path)
        reports [])
  (reload-skill-file reg f)
  (defn :async until [check]
    (for [_ (range 500)]
      (when (check) (return True))
      (await (asyncio.sleep 0.02)))
    False)
  (defn :async main []
    (setv task (asyncio.create-task (watch-skills services :interval 0.02 :report (. reports append))))
    (await (asyncio.sleep 0.05))
    (write f (skill-text "reject" "watched"))
    (setv edited (await (until (fn [] (= (proto-get (verdict-of reg "watched" rm-action) ':verdict) (kw "reject"))))))
    (write f (+ (skill-text "allow" "watched") "(oops"))
    (setv reported (await (until (fn [] (>= (len reports) 2)))))
    (.cancel task)
    (await (asyncio.gather task :return-exceptions True))
    #(edited reported))
  (setv [edited reported] (asyncio.run (main)))
  (assert edited "the watcher did not reload the edited file")
  (assert reported f"the broken edit was not reported: {reports}")
  (assert (proto-get (get (get reports -1) 0) ':error) f"{reports}")
  (expect (proto-get (verdict-of reg "watched" rm-action) ':verdict) (kw "reject") "after a broken edit"))

;; * /reload

(defn test-reload-command-reloads-and-never-reaches-the-model [tmp-path]
  (setv folder (/ tmp-path "skills")
        config (/ tmp-path "config.toml"))
  (.mkdir folder)
  (write (/ folder "mine.hy") (skill-text "allow" "mine"))
  (.write-text config f"[skills]\ndirs = [\"{folder}\"]\n")
  (setv env (boot :config-path (str config)
                  :environ {"PASSEPARTOUT_DATA_DIR" (str (/ tmp-path "data")) "HOME" (str tmp-path)}
                  :providers [(make-provider "symbolic")])
        asked [])
  (setv env.complete (fn [request] (.append asked request) (raise (AssertionError "asked"))))
  (defn reload-said [text]
    (proto-get (proto-get (get (asyncio.run (step [:type :event :source [:gateway :test :chat "r"]
                                                   :payload [:sensor :user-input :text text]]
                                                  env))
                               0)
                          ':payload)
               ':text))
  (try
    (note-skill-files env)
    (write (/ folder "mine.hy") (skill-text "reject" "mine"))
    (setv text (reload-said "/reload"))
    (assert (in "mine.hy: reloaded (mine)" text) text)
    (expect (proto-get (verdict-of env.skills "mine" rm-action) ':verdict) (kw "reject") "mine after /reload")
    (setv again (reload-said "/reload"))
    (assert (in "No skill file changed" again) again)
    (setv usage (reload-said "/reload everything"))
    (assert (in "usage" usage) usage)
    ;; every file, the built-in ones too: each skill is checked against the registry it goes into
    (setv every (reload-said "/reload all"))
    (assert (and (in "explanation.hy: reloaded (explanation)" every) (in "mine.hy: reloaded (mine)" every))
            every)
    (assert (not (in "not reloaded" every)) every)
    (expect asked [] "model calls")
    (finally
      (shutdown env))))
