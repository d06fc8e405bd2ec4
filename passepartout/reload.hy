;; * Why

"Skill files change while the daemon runs: a developer edits one (or edits its
org source and tangles), and a restart would cost every conversation in
flight. So the daemon watches the files and reloads what changed with the
fail-safe swap of reload-skill-file (skills.org): a broken edit is reported
and the old skills go on working. Beside the REPL (repl.org), this is the
other way a developer changes a running daemon."

(import asyncio logging os
        pathlib [Path]
        passepartout.config [ConfigError]
        passepartout.proto [proto-get]
        passepartout.perceive [reply-signal sensor-of]
        passepartout.context [context-runtime]
        passepartout.skills [builtin-skills-dir skill-files stage-skill-file install-staged
                             set-immutable-skills])

(setv log (logging.getLogger "passepartout.reload"))

;; * Which files, and whether they changed

(defn config-immutable [config]
  "The skill names the config's [skills] immutable lists."
  (setv names (.get (.get config "skills" {}) "immutable" []))
  (when (not (and (isinstance names list) (all (gfor n names (isinstance n str)))))
    (raise (ConfigError "skills.immutable should be an array of skill names")))
  names)

(defn skill-paths [config]
  "Every skill file the daemon loads, as (path builtin) pairs, in load order."
  (+ (lfor p (skill-files (builtin-skills-dir)) #(p True))
     (lfor d (.get (.get config "skills" {}) "dirs" []) p (skill-files d) #(p False))))

(defn _stamp [path]
  (try
    (setv st (os.stat path))
    #(st.st-mtime-ns st.st-size)
    (except [OSError]
      None)))

(defn _stamps [registry]
  (or (getattr registry "stamps" None)
      (do (setv registry.stamps {})
          registry.stamps)))

(defn note-skill-files [services]
  "Take the skill files as they are now as the ones loaded into SERVICES' registry."
  (setv stamps (_stamps services.skills))
  (for [[p _] (skill-paths services.config)]
    (setv (get stamps (str p)) (_stamp p))))

(defn changed-skill-files [services]
  "The (path builtin) pairs of the skill files new or changed since they were loaded."
  (setv stamps (_stamps services.skills))
  (lfor [p builtin] (skill-paths services.config)
        :if (!= (.get stamps (str p)) (_stamp p))
        #(p builtin)))

;; * Reloading

(defn _stage-changed [services force]
  "#(path stamp staged) for each skill file to reload, compiled and checked."
  (setv config services.config
        registry services.skills
        disabled (.get (.get config "skills" {}) "disabled" [])
        gates (not (hasattr services.gates "check")))
  (set-immutable-skills registry (config-immutable config))
  (lfor [p builtin] (if force (skill-paths config) (changed-skill-files services))
        #(p (_stamp p) (stage-skill-file registry p :builtin builtin :disabled disabled :gates gates))))

(defn :async reload-skills [services [force False]]
  "Reload the skill files that changed (every one with FORCE) into the
   registry of SERVICES, each with the fail-safe swap; the result plist of
   each file reloaded."
  (setv staged (await (asyncio.to-thread _stage-changed services force))
        stamps (_stamps services.skills)
        refused None)
  (when (and (hasattr services.gates "check")
             (any (gfor [_ _ st] staged (not (proto-get st ':error)))))
    (setv problems (await (.check services.gates
                                  :files (dfor [p _ st] staged :if (not (proto-get st ':error))
                                               (str p) #((proto-get st ':builtin) (proto-get st ':text))))))
    (when problems
      (setv refused (+ "the gate process could not take the skill files as they are now: "
                       (.join "; " problems)))))
  (lfor [p stamp st] staged
        (do (setv (get stamps (str p)) stamp)
            (cond (proto-get st ':error) st
                  refused [:file (str p) :skills [] :removed [] :error refused]
                  True (install-staged services.skills st)))))

(defn reload-summary [results]
  "RESULTS (from reload-skills) in words, one line per file."
  (if (not results)
      "No skill file changed since it was loaded."
      (.join "\n"
             (gfor r results
                   :setv name (. (Path (proto-get r ':file)) name)
                   (if (proto-get r ':error)
                       f"{name}: not reloaded, its skills stay as they were: {(proto-get r ':error)}"
                       (+ f"{name}: reloaded ({(.join ", " (proto-get r ':skills))})"
                          (if (proto-get r ':removed)
                              f", removed {(.join ", " (proto-get r ':removed))}"
                              "")))))))

;; * The watcher

(defn :async watch-skills [env [interval 1.0] [report None]]
  "Reload changed skill files of the daemon ENV (its services) every INTERVAL
   seconds until cancelled. REPORT, when given, receives the results of each reload."
  (note-skill-files env)
  (while True
    (await (asyncio.sleep interval))
    (try
      (when (changed-skill-files env)
        (setv results (await (reload-skills env)))
        (for [r results]
          (if (proto-get r ':error)
              (.error log "skill file %s not reloaded: %s" (proto-get r ':file) (proto-get r ':error))
              (.info log "skill file %s reloaded" (proto-get r ':file))))
        (when report
          (report results)))
      (except [asyncio.CancelledError]
        (raise))
      (except [e Exception]
        (.exception log "reloading skill files failed")))))

;; * /reload

(defn handle-reload [signal ctx]
  "The /reload command (\"/reload all\" for every file); None for other signals."
  (when (!= (sensor-of signal) "user-input")
    (return None))
  (setv text (.strip (str (or (proto-get (proto-get signal ':payload) ':text) "")))
        words (.split text))
  (when (or (not words) (!= (get words 0) "/reload"))
    (return None))
  (when (not (in (cut words 1 None) [[] ["all"]]))
    (return [(reply-signal signal "usage: /reload, or /reload all to reload every skill file" "error")]))
  (defn :async reloaded []
    (setv results (await (reload-skills (context-runtime ctx "services")
                                        :force (= words ["/reload" "all"]))))
    [(reply-signal signal (reload-summary results) "notice")])
  (reloaded))
