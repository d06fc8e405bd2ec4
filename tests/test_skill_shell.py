"""Tests of the shell actuator (skills/shell.hy): what it starts ends with it.
On a timeout, a stop, or the cancellation of the task that awaits it, no
process is left, with the sandbox off and in bubblewrap."""
import asyncio
import time
import uuid
from pathlib import Path

import hy  # noqa: F401  (the .hy importer)
import pytest
from conftest import need_bwrap

from passepartout.act import act
from passepartout.context import make_context
from passepartout.proto import kw, proto_get, proto_put
from passepartout.runner import Stops, stop_mark, stop_session
from passepartout.skills import Registry, load_skill_file

ROOT = Path(__file__).resolve().parent.parent


# * The actuator: what it starts ends with it
#
# Each test runs with the sandbox off and in bubblewrap: outside, the command's
# process group is killed; inside, killing the group ends bubblewrap, and its
# pid namespace with everything in it.

SESSION = "s"


def actuator_context(tmp_path, mode, shell_timeout=120):
    """A context whose registry holds the shell actuator, with a stop registry
    of its own, the sandbox MODE ("off" or "bubblewrap") and SHELL-TIMEOUT; and
    the stop registry."""
    registry = Registry()
    loaded = load_skill_file(registry, ROOT / "skills" / "shell.hy", builtin=True)
    assert proto_get(loaded, kw("error")) is None, loaded
    if mode == "bubblewrap":
        status = need_bwrap()
    else:
        status = [kw("kind"), "off", kw("network"), "on"]
    ws = tmp_path / "ws"
    ws.mkdir()
    stops = Stops()
    ctx = make_context(workspace=str(ws), session=SESSION, skills=registry, stops=stops,
                       sandbox=status, config={"limits": {"shell_timeout": shell_timeout}})
    return proto_put(ctx, kw("stop-mark"), stop_mark(stops, SESSION)), stops


def shell_action(cmd):
    return [kw("action"), kw("shell"), kw("cmd"), cmd, kw("explanation"), "test"]


def unique_sleep():
    """A sleep of two minutes, far past any deadline here, whose argument no
    other process has."""
    return f"120.{uuid.uuid4().int % 10**9}"


