"""What the agenda adds to a step: the facts every context carries, the brief
in every prompt, and the gate's judgement of a completion. Medians of many runs.

    python tests/agenda_figures.py
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

import hy  # noqa: F401  (the Hy modules below)
from hy.models import Keyword

from passepartout.agenda import agenda_add, agenda_brief, agenda_facts, action_problem
from passepartout.journal import journal_event
from passepartout.proto import proto_get, proto_read
from passepartout.store import store_open


def median_us(f, n=200):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main():
    with tempfile.TemporaryDirectory() as d:
        store = store_open(str(Path(d) / "figures.sqlite3"))
        empty = median_us(lambda: agenda_facts(store, "t1"))
        for i in range(12):
            journal_event(store, "result", "s",
                          proto_read(f'(:action (:action :shell :cmd "make check-{i}") '
                                     f':result (:status :ok :stdout "{"x" * 16000}") :task "t1")'))
        for i in range(100):
            agenda_add(store, f"goal number {i}: " + "y" * 120, "person", "s", "s")
        store.memo.pop("agenda-ran", None)
        t = time.perf_counter()
        facts = agenda_facts(store, "t1")
        cold = (time.perf_counter() - t) * 1e6
        warm = median_us(lambda: agenda_facts(store, "t1"))
        brief = median_us(lambda: agenda_brief(store))
        chars = len(agenda_brief(store))
        ran = list(proto_get(facts, Keyword("ran")))
        action = proto_read('(:action :agenda :op :complete :id 7 :reason "ran make check-3 in the shell: it passed")')
        gate = median_us(lambda: action_problem(action, list(range(1, 101)), ran))
        store.close()
    print(f"agenda facts, no open item:                      {empty:8.1f} µs (median)")
    print(f"agenda facts, 100 open, 12 results of 16 kB, cold: {cold:8.1f} µs (once)")
    print(f"agenda facts, same, warm (results remembered):   {warm:8.1f} µs (median)")
    print(f"agenda brief of 100 open items:                  {brief:8.1f} µs (median), {chars} characters")
    print(f"gate judgement of a completion (12 results):     {gate:8.1f} µs (median)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
