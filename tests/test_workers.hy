;; Tests of passepartout/workers.hy: workflows and their workers as the store keeps them.

(import pytest
        passepartout.proto [kw proto-get]
        passepartout.store [store-open store-close]
        passepartout.workers [workflow-add workflow-get workflow-workers worker-start worker-end
                              workflow-end workflow-resume ready-ids doomed session-view
                              workflow-result worker-session]
        steps [expect])

(defn [pytest.fixture] store [tmp-path]
  (setv s (store-open (str (/ tmp-path "s.sqlite3"))))
  (yield s)
  (store-close s))

(defn diamond [store [not-before None]]
  "A workflow of four workers: a, then b and c, then d after both."
  (workflow-add store [:id "f1" :title "diamond" :session "test:1" :task "t1" :depth 0]
                [[:id "wa" :step "a" :objective "first"]
                 [:id "wb" :step "b" :objective "left" :depends-on ["wa"] :not-before not-before]
                 [:id "wc" :step "c" :objective "right" :depends-on ["wa"] :tools ["read-file"]]
                 [:id "wd" :step "d" :objective "join" :depends-on ["wb" "wc"]]]
                100.0))

(defn test-a-workflow-and-its-workers-are-kept [store]
  (diamond store)
  (setv f (workflow-get store "f1")
        ws (workflow-workers store "f1"))
  (expect (proto-get f ':state) "running" "the workflow's state")
  (expect (lfor w ws (proto-get w ':id)) ["wa" "wb" "wc" "wd"] "the workers, in order")
  (expect (proto-get (get ws 3) ':depends-on) ["wb" "wc"] "d's dependencies")
  (expect (proto-get (get ws 2) ':tools) ["read-file"] "c's tools")
  (expect (proto-get (get ws 0) ':tools) None "a's tools")
  (expect (lfor w ws (proto-get w ':depth)) [1 1 1 1] "depths")
  (workflow-resume store "f1" [:type :event :payload [:sensor :tool-result]])
  (expect (proto-get (workflow-get store "f1") ':resume) [:type :event :payload [:sensor :tool-result]] "resume"))

(defn test-a-worker-starts-once-its-dependencies-are-done [store]
  (diamond store)
  (expect (ready-ids (workflow-workers store "f1")) ["wa"] "ready at first")
  (assert (worker-start store "wa" 101.0) "a starts")
  (assert (not (worker-start store "wa" 101.0)) "a second start changes nothing")
  (expect (ready-ids (workflow-workers store "f1")) [] "ready while a runs")
  (assert (worker-end store "wa" "done" "found it" 102.0 :calls 2) "a finishes")
  (assert (not (worker-end store "wa" "failed" "again" 103.0)) "a second finish changes nothing")
  (expect (sorted (ready-ids (workflow-workers store "f1"))) ["wb" "wc"] "fan-out")
  (for [id ["wb" "wc"]] (worker-start store id 104.0))
  (worker-end store "wb" "done" "b" 105.0)
  (expect (ready-ids (workflow-workers store "f1")) [] "d waits for c too")
  (worker-end store "wc" "done" "c" 106.0)
  (expect (ready-ids (workflow-workers store "f1")) ["wd"] "fan-in"))

(defn test-not-before-holds-a-worker-back [store]
  (diamond store :not-before 500.0)
  (worker-start store "wa" 101.0)
  (worker-end store "wa" "done" "x" 102.0)
  (expect (ready-ids (workflow-workers store "f1") 200.0) ["wc"] "before b's time")
  (expect (sorted (ready-ids (workflow-workers store "f1") 500.0)) ["wb" "wc"] "at b's time"))

(defn test-a-failure-dooms-what-depends-on-it-transitively [store]
  (diamond store)
  (worker-start store "wa" 101.0)
  (worker-end store "wa" "done" "x" 102.0)
  (worker-start store "wb" 103.0)
  (worker-end store "wb" "failed" "no model could answer" 104.0)
  (setv found (doomed (workflow-workers store "f1")))
  (expect (lfor [id _] found id) ["wd"] "doomed")
  (assert (in "b, which failed" (get found 0 1)) (get found 0 1))
  ;; c still runs: it does not depend on b
  (expect (ready-ids (workflow-workers store "f1")) ["wc"] "c is still ready"))

(defn test-the-result-names-every-worker-and-what-went-wrong [store]
  (diamond store)
  (for [[id state] [["wa" "done"] ["wb" "done"] ["wc" "stopped"] ["wd" "failed"]]]
    (worker-end store id state f"{id} said" 110.0))
  (setv r (workflow-result (workflow-get store "f1") (workflow-workers store "f1")))
  (expect (proto-get r ':status) (kw "error") "status")
  (assert (in "c stopped: wc said" (proto-get r ':error)) (proto-get r ':error))
  (expect (lfor w (proto-get r ':workers) (proto-get w ':state)) ["done" "done" "stopped" "failed"] "states"))

(defn test-a-session-knows-its-workers-and-a-worker-its-depth-and-tools [store]
  (diamond store)
  (setv mine (session-view store "test:1"))
  (expect (proto-get mine ':depth) 0 "the conversation's depth")
  (expect (sorted (proto-get mine ':known)) ["wa" "wb" "wc" "wd"] "the known workers")
  (setv c (session-view store (worker-session "wc")))
  (expect [(proto-get c ':id) (proto-get c ':depth) (proto-get c ':tools)] ["wc" 1 ["read-file"]] "worker c"))

(defn test-a-session-knows-how-often-its-workers-were-continued [store]
  (workflow-add store [:id "f1" :title "t" :session "test:1" :task "t1" :depth 0]
                [[:id "w1" :step "w1" :objective "first"]] 100.0)
  (workflow-add store [:id "f2" :title "t" :session "test:1" :task "t2" :depth 0]
                [[:id "w2" :step "w2" :objective "again" :continuations 1]] 101.0)
  (expect (proto-get (session-view store "test:1") ':continuations) [["w2" 1]] "the continuations"))
