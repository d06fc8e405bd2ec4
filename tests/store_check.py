"""What the store's check at open costs, and what a backup takes, on a store of realistic size.

    python tests/store_check.py [EVENTS]

builds a store of EVENTS events (100 000 by default: a plist each, a message
and a gate's verdict, as a turn writes) and a tenth as many memory entries,
then times, in ms: store-open (which runs PRAGMA quick_check) against the
same open without it, quick_check alone with the file in the page cache and,
when this process may drop the cache (root on Linux), read from disk; and
passepartout's backup of it.
"""
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hy  # noqa: F401
from hy.models import Keyword as K

from passepartout.records import data_print
from passepartout.backup import store_backup
from passepartout.store import store_close, store_open

WORDS = ("the a to of and in is it you that he was for on are with as I his they be at one have "
         "this from").split()


def build(path, n):
    rand = random.Random(1)

    def text(k):
        return " ".join(rand.choice(WORDS) for _ in range(k))

    store = store_open(path)
    with store.transaction() as conn:
        for i in range(n):
            chat = 5000 + i % 50
            data = [K("signal"), [K("type"), K("event"),
                                  K("source"), [K("gateway"), K("telegram"), K("chat"), chat,
                                                K("user"), chat, K("message"), i],
                                  K("payload"), [K("sensor"), K("user-input"),
                                                 K("text"), text(rand.randint(5, 120))]],
                    K("verdicts"), [[K("gate"), "shell-safety", K("verdict"), K("allow")]]]
            conn.execute("INSERT INTO events (ts, kind, session, data) VALUES (?, ?, ?, ?)",
                          (time.time(), rand.choice(["turn", "reply", "action", "result"]),
                           f"telegram:{chat}", data_print(data)))
        for i in range(n // 10):
            conn.execute("INSERT INTO memory (ts, session, text) VALUES (?, ?, ?)",
                         (time.time(), "s", text(30)))
    store_close(store)


def ms(f, times=3):
    out = []
    for _ in range(times):
        t = time.perf_counter()
        f()
        out.append(1000 * (time.perf_counter() - t))
    return out


def quick_check(path):
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
    finally:
        conn.close()


def open_without_check(path):
    """What store-open does besides the check: the pragmas on an existing file."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA user_version").fetchone()
    conn.close()


def drop_cache():
    try:
        subprocess.run(["sync"], check=True)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def main(n=100_000):
    folder = Path(tempfile.mkdtemp(prefix="passepartout-store-check-"))
    try:
        measure(folder, n)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def measure(folder, n):
    path = folder / "passepartout.sqlite3"
    t = time.perf_counter()
    build(path, n)
    size = path.stat().st_size
    print(f"built {n} events and {n // 10} memory entries in {time.perf_counter() - t:.1f} s: "
          f"{size / 1e6:.1f} MB")
    print("store-open, with quick_check:", [round(x) for x in ms(lambda: store_close(store_open(path)))], "ms")
    print("the same open without it:    ", [round(x, 1) for x in ms(lambda: open_without_check(path))], "ms")
    print("quick_check alone, cached:   ", [round(x) for x in ms(lambda: quick_check(path))], "ms")
    if drop_cache():
        print("quick_check alone, from disk:", [round(x) for x in ms(lambda: quick_check(path), 1)], "ms")
    else:
        print("quick_check from disk: not measured (the page cache can be dropped only by root)")
    store = store_open(path)
    try:
        copies = iter(range(3))
        taken = ms(lambda: store_backup(store, folder / f"backup-{next(copies)}.sqlite3"))
    finally:
        store_close(store)
    print("passepartout backup of it:   ", [round(x) for x in taken], "ms")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
