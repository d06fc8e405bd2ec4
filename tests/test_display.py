"""Tests of passepartout/display.hy (text safe to show, valid Unicode) and of the
text-safety gate (skills/text_safety.hy) it feeds."""
import json
import re

import hy  # noqa: F401
import pytest
from hy.models import Keyword
from hypothesis import given, settings, strategies as st

from passepartout.display import (control_sequences, display_text, json_line, json_visible,
                                  unicode_problem, valid_unicode)
from passepartout.proto import proto_get, proto_print, proto_read

K = Keyword

# What a terminal or a text renderer obeys, or cannot take at all.
OBEYED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")

OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"
CLEAR = "\x1b[2J\x1b[H  ✓ Approved: nothing to worry about"
OSC8 = "\x1b]8;;http://evil.example/x\x1b\\click here\x1b]8;;\x1b\\"
HOSTILE = [OSC52, CLEAR, OSC8,
           "\x1bP+q544e\x1b\\",            # DCS
           "\x1b_Gf=100;AAAA\x1b\\",        # APC (kitty graphics)
           "\x1b^private\x1b\\",            # PM
           "\x9b2J",                        # C1 CSI
           "\x9d52;c;eA==\x9c",             # C1 OSC with a C1 terminator
           "rm -rf ~ \u202e# safe\u202c",   # a bidi override
           "\u2066isolated\u2069 \u202a\u202b\u202d",
           "overwrite\rls -la",             # a carriage return that hides the line's start
           "bell\x07 back\x08\x08 del\x7f nul\x00 so\x0e",
           "lone \ud800 and \udfff"]


@pytest.mark.parametrize("text", HOSTILE)
def test_what_a_terminal_obeys_is_made_visible(text):
    shown = display_text(text)
    assert not OBEYED.search(shown), repr(shown)
    shown.encode("utf-8")
    # made visible, not removed: every character of the original still shows, escaped
    assert len(shown) >= len(text), (text, shown)
    assert display_text(shown) == shown, "showing twice changes nothing"


def test_the_attacks_of_the_issue_read_as_what_they_are():
    assert display_text(OSC52) == "\\x1b]52;c;cm0gLXJmIH4=\\x07"
    assert display_text(CLEAR).startswith("\\x1b[2J\\x1b[H  ✓ Approved"), display_text(CLEAR)
    assert "http://evil.example/x" in display_text(OSC8), "a hidden link shows its address"
    assert display_text("a\u202eb") == "a\\u202eb"
    assert display_text("x\ud800") == "x\\ud800"
    assert display_text("x\ry") == "x\\ry"


def test_newline_tab_and_a_crlf_line_end_are_text():
    assert display_text("one\ttwo\nthree") == "one\ttwo\nthree"
    assert display_text("dos\r\nline\r\n") == "dos\nline\n"
    plain = "naïve café — 日本語 😀 ‏عربي‎ (:action :message)"
    assert display_text(plain) is plain or display_text(plain) == plain


@given(st.text(st.characters(codec=None, categories=None)))
@settings(max_examples=300, deadline=None)
def test_any_text_is_shown_safely(text):
    shown = display_text(text)
    assert not OBEYED.search(shown), repr(shown)
    shown.encode("utf-8")
    assert display_text(shown) == shown
    if not OBEYED.search(text):
        assert shown == text, "text without controls is shown as it is"


@given(st.recursive(st.none() | st.booleans() | st.integers()
                    | st.text(st.characters(codec=None, categories=None)),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(max_size=5), inner),
                    max_leaves=20))
@settings(max_examples=200, deadline=None)
def test_json_lines_are_one_safe_line_and_read_back_the_same(value):
    line = json_line(value)
    assert not re.search("[\n\r\x85\u2028\u2029\x1b\x9b\u202a-\u202e\u2066-\u2069]", line), repr(line)
    assert len(line.splitlines()) <= 1, repr(line)
    line.encode("utf-8")
    assert json.loads(line) == value


def test_json_visible_touches_only_what_needs_it():
    assert json_visible('{"a": "é\u202e"}') == '{"a": "é\\u202e"}'
    assert json_visible('{"a": 1}') == '{"a": 1}'


