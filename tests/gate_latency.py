"""The in-process gate latency of `passepartout bench` (row "all corpora: gate
latency per proposal, parse included"), measured RUNS times over the shared
corpora after one warming pass, with the medians of the runs' p50 and p99.

    .venv/bin/python tests/gate_latency.py [RUNS]
"""
import statistics
import sys
import tempfile

import hy  # noqa: F401  (loads the Hy modules)
from passepartout.tools import bench, bench_gates


def main(runs):
    d = bench_gates.corpora_dir()
    ctx = bench._gate_context(tempfile.mkdtemp(prefix="passepartout-latency-"), bench._default_skills())
    files = sorted(d.glob("*.jsonl"))
    for f in files:
        bench_gates.corpus_figures(f, ctx)
    p50s, p99s = [], []
    for _ in range(runs):
        times = []
        for f in files:
            bench_gates.corpus_figures(f, ctx, times)
        p50s.append(statistics.median(times) * 1e6)
        p99s.append(bench._percentile(times, 0.99) * 1e6)
    print(f"p50 {statistics.median(p50s):.0f} µs, p99 {statistics.median(p99s):.0f} µs "
          f"(medians of {runs} runs of {len(times)} proposals; "
          f"p50s {' '.join(f'{x:.0f}' for x in p50s)})")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
