"""Tests of memory changes and dreaming (memory.hy), /remember, /forget, /memories, /dream."""
import asyncio
import datetime
import os
import subprocess
import sys
import threading
import types
import zoneinfo
from pathlib import Path

import hy  # noqa: F401
import pytest
from hy.models import Keyword

from passepartout.memory import (memory_add, memory_forget, memory_forget_id, dream, memory_history,
                                 memory_revert, near_duplicates, change_line, dream_at, dream_night,
                                 dream_pass, dream_service, dream_summary)
from passepartout.proto import proto_get
from passepartout.store import store_open, store_path_for
from passepartout.records import events, kv_get
from steps import run_task, user_says, text_of

BIN = Path(sys.executable).parent


def K(name):
    return Keyword(name)


def notes(store):
    return [t for (t,) in store.query("SELECT text FROM memory ORDER BY id")]


@pytest.fixture
def store(tmp_path):
    s = store_open(store_path_for(tmp_path))
    yield s
    s.close()


def test_dreaming_merges_forgets_and_marks_stale_and_every_change_can_be_undone(store):
    now = 2_000_000_000.0
    memory_add(store, "Anna's birthday is on the 3rd of March", ts=now - 100)
    memory_add(store, "Anna's birthday is on the 3rd of March, she likes orchids", ts=now - 50)
    memory_add(store, "The boiler is serviced every October", ts=now - 40 * 86400 * 10)
    memory_add(store, "The old flat's door code is 4711", ts=now - 10)
    memory_add(store, "The boiler was serviced by Hamid", ts=now - 5)
    turn, n = memory_forget(store, "door code")
    assert n == 1 and "door code" not in " ".join(notes(store)), notes(store)
    memory_add(store, "The door code of the old flat: 4711", ts=now - 1)  # said again later
    r = dream(store, now=now, stale_days=365)
    assert proto_get(r, K("merged")) == 1 and proto_get(r, K("forgotten")) == 1, r
    assert proto_get(r, K("stale")) == 1, r
    left = notes(store)
    assert "Anna's birthday is on the 3rd of March, she likes orchids" in left, left
    assert "Anna's birthday is on the 3rd of March" not in left, left
    assert not any("door code" in t for t in left), left
    assert store.query("SELECT id FROM memory WHERE stale IS NOT NULL") == [(3,)], "the old note is stale"
    changes = memory_history(store)
    assert [proto_get(c, K("change")) for c in changes] == ["forget", "forget", "merge", "stale"], changes
    merge = changes[2]
    assert "merged into note 2" in change_line(merge) and "[1] Anna's birthday" in change_line(merge), \
        change_line(merge)
    # undo the merge: the merged note is back with its id
    memory_revert(store, proto_get(merge, K("turn")))
    assert store.query("SELECT text FROM memory WHERE id = 1") == [("Anna's birthday is on the 3rd of March",)]
    memory_revert(store, proto_get(changes[3], K("turn")))
    assert store.query("SELECT id FROM memory WHERE stale IS NOT NULL") == [], "the stale mark is gone"
    # undoing the forget request lets the note stay at the next dream
    memory_revert(store, turn)
    memory_revert(store, proto_get(changes[1], K("turn")))
    dream(store, now=now, stale_days=100000)
    assert any("door code" in t for t in notes(store)), notes(store)
    with pytest.raises(ValueError):
        memory_revert(store, 999999)


def test_near_duplicates_keep_the_fuller_note():
    rows = [(1, 1.0, "backups run every sunday night"),
            (2, 2.0, "backups run every monday morning to the nas"),
            (3, 3.0, "the cat is called mimi")]
    assert near_duplicates(rows) == [], "three shared words of eleven is no duplicate"
    rows[1] = (2, 2.0, "Backups run every Sunday night!")
    assert near_duplicates(rows) == [(2, 1)], "the same words: the newer is kept"
    rows[1] = (2, 2.0, "backups run every sunday night to the nas")
    assert near_duplicates(rows) == [(2, 1)], "the shorter says nothing the longer does not"
    two = [(1, 1.0, "Anna Schmidt's birthday is on the 3rd of March"),
           (2, 2.0, "Anna Okafor's birthday is on the 3rd of March"),
           (3, 3.0, "Anna Schmidt's birthday is not on the 3rd of March"),
           (4, 4.0, "The door code is 4711"), (5, 5.0, "The door code is 4712")]
    assert near_duplicates(two) == [(3, 1)], near_duplicates(two)


