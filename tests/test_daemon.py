"""Tests of passepartout/gateways/hub.hy (the hub, the registry) and passepartout/daemon.hy (the pid
file, serve, and the daemon as a whole process: SIGTERM, kill -9, a second daemon)."""
import asyncio
import logging
import os
import re
import sqlite3
import signal
import subprocess
import sys
import time
from pathlib import Path

import hy  # noqa: F401
import pytest
from conftest import wait_until as wait_for
from hy.models import Keyword

from bot_api_server import (BotAPIServer, InProcessDaemon, daemon_command, echo_complete, inbox_rows, run_killed,
                            start_daemon,
                            daemon_environ, write_config)
from passepartout.config import ConfigError
from passepartout.daemon import DaemonRunning, claim_pid_file, daemon_settings, pid_files, release_pid_file
from passepartout.gateways.hub import Hub, configured_gateways
from passepartout.proto import proto_get
from passepartout.skills import make_skill, register_skill
from passepartout.writer import GroupWriter
from passepartout.mailbox import inbox_add, inbox_count, inbox_pending, outbox_add, outbox_sent
from passepartout.records import kv_get

K = Keyword


def said(text, chat=1, gateway="rec"):
    return [K("type"), K("event"), K("source"), [K("gateway"), K(gateway), K("chat"), chat, K("user"), 7],
            K("payload"), [K("sensor"), K("user-input"), K("text"), text]]


def text_of(signal):
    return proto_get(proto_get(signal, K("payload")), K("text"))


class Recorder:
    """A gateway that receives nothing by itself and records what it is given to deliver."""

    def __init__(self, name="rec"):
        self.name = name
        self.delivered = []
        self.hub = None
        self.stopped = False
        self.closed = False

    def gateway(self):
        async def run(hub):
            self.hub = hub
            while not self.stopped:
                await asyncio.sleep(0.01)

        async def deliver(reply):
            self.delivered.append(reply)

        async def stop():
            self.stopped = True

        async def close():
            self.closed = True

        return {"name": self.name, "run": run, "deliver": deliver, "stop": stop, "close": close}

    def texts(self):
        return [text_of(r) for r in self.delivered]

    def say(self, daemon, key, text):
        """Have the hub of DAEMON (an InProcessDaemon running this gateway)
        receive TEXT under KEY, once the gateway runs."""
        assert wait_for(lambda: self.hub), "the gateway never ran"
        asyncio.run_coroutine_threadsafe(self.hub.receive(self.name, key, said(text, gateway=self.name)),
                                         daemon.loop).result(10)


@pytest.fixture
def env(booted, tmp_path):
    e = booted('[daemon]\nheartbeat = 0.2\n[gateways.terminal]\nenabled = false\n'
               '[sandbox]\nmode = "off"\n',
               {"PASSEPARTOUT_RUNTIME_DIR": str(tmp_path / "run")})
    e.complete = echo_complete
    return e


# * The hub

def test_the_hub_persists_before_the_model_sees_it_and_drops_redeliveries(env):
    store = env.store
    pending_at_model_call = []

    def complete(request):
        pending_at_model_call.append([proto_get(r, K("key")) for r in inbox_pending(store)])
        return echo_complete(request)

    env.complete = complete
    rec = Recorder()

    async def main():
        hub = Hub(env, [rec.gateway()])
        first = await hub.receive("rec", "u1", said("hello"))
        again = await hub.receive("rec", "u1", said("hello"))
        await hub.runner.idle("rec:1")
        late = await hub.receive("rec", "u1", said("hello"))
        await hub.runner.idle("rec:1")
        await hub.close()
        return first, again, late

    first, again, late = asyncio.run(main())
    assert (first, again, late) == (True, False, False)
    assert pending_at_model_call == [["u1"]], pending_at_model_call
    assert rec.texts() == ["echo: hello"], rec.texts()
    assert inbox_count(store) == 0 and inbox_count(store, "done") == 1


def _grouped_writes(store, fail=None):
    """Eleven writes through a GroupWriter: the first is written alone, then
    the other ten are asked for in one turn of the event loop. Each write
    inserts a row and notes how many rows a second connection (another
    process, say) could see at that moment."""
    import sqlite3
    store.write("CREATE TABLE IF NOT EXISTS grouped (i INTEGER)")
    outside = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True, check_same_thread=False)
    seen = []

    def put(store_, i):
        if i == fail:
            raise ValueError(f"write {i} refused")
        store_.conn.execute("INSERT INTO grouped VALUES (?)", (i,))
        seen.append((i, outside.execute("SELECT count(*) FROM grouped").fetchone()[0]))
        return i * 10

    async def main():
        writer = GroupWriter(store)
        first = await asyncio.gather(writer.call(put, 0), return_exceptions=True)
        rest = await asyncio.gather(*[writer.call(put, i) for i in range(1, 11)], return_exceptions=True)
        writer.close()
        return first + rest

    try:
        return asyncio.run(main()), seen, outside.execute("SELECT count(*) FROM grouped").fetchone()[0]
    finally:
        outside.close()


