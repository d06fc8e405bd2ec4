"""Tests of the REPL: the evaluation of passepartout/repl.hy, the repl skill, and the
client (bin/repl), run as a process against a real server. (The socket server is
passepartout/console.hy's: tests/test_console.py.)"""
import asyncio
import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import wait_until as wait_for, make_env, ask, repl

from passepartout.loop import step
from passepartout.proto import proto_get
from passepartout.verify import verify
from passepartout.context import make_context
from passepartout.console import ReplThread
from passepartout.repl import MAX_VALUE, evaluate, make_namespace
from passepartout.skills import Registry, get_skill, load_skill_file, load_skills
from passepartout.records import events
import passepartout_repl

ROOT = Path(__file__).resolve().parent.parent
BIN_REPL = ROOT / "bin" / "repl"


def kw(name):
    import hy
    return hy.models.Keyword(name)


def said_in(env, text, chat="r"):
    """What the daemon of ENV answers TEXT said in a test chat, as one string."""
    signal = [kw("type"), kw("event"), kw("source"), [kw("gateway"), kw("test"), kw("chat"), chat],
              kw("payload"), [kw("sensor"), kw("user-input"), kw("text"), text]]
    return "\n".join(str(proto_get(proto_get(r, kw("payload")), kw("text")))
                     for r in asyncio.run(step(signal, env)))


# * Evaluation

def test_a_form_is_evaluated_and_its_value_printed(server):
    assert ask(server, "(+ 1 2)") == {"ok": True, "value": "3", "output": ""}


def test_definitions_persist_from_one_request_to_the_next(server):
    assert ask(server, "(defn double [x] (* 2 x))")["ok"]
    assert ask(server, "(double 21)")["value"] == "42"


def test_several_forms_run_in_order_and_the_last_value_is_shown(server):
    got = ask(server, '(setv xs []) (.append xs "a") (.append xs "b") xs')
    assert got["value"] == '["a" "b"]', got


def test_a_form_that_prints_and_returns(server):
    got = ask(server, '(do (print "hello") (print "world") 42)')
    assert got == {"ok": True, "value": "42", "output": "hello\nworld\n"}, got


def test_a_syntax_error_evaluates_nothing(server):
    got = ask(server, "(setv seen 1) (+ 1 2")
    assert got["ok"] is False
    assert "PrematureEndOfInput" in got["error"], got
    assert ask(server, "(in \"seen\" (globals))")["value"] == "False"


def test_an_exception_is_an_error_with_its_traceback_and_harms_nothing(server):
    got = ask(server, "(defn boom [] (/ 1 0)) (boom)")
    assert got["ok"] is False
    assert got["error"] == "ZeroDivisionError: division by zero", got
    assert "in boom" in got["traceback"] and "Traceback" in got["traceback"], got["traceback"]
    assert ask(server, "(+ 1 2)")["value"] == "3"


def test_exiting_from_a_form_does_not_stop_the_daemon(server):
    got = ask(server, "(import sys) (sys.exit 3)")
    assert got["ok"] is False and got["error"].startswith("SystemExit"), got
    assert ask(server, "(+ 1 2)")["value"] == "3"


def test_a_form_that_loops_forever_times_out_and_the_next_is_answered(server):
    got = ask(server, "(while True (setv x 1))", timeout=0.5)
    assert got["ok"] is False and got["error"].startswith("Timeout"), got
    assert "interrupted" in got["error"], got
    assert server.repl.running == [], "an interrupted form is not still running"
    assert ask(server, "(+ 1 2)")["value"] == "3"


def release_all(server, name):
    """Set NAME true in the REPL's namespace, which ends the forms of a test
    that wait for it, however the test went."""
    setattr(server.repl.namespace, name, True)


