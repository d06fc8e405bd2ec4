"""Figures of background work, with the scripted model on loopback.

    python tests/workflow_figures.py [STOP-RUNS]

1. A 30-node workflow with fan-out and fan-in (one root, 14 workers after it,
   14 that each wait for two of those, one that waits for all 14): that every
   worker started only after all it depends on had finished, the wall time, and
   the runner's overhead per worker in ms: a worker's time from its start to
   its finish less the time its model calls took (the hub's inbox and outbox,
   the journal, the gates, the workflow's own bookkeeping).
2. /stop of a running 10-worker workflow whose workers each run a shell
   command: the time from /stop until none of their processes is left, p50
   and max over STOP-RUNS runs (5 by default).
"""
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hy  # noqa: F401
from hy.models import Keyword as K

from openai_server import ScriptedOpenAIServer
from passepartout.providers import make_provider
from passepartout.daemon import boot, shutdown
from passepartout.gateways.hub import Hub
from passepartout.proto import proto_get
from passepartout.task import ends_task
from passepartout.workers import workflow_workers, workflows_of

KEY_ENV = "PASSEPARTOUT_FIGURES_KEY"


def services_in(folder, server):
    (folder / "config.toml").write_text('[sandbox]\nmode = "off"\n[limits]\nmodel_concurrency = 8\n')
    return boot(config_path=str(folder / "config.toml"),
                environ={"PASSEPARTOUT_DATA_DIR": str(folder / "data"), "HOME": str(folder)},
                providers=[make_provider("openai/scripted", api_base=server.url("ok"), api_key_env=KEY_ENV)])


def last_said(body):
    """The last message of BODY, from its last result on when turns of one role
    were joined into it."""
    text = str(body["messages"][-1].get("content") or "")
    cut = max(text.rfind("\n\nResult of "), text.rfind("\n\nYour previous proposals were refused"))
    return text[cut + 2:] if cut >= 0 else text


def says(text):
    return f'(:action :message :text "{text}")'


def dag_plan():
    steps = ['(:id "n0" :objective "node n0")']
    steps += [f'(:id "n{i}" :objective "node n{i}" :depends-on ("n0"))' for i in range(1, 15)]
    steps += [f'(:id "n{i}" :objective "node n{i}" :depends-on ("n{i - 14}" "n{(i - 14) % 14 + 1}"))'
              for i in range(15, 29)]
    steps.append('(:id "n29" :objective "node n29" :depends-on ('
                 + " ".join(f'"n{i}"' for i in range(15, 29)) + '))')
    return ('(:action :plan :title "thirty" :explanation "a wide workflow with fan-out and fan-in" :steps ('
            + " ".join(steps) + "))")


async def converse(services, text, until):
    replies = []
    done = asyncio.Event()

    async def deliver(reply):
        replies.append(reply)
        if until(reply):
            done.set()

    hub = Hub(services, [{"name": "test", "deliver": deliver}], concurrency=8)
    try:
        await hub.receive("test", "m1", [K("type"), K("event"), K("source"), [K("gateway"), K("test"), K("chat"), "1"],
                                         K("payload"), [K("sensor"), K("user-input"), K("text"), text]])
        await asyncio.wait_for(done.wait(), 600)
    finally:
        await hub.close()
    return replies


