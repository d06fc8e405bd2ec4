;; * Why

"A shell action's box has no route out (sandbox.org); this is its one door.
For each action the daemon serves an HTTP proxy on a Unix socket of its own,
on its event loop, for as long as the action runs. The socket is bound into
the box, where a relay carries the programs' TCP connections to it
(egress.org). Every request is decided by decide (egress.org) for this
action's policy, and written down: host, port, method (or CONNECT), the bytes
that went up and came down, and whether it was let through and why. That list
goes into the action's result as :egress, and so into the journal with the
result's turn, and to the model, which learns from a refusal which host was
refused and how a person can allow it."

(import asyncio ipaddress logging os re shutil socket tempfile time
        hyrule [distinct]
        passepartout.proto [proto-get]
        passepartout.context [context-runtime]
        passepartout.reach [action-asks]
        passepartout.egress [allowed-hosts decide host-entries host-text split-host]
        passepartout.relay [may-reach-network]
        passepartout.approvals.grants [host-grants]
        passepartout.sandbox [sandbox-status])

(setv HEAD-LIMIT 65536
      HEAD-SECONDS 30
      CONNECT-SECONDS 30
      MAX-RECORDS 200
      log (logging.getLogger "passepartout.proxy"))

;; * The policy of an action

(defn action-policy [action ctx now]
  "The egress policy of the shell ACTION in CTX (see =decide=), at NOW."
  (setv store (context-runtime ctx "store")
        allowed (allowed-hosts (proto-get ctx ':sandbox))
        asks (if (or (is (proto-get ctx ':approved) True) (proto-get ctx ':granted))
                 (action-asks action ctx)
                 []))
  [:allowed allowed
   :grants (if store
               (host-grants store (proto-get ctx ':session) now (context-runtime ctx "skills"))
               [])
   :named (host-entries (lfor u asks :if (and (proto-get u ':upload) (proto-get u ':host))
                              (proto-get u ':host)))
   :named-reads (host-entries (lfor u asks :if (not (proto-get u ':upload)) (proto-get u ':host)))])

;; * Reading a request

(defn parse-request [head]
  "#(method host port target header-lines) of the request HEAD (bytes), or a
   text saying why it is not one."
  (setv lines (.split (.decode head "latin-1") "\r\n")
        parts (.split (get lines 0) " ")
        headers (lfor l (cut lines 1 None) :if l l))
  (when (!= (len parts) 3)
    (return "a request line is METHOD TARGET HTTP/1.1"))
  (setv [method target version] parts)
  (when (not (and (re.fullmatch r"[A-Z]{1,20}" method) (re.fullmatch r"HTTP/1\.[01]" version)))
    (return "a request line is METHOD TARGET HTTP/1.1"))
  (cond
    (= method "CONNECT")
    (do (setv found (split-host target))
        (if (and found (get found 1))
            #(method (get found 0) (get found 1) target headers)
            "CONNECT takes HOST:PORT"))
    (.startswith (.lower target) "http://")
    (do (setv rest (cut target 7 None)
              cut-at (min (gfor c "/?#" :setv i (.find rest c) (if (>= i 0) i (len rest))))
              authority (get (.split (cut rest 0 cut-at) "@") -1)
              path (get (.split (cut rest cut-at None) "#") 0)
              path (cond (not path) "/" (.startswith path "?") (+ "/" path) True path)
              found (split-host authority))
        (if found
            #(method (get found 0) (or (get found 1) 80) path headers)
            f"{authority !r} is not a host"))
    True
    "this is an egress proxy: ask for http:// URLs, or CONNECT HOST:PORT for anything else"))

;; * Reaching the host

(defclass Unreachable [Exception]
  "The host of an allowed request could not be reached; the message says why.")

(defn _internal [ip]
  (when (and (= ip.version 6) ip.ipv4-mapped)
    (setv ip ip.ipv4-mapped))
  (or ip.is-loopback ip.is-link-local ip.is-unspecified ip.is-multicast ip.is-reserved))

(defn _why [e]
  (or (getattr e "strerror" None) (. (type e) __name__)))

(defn :async _open [host port]
  "#(reader writer) connected to HOST:PORT, the name resolved here."
  (setv literal (try (ipaddress.ip-address host) (except [ValueError] None)))
  (if literal
      (setv addresses [host])
      (do (try
            (setv infos (await (asyncio.wait-for (.getaddrinfo (asyncio.get-running-loop) host port
                                                                :type socket.SOCK_STREAM)
                                                 CONNECT-SECONDS)))
            (except [e [OSError asyncio.TimeoutError]]
              (raise (Unreachable f"{host} could not be resolved ({(_why e)})"))))
          (setv addresses (list (distinct
                                  (gfor i infos
                                        :setv a (get i 4 0)
                                        :if (not (_internal (ipaddress.ip-address (get (.split a "%") 0))))
                                        a))))
          (when (not addresses)
            (raise (Unreachable (+ f"{host} resolves only to internal addresses (loopback, link-local), "
                                   "which the proxy does not reach by name"))))))
  (setv last None)
  (for [a addresses]
    (try
      (return (await (asyncio.wait-for (asyncio.open-connection a port :limit HEAD-LIMIT) CONNECT-SECONDS)))
      (except [e [OSError asyncio.TimeoutError]]
        (setv last e))))
  (raise (Unreachable f"{(host-text host port)} could not be reached ({(_why last)})")))

;; * Carrying bytes

(setv _hop #{"connection" "proxy-connection" "keep-alive" "proxy-authorization"
             "proxy-authenticate" "te" "trailer" "upgrade"})

(defn _kept [lines [drop #{}]]
  (lfor l lines :if (not (in (.lower (.strip (get (.partition l ":") 0))) (| _hop drop))) l))

(defn :async _copy [src dst rec key]
  (while True
    (setv chunk (await (.read src 65536)))
    (when (not chunk)
      (break))
    (.write dst chunk)
    (+= (get rec key) (len chunk))
    (await (.drain dst)))
  (when (.can-write-eof dst)
    (try (.write-eof dst)
         (except [OSError]))))

(defn :async _copy-answer [src dst rec]
  "The upstream answer to DST, its head said again with Connection: close."
  (try
    (setv head (await (.readuntil src b"\r\n\r\n"))
          out (.encode (.join "\r\n" (+ (_kept (.split (.decode (cut head 0 -4) "latin-1") "\r\n"))
                                        ["Connection: close" "" ""]))
                       "latin-1"))
    (except [e asyncio.IncompleteReadError]
      (setv head e.partial
            out e.partial))
    (except [asyncio.LimitOverrunError]
      (setv head b""
            out b"")))
  (+= (get rec "down") (len head))
  (.write dst out)
  (await (.drain dst))
  (await (_copy src dst rec "down")))

(defn :async _tunnel [reader writer up-reader up-writer rec]
  (.write writer b"HTTP/1.1 200 Connection established\r\n\r\n")
  (await (.drain writer))
  (with [:async group (asyncio.TaskGroup)]
    (.create-task group (_copy reader up-writer rec "up"))
    (.create-task group (_copy up-reader writer rec "down"))))

(defn :async _forward [reader writer up-reader up-writer method host port path headers rec]
  (setv head (.encode (.join "\r\n" [f"{method} {path} HTTP/1.1"
                                      f"Host: {(host-text host (when (!= port 80) port))}"
                                      #* (_kept headers #{"host"}) "Connection: close" "" ""])
                      "latin-1"))
  (.write up-writer head)
  (+= (get rec "up") (len head))
  (setv body (asyncio.ensure-future (_copy reader up-writer rec "up")))
  (try
    (await (_copy-answer up-reader writer rec))
    (finally
      (.cancel body)
      (await (asyncio.gather body :return-exceptions True)))))

(defn :async _answer [writer status text]
  "Answer the client STATUS with TEXT, which names what was refused and why."
  (setv body (.encode (+ "passepartout egress proxy: " text "\n") "utf-8")
        reason (get {400 "Bad Request" 403 "Forbidden" 431 "Request Header Fields Too Large"
                     502 "Bad Gateway"}
                    status))
  (.write writer (+ (.encode (+ f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
                                f"Content-Length: {(len body)}\r\nConnection: close\r\n"
                                "X-Passepartout-Egress: refused\r\n\r\n")
                             "latin-1")
                    body))
  (await (.drain writer)))

;; * The proxy of one action

(defclass Egress []
  "The egress proxy of one shell action: a Unix socket in a private folder,
   and the record of every request that came through it."

  (defn __init__ [self policy folder clock]
    (setv self.policy policy
          self.folder folder
          self.path (os.path.join folder "proxy")
          self.clock clock
          self.records []
          self.unrecorded 0
          self.server None
          self.tasks (set)))

  (defn :async start [self]
    (setv self.server (await (asyncio.start-unix-server self._serve :path self.path :limit HEAD-LIMIT)))
    self)

  (defn :async close [self]
    "Stop serving, end every connection still open, remove the socket's folder."
    (when self.server
      (.close self.server))
    (setv tasks (list self.tasks))
    (for [t tasks] (.cancel t))
    (when tasks
      (await (asyncio.gather #* tasks :return-exceptions True)))
    (shutil.rmtree self.folder :ignore-errors True))

  (defn report [self]
    "What went through, one plist a request in the order they came:
     (:host H :port P :method M :up BYTES :down BYTES :verdict V :why TEXT),
     V \"allowed\", \"refused\" or \"failed\" (allowed, but not reached)."
    (+ (lfor r self.records
             [:host (get r "host") :port (get r "port") :method (get r "method")
              :up (get r "up") :down (get r "down") :verdict (get r "verdict") :why (get r "why")])
       (if self.unrecorded [[:more self.unrecorded]] [])))

  (defn _note [self rec]
    (if (< (len self.records) MAX-RECORDS)
        (.append self.records rec)
        (+= self.unrecorded 1)))

  (defn :async _serve [self reader writer]
    (setv task (asyncio.current-task))
    (.add self.tasks task)
    (try
      (await (self._request reader writer))
      (except [e Exception]
        (.debug log "an egress connection ended: %r" e))
      (finally
        (.discard self.tasks task)
        (.close writer))))

  (defn :async _request [self reader writer]
    (try
      (setv head (await (asyncio.wait-for (.readuntil reader b"\r\n\r\n") HEAD-SECONDS)))
      (except [asyncio.LimitOverrunError]
        (return (await (_answer writer 431 "the request head is longer than the proxy reads"))))
      (except [[asyncio.IncompleteReadError asyncio.TimeoutError]]
        (return)))
    (setv request (parse-request head))
    (when (isinstance request str)
      (return (await (_answer writer 400 request))))
    (setv [method host port path headers] request
          [ok why] (decide self.policy method host port (self.clock))
          rec {"host" host "port" port "method" method "up" 0 "down" 0
               "verdict" (if ok "allowed" "refused") "why" why})
    (self._note rec)
    (when (not ok)
      (return (await (_answer writer 403 why))))
    (try
      (setv [up-reader up-writer] (await (_open host port)))
      (except [e Unreachable]
        (setv (get rec "verdict") "failed"
              (get rec "why") (str e))
        (return (await (_answer writer 502 (str e))))))
    (try
      (if (= method "CONNECT")
          (await (_tunnel reader writer up-reader up-writer rec))
          (await (_forward reader writer up-reader up-writer method host port path headers rec)))
      (finally
        (.close up-writer)))))

;; * Opening and reporting

(defn _folder [ctx]
  (setv base (.get (or (context-runtime ctx "config") {}) "runtime_dir"))
  (tempfile.mkdtemp :prefix "egress-"
                    :dir (when (and base (os.path.isdir base) (< (len base) 80)) base)))

(defn :async open-egress [action ctx]
  "The egress proxy of the shell ACTION in CTX, serving; None when its box uses
   none (no bubblewrap, network off or on, no relay program, a command line that
   never goes out) or it could not start."
  (setv status (or (proto-get ctx ':sandbox)
                   (sandbox-status (context-runtime ctx "config"))))
  (when (not (and (= (proto-get status ':kind) "bubblewrap")
                  (= (proto-get status ':network) "policy")
                  (proto-get status ':relay)
                  (may-reach-network (proto-get action ':cmd))))
    (return None))
  (setv services (context-runtime ctx "services")
        clock (if services services.clock time.time)
        folder None)
  (try
    (setv folder (_folder ctx)
          egress (Egress (action-policy action ctx (clock)) folder clock))
    (await (.start egress))
    (except [e OSError]
      (when folder (shutil.rmtree folder :ignore-errors True))
      (.warning log "the egress proxy could not start, so the action has no network: %s" e)
      None)))

(defn egress-result [egress result]
  "RESULT with what went through EGRESS as :egress, when anything was asked."
  (if (and egress (or egress.records egress.unrecorded))
      (+ result [:egress (.report egress)])
      result))
