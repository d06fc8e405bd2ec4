"""Tests for passepartout/limits.hy and the limits of the shell actuator
(skills/shell.hy): a file too large, a quota, a disk kept free, a fork bomb, a
memory hog and a CPU spinner, each stopped with a result that names the limit,
in bubblewrap and without a sandbox, with a cgroup where the machine gives one
and with resource limits alone.

Every command runs for real, in a daemon booted on a data dir of its own
(the `booted` fixture): real files, real processes, real cgroups.
"""
import asyncio
import os
import resource
import shutil
import time
import uuid
from pathlib import Path

import hy  # noqa: F401
import pytest
from conftest import need_bwrap, wait_until

from passepartout.act import act
from passepartout.config import ConfigError, load_config
from passepartout.settings import parse_size
from passepartout.context import context_for
from passepartout.limits import (action_limits, cgroup_setup, limit_text, limits_summary,
                                 rlimits, size_text)
from passepartout.proto import proto_get

SESSION = "test:limits"


def kw(name):
    return hy.models.Keyword(name)


def run(env, cmd, timeout=None):
    action = [kw("action"), kw("shell"), kw("cmd"), cmd]
    if timeout:
        action += [kw("timeout"), timeout]
    return asyncio.run(act(action, context_for(env, SESSION)))


def field(result, name):
    value = proto_get(result, kw(name))
    return value.name if isinstance(value, hy.models.Keyword) else value


def has_cgroup(*controllers):
    dirs = cgroup_setup("auto").get("dirs", {})
    return all(c in dirs for c in controllers)


@pytest.fixture
def daemon(booted, box):
    """A function booting a daemon whose [limits] table gets LIMITS (TOML lines)."""
    def make(limits, undo=True):
        return booted(f"[sandbox]\n{box}\n[limits]\n{limits}\n[undo]\nenabled = {'true' if undo else 'false'}\n")
    return make


def workspace_bytes(env):
    total = 0
    for root, _, files in os.walk(env.config["workspace"]):
        for f in files:
            total += os.lstat(os.path.join(root, f)).st_size
    return total