def test_valid_unicode_escapes_lone_surrogates_at_every_depth():
    value = {"role": "user", "content": ["ok", ("x\ud800", {"y\udcff": "z"})]}
    got = valid_unicode(value)
    assert got == {"role": "user", "content": ["ok", ("x\\ud800", {"y\\udcff": "z"})]}, got
    json.dumps(got, ensure_ascii=False).encode("utf-8")
    same = ["a", ["b"]]
    assert valid_unicode(same) is same, "a value without surrogates is returned as it is"
    assert unicode_problem(["fine", ["ab\ud800"]]) == "a lone surrogate (\\ud800) at character 3"
    assert unicode_problem("fine") is None and unicode_problem(7) is None


def test_control_sequences_are_named_once_each_in_words():
    kinds = control_sequences(OSC52 + CLEAR + OSC8 + "\x1b[31mred\x1b[0m \u202e")
    assert kinds[0] == "OSC 52 (writes the clipboard)", kinds
    assert "OSC 8 (a link that hides its address)" in kinds, kinds
    assert sum(k.startswith("CSI") for k in kinds) == 1, kinds
    assert any(k.startswith("U+202E") for k in kinds), kinds
    for k in kinds:
        assert not OBEYED.search(k), k
    assert control_sequences("tab\tnewline\ncrlf\r\n") == []


# * The gate, judged as verify judges

@pytest.fixture(scope="module")
def ctx(tmp_path_factory):
    from passepartout.context import make_context
    from passepartout.skills import Registry, load_skills
    registry = Registry()
    load_skills(registry)
    ws = tmp_path_factory.mktemp("ws")
    return make_context(workspace=str(ws), session="test", config={"workspace": str(ws)},
                        secrets=[], skills=registry)


def judge(ctx, action_text):
    from passepartout.verify import verify
    outcome = verify(proto_read(action_text), ctx)
    return (proto_get(outcome, K("verdict")).name, proto_get(outcome, K("gate")),
            proto_get(outcome, K("reason")), proto_get(outcome, K("action")))


def test_a_message_holding_control_sequences_is_modified_to_show_them(ctx):
    action = [K("action"), K("message"), K("text"), "copied " + OSC52 + CLEAR + OSC8]
    verdict, gate, reason, final = judge(ctx, proto_print(action))
    assert (verdict, gate) == ("modify", "text-safety"), (verdict, gate, reason)
    text = proto_get(final, K("text"))
    assert not OBEYED.search(text) and "\\x1b]52;c;" in text and "Approved" in text, text
    assert "OSC 52" in reason and not OBEYED.search(reason), reason


def test_an_explanation_holding_them_is_modified_and_the_command_judged(ctx):
    action = [K("action"), K("shell"), K("cmd"), "ls -la", K("explanation"), "list \u202eit"]
    verdict, gate, _, final = judge(ctx, proto_print(action))
    assert verdict == "modify" and gate == "text-safety", (verdict, gate)
    assert proto_get(final, K("explanation")) == "list \\u202eit"
    assert proto_get(final, K("cmd")) == "ls -la"


@pytest.mark.parametrize("action", [
    [K("action"), K("shell"), K("cmd"), "printf '" + OSC52 + "'", K("explanation"), "copy"],
    [K("action"), K("shell"), K("cmd"), "cat notes.txt \u202e; rm -rf ~ \u202c", K("explanation"), "read"],
    [K("action"), K("shell"), K("cmd"), "echo safe\rrm -rf ~", K("explanation"), "say"],
    [K("action"), K("write-file"), K("path"), "main.c", K("content"),
     "int ok = 1; /* \u202e } \u2066if (admin)\u2069 \u2066 begin admins only */", K("explanation"), "code"],
    [K("action"), K("read-file"), K("path"), "a\x1b[2Jb.txt"],
    [K("action"), K("memory-add"), K("text"), "remember \x9b2J", K("explanation"), "note"],
])
def test_control_sequences_in_commands_paths_and_contents_are_refused(ctx, action):
    verdict, gate, reason, _ = judge(ctx, proto_print(action))
    assert (verdict, gate) == ("reject", "text-safety"), (verdict, gate, reason)
    assert "propose it again" in reason and not OBEYED.search(reason), reason


