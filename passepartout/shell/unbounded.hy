;; * Why

"Without the sandbox no limit bounds what an action writes or how many
processes it keeps, so a command can harm the machine with no secret, no path
outside and no code unseen: a stream written to a file without end, a size its
words make large, processes started without bound or taken out of the
action's group. This module finds those commands in a walked command line; the
judge (shell/judge.hy) asks about them when the sandbox is not in force."

(import re
        passepartout.shell.state [ESCALATE])

;; * What no limit bounds without the sandbox

(setv WRITE-BOUND (* 256 1024 1024)
      PARALLEL-BOUND 64
      ENDLESS-DEVICES #{"/dev/zero" "/dev/urandom" "/dev/random"}
      ENDLESS-PROGRAMS #{"yes"}
      DETACHERS #{"setsid" "daemonize" "start-stop-daemon"}
      _lines-re (re.compile r"-\d+")
      _size-re (re.compile r"\+?(\d+)(?:([kKmMgGtTpPeE])(iB|B)?|([bcw]))?")
      _powers {"k" 1 "m" 2 "g" 3 "t" 4 "p" 5 "e" 6}
      _units {"b" 512 "c" 1 "w" 2})

(defn _size [text]
  "The bytes TEXT gives (4096, 1M, 2G, 10KB, 512b), or None when it gives none.
   (_size \"1M\") ⇒ 1048576"
  (setv m (when (isinstance text str) (.fullmatch _size-re (.strip text))))
  (when (not m) (return None))
  (setv [n letter unit small] (.groups m)
        n (int n))
  (cond letter (* n (** (if (= unit "B") 1000 1024) (get _powers (.lower letter))))
        small (* n (get _units small))
        True n))

(defn _option-value [argv short long]
  "The value of the option SHORT (-c 5, -c5) or LONG (--bytes=5, --bytes 5) in
   ARGV, the last one given; None when it is not there."
  (setv found None
        args (cut argv 1 None)
        i 0)
  (while (< i (len args))
    (setv a (get args i))
    (cond (= a "--") (break)
          (and long (= a long)) (do (setv found (when (< (+ i 1) (len args)) (get args (+ i 1)))) (+= i 1))
          (and long (.startswith a (+ long "="))) (setv found (cut a (+ (len long) 1) None))
          (and short (= a short)) (do (setv found (when (< (+ i 1) (len args)) (get args (+ i 1)))) (+= i 1))
          (and short (.startswith a short) (not (.startswith a "--"))) (setv found (cut a (len short) None)))
    (+= i 1))
  found)

(defn _dd-size [argv]
  "The bytes dd ARGV copies: count times the block size; None without a count."
  (setv ops (dfor a (cut argv 1 None) :if (in "=" a) :setv [k _ v] (.partition a "=") k v)
        count (.get ops "count"))
  (when (is count None) (return None))
  (setv n (_size count)
        block (_size (.get ops "bs" (.get ops "ibs" "512"))))
  (when (and (is-not n None) (is-not block None)) (* n block)))

(defn _seq-size [argv]
  "About the bytes seq ARGV prints, or None when its numbers are not plain."
  (setv ops (lfor a (cut argv 1 None) :if (not (.startswith a "-")) a))
  (try (setv nums (lfor o ops (float o)))
       (except [ValueError] (return None)))
  (when (not nums) (return None))
  (setv [first step last] (cond (= (len nums) 1) [1 1 (get nums 0)]
                                (= (len nums) 2) [(get nums 0) 1 (get nums 1)]
                                True (cut nums 0 3)))
  (when (= step 0) (return None))
  (* (max 0 (+ 1 (/ (- last first) step))) (+ 2 (len (str (int (max (abs first) (abs last))))))))

(defn _stream-size [rec]
  "How much the command REC puts out: a number of bytes, None when its words do
   not say (it reads a file, say), or the string \"endless\"."
  (setv name (get rec "name")
        argv (get rec "argv")
        inputs (+ (cut argv 1 None) (lfor [kind f] (get rec "stdin") :if (= kind "file") f)))
  (cond (in name ENDLESS-PROGRAMS) "endless"
        (= name "dd")
        (if (any (gfor a argv :if (.startswith a "if=") (in (cut a 3 None) ENDLESS-DEVICES)))
            (or (_dd-size argv) "endless")
            (_dd-size argv))
        (= name "head")
        (do (setv c (_option-value argv "-c" "--bytes"))
            ;; by lines, /dev/zero never ends: it has none
            (cond c (or (_size c) "endless")
                  (in "/dev/zero" inputs) "endless"
                  True None))
        (= name "seq") (_seq-size argv)
        (& (set inputs) ENDLESS-DEVICES) "endless"
        True None))

(defn _cut-short [rec commands]
  "The bytes a head that the output of REC is piped through lets pass, or None."
  (setv sizes []
        zeros (& (set (cut (get rec "argv") 1 None)) ENDLESS-DEVICES))
  (for [h commands]
    (when (and (= (get h "name") "head") (in (get rec "name") (or (get h "piped") #{})))
      (setv argv (get h "argv")
            c (_option-value argv "-c" "--bytes")
            n (or (_option-value argv "-n" "--lines")
                  (next (gfor a (cut argv 1 None) :if (.fullmatch _lines-re a) (cut a 1 None)) None)))
      ;; the lines of what yes or seq prints are short; /dev/zero has none
      (.append sizes (cond c (_size c)
                           zeros None
                           n (let [k (_size n)] (when (is-not k None) (* k 1024)))
                           True (* 10 1024)))))
  (setv known (lfor s sizes :if (is-not s None) s))
  (when known (min known)))

(defn _writes-a-file [out pc rules written]
  "Whether the command line OUT writes a file (a device is no file here)."
  (any (gfor p (written out pc rules) (not (.startswith p "/dev/")))))

(defn _resource-verdicts [out commands pc rules written]
  (setv verdicts []
        to-file None)
  (for [rec commands]
    (setv name (get rec "name")
          argv (get rec "argv"))
    (cond (in name DETACHERS)
          (.append verdicts [ESCALATE f"`{(get rec "text")}` — {name} takes a process out of the action's group, so it keeps running after the action ends, where no limit reaches it without the sandbox" "unbounded-processes"])
          (= name "xargs")
          (do (setv p (_option-value argv "-P" "--max-procs"))
              (when (and (is-not p None) (let [n (_size p)] (or (is n None) (= n 0) (> n PARALLEL-BOUND))))
                (.append verdicts [ESCALATE f"`{(get rec "text")}` — xargs -P {p} starts processes without bound, and no limit caps them without the sandbox" "unbounded-processes"])))
          (in name #("truncate" "fallocate"))
          (do (setv v (if (= name "truncate") (_option-value argv "-s" "--size") (_option-value argv "-l" "--length"))
                    n (_size (or v "")))
              (when (and v (or (is n None) (> n WRITE-BOUND)))
                (.append verdicts [ESCALATE f"`{(get rec "text")}` — makes a file of {v}, more than an action may write without the sandbox's quota" "unbounded-write"])))
          True
          (do (setv size (_stream-size rec))
              (when (is-not size None)
                (setv bound (_cut-short rec commands))
                (when (is-not bound None)
                  (setv size (if (= size "endless") bound (min size bound)))))
              (when (and (is-not size None) (or (= size "endless") (> size WRITE-BOUND)))
                (when (is to-file None)
                  (setv to-file (_writes-a-file out pc rules written)))
                (when to-file
                  (.append verdicts [ESCALATE (if (= size "endless")
                                                  f"`{(get rec "text")}` — writes a stream with no end to a file, which fills the disk without the sandbox's quota"
                                                  f"`{(get rec "text")}` — writes about {(int (// size 1048576))} MiB to a file, more than an action may write without the sandbox's quota")
                                     "unbounded-write"]))))))
  verdicts)
