"""Tests of the terminal chat: through prompt_toolkit's pipe input, and once under tmux."""
import asyncio
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from hy.models import Keyword as hy_kw

from passepartout.gateways.terminal import chat_terminal, format_reply
from passepartout.loop import Runner

BIN = Path(sys.executable).parent


@pytest.fixture
def env(booted):
    return booted()


async def wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def run_chat(env, script, tmp_path):
    """Run the terminal chat on a pipe; SCRIPT(pipe, shown, runner) types into it. The shown lines."""
    shown = []

    async def main():
        runner = Runner(env, lambda r: shown.append(format_reply(r)))
        with create_pipe_input() as pipe:
            chat = asyncio.create_task(chat_terminal(runner, history_path=tmp_path / "history",
                                                     input=pipe, output=DummyOutput(),
                                                     show=shown.append))
            await script(pipe, shown, runner)
            await asyncio.wait_for(chat, 20)
        await runner.close()

    asyncio.run(main())
    return shown


def test_a_line_typed_is_answered_and_remembered(env, tmp_path):
    async def script(pipe, shown, runner):
        pipe.send_text("!echo typed into the pipe\r")
        await wait_for(lambda: any("typed into the pipe" in s and "$" in s for s in shown))
        pipe.send_text("\x04")

    shown = run_chat(env, script, tmp_path)
    assert any(s.startswith("  · ran ") for s in shown), shown
    assert "!echo typed into the pipe" in (tmp_path / "history").read_text()


def test_escape_enter_makes_one_multi_line_message(env, tmp_path):
    async def script(pipe, shown, runner):
        pipe.send_text("write notes.txt\x1b\rsecond line\r")
        await wait_for(lambda: any("notes.txt" in s for s in shown if not s.startswith("  · ")))
        pipe.send_text("\x04")

    run_chat(env, script, tmp_path)
    written = Path(env["config"]["workspace"]) / "notes.txt"
    assert written.read_text() == "second line"


def test_ctrl_c_stops_the_running_task_and_stays(env, tmp_path):
    release = threading.Event()
    calls = []

    def complete(request):
        calls.append(request)
        release.wait(10)
        return [hy_kw("status"), hy_kw("ok"), hy_kw("text"),
                f'(:action :shell :cmd "echo {len(calls)}" :explanation "count")']

    env["complete"] = complete

    async def script(pipe, shown, runner):
        pipe.send_text("count\r")
        await wait_for(lambda: calls)
        pipe.send_text("\x03")
        await wait_for(lambda: "! Stopped the current task." in shown)
        release.set()
        await runner.idle("terminal:local")
        pipe.send_text("\x04")

    shown = run_chat(env, script, tmp_path)
    assert len(calls) == 1, f"{len(calls)} model calls after Ctrl-C"


def test_end_to_end_under_tmux(tmp_path):
    assert shutil.which("tmux"), "tmux is needed (.ci/run installs it)"
    config = tmp_path / "config.toml"
    config.write_text("")
    name = f"pp-test-{os.getpid()}"
    command = (f"PASSEPARTOUT_DATA_DIR={tmp_path}/data PASSEPARTOUT_CONFIG={config} "
               f"{BIN}/passepartout chat; echo CHAT-EXITED-$?; sleep 30")
    subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "120", "-y", "30", command], check=True)
    try:
        def screen():
            return subprocess.run(["tmux", "capture-pane", "-t", name, "-p"],
                                  capture_output=True, text=True).stdout

        def wait_screen(text, seconds=60):
            deadline = time.monotonic() + seconds
            while text not in screen():
                assert time.monotonic() < deadline, f"{text!r} never appeared:\n{screen()}"
                time.sleep(0.2)

        wait_screen("Ctrl-D leaves")
        subprocess.run(["tmux", "send-keys", "-t", name, "!echo shown under tmux", "Enter"], check=True)
        wait_screen("\nshown under tmux")
        assert "· ran (:action :shell" in screen()
        subprocess.run(["tmux", "send-keys", "-t", name, "C-d"], check=True)
        wait_screen("CHAT-EXITED-0")
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)