def test_forgetting_a_note_by_number(store):
    i = memory_add(store, "a note")
    assert memory_forget_id(store, i) is not None and notes(store) == []
    assert memory_forget_id(store, i) is None, "there is no such note any more"


def test_the_memory_commands_answer_without_a_model(booted):
    env = booted('[routines]\ntime_zone = "Europe/Berlin"\n')
    say = lambda text: text_of(run_task(env, user_says(text))[-1])  # noqa: E731
    assert say("/remember the plumber is Hamid, 0151 2345") == "Remembered as note 1."
    refused = say("/remember my key is ghp_16C7e42F292c6912E7710c838347Ae178B4a")
    assert refused.startswith("Not remembered: the text holds a secret"), refused
    assert "[1] the plumber is Hamid" in say("/memories plumber")
    assert say("/forget plumber hamid").startswith("Forgot 1 notes"), "forgotten"
    assert say("/memories") == "Memory is empty."
    assert "Dreaming: nightly at 03:00 (Europe/Berlin); not yet." in say("/status"), say("/status")
    assert "0 notes before" in say("/dream")
    assert "; last " in say("/status") and ": nothing changed." in say("/status"), say("/status")
    assert not [e for e in events(env.store, kind="outcome", limit=None)], "no model was asked"


def test_memory_history_and_revert_on_the_command_line(tmp_path):
    data = tmp_path / "data"
    config = tmp_path / "config.toml"
    config.write_text("")
    env = dict(os.environ, PASSEPARTOUT_DATA_DIR=str(data), PASSEPARTOUT_CONFIG=str(config),
               HOME=str(tmp_path))
    s = store_open(store_path_for(data))
    memory_add(s, "the cat is called Mimi")
    turn = memory_forget_id(s, 1)
    s.close()
    run = lambda *a: subprocess.run([str(BIN / "passepartout"), "memory", *a],  # noqa: E731
                                    capture_output=True, text=True, env=env, timeout=120)
    out = run("history")
    assert out.returncode == 0 and f"#{turn} forget: removed [1] the cat is called Mimi" in out.stdout, out
    out = run("revert", str(turn))
    assert out.returncode == 0, out.stderr
    s = store_open(store_path_for(data))
    assert notes(s) == ["the cat is called Mimi"], notes(s)
    s.close()
    assert run("revert", "999").returncode == 1, "no memory change has that number"


BERLIN = "Europe/Berlin"


def at(text, tz=BERLIN):
    """The POSIX time of the local time TEXT (ISO, no zone) in TZ; a trailing
    "+fold" means the second of an hour that comes twice."""
    fold = text.endswith("+fold")
    t = datetime.datetime.fromisoformat(text.removesuffix("+fold"))
    return t.replace(tzinfo=zoneinfo.ZoneInfo(tz), fold=int(fold)).timestamp()


def two_alike(store, ts):
    memory_add(store, "The plumber is called Hamid Okafor", ts=ts)
    memory_add(store, "The plumber is called Hamid Okafor, 0151 2345", ts=ts + 1)


def services_at(store, when):
    return types.SimpleNamespace(store=store, clock=lambda: when[0], config={})


def test_dream_at_reads_a_time_of_day_or_off():
    assert dream_at({}) == (3, 0), "03:00 unless set"
    assert dream_at({"memory": {"dream_at": "4:30"}}) == (4, 30)
    assert dream_at({"memory": {"dream_at": "off"}}) is None
    assert dream_at({"memory": {"dream_at": ""}}) is None
    for bad in ("25:00", "3am", "03:60"):
        with pytest.raises(ValueError, match="no time of day"):
            dream_at({"memory": {"dream_at": bad}})


def test_the_night_dreams_once_at_its_time_and_not_again_after_a_restart(tmp_path):
    path = store_path_for(tmp_path)
    with store_open(path) as store:
        when = [at("2026-06-10T14:00")]
        s = services_at(store, when)
        assert dream_pass(s, (3, 0), BERLIN) is None, "the first start takes the night without dreaming"
        assert kv_get(store, "memory:dream-night") == "2026-06-10"
        two_alike(store, when[0])
        when[0] = at("2026-06-11T02:59")
        assert dream_pass(s, (3, 0), BERLIN) is None, "not before 03:00"
        when[0] = at("2026-06-11T03:00")
        r = dream_pass(s, (3, 0), BERLIN)
        assert r is not None and proto_get(r, K("merged")) == 1, r
        assert len(notes(store)) == 1, notes(store)
        when[0] = at("2026-06-11T03:01")
        assert dream_pass(s, (3, 0), BERLIN) is None, "once a night"
        assert "last Thu 2026-06-11 03:00 CEST: 1 merged" in dream_summary(
            store, {"routines": {"time_zone": BERLIN}}), dream_summary(store, {"routines": {"time_zone": BERLIN}})
    with store_open(path) as store:  # a restart
        when = [at("2026-06-11T09:00")]
        two_alike(store, when[0])
        assert dream_pass(services_at(store, when), (3, 0), BERLIN) is None, "not twice after a restart"
        assert len(notes(store)) == 3, notes(store)