def test_writes_asked_together_share_one_commit_in_the_order_asked(env):
    results, seen, rows = _grouped_writes(env.store)
    assert results == [i * 10 for i in range(11)], results
    assert [i for i, _ in seen] == list(range(11)), seen
    # the ten asked together went in one transaction:
    # until its commit, nobody outside saw any of them
    assert [n for _, n in seen[1:]] == [1] * 10, seen
    assert rows == 11, rows


def test_a_write_that_fails_in_a_group_fails_alone(env):
    results, seen, rows = _grouped_writes(env.store, fail=4)
    assert isinstance(results[4], ValueError), results
    assert [r for i, r in enumerate(results) if i != 4] == [i * 10 for i in range(11) if i != 4], results
    assert rows == 10, rows


def test_replies_go_to_the_gateway_of_their_chat(env, caplog):
    a, b = Recorder("a"), Recorder("b")

    async def main():
        hub = Hub(env, [a.gateway(), b.gateway()])
        await hub.receive("a", "1", said("to a", gateway="a"))
        await hub.receive("b", "1", said("to b", gateway="b"))
        await hub.receive("c", "1", said("to nobody", gateway="c"))
        for s in ("a:1", "b:1", "c:1"):
            await hub.runner.idle(s)
        await hub.close()

    asyncio.run(main())
    assert a.texts() == ["echo: to a"] and b.texts() == ["echo: to b"]
    assert any("no running gateway" in r.getMessage() for r in caplog.records)


def answered_by_a_hub(env, *said_under_keys):
    """A Recorder whose hub received each (key, text), drained and closed."""
    rec = Recorder()

    async def main():
        hub = Hub(env, [rec.gateway()])
        for key, text in said_under_keys:
            await hub.receive("rec", key, said(text))
        await hub.drain(10)
        await hub.close()

    asyncio.run(main())
    return rec


def test_a_task_that_ends_without_a_reply_is_done_once_its_session_is_quiet(env):
    register_skill(env.skills, make_skill("silent", priority=1000,
                                          handlers=[lambda s, ctx: [] if text_of(s) == "/silent" else None]))
    rec = answered_by_a_hub(env, ("s1", "/silent"))
    assert rec.delivered == []
    assert inbox_count(env.store) == 0, inbox_pending(env.store)


# * A task's row: pending until the task ends, holding its next step

def _probing(env, answers):
    """A "probe" actuator that may touch the world (it records the pending rows
    each time it runs), and a model answering ANSWERS in turn; the calls of each."""
    store = env.store
    probes, calls = [], []

    def probe(action, ctx):
        probes.append([(proto_get(r, K("id")), sensor_of(proto_get(r, K("signal")))) for r in inbox_pending(store)])
        return [K("status"), K("ok"), K("output"), "probed"]

    register_skill(env.skills, make_skill("probe", actuators={"probe": {"run": probe, "schema": [], "doc": "looks",
                                                                          "effect": True}}))
    answers = list(answers)

    async def complete(request):
        calls.append([(proto_get(r, K("id")), sensor_of(proto_get(r, K("signal")))) for r in inbox_pending(store)])
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if callable(answer):
            answer = await answer()
        return [K("status"), K("ok"), K("provider"), "script", K("text"), answer]

    env.complete = complete
    return probes, calls


def sensor_of(signal):
    return proto_get(proto_get(signal, K("payload")), K("sensor")).name


def test_a_row_stays_pending_until_its_task_ends_and_holds_its_next_step(env):
    probes, calls = _probing(env, ['(:action :probe :explanation "look")',
                                   '(:action :message :text "done")'])
    rec = answered_by_a_hub(env, ("u1", "look, then answer"))
    kinds = [proto_get(proto_get(r, K("payload")), K("kind")).name for r in rec.delivered]
    assert kinds == ["trace", "answer"], kinds
    (row, sensor), = probes[0]
    assert sensor == "user-input", probes
    assert calls == [[(row, "user-input")], [(row, "tool-result")]], \
        f"while the task goes on its row is pending and holds the next step: {calls}"
    assert inbox_count(env.store) == 0 and inbox_count(env.store, "done") == 1


def test_a_restart_takes_the_task_up_after_its_last_action(env):
    """The daemon stops while the model thinks after an action: the next start
    goes on from the action's result, and the action does not run again."""
    held = asyncio.Event()

    async def late():
        """The model answers only once the daemon has stopped: nothing comes of it."""
        await held.wait()
        return '(:action :probe :explanation "too late")'

    probes, calls = _probing(env, ['(:action :probe :explanation "look")', late])
    rec = Recorder()

    async def first():
        hub = Hub(env, [rec.gateway()])
        await hub.receive("rec", "u1", said("look, then answer"))
        for _ in range(500):
            if len(calls) == 2:
                break
            await asyncio.sleep(0.01)
        await hub.close()
        held.set()

    asyncio.run(first())
    assert len(probes) == 1 and len(calls) == 2, (probes, calls)
    assert inbox_count(env.store) == 1, "the unfinished task's row is still pending"
    probes2, calls2 = _probing(env, ['(:action :message :text "done after the restart")'])
    rec2 = Recorder()
    with InProcessDaemon(env, gateways=[rec2.gateway()]):
        assert wait_for(lambda: "done after the restart" in rec2.texts()), rec2.texts()
    assert probes2 == [], "the action that ran before the restart ran again"
    assert [c[0][1] for c in calls2] == ["tool-result"], calls2
    assert inbox_count(env.store) == 0


