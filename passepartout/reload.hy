;; * Why

(import asyncio logging os
        pathlib [Path]
        passepartout.config [ConfigError]
        passepartout.proto [literal-keywords :as hy proto-get]
        passepartout.perceive [reply-signal sensor-of]
        passepartout.context [context-runtime]
        passepartout.skills [builtin-skills-dir skill-files reload-skill-file set-immutable-skills])

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

(defn reload-skills [services [force False]]
  "Reload the skill files that changed (every one with FORCE) into the
   registry of SERVICES, each with the fail-safe swap; the result plist of
   each file reloaded."
  (setv config services.config
        registry services.skills
        stamps (_stamps registry))
  (set-immutable-skills registry (config-immutable config))
  (setv disabled (.get (.get config "skills" {}) "disabled" [])
        results [])
  (for [[p builtin] (if force (skill-paths config) (changed-skill-files services))]
    (setv stamp (_stamp p))
    (.append results (reload-skill-file registry p :builtin builtin :disabled disabled))
    (setv (get stamps (str p)) stamp))
  results)

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
        (setv results (await (asyncio.to-thread reload-skills env)))
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
    (setv results (await (asyncio.to-thread reload-skills (context-runtime ctx "services")
                                            :force (= words ["/reload" "all"]))))
    [(reply-signal signal (reload-summary results) "notice")])
  (reloaded))
