"""Figures of the conversation a strict server receives, and of a hanging model.

    .venv/bin/python tests/conversation_figures.py

1. A scripted session through the daemon's step (refusals, results of actions
   proposed as text, two calls in one answer) against the scripted server in
   strict mode with the `alternating` template (Llama 2 / Mistral v0.1: after the
   system message, user and assistant alternate; anything else fails the request
   as llama-cpp-python fails it). Printed: requests sent, the share the template
   rendered.
2. A model that hangs (deadline 2 s) with a healthy second model: the seconds
   from each of 10 messages to its answer.
"""
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import hy  # noqa: F401,E402
from hy.models import Keyword as K  # noqa: E402
from openai_server import ScriptedOpenAIServer  # noqa: E402
from passepartout.llm import _litellm_module  # noqa: E402
from passepartout.cascade import cascade_complete, make_cascade
from passepartout.providers import make_provider
from passepartout.proto import proto_get  # noqa: E402

KEY_ENV = "PASSEPARTOUT_FIGURES_KEY"
os.environ[KEY_ENV] = "sk-figures"

PER_MESSAGE = [
    # two calls in one answer, as text: both run in one step
    '{"action": "shell", "cmd": "echo one", "explanation": "first"}\n'
    '{"action": "shell", "cmd": "echo two", "explanation": "second"}',
    # a proposal the workspace gate refuses, then a message
    '{"action": "read_file", "path": "../../../etc/shadow"}',
    '(:action :message :text "done")',
]


def alternates(messages):
    """True when, after an optional system message, user and assistant turns
    alternate starting with the user (tool messages answer the assistant turn before)."""
    roles = [m["role"] for m in messages if m["role"] != "tool"]
    if roles and roles[0] == "system":
        roles = roles[1:]
    return all(r == ("user" if i % 2 == 0 else "assistant") for i, r in enumerate(roles))


def session(messages=7, native=False):
    from passepartout.daemon import boot, shutdown
    from passepartout.loop import step
    server = ScriptedOpenAIServer()
    server.template = None if native else "alternating"
    for _ in range(messages):
        server.replies.extend(PER_MESSAGE)
    provider = make_provider("openai/scripted-strict", api_base=server.url("ok"), api_key_env=KEY_ENV,
                             timeout=10, tools=native, tool_results="native" if native else "text")
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.toml"
        config.write_text('[sandbox]\nmode = "off"\n')
        env = boot(config_path=str(config),
                   environ={"PASSEPARTOUT_DATA_DIR": str(Path(tmp) / "data"), "HOME": tmp,
                            KEY_ENV: os.environ[KEY_ENV]},
                   providers=[provider])
        try:
            async def run():
                for i in range(messages):
                    queue = [[K("type"), K("event"), K("source"), [K("gateway"), K("test"), K("chat"), "n"],
                              K("payload"), [K("sensor"), K("user-input"), K("text"), f"task {i}"]]]
                    while queue:
                        for out in await step(queue.pop(0), env):
                            if proto_get(out, K("type")) != K("reply"):
                                queue.append(out)
            asyncio.run(run())
        finally:
            shutdown(env)
    sent = len(server.requests)
    rendered = (sum(alternates(r["body"]["messages"]) for r in server.requests) if native
                else len(server.prompts()))
    bodies = [json.dumps(r["body"]) for r in server.requests]
    print(f"  requests carrying a refusal: {sum('were refused' in b for b in bodies)}, "
          f"a result: {sum('Result of' in b for b in bodies)}, "
          f"a note of calls not run: {sum('not run' in b for b in bodies)}")
    errors = server.errors()
    server.stop()
    return sent, rendered, errors