def test_a_form_blocked_outside_python_is_said_to_run_on_and_the_next_is_answered(server):
    # It waits in a call that does not return to the form's code until the next request lets it.
    try:
        got = ask(server, "(import threading) (setv gate (threading.Event)) (.wait gate 60) 1", timeout=0.3)
        assert got["ok"] is False and "still running in the daemon" in got["error"], got
        assert "interrupted" not in got["error"], got
        assert ask(server, "(.set gate) (+ 40 2)")["value"] == "42"
        # once the call returns to the form's code it is stopped, and leaves the list
        assert wait_for(lambda: server.repl.running == []), "the released form is still listed"
    finally:
        gate = getattr(server.repl.namespace, "gate", None)
        if gate is not None:
            gate.set()


def test_a_form_that_swallows_its_interruption_is_said_to_run_on_and_shown_in_status(server, env):
    swallower = ("(setv released False)"
                 " (while True (try (when released (break)) (except [BaseException] None)))")
    try:
        got = ask(server, swallower, timeout=0.5)
        assert got["ok"] is False, got
        assert "interrupted" not in got["error"], f"a form that runs on is not interrupted: {got}"
        assert "still running in the daemon" in got["error"] and "/status" in got["error"], got
        status = said_in(env, "/status")
        assert "REPL forms still running for" in status and "(while True (try" in status, status
        assert ask(server, "(+ 1 2)")["value"] == "3", "the next request is answered meanwhile"
        recorded = [proto_get(e, kw("data")) for e in events(env.store, kind="repl")]
        assert "still running" in proto_get(recorded[0], kw("error")), recorded
        # it ends by itself once told to: then it is not listed any more
        assert ask(server, "(setv released True)")["ok"]
        assert wait_for(lambda: server.repl.running == []), "the form that ended is still listed"
        assert "REPL forms" not in said_in(env, "/status")
    finally:
        release_all(server, "released")


def test_what_a_form_prints_after_its_answer_stays_out_of_the_next_answer(server):
    # It survives its interruption and goes on printing until it is let go.
    stubborn = ('(import time) (setv done False)'
                ' (while True (try (when done (break)) (time.sleep 0.02) (print "late")'
                ' (except [BaseException] None)))')
    try:
        assert "still running" in ask(server, stubborn, timeout=0.2)["error"]
        got = ask(server, '(import time) (time.sleep 0.3) (print "mine") 1')
        assert got == {"ok": True, "value": "1", "output": "mine\n"}, got
    finally:
        release_all(server, "done")
    assert wait_for(lambda: server.repl.running == []), "the released form is still listed"


def test_a_huge_result_is_truncated_with_a_marker(server):
    got = ask(server, '(* "x" 300000)')
    assert got["ok"]
    assert len(got["value"]) < MAX_VALUE + 200
    assert got["value"].startswith('"xxx')
    assert got["value"].endswith("[truncated: 300002 characters in all]"), got["value"][-80:]


def test_huge_output_is_truncated_too(server):
    got = ask(server, '(for [i (range 30000)] (print "0123456789")) 7')
    assert got["value"] == "7"
    assert len(got["output"]) < 110000 and "[truncated:" in got["output"], got["output"][-80:]


def test_the_package_is_importable_and_the_daemon_reachable(server, env):
    got = ask(server, '(import passepartout.proto [proto-print]) (proto-print [:a 1])')
    assert got["value"] == '"(:a 1)"', got
    assert ask(server, '(get config "runtime_dir")')["value"] == repr(env.config["runtime_dir"]).replace("'", '"')
    assert '"repl"' in ask(server, "(skills)")["value"]


def test_every_evaluation_is_recorded(server, env):
    ask(server, "(+ 1 2)")
    ask(server, "(/ 1 0)")
    got = [proto_get(e, kw("data")) for e in events(env.store, kind="repl")]
    assert len(got) == 2, got
    first, second = got
    assert proto_get(first, kw("uid")) == os.getuid()
    assert proto_get(first, kw("forms")) == "(+ 1 2)"
    assert proto_get(first, kw("ok")) is True and proto_get(first, kw("value")) == "3"
    assert proto_get(second, kw("ok")) is False
    assert "ZeroDivisionError" in proto_get(second, kw("error"))


def test_forms_never_reach_the_model(server, env, model_calls):
    ask(server, "(+ 1 2)")
    ask(server, "(/ 1 0)")
    assert model_calls == []


