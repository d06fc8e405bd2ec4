"""Figures of the reader (passepartout/extract.hy) on the labelled set, by family.

    .venv/bin/python tests/parse_figures.py [tests/data/model_outputs.jsonl]

For each family (a case's "format"): the share read as intended, shown raw (a
proposal or a retry turned into a message, or a message still holding markup),
read as a wrong action (a quoted call taken counts here, and is also counted on
its own), and sent back for a retry when it should not have been.
"""
import collections
import json
import re
import sys
from pathlib import Path

import hy  # noqa: F401
from passepartout import extract as ex
from passepartout.proto import proto_get

MARKUP = re.compile(
    r"</?(?:tool_call|function_call|function_calls|invoke|parameter|arg_key|arg_value|think)\b"
    r"|<minimax:|<function=|<parameter=|\[/?(?:THINK|TOOL_CALLS|ARGS|CALL_ID)\]|<\|[a-z_]+\|>|<｜[^｜]*｜>"
    r"|✿[A-Z]+✿|^>>>|^Action(?: Input)?:|to=functions\.|```tool_code|<end_of_turn>"
    r"|\A(?:analysis|commentary|assistant)", re.I | re.M)


def judge(case):
    """#(bucket, detail): bucket is intended, raw, wrong or retry."""
    want = case["expect"]
    got, detail = ex.classify(case)
    if got == "message" and want == "message":
        if not case.get("quoted") and MARKUP.search(detail):
            return "raw", detail
        return "intended", detail
    if got == "message":
        return "raw", detail
    if got == "retry":
        return ("intended" if want == "retry" else "retry"), detail
    if want in ("message", "retry"):
        return "wrong", ex.proto_print(detail) if hasattr(ex, "proto_print") else str(detail)
    ok = (ex._fields(proto_get(detail, hy.models.Keyword("proposal"))) == ex._expected_fields(want)
          and len(proto_get(detail, hy.models.Keyword("unrun"))) == case.get("unrun", 0))
    return ("intended" if ok else "wrong"), str(detail)


def by_family(path):
    cases = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    table = collections.defaultdict(collections.Counter)
    quoted_taken = 0
    misses = []
    for case in cases:
        bucket, detail = judge(case)
        fam = case.get("family") or case["format"]
        table[fam][bucket] += 1
        table["(all)"][bucket] += 1
        if case.get("quoted") and case["expect"] == "message" and bucket == "wrong":
            quoted_taken += 1
        if bucket != "intended":
            misses.append((case["id"], bucket, detail[:140].replace("\n", " ")))
    return table, quoted_taken, misses


def parse_rows(path=None):
    """The bench rows: [name, value, unit, goal]."""
    path = path or Path(__file__).parent / "data" / "model_outputs.jsonl"
    table, quoted_taken, _ = by_family(path)
    cases = [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]
    families = sorted({c["family"] for c in cases if c.get("family")})
    rows = []
    for fam in families + ["(all)"]:
        c = table[fam]
        n = sum(c.values())
        rows.append([f"reader, {fam}: read as intended ({n} answers; raw {c['raw']}, wrong {c['wrong']}, "
                     f"retry {c['retry']})", round(100 * c["intended"] / n, 1), "%", ">= 98 %, 0 raw"])
    rows.append(["reader: quoted calls taken as the proposal", quoted_taken, "", "0"])
    return rows


def main(argv):
    path = argv[1] if len(argv) > 1 else Path(__file__).parent / "data" / "model_outputs.jsonl"
    table, quoted_taken, misses = by_family(path)
    new = [f for f in table if f != "(all)" and any(
        json.loads(l).get("family") == f for l in open(path, encoding="utf-8") if l.strip())]
    print(f"{'family':<22}{'cases':>6}{'intended':>10}{'raw':>6}{'wrong':>7}{'retry':>7}")
    for fam in sorted(new) + ["(all)"]:
        c = table[fam]
        n = sum(c.values())
        print(f"{fam:<22}{n:>6}{100 * c['intended'] / n:>9.1f}%{c['raw']:>6}{c['wrong']:>7}{c['retry']:>7}")
    print(f"quoted calls taken: {quoted_taken}")
    for m in misses:
        print("  miss:", *m)


if __name__ == "__main__":
    main(sys.argv)
