;; * Why

"The core loop can do nothing by itself: every action it can take is an
actuator some skill registered. The built-in ones are ordinary skill files,
loaded like any person's own, so they can be read, replaced or disabled the
same way. skills-core.org is the source of the ones that act on the
workspace, the shell, memory and the conversation, and of /stop, /help
and /status; each of its blocks names the skill file it tangles into."

;; * files: reading and writing inside the workspace

(require passepartout.macros [defskill])
(import os stat tempfile
        passepartout.act [clip-output error-result]
        passepartout.context [context-limit]
        passepartout.proto [proto-get]
        passepartout.workspace [resolve-path])

(setv BINARY-PROBE 8192)

(defn _resolved [verb action ctx write]
  "The resolved path of ACTION's :path, or an error result."
  (setv path (proto-get action ':path)
        found (resolve-path path ctx :write write))
  (if (proto-get found ':ok)
      #((proto-get found ':path) None)
      #(None (error-result f"{verb} refused {path !r}: {(proto-get found ':reason)}"))))

(defn run-read-file [action ctx]
  (setv [real refused] (_resolved "read-file" action ctx False))
  (when refused (return refused))
  (setv limit (context-limit ctx "output-limit" 16000))
  (try (setv fd (os.open real (| os.O-RDONLY os.O-NOFOLLOW os.O-NONBLOCK)))
       (except [FileNotFoundError]
         (return (error-result f"no such file: {real}")))
       (except [e OSError]
         (return (error-result f"cannot open {real}: {e.strerror}"))))
  (setv info (os.fstat fd))
  (when (not (stat.S-ISREG info.st-mode))
    (os.close fd)
    (return (error-result (if (stat.S-ISDIR info.st-mode)
                              f"{real} is a folder, not a file"
                              f"{real} is not a regular file"))))
  (with [f (os.fdopen fd "rb")]
    (setv data (.read f (max limit BINARY-PROBE))
          total (max info.st-size (len data))))
  (when (in b"\x00" (cut data BINARY-PROBE))
    (return (error-result f"{real} is a binary file (a NUL byte in its first 8 KiB); it is not shown")))
  [:status :ok :path real :content (clip-output data limit total)
   :bytes total :truncated (> total limit)])

(defn _mode [path]
  (try (stat.S-IMODE (. (os.stat path) st-mode))
       (except [FileNotFoundError] 0o644)))

(defn run-write-file [action ctx]
  (setv content (proto-get action ':content))
  (when (not (isinstance content str))
    (return (error-result "write-file needs :content text")))
  (setv [real refused] (_resolved "write-file" action ctx True))
  (when refused (return refused))
  (when (os.path.isdir real)
    (return (error-result f"{real} is a folder; nothing was written")))
  (setv data (.encode content "utf-8")
        parent (os.path.dirname real))
  (os.makedirs parent :exist-ok True)
  (when (!= (os.path.realpath parent) parent)
    (return (error-result f"the folder of {real} changed while writing; nothing was written")))
  (setv [fd tmp] (tempfile.mkstemp :dir parent :prefix f".{(os.path.basename real)}." :suffix ".tmp"))
  (try
    (with [f (os.fdopen fd "wb")]
      (.write f data)
      (.flush f)
      (os.fsync (.fileno f)))
    (os.chmod tmp (_mode real))
    (os.replace tmp real)
    (except [BaseException]
      (try (os.unlink tmp) (except [OSError] None))
      (raise)))
  [:status :ok :path real :bytes (len data)])

(defskill files
  "Reads and writes files inside the workspace."
  :priority 10
  :actuators {"read-file" {"run" run-read-file
                           "schema" [:path [:type "string" :required True
                                            :doc "the file, relative to the workspace"]]
                           "doc" "Read a text file in the workspace."
                           "effect" False}
              "write-file" {"run" run-write-file
                            "schema" [:path [:type "string" :required True
                                             :doc "the file, relative to the workspace (or in a temp folder)"]
                                      :content [:type "string" :required True
                                                :doc "the whole new content of the file"]]
                            "doc" "Write (create or replace) a text file in the workspace, creating its folders."
                            "effect" True}})