def test_a_repl_eval_signal_from_elsewhere_evaluates_nothing(env, tmp_path, model_calls):
    marker = tmp_path / "marker"
    signal = [kw("type"), kw("event"), kw("source"), [kw("gateway"), kw("telegram"), kw("chat"), 1],
              kw("payload"), [kw("sensor"), kw("repl-eval"),
                              kw("forms"), f'(.write-text (hy.I.pathlib.Path "{marker}") "x")',
                              kw("request"), "made-up"]]
    out = asyncio.run(step(signal, env))
    assert not marker.exists()
    assert len(out) == 1 and "refused" in proto_get(proto_get(out[0], kw("payload")), kw("text")), out
    recorded = [proto_get(e, kw("data")) for e in events(env.store, kind="repl")]
    assert recorded and "did not come from the socket" in proto_get(recorded[0], kw("refused")), recorded
    assert model_calls == []


def test_evaluate_directly_in_a_namespace():
    ns = make_namespace({"answer": 42})
    assert evaluate(ns, "(+ answer 1)", 5) == {"ok": True, "value": "43", "output": ""}


# * Live redefinition

GOOD_GATE = ('(defskill workspace :priority 90 :gate (fn [a c] '
             '(if (= (hy.I.passepartout/proto.proto-get a \':path) "forbidden.txt") '
             '[:verdict :reject :reason "redefined"] [:verdict :allow])))')


def read_action(path):
    return [kw("action"), kw("read-file"), kw("path"), path, kw("explanation"), "look"]


def test_a_skill_is_redefined_at_the_repl(server, env):
    got = ask(server, GOOD_GATE)
    assert got["ok"], got
    ctx = make_context(workspace=env.config["workspace"], skills=env.skills)
    out = verify(read_action("forbidden.txt"), ctx)
    assert proto_get(out, kw("reason")) == "redefined", out


def test_a_skill_defined_at_the_repl_keeps_its_form(server, env, tmp_path):
    import hy
    assert ask(server, GOOD_GATE)["ok"]
    form = get_skill(env.skills, "workspace").get("form")
    assert isinstance(form, str) and hy.read(form) == hy.read(GOOD_GATE), form
    # the text defines the same skill elsewhere: as a skill file loaded into another registry
    elsewhere = Registry()
    load_skills(elsewhere)
    path = tmp_path / "from_the_repl.hy"
    path.write_text("(require passepartout.macros [defskill])\n" + form + "\n")
    loaded = load_skill_file(elsewhere, path)
    assert proto_get(loaded, kw("error")) is None, loaded
    ctx = make_context(workspace=env.config["workspace"], skills=elsewhere)
    out = verify(read_action("forbidden.txt"), ctx)
    assert proto_get(out, kw("reason")) == "redefined", out


@pytest.mark.parametrize("definition, words", [
    ("(defskill workspace :priority 90 :gate (fn [a c] (/ 1 0)))", "ZeroDivisionError"),
    ("(defskill workspace :priority 90 :gate (fn [a c] \"allow\"))", "not a verdict"),
    ("(defskill workspace :priority \"high\" :gate (fn [a c] [:verdict :allow]))", ":priority must be an integer"),
    ("(defskill workspace :priority 90 :gate (fn [a c] [:verdict :allow])", "PrematureEndOfInput"),
    ("(defskill workspace :gate (fn [a c] (undefined-thing)))", "NameError"),
])
def test_a_broken_redefinition_keeps_the_old_skill_working(server, env, definition, words):
    old = get_skill(env.skills, "workspace")
    got = ask(server, definition)
    assert got["ok"] is False and words in got["error"], got
    assert get_skill(env.skills, "workspace") is old
    ctx = make_context(workspace=env.config["workspace"], skills=env.skills)
    out = verify(read_action("../../etc/passwd"), ctx)
    assert proto_get(out, kw("gate")) == "workspace", out
    assert proto_get(out, kw("verdict")) == kw("reject"), out