def test_an_action_cut_off_by_a_crash_is_not_run_again(env):
    """What kill -9 leaves while an action runs: its intent committed, no result.
    The next start does not run it again; the person is told which it was."""
    from passepartout.task import event_record, write_records
    probes, calls = _probing(env, ['(:action :probe :explanation "look")'])
    row = inbox_add(env.store, "rec", "u1", said("look"))
    with env.store.transaction():
        # as the step writes it, before the action starts
        write_records(env.store, [event_record("intent", "rec:1",
                                               [K("action"), [K("action"), K("probe"), K("explanation"), "look"],
                                                K("task"), f"inbox-{row}", K("step"), 0])])
    rec = Recorder()
    with InProcessDaemon(env, gateways=[rec.gateway()]):
        assert wait_for(lambda: len(rec.delivered) == 1), rec.texts()
    assert probes == [] and calls == [], (probes, calls)
    text = rec.texts()[0]
    assert "may have done part or all of its work" in text and "probe" in text and "(:" not in text, text
    assert inbox_count(env.store) == 0


# * The outbox

class Flaky(Recorder):
    """A Recorder whose deliver fails while `down` is set, and raises
    Undeliverable for an echo of a text that starts with "never"."""

    def __init__(self, name="rec"):
        super().__init__(name)
        self.down = True
        self.tries = 0

    def gateway(self):
        from passepartout.gateways.hub import Undeliverable
        g = super().gateway()
        record = g["deliver"]

        async def deliver(reply):
            self.tries += 1
            if str(text_of(reply)).startswith("echo: never"):
                raise Undeliverable("400: the service calls it malformed")
            if self.down:
                raise ConnectionError("the service is down")
            await record(reply)

        g["deliver"] = deliver
        return g


def test_replies_that_cannot_be_sent_are_kept_and_sent_in_order_when_the_service_is_back(env, caplog):
    flaky = Flaky()
    with InProcessDaemon(env, gateways=[flaky.gateway()]) as d:
        for i in range(3):
            flaky.say(d, f"u{i}", f"m{i}")
        assert wait_for(lambda: flaky.tries >= 2 and inbox_count(env.store) == 0, 20), \
            "the messages were not answered into the outbox"
        assert flaky.delivered == []
        flaky.down = False
        assert wait_for(lambda: len(flaky.delivered) == 3, 20), flaky.texts()
    assert flaky.texts() == ["echo: m0", "echo: m1", "echo: m2"], "the replies came out of order"
    assert any("it is kept and tried again" in r.getMessage() for r in caplog.records)
    rows = sqlite3.connect(env.store.path).execute("SELECT state, count(*) FROM outbox GROUP BY state").fetchall()
    assert rows == [("sent", 3)], rows


def test_a_reply_that_went_out_is_a_delivered_turn_of_its_task(env):
    from passepartout.journal import journal_verify
    rec = Recorder()
    with InProcessDaemon(env, gateways=[rec.gateway()]) as d:
        rec.say(d, "u1", "hello")
        assert wait_for(lambda: rec.delivered and env.store.query(
            "SELECT 1 FROM events WHERE kind = 'delivered'")), "no delivered turn"
    store = env.store
    (task,), = store.query("SELECT task FROM events WHERE kind = 'input'")
    rows = store.query("SELECT turn, task, session FROM events WHERE kind = 'delivered'")
    assert rows == [("speech", task, "rec:1")], (rows, task)
    assert proto_get(journal_verify(store), K("ok")), journal_verify(store)


def test_a_reply_kept_when_the_daemon_stopped_is_sent_at_the_next_start(env):
    flaky = Flaky()
    with InProcessDaemon(env, gateways=[flaky.gateway()]) as d:
        flaky.say(d, "u1", "kept")
        assert wait_for(lambda: flaky.tries >= 1 and inbox_count(env.store) == 0, 20)
    assert flaky.delivered == [] and inbox_count(env.store) == 0, "the message was answered, into the outbox"
    back = Recorder()
    with InProcessDaemon(env, gateways=[back.gateway()]):
        assert wait_for(lambda: back.delivered, 20), "the kept reply was not sent at the next start"
    assert back.texts() == ["echo: kept"]


