;; * Why

"The core loop names no gate, no actuator and no command. Everything it can check
or do arrives as a skill: a named, prioritised bundle of functions that joins
a daemon's registry. The loop asks the registry for \"the gates, in order\" or
\"the actuator for :shell\" and never learns who provided them."

(import importlib importlib.util re sys threading
        hy.models [Keyword]
        pathlib [Path]
        passepartout.proto [proto-get])

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
           ;; the schema as #(field type required) triples, the form the check
           ;; of every proposal reads (see "The shape of an action" in verify.org)
           "fields" (lfor i (range 0 (len schema) 2)
                          :setv field-spec (get schema (+ i 1))
                          #((. (get schema i) name)
                            (hy.I.passepartout/proto.proto-get field-spec ':type "any")
                            (bool (hy.I.passepartout/proto.proto-get field-spec ':required))))
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

(defn _check-actions [name actions gate]
  "The action names of skill NAME's :actions as a frozenset, or None (every action)."
  (when (is actions None)
    (return None))
  (when (is gate None)
    (raise (SkillError f"skill {name}: :actions names the actions its gate judges, and it has no :gate")))
  (when (or (isinstance actions str) (not (isinstance actions #(list tuple set frozenset))))
    (raise (SkillError f"skill {name}: :actions must be a list of action names")))
  (for [a actions]
    (when (not (and (isinstance a str) (_name-re.match a)))
      (raise (SkillError f"skill {name}: action name {a !r} in :actions is not lower-case kebab"))))
  (frozenset actions))

(defn make-skill [name [doc None] [priority 50] [trigger None] [gate None] [filter None]
                  [validator None] [validators None] [augment None] [prompt None]
                  [actuators None] [handlers None] [immutable False] [actions None]]
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
        (get record "handlers") (list (or handlers []))
        (get record "actions") (_check-actions name actions gate))
  (for [h (get record "handlers")]
    (when (not (callable h))
      (raise (SkillError f"skill {name}: every handler must be a function"))))
  record)

;; * The registry

(defclass Registry []
  "The skills of one daemon, by name; the skill files they came from (path to
   #(builtin text), the text as loaded); the names kept immutable; a version
   that changes with every change, and the views computed for it. One lock
   guards them."
  (defn __init__ [self]
    (setv self.lock (threading.RLock)
          self.skills {}
          self.files {}
          self.immutable (set)
          self.version 0
          self.cache {})))

(defn _changed [registry]
  (+= registry.version 1)
  (.clear registry.cache))

(defn registry-version [registry]
  "A number that changes whenever a skill is added, replaced or removed."
  registry.version)

(defn _install [registry skills]
  "Install SKILLS at once, or none of them if an action would have two actuators."
  (with [registry.lock]
    (setv incoming (sfor s skills (get s "name")))
    (for [s skills
          action (get s "actuators")
          other (.values registry.skills)]
      (when (and (not (in (get other "name") incoming)) (in action (get other "actuators")))
        (raise (SkillError f"skill {(get s "name")}: action {action} is already provided by skill {(get other "name")}"))))
    (for [s skills]
      (setv (get registry.skills (get s "name")) s))
    (_changed registry))
  skills)

(defn register-skill [registry skill]
  "Add SKILL (from make-skill) to REGISTRY, replacing a skill of the same name."
  (_install registry [skill])
  skill)

(defn unregister-skill [registry name]
  "Remove the skill called NAME; true when there was one."
  (with [registry.lock]
    (setv found (is-not (.pop registry.skills name None) None))
    (when found (_changed registry))
    found))

(defn get-skill [registry name]
  (.get registry.skills name))

(defn registry-copy [registry]
  "A registry of its own holding the skills and immutable names of REGISTRY."
  (setv other (Registry))
  (with [registry.lock]
    (.update other.skills registry.skills)
    (.update other.files registry.files)
    (.update other.immutable registry.immutable))
  other)

;; * Ordered views

(setv _unseen (object))

(defn registry-view [registry key compute]
  "The value of (COMPUTE), kept under KEY until REGISTRY changes."
  (setv known (.get registry.cache key _unseen))
  (when (is-not known _unseen)
    (return known))
  (with [registry.lock]
    (setv cache registry.cache)
    (when (not (in key cache))
      (setv (get cache key) (compute)))
    (get cache key)))

(defn all-skills [registry]
  "Every skill, by priority (highest first) then name."
  (registry-view registry "skills"
                 (fn [] (sorted (.values registry.skills)
                                :key (fn [s] #((- (get s "priority")) (get s "name")))))))

(defn skill-functions [registry key]
  "The (name function) pairs of every skill that has KEY, in skill order."
  (registry-view registry key
                 (fn [] (lfor s (all-skills registry) :if (get s key) #((get s "name") (get s key))))))

(defn gates-for [registry [action-name None]]
  "The (name gate) pairs of the gates that judge an action called ACTION-NAME
   (a string), in skill order: those whose skill names it in :actions, those
   whose skill names no actions, and those whose :actions name an action no
   actuator carries. Every gate when ACTION-NAME is None."
  (registry-view registry #("gates-for" action-name)
                 (fn []
                   (setv known (actuator-table registry))
                   (lfor s (all-skills registry)
                         :if (and (get s "gate")
                                  (or (is action-name None)
                                      (is (.get s "actions") None)
                                      (in action-name (get s "actions"))
                                      (not (all (gfor a (get s "actions") (in a known))))))
                         #((get s "name") (get s "gate"))))))

(defn reply-validators [registry]
  "Every reply validator's spec, in skill order."
  (registry-view registry "validators"
                 (fn [] (lfor s (all-skills registry) v (.get s "validators" []) v))))

(defn pre-reason-handlers [registry]
  "Every (skill-name handler) pair, in skill order."
  (registry-view registry "handlers"
                 (fn [] (lfor s (all-skills registry) h (get s "handlers") #((get s "name") h)))))

(defn actuator-table [registry]
  "A dict from action name to its actuator spec."
  (registry-view registry "actuators"
                 (fn [] (dfor s (all-skills registry) [action spec] (.items (get s "actuators")) action spec))))

(defn actuator-for [registry action-name]
  "The actuator spec for ACTION-NAME (a string or keyword), or None."
  (.get (actuator-table registry) (if (isinstance action-name str) action-name (. action-name name))))

;; * Loading skill files

(defn declare-skill [namespace skill]
  "Declare SKILL in the module whose globals are NAMESPACE (what defskill does);
   the loader of the file installs what was declared. SKILL is returned."
  (.append (.setdefault namespace "__skills__" []) skill)
  skill)

(defn builtin-skills-dir []
  "The folder of the built-in skills."
  (. (Path (. (importlib.import-module "passepartout_skills") __file__)) parent))

(defn _module-name [path builtin]
  (setv stem (re.sub r"\W" "_" (. (Path path) stem)))
  (if builtin f"passepartout_skills.{stem}" f"passepartout_user_skill_{stem}"))

(defn _declared [module path]
  "The skills MODULE (run from PATH) declared, marked with their file."
  (setv skills (list (getattr module "__skills__" [])))
  (for [s skills] (setv (get s "source") (str path)))
  skills)

(defn install-declared [registry module [path None]]
  "Install in REGISTRY the skills MODULE (a module or namespace run already)
   declared; PATH, when given, is the file they came from."
  (_install registry (if path
                         (_declared module path)
                         (list (getattr module "__skills__" [])))))

(defn load-skill-file [registry path [builtin False]]
  "Load one skill file into REGISTRY; a result plist (:file P :skills [names] :error nil-or-text)."
  (setv path (Path path))
  (try
    (setv name (_module-name path builtin)
          spec (importlib.util.spec-from-file-location name path)
          module (importlib.util.module-from-spec spec))
    (.exec-module spec.loader module)
    (setv staged (_declared module path))
    (_install registry staged)
    (setv (get registry.files (str path)) #(builtin (.decode (.get-data spec.loader (str path)) "utf-8"))
          (get sys.modules name) module)
    [:file (str path) :skills (lfor s staged (get s "name")) :error None]
    (except [e Exception]
      [:file (str path) :skills [] :error f"{(. (type e) __name__)}: {e}"])))

(defn skill-files [folder]
  "The skill files of FOLDER, sorted."
  (setv folder (Path folder))
  (if (.is-dir folder)
      (sorted (gfor p (.glob folder "*.hy") :if (not (.startswith p.name "_")) p))
      []))

(defn load-skills [registry [folders []] [disabled []] [builtin True]]
  "Load the built-in skills, then every skill file in FOLDERS, into REGISTRY.
   Returns the result plist of every file, in order. Skills named in DISABLED
   are removed."
  (setv results [])
  (when builtin
    (for [p (skill-files (builtin-skills-dir))]
      (.append results (load-skill-file registry p :builtin True))))
  (for [folder folders
        p (skill-files folder)]
    (.append results (load-skill-file registry p)))
  (for [name disabled]
    (unregister-skill registry name))
  results)

;; * Replacing a running skill

(defn set-immutable-skills [registry names]
  "Make the skills called NAMES (the config's [skills] immutable) refuse replacement."
  (with [registry.lock]
    (.clear registry.immutable)
    (.update registry.immutable names)))

(defn immutable-skills [registry]
  "The names given to set-immutable-skills."
  (with [registry.lock] (frozenset registry.immutable)))

(defn _immutable-problem [registry name]
  "Why the registered skill NAME may not be replaced, or None."
  (setv old (.get registry.skills name))
  (when (and old (or (get old "immutable") (in name registry.immutable)))
    f"skill {name} is immutable: it keeps the definition it booted with"))

;; ** The smoke check

(setv SMOKE-ACTIONS
      [[:action :message :text "smoke check"]
       [:action :shell :cmd "ls" :explanation "smoke check"]
       [:action :read-file :path "smoke-check.txt" :explanation "smoke check"]]
      _verdict-names #{"allow" "modify" "reject" "escalate"})

(defn is-verdict [v]
  "True when V is a verdict plist: (:verdict :allow) and the like."
  (and (hy.I.passepartout/proto.is-plist v)
       (isinstance (hy.I.passepartout/proto.proto-get v ':verdict) Keyword)
       (in (. (hy.I.passepartout/proto.proto-get v ':verdict) name) _verdict-names)))

(defn smoke-check [skill [ctx None] [gates True] [registry None]]
  "None when SKILL's pure functions answer harmless input as their contracts
   say, else what went wrong. CTX is the context they get (by default a
   neutral one whose registry is REGISTRY, the one SKILL goes into); without
   GATES, its gate is left to the gate process."
  (setv name (get skill "name")
        ctx (if (is ctx None)
                (hy.I.passepartout/context.make-context :session "smoke-check" :skills registry)
                ctx)
        probes (+ (if gates (lfor a SMOKE-ACTIONS #("gate" [a ctx])) [])
                  [#("filter" [(get SMOKE-ACTIONS 0) [:status :ok :output "smoke check"] ctx])
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
    (when (and (= key "gate") (not (is-verdict answer)))
      (return (+ f"skill {name}: its gate answered {(hy.repr answer)} to "
                 (hy.I.passepartout/proto.proto-print (get args 0)) ", not a verdict"))))
  None)

;; ** The swap

(defn replace-skill [registry skill [ctx None] [gates True]]
  "Install SKILL (from make-skill) in REGISTRY in place of the skill of its name,
   with the fail-safe swap: when the old skill is immutable, a new function
   fails the smoke check or an action belongs to another skill, raise
   SkillError and leave the registry as it was. Returns SKILL."
  (setv name (get skill "name")
        problem (or (with [registry.lock] (_immutable-problem registry name))
                    (smoke-check skill ctx :gates gates :registry registry)))
  (when problem
    (raise (SkillError problem)))
  (with [registry.lock]
    (setv problem (_immutable-problem registry name))
    (when problem
      (raise (SkillError problem)))
    (_install registry [skill]))
  skill)

;; ** Reloading a file

(defn stage-skill-file [registry path [builtin False] [disabled #()] [ctx None] [gates True]]
  "The new version of the skill file PATH, compiled, run and smoke-checked but
   not installed: (:file P :skills [names] :module M :staged [skills] :error nil-or-text)."
  (setv path (Path path)
        name (_module-name path builtin))
  (defn failed [why]
    [:file (str path) :skills [] :removed [] :error why])
  (try
    (setv spec (importlib.util.spec-from-file-location name path)
          module (importlib.util.module-from-spec spec)
          text (.get-data spec.loader (str path))
          code (.source-to-code spec.loader text (str path)))
    (exec code (. module __dict__))
    (except [e Exception]
      (return (failed f"{(. (type e) __name__)}: {e}"))))
  (setv staged (lfor s (_declared module path) :if (not (in (get s "name") disabled)) s))
  (for [s staged]
    (setv problem (or (with [registry.lock] (_immutable-problem registry (get s "name")))
                      (smoke-check s ctx :gates gates :registry registry)))
    (when problem
      (return (failed problem))))
  [:file (str path) :skills (lfor s staged (get s "name")) :module module :staged staged
   :builtin builtin :text (.decode text "utf-8") :error None])

(defn install-staged [registry staged]
  "Swap in what stage-skill-file STAGED (without error): a result plist
   (:file P :skills [names] :removed [names] :error nil-or-text); on an error
   the registry is as it was."
  (setv path (proto-get staged ':file)
        skills (proto-get staged ':staged)
        names (lfor s skills (get s "name"))
        module (proto-get staged ':module))
  (defn failed [why]
    [:file path :skills [] :removed [] :error why])
  (with [registry.lock]
    (setv gone (lfor s (.values registry.skills)
                     :if (and (= (get s "source") path) (not (in (get s "name") names)))
                     (get s "name")))
    (for [n (+ names gone)]
      (setv problem (_immutable-problem registry n))
      (when problem
        (return (failed problem))))
    (try
      (_install registry skills)
      (except [e SkillError]
        (return (failed (str e)))))
    (for [n gone]
      (.pop registry.skills n))
    (setv (get registry.files path) #((proto-get staged ':builtin) (proto-get staged ':text)))
    (_changed registry))
  (setv (get sys.modules module.__name__) module)
  [:file path :skills names :removed gone :error None])

(defn reload-skill-file [registry path [builtin False] [disabled #()] [ctx None]]
  "Load the skill file PATH again into REGISTRY, with the fail-safe swap. A
   result plist (:file P :skills [names] :removed [names] :error nil-or-text);
   on an error the registry is as it was."
  (setv staged (stage-skill-file registry path :builtin builtin :disabled disabled :ctx ctx))
  (if (proto-get staged ':error)
      staged
      (install-staged registry staged)))
