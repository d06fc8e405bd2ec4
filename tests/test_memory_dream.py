"""Tests of memory changes and dreaming (memory.hy), /remember, /forget, /memories, /dream."""
import os
import subprocess
import sys
from pathlib import Path

import hy  # noqa: F401
import pytest
from hy.models import Keyword

from passepartout.memory import (memory_add, memory_forget, memory_forget_id, dream, memory_history,
                                 memory_revert, near_duplicates, change_line)
from passepartout.proto import proto_get
from passepartout.store import store_open, store_path_for, events
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
    env = booted()
    say = lambda text: text_of(run_task(env, user_says(text))[-1])  # noqa: E731
    assert say("/remember the plumber is Hamid, 0151 2345") == "Remembered as note 1."
    refused = say("/remember my key is ghp_16C7e42F292c6912E7710c838347Ae178B4a")
    assert refused.startswith("Not remembered: the text holds a secret"), refused
    assert "[1] the plumber is Hamid" in say("/memories plumber")
    assert say("/forget plumber hamid").startswith("Forgot 1 notes"), "forgotten"
    assert say("/memories") == "Memory is empty."
    assert "0 notes before" in say("/dream")
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