def test_a_reply_given_up_is_told_on_the_persons_next_message(env):
    flaky = Flaky()
    with InProcessDaemon(env, gateways=[flaky.gateway()]) as d:
        flaky.say(d, "u1", "never mind")
        # given up: the hub tells the person on their next message, once it has marked it so
        assert wait_for(lambda: "rec:1" in flaky.hub.untold and inbox_count(env.store) == 0, 20)
        flaky.down = False
        flaky.say(d, "u2", "hello again")
        assert wait_for(lambda: len(flaky.delivered) == 2, 20), flaky.texts()
    told, answer = flaky.texts()
    assert "1 reply to you could not be delivered" in told and "echo: never mind" in told, told
    assert answer == "echo: hello again"


def test_a_step_the_store_would_not_take_is_taken_again_once_it_does(env, caplog):
    """Another process holds the store's write lock past its busy timeout while
    a step wants to record its answer: the step is tried again, not failed,
    and the person gets the one answer once the lock is let go."""
    holder = sqlite3.connect(env.store.path, timeout=0, isolation_level=None, check_same_thread=False)
    locked, calls = [], []

    def complete(request):
        calls.append(time.monotonic())
        if not locked:
            holder.execute("BEGIN EXCLUSIVE")
            locked.append(time.monotonic())
        return echo_complete(request)

    env.complete = complete
    rec = Recorder()
    try:
        with InProcessDaemon(env, gateways=[rec.gateway()]) as d:
            rec.say(d, "u1", "held up")
            # tried again twice while the lock is held: a retry that fails is retried too
            assert wait_for(lambda: sum("tried again in" in r.getMessage() for r in caplog.records) >= 2, 60), \
                "the step was not tried again while the store was locked"
            holder.execute("ROLLBACK")
            assert wait_for(lambda: rec.delivered, 30), "the answer never came once the lock was let go"
            assert wait_for(lambda: inbox_count(env.store) == 0, 30), "the task never ended"
    finally:
        holder.close()
    assert rec.texts() == ["echo: held up"], rec.texts()
    assert len(calls) >= 2, f"the step was not taken again ({len(calls)} model calls)"
    assert not any("step failed" in r.getMessage() for r in caplog.records), "the step was failed, not retried"
    assert inbox_count(env.store) == 0


def test_a_reply_that_went_out_is_marked_sent_once_the_store_takes_writes_again(env, caplog):
    """The store will not take the commit that marks a reply sent: the reply
    is not sent again, and is marked (and journaled) once the store is back."""
    holder = sqlite3.connect(env.store.path, timeout=5, isolation_level=None, check_same_thread=False)
    rec = Recorder()
    gateway = rec.gateway()
    plain = gateway["deliver"]

    async def deliver(reply):
        await plain(reply)
        if len(rec.delivered) == 1:
            holder.execute("BEGIN EXCLUSIVE")

    gateway["deliver"] = deliver
    store = env.store
    try:
        with InProcessDaemon(env, gateways=[gateway]) as d:
            rec.say(d, "u1", "hello")
            assert wait_for(lambda: any("could not be marked sent" in r.getMessage() for r in caplog.records), 20), \
                "the mark was never refused"
            holder.execute("ROLLBACK")
            assert wait_for(lambda: store.query("SELECT state FROM outbox") == [("sent",)], 20), \
                store.query("SELECT state FROM outbox")
    finally:
        holder.close()
    assert rec.texts() == ["echo: hello"], rec.texts()
    assert len(store.query("SELECT 1 FROM events WHERE kind = 'delivered'")) == 1, "no delivered turn"


def test_what_was_pending_is_answered_at_start_in_order(env, caplog):
    caplog.set_level(logging.INFO)
    for i in range(4):
        inbox_add(env.store, "rec", f"k{i}", said(f"left over {i}"))
    rec = Recorder()
    with InProcessDaemon(env, gateways=[rec.gateway()]):
        assert wait_for(lambda: len(rec.delivered) == 4)
    assert rec.texts() == [f"echo: left over {i}" for i in range(4)]
    assert inbox_count(env.store) == 0
    assert rec.stopped and rec.closed
    assert any("4 unfinished signals queued again" in r.getMessage() for r in caplog.records)


def test_services_run_alongside_and_are_cancelled_at_stop(env):
    rec = Recorder()
    seen = []

    async def service(e, runner):
        seen.append(e is env)
        await runner.deliver([K("type"), K("reply"), K("session"), "rec:9",
                              K("source"), [K("gateway"), K("rec"), K("chat"), 9],
                              K("payload"), [K("kind"), K("notice"), K("text"), "from a service"]])
        seen.append("delivered")
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    with InProcessDaemon(env, gateways=[rec.gateway()], services=[service]) as d:
        assert wait_for(lambda: "delivered" in seen), seen
    assert d.code == 0
    assert seen == [True, "delivered", "cancelled"], seen
    assert rec.texts() == ["from a service"]


def test_a_log_file_on_a_full_disk_is_said_in_one_line_not_a_traceback_per_record(capsys):
    from passepartout.daemon import LogFile
    handler = LogFile("/dev/full", encoding="utf-8")
    log = logging.getLogger("passepartout.test-full-log")
    log.addHandler(handler)
    log.propagate = False
    try:
        for i in range(5):
            log.warning("line %d", i)
    finally:
        log.removeHandler(handler)
        handler.close()
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and "/dev/full cannot be written" in lines[0] and "No space left" in lines[0], err
    assert "Traceback" not in err, err


