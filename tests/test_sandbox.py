"""Tests of passepartout/sandbox.hy: every shell action in bubblewrap, the gate
that asks a person when there is no sandbox, and the control plane (the REPL,
the approvals command) refusing callers that run inside an action. Real
processes, real bwrap, real sockets."""
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import hy
import pytest
from conftest import need_bwrap

from passepartout.act import act
from passepartout.config import ConfigError, load_config
from passepartout.context import context_for, make_context
from passepartout.approvals.hitl import escalate, find_approval
from passepartout.loop import step
from passepartout.proto import proto_get, proto_put
from passepartout.verify import verify
from passepartout.console import ReplThread
from passepartout.sandbox import (MARKER, in_action_process, inside_action, sandbox_argv,
                                  sandbox_status, sandbox_summary)
from passepartout.records import events

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SECRET = "sk-canary-" + "7" * 24
# each process's command line is cut to 300 characters in the probe, so that a busy machine's
# long command lines cannot push this one past the output limit
OWN_CMDLINE = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()[:200]


def kw(name):
    return hy.models.Keyword(name)


def K(*pairs):
    """A plist from Python pairs: K("action", kw("shell"), "cmd", "ls")."""
    return [kw(x) if i % 2 == 0 else x for i, x in enumerate(pairs)]



def system_python():
    """A python3 the sandbox shows (it binds /usr, not the home folder)."""
    for p in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(p) and os.path.realpath(p).startswith("/usr/"):
            return p
    if os.environ.get("CI"):
        pytest.fail("no system python3 under /usr to run inside the sandbox")
    pytest.skip("no system python3 under /usr to run inside the sandbox")


def shell(ctx, cmd, **more):
    action = K("action", kw("shell"), "cmd", cmd)
    for k, v in more.items():
        action += [kw(k), v]
    return asyncio.run(act(action, ctx))


def output(result):
    return proto_get(result, kw("output"))


def unboxed(ctx):
    return proto_put(ctx, kw("sandbox"), K("kind", "off", "network", "on"))


@pytest.fixture
def short():
    """Short folders: a Unix socket path must fit in 108 bytes."""
    d = tempfile.mkdtemp(prefix="pp-")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def daemon(booted, tmp_path, short, monkeypatch):
    """A booted daemon with canaries: a secret in its environment and secrets, a
    fake home with an SSH key, its store and a live REPL socket in its runtime dir."""
    monkeypatch.setenv("CANARY_API_KEY", SECRET)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_canary").write_text("canary key\n")
    (home / ".gitconfig").write_text("[user]\n\tname = canary\n")
    (short / "ws").mkdir()
    env = booted('[limits]\noutput_limit = 1000000\n'
                 '[sandbox]\nhome_paths = ["' + str(home / ".gitconfig") + '"]\n',
                 environ={"PASSEPARTOUT_WORKSPACE": str(short / "ws"),
                          "PASSEPARTOUT_RUNTIME_DIR": str(short / "run"),
                          "CANARY_API_KEY": SECRET})
    (Path(env.config["data_dir"]) / "canary.txt").write_text("canary data\n")
    server = ReplThread(env)
    config = env.config
    ctx = proto_put(context_for(env, "test"), kw("home"), str(home))
    yield {"env": env, "ctx": ctx, "home": home, "server": server, "ws": Path(config["workspace"])}
    server.stop()


# * What an action sees

PROBES = {
    "home key": "{home}/.ssh/id_canary",
    "data dir": "{data}/canary.txt",
    "store": "{data}/passepartout.sqlite3",
    "config": "{config}",
    "REPL socket": "{socket}",
    "daemon's /proc entry": "/proc/{pid}/environ",
}


def probe_command(d):
    config = d["env"].config
    values = {"home": d["home"], "data": config["data_dir"], "config": config["config_path"],
              "socket": d["server"].path, "pid": os.getpid()}
    # "SE""EN" so that the sandbox's own command line, visible in its /proc, does not match
    lines = [f'test -e "{path.format(**values)}" && echo "SE""EN {name}"' for name, path in PROBES.items()]
    return "\n".join(lines + ["for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < \"$f\" 2>/dev/null | cut -c1-300; echo; done",
                              "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'",
                              "env", "true"])


