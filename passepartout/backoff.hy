;; * Why

(defn growing-pause [n [most 60]]
  "Seconds to wait before try N+1 after N failures in a row: 1, 2, 4, … at most MOST.
   (growing-pause 3) ⇒ 4"
  (min most (** 2 (min 30 (max 0 (- n 1))))))