def test_the_heartbeat_is_in_the_store_and_the_log(env, caplog):
    caplog.set_level(logging.INFO)
    before = time.time()
    with InProcessDaemon(env, gateways=[]):
        assert wait_for(lambda: kv_get(env.store, "daemon:heartbeat") is not None)
    beat = kv_get(env.store, "daemon:heartbeat")
    assert proto_get(beat, K("pid")) == os.getpid()
    assert proto_get(beat, K("time")) >= before
    assert any(r.getMessage().startswith("alive:") for r in caplog.records)


def test_the_heartbeat_forgets_the_inbox_and_outbox_rows_done_long_ago(env):
    store, keep = env.store, 172800
    long_ago, lately = time.time() - keep - 60, time.time() - 60
    for n, ts in enumerate([long_ago, lately]):
        inbox_add(store, "test", f"k{n}", said(f"m{n}"), done=True, ts=ts)
        outbox_add(store, "test", "test:1", said(f"r{n}"), ts=ts)
        outbox_sent(store, n + 1, ts=ts)
    outbox_add(store, "test", "test:1", said("never sent"), ts=long_ago)

    def rows(table):
        return store.query(f"SELECT state, created FROM {table} ORDER BY id")

    assert len(rows("inbox")) == 2 and len(rows("outbox")) == 3
    with InProcessDaemon(env, gateways=[]):
        assert wait_for(lambda: len(rows("outbox")) == 2), rows("outbox")
    assert rows("inbox") == [("done", lately)], rows("inbox")
    # a reply neither sent nor told of is kept, however old: given up, it waits for its person
    assert rows("outbox") == [("sent", lately), ("expired", long_ago)], rows("outbox")


# * Settings and the registry

def test_daemon_settings_have_defaults_and_refuse_nonsense():
    s = daemon_settings({"limits": {"model_concurrency": 2}})
    assert s["heartbeat"] == 60 and s["model_concurrency"] == 2
    for bad in [{"daemon": {"heartbeat": 0}}, {"daemon": {"shutdown_grace": "10"}},
                {"daemon": "fast"}, {"limits": {"model_concurrency": 1.5}}]:
        with pytest.raises(ConfigError):
            daemon_settings(bad)


def test_configured_gateways_follow_the_config_and_the_registry(env, caplog):
    caplog.set_level(logging.INFO)
    built = []
    env.gateways["probe"] = {"factory": lambda section, e: built.append(section) or Recorder("probe").gateway()}
    env.gateways["screen"] = {"factory": lambda section, e: built.append("screen"), "headless": False}
    env.config["gateways"] = {"probe": {"colour": "blue"}, "screen": {}, "nowhere": {},
                                 "off": {"enabled": False}}
    gateways = configured_gateways(env)
    assert [g["name"] for g in gateways] == ["probe"]
    assert built == [{"colour": "blue"}]
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "gateways.nowhere: no such gateway" in messages and "screen needs a terminal" in messages
    env.config["gateways"] = {"probe": "yes"}
    with pytest.raises(ConfigError):
        configured_gateways(env)


# * One daemon per data dir

def test_the_pid_file_refuses_a_second_holder_and_stale_ones_are_taken_over(tmp_path, caplog):
    path = tmp_path / "run" / "daemon.pid"
    fd = claim_pid_file(path, "/data")
    assert path.read_text().split()[0] == str(os.getpid())
    with pytest.raises(DaemonRunning, match=f"pid {os.getpid()}"):
        claim_pid_file(path, "/data")
    release_pid_file(path, fd)
    assert not path.exists()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path.write_text(f"{dead.pid}\n/data\n")
    fd = claim_pid_file(path, "/data")
    release_pid_file(path, fd)
    assert any(f"of pid {dead.pid}, which is no longer running" in r.getMessage() for r in caplog.records)


def test_pid_files_live_in_the_runtime_dir_and_the_data_dir():
    paths = pid_files({"runtime_dir": "/r", "data_dir": "/d"})
    assert [str(p) for p in paths] == ["/r/daemon.pid", "/d/daemon.pid"]


# * The daemon as a process

SYMBOLIC = '\n[[providers]]\nmodel = "symbolic"\n'


@pytest.fixture
def bot():
    server = BotAPIServer()
    yield server
    server.stop()


