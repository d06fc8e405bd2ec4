;; * Why

(import importlib importlib.util re sys threading
        hy.models [Keyword]
        pathlib [Path]
        passepartout.proto [literal-keywords :as hy])

;; * Making a skill

(setv _name-re (re.compile r"[a-z0-9][a-z0-9-]*\Z")
      _function-keys #("trigger" "gate" "filter" "validator" "augment" "prompt")
      _schema-types #{"string" "integer" "number" "boolean" "list" "keyword" "plist" "any"})

(defclass SkillError [ValueError]
  "A skill definition that cannot be registered.")

(defn _check-actuators [name actuators]
  (when (not (isinstance actuators dict))
    (raise (SkillError f"skill {name}: :actuators must be a dict of action name to spec")))
  (dfor [action spec] (.items actuators)
        action
        (do
          (when (not (and (isinstance action str) (_name-re.match action)))
            (raise (SkillError f"skill {name}: actuator name {action !r} is not lower-case kebab")))
          (when (not (and (isinstance spec dict) (callable (.get spec "run"))))
            (raise (SkillError f"skill {name}: actuator {action} needs a callable \"run\"")))
          (setv schema (.get spec "schema" []))
          (for [i (range 0 (len schema) 2)]
            (setv field-spec (get schema (+ i 1))
                  t (hy.I.passepartout/proto.proto-get field-spec ':type "any"))
            (when (not (in t _schema-types))
              (raise (SkillError f"skill {name}: actuator {action} field {(get schema i)} has unknown type {t !r}"))))
          {"run" (get spec "run")
           "schema" schema
           "doc" (.get spec "doc" "")
           "effect" (bool (.get spec "effect" True))
           "skill" name})))

(defn _check-validators [name validators single]
  "The validators of skill NAME as a list of specs, each with its name and skill."
  (setv validators (dict (or validators {})))
  (when single
    (setv (get validators name) single))
  (lfor [vname spec] (.items validators)
        (do
          (when (not (and (isinstance vname str) (_name-re.match vname)))
            (raise (SkillError f"skill {name}: validator name {vname !r} is not lower-case kebab")))
          (when (callable spec)
            (setv spec {"check" spec}))
          (when (not (and (isinstance spec dict) (callable (.get spec "check"))))
            (raise (SkillError f"skill {name}: validator {vname} needs a callable \"check\"")))
          {"name" vname
           "check" (get spec "check")
           "halt" (bool (.get spec "halt" True))
           "kill" (bool (.get spec "kill" False))
           "enabled" (bool (.get spec "enabled" True))
           "skill" name})))

(defn make-skill [name [doc None] [priority 50] [trigger None] [gate None] [filter None]
                  [validator None] [validators None] [augment None] [prompt None]
                  [actuators None] [handlers None] [immutable False]]
  "A checked skill record (a plain dict)."
  (when (not (and (isinstance name str) (_name-re.match name)))
    (raise (SkillError f"skill name {name !r} must be lower-case kebab (a-z 0-9 -)")))
  (when (or (isinstance priority bool) (not (isinstance priority int)))
    (raise (SkillError f"skill {name}: :priority must be an integer")))
  (setv record {"name" name "doc" (or doc "") "priority" priority
                "trigger" trigger "gate" gate "filter" filter "validator" validator
                "augment" augment "prompt" prompt "immutable" (bool immutable)
                "source" None})
  (for [k _function-keys]
    (when (and (is-not (get record k) None) (not (callable (get record k))))
      (raise (SkillError f"skill {name}: :{k} must be a function"))))
  (setv (get record "actuators") (_check-actuators name (or actuators {}))
        (get record "validators") (_check-validators name validators validator)
        (get record "handlers") (list (or handlers [])))
  (for [h (get record "handlers")]
    (when (not (callable h))
      (raise (SkillError f"skill {name}: every handler must be a function"))))
  record)

;; * The registry

(setv _lock (threading.RLock)
      _registry {}
      _version [0]
      _cache {}
      _staging [None])

(defn _changed []
  (+= (get _version 0) 1)
  (.clear _cache))

(defn registry-version []
  "A number that changes whenever a skill is added, replaced or removed."
  (get _version 0))

(defn _install [skills]
  "Install SKILLS at once, or none of them if an action would have two actuators."
  (with [_lock]
    (setv incoming (sfor s skills (get s "name")))
    (for [s skills
          action (get s "actuators")
          other (.values _registry)]
      (when (and (not (in (get other "name") incoming)) (in action (get other "actuators")))
        (raise (SkillError f"skill {(get s "name")}: action {action} is already provided by skill {(get other "name")}"))))
    (for [s skills]
      (setv (get _registry (get s "name")) s))
    (_changed))
  skills)

(defn register-skill [skill]
  "Add SKILL (from make-skill), replacing a skill of the same name. While a skill
   file is loading, the skill is held back until the whole file has loaded."
  (if (is (get _staging 0) None)
      (_install [skill])
      (.append (get _staging 0) skill))
  skill)

(defn unregister-skill [name]
  "Remove the skill called NAME; true when there was one."
  (with [_lock]
    (setv found (is-not (.pop _registry name None) None))
    (when found (_changed))
    found))

(defn get-skill [name]
  (.get _registry name))

(defn registry-snapshot []
  "The registry as it is now, for registry-restore."
  (with [_lock] (dict _registry)))

(defn registry-restore [snapshot]
  "Put back a registry saved by registry-snapshot."
  (with [_lock]
    (.clear _registry)
    (.update _registry snapshot)
    (_changed)))

;; * Ordered views

(defn registry-view [key compute]
  "The value of (COMPUTE), kept under KEY until the registry changes."
  (with [_lock]
    (when (not (in key _cache))
      (setv (get _cache key) (compute)))
    (get _cache key)))


(defn all-skills []
  "Every skill, by priority (highest first) then name."
  (registry-view "skills"
           (fn [] (sorted (.values _registry)
                          :key (fn [s] #((- (get s "priority")) (get s "name")))))))

(defn skill-functions [key]
  "The (name function) pairs of every skill that has KEY, in skill order."
  (registry-view key
           (fn [] (lfor s (all-skills) :if (get s key) #((get s "name") (get s key))))))

(defn reply-validators []
  "Every reply validator's spec, in skill order."
  (registry-view "validators"
           (fn [] (lfor s (all-skills) v (.get s "validators" []) v))))

(defn pre-reason-handlers []
  "Every (skill-name handler) pair, in skill order."
  (registry-view "handlers"
           (fn [] (lfor s (all-skills) h (get s "handlers") #((get s "name") h)))))

(defn actuator-table []
  "A dict from action name to its actuator spec."
  (registry-view "actuators"
           (fn [] (dfor s (all-skills) [action spec] (.items (get s "actuators")) action spec))))

(defn actuator-for [action-name]
  "The actuator spec for ACTION-NAME (a string or keyword), or None."
  (.get (actuator-table) (if (isinstance action-name str) action-name (. action-name name))))

;; * Loading skill files

(defn builtin-skills-dir []
  "The folder of the built-in skills."
  (. (Path (. (importlib.import-module "passepartout_skills") __file__)) parent))

(defn _module-name [path builtin]
  (setv stem (re.sub r"\W" "_" (. (Path path) stem)))
  (if builtin f"passepartout_skills.{stem}" f"passepartout_user_skill_{stem}"))

(defn load-skill-file [path [builtin False]]
  "Load one skill file; a result plist (:file P :skills [names] :error nil-or-text)."
  (setv path (Path path))
  (with [_lock]
    (setv (get _staging 0) [])
    (try
      (setv name (_module-name path builtin)
            spec (importlib.util.spec-from-file-location name path)
            module (importlib.util.module-from-spec spec))
      (.exec-module spec.loader module)
      (setv staged (get _staging 0))
      (for [s staged] (setv (get s "source") (str path)))
      (setv (get _staging 0) None)
      (_install staged)
      (setv (get sys.modules name) module)
      (return [:file (str path) :skills (lfor s staged (get s "name")) :error None])
      (except [e Exception]
        (return [:file (str path) :skills []
                 :error f"{(. (type e) __name__)}: {e}"]))
      (finally
        (setv (get _staging 0) None)))))

(defn skill-files [folder]
  "The skill files of FOLDER, sorted."
  (setv folder (Path folder))
  (if (.is-dir folder)
      (sorted (gfor p (.glob folder "*.hy") :if (not (.startswith p.name "_")) p))
      []))

(defn load-skills [[folders []] [disabled []] [builtin True]]
  "Load the built-in skills, then every skill file in FOLDERS. Returns the
   result plist of every file, in order. Skills named in DISABLED are removed."
  (setv results [])
  (when builtin
    (for [p (skill-files (builtin-skills-dir))]
      (.append results (load-skill-file p :builtin True))))
  (for [folder folders
        p (skill-files folder)]
    (.append results (load-skill-file p)))
  (for [name disabled]
    (unregister-skill name))
  results)

;; * Replacing a running skill

(setv _immutable (set))

(defn set-immutable-skills [names]
  "Make the skills called NAMES (the config's [skills] immutable) refuse replacement."
  (with [_lock]
    (.clear _immutable)
    (.update _immutable names)))

(defn immutable-skills []
  "The names given to set-immutable-skills."
  (with [_lock] (frozenset _immutable)))

(defn _immutable-problem [name]
  "Why the registered skill NAME may not be replaced, or None."
  (setv old (.get _registry name))
  (when (and old (or (get old "immutable") (in name _immutable)))
    f"skill {name} is immutable: it keeps the definition it booted with"))

;; ** The smoke check

(setv _smoke-actions
      [[:action :message :text "smoke check"]
       [:action :shell :cmd "ls" :explanation "smoke check"]
       [:action :read-file :path "smoke-check.txt" :explanation "smoke check"]]
      _verdict-names #{"allow" "modify" "reject" "escalate"})

(defn _is-verdict [v]
  (and (hy.I.passepartout/proto.is-plist v)
       (isinstance (hy.I.passepartout/proto.proto-get v ':verdict) Keyword)
       (in (. (hy.I.passepartout/proto.proto-get v ':verdict) name) _verdict-names)))

(defn smoke-check [skill [ctx None]]
  "None when SKILL's pure functions answer harmless input as their contracts
   say, else what went wrong. CTX is the context they get (a neutral one by default)."
  (setv name (get skill "name")
        ctx (if (is ctx None) (hy.I.passepartout/context.make-context :session "smoke-check") ctx)
        probes (+ (lfor a _smoke-actions #("gate" [a ctx]))
                  [#("filter" [(get _smoke-actions 0) [:status :ok :output "smoke check"] ctx])
                   #("validator" ["smoke check" ctx])
                   #("trigger" [ctx])
                   #("augment" [ctx])])
        checks (lfor v (.get skill "validators" [])
                     :if (is-not (get v "check") (get skill "validator"))
                     #(f"validator {(get v "name")}" (get v "check"))))
  (for [[key args] (+ probes
                      (lfor [label f] checks
                            #(#(label f) ["smoke check" (hy.I.passepartout/proto.proto-put ctx ':executed [])])))]
    (setv [label f] (if (isinstance key tuple) key #(key (get skill key))))
    (when (is f None) (continue))
    (try
      (setv answer (f #* args))
      (except [e Exception]
        (return f"skill {name}: its {label} raised on a smoke check: {(. (type e) __name__)}: {e}")))
    (when (and (= key "gate") (not (_is-verdict answer)))
      (return (+ f"skill {name}: its gate answered {(hy.repr answer)} to "
                 (hy.I.passepartout/proto.proto-print (get args 0)) ", not a verdict"))))
  None)

;; ** The swap

(defn replace-skill [skill [ctx None]]
  "Install SKILL (from make-skill) in place of the skill of its name, with the
   fail-safe swap: when the old skill is immutable, a new function fails the
   smoke check or an action belongs to another skill, raise SkillError and
   leave the registry as it was. Returns SKILL."
  (setv name (get skill "name")
        problem (or (with [_lock] (_immutable-problem name)) (smoke-check skill ctx)))
  (when problem
    (raise (SkillError problem)))
  (with [_lock]
    (setv problem (_immutable-problem name))
    (when problem
      (raise (SkillError problem)))
    (_install [skill]))
  skill)

;; ** Reloading a file

(defn _compile-staged [path name]
  "The module of the skill file PATH (named NAME) and the skills it registered."
  (setv spec (importlib.util.spec-from-file-location name path)
        module (importlib.util.module-from-spec spec)
        code (.source-to-code spec.loader (.get-data spec.loader (str path)) (str path)))
  (with [_lock]
    (setv (get _staging 0) [])
    (try
      (exec code (. module __dict__))
      #(module (get _staging 0))
      (finally
        (setv (get _staging 0) None)))))

(defn reload-skill-file [path [builtin False] [disabled #()] [ctx None]]
  "Load the skill file PATH again, with the fail-safe swap. A result plist
   (:file P :skills [names] :removed [names] :error nil-or-text); on an error the
   registry is as it was."
  (setv path (Path path)
        name (_module-name path builtin))
  (defn failed [why]
    [:file (str path) :skills [] :removed [] :error why])
  (try
    (setv [module staged] (_compile-staged path name))
    (except [e Exception]
      (return (failed f"{(. (type e) __name__)}: {e}"))))
  (setv staged (lfor s staged :if (not (in (get s "name") disabled)) s)
        names (lfor s staged (get s "name")))
  (for [s staged]
    (setv (get s "source") (str path))
    (setv problem (or (with [_lock] (_immutable-problem (get s "name"))) (smoke-check s ctx)))
    (when problem
      (return (failed problem))))
  (with [_lock]
    (setv gone (lfor s (.values _registry)
                     :if (and (= (get s "source") (str path)) (not (in (get s "name") names)))
                     (get s "name")))
    (for [n (+ names gone)]
      (setv problem (_immutable-problem n))
      (when problem
        (return (failed problem))))
    (try
      (_install staged)
      (except [e SkillError]
        (return (failed (str e)))))
    (for [n gone]
      (.pop _registry n))
    (_changed))
  (setv (get sys.modules name) module)
  [:file (str path) :skills names :removed gone :error None])
