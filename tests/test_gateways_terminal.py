"""Tests of the terminal chat: through prompt_toolkit's pipe input, and once under tmux."""
import asyncio
import os
import re
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

from passepartout.gateways.terminal import (chat_lines, chat_terminal, format_reply, progress_kept,
                                           status_line)
from passepartout.runner import Runner
from passepartout.proto import proto_get

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
    assert "  · ran `echo typed into the pipe` → succeeded" in shown, shown
    assert "!echo typed into the pipe" in (tmp_path / "history").read_text()
    assert (tmp_path / "history").stat().st_mode & 0o777 == 0o600, "the history is readable by others"


@pytest.mark.parametrize("word", ["/quit", "exit", "EXIT", "/exit"])
def test_quit_and_exit_leave_the_chat(env, tmp_path, word):
    async def script(pipe, shown, runner):
        pipe.send_text(word + "\r")

    shown = run_chat(env, script, tmp_path)
    assert shown == [], f"{word} went somewhere: {shown}"


def test_quit_leaves_the_line_by_line_chat_too(env):
    lines = iter(["/quit", "!echo never run"])

    async def main():
        runner = Runner(env, lambda r: None)
        submitted = []
        real_submit = runner.submit

        async def submit(signal):
            submitted.append(signal)
            await real_submit(signal)

        runner.submit = submit
        await chat_lines(runner, read_line=lambda: next(lines))
        await runner.close()
        return submitted

    assert asyncio.run(main()) == [], "a line after /quit was sent"


def test_a_refusal_is_one_readable_line_then_the_explanation(env, tmp_path):
    async def script(pipe, shown, runner):
        pipe.send_text("!rm -rf ~\r")
        await wait_for(lambda: any("rules allow" in s for s in shown))
        pipe.send_text("\x04")

    shown = run_chat(env, script, tmp_path)
    decisions = [s for s in shown if s.startswith("  ✗ ")]
    assert len(decisions) == 1 and decisions[0].startswith("  ✗ shell-safety refused `rm -rf ~`: "), shown
    reason = decisions[0].split(": ", 1)[1]
    assert "(:action" not in decisions[0] and "`rm -rf ~`" not in reason, decisions
    assert sum(reason in s for s in shown) == 1, f"the reason is shown more than once: {shown}"
    assert sum("shell-safety" in s for s in shown) == 1, f"the gate is named more than once: {shown}"


def _pending(env):
    from passepartout.approvals.hitl import pending_approvals
    return pending_approvals(env.store, "terminal:local")


# y, a and n act on the keypress alone, as the request says; typed with Enter
# (here in upper case, which no key binding takes) the line says the same.
@pytest.mark.parametrize("key,state,grants", [("y", "executed", 0), ("a", "executed", 1), ("n", "denied", 0),
                                              ("A\r", "executed", 1)])
def test_one_key_answers_the_only_approval_waiting(env, tmp_path, key, state, grants):
    from passepartout.approvals.hitl import active_grants, find_approval
    codes = []

    async def script(pipe, shown, runner):
        pipe.send_text("write .env\x1b\rKEY=1\r")
        await wait_for(lambda: _pending(env))
        await runner.idle("terminal:local")
        codes.append(proto_get(_pending(env)[0], hy_kw("code")))
        assert any(s.startswith("? Approval needed") and s.endswith("n (deny), while it is the only one waiting.")
                   for s in shown), shown
        pipe.send_text(key)
        await wait_for(lambda: not _pending(env))
        await runner.idle("terminal:local")
        pipe.send_text("\x04")

    run_chat(env, script, tmp_path)
    approval = find_approval(env.store, codes[0])
    assert proto_get(approval, hy_kw("state")) == state, approval
    written = Path(env.config["workspace"]) / ".env"
    assert written.exists() == (state == "executed"), f"{key}: .env exists: {written.exists()}"
    now = time.time()
    assert len(active_grants(env.store, "terminal:local", now)) == grants, f"{key}: grants"


def test_one_key_asks_for_the_code_when_several_wait(env, tmp_path):
    async def script(pipe, shown, runner):
        pipe.send_text("write .env\x1b\rKEY=1\r")
        await wait_for(lambda: len(_pending(env)) == 1)
        await runner.idle("terminal:local")
        pipe.send_text("write .env\x1b\rKEY=2\r")
        await wait_for(lambda: len(_pending(env)) == 2)
        await runner.idle("terminal:local")
        pipe.send_text("y\r")
        await wait_for(lambda: any("approvals are waiting here" in s for s in shown))
        await runner.idle("terminal:local")
        pipe.send_text("\x04")

    shown = run_chat(env, script, tmp_path)
    assert len(_pending(env)) == 2, "a single key approved one of two"
    note = next(s for s in shown if "approvals are waiting here" in s)
    assert all(proto_get(a, hy_kw("code")) in note for a in _pending(env)) and "/approve CODE" in note, note
    assert not (Path(env.config["workspace"]) / ".env").exists(), ".env was written"