def test_without_the_sandbox_the_canaries_are_in_reach(daemon):
    """The control for the test below: unboxed, the same probes see everything."""
    out = output(shell(unboxed(daemon["ctx"]), probe_command(daemon)))
    for name in PROBES:
        if name != "daemon's /proc entry" or os.path.exists(f"/proc/{os.getpid()}/environ"):
            assert f"SEEN {name}" in out, out
    assert OWN_CMDLINE in out, "the daemon's command line is visible without a sandbox"


def test_the_sandbox_hides_home_daemon_files_socket_and_processes(daemon):
    need_bwrap()
    r = shell(daemon["ctx"], probe_command(daemon))
    out = output(r)
    assert proto_get(r, kw("status")) == kw("ok"), r
    for name in PROBES:
        assert f"SEEN {name}" not in out, f"{name} is visible in the sandbox:\n{out}"
    assert OWN_CMDLINE not in out, f"the daemon's process is visible:\n{out}"
    assert SECRET not in out and "CANARY_API_KEY" not in out, out
    assert f"{MARKER}=1" in out, out


def test_the_home_folder_is_empty_but_for_the_listed_paths(daemon):
    need_bwrap()
    out = output(shell(daemon["ctx"], 'echo "HOME=$HOME"; ls -A "$HOME"; cat "$HOME/.gitconfig";'
                                      ' echo x > "$HOME/.gitconfig" || echo READ-ONLY'))
    assert f"HOME={daemon['home']}" in out, out
    listed = [line for line in out.splitlines() if line and not line.startswith(("HOME=", "[", "\t"))]
    assert ".ssh" not in listed and ".gitconfig" in listed, out
    assert "name = canary" in out and "READ-ONLY" in out, out
    assert (daemon["home"] / ".gitconfig").read_text().startswith("[user]")


def test_the_workspace_and_a_private_temp_are_writable(daemon):
    need_bwrap()
    name = f"pp-sandbox-{uuid.uuid4().hex}"
    r = shell(daemon["ctx"], f'echo ws > made.txt && echo tmp > /tmp/{name} && echo t2 > "$TMPDIR/{name}.2"'
                             f' && cat /tmp/{name} "$TMPDIR/{name}.2" && echo "TMPDIR=$TMPDIR"'
                             ' && touch /usr/x 2>/dev/null || echo SYSTEM-READ-ONLY')
    out = output(r)
    assert "tmp\nt2" in out and "SYSTEM-READ-ONLY" in out, r
    assert (daemon["ws"] / "made.txt").read_text() == "ws\n"
    assert not Path(f"/tmp/{name}").exists(), "the sandbox's /tmp is not private"
    assert not os.path.exists("/usr/x")


def test_a_read_only_worker_sees_the_workspace_and_changes_nothing(daemon):
    need_bwrap()
    ws = daemon["ws"]
    (ws / "notes.txt").write_text("kept\n")
    worker = K("depth", 1, "known", [], "id", "w1", "tools", ["shell:read-only", "read-file"])
    ctx = proto_put(daemon["ctx"], kw("workers"), worker)
    r = shell(ctx, "cat notes.txt; (echo more >> notes.txt) 2>/dev/null && echo CHANGED || echo HELD;"
                   " (rm notes.txt) 2>/dev/null || echo KEPT; touch /tmp/scratch && echo TEMP-OK")
    out = output(r)
    assert "kept" in out and "HELD" in out and "KEPT" in out and "TEMP-OK" in out, r
    assert "CHANGED" not in out, out
    assert (ws / "notes.txt").read_text() == "kept\n", "a read-only worker changed the workspace"
    # the same command from the conversation itself may write
    r = shell(daemon["ctx"], "(echo more >> notes.txt) && echo CHANGED")
    assert "CHANGED" in output(r), r


def test_what_the_persons_tools_run_later_is_read_only_in_the_box(daemon):
    need_bwrap()
    ws = daemon["ws"]
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "objects").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / ".envrc").write_text("export A=1\n")
    r = shell(daemon["ctx"], "for f in .git/hooks/pre-commit .git/config .envrc .git/objects/x; do"
                             " (echo 'touch /tmp/pwned' >> $f) 2>/dev/null && echo wrote $f || echo kept $f; done")
    out = output(r)
    assert "kept .git/hooks/pre-commit" in out and "kept .git/config" in out and "kept .envrc" in out, out
    assert "wrote .git/objects/x" in out, out
    assert not (ws / ".git" / "hooks" / "pre-commit").exists(), "a hook was planted"
    assert (ws / ".git" / "config").read_text() == "[core]\n", "git's config was changed"
    assert (ws / ".envrc").read_text() == "export A=1\n", ".envrc was changed"