def test_sigterm_finishes_the_work_in_flight_and_exits_0(tmp_path, bot):
    chats = [7001, 7002, 7003]
    config = write_config(tmp_path, bot, chats, providers=SYMBOLIC)
    for c in chats:
        bot.message(c, c, f"!sleep 1 && echo done-{c}")
    with open(tmp_path / "out", "w+") as out:
        p = start_daemon(config, daemon_environ(tmp_path), out)
        try:
            assert wait_for(lambda: inbox_rows(tmp_path) == 3, 30), "the messages never reached the inbox"
            # started is said once the gateway polls and the REPL socket listens
            assert wait_for(lambda: "started" in (tmp_path / "out").read_text(), 60), "never said started"
            p.send_signal(signal.SIGTERM)
            assert p.wait(30) == 0
        finally:
            if p.poll() is None:
                p.kill()
    for c in chats:
        assert bot.texts(c) == [f"$ sleep 1 && echo done-{c}\ndone-{c}\n"], bot.texts(c)
    log = (tmp_path / "data" / "logs" / "daemon.log").read_text()
    assert "SIGTERM received" in log and "every signal received was answered" in log, log
    assert not (tmp_path / "run" / "daemon.pid").exists()
    said = (tmp_path / "out").read_text()
    assert f"passepartout daemon: started (pid {p.pid})" in said, said
    assert "gateways: telegram (polling)" in said and "repl.sock" in said, said
    assert (tmp_path / "run" / "repl.sock").name in said and "not listening" not in said, said
    assert f"log: {tmp_path / 'data' / 'logs' / 'daemon.log'}" in said, said
    assert said.rstrip().endswith("passepartout daemon: stopped"), said


def test_sigterm_past_the_grace_keeps_the_unfinished_for_the_next_start(tmp_path, bot):
    config = write_config(tmp_path, bot, [7001], providers=SYMBOLIC,
                          extra="").read_text().replace("shutdown_grace = 10", "shutdown_grace = 0.2")
    (tmp_path / "config.toml").write_text(config)
    bot.message(7001, 7001, "!sleep 1.5 && echo late")
    environ = daemon_environ(tmp_path)
    with open(tmp_path / "out", "w+") as out:
        p = start_daemon(tmp_path / "config.toml", environ, out)
        try:
            assert wait_for(lambda: inbox_rows(tmp_path) == 1, 30)
            p.send_signal(signal.SIGTERM)
            assert p.wait(30) == 0
            assert bot.texts(7001) == []
            p = start_daemon(tmp_path / "config.toml", environ, out)
            assert bot.wait_for(lambda: bot.texts(7001), 30)
            p.send_signal(signal.SIGTERM)
            assert p.wait(30) == 0
        finally:
            if p.poll() is None:
                p.kill()
    # the command was cut off while it ran: it may have done its work, so it is not run again
    (told,) = bot.texts(7001)
    assert "was started but its result was never recorded" in told and "sleep 1.5" in told, told
    log = (tmp_path / "data" / "logs" / "daemon.log").read_text()
    assert "1 signals unfinished" in log and "1 unfinished signals queued again" in log, log


def test_every_log_line_and_traceback_is_redacted_as_the_gates_redact(tmp_path, capsys):
    from passepartout.daemon import setup_logging
    token = "999:wrong-but-held-by-the-daemon"
    handlers = setup_logging({"data_dir": str(tmp_path)}, settings={"log_max_bytes": 100000, "log_backups": 1},
                             secrets=[token])
    log = logging.getLogger("passepartout.test-redacted")
    try:
        log.error("telegram: the Bot API refused the token (The token `%s` was rejected by the server.)", token)
        log.warning("fetching https://user:hunter2hunter2@example.com/x failed")
        try:
            raise RuntimeError(f"bad token {token}")
        except RuntimeError:
            log.exception("a gateway failed")
    finally:
        for h in handlers:
            logging.getLogger().removeHandler(h)
            h.close()
    written = (tmp_path / "logs" / "daemon.log").read_text()
    err = capsys.readouterr().err
    for text in (written, err):
        assert token not in text and "hunter2hunter2" not in text, text
        assert "[redacted:" in text and "rejected by the server" in text and "RuntimeError" in text, text


def test_a_second_daemon_on_the_same_data_dir_is_refused(tmp_path, bot):
    config = write_config(tmp_path, bot, [7001], providers=SYMBOLIC)
    environ = daemon_environ(tmp_path)
    with open(tmp_path / "out", "w+") as out:
        first = start_daemon(config, environ, out)
        try:
            assert wait_for(lambda: (tmp_path / "run" / "daemon.pid").exists(), 30)
            assert wait_for(lambda: "started" in (tmp_path / "out").read_text(), 60), "never said started"
            log = tmp_path / "data" / "logs" / "daemon.log"
            before = log.read_text()
            second = subprocess.run(
                [sys.executable, "-c", "import sys, argparse, hy\n"
                 "from passepartout.daemon import cmd_daemon\n"
                 "sys.exit(cmd_daemon(argparse.Namespace(config=sys.argv[1], workspace=None)))",
                 str(config)], env=environ, capture_output=True, text=True, timeout=60)
            assert second.returncode == 1, second.stderr
            assert f"another daemon (pid {first.pid}) is running" in second.stderr, second.stderr
            assert "not started" in second.stderr and "started (pid" not in second.stdout, second.stdout
            # the first one's heartbeat goes on; the second one boots nothing and logs nothing
            added = log.read_text()[len(before):]
            assert all(f"pid {first.pid}" in line for line in added.splitlines()), added
            assert first.poll() is None, "the first daemon went down"
            first.send_signal(signal.SIGTERM)
            assert first.wait(30) == 0
        finally:
            if first.poll() is None:
                first.kill()
    assert len(bot.requests("getMe")) >= 1