def test_trace_and_decision_lines_name_the_action_in_words():
    def reply(kind, text):
        return [hy_kw("type"), hy_kw("reply"), hy_kw("payload"), [hy_kw("kind"), hy_kw(kind), hy_kw("text"), text]]

    cases = [
        (reply("trace", 'ran (:action :shell :cmd "ls -la" :explanation "list") → ok'), "  · ran `ls -la` → ok"),
        (reply("trace", 'ran (:action :read-file :path "a → b.txt") → error'), "  · ran read-file a → b.txt → error"),
        (reply("trace", 'ran (:action :memory-search :query "cats" :limit 3) → ok (and 1 more)'),
         "  · ran memory-search query=cats limit=3 → ok (and 1 more)"),
        (reply("decision", 'gate workspace refused (:action :read-file :path "/etc/shadow"): read-file '
                           "'/etc/shadow' refused: outside the workspace"),
         "  ✗ workspace refused read-file /etc/shadow: read-file '/etc/shadow' refused: outside the workspace"),
        (reply("trace", "ran something else"), "  · ran something else"),
        (reply("decision", "gate x refused (not a plist: y"), "  ✗ gate x refused (not a plist: y"),
    ]
    for signal, want in cases:
        assert format_reply(signal) == want, f"{format_reply(signal)!r} != {want!r}"


def test_escape_enter_makes_one_multi_line_message(env, tmp_path):
    async def script(pipe, shown, runner):
        pipe.send_text("write notes.txt\x1b\rsecond line\r")
        await wait_for(lambda: any("notes.txt" in s for s in shown if not s.startswith("  · ")))
        pipe.send_text("\x04")

    run_chat(env, script, tmp_path)
    written = Path(env.config["workspace"]) / "notes.txt"
    assert written.read_text() == "second line"


def test_ctrl_c_stops_the_running_task_and_stays(env, tmp_path):
    release = asyncio.Event()
    calls = []

    async def complete(request):
        calls.append(request)
        await release.wait()
        return [hy_kw("status"), hy_kw("ok"), hy_kw("text"),
                f'(:action :shell :cmd "echo {len(calls)}" :explanation "count")']

    env.complete = complete

    async def script(pipe, shown, runner):
        pipe.send_text("count\r")
        await wait_for(lambda: calls)
        pipe.send_text("\x03")
        await wait_for(lambda: "! Stopped: the model call was stopped. Nothing more of that task will run."
                       in shown)
        release.set()
        # a step the stop missed would go on from the released call: idle waits for it
        await runner.idle("terminal:local")
        pipe.send_text("\x04")

    shown = run_chat(env, script, tmp_path)
    assert len(calls) == 1, f"{len(calls)} model calls after Ctrl-C"
    assert not any(s.startswith("  · ran ") for s in shown), shown


def test_ctrl_c_kills_the_running_command(env, tmp_path):
    """Ctrl-C kills the shell that runs the command: it is gone (seen from
    /proc), so the `touch` it would run after its sleep never runs."""
    workspace = Path(env.config["workspace"])
    gone = []

    def running():
        return [d for d in os.listdir("/proc") if d.isdigit() and _cmdline_has(d, b"touch after.txt")]

    async def script(pipe, shown, runner):
        pipe.send_text("!sleep 60; touch after.txt\r")
        await wait_for(running)
        pipe.send_text("\x03")
        await wait_for(lambda: not running(), 30)
        gone.append(True)
        await wait_for(lambda: any(s.startswith("! Stopped: the command") for s in shown), 30)
        await wait_for(lambda: "terminal:local" not in runner.busy, 30)
        pipe.send_text("\x04")

    shown = run_chat(env, script, tmp_path)
    assert "! Stopped: the command `sleep 60; touch after.txt` was killed. Nothing more of that task will run." \
        in shown, shown
    assert gone, "the command's shell still ran after Ctrl-C"
    assert not (workspace / "after.txt").exists(), "the stopped command went on and touched after.txt"


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