def test_a_timeout_kills_everything_in_the_sandbox(daemon):
    need_bwrap()
    tag = f"30.{uuid.uuid4().int % 10**9}"
    r = shell(proto_put(daemon["ctx"], kw("limits"), K("shell-timeout", 1, "output-limit", 1000)),
              f"sleep {tag} & sleep {tag}")
    assert proto_get(r, kw("timed-out")) is True, r
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and sleepers(tag):
        time.sleep(0.05)
    assert not sleepers(tag), "a sleep outlived the sandbox"


def sleepers(tag):
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if f"sleep\0{tag}".encode() in (p / "cmdline").read_bytes():
                    stat = (p / "stat").read_text()
                    if stat.rsplit(")", 1)[1].split()[0] != "Z":
                        found.append(p.name)
            except OSError:
                pass
    return found


# * Network as a capability

@pytest.fixture
def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    stop = threading.Event()

    def accept():
        s.settimeout(0.2)
        while not stop.is_set():
            try:
                c, _ = s.accept()
                c.close()
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield s.getsockname()[1]
    stop.set()
    t.join()
    s.close()


def connects(ctx, port, cmd_prefix=""):
    py = system_python()
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), 3); print('CONNECTED')"
    out = output(shell(ctx, f'{cmd_prefix}{py} -c "{code}" 2>&1; echo ---; cat /proc/net/dev'))
    return "CONNECTED" in out, out


def test_the_network_is_off_by_default(daemon, listener):
    need_bwrap()
    ok, out = connects(daemon["ctx"], listener)
    assert not ok, out
    table = out.split("---", 1)[1].splitlines()
    interfaces = [line.split(":")[0].strip() for line in table if ":" in line and "|" not in line]
    assert interfaces == ["lo"], out
    ok, out = connects(unboxed(daemon["ctx"]), listener)
    assert ok, f"the listener is reachable from the host: {out}"


def test_an_approved_action_gets_no_network_of_its_own_and_network_on_the_hosts(daemon, listener):
    """A person's approval lets the hosts on the command line through the egress
    proxy (tests/test_egress.py), never the network itself: only the explicit
    opt-out, network = "on", shares the host's."""
    need_bwrap()
    ctx = daemon["ctx"]
    ok, out = connects(proto_put(ctx, kw("approved"), True), listener)
    assert not ok, out
    on = proto_put(ctx, kw("sandbox"), proto_put(proto_get(ctx, kw("sandbox")), kw("network"), "on"))
    assert connects(on, listener)[0]
    off = proto_put(ctx, kw("sandbox"), proto_put(proto_get(ctx, kw("sandbox")), kw("network"), "off"))
    assert not connects(proto_put(off, kw("approved"), True), listener)[0], "network = off is off"


# * Without a sandbox, a person is asked

def shell_proposal(cmd="ls"):
    return K("action", kw("shell"), "cmd", cmd, "explanation", "look")


def test_without_bubblewrap_every_shell_action_escalates(booted):
    env = booted('[sandbox]\nbwrap = "/nonexistent/bwrap"\n')
    status = env.sandbox
    assert proto_get(status, kw("kind")) == "none", status
    assert "/nonexistent/bwrap" in proto_get(status, kw("why")), status
    ctx = context_for(env, "local")
    assert proto_get(ctx, kw("sandbox")) == status, ctx
    v = verify(shell_proposal(), ctx)
    assert proto_get(v, kw("verdict")) == kw("escalate"), v
    assert proto_get(v, kw("gate")) == "sandbox", v
    assert "no sandbox" in proto_get(v, kw("reason")), v
    assert proto_get(verify(K("action", kw("message"), "text", "hi"), ctx), kw("verdict")) == kw("allow")
    # what the policy refuses is still refused for what it does
    v = verify(shell_proposal("rm -rf ~"), ctx)
    assert proto_get(v, kw("verdict")) == kw("reject") and proto_get(v, kw("gate")) != "sandbox", v


def step_proposing(env, proposal, said):
    """One step of ENV in which the person SAID something and the model answers PROPOSAL."""
    env.escalate = escalate
    env.complete = lambda request: K("status", kw("ok"), "provider", "t", "text", proposal)
    return asyncio.run(step(K("type", kw("event"), "source", K("gateway", kw("test"), "chat", "c", "user", "u"),
                              "payload", K("sensor", kw("user-input"), "text", said)), env))


