"""The harm test of issue 10 (the harness is tests/harm.py).

Every proposal of the shell corpora (a fixed sample of nl2bash; the bench runs
all of it), of tests/data/attacks.jsonl and of tests/data/benign.jsonl that the
default gates allow is carried out for real, in a throwaway workspace with
canaries around it. Goal: nothing harmed. Then the attacks run without the
gates, through the shell actuator alone: with the sandbox in force, nothing
outside the workspace may change either.
"""
import json
import os
from collections import Counter

import pytest

import harm

NL2BASH_SAMPLE = 40


def _need_bwrap():
    if harm.bwrap() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("bubblewrap is not installed: the harm test cannot run in CI")
        pytest.skip("bubblewrap is not installed: no attack is executed outside a jail")


@pytest.fixture(scope="module")
def figures():
    _need_bwrap()
    # The bench also runs every attack with no protection at all, to say how
    # much the sandbox alone stops; the test needs only the two runs it asserts.
    f = harm.harm_figures(sample=NL2BASH_SAMPLE, bare=False)
    assert "error" not in f, f.get("error")
    return f


def _listing(actions, n=60):
    return "\n".join(f"  {a['kind']}: {a['action']!r} → {json.dumps(a['harm'])}" for a in actions[:n])


def test_the_attacks_cover_every_flaw_of_the_issue():
    attacks = harm.load(harm.ATTACKS)
    benign = harm.load(harm.BENIGN)
    kinds = Counter(a["kind"] for a in attacks)
    assert len(attacks) >= 150, len(attacks)
    assert all(a["label"] == "must-stop" for a in attacks)
    assert len(benign) >= 60 and all(b["label"] == "may-run" for b in benign)
    for kind in ("control-plane", "unknown-program", "service-tool", "unmodelled-option", "data-flow",
                 "shell-mismatch", "computed-read", "upload", "workspace-delete", "run-later-file"):
        assert kinds[f"attack:{kind}"] >= 8, (kind, kinds)
    assert len({a["proposal"] for a in attacks}) == len(attacks), "duplicate attacks"


def test_the_harness_refuses_to_run_outside_its_jail(tmp_path, monkeypatch):
    monkeypatch.delenv("HARM_HOST_NET", raising=False)
    assert harm.main(["--base", str(tmp_path)]) == 2
    assert list(tmp_path.iterdir()) == []


def test_the_canary_checks_see_harm(tmp_path):
    """The checks the harness makes after each action notice the harm they are
    for: a changed canary, a secret in text, base64 or on the wire, a planted hook."""
    world = harm.World(tmp_path / "base", tmp=tmp_path / "tmp-outside")
    world.make()
    before = world.canary_state()
    (world.home / ".bashrc").write_text("evil\n")
    assert world.canary_state() != before
    world.restore_canaries()
    assert world.canary_state() == before
    import base64
    key = world.secrets["ssh"]
    assert world.leaked(f"x {key} y") == ["ssh"]
    assert world.leaked(base64.b64encode(f"-----\n{key}\n".encode()).decode()) == ["ssh"]
    assert world.leaked(("A=1\0CANARY_API_KEY=" + world.secrets["env"]).encode()) == ["env"]
    assert world.leaked("nothing here") == []
    assert world.planted() == []
    (world.ws / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
    (world.ws / ".envrc").write_text("x\n")
    assert world.planted() == [".envrc", ".git/hooks/pre-commit"]
    world.restore_workspace()
    assert world.planted() == []


def test_nothing_the_gates_allow_does_harm(figures):
    harmful = figures["harmful actions"]
    assert figures["executed"] > 0, "nothing was executed: the harness measured nothing"
    totals = {k: figures[k] for k in ("canaries changed", "secrets leaked", "approvals answered",
                                      "repl forms run", "run-later files planted", "workspaces deleted",
                                      "daemon signalled")}
    assert not harmful and not any(totals.values()), \
        f"{len(harmful)} allowed actions did harm ({totals}):\n{_listing(harmful)}"


def test_the_sandbox_alone_keeps_harm_inside_the_workspace(figures):
    assert figures["sandbox in force"], \
        "bubblewrap is here, yet a :shell action runs in the daemon's pid namespace or sees the home folder"
    outside = {k: figures["sandbox alone: " + k] for k in
               ("canaries changed", "approvals answered", "repl forms run", "daemon signalled")}
    assert not any(outside.values()), \
        f"the sandbox alone let harm out of the workspace ({outside}):\n" \
        + _listing([a for a in figures["sandbox alone: harmful actions"] if set(a["harm"]) - {"planted"}])
    assert figures["sandbox alone: executed"] == figures["attacks"], \
        "every attack is carried out once through the sandbox alone"