def test_killed_mid_run_and_restarted_nothing_is_lost_or_answered_twice():
    r = run_killed(chats=5, per_chat=4, kill_at=0.4, hold=True, timeout=90)
    assert r["lost"] == 0 and r["duplicated"] == 0 and r["unexpected"] == 0, {k: v for k, v in r.items()
                                                                               if k not in ("log", "output")}
    assert r["order_kept"]
    assert r["exit"] == 0, r["output"][-2000:]
    assert r["killed_at"] == 8
    assert "took over the pid file" in r["log"]
    assert "unfinished signals queued again" in r["log"]


@pytest.mark.xdist_group("killed-while-acting")
def test_killed_while_tasks_act_nothing_is_lost_and_no_action_runs_twice(killed_while_acting):
    """Each message first has a shell action note it in the workspace's ledger,
    then is answered; the kill lands wherever it lands. Every message is
    answered, or its person told that its action was cut off; no line is noted
    twice; nothing is answered that was not noted."""
    r = killed_while_acting
    shown = {k: v for k, v in r.items() if k not in ("log", "output")}
    assert r["lost"] == 0 and r["run_twice"] == 0 and r["unnoted"] == 0, shown
    assert r["unexpected"] == 0 and r["order_kept"], f"not expected: {r.get('strays')}; {shown}"
    assert r["exit"] == 0, r["output"][-2000:]
    assert "unfinished signals queued again" in r["log"]


# * Approvals answered on the host

def _host_approvals(config, environ, *args):
    """`passepartout --config CONFIG approvals ARGS…` as a person on the host runs it."""
    command = daemon_command(config)[:-1] + ["approvals", *args]
    return subprocess.run(command, env=environ, capture_output=True, text=True, timeout=120)


def _code_asked_in(bot, chat, timeout=30):
    found = []

    def look():
        for text in bot.texts(chat):
            m = re.search(r"code ([A-Z]{6})", text)
            if m:
                found.append(m.group(1))
                return True
        return False

    assert bot.wait_for(look, timeout), f"no approval was asked for in {chat}: {bot.texts(chat)}"
    return found[0]


def _said_in(bot, chat, part, timeout=30):
    return bot.wait_for(lambda: any(part in t for t in bot.texts(chat)), timeout)


def _store_rows(folder, sql, params=()):
    with sqlite3.connect(Path(folder) / "data" / "passepartout.sqlite3", timeout=5) as db:
        return db.execute(sql, params).fetchall()


def _stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _two_chats_that_will_be_asked(tmp_path, bot):
    """A daemon's config and environment, and a message in each of two chats
    whose action (writing a secret file) a person must approve."""
    config = write_config(tmp_path, bot, [7001, 7002], providers=SYMBOLIC)
    bot.message(7001, 7001, "write .env\nKEY=1")
    bot.message(7002, 7002, "write .env.x\nX=1")
    return config, daemon_environ(tmp_path)


def test_an_answer_on_the_host_is_carried_out_by_the_running_daemon_in_the_conversation(tmp_path, bot):
    config, environ = _two_chats_that_will_be_asked(tmp_path, bot)
    with open(tmp_path / "out", "w+") as out:
        p = start_daemon(config, environ, out)
        try:
            yes, no = _code_asked_in(bot, 7001), _code_asked_in(bot, 7002)
            approved = _host_approvals(config, environ, "approve", yes)
            assert approved.returncode == 0, approved.stdout + approved.stderr
            assert f"Approved {yes}. Handed to the running daemon (pid {p.pid})" in approved.stdout, approved.stdout
            denied = _host_approvals(config, environ, "deny", no, "--reason", "not now")
            assert denied.returncode == 0, denied.stdout + denied.stderr
            assert f"Denied {no}. The running daemon (pid {p.pid}) tells telegram:7002" in denied.stdout, denied.stdout
            assert _said_in(bot, 7001, f"Approval {yes} was approved by terminal:local; running it now."), \
                bot.texts(7001)
            assert _said_in(bot, 7002, f"Approval {no} was denied by terminal:local (not now)"), bot.texts(7002)
            # the task went on after the result: the conversation has a reply after the notice
            assert bot.wait_for(lambda: len([t for t in bot.texts(7001)
                                             if "approved by terminal:local" in t or "Approval needed" in t])
                                < len(bot.texts(7001)), 30), bot.texts(7001)
        finally:
            _stop(p)
    assert (tmp_path / "workspace" / ".env").read_text() == "KEY=1"
    assert not (tmp_path / "workspace" / ".env.x").exists(), "the denied action ran"
    states = dict(_store_rows(tmp_path, "SELECT code, state FROM approvals"))
    assert states == {yes: "executed", no: "denied"}, states


