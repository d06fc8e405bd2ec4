;; * Why

"Finding what an action changed in the workspace without walking it takes the
kernel's word: inotify reports every change to a watched folder as it
happens, by whoever makes it. The checkpoints' keeper (keeper.org) watches
each folder of the workspace with it."

(import ctypes os struct weakref)

;; * The kernel's reports

(setv IN-MODIFY 0x2 IN-ATTRIB 0x4 IN-MOVED-FROM 0x40 IN-MOVED-TO 0x80 IN-CREATE 0x100
      IN-DELETE 0x200 IN-DELETE-SELF 0x400 IN-MOVE-SELF 0x800 IN-Q-OVERFLOW 0x4000
      IN-IGNORED 0x8000 IN-ONLYDIR 0x1000000 IN-DONT-FOLLOW 0x2000000 IN-ISDIR 0x40000000
      _watched (| IN-MODIFY IN-ATTRIB IN-MOVED-FROM IN-MOVED-TO IN-CREATE IN-DELETE
                  IN-DELETE-SELF IN-MOVE-SELF IN-ONLYDIR IN-DONT-FOLLOW)
      _event (struct.Struct "iIII"))

(defclass Inotify []
  "One inotify instance, read without blocking."

  (defn __init__ [self]
    (setv self.libc (ctypes.CDLL None :use-errno True)
          fd (self.libc.inotify-init1 (| os.O-NONBLOCK os.O-CLOEXEC)))
    (when (< fd 0)
      (setv e (ctypes.get-errno))
      (raise (OSError e (os.strerror e))))
    (setv self.fd fd
          self._closer (weakref.finalize self os.close fd)))

  (defn add [self path]
    "The watch of the folder PATH (a new one, or the one it has)."
    (setv wd (self.libc.inotify-add-watch self.fd (os.fsencode path) _watched))
    (when (< wd 0)
      (setv e (ctypes.get-errno))
      (raise (OSError e (os.strerror e) path)))
    wd)

  (defn remove [self wd]
    (self.libc.inotify-rm-watch self.fd wd))

  (defn read [self]
    "The events waiting, as #(wd mask name) triples."
    (setv out [])
    (while True
      (try (setv data (os.read self.fd 65536))
           (except [BlockingIOError] (return out)))
      (setv i 0)
      (while (< i (len data))
        (setv [wd mask _ n] (.unpack-from _event data i)
              name (.rstrip (cut data (+ i 16) (+ i 16 n)) b"\x00")
              i (+ i 16 n))
        (.append out #(wd mask (os.fsdecode name))))))

  (defn close [self]
    (self._closer)))