def _chat_terminal(tmp_path, name):
    """The chat under tmux (or on a pseudo-terminal where there is no tmux), with
    a function that waits until the screen shows what it should."""
    config = tmp_path / "config.toml"
    config.write_text(NO_SANDBOX)
    command = (f"PASSEPARTOUT_DATA_DIR={tmp_path}/data PASSEPARTOUT_CONFIG={config} "
               f"{BIN}/passepartout chat")
    terminal = (Tmux if shutil.which("tmux") else Pty)(command, f"{name}-{os.getpid()}")

    def wait_screen(done, what, seconds=60):
        deadline = time.monotonic() + seconds
        while not done():
            assert time.monotonic() < deadline, f"{what} never appeared:\n{terminal.screen()}"
            time.sleep(0.2)

    return terminal, wait_screen


def test_end_to_end_in_a_real_terminal(tmp_path):
    """The chat as a person runs it, under tmux (or on a pseudo-terminal where there is no tmux)."""
    terminal, wait_screen = _chat_terminal(tmp_path, "pp-test")
    try:

        wait_screen(lambda: "/quit leaves" in terminal.screen(), "the prompt")
        # The answer (42) is not in what was typed, so seeing it proves the command ran.
        terminal.type("!echo shown in a $((6*7)) terminal")
        wait_screen(lambda: "shown in a 42 terminal" in terminal.screen(), "the answer")
        assert "· ran `echo shown in a $((6*7)) terminal` → succeeded" in terminal.screen()
        terminal.leave()
        wait_screen(terminal.exited, "the chat's exit")
    finally:
        terminal.close()


# * What reaches the terminal: shown, never obeyed; always valid text

# A command whose output would write the clipboard (OSC 52), clear the screen and
# draw a fake approval (CSI 2J), and reorder what follows (U+202E).
PRINTS_ESCAPES = r"!printf 'a\033]52;c;UFdORUQ=\007 b\033[2JApproved \342\200\256 x'"
SHOWN_ESCAPES = "a\\x1b]52;c;UFdORUQ=\\x07 b\\x1b[2JApproved \\u202e x"


def test_format_reply_shows_escapes_instead_of_sending_them():
    reply = [hy_kw("type"), hy_kw("reply"), hy_kw("payload"),
             [hy_kw("kind"), hy_kw("answer"), hy_kw("text"),
              "\x1b]8;;http://evil.example\x1b\\here\x1b]8;;\x1b\\ \u2066x\u2069 \x9b2J \ud800 ok\r\n"]]
    shown = format_reply(reply)
    assert shown == "\\x1b]8;;http://evil.example\\x1b\\here\\x1b]8;;\\x1b\\ \\u2066x\\u2069 \\x9b2J \\ud800 ok\n", \
        shown
    shown.encode("utf-8")


def chat(tmp_path, lines, config=NO_SANDBOX, environ=None, timeout=120):
    """`passepartout chat` on a pipe, as a script runs it: (stdout bytes, stderr text)."""
    cfg = tmp_path / "config.toml"
    cfg.write_text(config)
    env = dict(os.environ, PASSEPARTOUT_DATA_DIR=str(tmp_path / "data"), PASSEPARTOUT_CONFIG=str(cfg),
               **(environ or {}))
    data = lines if isinstance(lines, bytes) else "".join(line + "\n" for line in lines).encode()
    out = subprocess.run([str(BIN / "passepartout"), "chat"], input=data, capture_output=True,
                         env=env, timeout=timeout)
    assert out.returncode == 0, out.stderr.decode("utf-8", "replace")[-3000:]
    return out.stdout, out.stderr.decode("utf-8", "replace")


def test_what_a_command_prints_is_shown_not_obeyed_on_plain_lines(tmp_path):
    out, err = chat(tmp_path, [PRINTS_ESCAPES])
    assert SHOWN_ESCAPES.encode() in out, out.decode("utf-8", "replace")
    assert b"\x1b" not in out and "\u202e".encode() not in out, out


def test_what_a_command_prints_is_shown_not_obeyed_in_a_real_terminal(tmp_path):
    terminal, wait_screen = _chat_terminal(tmp_path, "pp-test-esc")
    try:

        wait_screen(lambda: "/quit leaves" in terminal.screen(), "the prompt")
        terminal.type(PRINTS_ESCAPES)
        wait_screen(lambda: SHOWN_ESCAPES in terminal.screen(), "the output, made visible")
        screen = terminal.screen()
        # the screen was not cleared: what was there before the clear is still there
        assert "Protection: " in screen, screen
        if isinstance(terminal, Pty):
            assert b"\x1b]52" not in terminal.out and b"\x1b[2JApproved" not in terminal.out
        terminal.leave()
        wait_screen(terminal.exited, "the chat's exit")
    finally:
        terminal.close()


