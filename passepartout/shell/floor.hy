;; * Why

"Some commands are judged the same whatever the rules file says: a deletion,
a file system made, a device written, every process killed, the machine shut
down, a start-up file handed to a program that is not a plain reader, and an
interpreter fed what a download brings. This module is that floor, code that
runs on every command; the judge (shell/judge.hy) asks it first."

(import passepartout.shell.parse [UNKNOWN]
        passepartout.shell.state [ESCALATE REJECT]
        passepartout.shell.commands [SHELLS]
        passepartout.shell.rules [_entry-holds]
        passepartout.shell.paths [_concrete _device _judge-delete _named-paths]
        passepartout.shell.code [python-module _interpreter _inline-code _inline-long]
        passepartout.shell.scripts [_stdin-names _stdin-file])

;; * The floor

(setv DELETERS #{"rm" "rmdir" "unlink" "shred" "srm" "wipe"}
      MKFS #{"mke2fs" "mkdosfs" "mkntfs" "mkswap" "newfs" "wipefs" "mkfs"}
      SHUTDOWN #{"shutdown" "reboot" "halt" "poweroff"}
      DOWNLOADERS #{"curl" "wget" "fetch" "aria2c" "axel" "http" "https" "xh" "xhs" "httpie"
                    "lwp-request" "GET" "POST" "HEAD" "lynx" "w3m" "links" "elinks" "nc" "ncat"
                    "netcat" "socat" "telnet" "openssl" "ftp" "tftp" "scp" "sftp" "ssh" "gh"}
      READERS #{"cat" "head" "tail" "less" "more" "grep" "egrep" "fgrep" "rg" "ag" "ls" "wc"
                "stat" "file" "diff" "cmp" "md5sum" "sha1sum" "sha256sum" "sha512sum" "b2sum"
                "cksum" "echo" "printf" "test" "[" "readlink" "realpath" "basename" "dirname"
                "bat" "od" "xxd" "hexdump" "strings" "du" "find" "tree" "source" "." "nl"}
      PRINTERS #{"echo" "printf" "true" "false" ":"}
      KNOWN (| SHELLS DELETERS PRINTERS #{"find" "cd" "pushd" "popd" "eval" "trap" "alias" "source"
                                         "." "git" "kill" "dd" "crontab"}))

