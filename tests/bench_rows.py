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


def _server_process():
    """A scripted OpenAI server (openai_server.py) in a process of its own, so
    that its CPU is not counted as the daemon's: #(base-url stop)."""
    import multiprocessing

    def run(conn):
        from openai_server import ScriptedOpenAIServer
        server = ScriptedOpenAIServer()
        server.reply_text = '(:action :message :text "fine")'
        conn.send(server.url("ok"))
        conn.recv()
        server.stop()

    parent, child = multiprocessing.Pipe()
    proc = multiprocessing.get_context("fork").Process(target=run, args=(child,), daemon=True)
    proc.start()
    url = parent.recv()

    def stop():
        parent.send("stop")
        proc.join(10)

    return url, stop


def _cpu_of(pid):
    """The CPU seconds process PID has used."""
    import os
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def model_calls(quick):
    """Threads alive in this process before and after N model calls through the
    cascade to a loopback server, the threads started meanwhile, and the CPU per call."""
    import asyncio
    import os
    import threading
    import time
    import hy  # noqa: F401
    from hy.models import Keyword as K
    from passepartout.cascade import make_cascade, cascade_complete
    from passepartout.providers import make_provider
    from passepartout.llm import _litellm_module

    n = 200 if quick else 2000
    url, stop = _server_process()
    os.environ.setdefault("PASSEPARTOUT_BENCH_KEY", "bench-key")
    _litellm_module()
    cascade = make_cascade([make_provider("openai/bench", api_base=url, api_key_env="PASSEPARTOUT_BENCH_KEY"),
                            make_provider("symbolic")])
    request = [K("messages"), [{"role": "user", "content": "hello"}], K("tools"), None,
               K("signal"), [K("type"), K("event"), K("session"), "bench",
                             K("payload"), [K("sensor"), K("user-input"), K("text"), "hello"]]]
    seen = set()

    async def main():
        await cascade_complete(cascade, request)
        before = threading.active_count()
        seen.update(t.ident for t in threading.enumerate())
        started = time.process_time()
        for _ in range(n):
            await cascade_complete(cascade, request)
            seen.update(t.ident for t in threading.enumerate())
        return before, threading.active_count(), time.process_time() - started

    try:
        before, after, cpu = asyncio.run(main())
    finally:
        stop()
    return [(f"threads alive after {n} model calls", after, f"(before the calls: {before})", f"≤ {before}"),
            (f"threads that ran during {n} model calls", len(seen), "", "not growing with the calls"),
            ("CPU per model call through the cascade and LiteLLM", 1000 * cpu / n, "ms", "")]


def litellm_message(quick):
    """CPU per message of the daemon (its gates in their own process) with
    LiteLLM asking a loopback model; what of it is the model client's (the same
    requests through the cascade alone); the rest is the daemon's own. And the
    gate process's CPU per message."""
    import asyncio
    import os
    import tempfile
    import time
    from pathlib import Path
    import hy  # noqa: F401
    from hy.models import Keyword as K
    from passepartout.providers import make_provider
    from passepartout.cascade import cascade_complete
    from passepartout.llm import _litellm_module
    from passepartout.daemon import boot, shutdown, start_services, stop_services
    from passepartout.gateways.hub import Hub

    n = 60 if quick else 400
    url, stop = _server_process()
    os.environ.setdefault("PASSEPARTOUT_BENCH_KEY", "bench-key")
    folder = Path(tempfile.mkdtemp(prefix="passepartout-bench-llm-"))
    (folder / "config.toml").write_text('[sandbox]\nmode = "off"\n')
    _litellm_module()
    env = boot(config_path=str(folder / "config.toml"),
               environ={"PASSEPARTOUT_DATA_DIR": str(folder / "data"), "HOME": str(folder),
                        "PASSEPARTOUT_BENCH_KEY": os.environ["PASSEPARTOUT_BENCH_KEY"]},
               providers=[make_provider("openai/bench", api_base=url, api_key_env="PASSEPARTOUT_BENCH_KEY"),
                          make_provider("symbolic")],
               gates="process")
    asked = []
    model = env.complete

    async def complete(request):
        asked.append(request)
        return await model(request)

    env.complete = complete

    def said(i):
        return [K("type"), K("event"), K("source"), [K("gateway"), K("bench"), K("chat"), i % 10, K("user"), 7],
                K("payload"), [K("sensor"), K("user-input"), K("text"), f"hello {i}"]]

    async def through_daemon(count, first):
        done = asyncio.Event()
        answered = []

        async def deliver(reply):
            answered.append(reply)
            if len(answered) >= count:
                done.set()

        hub = Hub(env, [{"name": "bench", "deliver": deliver}])
        for i in range(count):
            await hub.receive("bench", f"m{first + i}", said(first + i))
        await done.wait()
        await hub.close()

    async def main():
        await start_services(env)
        try:
            gate_pid = env.gates.keeper.pids()[0]
            await through_daemon(10, 0)
            cpu, gates = time.process_time(), _cpu_of(gate_pid)
            await through_daemon(n, 1000)
            daemon = (time.process_time() - cpu) / n
            gate = (_cpu_of(gate_pid) - gates) / n
            sample = asked[-n:]
            cpu = time.process_time()
            for i in range(0, n, 10):
                # ten at a time, as the daemon's ten chats asked them
                await asyncio.gather(*(cascade_complete(env.cascade, r) for r in sample[i:i + 10]))
            client = (time.process_time() - cpu) / n
            return daemon, client, gate
        finally:
            await stop_services(env)

    try:
        daemon, client, gate = asyncio.run(main())
    finally:
        shutdown(env)
        stop()
    return [(f"daemon CPU per message, LiteLLM to a loopback model ({n} messages)", 1000 * daemon, "ms", ""),
            ("of it, the model client (the same requests through the cascade alone)", 1000 * client, "ms", ""),
            ("of it, the daemon's own", 1000 * (daemon - client), "ms", "≤ 2 ms"),
            ("the gate process's CPU per message", 1000 * gate, "ms", "")]


def workflows(quick):
    import workflow_figures as m
    return m.workflow_rows(3 if quick else 10)


def memory(quick):
    import memory_figures as m
    return m.memory_rows(quick)
def routines(quick):
    import routine_figures as m
    return m.routine_rows(quick)


def store(quick):
    import store_figures as m
    return m.rows(quick)


def reader(quick):
    import parse_figures as m
    return m.parse_rows()


def conversation(quick):
    import conversation_figures as m
    return m.conversation_rows(quick)


BENCHES = {"reader": reader, "conversation": conversation, "telegram": telegram, "one-message": one_message,
           "harm": harm, "model-calls": model_calls, "litellm-message": litellm_message, "workflows": workflows,
           "memory": memory, "routines": routines, "store": store}


def main(argv):
    if len(argv) < 2 or argv[1] not in BENCHES:
        print(f"usage: {argv[0]} {'|'.join(BENCHES)} [--quick]", file=sys.stderr)
        return 2
    for row in BENCHES[argv[1]]("--quick" in argv[2:]):
        print(json.dumps(list(row), ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