SCRIPTED_KEY = "PASSEPARTOUT_TEST_SCRIPTED_KEY"


def scripted(url):
    return (NO_SANDBOX + f'[[providers]]\nname = "scripted"\nmodel = "openai/scripted"\n'
            f'api_base = "{url}"\napi_key_env = "{SCRIPTED_KEY}"\ntimeout = 20\n')


def outbox_states(tmp_path):
    import sqlite3
    with sqlite3.connect(tmp_path / "data" / "passepartout.sqlite3") as db:
        return [s for (s,) in db.execute("SELECT state FROM outbox ORDER BY id")]


def test_a_lone_surrogate_from_the_model_wedges_nothing(tmp_path, openai_server):
    """A model answers with a lone surrogate: it is refused with a reason the model
    reads, the chat goes on, every later model call of the session works, and
    nothing is left in the outbox, then or after a restart."""
    openai_server.replies.extend(['(:action :message :text "hi \\ud800 there")', "second answer",
                                  "third answer", "after the restart"])
    environ = {SCRIPTED_KEY: "sk-scripted"}
    out, err = chat(tmp_path, ["hello", "again"], scripted(openai_server.url("ok")), environ)
    text = out.decode("utf-8")
    assert "text-safety refused" in text and "lone surrogate (\\ud800)" in text, text
    assert "second answer" in text and "third answer" in text, text
    assert "could not be sent" not in err, err
    asked = [r["body"]["messages"] for r in openai_server.requests]
    assert len(asked) == 3, f"{len(asked)} model calls reached the server: later calls failed"
    told = asked[1][-1]["content"]
    assert "lone surrogate (\\ud800)" in told and "\\ud800 there" in told, told
    assert outbox_states(tmp_path) and set(outbox_states(tmp_path)) == {"sent"}, outbox_states(tmp_path)

    out, err = chat(tmp_path, ["once more"], scripted(openai_server.url("ok")), environ)
    assert "after the restart" in out.decode("utf-8"), out
    assert len(openai_server.requests) == 4 and "could not be sent" not in err, err
    assert set(outbox_states(tmp_path)) == {"sent"}, outbox_states(tmp_path)


def test_a_reply_kept_holding_a_lone_surrogate_is_shown_at_the_next_start(tmp_path):
    """A reply an older version kept in the outbox with a lone surrogate in it is
    shown (escaped) at the next start, and the replies after it are not held."""
    from passepartout.daemon import boot, shutdown
    from passepartout.mailbox import outbox_add
    (tmp_path / "config.toml").write_text(NO_SANDBOX)
    env = boot(config_path=str(tmp_path / "config.toml"),
               environ={"PASSEPARTOUT_DATA_DIR": str(tmp_path / "data"), "HOME": str(tmp_path)})
    kept = [hy_kw("type"), hy_kw("reply"), hy_kw("session"), "terminal:local",
            hy_kw("source"), [hy_kw("gateway"), hy_kw("terminal"), hy_kw("chat"), "local"],
            hy_kw("payload"), [hy_kw("kind"), hy_kw("answer"), hy_kw("text"), "kept \ud800 reply"]]
    outbox_add(env.store, "terminal", "terminal:local", kept)
    shutdown(env)
    out, err = chat(tmp_path, ["!echo next $((6*7))"])
    text = out.decode("utf-8")
    assert "kept \\ud800 reply" in text and "next 42" in text, (text, err)
    assert set(outbox_states(tmp_path)) == {"sent"}, outbox_states(tmp_path)


def test_a_line_that_is_not_valid_text_is_refused_with_a_reason(tmp_path, openai_server):
    """Bytes that are not UTF-8 on the chat's input: that line is refused, saying why,
    and never reaches the model; the next line is answered."""
    openai_server.replies.extend(["the answer to fine"])
    out, err = chat(tmp_path, b"hi \xff there\nfine\n", scripted(openai_server.url("ok")),
                    {SCRIPTED_KEY: "sk-scripted"})
    text = out.decode("utf-8")
    assert "✗ Your message was not read: it is not valid text (a lone surrogate (\\udcff) at character 4)" \
        in text, text
    assert "the answer to fine" in text, text
    asked = [r["body"]["messages"] for r in openai_server.requests]
    assert len(asked) == 1 and [m["content"] for m in asked[0] if m["role"] == "user"] == ["fine"], asked


