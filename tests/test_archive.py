"""Tests of archiving the journal (archive.org): old events move into
compressed segments beside the store, the chain and the sessions go on across
them, verify/export read through them, a pass killed half-way loses and
doubles nothing, and the daemon's pass runs by the services' clock."""
import asyncio
import json
import lzma
import os
import sqlite3
import subprocess
import sys
import types
from pathlib import Path

import hy  # noqa: F401
import pytest
from hy.models import Keyword

from passepartout import archive
from passepartout.archive import archive_age, archive_journal, archive_pass, archive_service
from passepartout.journal import journal_export, journal_verify, segment_folder, segments
from passepartout.proto import proto_get
from passepartout.records import event_append, kv_get
from passepartout.store import store_open, store_path_for
from passepartout.task import event_record, write_records

BIN = Path(sys.executable).parent
DAY = 86400.0


def k(name):
    return Keyword(name)


def plist(**kv):
    out = []
    for key, v in kv.items():
        out += [k(key.replace("_", "-")), v]
    return out


def a_task(store, session="s", task="t1", ts=None):
    """Four turns of one task, at TS (seconds since the epoch) when given."""
    records = [event_record("input", session, plist(text="list the files", task=task)),
               event_record("outcome", session, plist(verdict=k("allow"), task=task,
                                                     action=plist(action=k("shell"), cmd="ls"))),
               event_record("result", session, plist(task=task, step=0, result=plist(status=k("ok")))),
               event_record("answer", session, plist(text="two files", task=task))]
    for r in records:
        with store.transaction():
            write_records(store, [r], ts=ts) if ts is not None else write_records(store, [r])


def verdict(store):
    v = journal_verify(store)
    return {key.name: v for key, v in zip(v[::2], v[1::2])}


def exported(store):
    return [json.loads(line) for line in journal_export(store)]


def cli(home, *args):
    command = [str(BIN / "passepartout")] if (BIN / "passepartout").exists() \
        else [sys.executable, "-m", "passepartout"]
    return subprocess.run(command + list(args), capture_output=True, text=True, env=home, timeout=120)


def test_an_age_is_read_or_refused():
    assert archive_age("30d") == 30 * DAY and archive_age("2 weeks") == 14 * DAY
    assert archive_age("off") is None and archive_age("") is None
    with pytest.raises(ValueError, match="no age"):
        archive_age("soon")


def test_old_turns_move_to_a_segment_and_the_journal_reads_the_same(tmp_path):
    with store_open(store_path_for(tmp_path)) as store:
        for day in range(3):
            a_task(store, session="s", task=f"t{day}", ts=1000 + day * DAY)
        event_append(store, "note", "s", plist(text="a plain event"), ts=1000 + 2 * DAY)
        before = exported(store)
        r = archive_journal(store, 1000 + 2 * DAY, now=1000 + 3 * DAY)
        assert proto_get(r, k("turns")) == 8 and proto_get(r, k("segments")) == 1, r
        live = store.query("SELECT COUNT(*) FROM events")[0][0]
        assert live == 5, f"the third day's four turns and the plain event stay: {live}"
        files = list(segment_folder(store).glob("events-*.jsonl.xz"))
        assert all(f.stat().st_mode & 0o777 == 0o600 for f in files), "a segment is private, as the store is"
        assert len(files) == 1 and len(lzma.open(files[0], "rt").read().splitlines()) == 8, files
        assert exported(store) == before, "export reads the segment first, then the live table"
        assert verdict(store) == {"ok": True, "turns": 12}
        # what is appended next links to the live table's last turn; a new
        # session's clock and a session whose turns were all archived go on
        a_task(store, session="s", task="t9")
        r = archive_journal(store, 1e12)
        assert store.query("SELECT COUNT(*) FROM events") == [(0,)], "everything archived"
        a_task(store, session="s", task="t10")
        ts = exported(store)
    assert verdict_of(tmp_path) == {"ok": True, "turns": 20}
    assert [t["clock"] for t in ts[-5:]] == [16, 17, 18, 19, 20], [t["clock"] for t in ts]
    assert ts[-4]["prev"] == ts[-5]["hash"] and ts[-4]["parents"] == [ts[-5]["id"]], ts[-5:]


