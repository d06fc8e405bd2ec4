;; * Why

"The command line is a contract: outside test suites drive passepartout verify
and the other commands exactly as DESIGN §12 writes them, so names, flags and
output shapes do not drift. Each command is a small function over the modules
that do the work."

(import argparse sys
        pathlib [Path]
        passepartout.config [ConfigError]
        passepartout.store [StoreError])

;; * verify

(import re
        hy.models [Keyword])

(setv _surrogate-re (re.compile "[\ud800-\udfff]"))

(defn _clean [s]
  "S with lone surrogates replaced, so that it encodes as UTF-8; other values as they are."
  (if (isinstance s str) (_surrogate-re.sub "\ufffd" s) s))

(defn _not-a-proposal [line reason]
  {"verdict" "reject" "gate" "proto"
   "reason" (_clean (+ "not a proposal: " reason))
   "action" (_clean (cut line 200))})

(setv _modules None
      _VERDICT (Keyword "verdict")
      _GATE (Keyword "gate")
      _REASON (Keyword "reason")
      _ACTION (Keyword "action")
      _CONFINED (Keyword "confined"))

(defn _verifying []
  "#(proto verify): the modules verify reads and judges with, imported on the
   first line (the other commands start without them), and only then: an import
   statement run for every line costs more than a gate's allow."
  (global _modules)
  (when (is _modules None)
    (import passepartout.proto passepartout.verify)
    (setv _modules #(passepartout.proto passepartout.verify)))
  _modules)

(defn _judge [action ctx n line]
  "The verdict dict for ACTION, read from LINE, the Nth."
  (setv [proto verify] (_verifying))
  (try
    (setv [verdict gate why judged confined]
          (proto.proto-values (verify.verify action ctx) _VERDICT _GATE _REASON _ACTION _CONFINED))
    (| {"verdict" (. verdict name)
        "gate" (_clean gate)
        "reason" (_clean why)
        "action" (proto.proto-print judged)}
       (if confined {"confined" True} {}))
    (except [e Exception]
      {"verdict" "reject" "gate" "verify"
       "reason" (_clean (try f"the proposal on line {n} could not be judged: {(. (type e) __name__)}: {e}"
                             (except [Exception] f"the proposal on line {n} could not be judged")))
       "action" (_clean (cut line 200))})))

(defn input-lines [text]
  "The lines of TEXT: cut at each newline, a final newline ending the last line."
  (setv lines (.split text "\n"))
  (when (= (get lines -1) "")
    (.pop lines))
  (lfor l lines (.removesuffix l "\r")))

(defn verify-line [line n ctx]
  "The verdict dict for LINE, the Nth of the input."
  (setv [proto verify] (_verifying))
  (when (not (.strip line))
    (return (_not-a-proposal line f"line {n} is empty")))
  (try
    (setv action (verify.proposal-action (proto.proto-normalize (proto.proto-read line))))
    (except [e proto.ProtoError]
      (return (_not-a-proposal line f"line {n}: {e}")))
    (except [e Exception]
      (return (_not-a-proposal line (try f"line {n}: {(. (type e) __name__)}: {e}"
                                         (except [Exception] f"line {n} does not read"))))))
  (_judge action ctx n line))

(defn verify-text [text ctx]
  "One verdict dict per line of TEXT."
  (lfor [i line] (enumerate (input-lines text) 1) (verify-line line i ctx)))

(defn verify-lines [text ctx]
  "The output of verify for TEXT: one JSON line per input line."
  (import passepartout.display [json-line])
  (lfor v (verify-text text ctx) (json-line v)))

(defn _read-input [file]
  "The proposals in FILE (- for standard input) as text, invalid UTF-8 replaced."
  (setv data (if (in file #(None "-"))
                 (if (hasattr sys.stdin "buffer") (.read sys.stdin.buffer) (.read sys.stdin))
                 (.read-bytes (Path file))))
  (.removeprefix (if (isinstance data bytes) (.decode data "utf-8" "replace") data) "\ufeff"))

(defn _judged-sandbox [choice config]
  "The :sandbox of a context judged with --sandbox CHOICE (on, off, or None:
   what this machine has)."
  (import passepartout.sandbox [sandbox-status])
  (cond (= choice "on")
        [:kind "bubblewrap" :mode "stated" :network "policy"
         :why "judged as if the sandbox were in force (--sandbox on)"]
        (= choice "off")
        [:kind "off" :mode "off" :network "on"
         :why "judged as if no sandbox existed (--sandbox off)"]
        True (sandbox-status config)))

(defn _gate-context [args]
  "The config and a gate context for commands that judge without a daemon."
  (import passepartout.config [load-config config-secrets]
          passepartout.context [make-context]
          passepartout.skills [Registry load-skills]
          passepartout.proto [proto-get])
  (setv config (load-config args.config))
  (when (getattr args "workspace" None)
    (setv (get config "workspace") (str (.resolve (Path args.workspace)))))
  (setv skills (.get config "skills" {})
        registry (Registry))
  (for [r (load-skills registry :folders (.get skills "dirs" []) :disabled (.get skills "disabled" []))]
    (when (proto-get r ':error)
      (print f"passepartout: skill file {(proto-get r ':file)} failed to load: {(proto-get r ':error)}"
             :file sys.stderr)))
  (make-context :workspace (get config "workspace") :session "verify"
                :config config :secrets (config-secrets config) :skills registry
                :sandbox (_judged-sandbox (getattr args "sandbox" None) config)))

(defn cmd-verify [args]
  (setv ctx (_gate-context args)
        text (_read-input args.file)
        out (getattr sys.stdout "buffer" None))
  (.flush sys.stdout)
  (for [line (verify-lines text ctx)]
    (if out
        (.write out (.encode (+ line "\n") "utf-8" "replace"))
        (.write sys.stdout (+ line "\n"))))
  (if out (.flush out) (.flush sys.stdout))
  0)

;; * tangle

(defn _project-root [start]
  "The nearest folder at or above START that holds org/ and passepartout/."
  (for [d (+ [start] (list start.parents))]
    (when (and (.is-dir (/ d "org")) (.is-dir (/ d "passepartout")))
      (return d)))
  None)

(defn cmd-tangle [args]
  (import passepartout.tools.tangle [tangle])
  (setv root (if args.root (Path args.root) (_project-root (.resolve (Path.cwd)))))
  (when (is root None)
    (print "passepartout tangle: no org/ folder here or above; use --root" :file sys.stderr)
    (return 2))
  (setv differ (tangle root :check args.check))
  (for [p differ]
    (print (if args.check f"differs from its org source: {(.relative-to p root)}"
                          f"tangled: {(.relative-to p root)}")))
  (if (and args.check differ) 1 0))

;; * bench

(defn cmd-bench [args]
  (import passepartout.tools.bench [run-benchmarks])
  (run-benchmarks :quick args.quick))

;; * The parser

(defn _version []
  (import importlib.metadata)
  (try (importlib.metadata.version "passepartout")
       (except [importlib.metadata.PackageNotFoundError] "(not installed)")))

(defn _command [sub name #** kw]
  "The parser of the command NAME under SUB; it takes --config too, so the
   option may follow the command as well as precede it."
  (setv p (.add-parser sub name #** kw))
  (.add-argument p "--config" :default argparse.SUPPRESS
                 :help "config file (default ~/.config/passepartout/config.toml)")
  p)

(defn make-parser []
  (import passepartout.tools.trial [cmd-parse cmd-rules]
          passepartout.tools.chat [cmd-chat cmd-daemon cmd-prompt]
          passepartout.tools.approvals [cmd-approvals]
          passepartout.tools.doctor [cmd-doctor]
          passepartout.tools.records [cmd-backup cmd-journal cmd-journal-archive cmd-replay cmd-memory])
  (setv p (argparse.ArgumentParser
            :prog "passepartout"
            :description "A personal agent: the model proposes, deterministic code decides.")
        sub (.add-subparsers p :dest "command" :metavar "COMMAND"))
  (.add-argument p "--config" :help "config file (default ~/.config/passepartout/config.toml)")
  (.add-argument p "--version" :action "version" :version (+ "passepartout " (_version)))

  (setv c (_command sub "chat" :help "terminal chat with an in-process daemon"))
  (.add-argument c "--workspace" :help "the workspace folder")
  (.set-defaults c :func cmd-chat)

  (setv d (_command sub "daemon" :help "headless: the configured gateways and the REPL socket, until SIGTERM"))
  (.add-argument d "--workspace" :help "the workspace folder")
  (.set-defaults d :func cmd-daemon)

  (setv v (_command sub "verify" :help "run the gates over proposals, no model; one JSON line each"))
  (.add-argument v "file" :nargs "?" :default "-" :help "file of proposals, or - for stdin")
  (.add-argument v "--workspace" :help "the workspace the gates confine to")
  (.add-argument v "--sandbox" :choices ["on" "off"]
                 :help "judge as if the sandbox were in force or not (default: what this machine has)")
  (.set-defaults v :func cmd-verify)

  (setv pa (_command sub "parse" :help "read raw model answers (JSON strings, one a line) into proposals; one JSON line each"))
  (.add-argument pa "file" :nargs "?" :default "-" :help "file of answers, or - for stdin")
  (.set-defaults pa :func cmd-parse)

  (setv r (_command sub "rules" :help "try the shell rules")
        rsub (.add-subparsers r :dest "rules_command" :metavar "COMMAND" :required True)
        rt (_command rsub "test" :help "the verdict for one shell command and the rule that decided"))
  (.add-argument rt "cmd" :metavar "CMD" :help "the shell command, as one argument")
  (.add-argument rt "--workspace" :help "the workspace the rules judge paths against")
  (.add-argument rt "--json" :action "store_true" :help "print one JSON object")
  (.add-argument rt "--sandbox" :choices ["on" "off"]
                 :help "judge as if the sandbox were in force or not (default: what this machine has)")
  (.set-defaults rt :func cmd-rules)

  (setv a (_command sub "approvals" :help "pending approvals, answered from the host"))
  (.add-argument a "action" :choices ["list" "approve" "deny"])
  (.add-argument a "code" :nargs "?" :help "the approval's code or token")
  (.add-argument a "duration" :nargs "?"
                 :help "with approve: also allow this kind of action in that conversation for so long, e.g. 30m")
  (.add-argument a "hosts" :nargs "*" :metavar "HOST"
                 :help "with approve and a duration: let these hosts through the egress proxy instead, e.g. 1h github.com")
  (.add-argument a "--reason" :help "why it is denied")
  (.set-defaults a :func cmd-approvals)

  (setv dr (_command sub "doctor" :help "check the config, folders, sandbox, gateways and each model; say which protection is in force"))
  (.set-defaults dr :func cmd-doctor)

  (setv bk (_command sub "backup" :help "copy the store, also while the daemon runs, to a new file"))
  (.add-argument bk "path" :nargs "?" :metavar "PATH"
                 :help "the file, or a folder for it (default: DATA_DIR/backups/, named by the time)")
  (.set-defaults bk :func cmd-backup)

  (setv t (_command sub "tangle" :help "tangle org/ into the code, or check that they agree"))
  (.add-argument t "--check" :action "store_true" :help "write nothing; exit 1 if any file differs")
  (.add-argument t "--root" :help "the project folder (default: found from here)")
  (.set-defaults t :func cmd-tangle)

  (setv b (_command sub "bench" :help "the benchmarks, as figures"))
  (.add-argument b "--quick" :action "store_true" :help "fewer repetitions")
  (.set-defaults b :func cmd-bench)

  (setv j (_command sub "journal" :help "the journal of turns: check its hash chain, export it")
        jsub (.add-subparsers j :dest "journal_command" :metavar "COMMAND" :required True)
        jv (_command jsub "verify" :help "recompute the chain; name the first turn edited, inserted or removed")
        je (_command jsub "export" :help "the turns, one readable line each, as JSON lines (--raw) or an org outline"))
  (.set-defaults jv :func cmd-journal)
  (.add-argument je "--session" :help "only this session's turns")
  (.add-argument je "--format" :choices ["text" "jsonl" "org"] :default "text"
                 :help "text: one readable line a turn (the default); jsonl: every field, the content as plist text; org: an outline")
  (.add-argument je "--raw" :action "store_const" :dest "format" :const "jsonl"
                 :help "every field as it is stored: the same as --format jsonl")
  (.set-defaults je :func cmd-journal)
  (setv ja (.add-parser jsub "archive" :help "move the old turns into compressed segments beside the store now"))
  (.add-argument ja "--older-than" :help "archive what is older than this (7d, 12h); default [journal] archive_after")
  (.set-defaults ja :func cmd-journal-archive)

  (setv mm (_command sub "memory" :help "long-term memory: its changes, undoing one, consolidating it")
        msub (.add-subparsers mm :dest "memory_command" :metavar "COMMAND" :required True)
        mh (.add-parser msub "history" :help "the changes: forgotten, merged, marked stale, reverted")
        mr (.add-parser msub "revert" :help "undo the change of one turn")
        md (.add-parser msub "dream" :help "consolidate now: merge near-duplicates, drop what was forgotten, mark stale notes"))
  (.add-argument mh "--limit" :type int :default 50 :help "the last this many changes")
  (.add-argument mr "turn" :type int :metavar "TURN" :help "the turn's number, as history shows it")
  (for [x [mh mr md]] (.set-defaults x :func cmd-memory))

  (setv pr (_command sub "prompt" :help "the prompt a message would get, section by section with token counts"))
  (.add-argument pr "text" :nargs "*" :metavar "TEXT" :help "the message (its words find the memories)")
  (.add-argument pr "--session" :default "terminal:local" :help "the conversation (default terminal:local)")
  (.add-argument pr "--brief" :action "store_true" :help "the sections and their counts, not their text")
  (.set-defaults pr :func cmd-prompt)

  (setv rp (_command sub "replay" :help "today's gates over the journal's proposals: what would change (exit 1 if any)"))
  (.add-argument rp "--since" :help "from this time (2026-11-01, 2026-11-01T09:30) or this long ago (12h, 7d)")
  (.add-argument rp "--session" :help "only this session")
  (.set-defaults rp :func cmd-replay)
  p)

(defn main [[argv None]]
  "The passepartout command."
  (setv args (.parse-args (make-parser) argv))
  (when (is (getattr args "func" None) None)
    (.print-help (make-parser))
    (return 2))
  (try
    (setv code (args.func args))
    (except [e ConfigError]
      (print f"passepartout: {e}" :file sys.stderr)
      (setv code 2))
    (except [e StoreError]
      (print f"passepartout: {e}" :file sys.stderr)
      (setv code 1)))
  (sys.exit (or code 0)))
