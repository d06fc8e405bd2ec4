"""The Signal gateway under faults: what a receive leaves at risk, and a daemon killed after one.

signal-cli-rest-api deletes what a receive returns, so from the moment its
answer is written until the gateway's commit, the received messages exist only
in the daemon's memory. Two measures of that:

    receive_window   the gateway and the hub in this process against the
                     loopback server (tests/signal_server.py): for each
                     receive, the time from the server writing its answer to
                     the hub having committed every message of it, in ms
    run_killed       the daemon as a process, killed (-9) once a receive's
                     batch is committed (or DELAY seconds after the receive
                     returned it), then started again: how many messages of
                     the batch were never answered

Run `python tests/signal_faults.py` for the figures.
"""
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import hy  # noqa: F401
from bot_api_server import (daemon_command, daemon_environ, echo_complete, echo_openai_server, echo_providers,
                            inbox_rows, write_daemon_config)
from signal_server import SignalServer

ACCOUNT = "+15550001111"
ALICE = "+15550002222"
PEOPLE = [f"+1555000{3000 + i}" for i in range(10)]


def _key(item):
    """The inbox key the gateway gives a message item (its author and timestamp)."""
    envelope = item["envelope"]
    return f"{envelope['sourceNumber']}:{envelope['dataMessage']['timestamp']}"


def _percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def receive_window(receives=300, batch=1, quiet=False, folder=None):
    """RECEIVES receives of BATCH messages each; a dict with the windows (ms, one
    per receive: the server's answer written → the last message of it committed),
    their p50 and p99, and the part of each before the hub was handed the batch
    (`read`: the HTTP answer read, its JSON decoded, every item triaged). The
    next batch is queued as soon as one is stored, while its messages are being
    answered; with QUIET, only once every one of them has been answered."""
    from passepartout.providers import make_provider
    from passepartout.daemon import boot, shutdown
    from passepartout.gateways.hub import Hub
    import passepartout.gateways.signal as sig

    stored = {}
    handed = {}

    class TimingHub(Hub):
        """The daemon's hub, noting when each message's commit came back."""

        async def receive(self, gateway, key, signal_):
            new = await super().receive(gateway, key, signal_)
            stored.setdefault(key, time.perf_counter())
            return new

        async def receive_batch(self, gateway, items):
            handed.setdefault(items[0][0], time.perf_counter())
            out = await super().receive_batch(gateway, items)
            now = time.perf_counter()
            for item in items:
                stored.setdefault(item[0], now)
            return out

    made = folder is None
    folder = Path(folder or tempfile.mkdtemp(prefix="passepartout-signal-window-"))
    (folder / "config.toml").write_text("")
    env = boot(config_path=str(folder / "config.toml"),
               environ={"PASSEPARTOUT_DATA_DIR": str(folder / "data"), "HOME": str(folder)},
               providers=[make_provider("symbolic")])
    env.complete = echo_complete
    server = SignalServer(account=ACCOUNT)
    server.max_wait = 1.0

    async def main():
        gw = sig.make_signal({"url": server.url, "number": ACCOUNT, "allowed_numbers": [ALICE],
                              "poll_interval": 0.001, "retry_delay": 0.01}, env)
        hub = TimingHub(env, [gw])
        task = asyncio.create_task(gw["run"](hub))
        try:
            for n in range(receives):
                items = [server.message(ALICE, f"receive {n} message {i}") for i in range(batch)]
                keys = [_key(i) for i in items]
                server.queue(*items)
                deadline = time.monotonic() + 30
                while not all(k in stored for k in keys):
                    assert time.monotonic() < deadline, f"receive {n} was not stored within 30 s"
                    await asyncio.sleep(0.001)
                while quiet and len(server.sent) < (n + 1) * batch:
                    assert time.monotonic() < deadline, f"receive {n} was not answered within 30 s"
                    await asyncio.sleep(0.001)
        finally:
            await gw["stop"]()
            await asyncio.wait_for(task, 10)
            await hub.drain(30)
            await hub.close()

    try:
        asyncio.run(main())
    finally:
        server.stop()
        shutdown(env)
        if made:
            shutil.rmtree(folder, ignore_errors=True)
    windows = [1000 * (max(stored[_key(i)] for i in items) - sent) for sent, items in server.returned]
    read = [1000 * (handed[_key(items[0])] - sent) for sent, items in server.returned
            if _key(items[0]) in handed]
    return {"windows": windows, "receives": len(windows), "batch": batch,
            "p50": _percentile(windows, 50), "p99": _percentile(windows, 99), "max": max(windows),
            "read_p50": _percentile(read, 50) if read else None,
            "read_p99": _percentile(read, 99) if read else None}


