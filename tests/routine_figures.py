"""Figures of routines, with the scripted model on loopback.

    python tests/routine_figures.py [all|load|catch-up|dst|kill] [N]

1. load: N (1 000) routines scheduled a day ahead, then N routines due in the
   same second, each run a worker on the scripted model: the daemon's CPU while
   idle with the first N scheduled (this process, 10 s), and the lateness of
   each run past its due time, p50 and p99, as it started (claimed, its worker
   marked running) and as its result was told to the chat.
2. catch-up: 10 routines due every hour (five `once`, five `skip`), each set
   in a chat of its own; the daemon stopped across 3 due runs (an injected
   clock); after the restart: how many ran once or were skipped as their
   policy says, and how many chats were told which.
3. dst: a reminder at 02:30 daily in Europe/Berlin across spring-forward and
   fall-back, stepped every 10 minutes of an injected clock for four days
   around each: the runs on each day.
4. kill: N (100) routines due at once, each of whose runs appends a line to a
   file of its own: the daemon (this script as `child`) is killed with SIGKILL
   at 5 random moments while they run (once a random number of them more
   have finished) and started again on the same data dir; then how many
   files have two lines (ran twice) and how many routines have no finished
   run (lost), and how many runs were cut off in the middle of their action
   (not run again, as any action a kill interrupts; the chat is told).
"""
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import datetime
import zoneinfo
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import hy  # noqa: F401,E402
from hy.models import Keyword as K  # noqa: E402

KEY_ENV = "PASSEPARTOUT_FIGURES_KEY"
BERLIN = "Europe/Berlin"


def kw_plist(**fields):
    out = []
    for k, v in fields.items():
        out += [K(k.replace("_", "-")), v]
    return out


def services_in(folder, url, concurrency=8):
    from passepartout.providers import make_provider
    from passepartout.daemon import boot
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(
        f'[sandbox]\nmode = "off"\n[limits]\nmodel_concurrency = {concurrency}\n'
        f'[routines]\ntime_zone = "{BERLIN}"\n')
    return boot(config_path=str(folder / "config.toml"),
                environ={"PASSEPARTOUT_DATA_DIR": str(folder / "data"), "HOME": str(folder)},
                providers=[make_provider("openai/scripted", api_base=url, api_key_env=KEY_ENV,
                                         tool_results="native")])


def routine(id, session, when, due, tz=BERLIN, objective=None, say=None, catch_up="once", anchor=None):
    from passepartout.routines import parse_when
    spec, why = parse_when(when, tz, (anchor if anchor is not None else due) - 1)
    assert why is None, why
    return kw_plist(id=id, session=session, source=[K("gateway"), K("test"), K("chat"), session.split(":", 1)[1]],
                    spec=spec, objective=objective, say=say, quiet=False, catch_up=catch_up, tz=tz, next_due=due)


def iso(t, tz=BERLIN):
    return datetime.datetime.fromtimestamp(t, zoneinfo.ZoneInfo(tz)).isoformat()


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def says(text):
    return f'(:action :message :text "{text}")'


def last_said(body):
    return str(body["messages"][-1].get("content") or "")


async def wait_for(test, timeout):
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise TimeoutError(f"still not true after {timeout} s")
        await asyncio.sleep(0.05)


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


# * 1. Load: idle CPU with N scheduled, lateness of N due at once