def thirty(server):
    folder = Path(tempfile.mkdtemp(prefix="passepartout-figures-"))
    plan = dag_plan()

    def respond(body):
        last = last_said(body)
        if "Your objective:\nnode " in last:
            return says("finished " + last.split("Your objective:\nnode ")[1].split()[0])
        if last.startswith("Result of (:action :plan"):
            return says("the workflow is over")
        return plan

    server.responder = respond
    services = services_in(folder, server)
    model_time = {}
    complete = services.complete

    async def timed(request):
        started = time.monotonic()
        try:
            return await complete(request)
        finally:
            session = proto_get(proto_get(request, K("signal")), K("session"))
            model_time[session] = model_time.get(session, 0.0) + time.monotonic() - started

    services.complete = timed
    try:
        started = time.monotonic()
        asyncio.run(converse(services, "thirty nodes", ends_task))
        wall = time.monotonic() - started
        (flow,) = workflows_of(services.store, "test:1")
        workers = workflow_workers(services.store, proto_get(flow, K("id")))
        by_id = {proto_get(w, K("id")): w for w in workers}
        in_order = all(proto_get(w, K("started")) >= proto_get(by_id[d], K("finished"))
                       for w in workers for d in proto_get(w, K("depends-on")))
        overhead = [1000 * (proto_get(w, K("finished")) - proto_get(w, K("started"))
                            - model_time.get("worker:" + proto_get(w, K("id")), 0.0))
                    for w in workers]
        done = sum(1 for w in workers if proto_get(w, K("state")) == "done")
        return [("workflow of 30 workers (fan-out, fan-in): done, in dependency order",
                 done if in_order else 0, f"of {len(workers)}", "30"),
                ("workflow of 30 workers: wall time", wall, "s", ""),
                ("workflow: runner overhead per worker beyond its model calls, p50",
                 statistics.median(overhead), "ms", ""),
                ("workflow: runner overhead per worker beyond its model calls, max", max(overhead), "ms", "")]
    finally:
        shutdown(services)


def processes_with(marker):
    out = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            line = (p / "cmdline").read_bytes()
        except OSError:
            continue
        if line.startswith(b"sleep\x00") and marker.encode() in line:
            out.append(p.name)
    return out


def stop_run(server, marker):
    folder = Path(tempfile.mkdtemp(prefix="passepartout-figures-"))
    steps = " ".join(f'(:id "s{i}" :objective "wait {i}" :tools ("shell"))' for i in range(10))

    def respond(body):
        last = last_said(body)
        if "Your objective:\nwait" in last:
            return f'(:action :shell :cmd "sleep {marker}" :explanation "wait a while")'
        return f'(:action :plan :title "ten" :explanation "ten waits in the background" :steps ({steps}))'

    server.responder = respond
    services = services_in(folder, server)

    async def scenario():
        async def deliver(reply):
            pass

        hub = Hub(services, [{"name": "test", "deliver": deliver}], concurrency=10)
        try:
            await hub.receive("test", "m1", [K("type"), K("event"), K("source"),
                                             [K("gateway"), K("test"), K("chat"), "1"],
                                             K("payload"), [K("sensor"), K("user-input"), K("text"), "ten"]])
            deadline = time.monotonic() + 120
            while len(processes_with(marker)) < 10:
                if time.monotonic() > deadline:
                    raise TimeoutError("the ten commands did not start")
                await asyncio.sleep(0.01)
            started = time.monotonic()
            await hub.stop("test:1")
            while processes_with(marker):
                await asyncio.sleep(0.001)
            return time.monotonic() - started
        finally:
            await hub.close()

    try:
        return asyncio.run(scenario())
    finally:
        shutdown(services)


def workflow_rows(runs=5):
    """The figures, as bench rows (what, value, unit, target)."""
    os.environ.setdefault(KEY_ENV, "figures-key")
    server = ScriptedOpenAIServer()
    try:
        rows = thirty(server)
        took = [1000 * stop_run(server, f"29.{i}71") for i in range(runs)]
        return rows + [
            (f"/stop of a running 10-worker workflow until every worker's processes are gone, p50 ({runs} runs)",
             statistics.median(took), "ms", ""),
            (f"/stop of a running 10-worker workflow until every worker's processes are gone, max ({runs} runs)",
             max(took), "ms", "")]
    finally:
        server.stop()


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for what, value, unit, _ in workflow_rows(runs):
        print(f"{what}: {value:.1f} {unit}" if isinstance(value, float) else f"{what}: {value} {unit}")


if __name__ == "__main__":
    main()