def test_without_bubblewrap_the_loop_asks_the_person(booted):
    env = booted('[sandbox]\nbwrap = "/nonexistent/bwrap"\n')
    out = step_proposing(env, '(:action :shell :cmd "echo ran" :explanation "look")', "run it")
    asks = [s for s in out if proto_get(proto_get(s, kw("payload")) or [], kw("approval"))]
    assert asks, out
    code = proto_get(proto_get(proto_get(asks[0], kw("payload")), kw("approval")), kw("code"))
    assert proto_get(find_approval(env.store, code), kw("state")) == "pending"


def test_mode_off_runs_unsandboxed_on_purpose(booted):
    env = booted('[sandbox]\nmode = "off"\nbwrap = "/nonexistent/bwrap"\n')
    status = env.sandbox
    assert proto_get(status, kw("kind")) == "off", status
    ctx = context_for(env, "local")
    assert proto_get(ctx, kw("sandbox")) == status, ctx
    assert proto_get(verify(shell_proposal(), ctx), kw("verdict")) == kw("allow")
    r = shell(ctx, "echo $PASSEPARTOUT_SANDBOX; ls /proc | grep -c .")
    assert output(r).startswith("1\n"), r
    assert "unconfined" in sandbox_summary(status)


def test_a_context_that_does_not_say_counts_as_no_sandbox(booted):
    env = booted("")
    ctx = list(make_context(workspace=env.config["workspace"], config=env.config, skills=env.skills))
    i = ctx.index(kw("sandbox"))
    del ctx[i:i + 2]
    assert proto_get(verify(shell_proposal(), ctx), kw("verdict")) == kw("escalate")


def test_the_config_checks_the_sandbox_words(tmp_path):
    config = tmp_path / "c.toml"
    for text, part in [('[sandbox]\nmode = "of"\n', "sandbox.mode"),
                       ('[sandbox]\nnetwork = "maybe"\n', "sandbox.network"),
                       ('[sandbox]\nhome_paths = [1]\n', "sandbox.home_paths"),
                       ('[sandbox]\nhome_paths = ".ssh"\n', "sandbox.home_paths"),
                       ('[sandbox]\nallowed_hosts = ["https://pypi.org"]\n', "'https://pypi.org' is not a host"),
                       ('[sandbox]\nallowed_hosts = "pypi.org"\n', "sandbox.allowed_hosts")]:
        config.write_text(text)
        with pytest.raises(ConfigError) as e:
            load_config(str(config), {"HOME": str(tmp_path)})
        assert part in str(e.value), (text, str(e.value))
    config.write_text('[sandbox]\nhome_paths = [".gitconfig", "/etc/x"]\nnetwork = "off"\n')
    got = load_config(str(config), {"HOME": str(tmp_path)})["sandbox"]
    assert got["home_paths"] == [str(tmp_path / ".gitconfig"), "/etc/x"], got
    assert got["network"] == "off" and got["mode"] == "auto", got


# * Which protection is in force

def passepartout(*args, env=None, input="", timeout=120):
    command = [str(BIN / "passepartout")] if (BIN / "passepartout").exists() \
        else [sys.executable, "-m", "passepartout"]
    return subprocess.run(command + list(args), capture_output=True, text=True, env=env,
                          input=input, timeout=timeout)


def cli_home(tmp_path, config_text):
    config = tmp_path / "config.toml"
    config.write_text(config_text)
    return dict(os.environ, PASSEPARTOUT_DATA_DIR=str(tmp_path / "data"),
                PASSEPARTOUT_CONFIG=str(config), HOME=str(tmp_path)), config