def load(n=1000):
    from openai_server import ScriptedOpenAIServer
    from passepartout.daemon import shutdown
    from passepartout.gateways.hub import Hub
    from passepartout.proto import proto_get
    from passepartout.routines import routine_add, routine_runs

    server = ScriptedOpenAIServer()
    server.responder = lambda body: says("ok")
    folder = Path(tempfile.mkdtemp(prefix="passepartout-routines-"))
    services = services_in(folder, server.url("ok"))
    told = {}

    async def main():
        async def deliver(reply):
            from passepartout.proto import proto_get
            text = str(proto_get(proto_get(reply, K("payload")), K("text")) or "")
            if "ran:" in text:
                told[text.split()[2]] = time.time()

        hub = Hub(services, [{"name": "test", "deliver": deliver}], concurrency=8)
        await hub.resume()
        try:
            # one run first: the first model call imports LiteLLM, which is not what is measured
            await hub.routines.add(routine("rwarm", "test:1", iso(time.time() + 1), time.time() + 1,
                                           objective="tick warm", anchor=time.time()))
            await wait_for(lambda: "rwarm" in told, 300)
            # N routines a day ahead, written together, then the daemon left idle
            ahead = time.time() + 86400

            def add_ahead(store):
                for i in range(n):
                    routine_add(store, routine(f"ra{i:04d}", "test:1", "0 9 * * *", ahead,
                                               objective=f"tick a{i}"), time.time())
            await services.writer.call(add_ahead)
            hub.routines.wake.set()
            await asyncio.sleep(1.0)
            cpu0, wall0 = time.process_time(), time.monotonic()
            await asyncio.sleep(10.0)
            idle = 100 * (time.process_time() - cpu0) / (time.monotonic() - wall0)
            # N routines due in the same second
            due = time.time() + 30
            ids = [f"rb{i:04d}" for i in range(n)]

            def add_due(store):
                for id in ids:
                    routine_add(store, routine(id, "test:1", iso(due), due, objective=f"tick {id}",
                                               anchor=time.time()), time.time())
            await services.writer.call(add_due)
            hub.routines.wake.set()
            assert time.time() < due, "adding the routines took past their due time"
            await wait_for(lambda: all(id in told for id in ids), 1800)
            started, finished = [], []
            for id in ids:
                (run,) = routine_runs(services.store, id)
                w = services.store.query("SELECT started, finished FROM workers WHERE workflow = ?",
                                         (proto_get(run, K("workflow")),))[0]
                started.append(w[0] - due)
                finished.append(told[id] - due)
            return idle, started, finished
        finally:
            await hub.close()

    try:
        idle, started, finished = asyncio.run(main())
    finally:
        shutdown(services)
        server.stop()
    return [
        (f"daemon CPU while idle with {n} routines scheduled (10 s)", idle, "%", ""),
        (f"{n} routines due in the same second: lateness of each run's start, p50", 1000 * pct(started, 50), "ms", ""),
        (f"{n} routines due in the same second: lateness of each run's start, p99", 1000 * pct(started, 99), "ms", ""),
        (f"{n} routines due in the same second: lateness of each result told, p50", pct(finished, 50), "s", ""),
        (f"{n} routines due in the same second: lateness of each result told, p99", pct(finished, 99), "s", ""),
    ]


# * 2. Catch-up after a restart

def catch_up():
    from openai_server import ScriptedOpenAIServer
    from passepartout.daemon import shutdown
    from passepartout.gateways.hub import Hub
    from passepartout.proto import proto_get
    from passepartout.routines import routine_add, routine_runs

    server = ScriptedOpenAIServer()
    server.responder = lambda body: says("checked")
    folder = Path(tempfile.mkdtemp(prefix="passepartout-catchup-"))
    t0 = datetime.datetime(2030, 1, 1, 12, 0, tzinfo=zoneinfo.ZoneInfo(BERLIN)).timestamp()
    policies = {f"rc{i}": ("once" if i < 5 else "skip") for i in range(10)}
    services = services_in(folder, server.url("ok"))
    services.clock = Clock(t0)
    told = {}

    async def deliver(reply):
        text = str(proto_get(proto_get(reply, K("payload")), K("text")) or "")
        told.setdefault(proto_get(reply, K("session")), []).append(text)

    async def first():
        hub = Hub(services, [{"name": "test", "deliver": deliver}])
        await hub.resume()
        for i, (id, policy) in enumerate(policies.items()):
            await hub.routines.add(routine(id, f"test:{i}", "every 1h", t0 + 3600, objective=f"check {id}",
                                           catch_up=policy, anchor=t0))
        await hub.close()

    try:
        asyncio.run(first())
    finally:
        shutdown(services)
    # the daemon is down from 12:00 to 15:30: the runs due at 13, 14 and 15 are missed
    services = services_in(folder, server.url("ok"))
    services.clock = Clock(t0 + 3.5 * 3600)

    async def second():
        hub = Hub(services, [{"name": "test", "deliver": deliver}])
        await hub.resume()
        try:
            await wait_for(lambda: all(
                [proto_get(r, K("state")) for r in routine_runs(services.store, id)]
                == (["done"] if p == "once" else ["skipped"]) for id, p in policies.items()), 300)
            await wait_for(lambda: all(any("While I was not running" in t for t in told.get(f"test:{i}", []))
                                       for i in range(10)), 60)
        finally:
            await hub.close()

    try:
        asyncio.run(second())
        as_policy = sum(1 for id, p in policies.items()
                        if [proto_get(r, K("state")) for r in routine_runs(services.store, id)]
                        == (["done"] if p == "once" else ["skipped"]))
        missed3 = sum(1 for i in range(10) if any("missed 3 runs" in t for t in told.get(f"test:{i}", [])))
        told_which = sum(1 for i, p in enumerate(policies.values())
                         if any(("runs once now" if p == "once" else "skipped") in t for t in told.get(f"test:{i}", [])))
    finally:
        shutdown(services)
        server.stop()
    return [("restart across 3 due runs of 10 routines: ran once or skipped as their policy says", as_policy, "of 10", "10"),
            ("restart across 3 due runs of 10 routines: chats told which, with 3 runs missed",
             min(told_which, missed3), "of 10", "10")]