def multi_call(calls=3):
    """Requests one answer of CALLS shell calls (as text) costs until the model
    has every result and answers: a model that proposes again, as one answer,
    whatever it is told was not run."""
    from passepartout.daemon import boot, shutdown
    from passepartout.loop import step
    server = ScriptedOpenAIServer()
    first = "\n".join(json.dumps({"action": "shell", "cmd": f"echo call-{i}", "explanation": "see"})
                      for i in range(calls))

    def responder(body):
        last = body["messages"][-1]["content"] or ""
        if "not run: " in last:
            return last.split("not run: ", 1)[1].rsplit(". Propose", 1)[0].replace("), (", ")\n(")
        if "Result of" in last:
            return '(:action :message :text "done")'
        return first
    server.responder = responder
    provider = make_provider("openai/scripted-calls", api_base=server.url("ok"), api_key_env=KEY_ENV,
                             timeout=10, tools=False, tool_results="text")
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.toml"
        config.write_text('[sandbox]\nmode = "off"\n')
        env = boot(config_path=str(config),
                   environ={"PASSEPARTOUT_DATA_DIR": str(Path(tmp) / "data"), "HOME": tmp,
                            KEY_ENV: os.environ[KEY_ENV]},
                   providers=[provider])
        try:
            async def run():
                queue = [[K("type"), K("event"), K("source"), [K("gateway"), K("test"), K("chat"), "n"],
                          K("payload"), [K("sensor"), K("user-input"), K("text"), "run them"]]]
                while queue:
                    for out in await step(queue.pop(0), env):
                        if proto_get(out, K("type")) != K("reply"):
                            queue.append(out)
            asyncio.run(run())
        finally:
            shutdown(env)
    sent = len(server.requests)
    server.stop()
    return sent


def hanging(messages=10, deadline=2.0):
    _litellm_module()
    server = ScriptedOpenAIServer()
    cascade = make_cascade([make_provider("openai/hangs", api_base=server.url("hang"), api_key_env=KEY_ENV,
                                          timeout=deadline),
                            make_provider("openai/healthy", api_base=server.url("ok"), api_key_env=KEY_ENV,
                                          timeout=deadline)])
    request = [K("messages"), [{"role": "user", "content": "hello"}], K("tools"), None,
               K("signal"), [K("payload"), [K("sensor"), K("user-input"), K("text"), "hello"]],
               K("rejections"), []]
    times = []

    async def run():
        for _ in range(messages):
            start = time.monotonic()
            result = await cascade_complete(cascade, request)
            assert proto_get(result, K("status")) == K("ok"), result
            times.append(time.monotonic() - start)
    asyncio.run(run())
    server.stop()
    return times


def conversation_rows(quick=False):
    """The bench rows: [name, value, unit, goal]."""
    sent, rendered, _ = session(messages=3 if quick else 7)
    nsent, nok, _ = session(messages=3 if quick else 7, native=True)
    times = hanging()
    return [["requests a strict alternation template renders (text form, refusals, results, two calls)",
             round(100 * rendered / max(1, sent), 1), "%", "100 %"],
            ["requests that alternate with the tools sent natively", round(100 * nok / max(1, nsent), 1), "%",
             "100 %"],
            ["requests for one answer of 3 calls, to the model's answer", multi_call(3), "requests", "2"],
            ["hanging model + healthy second: first message", round(times[0], 2), "s", "the deadline (2 s)"],
            ["hanging model + healthy second: messages 2-10, median", round(statistics.median(times[1:]), 3), "s",
             "no deadline waited"]]


def main():
    sent, rendered, errors = session()
    print(f"strict alternation (Llama-2/Mistral-v0.1 template): {rendered}/{sent} requests rendered "
          f"({100 * rendered / max(1, sent):.0f} %)")
    for e in sorted(set(errors)):
        print(f"  refused by the template: {e} ({errors.count(e)}x)")
    sent, ok, _ = session(native=True)
    print(f"the same session with the tools sent natively: {ok}/{sent} requests alternate "
          f"({100 * ok / max(1, sent):.0f} %)")
    times = hanging()
    print("hanging model + healthy second, seconds per message: "
          + " ".join(f"{t:.2f}" for t in times))
    print(f"  first {times[0]:.2f} s, median of the other 9 {statistics.median(times[1:]):.2f} s, "
          f"messages that waited for the deadline: {sum(1 for t in times if t >= 1.9)}")


if __name__ == "__main__":
    main()
