"""Tests of the journal: turns appended by the task's records, a chain that
shows an edited, removed or inserted row, export, and a chain that holds
after kill -9."""
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import hy  # noqa: F401
import pytest
from hy.models import Keyword

from passepartout.journal import journal_export, journal_verify, row_hash
from passepartout.proto import proto_get, proto_print
from passepartout.records import event_append
from passepartout.store import store_open, store_path_for
from passepartout.task import event_record, write_records

BIN = Path(sys.executable).parent
sys.path.insert(0, str(Path(__file__).resolve().parent))


def k(name):
    return Keyword(name)


def plist(**kv):
    out = []
    for key, v in kv.items():
        out += [k(key.replace("_", "-")), v]
    return out


def cli(home, *args):
    command = [str(BIN / "passepartout")] if (BIN / "passepartout").exists() \
        else [sys.executable, "-m", "passepartout"]
    return subprocess.run(command + list(args), capture_output=True, text=True, env=home, timeout=120)


@pytest.fixture
def home(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("")
    return dict(os.environ, PASSEPARTOUT_DATA_DIR=str(tmp_path / "data"),
                PASSEPARTOUT_CONFIG=str(config), HOME=str(tmp_path))


def a_task(store, session="s", task="t1", between=None):
    """Four turns of one task: the person speaks, the model proposes, the
    action runs, the answer. BETWEEN, when given, is called after each."""
    records = [event_record("input", session, plist(text="list the files", task=task)),
               event_record("outcome", session, plist(verdict=k("allow"), task=task,
                                                     action=plist(action=k("shell"), cmd="ls"),
                                                     usage=plist(prompt_tokens=10, completion_tokens=5,
                                                                 cost=0.001))),
               event_record("result", session, plist(task=task, step=0, result=plist(status=k("ok")))),
               event_record("answer", session, plist(text="two files", task=task))]
    for r in records:
        with store.transaction():
            write_records(store, [r])
        if between:
            between()


def tamper(path, *statements):
    """Run STATEMENTS (SQL, or (SQL, params)) on the store at PATH as someone
    with the file would, outside the program."""
    conn = sqlite3.connect(path)
    for st in statements:
        conn.execute(*((st,) if isinstance(st, str) else st))
    conn.commit()
    conn.close()


def turns(store):
    return [json.loads(line) for line in journal_export(store)]


def verdict(store):
    v = journal_verify(store)
    return {key.name: v for key, v in zip(v[::2], v[1::2])}


def test_every_record_a_task_writes_is_a_turn_in_the_chain(tmp_path):
    with store_open(store_path_for(tmp_path)) as store:
        a_task(store)
        event_append(store, "approval", "s", plist(event="grant-used"))
        a_task(store, session="other", task="t2")
        ts = turns(store)
    assert [t["type"] for t in ts[:4]] == ["speech", "thought", "action", "speech"], ts
    assert [t["clock"] for t in ts[:4]] == [1, 2, 3, 4]
    assert ts[1]["parents"] == [ts[0]["id"]] and ts[0]["parents"] == []
    assert ts[1]["tokens"] == 15 and ts[1]["cost"] == pytest.approx(0.001)
    assert ts[0]["prev"] == "" and all(b["prev"] == a["hash"] for a, b in zip(ts, ts[1:]))
    # the plain event stays out of the journal; the other session starts its own thread
    assert len(ts) == 8 and ts[4]["session"] == "other" and ts[4]["parents"] == []
    assert ts[4]["id"] == ts[3]["id"] + 2


def test_the_store_refuses_to_change_or_delete_an_event(tmp_path):
    with store_open(store_path_for(tmp_path)) as store:
        a_task(store)
        for sql in ["UPDATE events SET data = '(:text \"other\")' WHERE id = 2",
                    "DELETE FROM events WHERE id = 2"]:
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                store.write(sql)
        assert verdict(store) == {"ok": True, "turns": 4}


def test_an_intact_journal_verifies_from_the_command_line(home, tmp_path):
    with store_open(store_path_for(tmp_path / "data")) as store:
        a_task(store)
    r = cli(home, "journal", "verify")
    assert r.returncode == 0 and "4 turns are intact" in r.stdout, (r.stdout, r.stderr)


def test_an_edited_turn_is_named(home, tmp_path):
    path = store_path_for(tmp_path / "data")
    with store_open(path) as store:
        a_task(store)
    # someone with the file drops the trigger and edits what the model proposed
    tamper(path, "DROP TRIGGER events_no_update",
           "UPDATE events SET data = replace(data, '\"ls\"', '\"rm -rf /\"') WHERE id = 2")
    r = cli(home, "journal", "verify")
    assert r.returncode == 1 and "turn 2 does not match its hash: it was edited" in r.stdout, (r.stdout, r.stderr)


def test_a_deleted_turn_is_named(home, tmp_path):
    path = store_path_for(tmp_path / "data")
    with store_open(path) as store:
        a_task(store)
    tamper(path, "DROP TRIGGER events_no_delete", "DELETE FROM events WHERE id = 3")
    r = cli(home, "journal", "verify")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "turn 4 does not link to turn 2: turns before it were removed" in r.stdout, r.stdout


def test_an_inserted_turn_is_named(home, tmp_path):
    path = store_path_for(tmp_path / "data")
    with store_open(path) as store:
        # a plain event between the turns leaves a free id, as grants and answers do
        a_task(store, between=lambda: event_append(store, "approval", "s", plist(event="noted")))
        rows = store.query("SELECT id, lower(hex(hash)) FROM events WHERE turn IS NOT NULL ORDER BY id")
    (id2, hash2), (id3, _) = rows[1], rows[2]
    # a forger deletes the plain event after turn 2 and puts a well-formed turn in its place
    row = (id2 + 1, 1.0, "outcome", "s", '(:verdict :allow :task "t1")', "thought", 3, str(id2), "t1",
           "", "", None, None, hash2)
    tamper(path, "DROP TRIGGER events_no_delete", ("DELETE FROM events WHERE id = ?", (id2 + 1,)),
           ("INSERT INTO events (id, ts, kind, session, data, turn, clock, parents, task, state_before,"
            " state_after, tokens, cost, prev, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            row + (row_hash(row),)))
    r = cli(home, "journal", "verify")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"turn {id2 + 1} was inserted: turn {id3} links to the turn before it" in r.stdout, r.stdout


def test_export_one_session_as_jsonl_and_as_org(home, tmp_path):
    with store_open(store_path_for(tmp_path / "data")) as store:
        a_task(store, session="alice", task="a1")
        a_task(store, session="bob", task="b1")
    r = cli(home, "journal", "export", "--session", "bob", "--raw")
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 0 and len(lines) == 4 and {t["session"] for t in lines} == {"bob"}, r.stdout
    assert lines[0]["content"] == '(:text "list the files" :task "b1")'
    r = cli(home, "journal", "export", "--format", "org")
    assert r.returncode == 0 and r.stdout.count("\n* ") + r.stdout.startswith("* ") == 8, r.stdout
    assert "* 2 thought: outcome in alice" in r.stdout and ":TOKENS: 15" in r.stdout


def test_export_reads_as_one_line_a_turn_with_local_times_and_no_plist(home, tmp_path):
    with store_open(store_path_for(tmp_path / "data")) as store:
        a_task(store, session="alice", task="a1")
    r = cli(home, "journal", "export")
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and len(lines) == 4, r.stdout
    zone = time.strftime("%Z", time.localtime())
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d " + re.escape(zone) + "  ", line) for line in lines), lines
    assert lines[0].endswith("speech/input  alice  “list the files”"), lines[0]
    assert lines[1].endswith("thought/outcome  alice  allow: `ls`"), lines[1]
    assert lines[2].endswith("action/result  alice  done"), lines[2]
    assert "(:" not in r.stdout, r.stdout


def test_export_shows_what_turns_hold_and_never_sends_it_to_the_terminal(home, tmp_path):
    said = "look \u202e; rm -rf ~ \u202c \x9b2J \x85 \u2028 next"
    with store_open(store_path_for(tmp_path / "data")) as store:
        with store.transaction():
            write_records(store, [event_record("answer", "s", plist(text=said, task="t1"))])
    obeyed = "[\x1b\x85\x9b\u2028\u2029\u202a-\u202e\u2066-\u2069]"
    r = cli(home, "journal", "export", "--format", "jsonl")
    assert r.returncode == 0 and not re.search(obeyed, r.stdout), repr(r.stdout)
    (line,) = r.stdout.splitlines()
    assert json.loads(line)["content"] == proto_print(plist(text=said, task="t1")), "the JSON reads back the same"
    r = cli(home, "journal", "export", "--format", "org")
    assert r.returncode == 0 and not re.search(obeyed, r.stdout), repr(r.stdout)
    assert "look \\u202e; rm -rf ~ \\u202c \\x9b2J" in r.stdout, r.stdout


@pytest.mark.xdist_group("killed-while-acting")
def test_kill_9_mid_task_leaves_a_chain_that_verifies(killed_while_acting):
    r = killed_while_acting
    shown = {key: v for key, v in r.items() if key not in ("log", "output")}
    assert r["lost"] == 0 and r["run_twice"] == 0, shown
    with store_open(store_path_for(Path(r["folder"]) / "data")) as store:
        v = verdict(store)
        kinds = {row[0] for row in store.query("SELECT turn FROM events WHERE turn IS NOT NULL")}
    assert v["ok"] and v["turns"] > 40, v
    assert {"speech", "thought", "action"} <= kinds, kinds


# * Replay

STRICT_SKILL = '''
(require passepartout.macros [defskill])
(import passepartout.proto [proto-get])

(defn strict-gate [action ctx]
  (if (= (proto-get action ':cmd) "ls")
      [:verdict :reject :reason "no listing of folders today"]
      [:verdict :allow]))

(defskill strict
  "Refuses ls."
  :priority 10
  :gate strict-gate)
'''


@pytest.fixture
def recorded(tmp_path):
    """A data dir whose journal holds one task: the model proposed ls with no
    explanation (refused by the explanation gate), then with one (allowed),
    then answered. A function of config lines gives an environment for the CLI."""
    import asyncio
    from passepartout.providers import make_provider
    from passepartout.daemon import boot, shutdown
    from passepartout.loop import step
    (tmp_path / "ws").mkdir()
    config = tmp_path / "config.toml"
    base = f'workspace = "{tmp_path / "ws"}"\n[sandbox]\nmode = "off"\n'
    config.write_text(base)
    env = boot(config_path=str(config), environ={"PASSEPARTOUT_DATA_DIR": str(tmp_path / "data"),
                                                 "HOME": str(tmp_path)},
               providers=[make_provider("symbolic")])
    answers = ['(:action :shell :cmd "ls")', '(:action :shell :cmd "ls" :explanation "see the files")',
               '(:action :message :text "done")']
    env.complete = lambda request: [k("status"), k("ok"), k("provider"), "script",
                                       k("text"), answers.pop(0) if len(answers) > 1 else answers[0]]
    try:
        queue = [[k("type"), k("event"), k("source"), [k("gateway"), k("test"), k("chat"), "c1"],
                  k("payload"), [k("sensor"), k("user-input"), k("text"), "what is here?"]]]
        while queue:
            for out in asyncio.run(step(queue.pop(0), env)):
                if proto_get(out, k("type")) != k("reply"):
                    queue.append(out)
    finally:
        shutdown(env)

    def home(extra=""):
        config.write_text(base + extra)
        return dict(os.environ, PASSEPARTOUT_DATA_DIR=str(tmp_path / "data"),
                    PASSEPARTOUT_CONFIG=str(config), HOME=str(tmp_path))
    return home


def test_replay_with_todays_gates_unchanged_reports_nothing(recorded):
    r = cli(recorded(), "replay")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "replayed 3 proposals: 0 decisions would change" in r.stdout, r.stdout


def test_a_tightened_gate_makes_replay_report_and_fail(recorded, tmp_path):
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "strict.hy").write_text(STRICT_SKILL)
    r = cli(recorded(f'[skills]\ndirs = ["{skills}"]\n'), "replay")
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and "1 decisions would change" in lines[-1], r.stdout
    assert ('(:action :shell :cmd "ls" :explanation "see the files") was allowed, '
            'now refused by strict: no listing of folders today') in lines[0], r.stdout


def test_a_loosened_gate_makes_replay_report_and_fail(recorded):
    r = cli(recorded('[skills]\ndisabled = ["explanation"]\n'), "replay", "--session", "test:c1")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert '(:action :shell :cmd "ls") was refused by explanation: a :shell action changes things' in r.stdout
    assert ", now allowed" in r.stdout and "1 decisions would change" in r.stdout, r.stdout


def test_replay_since_leaves_out_what_came_before(recorded):
    r = cli(recorded('[skills]\ndisabled = ["explanation"]\n'), "replay", "--since", "2999-01-01")
    assert r.returncode == 0 and "replayed 0 proposals" in r.stdout, (r.stdout, r.stderr)
    r = cli(recorded(), "replay", "--since", "yesterday")
    assert r.returncode == 2 and "neither a time nor an age" in r.stderr, r.stderr


def test_turns_another_process_appends_keep_the_chain_and_the_threads(tmp_path):
    """The daemon remembers its journal's last turns between appends; a turn
    appended meanwhile through another connection (an approval answered on the
    host) is read from the file, so the chain links through it and the next
    turn of the session is its child."""
    path = store_path_for(tmp_path / "data")
    with store_open(path) as daemon, store_open(path) as host:
        a_task(daemon, session="s", task="t1")
        with host.transaction():
            write_records(host, [event_record("approval", "s", plist(event="asked", task="t1"))])
        a_task(daemon, session="s", task="t1")
        assert proto_get(journal_verify(daemon), k("ok")) is True, journal_verify(daemon)
        rows = daemon.query("SELECT id, kind, parents, clock FROM events WHERE turn IS NOT NULL ORDER BY id")
    host_turn = [r for r in rows if r[1] == "approval"][0]
    after = rows[rows.index(host_turn) + 1]
    assert after[2] == str(host_turn[0]), f"the turn after the host's links to it: {rows}"
    assert after[3] == host_turn[3] + 1, f"its clock goes on from the host's turn: {rows}"


def test_a_context_is_kept_once_and_an_edited_one_is_found(booted):
    """Each outcome names the context it was judged in by hash; a context is
    kept once however many steps it judged; a context edited behind the
    journal's back is found by journal verify."""
    import asyncio
    from passepartout.loop import step
    from passepartout.journal import context_of
    from passepartout.records import data_read
    env = booted('[sandbox]\nmode = "off"\n')
    for text in ["hello", "help", "!ls"]:
        signal = [k("type"), k("event"), k("source"), [k("gateway"), k("test"), k("chat"), "c"],
                  k("payload"), [k("sensor"), k("user-input"), k("text"), text]]
        queue = [signal]

        async def run():
            while queue:
                for out in await step(queue.pop(0), env):
                    if proto_get(out, k("type")) != k("reply"):
                        queue.append(out)
        asyncio.run(run())
    outcomes = [data_read(d) for (d,) in env.store.query("SELECT data FROM events WHERE kind = 'outcome'")]
    hashes = {proto_get(o, k("context-hash")) for o in outcomes}
    assert len(outcomes) >= 3 and len(hashes) == 1 and None not in hashes, outcomes
    # the table keeps the lists of decisions too (a list, where a context is a plist)
    assert env.store.query("SELECT count(*) FROM contexts WHERE data LIKE '(:%'") == [(1,)]
    (kept,) = env.store.query("SELECT data FROM contexts WHERE hash = ?", (proto_get(outcomes[0], k("context-hash")),))[0]
    assert "test:c" not in kept, "the session is the turn's, not the context's"
    ctx = context_of(env.store, outcomes[0], "test:c")
    assert proto_get(ctx, k("session")) == "test:c" and proto_get(ctx, k("now")) is not None, ctx
    assert proto_get(journal_verify(env.store), k("ok")) is True
    with env.store.transaction() as conn:
        conn.execute("DROP TRIGGER contexts_no_update")
        conn.execute("UPDATE contexts SET data = replace(data, ':workspace', ':workspace \"/\" :was')")
    verdict = journal_verify(env.store)
    assert proto_get(verdict, k("ok")) is False and proto_get(verdict, k("problem")) == "context edited", verdict


def test_replay_and_export_read_through_archived_segments(recorded):
    """Once every turn is archived into segments, replay judges the same
    proposals in the same contexts, and the export holds the same turns."""
    home = recorded('[skills]\ndisabled = ["explanation"]\n')
    before = cli(home, "journal", "export").stdout
    r = cli(home, "journal", "archive", "--older-than", "0s")
    assert r.returncode == 0 and "archived" in r.stdout, (r.stdout, r.stderr)
    assert cli(home, "journal", "export").stdout == before
    r = cli(home, "replay")
    assert r.returncode == 1 and "replayed 3 proposals: 1 decisions would change" in r.stdout, (r.stdout, r.stderr)
    r = cli(home, "journal", "verify")
    assert r.returncode == 0 and "intact" in r.stdout, (r.stdout, r.stderr)


def test_an_outcome_is_stored_once_over_and_read_back_whole(tmp_path):
    """What repeats in an outcome (the action as proposed, the last attempt's
    proposal, bare allows) is stored once; outcome_data gives the record back."""
    from passepartout.journal import outcome_data
    from passepartout.records import data_read
    action = plist(action=k("shell"), cmd="echo hi >> ledger.txt", explanation="note it")
    refused = plist(action=k("shell"), cmd="rm -rf /")
    outcome = plist(verdict=k("allow"), gate=None, action=action, proposed=list(action),
                    decisions=[plist(gate="schema", verdict=k("allow")),
                               plist(gate="shell-safety", verdict=k("allow"), rule="redirect-write"),
                               plist(gate="sandbox", verdict=k("allow"))],
                    attempts=[plist(attempt=1, verdict=k("reject"), gate="shell-safety", proposed=refused),
                              plist(attempt=2, verdict=k("allow"), proposed=list(action))],
                    task="t1")
    with store_open(store_path_for(tmp_path)) as store:
        with store.transaction():
            write_records(store, [event_record("outcome", "s", outcome)])
        (text,) = store.query("SELECT data FROM events WHERE kind = 'outcome'")[0]
        assert text.count("ledger.txt") == 1 and "rm -rf /" in text, text
        stored = data_read(text)
        (kept,) = store.query("SELECT data FROM contexts WHERE hash = ?", (proto_get(stored, k("decisions")),))[0]
        assert kept == '("schema" (:gate "shell-safety" :verdict :allow :rule "redirect-write") "sandbox")', kept
        assert outcome_data(stored, store) == outcome, stored
        # the same list of decisions in the next outcome is not kept again
        with store.transaction():
            write_records(store, [event_record("outcome", "s", outcome)])
        assert store.query("SELECT count(*) FROM contexts") == [(1,)]
        assert proto_get(journal_verify(store), k("ok")) is True


def test_the_one_attempt_of_a_model_asked_once_is_written_as_the_outcome(tmp_path):
    from passepartout.journal import outcome_data
    from passepartout.records import data_read
    action = plist(action=k("message"), text="hi")
    outcome = plist(verdict=k("allow"), gate=None, reason=None, action=action, proposed=list(action),
                    decisions=[], attempts=[plist(attempt=1, provider="echo", verdict=k("allow"), gate=None,
                                                  reason=None, proposed=list(action))],
                    usage=plist(prompt_tokens=11, completion_tokens=7, cost=0.0), provider="echo", task="t1")
    # a different provider in the attempt is no longer the outcome's
    other = list(outcome)
    other[other.index(k("attempts")) + 1] = [plist(attempt=1, provider="other", verdict=k("allow"), gate=None,
                                                   reason=None, proposed=list(action))]
    with store_open(store_path_for(tmp_path)) as store:
        with store.transaction():
            write_records(store, [event_record("outcome", "s", outcome), event_record("outcome", "s", other)])
        (same,), (kept,) = store.query("SELECT data FROM events WHERE kind = 'outcome' ORDER BY id")
        assert ":attempts :same" in same and ":attempts :same" not in kept, (same, kept)
        assert ":usage (11 7 0.0)" in same, same
        assert outcome_data(data_read(same), store) == outcome, data_read(same)
        assert outcome_data(data_read(kept), store) == other, data_read(kept)


def test_hashes_are_kept_as_bytes_and_hex_text_written_before_still_verifies(tmp_path):
    """A turn's four hashes take their bytes in the file; rows written with hex
    text (before, or by hand) read back as the same hex, and the chain goes on
    from them."""
    path = store_path_for(tmp_path)
    with store_open(path) as store:
        a_task(store)
    conn = sqlite3.connect(path)
    kinds = conn.execute("SELECT DISTINCT typeof(prev), typeof(hash), typeof(state_before), typeof(state_after)"
                         " FROM events WHERE turn IS NOT NULL").fetchall()
    assert kinds == [("blob",) * 4], kinds
    assert conn.execute("SELECT length(hash), length(prev) FROM events WHERE id = 2").fetchone() == (32, 32)
    # the same rows as hex text, as a store written before kept them
    conn.execute("DROP TRIGGER events_no_update")
    conn.execute("UPDATE events SET prev = lower(hex(prev)), hash = lower(hex(hash)),"
                 " state_before = lower(hex(state_before)), state_after = lower(hex(state_after))")
    conn.commit()
    conn.close()
    with store_open(path) as store:
        before = turns(store)
        a_task(store, task="t2")
        after = turns(store)
        assert verdict(store) == {"ok": True, "turns": 8}
    assert after[:4] == before and after[4]["prev"] == before[3]["hash"], after[4]
    assert all(len(t["hash"]) == 64 and len(t["prev"]) in (0, 64) for t in after), after