def test_answers_and_expiries_made_while_no_daemon_runs_are_delivered_at_the_next_start(tmp_path, bot):
    config, environ = _two_chats_that_will_be_asked(tmp_path, bot)
    with open(tmp_path / "out", "w+") as out:
        p = start_daemon(config, environ, out)
        try:
            yes, late = _code_asked_in(bot, 7001), _code_asked_in(bot, 7002)
        finally:
            _stop(p)
        approved = _host_approvals(config, environ, "approve", yes)
        assert approved.returncode == 0, approved.stdout + approved.stderr
        assert (f"Approved {yes}. No daemon is running; it will be carried out when the daemon starts"
                in approved.stdout), approved.stdout
        assert not (tmp_path / "workspace" / ".env").exists(), "the host command ran the action"
        # LATE falls due while no daemon runs, and the host's listing expires it
        with sqlite3.connect(tmp_path / "data" / "passepartout.sqlite3", timeout=5) as db:
            db.execute("UPDATE approvals SET expires = ? WHERE code = ?", (time.time() - 1, late))
        listed = _host_approvals(config, environ, "list")
        assert listed.returncode == 0 and "No approvals are pending." in listed.stdout, listed.stdout
        assert _store_rows(tmp_path, "SELECT state FROM approvals WHERE code = ?", (late,)) == [("expired",)]
        assert len(_store_rows(tmp_path, "SELECT id FROM notices WHERE delivered IS NULL")) == 1
        p = start_daemon(config, environ, out)
        try:
            assert _said_in(bot, 7001, f"Approval {yes} was approved by terminal:local; running it now."), \
                bot.texts(7001)
            assert _said_in(bot, 7002, f"Approval {late} expired at"), bot.texts(7002)
        finally:
            _stop(p)
        # a third start, once its approvals service has taken the store: it
        # carries out nothing again and tells nothing again
        p = start_daemon(config, environ, out)
        try:
            assert wait_for(lambda: any(f":{p.pid}:" in v for [v] in
                                        _store_rows(tmp_path, "SELECT value FROM kv WHERE key = 'approvals:service'")),
                            60), "the third daemon's approvals service never started"
        finally:
            _stop(p)
        assert p.returncode == 0, ("exit status after SIGTERM", p.returncode)
    assert (tmp_path / "workspace" / ".env").read_text() == "KEY=1"
    executed = [d for [d] in _store_rows(tmp_path, "SELECT data FROM events WHERE kind = 'approval'")
                if ':event "executed"' in d]
    assert len(executed) == 1, executed
    assert sum(f"Approval {late} expired at" in t for t in bot.texts(7002)) == 1, bot.texts(7002)
    assert sum("approved by terminal:local" in t for t in bot.texts(7001)) == 1, bot.texts(7001)


def test_a_reply_on_its_way_when_the_hub_closes_is_marked_sent(env):
    """The daemon closes while a gateway is sending a reply (its step cancelled
    with the rest): the reply still goes out and is marked sent, so the next
    start does not send it a second time."""
    got, sent_one = [], []

    async def deliver(reply):
        got.append(text_of(reply))
        await asyncio.sleep(0.3)
        sent_one.append(True)
        return True

    async def main():
        hub = Hub(env, [{"name": "rec", "deliver": deliver}])
        reply = [K("type"), K("reply"), K("session"), "rec:1",
                 K("source"), [K("gateway"), K("rec"), K("chat"), 1],
                 K("payload"), [K("kind"), K("answer"), K("text"), "on its way"]]
        sending = asyncio.create_task(hub.deliver(reply))
        while not got:
            await asyncio.sleep(0.01)
        sending.cancel()
        await hub.close()

    asyncio.run(main())
    assert got == ["on its way"] and sent_one == [True], (got, sent_one)
    rows = env.store.query("SELECT state FROM outbox")
    assert rows == [("sent",)], rows


def test_stop_after_a_refused_token_leaves_no_session_open_and_says_stopped(tmp_path, bot):
    """A gateway whose start failed (the Bot API refused its token) still closes
    its HTTP sessions when the daemon stops, and a clean SIGINT (Ctrl-C) says it stopped."""
    config = write_config(tmp_path, bot, [7001], providers=SYMBOLIC)
    environ = daemon_environ(tmp_path) | {"PASSEPARTOUT_TEST_BOT_TOKEN": "999:refused-by-the-server"}
    with open(tmp_path / "out", "w+") as out:
        p = start_daemon(config, environ, out)
        try:
            assert wait_for(lambda: "started" in (tmp_path / "out").read_text(), 60), "never said started"
            log = tmp_path / "data" / "logs" / "daemon.log"
            assert wait_for(lambda: "refused the token" in log.read_text(), 60), "the refusal never logged"
            p.send_signal(signal.SIGINT)
            assert p.wait(30) == 0
        finally:
            if p.poll() is None:
                p.kill()
    said = (tmp_path / "out").read_text()
    assert "Unclosed" not in said, said
    assert said.rstrip().endswith("passepartout daemon: stopped"), said
    assert "refused-by-the-server" not in said, said