def test_missed_nights_are_dreamed_once_at_the_next_start(tmp_path):
    with store_open(store_path_for(tmp_path)) as store:
        when = [at("2026-06-10T03:05")]
        s = services_at(store, when)
        dream_pass(s, (3, 0), BERLIN)
        two_alike(store, when[0])
        when[0] = at("2026-06-14T11:00")  # down for three nights
        r = dream_pass(s, (3, 0), BERLIN)
        assert r is not None and proto_get(r, K("merged")) == 1, r
        assert kv_get(store, "memory:dream-night") == "2026-06-14"
        when[0] += 60
        assert dream_pass(s, (3, 0), BERLIN) is None, "the missed nights are one dream"
        assert [proto_get(c, K("change")) for c in memory_history(store)] == ["merge"], memory_history(store)


def test_two_daemons_on_one_store_dream_a_night_once(tmp_path):
    path = store_path_for(tmp_path)
    with store_open(path) as a, store_open(path) as b:
        when = [at("2026-06-10T12:00")]
        dream_pass(services_at(a, when), (3, 0), BERLIN)
        two_alike(a, when[0])
        when[0] = at("2026-06-11T03:00")
        for _ in range(20):
            results, start = [], threading.Barrier(2)

            def run(store):
                start.wait()
                results.append(dream_pass(services_at(store, when), (3, 0), BERLIN))

            threads = [threading.Thread(target=run, args=(s,)) for s in (a, b)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len([r for r in results if r is not None]) == 1, f"one of two dreams the night: {results}"
            when[0] += 86400
        dreams = [e for e in events(a, kind="memory", limit=None)]
        assert len(dreams) == 1, "the one merge, once"


def test_a_dream_time_in_the_hours_daylight_saving_skips_or_repeats_runs_once():
    # Berlin: 2026-03-29 02:00 CET becomes 03:00 CEST; 2026-10-25 03:00 CEST becomes 02:00 CET
    assert dream_night(at("2026-03-29T01:59"), (2, 30), BERLIN) == "2026-03-28"
    assert dream_night(at("2026-03-29T03:00"), (2, 30), BERLIN) == "2026-03-29", "the gap's end"
    assert dream_night(at("2026-10-25T02:29"), (2, 30), BERLIN) == "2026-10-24"
    assert dream_night(at("2026-10-25T02:30"), (2, 30), BERLIN) == "2026-10-25"
    assert at("2026-10-25T02:30+fold") - at("2026-10-25T02:30") == 3600
    assert dream_night(at("2026-10-25T02:29+fold"), (2, 30), BERLIN) == "2026-10-25", \
        "the hour that comes again is the same night"
    assert dream_night(at("2026-10-26T02:29"), (2, 30), BERLIN) == "2026-10-25"


def test_the_service_takes_the_night_when_the_daemon_starts_unless_off(tmp_path, caplog):
    with store_open(store_path_for(tmp_path)) as store:
        async def run(config):
            env = types.SimpleNamespace(store=store, clock=lambda: at("2026-06-10T12:00"), config=config)
            task = asyncio.create_task(dream_service(env, None))
            for _ in range(600):
                if task.done() or kv_get(store, "memory:dream-night") is not None:
                    break
                await asyncio.sleep(0.05)
            done = task.done()
            task.cancel()
            return done

        assert asyncio.run(run({"memory": {"dream_at": "off"}})) is True, "off: the service ends"
        assert asyncio.run(run({"memory": {"dream_at": "27:00"}})) is True, "no time: the service ends"
        assert "no time of day" in caplog.text, caplog.text
        assert kv_get(store, "memory:dream-night") is None, "off takes no night"
        asyncio.run(run({"routines": {"time_zone": BERLIN}}))
        assert kv_get(store, "memory:dream-night") == "2026-06-10", "on by default"
