"""The store's figures (issue 20, "a store that keeps its size"), run as a script:

    python tests/store_figures.py [--quick] [--json]

- bytes per message: the Telegram load (50 chats × 20 messages, 10 × 20 with
  --quick; the real Telegram client against the Bot API server, the real
  cascade against the echo OpenAI server, a shell action noted per message
  before the answer), then the store's pages by table (SQLite's dbstat) over
  the messages;
- a simulated month: the same kind of turns written for 30 days by an injected
  clock, archived every day with [journal] archive_after = "1d"; the store's
  size at the end against the same month never archived, and the journal
  still verified across segments.

Prints one JSON row per line: [name, value, unit, goal] (as tests/bench_rows.py).
"""
import asyncio
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def table_bytes(path):
    """{table or index: bytes} of the SQLite file PATH, by dbstat (after a checkpoint)."""
    conn = sqlite3.connect(str(path))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = conn.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    finally:
        conn.close()
    return dict(rows)


def run_load(chats, per_chat, timeout=600.0):
    """The acting Telegram load, as tests/bot_api_server.py's kill figures run
    it without the kill: the daemon as a process, the real cascade against the
    echo OpenAI server, each message noted in the workspace's ledger by a shell
    action before it is answered; stopped with SIGTERM once every message is
    answered. The run's folder and the judge's counts."""
    import signal
    import bot_api_server as b

    server = b.BotAPIServer()
    model = b.echo_openai_server()
    model.acting = True
    folder = Path(tempfile.mkdtemp(prefix="passepartout-store-"))
    talk = b.conversation(chats, per_chat)
    config = b.write_config(folder, server, list(talk), providers=b.echo_providers(model))
    out = open(folder / "daemon.out", "w+")
    proc = None
    try:
        b.say_all(server, talk)
        proc = b.start_daemon(config, b.daemon_environ(folder), out)
        ledger = folder / "workspace" / "ledger.txt"
        server.wait_for(lambda: b.judge_acting(server, talk, ledger)["lost"] == 0, timeout)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        return folder, b.judge_acting(server, talk, ledger)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        out.close()
        model.stop()
        server.stop()


def bytes_per_message(chats=10, per_chat=20):
    folder, judged = run_load(chats, per_chat)
    store = folder / "data" / "passepartout.sqlite3"
    tables = table_bytes(store)
    conn = sqlite3.connect(str(store))
    kinds = conn.execute("SELECT kind, COUNT(*), SUM(LENGTH(data)) FROM events GROUP BY kind ORDER BY 3 DESC").fetchall()
    conn.close()
    n = chats * per_chat
    import hy  # noqa: F401
    from passepartout.journal import outcome_data
    from passepartout.records import data_print, data_read
    from passepartout.store import store_open
    with store_open(store) as opened:
        stored = [d for (d,) in opened.query("SELECT data FROM events WHERE kind = 'outcome'")]
        outcomes = {"stored": sum(len(d.encode()) for d in stored),
                    "recorded": sum(len(data_print(outcome_data(data_read(d), opened)).encode()) for d in stored)}
    return {"outcomes": outcomes, "messages": n, "judged": judged, "file": store.stat().st_size,
            "tables": tables, "kinds": kinds, "per_message": sum(tables.values()) / n, "folder": str(folder)}


def one_message(store_path):
    """The events of the first message of a run's store: [(kind, session, data
    text)], each outcome as it was recorded (outcome_data), as a daemon hands
    it to the journal."""
    import hy  # noqa: F401
    from passepartout.journal import outcome_data
    from passepartout.records import data_print, data_read
    from passepartout.store import store_open
    with store_open(Path(store_path)) as store:
        (task,) = store.query("SELECT task FROM events WHERE kind = 'input' ORDER BY id LIMIT 1")[0]
        (session,) = store.query("SELECT session FROM events WHERE task = ? LIMIT 1", (task,))[0]
        first, last = store.query("SELECT MIN(id), MAX(id) FROM events WHERE task = ?", (task,))[0]
        rows = store.query("SELECT kind, session, data FROM events WHERE session = ? AND id >= ? AND id <= ? "
                           "AND turn IS NOT NULL ORDER BY id", (session, first, last + 1))
        return [(kind, s, data_print(outcome_data(data_read(d), store)) if kind == "outcome" else d)
                for kind, s, d in rows]