def processes_with(token):
    """The pids of the processes whose command line holds TOKEN."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if token.encode() in cmdline:
            found.append(int(pid))
    return found


# * Reading the limits

def test_sizes_are_read_as_people_write_them():
    assert parse_size("1.5 KiB") == 1536, parse_size("1.5 KiB")
    assert parse_size("4 GiB") == 4 * 2**30
    assert parse_size("512M") == 512 * 2**20
    assert parse_size(1000) == 1000
    assert parse_size("50%", 1000) == 500
    assert parse_size("50%") is None, "a share needs something it is a share of"
    assert parse_size("big") is None and parse_size(-1) is None and parse_size(True) is None
    assert size_text(1536) == "1.5 KiB" and size_text(4 * 2**30) == "4 GiB" and size_text(12) == "12 B"


def test_a_size_the_config_cannot_read_stops_it_with_the_key(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[limits]\nworkspace_quota = "lots"\n')
    with pytest.raises(ConfigError) as e:
        load_config(str(path), {"HOME": str(tmp_path)})
    assert "limits.workspace_quota" in str(e.value) and "4 GiB" in str(e.value), str(e.value)
    path.write_text('[limits]\nfile_size = "50%"\n')
    with pytest.raises(ConfigError):
        load_config(str(path), {"HOME": str(tmp_path)})
    path.write_text('[limits]\nmemory = "25%"\nkeep_free = "5%"\n')
    assert load_config(str(path), {"HOME": str(tmp_path)})["limits"]["memory"] == "25%"


def test_the_defaults_are_generous_and_only_ever_lower_a_limit(booted):
    env = booted("[sandbox]\nmode = \"off\"\n")
    limits = action_limits(context_for(env, SESSION))
    assert limits["file_size"] == 4 * 2**30 and limits["workspace_quota"] == 8 * 2**30, limits
    assert limits["processes"] == 512 and limits["cpu_time"] == 3600, limits
    assert limits["memory"] == (os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")) // 2, limits
    for res, soft, hard in rlimits(limits):
        now_soft, now_hard = resource.getrlimit(res)
        assert hard <= now_hard or now_hard == resource.RLIM_INFINITY, (res, hard, now_hard)
        assert soft <= hard, (res, soft, hard)
    summary = limits_summary(env.config)
    assert "4 GiB" in summary and "8 GiB written" in summary and "512 processes" in summary, summary


def test_the_words_name_the_limit_and_its_key():
    limits = {"file_size": 2**30, "workspace_quota": 2**30, "keep_free": "1 GiB", "processes": 64,
              "memory": 2**28, "cpu_time": 5, "cgroup": "auto"}
    assert limit_text("workspace_quota", limits) == \
        "stopped: it wrote more than 1 GiB to the workspace (the quota, [limits] workspace_quota)"
    for key in ("file_size", "keep_free", "processes", "memory", "cpu_time"):
        assert f"[limits] {key}" in limit_text(key, limits), limit_text(key, limits)


# * Each limit, hit

def test_normal_work_is_not_bothered(daemon):
    env = daemon("")
    result = run(env, "seq 1 200000 > n.txt && for i in 1 2 3 4 5 6 7 8; do (sort -n n.txt > s$i.txt) & done; wait; "
                      "head -c 20000000 /dev/zero > blob && wc -l < s8.txt")
    assert field(result, "status") == "ok", result
    assert field(result, "output").strip() == "200000", result
    assert field(result, "limit") is None, result


def test_a_file_past_the_size_limit_is_stopped_at_the_limit(daemon):
    env = daemon('file_size = "1 MiB"')
    result = run(env, "yes > big.txt")
    assert field(result, "limit") == "file_size", result
    assert "larger than 1 MiB" in field(result, "error") and "[limits] file_size" in field(result, "error"), result
    assert os.path.getsize(Path(env.config["workspace"]) / "big.txt") == 2**20


def test_a_file_past_the_limit_is_told_also_when_the_command_goes_on(daemon):
    env = daemon('file_size = "1 MiB"')
    result = run(env, "yes > big.txt; echo went on")
    assert "went on" in field(result, "output"), result
    assert field(result, "limit") == "file_size", result
    assert "big.txt" in field(result, "error"), result


def test_writing_past_the_quota_stops_the_command(daemon):
    env = daemon('workspace_quota = "24 MiB"')
    # many files of 1 MiB: no single file reaches a limit, only the sum does
    result = run(env, "i=0; while :; do i=$((i+1)); head -c 1048576 /dev/zero > f$i || exit 1; done", timeout=120)
    assert field(result, "limit") == "workspace_quota", result
    assert field(result, "error") == \
        "stopped: it wrote more than 24 MiB to the workspace (the quota, [limits] workspace_quota)", result
    assert not field(result, "timed-out"), result
    written = workspace_bytes(env)
    # it was stopped, not left to run to its time limit
    assert 24 * 2**20 < written < 512 * 2**20, written


def test_a_single_file_cannot_pass_the_quota(daemon):
    env = daemon('workspace_quota = "2 MiB"')
    result = run(env, "yes > big.txt")
    assert field(result, "limit") == "workspace_quota", result
    assert os.path.getsize(Path(env.config["workspace"]) / "big.txt") == 2 * 2**20


def test_the_disk_is_never_filled_past_what_is_kept_free(daemon):
    # 100 % kept free: the first bytes written are too many
    env = daemon('keep_free = "100%"')
    result = run(env, "i=0; while :; do i=$((i+1)); head -c 1048576 /dev/zero > f$i || exit 1; done", timeout=120)
    assert field(result, "limit") == "keep_free", result
    assert "[limits] keep_free" in field(result, "error") and "100%" in field(result, "error"), result
    assert not field(result, "timed-out"), result


@pytest.mark.parametrize("cgroup", ["auto", "off"])
def test_a_fork_bomb_is_contained_and_ended(daemon, cgroup):
    if cgroup == "auto" and not has_cgroup("pids"):
        pytest.skip(f"no cgroup for processes here: {cgroup_setup('auto').get('why')}")
    env = daemon(f'processes = 64\ncgroup = "{cgroup}"\nshell_timeout = 20')
    if cgroup == "off" and os.geteuid() == 0:
        # RLIMIT_NPROC does not bind root: only a cgroup contains root's fork bomb,
        # and without one the daemon says the limit is not in force (no bomb is set off)
        summary = limits_summary(env.config)
        assert "not in force: root without a cgroup" in summary, summary
        return
    token = uuid.uuid4().hex
    result = run(env, f": {token}; b(){{ b|b& }}; b; sleep 5")
    assert field(result, "limit") == "processes", result
    assert "64 processes" in field(result, "error") and "[limits] processes" in field(result, "error"), result
    # nothing of it is left running
    assert wait_until(lambda: not processes_with(token)), processes_with(token)


@pytest.mark.parametrize("cgroup", ["auto", "off"])
def test_a_memory_hog_is_stopped(daemon, cgroup):
    python = "/usr/bin/python3"
    if not os.path.exists(python):
        pytest.skip("no /usr/bin/python3 to allocate with")
    if cgroup == "auto" and not has_cgroup("memory"):
        pytest.skip(f"no cgroup for memory here: {cgroup_setup('auto').get('why')}")
    env = daemon(f'memory = "96 MiB"\ncgroup = "{cgroup}"')
    result = run(env, f"{python} -c \"b = b'x' * (400 << 20); print(len(b))\"")
    assert field(result, "limit") == "memory", result
    assert "96 MiB" in field(result, "error") and "[limits] memory" in field(result, "error"), result
    assert str(400 << 20) not in field(result, "output"), result


def test_a_process_spinning_past_its_cpu_time_is_stopped(daemon):
    env = daemon("cpu_time = 1")
    result = run(env, "while :; do :; done", timeout=60)
    assert field(result, "limit") == "cpu_time", result
    assert "1 s of CPU time" in field(result, "error"), result
    assert not field(result, "timed-out"), result


def test_the_temp_folders_of_the_sandbox_are_bounded_too(booted):
    need_bwrap()
    env = booted('[sandbox]\nmode = "auto"\n[limits]\nworkspace_quota = "4 MiB"\nfile_size = "64 MiB"\n')
    result = run(env, "for i in 1 2 3 4 5 6 7 8; do head -c 1048576 /dev/zero > /tmp/f$i || exit 7; done")
    assert field(result, "exit") == 7, result
    assert "No space left" in field(result, "output"), result


def test_a_named_cgroup_that_is_not_there_leaves_the_resource_limits(booted, tmp_path):
    env = booted(f'[sandbox]\nmode = "off"\n[limits]\ncgroup = "{tmp_path / "no-such-cgroup"}"\n'
                 'file_size = "1 MiB"\n')
    result = run(env, "yes > big.txt")
    assert field(result, "limit") == "file_size", result
    summary = limits_summary(env.config)
    assert "no cgroup: the cgroups could not be read" in summary, summary


def test_status_and_the_start_banner_say_which_limits_are_in_force(booted):
    from passepartout.daemon import start_banner
    from passepartout.perceive import perceive
    env = booted('[sandbox]\nmode = "off"\n[limits]\nprocesses = 77\n')
    signal = [kw("type"), kw("event"), kw("source"), [kw("gateway"), kw("test"), kw("chat"), "s"],
              kw("session"), SESSION, kw("payload"), [kw("sensor"), kw("user-input"), kw("text"), "/status"]]
    seen = asyncio.run(perceive(signal, context_for(env, SESSION)))
    text = proto_get(proto_get(proto_get(seen, kw("emit"))[0], kw("payload")), kw("text"))
    assert "Limits: each shell action:" in text and "77 processes" in text, text
    assert "limits: each shell action:" in start_banner(env), start_banner(env)
