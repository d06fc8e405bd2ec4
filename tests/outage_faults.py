"""The daemon as a process, riding out outages without losing a reply.

    send_outage    every send to the chat service fails (HTTP 500) for SECONDS
                   while people go on talking, on Telegram and on Signal: how
                   many replies never arrived, how many twice, whether each
                   chat kept its order, and how long after the service came
                   back the last one arrived
    disk_full      the file system of the daemon's data dir (a tmpfs of its
                   own, in a user and mount namespace made with `unshare`) is
                   filled for SECONDS mid-load, then freed: the same counts,
                   and whether the daemon that answers is still the one that
                   was started (no restart)
    sigterm_grace  50 chats × 20 messages, each with a shell action before
                   its answer; the daemon is sent SIGTERM with a short
                   shutdown grace at a random moment and started again:
                   messages lost, actions run twice, actions cut off (their
                   person told)

Run `python tests/outage_faults.py [send|disk|sigterm]` for the figures
(all three without an argument).
"""
import errno
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import hy  # noqa: F401
from bot_api_server import (ServerProcess, conversation, daemon_command, daemon_environ,
                            echo_openai_server, echo_providers, judge, run_killed, say_all, start_daemon,
                            write_config)
import signal_faults
from signal_server import SignalServer


def _stop(proc, wait=60):
    """SIGTERM PROC; its exit status (killed if it has not exited within WAIT s)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(10)


def _clean_up(proc, out, model, server, folder):
    if proc.poll() is None:
        proc.kill()
    out.close()
    model.gate.set()
    model.stop()
    server.stop()
    shutil.rmtree(folder, ignore_errors=True)


def _caught_up(score, back, wait):
    """Wait up to WAIT s until SCORE() has nothing lost; the seconds from BACK
    (when the service came back) to then, and SCORE() a second later, when a
    duplicate would have arrived."""
    _wait_until(lambda: score()["lost"] == 0, wait)
    caught_up = time.monotonic()
    time.sleep(1.0)
    return max(0.0, caught_up - back), score()


def _wait_until(predicate, timeout):
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.05)


def _tail(path, n=3000):
    try:
        return Path(path).read_text()[-n:]
    except OSError:
        return ""


# * Telegram: sendMessage fails for a while

def telegram_send_outage(seconds=60.0, chats=10, per_chat=10, timeout=600.0):
    """Half of each chat's messages answered, then sendMessage answers 500 for
    SECONDS while the other half is said. A dict of judge's counts, `catch_up`
    (seconds from the end of the outage to the last reply) and `exit`."""
    server = ServerProcess()
    model = echo_openai_server()
    folder = Path(tempfile.mkdtemp(prefix="passepartout-telegram-outage-"))
    talk = conversation(chats, per_chat)
    half = per_chat // 2
    config = write_config(folder, server, list(talk), providers=echo_providers(model))
    out = open(folder / "daemon.out", "w+")
    proc = start_daemon(config, daemon_environ(folder), out)
    try:
        say_all(server, {c: t[:half] for c, t in talk.items()})
        assert server.wait_for(lambda: server.answered() >= chats * half, 120), \
            ("the first half was not answered", _tail(folder / "daemon.out"))
        server.outage("sendMessage", "500", seconds)
        back = time.monotonic() + seconds
        say_all(server, {c: t[half:] for c, t in talk.items()})
        catch_up, result = _caught_up(lambda: judge(server, talk), back, seconds + timeout)
        result.update(catch_up=catch_up, total=chats * per_chat, exit=_stop(proc),
                      failed_sends=sum(1 for _ in server.requests("sendMessage")) - server.answered())
        return result
    finally:
        _clean_up(proc, out, model, server, folder)


# * Signal: /v2/send fails for a while

def signal_send_outage(seconds=60.0, messages=100, timeout=600.0):
    """The first half of MESSAGES from ten people answered, then /v2/send
    answers 500 for SECONDS while the other half is said. The same dict as
    telegram_send_outage."""
    server = SignalServer(account=signal_faults.ACCOUNT)
    model = echo_openai_server()
    folder = Path(tempfile.mkdtemp(prefix="passepartout-signal-outage-"))
    config = signal_faults.write_config(folder, server, model)
    people = signal_faults.PEOPLE
    said = [(people[i % len(people)], f"message {i}") for i in range(messages)]
    half = messages // 2
    out = open(folder / "daemon.out", "w+")
    proc = start_daemon(config, daemon_environ(folder), out)

    def got(who):
        return [s["message"] for s in list(server.sent) if s["recipients"] == [who]]

    def score():
        lost = duplicated = 0
        order_kept = True
        for who in people:
            want = ["echo: " + t for w, t in said if w == who]
            have = got(who)
            lost += sum(1 for w in want if w not in have)
            duplicated += sum(have.count(w) - 1 for w in want if have.count(w) > 1)
            firsts = list(dict.fromkeys(h for h in have if h in want))
            order_kept = order_kept and firsts == [w for w in want if w in have]
        return {"lost": lost, "duplicated": duplicated, "order_kept": order_kept}

    try:
        assert server.wait_for(lambda: server.paths("receive"), 60), ("the daemon never polled", _tail(folder / "daemon.out"))
        server.queue(*[server.message(who, t) for who, t in said[:half]])
        assert server.wait_for(lambda: len(server.sent) >= half, 120), \
            ("the first half was not answered", _tail(folder / "daemon.out"))
        server.outage("send", "500", seconds)
        back = time.monotonic() + seconds
        server.queue(*[server.message(who, t) for who, t in said[half:]])
        catch_up, result = _caught_up(score, back, seconds + timeout)
        result.update(catch_up=catch_up, total=messages, exit=_stop(proc),
                      failed_sends=len(server.paths("send")) - len(server.sent))
        return result
    finally:
        _clean_up(proc, out, model, server, folder)


# * The disk fills up

def _fill(path):
    """Write PATH until its file system is full; the bytes written."""
    written = 0
    chunk = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                written += f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return written
                chunk = chunk[:len(chunk) // 2]


def disk_full(seconds=10.0, chats=10, per_chat=12, size_mb=64, timeout=300.0):
    """The daemon with its data dir on a tmpfs of SIZE_MB of its own: a third
    of each chat's messages answered; the next third said and the tmpfs filled
    at once, while they are being answered; the last third said over the next
    SECONDS / 2; and the tmpfs freed SECONDS after it was filled. The model
    holds its answers to the second third until the tmpfs is full, so that
    every chat has a step in flight when the disk fills.
    A dict of judge's counts, `catch_up` (seconds from freeing to the last
    reply), `errors` (replies that say "Internal error"), `same_daemon` and
    `exit`."""
    if not shutil.which("unshare"):
        raise RuntimeError("disk_full needs unshare (util-linux)")
    server = ServerProcess()
    model = echo_openai_server()
    folder = Path(tempfile.mkdtemp(prefix="passepartout-disk-full-"))
    (folder / "data").mkdir()
    talk = conversation(chats, per_chat)
    third = per_chat // 3
    config = write_config(folder, server, list(talk), providers=echo_providers(model))
    command = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
               f'mount -t tmpfs -o size={size_mb}m tmpfs "$0" && exec "$@"', str(folder / "data"),
               *daemon_command(config)]
    out = open(folder / "daemon.out", "w+")
    proc = subprocess.Popen(command, env=daemon_environ(folder), stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    inside = Path(f"/proc/{proc.pid}/root") / str(folder / "data").lstrip("/")
    try:
        say_all(server, {c: t[:third] for c, t in talk.items()})
        assert server.wait_for(lambda: server.answered() >= chats * third, 120), \
            ("the first third was not answered", _tail(folder / "daemon.out"))
        filler = inside / "filler"
        model.limit = model.admitted
        say_all(server, {c: t[third:2 * third] for c, t in talk.items()})
        # as many as hold a model slot (four by default) wait in the model
        server.wait_for(lambda: model.admitted >= model.limit + min(chats, 4), 20)
        filled = _fill(filler)
        full_at = time.monotonic()
        model.gate.set()
        rest = {c: t[2 * third:] for c, t in talk.items()}
        for i in range(per_chat - 2 * third):
            say_all(server, {c: [t[i]] for c, t in rest.items()})
            time.sleep(seconds / 2 / (per_chat - 2 * third))
        answered_while_full = server.answered() - chats * third
        time.sleep(max(0.0, full_at + seconds - time.monotonic()))
        filler.unlink()
        freed = time.monotonic()
        catch_up, result = _caught_up(lambda: judge(server, talk), freed, timeout)
        texts = [t for c in talk for t in server.texts(c)]
        result.update(catch_up=catch_up, filled_mb=round(filled / 2 ** 20, 1),
                      answered_while_full=answered_while_full, total=chats * per_chat,
                      errors=sum("Internal error" in t for t in texts),
                      silent_chats=sum(1 for c in talk if not any(("echo: " + t) in server.texts(c)
                                                                  for t in talk[c][2 * third:])),
                      same_daemon=proc.poll() is None, exit=_stop(proc),
                      log=_tail(folder / "daemon.out", 6000))
        return result
    finally:
        _clean_up(proc, out, model, server, folder)


# * SIGTERM with a short grace

def sigterm_grace(trials=3, chats=50, per_chat=20, grace=0.5, seed=None):
    """TRIALS runs of the acting 50 × 20 load, the daemon sent SIGTERM with a
    shutdown grace of GRACE seconds at a random moment, then started again."""
    rand = random.Random(seed)
    runs = []
    for _ in range(trials):
        at = round(rand.uniform(0.1, 0.9), 2)
        r = run_killed(chats, per_chat, kill_at=at, acting=True, how=signal.SIGTERM, grace=grace)
        shutil.rmtree(r["folder"], ignore_errors=True)
        runs.append(r)
    return runs


def _line(name, r, keys):
    return name + ": " + ", ".join(f"{k.replace('_', ' ')} {r[k]:.1f}" if isinstance(r[k], float)
                                   else f"{k.replace('_', ' ')} {r[k]}" for k in keys)


if __name__ == "__main__":
    which = sys.argv[1:] or ["send", "disk", "sigterm"]
    if "send" in which:
        r = telegram_send_outage()
        print(_line(f"telegram, sendMessage failing 60 s, {r['total']} messages", r,
                    ["lost", "duplicated", "order_kept", "failed_sends", "catch_up", "exit"]))
        r = signal_send_outage()
        print(_line(f"signal, /v2/send failing 60 s, {r['total']} messages", r,
                    ["lost", "duplicated", "order_kept", "failed_sends", "catch_up", "exit"]))
    if "disk" in which:
        r = disk_full()
        print(_line(f"disk full 10 s mid-load, {r['total']} messages", r,
                    ["lost", "duplicated", "unexpected", "errors", "silent_chats", "answered_while_full",
                     "catch_up", "same_daemon", "exit"]))
    if "sigterm" in which:
        for n, r in enumerate(sigterm_grace(), 1):
            print(_line(f"SIGTERM with a 0.5 s grace #{n} after {r['killed_at']} of {r['total']} replies", r,
                        ["lost", "run_twice", "cut_off", "duplicated", "unexpected", "first_exit", "exit"]))
