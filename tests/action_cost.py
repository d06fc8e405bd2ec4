"""What the limits and the checkpoints add to a shell action, and what an undo costs.

    .venv/bin/python tests/action_cost.py [--actions 200] [--files 10000] [--mb 200] [--sandbox auto|off]

A workspace of FILES files holding MB megabytes in all is made in a scratch
folder; three daemons share it, each with a data dir of its own:

  bare        no checkpoints, every limit 0, no cgroup (the limits' waiting
              first process is still there: it is measured on its own below)
  limits      the default limits (a cgroup where the machine gives one)
  both        the default limits and checkpoints

Each of ACTIONS rounds runs the same command in each of the three, in turn (so
that a busy moment of the machine falls on all three alike): it appends to a
file of the workspace and creates one. The figures are the wall time of
`act`, p50 and p99, and the differences of the medians; then the checkpoint's
own share (begin and end, timed where they are called), the first checkpoint
(which copies the whole workspace into the mirror), `/undo` and `/undo 10`.
The waiting first process (`read -r go`) is timed apart: the same bubblewrap
command line started with and without it, alternately.
"""
import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import hy  # noqa: F401,E402

from passepartout.act import act  # noqa: E402
from passepartout.providers import make_provider  # noqa: E402
from passepartout.context import context_for  # noqa: E402
from passepartout.daemon import boot, shutdown  # noqa: E402
from passepartout.limits import waiting_argv  # noqa: E402
from passepartout.perceive import perceive  # noqa: E402
from passepartout.proto import proto_get  # noqa: E402
from passepartout.sandbox import sandbox_argv, sandbox_status  # noqa: E402


def kw(name):
    return hy.models.Keyword(name)


def figures(ms):
    ms = sorted(ms)
    return statistics.median(ms), ms[min(len(ms) - 1, int(len(ms) * 0.99))]


def make_workspace(ws, files, mb):
    per_dir = 25
    size = mb * 2**20 // files
    block = os.urandom(size)
    for i in range(files):
        d = ws / f"d{i // (per_dir * 20)}" / f"s{i // per_dir}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i % per_dir}.txt").write_bytes(block)
    (ws / "notes").mkdir()
    (ws / "out").mkdir()


