"""What the egress proxy costs: per shell action (p50, p99 over N actions with
the proxy and relay, and without: network = "off", for a line that never goes
out and one that may), and per
request (curl to a listener on 127.0.0.2, through the proxy and with the host's
network). Real bubblewrap, real sockets.

    .venv/bin/python tests/egress_figures.py [N]
"""
import asyncio
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import hy  # noqa: F401
from hy.models import Keyword

from passepartout.act import act
from passepartout.providers import make_provider
from passepartout.context import context_for
from passepartout.daemon import boot, shutdown
from passepartout.proto import proto_get, proto_put


def kw(name):
    return Keyword(name)


def serve(sock, size):
    body = b"x" * size
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size + body
    while True:
        try:
            c, _ = sock.accept()
        except OSError:
            return
        def one(c=c):
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
            c.sendall(answer)
            c.close()
        threading.Thread(target=one, daemon=True).start()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main(n=200):
    small = socket.socket()
    small.bind(("127.0.0.2", 0))
    small.listen(64)
    big = socket.socket()
    big.bind(("127.0.0.2", 0))
    big.listen(64)
    threading.Thread(target=serve, args=(small, 100), daemon=True).start()
    threading.Thread(target=serve, args=(big, 50 * 1024 * 1024), daemon=True).start()
    sp, bp = small.getsockname()[1], big.getsockname()[1]
    d = Path(tempfile.mkdtemp(prefix="pp-"))
    (d / "ws").mkdir()
    (d / "config.toml").write_text(f'[sandbox]\nallowed_hosts = ["127.0.0.2:{sp}", "127.0.0.2:{bp}"]\n')
    env = boot(config_path=str(d / "config.toml"),
               environ={"PASSEPARTOUT_DATA_DIR": str(d / "data"), "HOME": str(d),
                        "PASSEPARTOUT_WORKSPACE": str(d / "ws"), "PASSEPARTOUT_RUNTIME_DIR": str(d / "run")},
               providers=[make_provider("symbolic")])
    try:
        ctx = context_for(env, "figures")
        status = proto_get(ctx, kw("sandbox"))
        assert proto_get(status, kw("kind")) == "bubblewrap", status
        modes = {"proxy": ctx,
                 "off": proto_put(ctx, kw("sandbox"), proto_put(status, kw("network"), "off")),
                 "host": proto_put(ctx, kw("sandbox"), proto_put(status, kw("network"), "on"))}

        async def run(c, cmd):
            t = time.perf_counter()
            r = await act([kw("action"), kw("shell"), kw("cmd"), cmd], c)
            return time.perf_counter() - t, r

        async def actions(cmd):
            times = {"proxy": [], "off": []}
            for _ in range(10):
                for m in times:
                    await run(modes[m], cmd)
            for _ in range(n):
                for m in times:
                    times[m].append((await run(modes[m], cmd))[0])
            return times

        # `true` never goes out, so it gets no proxy; `timeout 9 true` may (a
        # launcher), so it gets the proxy and the relay
        for cmd in ["true", "timeout 9 true"]:
            times = asyncio.run(actions(cmd))
            print(f"shell action `{cmd}`, {n} each, interleaved (ms):")
            for m, xs in times.items():
                print(f"  {m:6} p50 {pct(xs, 50) * 1000:6.1f}  p99 {pct(xs, 99) * 1000:6.1f}  "
                      f"mean {statistics.mean(xs) * 1000:6.1f}")
            print(f"  added by the proxy: p50 {(pct(times['proxy'], 50) - pct(times['off'], 50)) * 1000:.1f} ms, "
                  f"p99 {(pct(times['proxy'], 99) - pct(times['off'], 99)) * 1000:.1f} ms")

        k = 50
        loop = f"for i in $(seq {k}); do curl -s -o /dev/null http://127.0.0.2:{sp}/x || exit 1; done"
        direct = f"for i in $(seq {k}); do curl -s --noproxy '*' -o /dev/null http://127.0.0.2:{sp}/x || exit 1; done"
        tunnel = f"for i in $(seq {k}); do curl -s -p -o /dev/null http://127.0.0.2:{sp}/x || exit 1; done"

        async def requests():
            out = {}
            for name, c, cmd in [("through the proxy (GET)", modes["proxy"], loop),
                                 ("through the proxy (CONNECT)", modes["proxy"], tunnel),
                                 ("host network, direct", modes["host"], direct)]:
                best = []
                for _ in range(5):
                    t, r = await run(c, cmd)
                    assert proto_get(r, kw("exit")) == 0, r
                    best.append(t)
                out[name] = statistics.median(best) / k
            bulk = {}
            for name, c, cmd in [("through the proxy", modes["proxy"], f"curl -s -o /dev/null http://127.0.0.2:{bp}/b"),
                                 ("host network", modes["host"], f"curl -s --noproxy '*' -o /dev/null http://127.0.0.2:{bp}/b")]:
                ts = []
                for _ in range(3):
                    t, r = await run(c, cmd)
                    assert proto_get(r, kw("exit")) == 0, r
                    ts.append(t)
                bulk[name] = 50 / statistics.median(ts)
            return out, bulk

        per, bulk = asyncio.run(requests())
        print(f"per request, {k} curls in one action, median of 5 (ms a request, curl's own start included):")
        for name, t in per.items():
            print(f"  {name:28} {t * 1000:6.2f}")
        print(f"  added by the proxy: {(per['through the proxy (GET)'] - per['host network, direct']) * 1000:.2f} ms (GET), "
              f"{(per['through the proxy (CONNECT)'] - per['host network, direct']) * 1000:.2f} ms (CONNECT)")
        print("50 MiB download, median of 3 (MiB/s):")
        for name, rate in bulk.items():
            print(f"  {name:28} {rate:7.0f}")
    finally:
        shutdown(env)
        small.close()
        big.close()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
