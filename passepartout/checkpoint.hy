;; * Why

"The gates can be wrong and the sandbox keeps a wrong command inside the
workspace, but inside the workspace it can still do damage: delete the work
of an afternoon, rewrite .git, fill a file with nonsense. So before every
action that may write, the workspace is checkpointed, and /undo puts it back
as it was before the last action (/undo N: before the N-th last), /changes
says what an action changed. A checkpoint is a turn of the journal, and so is
an undo."

;; * One keeper per daemon

(import asyncio logging os
        passepartout.proto [proto-get proto-put]
        passepartout.config [config-defaults]
        passepartout.settings [parse-size]
        passepartout.context [context-runtime protected-paths]
        passepartout.journal [journal-append]
        passepartout.keeper [Keeper])

(setv log (logging.getLogger "passepartout.checkpoint")
      SETTINGS (config-defaults "undo")
      FOLDER "checkpoints")

(defn undo-settings [config]
  "The [undo] table of CONFIG with the defaults filled in."
  (| SETTINGS (or (.get (or config {}) "undo") {})))

(defn make-keeper [config workspace]
  "The Keeper for WORKSPACE under CONFIG, or a string saying why there is none."
  (setv s (undo-settings config)
        data (.get config "data_dir"))
  (cond
    (not (get s "enabled")) "the config turns checkpoints off ([undo] enabled = false)"
    (not data) "there is no data dir to keep checkpoints in"
    (not (os.path.isdir workspace)) f"the workspace {workspace} is not a folder"
    True
    (do (setv ws (os.path.realpath workspace)
              root (os.path.join (os.path.realpath data) FOLDER)
              skip (lfor p (+ [root (os.path.realpath data)] (protected-paths config))
                         :if (and (!= p ws) (.startswith p (+ ws "/")))
                         (os.path.relpath p ws)))
        (when (or (= root ws) (.startswith ws (+ root "/")))
          (return f"the workspace {ws} lies inside the checkpoints' folder"))
        (Keeper ws root
                :keep (max 1 (get s "keep"))
                :max-bytes (or (parse-size (get s "max_bytes")) 0)
                :max-file (or (parse-size (get s "max_file")) 0)
                :skip skip))))

(defn keeper-for [ctx]
  "The Keeper of CTX's daemon, or None."
  (setv services (context-runtime ctx "services"))
  (when (is services None) (return None))
  (setv k (getattr services "checkpoints" None))
  (when (is k None)
    (setv k (make-keeper services.config (proto-get ctx ':workspace))
          services.checkpoints k))
  (if (isinstance k Keeper) k None))

(defn keeper-why [ctx]
  "Why CTX's daemon keeps no checkpoints, or None when it does."
  (setv services (context-runtime ctx "services"))
  (cond (is services None) "this context has no daemon"
        (keeper-for ctx) None
        True services.checkpoints))

;; * Around an action

(defclass Mark []
  "A checkpoint begun for an action."
  (defn __init__ [self keeper action ctx]
    (setv self.keeper keeper
          self.action action
          self.ctx ctx)))

(defn :async checkpoint-before [action ctx]
  "A Mark for ACTION in CTX, None when no checkpoints are kept, or an error
   text when one cannot be taken."
  (setv keeper (keeper-for ctx))
  (when (is keeper None) (return None))
  (try
    (await (asyncio.to-thread keeper.begin))
    (Mark keeper action ctx)
    (except [e OSError]
      (.error log "no checkpoint could be taken: %s" e)
      (+ f"no checkpoint of the workspace could be taken ({(or e.strerror e)}), so nothing was run; "
         "free some disk space, or turn checkpoints off ([undo] enabled = false)"))))

(defn action-text [action]
  "A short line saying what ACTION was."
  (setv name (proto-get action ':action)
        name (if (hasattr name "name") name.name (str name))
        what (or (proto-get action ':cmd) (proto-get action ':path) "")
        what (if (isinstance what str) what (str what)))
  (setv line (+ ":" name (if what f" {what}" "")))
  (if (> (len line) 200) (+ (cut line 197) "…") line))

(defn compact-written [changes]
  "The paths CHANGES wrote (added or changed), a folder that was made standing
   for all it holds (\"build/\")."
  (setv out []
        made None)
  (for [[rel before after] changes]
    (cond (is after None) None
          (and made (.startswith rel made)) None
          (and (= (get after "kind") "dir") (or (is before None) (!= (get before "kind") "dir")))
          (do (setv made (+ rel "/"))
              (.append out made))
          (= (get after "kind") "dir") None
          True (.append out rel)))
  out)

(defn counts [changes]
  "#(added changed removed) among CHANGES."
  (setv a 0 c 0 r 0)
  (for [[_ before after] changes]
    (cond (is before None) (+= a 1)
          (is after None) (+= r 1)
          True (+= c 1)))
  #(a c r))

(defn :async _journal [ctx record]
  (setv services (context-runtime ctx "services")
        store (context-runtime ctx "store"))
  (try
    (if (and services (getattr services "writer" None))
        (await (.call services.writer journal-append record))
        (when store (journal-append store record)))
    (except [e Exception]
      (.error log "the checkpoint could not be journaled: %s" e))))

(defn :async checkpoint-after [mark]
  "Record what the action of MARK changed; the manifest, or None."
  (setv action-line (action-text mark.action)
        session (proto-get mark.ctx ':session))
  (try
    (setv m (await (asyncio.to-thread mark.keeper.end action-line session)))
    (except [e OSError]
      (.error log "the checkpoint after %s failed: %s" action-line e)
      (return None)))
  (when m
    (setv [a c r] (counts (get m "changes")))
    (await (_journal mark.ctx [:event "checkpoint" :session session :turn "action"
                              :data [:checkpoint (get m "id") :action action-line
                                     :added a :changed c :removed r
                                     :bytes (sum (gfor [_ _ after] (get m "changes")
                                                       :if (and after (= (get after "kind") "file"))
                                                       (get after "size"))
                                                 0)
                                     :wrote (compact-written (get m "changes"))]])))
  m)

;; * What an action wrote, in its result

(defn wrote-into [result mark manifest]
  "RESULT with :wrote, the resolved paths the action of MARK wrote as its
   checkpoint's MANIFEST tells, when it wrote any."
  (setv rels (if manifest (compact-written (get manifest "changes")) []))
  (if rels
      (proto-put result ':wrote (lfor r rels
                                      (+ (os.path.join mark.keeper.workspace (.rstrip r "/"))
                                         (if (.endswith r "/") "/" ""))))
      result))
