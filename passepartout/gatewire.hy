;; * Why

"The daemon and its gate process (gatekeeper.org, gateprocess.org) speak
plist text in frames over a pipe, and share a few bytes of memory that say
which gate is running and since when. This is what both sides must agree on:
the frame, the slot, the keywords of a request and its reply, how the skills
to load are written, and the shape of a rejection when a proposal cannot be
judged."

(import struct time
        passepartout.proto [kw proto-get is-plist]
        passepartout.verify [strip-authority])

;; * The wire

(setv MAX-FRAME (* 16 1024 1024)
      LOAD-WAIT 120
      _CONTEXTS 32
      _SLOT (struct.Struct "<dd64s")
      _RUNTIME (kw "runtime")
      _OP (kw "op")
      _VERIFY (kw "verify")
      _LOAD (kw "load")
      _BASE (kw "base")
      _NEW-BASE (kw "new-base")
      _DROP (kw "drop")
      _CTX (kw "ctx")
      _OUTCOME (kw "outcome")
      _SAME (kw "same")
      _DISCARD (kw "discard"))

(defn _frame [text]
  "TEXT as one frame."
  (setv data (.encode text "utf-8"))
  (+ (.to-bytes (len data) 4 "big") data))

(defn _describe [e]
  "E as \"Type: message\", even when its message cannot be made."
  (try f"{(. (type e) __name__)}: {e}"
       (except [Exception] (. (type e) __name__))))

(defn _label [phase]
  "PHASE as the slot holds it."
  (cut (.encode phase "utf-8") 64))

(defn _mark [slot phase allowance]
  "Write into SLOT that PHASE began now and may take ALLOWANCE seconds."
  (_SLOT.pack-into slot 0 (time.monotonic) allowance (_label phase)))

(defn _read-slot [slot]
  "#(started allowance phase) from SLOT, read until two reads agree (the other
   side may be writing it)."
  (setv seen (_SLOT.unpack-from slot 0))
  (while True
    (setv again (_SLOT.unpack-from slot 0))
    (when (= again seen)
      (break))
    (setv seen again))
  (setv [started allowance name] seen)
  #(started allowance (.decode (.rstrip name b"\x00") "utf-8" "replace")))

;; * A proposal that cannot be judged

(defn failed-outcome [action gate reason]
  "A rejection by GATE for REASON, in the shape of verify's outcome."
  (setv proposed action
        stripped [])
  (when (is-plist action)
    (setv [action stripped] (strip-authority action)))
  [:verdict :reject :gate gate :reason reason :action action :proposed proposed
   :stripped stripped :decisions [[:gate gate :verdict :reject :reason reason]]])

;; * The skills to load

(defn _sources-plist [sources]
  (+ [:folders (lfor f (.get sources "folders" []) (str f))
      :disabled (lfor n (.get sources "disabled" []) (str n))
      :builtin (bool (.get sources "builtin" True))
      :forms (lfor t (.get sources "forms" []) (str t))]
     (if (in "files" sources)
         [:files (lfor [p b t] (get sources "files") [(str p) (bool b) (str t)])]
         [])))

(defn _sources-dict [plist]
  (| {"folders" (list (proto-get plist ':folders []))
      "disabled" (list (proto-get plist ':disabled []))
      "builtin" (bool (proto-get plist ':builtin True))
      "forms" (list (proto-get plist ':forms []))}
     (if (is (proto-get plist ':files) None)
         {}
         {"files" (lfor f (proto-get plist ':files) (list f))})))