def write_config(folder, server, model):
    """A config in FOLDER for a daemon whose Signal gateway talks to SERVER and
    whose one model is the echo OpenAI server MODEL."""
    return write_daemon_config(folder, f'''
[gateways.signal]
url = "{server.url}"
number = "{ACCOUNT}"
allowed_numbers = {json.dumps([ALICE] + PEOPLE)}
poll_interval = 0.05
retry_delay = 0.05
{echo_providers(model)}
''')


def run_killed(messages=100, delay=None, timeout=120.0):
    """The daemon as a process: MESSAGES from ten people queued at once, the daemon killed (-9)
    as soon as the receive that returned them is committed (seen from outside, in
    the store), or, with DELAY, DELAY seconds after that receive returned, commit
    or not (the window receive_window measures decides what survives then); then
    started again until every message is answered or TIMEOUT passes; at the end
    SIGTERM, and what was answered is counted once the daemon has exited. A dict:
    lost (never answered), duplicated (answered twice), answered_before_kill,
    in_first_batch (how many the killed receive returned), exit, output."""
    server = SignalServer(account=ACCOUNT)
    model = echo_openai_server()
    folder = Path(tempfile.mkdtemp(prefix="passepartout-signal-kill-"))
    config = write_config(folder, server, model)
    environ = daemon_environ(folder)
    out = open(folder / "daemon.out", "w+")
    procs = []
    said = [(PEOPLE[i % len(PEOPLE)], f"message {i}") for i in range(messages)]
    want = ["echo: " + t for _, t in said]

    def answered():
        return [s["message"] for s in server.sent]

    def output():
        out.flush()
        return (folder / "daemon.out").read_text()[-3000:]

    try:
        procs.append(subprocess.Popen(daemon_command(config), env=environ, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True))
        assert server.wait_for(lambda: server.paths("receive"), 60), ("the daemon never polled", output())
        server.queue(*[server.message(who, t) for who, t in said])
        returned = server.wait_returned(1, 30)
        assert returned, ("the daemon never received the messages", output())
        if delay is None:
            assert server.wait_for(lambda: inbox_rows(folder) >= messages, 60), \
                ("the received batch was never committed", output())
        else:
            time.sleep(delay)
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].wait(30)
        before = len(answered())
        procs.append(subprocess.Popen(daemon_command(config), env=environ, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True))
        server.wait_for(lambda: all(w in answered() for w in want), timeout)
        # a duplicate is sent before the daemon exits: a SIGTERM drains what it holds
        procs[1].send_signal(signal.SIGTERM)
        code = procs[1].wait(60)
        got = answered()
        out.seek(0)
        return {"lost": sum(1 for w in want if w not in got),
                "duplicated": sum(got.count(w) - 1 for w in want if got.count(w) > 1),
                "answered_before_kill": before, "in_first_batch": len(returned[0][1]),
                "exit": code, "output": out.read(), "folder": str(folder)}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        out.close()
        model.stop()
        server.stop()


if __name__ == "__main__":
    for batch, receives in [(1, 300), (10, 300), (100, 100)]:
        for quiet in [True, False]:
            r = receive_window(receives, batch, quiet)
            read = (f"; of which reading and triage p50 {r['read_p50']:.1f} ms, p99 {r['read_p99']:.1f} ms"
                    if r["read_p50"] is not None else "")
            print(f"signal receive → commit window, {r['receives']} receives of {batch}, "
                  f"{'the daemon idle' if quiet else 'the last batch still being answered'}: "
                  f"p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms, max {r['max']:.1f} ms{read}")
    for delay in [None, 0.1, 0.02]:
        r = run_killed(100, delay)
        when = "once it was committed" if delay is None else f"{delay} s after"
        print(f"signal kill -9 {when} a receive of {r['in_first_batch']}: lost {r['lost']}, "
              f"answered twice {r['duplicated']}, answered before the kill {r['answered_before_kill']}, "
              f"exit after SIGTERM {r['exit']}")