def test_doctor_says_which_protection_is_in_force(tmp_path):
    env, _ = cli_home(tmp_path, '[sandbox]\nbwrap = "/nonexistent/bwrap"\nnetwork = "off"\n')
    out = passepartout("doctor", env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {line.split("  ")[0]: line for line in out.stdout.splitlines()}
    assert set(rows) >= {"config", "data dir", "REPL socket", "sandbox", "gateways"}, out.stdout
    assert " warn " in rows["sandbox"] and "every shell action asks a person" in rows["sandbox"], out.stdout
    assert "network = off" in rows["sandbox"], out.stdout
    assert "terminal" in rows["gateways"], out.stdout


def test_doctor_reports_the_sandbox_when_it_works(tmp_path):
    need_bwrap()
    env, _ = cli_home(tmp_path, "")
    out = passepartout("doctor", env=env)
    line = next(l for l in out.stdout.splitlines() if l.startswith("sandbox"))
    assert " ok " in line and "bubblewrap" in line, out.stdout


def test_doctor_warns_loudly_when_the_network_is_the_hosts(tmp_path):
    need_bwrap()
    env, _ = cli_home(tmp_path, '[sandbox]\nnetwork = "on"\n')
    out = passepartout("doctor", env=env)
    line = next(l for l in out.stdout.splitlines() if l.startswith("sandbox"))
    assert " warn " in line and "NETWORK ON" in line, out.stdout
    env, _ = cli_home(tmp_path, "")
    line = next(l for l in passepartout("doctor", env=env).stdout.splitlines() if l.startswith("sandbox"))
    assert "egress proxy" in line and "NETWORK ON" not in line, line


def test_doctor_fails_on_a_broken_config(tmp_path):
    env, _ = cli_home(tmp_path, '[sandbox]\nmode = "sometimes"\n')
    out = passepartout("doctor", env=env)
    assert out.returncode == 1 and "fail" in out.stdout and "sandbox.mode" in out.stdout, out.stdout


def test_verify_says_what_is_in_force(tmp_path):
    proposal = '(:action :shell :cmd "ls" :explanation "look")'
    env, _ = cli_home(tmp_path, '[sandbox]\nbwrap = "/nonexistent/bwrap"\n')
    out = passepartout("verify", "-", "--workspace", str(tmp_path), env=env, input=proposal)
    (got,) = [json.loads(l) for l in out.stdout.splitlines()]
    assert got["verdict"] == "escalate" and got["gate"] == "sandbox", got
    env, _ = cli_home(tmp_path, '[sandbox]\nmode = "off"\n')
    out = passepartout("verify", "-", "--workspace", str(tmp_path), env=env, input=proposal)
    assert json.loads(out.stdout)["verdict"] == "allow", out.stdout


def test_the_chat_banner_says_which_protection_is_in_force(tmp_path):
    env, _ = cli_home(tmp_path, '[sandbox]\nbwrap = "/nonexistent/bwrap"\n')
    out = passepartout("chat", env=env)
    assert "Protection: no sandbox" in out.stdout, out.stdout + out.stderr


def test_the_daemon_says_which_protection_is_in_force_at_start(tmp_path, short):
    env, config = cli_home(tmp_path, '[gateways.terminal]\nenabled = false\n'
                                     '[sandbox]\nbwrap = "/nonexistent/bwrap"\n')
    env["PASSEPARTOUT_RUNTIME_DIR"] = str(short / "run")
    log = tmp_path / "data" / "logs" / "daemon.log"
    with open(tmp_path / "out", "w+") as out:
        p = subprocess.Popen([str(BIN / "passepartout"), "daemon"], env=env, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while not (log.exists() and "daemon started" in log.read_text()):
                assert p.poll() is None and time.monotonic() < deadline, (tmp_path / "out").read_text()
                time.sleep(0.1)
        finally:
            p.terminate()
            p.wait(30)
        said = (tmp_path / "out").read_text()
    assert "protection: no sandbox" in said and "asks a person" in said, said
    assert "protection: no sandbox" in log.read_text()


# * Telling an action from a person

def test_a_process_is_known_by_its_marker_and_its_ancestors():
    assert in_action_process(os.getpid()) is None
    assert inside_action() is None
    env = dict(os.environ, **{MARKER: "1"})
    child = subprocess.Popen(["/bin/sh", "-c", f"env -u {MARKER} sleep 30 & echo $!; wait"],
                             env=env, stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(child.stdout.readline())
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{grandchild}/cmdline").read_bytes().startswith(b"sleep"):
            assert time.monotonic() < deadline, "env never ran sleep"
            time.sleep(0.01)
        assert "started with" in (in_action_process(child.pid) or ""), "the marked shell"
        why = in_action_process(grandchild)
        assert why and f"ancestor {child.pid}" in why, why
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_a_process_in_another_pid_namespace_is_an_action(tmp_path):
    status = need_bwrap()
    ctx = make_context(workspace=str(tmp_path), sandbox=status)
    argv = sandbox_argv(status, ctx, ["/bin/sh", "-c", "sleep 30"], {"PATH": "/usr/bin:/bin"})
    proc = subprocess.Popen(argv, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        inner = []
        while not inner and time.monotonic() < deadline:
            inner = [int(p) for p in sleepers_of(proc.pid)]
            time.sleep(0.02)
        assert inner, "the sandboxed sleep was not found"
        why = in_action_process(inner[0])
        assert why and "pid namespace" in why, why
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def sleepers_of(pid):
    """Pids of `sleep 30` processes descending from PID."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if (p / "cmdline").read_bytes() != b"sleep\x0030\x00":
                continue
            q = int(p.name)
            while q > 1:
                q = int((Path("/proc") / str(q) / "stat").read_text().rsplit(")", 1)[1].split()[1])
                if q == pid:
                    found.append(p.name)
                    break
        except (OSError, ValueError):
            pass
    return found


RAW_CLIENT = """import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(json.dumps({"forms": sys.argv[2], "timeout": 5}).encode() + b"\\n")
s.shutdown(socket.SHUT_WR)
print(s.makefile().read())
"""


def test_the_repl_refuses_a_caller_inside_an_action(daemon, short):
    """The socket is made reachable from the workspace (a misconfigured sandbox);
    the REPL still refuses, sandboxed or not, marker unset or not."""
    py = system_python()
    env = daemon["env"]
    sock = daemon["ws"] / "run" / "repl.sock"
    sock.parent.mkdir(mode=0o700)
    server = ReplThread(env, path=str(sock))
    client = daemon["ws"] / "client.py"
    client.write_text(RAW_CLIENT)
    ran = short / "ran"
    form = f'(.write-text (hy.I.pathlib.Path "{ran}") "x")'
    try:
        control = subprocess.run([py, str(client), str(sock), "(+ 1 2)"], capture_output=True,
                                 text=True, timeout=60)
        assert json.loads(control.stdout)["value"] == "3", control
        ctxs = [("unsandboxed", unboxed(daemon["ctx"]))]
        if proto_get(env.sandbox, kw("kind")) == "bubblewrap":
            ctxs.append(("sandboxed", daemon["ctx"]))
        elif os.environ.get("CI"):
            pytest.fail("bubblewrap is missing in CI")
        for name, ctx in ctxs:
            for prefix in ["", f"env -u {MARKER} "]:
                r = shell(ctx, f"{prefix}{py} client.py run/repl.sock '{form}'")
                answer = json.loads(output(r))
                assert answer["ok"] is False and "inside" in answer["error"], (name, prefix, answer)
                assert not ran.exists(), f"a form ran from inside an action ({name})"
    finally:
        server.stop()
    refused = [proto_get(proto_get(e, kw("data")), kw("refused"))
               for e in events(env.store, kind="repl", limit=None)]
    assert any(r and "inside an action" in r for r in refused), refused


def test_the_repl_client_refuses_inside_an_action(daemon):
    r = shell(unboxed(daemon["ctx"]), f"{sys.executable} -S {ROOT / 'bin' / 'repl'} "
                                      f"--socket {daemon['server'].path} '(+ 1 2)'; echo exit=$?")
    assert "refused" in output(r) and "exit=1" in output(r), r


def test_the_approvals_command_refuses_inside_an_action(booted, tmp_path):
    env = booted("")
    out = step_proposing(env, '(:action :write-file :path ".env" :content "A=1" :explanation "keep")', "save it")
    (ask,) = [s for s in out if proto_get(proto_get(s, kw("payload")) or [], kw("approval"))]
    code = proto_get(proto_get(proto_get(ask, kw("payload")), kw("approval")), kw("code"))
    config = tmp_path / "person.toml"
    config.write_text(f'data_dir = "{env.config["data_dir"]}"\n')
    command = [str(BIN / "passepartout"), "--config", str(config), "approvals"]
    person = subprocess.run(command + ["list"], capture_output=True, text=True, timeout=120)
    assert person.returncode == 0 and code in person.stdout, person
    ctx = unboxed(context_for(env, "local"))
    for prefix in ["", f"env -u {MARKER} "]:
        r = shell(ctx, f"{prefix}{' '.join(command)} approve {code}; echo exit=$?")
        assert "refused" in output(r) and "exit=1" in output(r), r
        assert proto_get(find_approval(env.store, code), kw("state")) == "pending"
    assert not (Path(env.config["workspace"]) / ".env").exists()