def test_pending_approvals_show_what_a_proposal_holds_and_never_obey_it(tmp_path):
    """/pending in the chat and `passepartout approvals list` on the host quote the
    actions waiting, which models wrote: what a terminal would obey is shown."""
    from passepartout.context import context_for
    from passepartout.daemon import boot, shutdown
    from passepartout.approvals.hitl import request_approval
    from passepartout.proto import kw
    (tmp_path / "config.toml").write_text(NO_SANDBOX)
    environ = {"PASSEPARTOUT_DATA_DIR": str(tmp_path / "data"), "HOME": str(tmp_path)}
    env = boot(config_path=str(tmp_path / "config.toml"), environ=environ)
    signal = [kw("type"), kw("event"), kw("source"), [kw("gateway"), kw("terminal"), kw("chat"), "local"],
              kw("session"), "terminal:local", kw("payload"), [kw("sensor"), kw("user-input"), kw("text"), "go"]]
    action = [kw("action"), kw("shell"), kw("cmd"), "ls \u202e; rm -rf ~ \u202c",
              kw("explanation"), "look\x1b]52;c;UFdORUQ=\x07"]
    outcome = [kw("verdict"), kw("escalate"), kw("reason"), "odd \x9b2J\x1b[2J reason", kw("decisions"), []]
    ctx = context_for(env, "terminal:local")
    request_approval(env.store, action, outcome, signal, ctx, env.config, env.clock())
    shutdown(env)

    out, _ = chat(tmp_path, ["/pending"])
    host = subprocess.run([str(BIN / "passepartout"), "approvals", "list"], capture_output=True,
                          env=dict(os.environ, PASSEPARTOUT_CONFIG=str(tmp_path / "config.toml"), **environ),
                          timeout=120)
    assert host.returncode == 0, host.stderr
    for shown in [out.decode("utf-8"), host.stdout.decode("utf-8")]:
        assert "Pending approvals:" in shown, shown
        assert "\\u202e; rm -rf ~" in shown and "\\x9b2J\\x1b[2J reason" in shown, shown
        assert not re.search("[\x1b\x9b\u202a-\u202e\u2066-\u2069]", shown), repr(shown)


def test_a_running_workflow_is_one_status_line_and_only_its_end_is_printed():
    kw = hy_kw
    def progress(text, finished=False, key="workflow-f1"):
        return [kw("type"), kw("reply"), kw("session"), "terminal:local:local",
                kw("payload"), [kw("kind"), kw("progress"), kw("text"), text,
                                kw("progress-key"), key, kw("finished"), finished]]
    kept = {}
    for text in ["Workflow 'w', 3 workers: 1 running, 2 waiting",
                 "Workflow 'w', 3 workers: 1 done, 2 running"]:
        assert progress_kept(kept, progress(text)), text
    assert progress_kept(kept, progress("Workflow 'v', 1 workers: 1 running", key="workflow-f2"))
    line = status_line(None, kept)
    assert line.splitlines() == ["Workflow 'w', 3 workers: 1 done, 2 running",
                                 "Workflow 'v', 1 workers: 1 running", line.splitlines()[-1]], line
    assert "/help" in line.splitlines()[-1], line
    assert "thinking… 2.5 s" in status_line(2.5, kept), status_line(2.5, kept)
    # the finished workflow leaves the status line and is printed
    assert not progress_kept(kept, progress("Workflow 'w', 3 workers: 3 done", finished=True))
    assert list(kept) == ["workflow-f2"], kept
    answer = [kw("type"), kw("reply"), kw("payload"), [kw("text"), "hello"]]
    assert not progress_kept(kept, answer), "an answer went to the status line"
    # what a workflow's title holds is shown, not obeyed
    progress_kept(kept, progress("Workflow '\x1b[2Jx', 1 workers: 1 running", key="workflow-f3"))
    assert "\x1b" not in status_line(None, kept), status_line(None, kept)


def test_tab_completes_the_slash_commands_the_skills_answer(env):
    from prompt_toolkit.document import Document
    from passepartout.gateways.terminal import _completer, command_words

    async def main():
        runner = Runner(env, lambda r: None)
        try:
            words = command_words(runner)
            assert {"/stop", "/approve", "/pending", "/help", "/status", "/quit"} <= set(words), words
            completer = _completer(runner)
            got = [c.text for c in completer.get_completions(Document("/st"), None)]
            assert sorted(got) == ["/status", "/stop"], got
            assert [c.text for c in completer.get_completions(Document("hello /st"), None)] == [], \
                "completed inside a message"
        finally:
            await runner.close()

    asyncio.run(main())
