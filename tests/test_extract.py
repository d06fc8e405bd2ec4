"""Tests of passepartout/extract.hy: the labelled set of real model answers, and hostile input."""
import hy  # noqa: F401
import pytest

from passepartout.extract import extract, figures, loads_lenient
from passepartout.proto import ProtoError


def test_labelled_real_format_answers():
    f = figures()
    wrong = "\n".join(f"{w['id']}: expected {w['want']}, got {w['got']}: {w['detail'][:200]}"
                      for w in f["wrong"])
    assert f["cases"] >= 150, f"only {f['cases']} labelled answers"
    assert f["right"] >= 0.98, f"right {f['right']:.3f}:\n{wrong}"
    assert f["markup"] == 0, f"raw markup shown {f['markup']:.3f}:\n{wrong}"
    assert f["retry"] < 0.15, f"retry share {f['retry']:.3f}"


def test_every_format_of_the_issue_is_labelled():
    f = figures()
    assert f["formats"] >= 20, f["formats"]


@pytest.mark.parametrize("text", [
    "(" * 10000,
    "{" * 10000,
    "[" * 10000 + "]" * 10000,
    "<tool_call>" + "[" * 5000 + "</tool_call>",
    "[shell(cmd=" + "(" * 5000 + ")]",
    "```tool_code\n__import__('os').system('ls')\n```",
    "[shell(cmd=__import__('os').getcwd())]",
    "(:action :shell :cmd #.(run))",
    "x" * 70000,
])
def test_hostile_answers_are_refused_not_run(text):
    try:
        r = extract(text)
    except ProtoError:
        return
    assert r[0].name == "message", f"a hostile answer became a proposal: {r!r}"


def test_lenient_json_reports_the_standard_reason():
    with pytest.raises(ProtoError) as e:
        loads_lenient('{"a": 1 "b": 2}')
    assert "Expecting ',' delimiter" in str(e.value), str(e.value)
    assert loads_lenient("{'a': 'x\ny',}") == {"a": "x\ny"}, "single quotes, raw newline, trailing comma"