def test_skills_the_config_names_immutable_refuse_redefinition(booted, runtime, model_calls):
    e = make_env(booted, runtime, model_calls, '[skills]\nimmutable = ["workspace"]\n')
    s = ReplThread(e)
    try:
        old = get_skill(e.skills, "workspace")
        got = ask(s, GOOD_GATE)
        assert got["ok"] is False and "immutable" in got["error"], got
        assert get_skill(e.skills, "workspace") is old
        assert ask(s, '(defskill brand-new :gate (fn [a c] [:verdict :allow]))')["ok"]
        assert get_skill(e.skills, "brand-new") is not None, "the new skill is in the daemon's registry"
    finally:
        s.stop()


def test_reload_skills_is_at_hand(server):
    got = ask(server, "(hy.I.passepartout/reload.note-skill-files services) (reload-skills)")
    assert got == {"ok": True, "value": "[]", "output": ""}, got


# * The client, as a process

def test_client_exit_codes(server):
    ok = repl("--socket", server.path, "(+ 1 2)")
    assert (ok.returncode, ok.stdout) == (0, "3\n"), ok
    err = repl("--socket", server.path, "(/ 1 0)")
    assert err.returncode == 1, err
    assert "ZeroDivisionError: division by zero" in err.stderr and "Traceback" in err.stderr, err.stderr
    assert err.stderr.count("ZeroDivisionError: division by zero") == 1, f"the error shown twice: {err.stderr}"
    syntax = repl("--socket", server.path, "(+ 1")
    assert syntax.returncode == 1 and "PrematureEndOfInput" in syntax.stderr, syntax
    assert syntax.stderr.count("PrematureEndOfInput") == 1, f"the error shown twice: {syntax.stderr}"


def test_the_readme_runs_repl_where_its_install_puts_it():
    """The README installs into .venv without activating it, so its repl is .venv/bin/repl."""
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    assert "python3 -m venv .venv && .venv/bin/pip install" in readme
    bare = re.findall(r"(?<![/\w])repl '", readme)
    assert not bare, f"the README runs repl as if .venv/bin were on PATH: {len(bare)} place(s)"
    assert ".venv/bin/repl '(+ 1 2)'" in readme


def test_client_without_a_daemon_exits_2_with_a_hint(runtime):
    out = repl("--socket", str(runtime / "nothing.sock"), "(+ 1 2)")
    assert out.returncode == 2, out
    assert "no daemon answers" in out.stderr and "passepartout daemon" in out.stderr, out.stderr


def test_client_reads_forms_from_stdin_prints_output_and_honours_timeout(server):
    out = repl("--socket", server.path, input='(print "from stdin")\n(* 6 7)\n')
    assert (out.returncode, out.stdout) == (0, "from stdin\n42\n"), out
    slow = repl("--socket", server.path, "--timeout", "0.3", "(while True (setv x 1))")
    assert slow.returncode == 1 and "Timeout" in slow.stderr, slow
    assert repl("--socket", server.path, "(+ 1 2)").stdout == "3\n"


def test_client_usage_errors_exit_2():
    assert repl("--timeout", "soon", "(+ 1 2)").returncode == 2
    assert repl("--frobnicate", "(+ 1 2)").returncode == 2
    assert repl("(+ 1 2)", "(+ 3 4)").returncode == 2
    assert repl("--help").returncode == 0


def test_client_finds_the_socket_the_daemon_uses(env, server, monkeypatch):
    monkeypatch.setenv("PASSEPARTOUT_RUNTIME_DIR", env.config["runtime_dir"])
    assert passepartout_repl.default_socket() == server.path
    monkeypatch.delenv("PASSEPARTOUT_RUNTIME_DIR")
    monkeypatch.setenv("PASSEPARTOUT_CONFIG", str(Path(env.config["config_path"])))
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/4242")
    assert passepartout_repl.default_socket() == "/run/user/4242/passepartout/repl.sock"


def test_bin_repl_runs_by_itself(server):
    out = subprocess.run([str(BIN_REPL), "--socket", server.path, "(+ 1 2)"],
                         capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (0, "3\n"), out