def _live(pid_dir):
    return (pid_dir / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def processes(needle):
    """Pids of live (not zombie) processes whose command line holds NEEDLE (bytes),
    found from outside: a sandbox's processes are seen too."""
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if needle in (p / "cmdline").read_bytes() and _live(p):
                    found.append(p.name)
            except OSError:
                pass
    return found


def sleeping(tag):
    """The `sleep TAG` processes."""
    return processes(f"sleep\0{tag}\0".encode())


def anything_with(tag):
    """Every process whose command line names TAG: the sleeps, the shell that
    runs the command and, in a sandbox, bubblewrap."""
    return processes(tag.encode())


def wait_gone(tag, seconds=20):
    """Wait until no process names TAG; the kill is sent before the actuator
    returns, but the kernel may take a moment to finish it."""
    deadline = time.monotonic() + seconds
    while anything_with(tag) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not anything_with(tag), f"processes of the command outlived it: {anything_with(tag)}"


async def until(predicate, what, seconds=60):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not happen within {seconds} s"
        await asyncio.sleep(0.02)


MODES = ["off", "bubblewrap"]


@pytest.mark.parametrize("mode", MODES)
def test_a_timeout_kills_the_group_and_keeps_the_output_so_far(tmp_path, mode):
    ctx, stops = actuator_context(tmp_path, mode, shell_timeout=2)
    tag = unique_sleep()
    r = asyncio.run(act(shell_action(f"echo started; sleep {tag} & sleep {tag}; echo never"), ctx))
    assert proto_get(r, kw("timed-out")) is True, r
    assert proto_get(r, kw("status")) == kw("error"), r
    assert "timed out after 2 s" in proto_get(r, kw("error")), r
    assert proto_get(r, kw("output")) == "started\n", r
    wait_gone(tag)
    assert stops.doing == {}, f"the command is still registered as running: {stops.doing}"


@pytest.mark.parametrize("mode", MODES)
def test_a_stop_kills_the_group_and_keeps_the_output_so_far(tmp_path, mode):
    ctx, stops = actuator_context(tmp_path, mode)
    tag = unique_sleep()
    cmd = f"echo started; sleep {tag} & sleep {tag}; echo never"

    async def scenario():
        job = asyncio.create_task(act(shell_action(cmd), ctx))
        await until(lambda: len(sleeping(tag)) == 2, "both sleeps starting")
        interrupted = stop_session(stops, SESSION)
        return interrupted, await job

    interrupted, r = asyncio.run(scenario())
    assert interrupted == [(f"the command `{cmd}`", True)], interrupted
    assert proto_get(r, kw("stopped")) is True, r
    assert proto_get(r, kw("timed-out")) is False, r
    assert "stopped by the person" in proto_get(r, kw("error")), r
    assert proto_get(r, kw("output")) == "started\n", r
    wait_gone(tag)
    assert stops.doing == {}, f"the command is still registered as running: {stops.doing}"


@pytest.mark.parametrize("mode", MODES)
def test_cancelling_the_awaiting_task_leaves_no_process(tmp_path, mode):
    ctx, stops = actuator_context(tmp_path, mode)
    tag = unique_sleep()

    async def scenario():
        job = asyncio.create_task(act(shell_action(f"sleep {tag} & sleep {tag}"), ctx))
        await until(lambda: len(sleeping(tag)) == 2, "both sleeps starting")
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job

    asyncio.run(scenario())
    wait_gone(tag)
    assert stops.doing == {}, f"the command is still registered as running: {stops.doing}"


@pytest.mark.parametrize("mode", MODES)
def test_a_background_job_holding_the_output_ends_with_the_command(tmp_path, mode):
    """The shell ends at once; its background job keeps the output open. Without
    a sandbox the job holds the command until the timeout and is killed with its
    group then, though the shell that led the group is long gone; in a sandbox it
    ends with the shell, as everything in the sandbox does."""
    ctx, stops = actuator_context(tmp_path, mode, shell_timeout=2)
    tag = unique_sleep()
    r = asyncio.run(act(shell_action(f"echo started; sleep {tag} &"), ctx))
    assert proto_get(r, kw("timed-out")) is (mode == "off"), r
    assert proto_get(r, kw("output")) == "started\n", r
    wait_gone(tag)


@pytest.mark.parametrize("mode", MODES)
def test_a_background_job_ends_with_its_command(tmp_path, mode):
    """A job sent to the background with its output elsewhere does not outlive the
    action that started it, with the sandbox or without."""
    ctx, stops = actuator_context(tmp_path, mode, shell_timeout=30)
    tag = unique_sleep()
    r = asyncio.run(act(shell_action(f"nohup sleep {tag} > /dev/null 2>&1 & echo started"), ctx))
    assert proto_get(r, kw("status")) == kw("ok") and proto_get(r, kw("output")) == "started\n", r
    assert proto_get(r, kw("timed-out")) is False, r
    wait_gone(tag)


def test_cancelling_leaves_no_background_job_of_a_shell_that_ended(tmp_path):
    ctx, stops = actuator_context(tmp_path, "off")
    tag = unique_sleep()

    async def scenario():
        job = asyncio.create_task(act(shell_action(f"sleep {tag} &"), ctx))
        # the job runs, and nothing else that names it: the shells have ended
        await until(lambda: sleeping(tag) and set(anything_with(tag)) == set(sleeping(tag)),
                    "the shell ending and its job running")
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job

    asyncio.run(scenario())
    wait_gone(tag)


def test_a_command_stopped_before_it_starts_is_not_run(tmp_path):
    ctx, stops = actuator_context(tmp_path, "off")
    stop_session(stops, SESSION)
    r = asyncio.run(act(shell_action("touch ran"), ctx))
    assert proto_get(r, kw("stopped")) is True, r
    assert "nothing was run" in proto_get(r, kw("error")), r
    assert not (tmp_path / "ws" / "ran").exists(), "a stopped task's command ran"
