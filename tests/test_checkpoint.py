"""Tests for passepartout/checkpoint.hy, keeper.hy and its skill (skills/undo.hy): every
action that may write is checkpointed, /undo puts the workspace back byte for
byte (contents, modes, links, .git included), /undo N goes further back,
/changes says what an action changed, checkpoints survive a restart, stay
bounded, and become journal turns; the files actions wrote are listed for the
gates.

Commands run for real in a daemon booted on a data dir of its own, in
bubblewrap (where it works) and without a sandbox.
"""
import asyncio
import os
import stat
import time
from pathlib import Path

import hy  # noqa: F401
import pytest
from conftest import need_bwrap, wait_until

from passepartout.act import act
from passepartout.keeper import Keeper
from passepartout.written import wrote_paths
from passepartout.context import context_for
from passepartout.journal import journal_verify
from passepartout.perceive import perceive
from passepartout.proto import proto_get
from passepartout.runner import stop_session
from passepartout.records import events

SESSION = "test:undo"


def kw(name):
    return hy.models.Keyword(name)


def run(env, cmd):
    return asyncio.run(act([kw("action"), kw("shell"), kw("cmd"), cmd], context_for(env, SESSION)))


def write_file(env, path, content):
    return asyncio.run(act([kw("action"), kw("write-file"), kw("path"), path, kw("content"), content],
                           context_for(env, SESSION)))


def field(result, name):
    value = proto_get(result, kw(name))
    return value.name if isinstance(value, hy.models.Keyword) else value


def says(text):
    return [kw("type"), kw("event"), kw("source"), [kw("gateway"), kw("test"), kw("chat"), "undo"],
            kw("session"), SESSION, kw("payload"), [kw("sensor"), kw("user-input"), kw("text"), text]]


async def answer_async(env, text):
    seen = await perceive(says(text), context_for(env, SESSION))
    assert proto_get(seen, kw("handled-by")), f"{text} was not answered here: {seen}"
    return "\n".join(proto_get(proto_get(r, kw("payload")), kw("text")) for r in proto_get(seen, kw("emit")))


def answer(env, text):
    return asyncio.run(answer_async(env, text))


