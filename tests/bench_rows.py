"""The figures of `passepartout bench` that need the test servers and harnesses
of this folder. The bench runs this file as a script, so that nothing of tests/
is imported into the package's own process:

    python tests/bench_rows.py NAME [--quick]

prints one JSON row per line: [name, value, unit, goal].
"""
import json
import sys


def telegram(quick):
    import bot_api_server as m
    if quick:
        return (m.bench_telegram(chats=10, per_chat=10) + m.bench_telegram_kill(chats=10, per_chat=10)
                + m.bench_telegram_kill_acting(chats=10, per_chat=10, trials=1)
                + m.bench_telegram_journal(chats=10, per_chat=10, rounds=3))
    return (m.bench_telegram() + m.bench_telegram_kill() + m.bench_telegram_kill_acting()
            + m.bench_telegram_journal(rounds=5))


def one_message(quick):
    import bot_api_server as m
    return m.bench_one_message(3 if quick else 7)


def harm(quick):
    import harm as m
    return m.harm_rows(sample=40 if quick else None)


BENCHES = {"telegram": telegram, "one-message": one_message, "harm": harm}


def main(argv):
    if len(argv) < 2 or argv[1] not in BENCHES:
        print(f"usage: {argv[0]} {'|'.join(BENCHES)} [--quick]", file=sys.stderr)
        return 2
    for row in BENCHES[argv[1]]("--quick" in argv[2:]):
        print(json.dumps(list(row), ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
