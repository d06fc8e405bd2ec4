"""kill -9 during a workflow: no worker runs twice, none is lost, the spawner is told.

    python tests/workflow_kill.py [KILLS] [SEED]

A daemon process (this script as `child`: the services and a hub on a data
dir, the scripted model on loopback in this process) is given a 30-worker
workflow with fan-out and fan-in whose every worker appends a line to a file
of its own, then answers. It is killed with SIGKILL at KILLS (5) random
moments and started again each time on the same data dir; the last start runs
until the spawner has answered. Then: how many workers ran their command twice
(a file with two lines), how many were lost (not finished, or the spawner never
answered), and whether every cut-off worker is named in the spawner's result.
"""
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
KEY_ENV = "PASSEPARTOUT_FIGURES_KEY"


def child(folder, url):
    import hy  # noqa: F401
    from hy.models import Keyword as K
    from passepartout.providers import make_provider
    from passepartout.daemon import boot, shutdown
    from passepartout.gateways.hub import Hub
    from passepartout.proto import proto_get, proto_print
    from passepartout.task import ends_task

    folder = Path(folder)
    (folder / "config.toml").write_text('[sandbox]\nmode = "off"\n[limits]\nmodel_concurrency = 8\n')
    services = boot(config_path=str(folder / "config.toml"),
                    environ={"PASSEPARTOUT_DATA_DIR": str(folder / "data"), "HOME": str(folder)},
                    providers=[make_provider("openai/scripted", api_base=url, api_key_env=KEY_ENV)])
    said = folder / "said.txt"

    async def main():
        done = asyncio.Event()

        async def deliver(reply):
            with open(said, "a") as f:
                f.write(json.dumps(proto_print(reply)) + "\n")
            if ends_task(reply) and proto_get(reply, K("session")) == "test:1":
                done.set()

        hub = Hub(services, [{"name": "test", "deliver": deliver}], concurrency=8)
        # as the daemon does: what a kill left in the outbox goes out again
        outbox = asyncio.ensure_future(hub.outbox_service())
        await hub.resume()
        # every start says it again: the inbox knows the key, so only the first is taken
        await hub.receive("test", "m1", [K("type"), K("event"),
                                             K("source"), [K("gateway"), K("test"), K("chat"), "1"],
                                             K("payload"), [K("sensor"), K("user-input"), K("text"), "thirty"]])
        # a start after the answer went out (a kill after it) has nothing to wait for
        if not (said.exists() and "the workflow is over" in said.read_text()):
            await done.wait()
        outbox.cancel()
        await hub.close()

    try:
        asyncio.run(main())
    finally:
        shutdown(services)


def plan():
    steps = ['(:id "n0" :objective "node n0")']
    steps += [f'(:id "n{i}" :objective "node n{i}" :depends-on ("n0"))' for i in range(1, 15)]
    steps += [f'(:id "n{i}" :objective "node n{i}" :depends-on ("n{i - 14}" "n{(i - 14) % 14 + 1}"))'
              for i in range(15, 29)]
    steps.append('(:id "n29" :objective "node n29" :depends-on ('
                 + " ".join(f'"n{i}"' for i in range(15, 29)) + '))')
    return ('(:action :plan :title "thirty" :explanation "thirty workers that each write a file" :steps ('
            + " ".join(steps) + "))")


def parent(kills, seed):
    from openai_server import ScriptedOpenAIServer
    import hy  # noqa: F401
    from hy.models import Keyword as K
    from passepartout.proto import proto_get
    from passepartout.store import store_open, store_close
    from passepartout.workers import workflow_workers, workflows_of

    rng = random.Random(seed)
    the_plan = plan()

    def respond(body):
        last = str(body["messages"][-1].get("content") or "")
        at = max(last.rfind("\n\nResult of "), last.rfind("\n\nYour previous proposals were refused"))
        if at >= 0:  # turns of one role joined: from the last result or refusal on
            last = last[at + 2:]
        if "Your objective:\nnode " in last:
            node = last.split("Your objective:\nnode ")[1].split()[0]
            return (f'(:action :shell :cmd "echo ran >> {node}.txt; sleep 0.2" '
                    f':explanation "leave a mark for {node}")')
        if last.startswith("Result of (:action :shell"):
            return '(:action :message :text "marked")'
        if last.startswith("Result of (:action :plan"):
            return '(:action :message :text "the workflow is over")'
        return the_plan

    server = ScriptedOpenAIServer()
    server.responder = respond
    folder = Path(tempfile.mkdtemp(prefix="passepartout-kill-"))
    env = dict(os.environ, **{KEY_ENV: "figures-key"})
    cmd = [sys.executable, str(Path(__file__).resolve()), "child", str(folder), server.url("ok")]
    try:
        for i in range(kills):
            p = subprocess.Popen(cmd, env=env, cwd=str(HERE))
            time.sleep(rng.uniform(3.0, 8.0))
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
        p = subprocess.run(cmd, env=env, cwd=str(HERE), timeout=600)
        store = store_open(str(folder / "data" / "passepartout.sqlite3"))
        try:
            (flow,) = workflows_of(store, "test:1")
            workers = workflow_workers(store, proto_get(flow, K("id")))
            ws = Path(folder / "data" / "workspace")
            twice = [w for w in workers
                     if (ws / f"{proto_get(w, K('step'))}.txt").exists()
                     and len((ws / f"{proto_get(w, K('step'))}.txt").read_text().splitlines()) > 1]
            unfinished = [w for w in workers if proto_get(w, K("state")) in ("waiting", "running")]
            answers = [json.loads(line) for line in (folder / "said.txt").read_text().splitlines()]
            answered = any("the workflow is over" in a for a in answers)
            result = store.query("SELECT data FROM events WHERE kind = 'result' AND session = 'test:1' "
                                 "ORDER BY id DESC LIMIT 1")
            told = result[0][0] if result else ""
            cut = [w for w in workers if proto_get(w, K("state")) == "cut-off"]
            told_all = all(f':id "{proto_get(w, K("id"))}"' in told and ':state "cut-off"' in told for w in cut)
            states = {}
            for w in workers:
                states[proto_get(w, K("state"))] = states.get(proto_get(w, K("state")), 0) + 1
            print(f"kill -9 at {kills} random moments during a 30-worker workflow (seed {seed}): "
                  f"ran twice {len(twice)}, lost {len(unfinished) + (0 if answered else 1)}, "
                  f"cut off {len(cut)} (spawner told of each: {told_all}), final states {states}")
        finally:
            store_close(store)
    finally:
        server.stop()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3])
    else:
        parent(int(sys.argv[1]) if len(sys.argv) > 1 else 5, int(sys.argv[2]) if len(sys.argv) > 2 else 1)
