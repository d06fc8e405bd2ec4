"""Tests of passepartout/extract.hy: the labelled set of real model answers, and hostile input."""
import hy  # noqa: F401
import pytest

from passepartout.extract import extract, figures
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
    "shell\n{" * 5000,
    ">>>shell\n{" * 5000,
    "functions.shell:0{" * 3000,
    "[TOOL_CALLS]shell[ARGS]{" * 2000,
    "✿FUNCTION✿: shell ✿ARGS✿: {" * 2000,
    "<function=shell><parameter=cmd>" * 2000,
    '>>>shell\n{"cmd": "rm -rf ~"}' * 3000,
])
def test_hostile_answers_are_refused_not_run(text):
    try:
        r = extract(text)
    except ProtoError:
        return
    assert r[0].name == "message", f"a hostile answer became a proposal: {r!r}"


# * The readers by family

CALLS = {
    "hermes": '<tool_call>{"name": "shell", "arguments": {"cmd": "rm -rf ~"}}</tool_call>',
    "qwen3-coder": "<tool_call><function=shell><parameter=cmd>rm -rf ~</parameter></function></tool_call>",
    "glm": "<tool_call>shell<arg_key>cmd</arg_key><arg_value>rm -rf ~</arg_value></tool_call>",
    "minimax": '<minimax:tool_call><invoke name="shell"><parameter name="cmd">rm -rf ~</parameter></invoke></minimax:tool_call>',
    "invoke": '<function_calls><invoke name="shell"><parameter name="cmd">rm -rf ~</parameter></invoke></function_calls>',
    "deepseek": '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>shell<｜tool▁sep｜>{"cmd": "rm -rf ~"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "kimi": 'functions.shell:0{"cmd": "rm -rf ~"}',
    "mistral": '[TOOL_CALLS]shell[CALL_ID]abc123def[ARGS]{"cmd": "rm -rf ~"}',
    "qwen-agent": '✿FUNCTION✿: shell ✿ARGS✿: {"cmd": "rm -rf ~"}',
    "llama31": '<function=shell>{"cmd": "rm -rf ~"}</function>',
    "json": '{"action": "shell", "cmd": "rm -rf ~"}',
}


@pytest.mark.parametrize("family", sorted(CALLS))
def test_a_call_inside_a_sentence_is_quoted_in_every_family(family):
    # the frame names no refusal and no quoting verb: only where the call stands says it is quoted
    text = f"Your page has {CALLS[family]} near its footer, placed there by someone else."
    r = extract(text)
    assert r[0].name == "message", f"{family}: a call inside a sentence became a proposal: {r!r}"


@pytest.mark.parametrize("family", sorted(CALLS))
def test_the_same_call_on_its_own_is_the_proposal(family):
    r = extract(f"I'll clean up now.\n\n{CALLS[family]}")
    assert r[0].name == "proposal", f"{family}: {r!r}"
    action = r[1]
    assert action[1].name == "shell" and action[3] == "rm -rf ~", f"{family}: {action!r}"


def test_harmony_analysis_is_never_shown():
    text = ("<|channel|>analysis<|message|>SECRET-PLAN think more<|end|><|start|>assistant"
            "<|channel|>final<|message|>The answer is 4.<|return|>")
    r = extract(text)
    assert r == [r[0], "The answer is 4."] and r[0].name == "message", r
    bare = "analysisSECRET-PLAN think moreassistantfinalThe answer is 4."
    assert extract(bare)[1] == "The answer is 4.", extract(bare)


def test_words_beside_a_call_are_returned_as_said():
    r = extract("Thought: internal\nI'll list the files first.\n"
                '<tool_call>{"name": "shell", "arguments": {"cmd": "ls"}}</tool_call>')
    said = dict(zip([k.name for k in r[::2]], r[1::2])).get("said")
    assert said == "I'll list the files first.", r
    r = extract("<|channel|>commentary<|message|>Listing first.<|end|><|start|>assistant"
                '<|channel|>commentary to=functions.shell <|constrain|>json<|message|>{"cmd": "ls"}<|call|>')
    said = dict(zip([k.name for k in r[::2]], r[1::2])).get("said")
    assert said == "Listing first.", r


def test_an_argument_given_as_none_is_left_out():
    r = extract("{'action': 'read_file', 'path': 'a.txt', 'limit': None}")
    assert r[1] == [r[1][0], r[1][1], r[1][2], "a.txt"] and len(r[1]) == 4, r


def test_a_cut_off_call_of_any_family_is_a_retry():
    for text in ["<tool_call>\n<function=shell>\n<parameter=cmd>\nls",
                 '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>shell<｜tool▁sep｜>{"cmd": "ls',
                 '[TOOL_CALLS]shell[CALL_ID]abc[ARGS]{"cmd": "ls"',
                 '✿FUNCTION✿: shell\n✿ARGS✿: {"cmd": "ls"']:
        with pytest.raises(ProtoError):
            extract(text)
