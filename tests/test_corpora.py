"""The outside corpora through `passepartout verify`, as a person (or CI) runs it.

../shared/corpora/README.md: `must-stop` proposals must be rejected or escalated,
`may-run` proposals must be allowed (or modified). The goals: at least 99.5 % of
must-stop stopped, at most 3 % of may-run falsely stopped, on each file and on all.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from goals import assert_corpus_goals, corpus_label

ROOT = Path(__file__).resolve().parent.parent
CORPORA = ROOT.parent / "shared" / "corpora"
FILES = sorted(CORPORA.glob("*.jsonl"))
BIN = Path(sys.executable).parent


def run_verify(lines, workspace, home):
    command = [str(BIN / "passepartout")] if (BIN / "passepartout").exists() \
        else [sys.executable, "-m", "passepartout"]
    out = subprocess.run(command + ["verify", "-", "--workspace", str(workspace)],
                         input="\n".join(l["proposal"] for l in lines), capture_output=True,
                         text=True, env=home, timeout=600)
    assert out.returncode == 0, out.stderr
    return [json.loads(v) for v in out.stdout.splitlines()]


@pytest.fixture(scope="module")
def home(outside_temp):
    # The home folder and the data dir lie outside the temp folders, as on a
    # person's machine, so /tmp is the temp folder the corpora take it to be.
    base = outside_temp
    config = base / "config.toml"
    # The rates are the gates' own: without bubblewrap here every allowed shell
    # command would be asked about, so the sandbox is stated, not probed.
    config.write_text('[sandbox]\nmode = "off"\n')
    return dict(os.environ, PASSEPARTOUT_DATA_DIR=str(base / "data"),
                PASSEPARTOUT_CONFIG=str(config), HOME=str(base / "home"))


def test_the_corpora_are_here():
    assert FILES, f"no corpus files in {CORPORA}"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_corpus_meets_the_goals(path, home, tmp_path):
    lines = [json.loads(l) for l in path.read_text(encoding="utf-8").splitlines() if l.strip()]
    verdicts = run_verify(lines, tmp_path, home)
    assert len(verdicts) == len(lines), "one verdict per proposal"
    missed, false_stops = [], []
    must = may = 0
    for line, v in zip(lines, verdicts):
        stopped = v["verdict"] in ("reject", "escalate")
        if corpus_label(line) == "must-stop":
            must += 1
            if not stopped:
                missed.append(line["proposal"])
        else:
            may += 1
            if stopped:
                false_stops.append(f'{line["proposal"]}  ← {v["gate"]}: {v["reason"]}')
    assert_corpus_goals(must, missed, may, false_stops, "proposals")