def verdict_of(folder):
    with store_open(store_path_for(folder)) as store:
        return verdict(store)


def test_the_store_still_refuses_to_delete_a_live_event_or_a_segment(tmp_path):
    with store_open(store_path_for(tmp_path)) as store:
        a_task(store, ts=1000)
        a_task(store, task="t2", ts=1000 + DAY)
        archive_journal(store, 1000 + DAY)
        for sql in ["DELETE FROM events", "DELETE FROM segments", "UPDATE segments SET head = ''"]:
            with pytest.raises(sqlite3.IntegrityError):
                store.write(sql)
        assert verdict(store) == {"ok": True, "turns": 8}


def test_a_pass_killed_before_it_records_its_segment_loses_and_doubles_nothing(tmp_path):
    """A kill after the segment's file is written and synced, before the
    transaction that records it: the rows are still in the table, the file is
    read by nobody, and the next pass writes it again."""
    with store_open(store_path_for(tmp_path)) as store:
        a_task(store, ts=1000)
        a_task(store, task="t2", ts=1000 + DAY)
        before = exported(store)
        folder = segment_folder(store)
        folder.mkdir()
        archive._write_segment(store, folder, 1, 4)  # the state a kill right after the fsync leaves
        (folder / "events-000000000001-000000000002.jsonl.xz.part").write_bytes(b"half")  # and a kill mid-write
        assert exported(store) == before and verdict(store) == {"ok": True, "turns": 8}
        r = archive_journal(store, 1000 + DAY)
        assert proto_get(r, k("rows")) == 4 and [s["file"] for s in segments(store)] == \
            ["events-000000000001-000000000004.jsonl.xz"], segments(store)
        assert sorted(p.name for p in folder.glob("events-*")) == ["events-000000000001-000000000004.jsonl.xz"]
        assert exported(store) == before and verdict(store) == {"ok": True, "turns": 8}


def test_verify_names_a_missing_or_edited_segment(home, tmp_path):
    path = store_path_for(tmp_path / "data")
    with store_open(path) as store:
        a_task(store, ts=1000)
        a_task(store, task="t2", ts=1000 + DAY)
        archive_journal(store, 1000 + DAY)
        seg = segment_folder(store) / segments(store)[0]["file"]
    r = cli(home, "journal", "verify")
    assert r.returncode == 0 and "8 turns are intact" in r.stdout, (r.stdout, r.stderr)
    text = lzma.open(seg, "rt").read().replace("two files", "six files")
    with lzma.open(seg, "wt") as f:
        f.write(text)
    r = cli(home, "journal", "verify")
    assert r.returncode == 1 and "does not match its hash: it was edited" in r.stdout, (r.stdout, r.stderr)
    seg.unlink()
    r = cli(home, "journal", "verify")
    assert r.returncode == 1 and "of events 1 to 4 is missing" in r.stdout, (r.stdout, r.stderr)