@pytest.mark.parametrize("field,action", [
    ("text", [K("action"), K("message"), K("text"), "hi \ud800"]),
    ("cmd", [K("action"), K("shell"), K("cmd"), "ls \udcff", K("explanation"), "list"]),
    ("path", [K("action"), K("read-file"), K("path"), "\ud83d.txt"]),
    ("explanation", [K("action"), K("shell"), K("cmd"), "ls", K("explanation"), "why \udfff"]),
    ("notes", [K("action"), K("message"), K("text"), "hi",
               K("notes"), [[K("id"), "a", K("objective"), "do \ud800"]]]),
])
def test_invalid_unicode_is_refused_in_any_field_with_a_reason(ctx, field, action):
    verdict, gate, reason, _ = judge(ctx, proto_print(action))
    assert (verdict, gate) == ("reject", "text-safety"), (verdict, gate, reason)
    assert f":{field} " in reason and "lone surrogate" in reason, reason
    reason.encode("utf-8")


def test_control_sequences_nested_in_a_field_of_its_own_are_refused(ctx):
    action = [K("action"), K("message"), K("text"), "hi", K("notes"), ["fine", ["x" + OSC52]]]
    verdict, gate, reason, _ = judge(ctx, proto_print(action))
    assert (verdict, gate) == ("reject", "text-safety"), (verdict, gate, reason)
    assert ":notes holds OSC 52" in reason, reason


def test_ordinary_text_passes(ctx):
    for action in [[K("action"), K("message"), K("text"), "Done:\n\tfile.txt\r\nnaïve 😀 עברית"],
                   [K("action"), K("shell"), K("cmd"), "printf '\\033[1mbold\\033[0m\\n'",
                    K("explanation"), "show bold"]]:
        verdict, gate, reason, _ = judge(ctx, proto_print(action))
        assert gate != "text-safety", (action, verdict, reason)


# * Actions, results and approvals in words

from passepartout.display import action_words, output_words, result_words, status_words, when_words  # noqa: E402


def test_an_action_is_said_in_words():
    assert action_words(proto_read('(:action :shell :cmd "git push --force origin main" :explanation "x")')) \
        == "`git push --force origin main`"
    assert action_words(proto_read('(:action :write-file :path "notes.txt" :content "a\\nb\\nc\\n")')) \
        == "write notes.txt (3 lines)"
    assert action_words(proto_read('(:action :read-file :path "notes.txt")')) == "read notes.txt"
    spawn = action_words(proto_read('(:action :spawn :objective "tidy" :explanation "why")'))
    assert spawn == "spawn objective=tidy" and "(:" not in spawn, spawn
    assert action_words(proto_read('(:action :shell :cmd "echo \\u001b[2J")')) == "`echo \\x1b[2J`"


def test_a_result_is_said_with_its_status_in_words_and_its_output():
    failed = proto_read('(:status :error :exit 2 :output "ls: cannot access \'x\'\\nnotes.txt\\n"'
                        ' :timed-out false :error "exit status 2")')
    assert result_words(failed) == "failed with exit status 2\nls: cannot access 'x'\nnotes.txt"
    late = proto_read('(:status :error :exit -9 :output "" :timed-out true'
                      ' :error "timed out after 30 s; the command and its children were killed")')
    assert status_words(late) == "timed out after 30 s; the command and its children were killed"
    assert "-9" not in result_words(late)
    assert result_words(proto_read('(:status :ok :exit 0 :output "")')) == "succeeded (no output)"
    assert result_words(proto_read('(:status :ok :path "/w/n.txt" :bytes 12)')) == "done (12 bytes written)"
    assert status_words(proto_read('(:status :error :error "no such file")')) == "failed: no such file"


def test_long_output_is_cut_in_the_middle_saying_how_much():
    shown = output_words("\n".join(f"line {i}" for i in range(100)))
    assert shown.startswith("line 0\n") and shown.endswith("line 99"), shown
    assert "(70 lines left out)" in shown and "line 50" not in shown, shown
    wide = output_words("x" * 10000)
    assert "(7000 characters left out)" in wide and len(wide) < 3100, len(wide)


def test_a_time_is_said_with_its_zone():
    import time
    shown = when_words(0, 0)
    assert shown.endswith(time.strftime("%Z", time.localtime(0))) and shown.count(":") == 2, shown
    assert re.match(r"1970-01-0\d \d\d:\d\d:\d\d ", when_words(86400 * 3, 0)), "another day shows its date"
    assert not re.match(r"\d{4}-", when_words(5, 0)), "today's time shows no date"


def test_a_reason_does_not_say_the_command_again():
    from passepartout.display import reason_words
    action = proto_read('(:action :shell :cmd "rm -rf ~")')
    assert reason_words(action, "`rm -rf ~` — deletes /root: it is the home folder") \
        == "deletes /root: it is the home folder"
    assert reason_words(action, "outside the workspace") == "outside the workspace"