# * 3. DST

def dst():
    from passepartout.daemon import shutdown
    from passepartout.gateways.hub import Hub
    from passepartout.proto import proto_get
    from passepartout.routines import routine_runs, parse_when, next_due

    folder = Path(tempfile.mkdtemp(prefix="passepartout-dst-"))
    services = services_in(folder, "http://127.0.0.1:9/v1")
    zone = zoneinfo.ZoneInfo(BERLIN)
    starts = [datetime.datetime(2026, 3, 27, 12, 0, tzinfo=zone).timestamp(),
              datetime.datetime(2026, 10, 23, 12, 0, tzinfo=zone).timestamp()]
    clock = Clock(starts[0])
    services.clock = clock

    async def deliver(reply):
        return None

    async def main():
        hub = Hub(services, [{"name": "test", "deliver": deliver}])
        await hub.resume()
        try:
            spec, _ = parse_when("30 2 * * *", BERLIN, clock())
            await hub.routines.add(kw_plist(id="rdst", session="test:1", source=[K("gateway"), K("test"), K("chat"), "1"],
                                            spec=spec, say="water the plants", tz=BERLIN,
                                            next_due=next_due(spec, BERLIN, clock(), clock())))
            for start in starts:
                if start != clock():
                    await hub.routines.set_state("rdst", "paused")
                    clock.t = start
                    await hub.routines.set_state("rdst", "active")
                for i in range(4 * 24 * 6):
                    clock.t = start + 600 * (i + 1)
                    await hub.routines.run_due()
        finally:
            await hub.close()

    try:
        asyncio.run(main())
        days = {}
        for r in routine_runs(services.store, "rdst"):
            d = datetime.datetime.fromtimestamp(proto_get(r, K("due")), zone)
            days.setdefault(d.strftime("%m-%d"), []).append(d.strftime("%H:%M %Z"))
    finally:
        shutdown(services)
    once = sum(1 for v in days.values() if len(v) == 1)
    return [("a reminder at 02:30 daily in Europe/Berlin, 8 days across spring-forward and fall-back: days it ran once",
             once, f"of {len(days)} ({'; '.join(f'{k} {v[0]}' for k, v in sorted(days.items()))})", "8 of 8")]


# * 4. kill -9 during 100 routine runs

def child(folder, url, n):
    from passepartout.daemon import shutdown
    from passepartout.gateways.hub import Hub
    from passepartout.proto import proto_get, proto_print
    from passepartout.routines import routine_add

    folder = Path(folder)
    services = services_in(folder, url)
    said = folder / "said.txt"

    async def main():
        async def deliver(reply):
            with open(said, "a") as f:
                f.write(json.dumps(proto_print(reply)) + "\n")

        hub = Hub(services, [{"name": "test", "deliver": deliver}], concurrency=8)
        outbox = asyncio.ensure_future(hub.outbox_service())
        await hub.resume()
        if not services.store.query("SELECT COUNT(*) FROM routines")[0][0]:
            due = time.time() + 2

            def add(store):
                for i in range(n):
                    routine_add(store, routine(f"rk{i:03d}", "test:1", iso(due), due,
                                               objective=f"mark rk{i:03d}", anchor=time.time()), time.time())
            await services.writer.call(add)
            hub.routines.wake.set()

        def over():
            rows = services.store.query("SELECT COUNT(*) FROM routine_runs WHERE state IN ('done', 'failed')")
            return rows[0][0] >= n
        while not over():
            await asyncio.sleep(0.1)
        outbox.cancel()
        await hub.close()

    try:
        asyncio.run(main())
    finally:
        shutdown(services)