def snapshot(root):
    """Everything under ROOT: path -> (kind, mode, content or link target)."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", None, os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), None)
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), Path(p).read_bytes())
    return out


def differences(a, b):
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


@pytest.fixture
def daemon(booted, box):
    def make(undo=""):
        return booted(f"[sandbox]\n{box}\n[undo]\n{undo}\n")
    return make


def fill(ws):
    """A small project with a git folder, modes and a link."""
    (ws / "src").mkdir()
    (ws / "src" / "main.c").write_text("int main(void) { return 0; }\n")
    (ws / "notes.txt").write_text("first line\n")
    (ws / "secret.txt").write_text("only mine\n")
    (ws / "secret.txt").chmod(0o600)
    (ws / "run.sh").write_text("#!/bin/sh\necho run\n")
    (ws / "run.sh").chmod(0o755)
    os.symlink("notes.txt", ws / "link")
    git = ws / ".git"
    (git / "hooks").mkdir(parents=True)
    (git / "objects" / "ab").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    (git / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (git / "hooks" / "pre-commit").chmod(0o755)
    (git / "objects" / "ab" / "cdef0123").write_bytes(bytes(range(256)) * 40)
    (git / "objects" / "ab" / "cdef0123").chmod(0o444)


EDIT = ("echo second line >> notes.txt; echo new > new.txt; rm secret.txt; chmod 644 run.sh; "
        "mkdir -p build/obj && echo o > build/obj/main.o; ln -sf new.txt link; rm -r src; "
        "echo '[core] fsmonitor = evil' >> .git/config; rm -rf .git/hooks; rm .git/objects/ab/cdef0123")


# * Undo

def test_undo_puts_back_an_action_that_edited_created_and_deleted_files_and_git(daemon, box):
    env = daemon()
    ws = Path(env.config["workspace"])
    fill(ws)
    before = snapshot(ws)
    result = run(env, EDIT)
    assert field(result, "status") == "ok", result
    after = snapshot(ws)
    changed = {"notes.txt", "new.txt", "secret.txt", "run.sh", "build", "link", "src/main.c",
               ".git/objects/ab/cdef0123"}
    # in the box, git's config and hooks are read-only (sandbox.org): the action cannot change them
    run_later = {".git/config", ".git/hooks/pre-commit"}
    assert changed <= set(differences(before, after)), differences(before, after)
    if "off" in box:
        assert run_later <= set(differences(before, after)), differences(before, after)
    else:
        assert not run_later & set(differences(before, after)), differences(before, after)
    text = answer(env, "/undo")
    assert text.startswith("Undone: the workspace is back to before :shell echo second line"), text
    assert differences(before, snapshot(ws)) == [], differences(before, snapshot(ws))


def test_undo_n_goes_back_n_actions_and_undo_again_further(daemon):
    env = daemon()
    ws = Path(env.config["workspace"])
    fill(ws)
    states = [snapshot(ws)]
    for cmd in ["echo one > a.txt", "echo two >> a.txt; rm notes.txt", "rm -rf .git; mkdir d; echo 3 > d/3"]:
        assert field(run(env, cmd), "status") == "ok"
        states.append(snapshot(ws))
    text = answer(env, "/undo 2")
    assert "and the 1 action after it" in text and "checkpoints 3, 2" in text, text
    assert differences(states[1], snapshot(ws)) == [], differences(states[1], snapshot(ws))
    answer(env, "/undo")
    assert differences(states[0], snapshot(ws)) == [], differences(states[0], snapshot(ws))
    assert answer(env, "/undo") == "Nothing was undone: there is no checkpoint to go back to.", "nothing left"


def test_changes_lists_what_an_action_added_changed_and_removed_with_sizes(daemon):
    env = daemon()
    ws = Path(env.config["workspace"])
    fill(ws)
    run(env, "echo second line >> notes.txt; echo new > new.txt; rm secret.txt")
    run(env, "mkdir out; head -c 2048 /dev/zero > out/zeros")
    text = answer(env, "/changes")
    assert "Checkpoint 2" in text and ":shell mkdir out" in text, text
    assert "+ out (folder)" in text and "+ out/zeros (2 KiB)" in text, text
    text = answer(env, "/changes 2")
    assert "1 added, 1 changed, 1 removed" in text, text
    for line in ["+ new.txt (4 B)", "~ notes.txt (11 B → 23 B)", "- secret.txt (was 10 B)"]:
        assert line in text, f"{line!r} missing from:\n{text}"
    assert answer(env, "/changes 3") == "Only 2 checkpoints kept; /changes 2 is the oldest.", "the oldest"
    assert "Write /changes for the last action" in answer(env, "/changes two"), "usage"


def test_a_file_written_by_the_write_file_action_is_undone_too(daemon):
    env = daemon()
    ws = Path(env.config["workspace"])
    fill(ws)
    before = snapshot(ws)
    assert field(write_file(env, "notes.txt", "rewritten\n"), "status") == "ok"
    assert field(write_file(env, "Makefile", "all:\n\ttrue\n"), "status") == "ok"
    assert (ws / "notes.txt").read_text() == "rewritten\n"
    answer(env, "/undo 2")
    assert differences(before, snapshot(ws)) == [], differences(before, snapshot(ws))


def test_an_action_that_changes_nothing_leaves_no_checkpoint(daemon):
    env = daemon()
    fill(Path(env.config["workspace"]))
    run(env, "echo kept > kept.txt")
    run(env, "cat notes.txt; ls -la")
    assert "kept.txt" in answer(env, "/changes"), "the last checkpoint is the one that wrote"
    assert [proto_get(proto_get(e, kw("data")), kw("checkpoint"))
            for e in events(env.store, kind="checkpoint", limit=None)] == [1]


def test_undo_works_across_a_restart(booted, box):
    config = f"[sandbox]\n{box}\n"
    env = booted(config)
    ws = Path(env.config["workspace"])
    fill(ws)
    before = snapshot(ws)
    run(env, EDIT)
    from passepartout.daemon import shutdown
    shutdown(env)
    again = booted(config)
    assert Path(again.config["workspace"]) == ws
    assert "second line" in (ws / "notes.txt").read_text(), "the action ran"
    assert "+ new.txt (4 B)" in answer(again, "/changes"), answer(again, "/changes")
    answer(again, "/undo")
    assert differences(before, snapshot(ws)) == [], differences(before, snapshot(ws))


def test_the_checkpoints_kept_are_bounded_by_count_and_by_bytes(daemon):
    env = daemon("keep = 3")
    root = Path(env.config["data_dir"]) / "checkpoints" / "kept"
    for i in range(5):
        run(env, f"echo {i} > f{i}.txt")
    # what the bounds drop is removed on a thread of its own, after the checkpoint
    assert wait_until(lambda: sorted(os.listdir(root)) == ["00000003", "00000004", "00000005"]), \
        os.listdir(root)
    assert answer(env, "/undo 4") == "Nothing was undone: only 3 checkpoints kept; /undo 3 goes back furthest.", \
        "only three"
    env2 = daemon('max_bytes = "10 KiB"')
    root2 = Path(env2.config["data_dir"]) / "checkpoints" / "kept"
    for i in range(4):
        run(env2, "head -c 8192 /dev/urandom > blob")
    # each checkpoint but the first holds the 8 KiB blob it replaced: two do not fit in 10 KiB,
    # so only the last (number 9) is left
    # (the second daemon keeps the first one's checkpoints, of the same workspace, and goes on numbering)
    assert wait_until(lambda: sorted(os.listdir(root2)) == ["00000009"]), os.listdir(root2)


def test_checkpoints_and_undos_are_journal_turns(daemon):
    env = daemon()
    fill(Path(env.config["workspace"]))
    run(env, "echo x > x.txt; mkdir -p gen/a && echo 1 > gen/a/1")
    answer(env, "/undo")
    rows = env.store.query("SELECT kind, turn FROM events WHERE kind IN ('checkpoint', 'undo') ORDER BY id")
    assert rows == [("checkpoint", "action"), ("undo", "action")], rows
    data = proto_get(events(env.store, kind="checkpoint")[0], kw("data"))
    assert list(proto_get(data, kw("wrote"))) == ["gen/", "x.txt"], data
    assert proto_get(data, kw("added")) == 4, data
    assert proto_get(journal_verify(env.store), kw("ok")) is True, journal_verify(env.store)


def test_what_an_action_wrote_is_in_its_result_for_the_gates(daemon):
    env = daemon()
    ws = Path(env.config["workspace"])
    fill(ws)
    cmd = "printf 'all:\\n\\ttrue\\n' > Makefile; mkdir -p tests && echo 'def test_x(): pass' > tests/test_x.py"
    result = run(env, cmd)
    real = os.path.realpath(ws)
    want = [real + "/Makefile", real + "/tests/"]
    assert list(proto_get(result, kw("wrote"))) == want, result
    assert wrote_paths([kw("action"), kw("shell"), kw("cmd"), cmd], result) == want, "what written.org reads"
    result = run(env, "cat notes.txt > /dev/null")
    assert proto_get(result, kw("wrote")) is None, result


def test_undo_waits_for_no_action_to_be_running(daemon):
    env = daemon()
    ws = Path(env.config["workspace"])
    fill(ws)
    run(env, "echo 1 > one.txt")

    async def scenario():
        task = asyncio.ensure_future(act([kw("action"), kw("shell"), kw("cmd"), "echo 2 > two.txt; sleep 60"],
                                         context_for(env, SESSION)))
        deadline = time.monotonic() + 60
        while not (ws / "two.txt").exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert env.checkpoints.running == 1, "the action runs"
        text = await answer_async(env, "/undo")
        stop_session(env.stops, SESSION)
        await task
        return text

    text = asyncio.run(scenario())
    assert "an action is running in the workspace" in text, text
    # the stopped action's writes are its checkpoint, undone like any other
    assert "+ two.txt" in answer(env, "/changes"), answer(env, "/changes")


def test_without_inotify_the_workspace_is_walked_with_the_same_result(daemon):
    env = daemon()
    ws = Path(env.config["workspace"])
    fill(ws)
    env.checkpoints = Keeper(str(ws), str(Path(env.config["data_dir"]) / "checkpoints"), watch=False)
    before = snapshot(ws)
    run(env, EDIT)
    assert env.checkpoints.notify is None, "it walked"
    assert "+ new.txt (4 B)" in answer(env, "/changes"), answer(env, "/changes")
    answer(env, "/undo")
    assert differences(before, snapshot(ws)) == [], differences(before, snapshot(ws))


def test_a_file_too_large_to_keep_is_listed_and_said_not_restored(daemon):
    env = daemon('max_file = "1 KiB"')
    ws = Path(env.config["workspace"])
    (ws / "big.bin").write_bytes(b"b" * 4096)
    (ws / "small.txt").write_text("small\n")
    run(env, "echo changed > big.bin; echo changed > small.txt")
    assert "~ big.bin (4 KiB → 8 B)" in answer(env, "/changes"), answer(env, "/changes")
    text = answer(env, "/undo")
    assert "Not restored (too large to keep" in text and "big.bin" in text, text
    assert (ws / "small.txt").read_text() == "small\n"


def test_checkpoints_stay_outside_the_workspace_and_the_sandbox(booted):
    need_bwrap()
    env = booted('[sandbox]\nmode = "auto"\n')
    data = Path(env.config["data_dir"])
    run(env, "echo x > x.txt")
    assert (data / "checkpoints" / "mirror" / "x.txt").exists(), "the mirror holds it"
    result = run(env, f"ls {data / 'checkpoints'} 2>&1; cat {data / 'checkpoints' / 'mirror' / 'x.txt'} 2>&1; true")
    lines = field(result, "output").splitlines()
    assert "x" not in lines and "mirror" not in lines, lines
    assert len([line for line in lines if "No such file" in line]) == 2, lines
