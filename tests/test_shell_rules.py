"""Tests for passepartout/shell/rules.hy: the rules file, read and checked, and how a
command's words split into options and operands."""
import hy  # noqa: F401  (the .hy importer)
import pytest

import passepartout.shell.judge as shell
from passepartout.shell.rules import ShellRulesError, load_rules, parse_options
from conftest import write_rules


def test_the_built_in_rules_load_and_pass_their_examples():
    assert shell.RULES_ERROR is None, shell.RULES_ERROR
    rules = load_rules()
    assert len(rules["rules"]) > 50
    for rule in rules["rules"]:
        assert rule["examples"], f"rule {rule['name']} has no example"


@pytest.mark.parametrize("text, needle", [
    ('[[rule]]\nname = "no-ls"\nprogram = "ls"\nverdict = "reject"\nreason = "r"\n'
     'examples = ["echo ls"]\n', "rule no-ls: its example 'echo ls' does not match it"),
    ('[[rule]]\nname = "no-ls"\nprogram = "ls"\nverdict = "reject"\nreason = "r"\n'
     'examples = ["ls"]\ncounterexamples = ["sudo ls -la"]\n', "its counterexample 'sudo ls -la' matches it"),
    ('[[rule]]\nname = "typo"\nprogram = "ls"\nverdit = "reject"\nexamples = ["ls"]\n',
     "unknown key"),
    ('[[rule]]\nname = "both"\nprogram = "rm"\nverdict = "reject"\nreason = "r"\n'
     'deletes = "operands"\nexamples = ["rm x"]\n', "not both"),
    ('[[rule]]\nname = "silent"\nprogram = "rm"\nverdict = "reject"\nexamples = ["rm x"]\n',
     "needs a reason"),
    ('[[rule]]\nname = "bad-re"\nprogram = "rm"\narg-regex = "("\nverdict = "reject"\n'
     'reason = "r"\nexamples = ["rm x"]\n', "not a regular expression"),
    ('[[rule]]\nname = "twice"\nprogram = "ls"\nverdict = "allow"\nreason = "r"\nexamples = ["ls"]\n'
     '[[rule]]\nname = "twice"\nprogram = "ls"\nverdict = "allow"\nreason = "r"\nexamples = ["ls"]\n',
     "defined twice"),
    ('[[rule]]\nname = "Bad Name"\nprogram = "ls"\n', "lower-case kebab"),
    ('[[rule\n', "rules.toml"),
    ('[path]\nsecret-dirs = [".x"]\n', "unknown section [path]"),
    ('[paths]\nsecret-dir = [".x"]\n', "unknown key secret-dir"),
    ('[programs.ls]\nvalue-option = ["-w"]\n', "unknown key(s)"),
    ('version = 2\n', "version 2"),
])
def test_a_broken_rules_file_is_refused_naming_the_problem(tmp_path, text, needle):
    with pytest.raises(ShellRulesError) as e:
        load_rules(write_rules(tmp_path, text))
    assert needle in str(e.value), str(e.value)


def test_options_and_operands():
    p = parse_options(["-rf", "--force", "--out=x", "a", "--", "-b"])
    assert {"-r", "-f", "--force", "--out", "--"} <= p["names"]
    assert p["operands"] == ["a", "-b"]
    tar = shell.RULES["programs"]["tar"]
    p = parse_options(["czf", "out.tgz", "src"], tar)
    assert ("-f", "out.tgz") in p["opts"] and p["operands"] == ["src"]
