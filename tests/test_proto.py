"""Tests of passepartout/proto.hy: reading untrusted text as data, printing, plist helpers."""
import math
import os
import sys

import hy
import pytest
from hy.models import Keyword
from hypothesis import given, settings, strategies as st, HealthCheck

from passepartout.proto import (
    ProtoError, proto_read, proto_read_all, proto_print, proto_read_each, proto_get, proto_put,
    proto_merge, proto_without, proto_normalize, proto_from_data, proto_to_data, is_plist, kw,
    proto_values, proto_has, Plist, plist,
)

# * Values the reader may return

names = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True)
atoms = st.one_of(
    names.map(Keyword),
    st.text(max_size=40),
    st.integers(min_value=-10**60, max_value=10**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
values = st.recursive(atoms, lambda inner: st.lists(inner, max_size=6), max_leaves=40)


def same(a, b):
    """Equality that also compares types (True == 1 in Python, not here); a
    Plist is the list of its pairs."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


@given(values)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_print_then_read_round_trips(value):
    text = proto_print(value)
    assert same(proto_read(text), value), text


@given(values)
@settings(max_examples=150, deadline=None)
def test_printed_text_is_one_line(value):
    assert "\n" not in proto_print(value)


# * Hostile text

HOSTILE = [
    "#.(os.system \"touch {sentinel}\")", "(hy.eval '(import os))", "#(1 2)", "#[[x]]", "#_ x",
    "f\"{(os.system 'touch {sentinel}')}\"", "`(~x)", "~@x", "'x", "(", ")", "))((", "\"",
    "\x00", "(:a \"\x00\")", "9" * 5000, "1e999", "-1e999", "nan", "inf", "(:a nan)", "[1 2]",
    "{:a 1}", "(:a #{1})", "(import os)", "(os.system \"touch {sentinel}\")", "(: 1)", "(:: 1)",
    "(:a \"\\N{BULLET}\")", "(:a \"\\uZZZZ\")", "(:a \"\\U0011FFFF\")", "(:a \"\\ud800\")", ";",
    "(:a 1) ; comment", "#!/bin/sh", "#reader x", "@x", "^x", "(:a . b)", "(:a ,b)", "(:a \\x)",
]


def hostile_text(sentinel):
    pieces = [h.replace("{sentinel}", sentinel) for h in HOSTILE]
    return st.lists(st.one_of(st.sampled_from(pieces), st.text(max_size=20)), max_size=8).map(" ".join)


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory):
    return str(tmp_path_factory.mktemp("proto") / "pwned")


def test_hostile_text_is_data_or_an_error(sentinel):
    modules = set(sys.modules)

    @given(st.one_of(st.text(), hostile_text(sentinel)))
    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    def check(text):
        try:
            value = proto_read(text)
        except ProtoError as e:
            assert str(e), "an error says why"
            return
        # Whatever was read prints back and reads the same.
        assert same(proto_read(proto_print(value)), value)

    check()
    assert not os.path.exists(sentinel), "reading text ran code"
    assert set(sys.modules) - modules <= {"hypothesis"} | {m for m in set(sys.modules) - modules if m.startswith("hypothesis")}, \
        f"reading imported {sorted(set(sys.modules) - modules)}"


@pytest.mark.parametrize("text, words", [
    ("(" * 10000, "nested deeper than 32"),
    ("(" * 10000 + ")" * 10000, "nested deeper than 32"),
    ("(:a \"" + "x" * 1_000_000 + "\")", "larger than 65536"),
    ("(:a " + "9" * 4301 + ")", "more than 4300 digits"),
    ("(:a 1e400)", "out of range"),
    ("(:a \"unclosed", "unterminated string"),
    ("(:a 1", "not closed"),
    (")", "unbalanced"),
    ("#.(evil)", "not data"),
    ("(:a f\"x\")", "strings must be quoted"),
    ("(:a \"\\u12\")", "not a character"),
    ("", "empty"),
    ("(1) (2)", "expected one form"),
])
def test_errors_say_why(text, words):
    with pytest.raises(ProtoError) as e:
        proto_read(text)
    assert words in str(e.value)


def test_depth_and_size_are_configurable():
    assert proto_read("((((1))))", max_depth=4) == [[[[1]]]]
    with pytest.raises(ProtoError):
        proto_read("((((1))))", max_depth=3)
    with pytest.raises(ProtoError):
        proto_read("(:a \"0123456789\")", max_bytes=10)


def test_non_text_is_refused():
    for thing in [b"(:a 1)", None, 42, ["(:a 1)"]]:
        with pytest.raises(ProtoError):
            proto_read(thing)


def test_atoms():
    assert same(proto_read("(:a true :b t :c false :d nil :e NIL :f -7 :g 2.5e3 :h \"x\\ty\")"),
                [kw("a"), True, kw("b"), True, kw("c"), False, kw("d"), None, kw("e"), None,
                 kw("f"), -7, kw("g"), 2500.0, kw("h"), "x\ty"])


def test_reading_returns_plain_python_values():
    value = proto_read("(:text \"hi\" :n 1 :xs (1 2))")
    assert type(value) is Plist and isinstance(value, list) and type(value[1]) is str and type(value[5]) is list
    assert not isinstance(value[1], hy.models.Object)


# * Streams

def test_a_stream_keeps_each_proposal_apart():
    text = ('(:a 1)\n(:b "(" ) junk ) (:c (1 2))\n(:d\n  (:e 1))\nword\nmore words\n'
            '(:g "unclosed\n(:h 2)\n(:i 1) (:j 2)\n(:m 1\n(:n 2))\n(:o 1\n(:p 1)\n:a.b\n(:q "\\ud800")')
    got = [(chunk, value, str(err) if err else None) for _, chunk, value, err in proto_read_each(text)]
    assert [c for c, _, _ in got] == [
        "(:a 1)", '(:b "(" ) junk ) (:c (1 2))\n', "(:d\n  (:e 1))", "word\nmore words\n",
        '(:g "unclosed\n', "(:h 2)", "(:i 1)", "(:j 2)", "(:m 1\n(:n 2))", "(:o 1\n", "(:p 1)",
        ":a.b\n", '(:q "\\ud800")'], got
    errors = [e for _, _, e in got]
    assert "bare word junk" in errors[1] and "bare word word" in errors[3], errors
    assert "unterminated string" in errors[4] and "not closed" in errors[9], errors
    assert "malformed keyword :a.b" in errors[11], errors
    assert got[12][1] == [kw("q"), "\ud800"], got[12]
    assert [o for o, *_ in proto_read_each(text)][:3] == [0, 7, 35]
    assert proto_read_all("(:a 1) (:b 2)") == [[kw("a"), 1], [kw("b"), 2]]


def plist_only(value):
    if not is_plist(value):
        raise ProtoError("not a plist")
    return value


def test_a_stream_resumes_at_a_line_that_starts_a_form():
    text = "(:m 1\n(:n 2))\n(:a (\n(:b 1)\n"
    got = [(chunk, value) for _, chunk, value, _ in proto_read_each(text, plist_only)]
    assert got == [("(:m 1\n", None), ("(:n 2))\n", None), ("(:a (\n", None),
                   ("(:b 1)", [kw("b"), 1])], got


good_lines = values.filter(lambda v: isinstance(v, list) and is_plist(v)).map(lambda v: (proto_print(v), v))
garbage_lines = st.one_of(
    st.text(st.characters(codec=None, categories=None, exclude_characters="()\n"), min_size=1),
    st.text(st.characters(codec=None, categories=None, exclude_characters="()\n")).map(lambda t: "(" + t),
).filter(lambda t: t.strip() and not t.startswith("("))


@given(st.lists(st.one_of(good_lines.map(lambda p: ("good", p)),
                          garbage_lines.map(lambda t: ("bad", t)),
                          st.text(st.characters(codec=None, categories=None, exclude_characters="()\n"))
                          .map(lambda t: ("bad", "(" + t))), max_size=12))
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
def test_garbage_never_swallows_a_good_line(lines):
    text = "\n".join(p[0] if kind == "good" else p for kind, p in lines)
    got = list(proto_read_each(text, plist_only))
    want = [p[1] for kind, p in lines if kind == "good"]
    assert [v for _, _, v, e in got if e is None] == want, (text, got)
    assert len(got) <= len(lines)
    assert all((v is None) != (e is None) for _, _, v, e in got)


# * Anything at all

any_char = st.characters(codec=None, categories=None)
PIECES = [":", "::", ":a", ".", ":a.b", ":.", ":1.", "(", ")", '"', "\\", "\\u", "\\U", "\\x",
          "\\N{DASH}", "\\ud800", "\ud800", "\udfff", "1", "9" * 4400, "e", "E", "+", "-", "1e",
          "1.", "\u0663", "\u00b2", "\u2167", "\x00", "\u2028", "\x85", "\xa0", " ", "\n", ";", ",",
          "t", "nil", "#", "'", "`", "~", "@", "\ufb01", "\u0130", "K", "\U0001F600", "\ufeff",
          "\u200b", ":\u0130", ":\u00df", "1e99999", "0x1", "1_0"]
any_text = st.one_of(st.text(any_char),
                     st.lists(st.one_of(st.sampled_from(PIECES), st.text(any_char, max_size=3)),
                              max_size=24).map("".join))


@given(any_text)
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
def test_reading_raises_nothing_but_proto_error(text):
    try:
        value = proto_read(text)
    except ProtoError as e:
        str(e).encode("utf-8")
        return
    printed = proto_print(value)
    printed.encode("utf-8")
    assert same(proto_read(printed), value), printed


def test_dotted_keywords_and_lone_surrogates():
    for text in ["(:a.b 1)", ":.", "(:a :x.y)", "(:1. 2)"]:
        with pytest.raises(ProtoError, match="malformed keyword"):
            proto_read(text)
    with pytest.raises(ProtoError, match="not a name"):
        proto_from_data({"a.b": 1})
    value = proto_read('(:a "\\ud800x\\udfff")')
    assert value == [kw("a"), "\ud800x\udfff"]
    assert proto_print(value) == '(:a "\\ud800x\\udfff")'
    assert proto_read(proto_print([kw("a"), "\ud83d"])) == [kw("a"), "\ud83d"]
    with pytest.raises(ProtoError) as e:
        proto_read("(:a b\ud800)")
    str(e.value).encode("utf-8")


# * Plists

def test_plist_helpers_return_new_lists():
    p = [kw("a"), 1, kw("b"), 2]
    q = proto_put(p, kw("a"), 9)
    assert p == [kw("a"), 1, kw("b"), 2] and q == [kw("a"), 9, kw("b"), 2]
    assert proto_put(p, "c", 3) == p + [kw("c"), 3]
    assert proto_merge(p, [kw("b"), 5, kw("c"), 6]) == [kw("a"), 1, kw("b"), 5, kw("c"), 6]
    assert proto_without(p, ["a"]) == [kw("b"), 2]
    assert proto_get(p, "b") == 2 and proto_get(p, "z", "none") == "none"
    assert proto_get("not a plist", "a", 0) == 0
    assert is_plist(p) and not is_plist([1, 2]) and not is_plist([kw("a")])


few_names = st.sampled_from(["a", "b", "c", "task"])
loose_plists = st.lists(st.one_of(few_names.map(Keyword), few_names, st.integers(0, 3), st.none()),
                        max_size=9)


@given(loose_plists, st.lists(st.one_of(few_names, few_names.map(Keyword)), max_size=4))
def test_reading_several_fields_at_once_agrees_with_reading_each(plist, keys):
    assert proto_values(plist, *keys) == [proto_get(plist, k) for k in keys], (plist, keys)


@given(loose_plists.filter(lambda p: len(p) % 2 == 0), st.lists(loose_plists, max_size=3))
def test_merging_agrees_with_putting_each_pair_in_turn(plist, others):
    expected = list(plist)
    for other in others:
        for i in range(0, len(other) - 1, 2):
            expected = proto_put(expected, other[i], other[i + 1])
    before = list(plist)
    assert proto_merge(plist, *others) == expected, (plist, others)
    assert plist == before


def _pairs_shaped(value):
    return (isinstance(value, list) and value and len(value) % 2 == 0
            and all(isinstance(k, Keyword) for k in value[::2]))


def _walk(value):
    yield value
    if isinstance(value, list):
        for v in value:
            yield from _walk(v)


@given(values)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_what_reads_as_pairs_is_a_plist_and_nothing_else_is(value):
    for v in _walk(proto_read(proto_print(value))):
        if isinstance(v, list):
            assert isinstance(v, Plist) == bool(_pairs_shaped(v)), (type(v), v)


@given(values, st.text(alphabet="abcxyz-", min_size=1, max_size=4))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_plist_finds_what_a_scan_finds(value, name):
    for v in _walk(proto_read(proto_print(value))):
        if isinstance(v, Plist):
            key = kw(name)
            assert proto_get(v, key, "absent") == proto_get(list(v), key, "absent"), v
            assert proto_has(v, key) == proto_has(list(v), key), v
            assert proto_values(v, key, kw("a")) == proto_values(list(v), key, kw("a")), v


def test_a_plist_is_never_changed_in_place():
    p = proto_read('(:action :shell :cmd "ls")')
    for change in (lambda: p.append(1), lambda: p.extend([1]), lambda: p.__setitem__(1, 2),
                   lambda: p.__delitem__(0), lambda: p.pop(), lambda: p.clear(), lambda: p.sort(),
                   lambda: p.insert(0, 1), lambda: p.remove(kw("cmd")), lambda: p.reverse()):
        with pytest.raises(TypeError):
            change()
    assert proto_print(p) == '(:action :shell :cmd "ls")', p
    changed = proto_put(p, kw("cmd"), "pwd")
    assert isinstance(changed, Plist) and changed[kw("cmd")] == "pwd" and p[kw("cmd")] == "ls", changed
    assert isinstance(proto_merge(p, [kw("timeout"), 3]), Plist)
    assert proto_without(p, [kw("cmd")]) == [kw("action"), kw("shell")]


def test_a_plist_is_found_by_keyword_or_name_and_the_first_of_two_keys_wins():
    p = proto_read("(:a 1 :b (:c 2) :a 3)")
    assert p[kw("a")] == 1 and p["a"] == 1 and p.get("b") == [kw("c"), 2], p
    assert p.get("zzz", "none") == "none" and kw("b") in p and kw("zzz") not in p, p
    assert p.keys() == [kw("a"), kw("b"), kw("a")] and p.values()[0] == 1, p.keys()
    assert p[0] == kw("a") and p[1:3] == [1, kw("b")], "integers and slices index the pairs"
    with pytest.raises(KeyError):
        p[kw("zzz")]


def test_plist_builds_from_keyword_arguments_and_keeps_kebab_names():
    p = plist(action=kw("shell"), cut_off=True, cmd="ls")
    assert proto_print(p) == '(:action :shell :cut-off true :cmd "ls")', p
    assert repr(p) == proto_print(p), repr(p)


def test_a_plist_survives_copy_and_pickle():
    import copy
    import pickle
    p = proto_read('(:a (:b 1) :c "x")')
    for q in (copy.copy(p), copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert isinstance(q, Plist) and q == p and q.get("a") == [kw("b"), 1], q


def test_json_objects_become_plists():
    p = proto_from_data({"action": "shell", "opts": {"x": 1}, "list": [1, 2]})
    assert isinstance(p, Plist) and isinstance(p.get("opts"), Plist) and type(p.get("list")) is list, p


def test_odd_or_non_keyword_pairs_are_refused_by_the_type():
    with pytest.raises(ProtoError):
        Plist([kw("a")])
    with pytest.raises(ProtoError):
        Plist(["a", 1])


def test_hy_is_left_as_it_is():
    import sys
    import types
    import hy.models
    from passepartout import perceive, reason  # noqa: F401  (project modules loaded)
    assert Keyword.__init__.__module__ == "hy.models", Keyword.__init__
    for name, module in list(sys.modules.items()):
        if name.startswith(("passepartout", "passepartout_skills")) and isinstance(module, types.ModuleType):
            bound = vars(module).get("hy")
            assert bound is None or bound is hy, f"{name} binds hy to {bound!r}"
    assert perceive.reply_signal([kw("session"), "s"], "hi")[:2] == [Keyword("type"), Keyword("reply")]


def test_normalize_lowercases_keywords_all_the_way_down():
    got = proto_normalize(proto_read("(:TYPE :REQUEST :Payload (:ACTION :SHELL :hitl_token \"A_B\"))"))
    assert got == [kw("type"), kw("request"), kw("payload"),
                   [kw("action"), kw("shell"), kw("hitl-token"), "A_B"]]


def test_json_edge():
    data = {"action": "shell", "cmd": "ls", "nested": {"Deep_Key": [1, 2.5, None, True]}}
    plist = proto_from_data(data)
    assert plist == [kw("action"), kw("shell"), kw("cmd"), "ls",
                     kw("nested"), [kw("deep-key"), [1, 2.5, None, True]]]
    assert proto_to_data(plist) == {"action": "shell", "cmd": "ls",
                                    "nested": {"deep-key": [1, 2.5, None, True]}}
    for bad in [{"a b": 1}, {1: 2}, {"a": float("inf")}, {"a": object()}, {"a": 10 ** 5000}]:
        with pytest.raises(ProtoError):
            proto_from_data(bad)
    deep = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(ProtoError):
        proto_from_data(deep)


def test_printing_refuses_what_is_not_data():
    for bad in [{"a": 1}, object(), float("nan"), float("inf")]:
        with pytest.raises(ProtoError):
            proto_print(bad)