(defn _reads-program [rec parsed]
  "True when the interpreter REC takes its program from its standard input."
  (setv name (get rec "name"))
  (cond (in name SHELLS) (get rec "reads-stdin")
        (in name #("source" ".")) (in (get rec "script") #("/dev/stdin" "-" "/proc/self/fd/0"))
        (= name "eval") False
        True (do (for [[o _] (get parsed "opts")]
                   (when (or (in o _inline-long)
                             (and (= (len o) 2) (in (get o 1) "ceEmr")))
                     (return False)))
                 (setv ops (get parsed "operands"))
                 (or (not ops) (in (get ops 0) #("-" "/dev/stdin"))))))

(defn _kill-everything [args]
  "\"yes\" when the kill ARGS target PID 1 or every process, \"maybe\" when a target is unknown."
  (setv i 0
        signal None)
  (when (and args (in (get args 0) #("-s" "-n")))
    (setv i 2))
  (when (and args (= i 0) (.startswith (get args 0) "-") (not (in (get args 0) #("--" "-l" "-L"))))
    (setv signal (get args 0)
          i 1))
  (setv ops (cut args i None))
  (when (and ops (= (get ops 0) "--")) (setv ops (cut ops 1 None)))
  (cond (any (gfor o ops (in o #("1" "-1")))) "yes"
        (and (not ops) (= signal "-1")) "yes"
        (any (gfor o ops (in UNKNOWN o))) "maybe"
        True None))

(defn _floor [rec parsed pc rules nest]
  (setv name (get rec "name")
        args (cut (get rec "argv") 1 None)
        ops (get parsed "operands")
        out [])
  (when (in name DELETERS)
    (setv recursive (or (get rec "tree")
                        (_entry-holds ["-r" "-R" "--recursive"] parsed)))
    (for [o ops]
      (.extend out (_judge-delete o rec pc recursive "deletes" "floor-delete"))))
  (when (or (in name MKFS) (.startswith name #("mkfs." "newfs_")))
    (.append out [REJECT "makes a file system, erasing a disk" "floor-mkfs"]))
  (when (= name "dd")
    (for [a args]
      (when (.startswith a "of=")
        (for [[path maybe _] (_concrete (cut a 3 None) (get rec "cwd") pc)]
          (when (_device path)
            (.append out [REJECT f"writes onto the device {path}" "floor-device-write"]))))))
  (when (= name "kill")
    (setv everything (_kill-everything args))
    (cond (= everything "yes")
          (.append out [REJECT "kills PID 1 or every process" "floor-kill-all"])
          (= everything "maybe")
          (.append out [ESCALATE "kills a process only known when the command runs" "floor-kill-all"])))
  (when (or (in name SHUTDOWN)
            (and (in name #("init" "telinit")) (& (set ops) #{"0" "6"}))
            (and (in name #("systemctl" "loginctl")) ops
                 (in (get ops 0) #("poweroff" "reboot" "halt" "kexec" "soft-reboot"))))
    (.append out [REJECT "shuts down or restarts the machine" "floor-shutdown"]))
  (when (and (= name "crontab") (not (in "-l" (get parsed "names"))))
    (.append out [REJECT "installs or removes scheduled commands" "floor-startup-files"]))
  (when (not (in name READERS))
    (for [a args
          [path maybe _ startup] (_named-paths a (get rec "cwd") pc rules)]
      (when startup
        (.append out [REJECT f"touches {startup}, which runs commands later (start-up files, crontabs and sudoers are never changed)" "floor-startup-files"]))))
  (when (or (in name SHELLS) (_interpreter name) (in name #("eval" "source" ".")))
    (.extend out (_interpreter-verdicts rec parsed)))
  out)

(defn _interpreter-verdicts [rec parsed]
  (setv name (get rec "name")
        out []
        piped (or (get rec "piped") (frozenset))
        feeds (lfor [kind _] (get rec "stdin") kind)
        downloads (sorted (| (& piped DOWNLOADERS) (& (get rec "inner") DOWNLOADERS))))
  (when (and (_reads-program rec parsed) (not (in "file" feeds)))
    (cond (and piped (& piped DOWNLOADERS))
          (.append out [REJECT f"pipes what {(.join ", " (sorted (& piped DOWNLOADERS)))} downloads into {name}" "floor-download-to-interpreter"])
          piped
          (.append out [ESCALATE f"pipes commands the gate cannot see into {name}" "floor-pipe-to-interpreter"])
          (and (not (in name SHELLS)) (& (set feeds) #{"heredoc" "herestring"}))
          (.append out [ESCALATE f"runs {name} code given inline on its input" "interpreter-inline"])))
  (setv script (get rec "script")
        computed (or (get rec "dynamic-code")
                     (and script (.startswith script "/dev/fd/"))
                     (any (gfor a (cut (get rec "argv") 1 None)
                                (or (in UNKNOWN a) (.startswith a "/dev/fd/"))))))
  (when (and computed (& (get rec "inner") DOWNLOADERS))
    (.append out [REJECT f"runs as {name} code what {(.join ", " downloads)} downloads" "floor-download-to-interpreter"]))
  (when (get rec "dynamic-code")
    (.append out [ESCALATE f"{name} runs a command line only known when it runs" "floor-dynamic-code"]))
  ;; the program's source, however it is given: a script, or a file on its
  ;; input; a pipe from a process substitution (=sh <(…)=, =bash < <(…)=,
  ;; =python3 <(…)=) is another command's output
  (setv source (cond (in name SHELLS) (or script (when (get rec "reads-stdin") (_stdin-file rec)))
                     (in name #("source" ".")) (if (in script _stdin-names) (_stdin-file rec) script)
                     (or (_inline-code (get rec "argv")) (python-module (get rec "argv"))) None
                     (_reads-program rec parsed) (_stdin-file rec)
                     True (next (iter (get parsed "operands")) None)))
  (when (and source (.startswith source #("/dev/fd/" "/proc/self/fd/")) (!= source "/proc/self/fd/0"))
    (.append out [ESCALATE f"{name} runs a script another command produces" "floor-dynamic-code"]))
  out)
