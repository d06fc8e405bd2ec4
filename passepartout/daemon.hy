(import logging os time
        pathlib [Path]
        passepartout.config [ConfigError load-config ensure-dirs config-secrets]
        passepartout.store [store-open store-path-for store-close]
        passepartout.proto [proto-get]
        passepartout.skills [load-skills set-immutable-skills]
        passepartout.cascade [make-cascade providers-from-config cascade-complete]
        passepartout.hitl [escalate approvals-boot]
        passepartout.sandbox [sandbox-status])

(setv log (logging.getLogger "passepartout.daemon"))

(defn _providers [config environ]
  (try
    (providers-from-config config environ)
    (except [e ValueError]
      (raise (ConfigError f"providers: {e}")))))

(defn boot [[config-path None] [workspace None] [environ None] [providers None]]
  "The env of a running daemon. PROVIDERS, when given, replaces the configured cascade."
  (setv environ (if (is environ None) os.environ environ)
        config (load-config config-path environ))
  (when workspace
    (setv (get config "workspace") (str (.resolve (.expanduser (Path workspace))))))
  (ensure-dirs config)
  (setv store (store-open (store-path-for (get config "data_dir")))
        skills (.get config "skills" {})
        report (load-skills :folders (.get skills "dirs" []) :disabled (.get skills "disabled" []))
        _ (set-immutable-skills (.get skills "immutable" []))
        cascade-cfg (.get config "cascade" {})
        cascade (make-cascade (if (is providers None) (_providers config environ) providers)
                              :cooldown (.get cascade-cfg "cooldown" 60.0)
                              :failure-threshold (.get cascade-cfg "failure_threshold" 3)))
  (for [r report]
    (when (proto-get r ':error)
      (.error log "skill file %s failed to load: %s"
              (proto-get r ':file)
              (proto-get r ':error))))
  (setv env {"config" config
             "store" store
             "cascade" cascade
             "complete" (fn [request] (cascade-complete cascade request))
             "escalate" escalate
             "secrets" (config-secrets config environ)
             "skill-report" report
             "sandbox" (sandbox-status config)
             "clock" time.time})
  (approvals-boot env)
  env)

(defn skill-failures [env]
  "Lines describing every skill file that failed to load."
  (lfor r (get env "skill-report")
        :if (proto-get r ':error)
        (+ "skill file " (proto-get r ':file) " failed to load: "
           (proto-get r ':error))))

(defn shutdown [env]
  "Release what boot acquired."
  (store-close (get env "store")))