@pytest.fixture
def home(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("")
    return dict(os.environ, PASSEPARTOUT_DATA_DIR=str(tmp_path / "data"),
                PASSEPARTOUT_CONFIG=str(config), HOME=str(tmp_path))


def test_journal_archive_from_the_command_line(home, tmp_path):
    path = store_path_for(tmp_path / "data")
    with store_open(path) as store:
        a_task(store, ts=1000)
        a_task(store, task="t2")
        before = exported(store)
    r = cli(home, "journal", "archive")
    assert r.returncode == 0 and "archived 4 turns (4 events) into 1 segment(s)" in r.stdout, (r.stdout, r.stderr)
    r = cli(home, "journal", "archive", "--older-than", "0s")
    assert r.returncode == 0 and "archived 4 turns" in r.stdout, (r.stdout, r.stderr)
    r = cli(home, "journal", "archive", "--older-than", "soon")
    assert r.returncode == 2 and "no age" in r.stderr, (r.stdout, r.stderr)
    r = cli(home, "journal", "export", "--raw")
    assert [json.loads(line) for line in r.stdout.splitlines()] == before, r.stdout
    r = cli(home, "journal", "verify")
    assert r.returncode == 0 and "8 turns are intact" in r.stdout, (r.stdout, r.stderr)


def test_the_daemons_pass_runs_once_a_day_by_the_services_clock(tmp_path):
    with store_open(store_path_for(tmp_path)) as store:
        now = [1000 + 40 * DAY]
        services = types.SimpleNamespace(store=store, clock=lambda: now[0], config={})
        a_task(store, ts=1000)
        a_task(store, task="t2", ts=now[0] - DAY)
        r = archive_pass(services, 30 * DAY)
        assert proto_get(r, k("turns")) == 4, f"the first pass is due at start: {r}"
        now[0] += DAY - 1
        assert archive_pass(services, 2 * 3600) is None, "not due again within a day"
        now[0] += 1
        r = archive_pass(services, 2 * 3600)
        assert proto_get(r, k("turns")) == 4 and kv_get(store, "journal:last-archive") == now[0], r
        assert verdict(store) == {"ok": True, "turns": 8}


def test_the_service_archives_when_the_daemon_starts_unless_off(tmp_path):
    with store_open(store_path_for(tmp_path)) as store:
        a_task(store, ts=1000)

        async def run(config):
            env = types.SimpleNamespace(store=store, clock=lambda: 1000 + 31 * DAY, config=config)
            task = asyncio.create_task(archive_service(env, None))
            for _ in range(600):
                if task.done() or kv_get(store, "journal:last-archive") is not None:
                    break
                await asyncio.sleep(0.05)
            done = task.done()
            task.cancel()
            return done

        assert asyncio.run(run({"journal": {"archive_after": "off"}})) is True, "off: the service ends"
        assert kv_get(store, "journal:last-archive") is None
        asyncio.run(run({}))
        assert store.query("SELECT COUNT(*) FROM events") == [(0,)], "the default thirty days archived it"
        assert verdict(store) == {"ok": True, "turns": 4}


def test_a_pass_in_another_process_midway_through_a_read_loses_and_doubles_nothing(tmp_path):
    from passepartout.journal import journal_rows
    path = store_path_for(tmp_path)
    with store_open(path) as reader, store_open(path) as daemon:
        a_task(daemon, ts=1000)
        a_task(daemon, task="t2", ts=1000 + DAY)
        a_task(daemon, task="t3", ts=1000 + 2 * DAY)
        archive_journal(daemon, 1000 + DAY)
        rows = journal_rows(reader)
        seen = [next(rows)[0] for _ in range(5)]
        archive_journal(daemon, 1e12)
        seen += [r[0] for r in rows]
        assert seen == list(range(1, 13)), f"every turn once, in order: {seen}"
        assert verdict(reader) == {"ok": True, "turns": 12}


def test_the_file_gives_the_archived_space_back(tmp_path):
    path = store_path_for(tmp_path)
    with store_open(path) as store:
        for n in range(400):
            a_task(store, task=f"t{n}", ts=1000 + n)
        a_task(store, task="last", ts=1000 + DAY)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        before = path.stat().st_size
        archive_journal(store, 1000 + DAY)
        after = path.stat().st_size
        free = store.query("PRAGMA freelist_count")[0][0]
        mode = store.query("PRAGMA auto_vacuum")[0][0]
        assert mode == 2 and free == 0, f"incremental auto-vacuum, no free page left: {mode}, {free}"
        assert after < before / 2, f"the file shrank: {before} -> {after}"
        assert verdict(store) == {"ok": True, "turns": 1604}
