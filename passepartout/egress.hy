;; * Why

"Private data, text from strangers and an open network together are how an
agent's data leaves: a command that reads a secret and a curl on the same
line need nothing else. So a shell action has no network of its own. Its
sandbox is a network namespace with only a loopback device; the one way out is
an HTTP proxy the daemon runs for that action (proxy.org), which lets through
what the policy or a person allowed for that action and writes down
everything that went by."

;; ** The policy in one table

(import functools [lru-cache]
        ipaddress re
        passepartout.proto [proto-get]
        passepartout.config [config-defaults])

(setv READ-METHODS #{"GET" "HEAD" "OPTIONS"}
      ALLOWED-HOSTS (get (config-defaults "sandbox") "allowed_hosts")
      _allowed-hosts-key ':allowed-hosts _grants-key ':grants _named-key ':named
      _named-reads-key ':named-reads _allowed-key ':allowed)

;; * Hosts

(setv _label r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
      _name-re (re.compile (+ r"(?:" _label r"\.)*" _label))
      _bracketed-re (re.compile r"\[([0-9a-f:.]+)\](?::([0-9]{1,5}))?"))

(defn _ip [text]
  (try (ipaddress.ip-address text)
       (except [ValueError] None)))

(defn split-host [text [wildcard False]]
  "#(host port) for TEXT written as HOST, HOST:PORT or [IPV6]:PORT, port None
   when not given; None when TEXT is not a host. With WILDCARD, *.NAME is one.
   (split-host \"PyPI.org.:8443\") ⇒ #(\"pypi.org\" 8443)"
  (when (not (and (isinstance text str) (< 0 (len text) 300)))
    (return None))
  (setv t (.lower (.strip text))
        port None
        m (.fullmatch _bracketed-re t))
  (cond m (setv [host port] (.groups m))
        (= (.count t ":") 1) (setv [host _ port] (.partition t ":"))
        True (setv host t))
  (when (and (isinstance port str) (not (and (.isdigit port) (< 0 (int port) 65536))))
    (return None))
  (setv port (when port (int port))
        host (.rstrip host ".")
        star (and wildcard (.startswith host "*."))
        bare (if star (cut host 2 None) host)
        ip (_ip bare))
  (cond (and ip (not star) (or m (= ip.version 4)))
        #((str ip) port)
        (and ip (not star) (is port None))
        #((str ip) None)
        (and (not ip) (.fullmatch _name-re bare) (<= (len bare) 253)
             (not (.isdigit (.replace (get (.split bare ".") -1) "_" "0"))))
        #(host port)
        True None))

(defn host-text [host port]
  "HOST and PORT written back as one text: \"pypi.org\", \"[::1]:8080\"."
  (setv h (if (in ":" host) f"[{host}]" host))
  (if (is port None)
      (if (in ":" host) h host)
      f"{h}:{port}"))

(defn host-word [text]
  "True when TEXT, a word a person wrote after /approve CODE 1h, names a host:
   a name with a dot, an address, or anything with a port (a bare word such as
   \"thanks\" is not one)."
  (setv found (split-host text))
  (and (is-not found None)
       (or (in "." (get found 0)) (in ":" (get found 0)) (is-not (get found 1) None))))

(defn [(lru-cache :maxsize 64)] _host-entries [texts]
  (tuple (gfor t texts
               :setv e (split-host t :wildcard True)
               :if e e)))

(defn host-entries [texts]
  "The allowed-host entries TEXTS (strings) as #(host port) pairs; what is not a
   host is left out. Every gate call reads the same list, so the pairs of a
   list are made once."
  (try (list (_host-entries (tuple (or texts []))))
       (except [TypeError]
         (lfor t (or texts [])
               :setv e (split-host t :wildcard True)
               :if e e))))

(defn entry-covers [entry host port]
  "True when the allowed-host ENTRY #(pattern port) covers HOST on PORT (None:
   the web's ports)."
  (setv [pattern p] entry)
  (and (if (.startswith pattern "*.")
           (.endswith host (cut pattern 1 None))
           (= host pattern))
       (if (is p None)
           (in port #(None 80 443))
           (= port p))))

(defn in-box-host [host]
  "True for the loopback names the box keeps to itself: a server an action
   starts and reaches on the same line never goes through the proxy."
  (in host #("localhost" "127.0.0.1" "::1")))

(defn allowed-hosts [status]
  "The allowed-host entries of the sandbox STATUS (the defaults when it has none)."
  (host-entries (proto-get (or status []) _allowed-hosts-key ALLOWED-HOSTS)))

;; * The proxy's decision

(defn decide [policy method host port now]
  "#(allowed why) for a request METHOD to HOST:PORT under POLICY at NOW."
  (setv target (host-text host port)
        upload (not (in method (| READ-METHODS #{"CONNECT"}))))
  (for [[h p expires] (proto-get policy _grants-key [])]
    (when (and (> expires now) (entry-covers #(h p) host port))
      (return #(True f"{(host-text h p)} is granted by a person"))))
  (when (any (gfor e (proto-get policy _named-key []) (entry-covers e host port)))
    (return #(True f"{target} is on the command line a person approved")))
  (when (and (not upload) (any (gfor e (proto-get policy _named-reads-key []) (entry-covers e host port))))
    (return #(True f"{target} is on the command line a person approved, to be read")))
  (setv allowed (any (gfor e (proto-get policy _allowed-key []) (entry-covers e host port))))
  (cond (and allowed (not upload))
        #(True f"{target} is an allowed host")
        allowed
        #(False (+ f"{method} to {target} is an upload; uploads are asked about before "
                   f"the action runs, and let through only for a host a person granted "
                   f"(/approve CODE 1h {target})"))
        True
        #(False (+ f"{target} is not an allowed host ([sandbox] allowed_hosts); a command "
                   f"line that names it is asked about first, and a person can grant it "
                   f"(/approve CODE 1h {target})"))))
