;; * Why

"Several parts of the daemon try again after a failure: the runner a step the
store could not take, the hub a reply that could not be sent, the daemon a
gateway that failed, a gateway its own requests. They all wait the same way,
doubling the pause after each failure in a row up to a ceiling, so that a
service that is down for long is asked about once a minute, not hammered, and
one that was down briefly is asked again within a second."

(defn growing-pause [n [most 60]]
  "Seconds to wait before try N+1 after N failures in a row: 1, 2, 4, … at most MOST.
   (growing-pause 3) ⇒ 4"
  (min most (** 2 (min 30 (max 0 (- n 1))))))
