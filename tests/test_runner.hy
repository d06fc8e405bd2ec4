;; Tests of passepartout/runner.hy: the one loop that steps every chat's tasks.
;; (/stop through the runner is tested with the loop, in tests/test_loop.hy.)

(import asyncio
        pytest
        passepartout.proto [proto-get]
        passepartout.runner [Runner]
        steps [expect kind-of text-of symbolic-env user-says])

(defn [pytest.fixture] env [tmp-path]
  (yield :from (symbolic-env tmp-path)))

(defn test-the-runner-keeps-order-within-a-chat-and-serves-chats-concurrently [env]
  (setv delivered [])
  (defn :async main []
    (setv runner (Runner env (fn [r] (.append delivered r))))
    (for [i (range 5)]
      (await (.submit runner (user-says f"!echo a{i}" "a")))
      (await (.submit runner (user-says f"!echo b{i}" "b"))))
    (await (.idle runner "test:a"))
    (await (.idle runner "test:b"))
    (await (.close runner)))
  (asyncio.run (main))
  (for [chat ["a" "b"]]
    (setv answers (lfor r delivered
                        :if (and (= (proto-get r ':session) f"test:{chat}") (= (kind-of r) "answer"))
                        (get (.split (.strip (text-of r)) "\n") -1)))
    (expect answers (lfor i (range 5) f"{chat}{i}") f"answers of chat {chat}")))
