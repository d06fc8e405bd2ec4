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


# The chat is tested here, not the sandbox: its shell commands run the same
# on a machine without bubblewrap, where they would all wait for a person.
NO_SANDBOX = '[sandbox]\nmode = "off"\n'


@pytest.fixture
def env(booted):
    return booted(NO_SANDBOX)


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
        await wait_for(lambda: "! Stopped: the model call was abandoned. Nothing more of that task will run."
                       in shown)
        release.set()
        await runner.idle("terminal:local")
        await asyncio.sleep(0.3)
        pipe.send_text("\x04")

    shown = run_chat(env, script, tmp_path)
    assert len(calls) == 1, f"{len(calls)} model calls after Ctrl-C"
    assert not any(s.startswith("  · ran ") for s in shown), shown


def test_ctrl_c_kills_the_running_command(env, tmp_path):
    workspace = Path(env["config"]["workspace"])
    gone = []

    def running():
        return [d for d in os.listdir("/proc") if d.isdigit() and _cmdline_has(d, b"touch after.txt")]

    async def script(pipe, shown, runner):
        pipe.send_text("!sleep 3; touch after.txt\r")
        await wait_for(running)
        t0 = time.monotonic()
        pipe.send_text("\x03")
        await wait_for(lambda: not running(), 2)
        gone.append(time.monotonic() - t0)
        await wait_for(lambda: any(s.startswith("! Stopped: the command") for s in shown))
        await wait_for(lambda: "terminal:local" not in runner.busy, 2)
        await asyncio.sleep(3.5)
        pipe.send_text("\x04")

    shown = run_chat(env, script, tmp_path)
    assert "! Stopped: the command `sleep 3; touch after.txt` was killed. Nothing more of that task will run." \
        in shown, shown
    assert not (workspace / "after.txt").exists(), "the stopped command went on and touched after.txt"
    assert gone and gone[0] < 1.0, gone


def _cmdline_has(pid, marker):
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[-1].startswith("Z"):
            return False
        return marker in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


class Tmux:
    """A terminal in tmux: type with send-keys, read with capture-pane."""

    def __init__(self, command, name):
        self.name = name
        subprocess.run(["tmux", "new-session", "-d", "-s", name, "-x", "120", "-y", "30",
                        command + "; echo CHAT-EXITED-$?; sleep 30"], check=True)

    def type(self, text):
        subprocess.run(["tmux", "send-keys", "-t", self.name, text, "Enter"], check=True)

    def leave(self):
        subprocess.run(["tmux", "send-keys", "-t", self.name, "C-d"], check=True)

    def screen(self):
        return subprocess.run(["tmux", "capture-pane", "-t", self.name, "-p"],
                              capture_output=True, text=True).stdout

    def exited(self):
        return "CHAT-EXITED-0" in self.screen()

    def close(self):
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


class Pty:
    """A terminal on a pseudo-terminal, where tmux is not installed: what the chat
    wrote is collected raw, escape sequences and all, and a cursor-position request
    is answered as a terminal would."""

    def __init__(self, command, name):
        import pty
        import struct
        import fcntl
        import termios
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
        self.master = master
        self.proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=slave, stdout=slave, stderr=slave,
                                     env=dict(os.environ, TERM="xterm"), start_new_session=True)
        os.close(slave)
        self.out = bytearray()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                chunk = os.read(self.master, 4096)
            except OSError:
                return
            if not chunk:
                return
            if b"\x1b[6n" in chunk:
                os.write(self.master, b"\x1b[1;1R")
            self.out += chunk

    def type(self, text):
        os.write(self.master, text.encode() + b"\r")

    def leave(self):
        os.write(self.master, b"\x04")

    def screen(self):
        return self.out.decode("utf-8", "replace")

    def exited(self):
        return self.proc.poll() == 0

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        os.close(self.master)


def test_end_to_end_in_a_real_terminal(tmp_path):
    """The chat as a person runs it, under tmux (or on a pseudo-terminal where there is no tmux)."""
    config = tmp_path / "config.toml"
    config.write_text(NO_SANDBOX)
    command = (f"PASSEPARTOUT_DATA_DIR={tmp_path}/data PASSEPARTOUT_CONFIG={config} "
               f"{BIN}/passepartout chat")
    terminal = (Tmux if shutil.which("tmux") else Pty)(command, f"pp-test-{os.getpid()}")
    try:
        def wait_screen(done, what, seconds=60):
            deadline = time.monotonic() + seconds
            while not done():
                assert time.monotonic() < deadline, f"{what} never appeared:\n{terminal.screen()}"
                time.sleep(0.2)

        wait_screen(lambda: "Ctrl-D leaves" in terminal.screen(), "the prompt")
        # The answer (42) is not in what was typed, so seeing it proves the command ran.
        terminal.type("!echo shown in a $((6*7)) terminal")
        wait_screen(lambda: "shown in a 42 terminal" in terminal.screen(), "the answer")
        assert "· ran (:action :shell" in terminal.screen()
        terminal.leave()
        wait_screen(terminal.exited, "the chat's exit")
    finally:
        terminal.close()