def kill(n=100, kills=5, seed=1):
    from openai_server import ScriptedOpenAIServer
    from passepartout.store import store_open, store_close

    rng = random.Random(seed)

    def respond(body):
        last = last_said(body)
        if "Your objective:\nmark " in last:
            id = last.split("Your objective:\nmark ")[1].split()[0]
            return f'(:action :shell :cmd "echo ran >> {id}.txt; sleep 0.2" :explanation "leave a mark for {id}")'
        return says("marked")

    server = ScriptedOpenAIServer()
    server.responder = respond
    folder = Path(tempfile.mkdtemp(prefix="passepartout-routine-kill-"))
    env = dict(os.environ, **{KEY_ENV: "figures-key"})
    cmd = [sys.executable, str(Path(__file__).resolve()), "child", str(folder), server.url("ok"), str(n)]
    at_kill = []

    def finished():
        path = folder / "data" / "passepartout.sqlite3"
        if not path.exists():
            return 0
        store = store_open(str(path))
        try:
            return store.query("SELECT COUNT(*) FROM routine_runs WHERE state IN ('done', 'failed')")[0][0]
        except Exception:
            return 0
        finally:
            store_close(store)

    try:
        # each kill comes while runs go on: once a random number of them more
        # have finished (spread over the hundred), after a random fraction of a second
        marks = sorted(rng.sample(range(5, n - 5), kills))
        for mark in marks:
            p = subprocess.Popen(cmd, env=env, cwd=str(HERE))
            deadline = time.monotonic() + 600
            while finished() < mark and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 0.5))
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
            at_kill.append(finished())
        subprocess.run(cmd, env=env, cwd=str(HERE), timeout=1200)
        store = store_open(str(folder / "data" / "passepartout.sqlite3"))
        try:
            ws = folder / "data" / "workspace"
            ids = [f"rk{i:03d}" for i in range(n)]
            lines = {id: len((ws / f"{id}.txt").read_text().splitlines()) if (ws / f"{id}.txt").exists() else 0
                     for id in ids}
            twice = [id for id in ids if lines[id] > 1]
            runs = dict(((r, s) for r, s in store.query("SELECT routine, state FROM routine_runs")))
            lost = [id for id in ids if runs.get(id) not in ("done", "failed")]
            cut = store.query("SELECT COUNT(*) FROM workers WHERE state = 'cut-off'")[0][0]
            unmarked = [id for id in ids if lines[id] == 0]
            print(f"runs finished at each kill: {at_kill}", file=sys.stderr)
            return [(f"kill -9 at {kills} random moments during {n} routine runs: runs twice", len(twice), "", "0"),
                    (f"kill -9 at {kills} random moments during {n} routine runs: runs lost", len(lost), "", "0"),
                    (f"kill -9 at {kills} random moments during {n} routine runs: cut off in their action "
                     f"(not run again, told), files left without a line {len(unmarked)}, runs finished at each kill {at_kill}",
                     cut, "", "")]
        finally:
            store_close(store)
    finally:
        server.stop()


def routine_rows(quick=False):
    os.environ.setdefault(KEY_ENV, "figures-key")
    return (load(100 if quick else 1000) + catch_up() + dst()
            + kill(20 if quick else 100, 2 if quick else 5))


def main(argv):
    if len(argv) > 1 and argv[1] == "child":
        return child(argv[2], argv[3], int(argv[4]))
    os.environ.setdefault(KEY_ENV, "figures-key")
    what = argv[1] if len(argv) > 1 else "all"
    n = int(argv[2]) if len(argv) > 2 else None
    parts = {"load": lambda: load(n or 1000), "catch-up": catch_up, "dst": dst,
             "kill": lambda: kill(n or 100)}
    for name, part in parts.items():
        if what in ("all", name):
            for label, value, unit, _ in part():
                print(f"{label}: {value:.2f} {unit}" if isinstance(value, float) else f"{label}: {value} {unit}",
                      flush=True)


if __name__ == "__main__":
    main(sys.argv)
