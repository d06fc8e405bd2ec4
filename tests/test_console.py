"""Tests of passepartout/console.hy: the REPL's socket, who may use it, and its
server beside a runner."""
import asyncio
import os
import socket
import stat
from pathlib import Path

import hy  # noqa: F401
import pytest
from hy.models import Keyword as kw

from conftest import ask, repl
from passepartout.console import ReplThread, peer_allowed, peer_credentials, serve_repl
from passepartout.proto import proto_get
from passepartout.repl import ReplError
from passepartout.runner import Runner
import passepartout_repl
from passepartout.records import events


def test_the_socket_is_private_and_removed_on_exit(env, runtime):
    s = ReplThread(env)
    path = Path(s.path)
    try:
        assert path == runtime / "run" / "repl.sock"
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    finally:
        s.stop()
    assert not path.exists()


def test_peer_check_admits_only_the_daemons_user():
    assert peer_allowed(1000, 1000)
    assert not peer_allowed(1001, 1000)
    assert not peer_allowed(0, 1000)
    assert peer_allowed(os.getuid())


def test_peer_credentials_come_from_the_kernel():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        assert peer_credentials(a) == (os.getpid(), os.getuid(), os.getgid())


def test_another_uid_is_refused_and_recorded(env, tmp_path):
    other = os.getuid() + 1
    marker = tmp_path / "marker"
    s = ReplThread(env, uid=other)
    try:
        got = ask(s, f'(.write-text (hy.I.pathlib.Path "{marker}") "x")')
        assert got["ok"] is False and got["error"].startswith("refused"), got
        assert not marker.exists()
        out = repl("--socket", s.path, "(+ 1 2)")
        assert out.returncode == 1 and "refused" in out.stderr, out
    finally:
        s.stop()
    recorded = [proto_get(e, kw("data")) for e in events(env.store, kind="repl")]
    assert recorded and all(f"peer uid {os.getuid()}" in proto_get(r, kw("refused")) for r in recorded), recorded
    assert all(proto_get(r, kw("forms")) is None for r in recorded)


def test_a_stale_socket_is_replaced_and_a_live_one_left_alone(env, runtime):
    path = runtime / "run" / "repl.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()
    s = ReplThread(env)
    try:
        assert ask(s, "(+ 1 2)")["value"] == "3"
        with pytest.raises(ReplError, match="already listening"):
            ReplThread(env)
        assert ask(s, "(+ 1 2)")["value"] == "3"
    finally:
        s.stop()


def test_a_folder_others_may_write_to_is_refused(env, runtime):
    d = runtime / "shared"
    d.mkdir()
    os.chmod(d, 0o777)
    with pytest.raises(ReplError, match="others may write"):
        ReplThread(env, path=str(d / "repl.sock"))


def test_a_file_in_the_sockets_place_is_not_replaced(env, runtime):
    d = runtime / "run"
    (d / "repl.sock").write_text("precious")
    with pytest.raises(ReplError, match="not a socket"):
        ReplThread(env)
    assert (d / "repl.sock").read_text() == "precious"


def test_bad_requests_are_answered_not_crashed_on(server):
    for raw, words in [(b"not json\n", "bad request"), (b'{"forms": 3}\n', "no forms"),
                       (b'{"forms": "1", "timeout": -1}\n', "timeout")]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.connect(server.path)
            c.sendall(raw)
            c.shutdown(socket.SHUT_WR)
            answer = c.makefile("rb").read().decode()
        assert words in answer, (raw, answer)
    assert ask(server, "(+ 1 2)")["value"] == "3"


async def _socket_of(runtime):
    """The REPL socket of RUNTIME, once the server has made it (or after 60 s)."""
    path = runtime / "run" / "repl.sock"
    for _ in range(3000):
        if path.exists():
            break
        await asyncio.sleep(0.02)
    return path


def test_serve_repl_runs_beside_a_runner_and_cleans_up(env, runtime):
    delivered = []

    async def main():
        runner = Runner(env, delivered.append)
        task = asyncio.create_task(serve_repl(env, runner))
        path = await _socket_of(runtime)
        answer = await asyncio.to_thread(passepartout_repl.evaluate, "(+ 1 2)", str(path), 10)
        submitted = await asyncio.to_thread(
            passepartout_repl.evaluate,
            '(submit [:type :event :source [:gateway :test :chat "r"] :payload [:sensor :user-input :text "/stop"]])',
            str(path), 10)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await runner.close()
        return answer, submitted, path.exists()

    answer, submitted, left = asyncio.run(main())
    assert answer["value"] == "3"
    assert submitted["value"] == '"test:r"', submitted
    assert delivered and "nothing was running" in proto_get(proto_get(delivered[0], kw("payload")), kw("text"))
    assert not left


def test_stop_at_the_repl_ends_a_sessions_task(env, runtime):
    delivered = []
    workspace = Path(env.config["workspace"])
    state = {}

    async def complete(request):
        state["started"].set()
        # a stop cancels the model call here; were it not, the action would run once let go
        await state["release"].wait()
        return [kw("status"), kw("ok"), kw("text"), '(:action :shell :cmd "touch late.txt" :explanation "late")']

    env.complete = complete

    async def main():
        state.update(started=asyncio.Event(), release=asyncio.Event())
        runner = Runner(env, delivered.append)
        task = asyncio.create_task(serve_repl(env, runner))
        path = await _socket_of(runtime)
        await runner.submit([kw("type"), kw("event"), kw("source"), [kw("gateway"), kw("test"), kw("chat"), "r"],
                             kw("payload"), [kw("sensor"), kw("user-input"), kw("text"), "make a file"]])
        await asyncio.wait_for(state["started"].wait(), 30)
        answer = await asyncio.to_thread(passepartout_repl.evaluate, '(stop "test:r")', str(path), 10)
        state["release"].set()
        await asyncio.wait_for(runner.idle("test:r"), 30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await runner.close()
        return answer

    answer = asyncio.run(main())
    assert "the model call was stopped" in answer["value"], answer
    texts = [proto_get(proto_get(r, kw("payload")), kw("text")) for r in delivered]
    assert texts == ["Stopped: the model call was stopped. Nothing more of that task will run."], texts
    assert not (workspace / "late.txt").exists(), "the stopped task's action ran"