def file_size(path):
    """The store's size on disk after a checkpoint (its file and its log)."""
    conn = sqlite3.connect(str(path))
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return sum(p.stat().st_size for p in Path(path).parent.glob(Path(path).name + "*"))


def simulated_month(template, per_day=300, days=30, archive_after="1d"):
    """Two stores written with the same month of messages (TEMPLATE's events,
    each message's text its own), PER_DAY messages a day, with an injected
    clock: one archived every day by the daemon's pass (archive_after), one
    never. A dict of their sizes, the segments' size and the verdicts."""
    import types
    import hy  # noqa: F401
    from hy.models import Keyword
    from passepartout.archive import archive_age, archive_pass
    from passepartout.journal import journal_append, journal_verify, segment_folder
    from passepartout.records import data_read
    from passepartout.store import store_open, store_path_for

    said = "chat 5001 message 0"
    out = {}
    for archived in (False, True):
        folder = Path(tempfile.mkdtemp(prefix="passepartout-month-"))
        with store_open(store_path_for(folder)) as store:
            now = [1.7e9]
            services = types.SimpleNamespace(store=store, clock=lambda: now[0], config={})
            age = archive_age(archive_after)
            for day in range(days):
                for m in range(per_day):
                    t = 1.7e9 + day * 86400 + m * 86400 / per_day
                    chat = 5001 + m % 50
                    for kind, session, text in template:
                        text = text.replace(said, f"chat {chat} message {day}-{m}")
                        with store.transaction():
                            journal_append(store, [Keyword("event"), kind, Keyword("session"), f"telegram:{chat}",
                                                   Keyword("data"), data_read(text)], ts=t)
                now[0] = 1.7e9 + (day + 1) * 86400
                if archived:
                    archive_pass(services, age)
            v = journal_verify(store)
            segs = sum(p.stat().st_size for p in segment_folder(store).glob("events-*")) \
                if segment_folder(store).exists() else 0
            live = store.query("SELECT COUNT(*) FROM events")[0][0]
        out["archived" if archived else "kept"] = {
            "store": file_size(store_path_for(folder)), "segments": segs, "live_events": live,
            "verified": bool(v[1]), "turns": v[3] if len(v) > 3 else None}
    out["messages"] = per_day * days
    return out


def rows(quick=False):
    """The figures, as [name, value, unit, goal] rows."""
    load = bytes_per_message(10 if quick else 50, 20)
    month = simulated_month(one_message(Path(load["folder"]) / "data" / "passepartout.sqlite3"),
                            per_day=100 if quick else 300)
    n = load["messages"]
    events = sum(v for k, v in load["tables"].items() if k.startswith("events"))
    kept, archived = month["kept"], month["archived"]
    name = f"store, Telegram {n // 20} chats × 20 messages with a shell action each"
    return [
        [f"{name}: bytes per message (every table and index)", round(load["per_message"]), "bytes", "≤ 3000"],
        [f"{name}: bytes per message in the events table and its indexes", round(events / n), "bytes", ""],
        [f"{name}: outcome turns' text per message, stored (as recorded)",
         f"{round(load['outcomes']['stored'] / n)} ({round(load['outcomes']['recorded'] / n)})", "bytes", ""],
        [f"store after a simulated month of {month['messages']} messages, never archived",
         round(kept["store"] / 1e6, 2), "MB", ""],
        [f"store after a simulated month of {month['messages']} messages, archived daily after 1 day",
         round(archived["store"] / 1e6, 2), "MB", ""],
        [f"the month's segments (LZMA) beside it", round(archived["segments"] / 1e6, 2), "MB", ""],
        ["journal verify across the segments and the live table",
         "yes" if archived["verified"] and archived["turns"] == kept["turns"] else "NO", "", "yes"],
    ]


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    if "--load" in sys.argv:
        print(json.dumps(bytes_per_message(10 if quick else 50, 20), indent=1))
    else:
        for row in rows(quick):
            print(json.dumps(row, ensure_ascii=False))