def boot_one(scratch, name, ws, config):
    folder = scratch / name
    folder.mkdir()
    (folder / "config.toml").write_text(config)
    return boot(config_path=str(folder / "config.toml"),
                environ={"PASSEPARTOUT_DATA_DIR": str(folder / "data"), "PASSEPARTOUT_WORKSPACE": str(ws),
                         "HOME": str(folder), "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                providers=[make_provider("symbolic")])


async def shell(env, cmd):
    t = time.perf_counter()
    r = await act([kw("action"), kw("shell"), kw("cmd"), cmd], context_for(env, "cost"))
    ms = (time.perf_counter() - t) * 1000
    assert proto_get(r, kw("status")) == kw("ok"), r
    return ms


async def said(env, text):
    signal = [kw("type"), kw("event"), kw("source"), [kw("gateway"), kw("test"), kw("chat"), "cost"],
              kw("session"), "cost", kw("payload"), [kw("sensor"), kw("user-input"), kw("text"), text]]
    t = time.perf_counter()
    seen = await perceive(signal, context_for(env, "cost"))
    ms = (time.perf_counter() - t) * 1000
    reply = proto_get(proto_get(proto_get(seen, kw("emit"))[0], kw("payload")), kw("text"))
    assert reply.startswith("Undone"), reply
    return ms


def timed(keeper, into):
    for name in ("begin", "end"):
        method = getattr(keeper, name)

        def wrapper(*args, _method=method, _name=name):
            t = time.perf_counter()
            try:
                return _method(*args)
            finally:
                into.setdefault(_name, []).append((time.perf_counter() - t) * 1000)
        setattr(keeper, name, wrapper)


def waiting_cost(ws, rounds):
    """The first process waiting for its limits, against the same command without it."""
    status = sandbox_status({})
    if proto_get(status, kw("kind")) != "bubblewrap":
        argv = ["/bin/sh", "-c", ":"]
    else:
        ctx = [kw("workspace"), str(ws), kw("home"), "/nonexistent-home", kw("temp-dirs"), ["/tmp"],
               kw("limits"), [kw("workspace-quota"), 0, kw("memory"), 0]]
        argv = sandbox_argv(status, ctx, ["/bin/sh", "-c", ":"], {"PATH": "/usr/bin:/bin"})
    waiting = waiting_argv(argv)
    plain, held = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
        plain.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        p = subprocess.Popen(waiting, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
        p.stdin.write(b"go\n")
        p.stdin.close()
        assert p.wait() == 0
        held.append((time.perf_counter() - t) * 1000)
    return figures(plain), figures(held)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=200)
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--sandbox", default="auto", choices=["auto", "off"])
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="pp-cost-"))
    try:
        ws = scratch / "workspace"
        ws.mkdir()
        make_workspace(ws, args.files, args.mb)
        sandbox = f'[sandbox]\nmode = "{args.sandbox}"\n'
        envs = {
            "bare": boot_one(scratch, "bare", ws, sandbox + '[undo]\nenabled = false\n[limits]\nfile_size = 0\n'
                             'workspace_quota = 0\nkeep_free = 0\nprocesses = 0\nmemory = 0\ncpu_time = 0\n'
                             'cgroup = "off"\n'),
            "limits": boot_one(scratch, "limits", ws, sandbox + '[undo]\nenabled = false\n'),
            "both": boot_one(scratch, "both", ws, sandbox),
        }
        print(f"workspace: {args.files} files, {args.mb} MB; protection: "
              f"{proto_get(envs['both'].sandbox, kw('kind'))}; {os.cpu_count()} CPUs; "
              f"load {os.getloadavg()[0]:.1f}")

        async def rounds():
            t = time.perf_counter()
            await shell(envs["both"], "true")
            first = (time.perf_counter() - t) * 1000
            parts = {}
            timed(envs["both"].checkpoints, parts)
            times = {name: [] for name in envs}
            for i in range(args.actions):
                cmd = f"echo {i} >> notes/log.txt; echo {i} > out/{i % 50}.txt"
                for name, env in envs.items():
                    times[name].append(await shell(env, cmd))
            undo1 = await said(envs["both"], "/undo")
            undo10 = await said(envs["both"], "/undo 10")
            return first, parts, times, undo1, undo10

        first, parts, times, undo1, undo10 = asyncio.run(rounds())
        print(f"\nper shell action, {args.actions} actions each (ms):")
        med = {}
        for name, ms in times.items():
            p50, p99 = figures(ms)
            med[name] = p50
            print(f"  {name:8} p50 {p50:7.2f}  p99 {p99:7.2f}")
        pairs = list(zip(times["bare"], times["limits"], times["both"]))
        d_limits = figures([b - a for a, b, _ in pairs])
        d_check = figures([c - b for _, b, c in pairs])
        d_both = figures([c - a for a, _, c in pairs])
        print(f"  added by the limits:      p50 {d_limits[0]:6.2f}  p99 {d_limits[1]:6.2f}  (paired differences)")
        print(f"  added by the checkpoint:  p50 {d_check[0]:6.2f}  p99 {d_check[1]:6.2f}")
        print(f"  added by both:            p50 {d_both[0]:6.2f}  p99 {d_both[1]:6.2f}")
        begin, end = figures(parts["begin"]), figures(parts["end"])
        total = figures([a + b for a, b in zip(parts["begin"], parts["end"])])
        print(f"  the checkpoint itself (begin + end, on its thread): p50 {total[0]:.2f}  p99 {total[1]:.2f}"
              f"  (begin p50 {begin[0]:.2f}, end p50 {end[0]:.2f})")
        (plain, held) = waiting_cost(ws, args.actions)
        print(f"  the waiting first process: p50 {held[0] - plain[0]:.2f} "
              f"(without {plain[0]:.2f}, with {held[0]:.2f}; p99 {plain[1]:.2f} / {held[1]:.2f})")
        print(f"\nthe first checkpoint (the mirror made): {first:.0f} ms")
        print(f"/undo: {undo1:.1f} ms; /undo 10: {undo10:.1f} ms")
        for env in envs.values():
            shutdown(env)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
