"""The provider cascade: the real LiteLLM client against a scripted server on loopback."""
import asyncio
import functools
import html
import json
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import hy  # noqa: F401
import pytest
from hy.models import Keyword as K

from passepartout.llm import DEADLINE_GRACE, _litellm_module
from passepartout.cascade import cascade_complete, check_provider, cascade_status, make_cascade
from passepartout.providers import default_providers, make_provider, providers_from_config
from passepartout.proto import proto_get, proto_read
from conftest import run_python

ROOT = Path(__file__).resolve().parent.parent
KEY_ENV = "PASSEPARTOUT_TEST_SCRIPTED_KEY"
MESSAGES = [{"role": "system", "content": "You propose actions."},
            {"role": "user", "content": "list my files"}]
TOOLS = [{"type": "function",
          "function": {"name": "shell", "description": "run a shell command",
                       "parameters": {"type": "object",
                                      "properties": {"cmd": {"type": "string"}},
                                      "required": ["cmd"]}}}]


def request(tools=None, text="list my files"):
    signal = [K("type"), K("event"), K("source"), [K("gateway"), K("terminal")],
              K("payload"), [K("sensor"), K("user-input"), K("text"), text]]
    return [K("messages"), MESSAGES, K("tools"), tools, K("signal"), signal, K("rejections"), []]


def scripted(server, script, timeout=5.0, model=None):
    return make_provider(model or f"openai/scripted-{script}", api_base=server.url(script),
                         api_key_env=KEY_ENV, timeout=timeout)


def on_loop(test):
    """TEST, a coroutine function, run on an event loop of its own when pytest calls it."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))
    return run


async def until(predicate, timeout=10.0):
    """Wait on the loop until PREDICATE() holds; fail after TIMEOUT seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"still not so after {timeout} s: {predicate}"
        await asyncio.sleep(0.01)


def outcomes(result):
    return [proto_get(a, "outcome") for a in proto_get(result, "attempts")]


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-scripted-test")


def closed_port():
    """A socket bound to a loopback port but not listening: connecting to it is refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s


# * LiteLLM stays out of the process until a model is called

def test_importing_the_cascade_does_not_import_litellm():
    seen = run_python("""
        import json, sys
        import passepartout.cascade
        print(json.dumps({"litellm": "litellm" in sys.modules}))
    """)
    assert seen == {"litellm": False}


def test_a_closed_probe_port_is_unreachable_without_litellm():
    sock = closed_port()
    try:
        port = sock.getsockname()[1]
        seen = run_python(f"""
            import asyncio, json, sys
            from passepartout.cascade import make_cascade, cascade_complete
            from passepartout.providers import make_provider
            from passepartout.proto import proto_get
            providers = [make_provider("ollama_chat/llama3.2", api_base="http://127.0.0.1:{port}", probe=True),
                         make_provider("symbolic")]
            r = asyncio.run(cascade_complete(make_cascade(providers), []))
            print(json.dumps({{
                "outcomes": [proto_get(a, "outcome").name for a in proto_get(r, "attempts")],
                "provider": proto_get(r, "provider"),
                "detail": proto_get(proto_get(r, "attempts")[0], "detail"),
                "litellm": "litellm" in sys.modules}}))
        """)
    finally:
        sock.close()
    assert seen["outcomes"] == ["unreachable", "ok"], seen
    assert seen["provider"] == "symbolic"
    assert f"127.0.0.1:{port}" in seen["detail"]
    assert seen["litellm"] is False


def test_the_first_import_of_litellm_does_not_stop_the_loop(openai_server):
    # LiteLLM is in sys.modules from the moment its import starts, and the cascade
    # holds it once the import is over: a task that sees the moment in between
    # ran while the import did.
    seen = run_python(f"""
        import asyncio, json, os, sys
        import passepartout.cascade as cascade
        import passepartout.llm as llm
        from passepartout.providers import make_provider
        from passepartout.proto import proto_get
        os.environ["{KEY_ENV}"] = "sk-scripted-test"
        provider = make_provider("openai/scripted-ok", api_base="{openai_server.url("ok")}",
                                 api_key_env="{KEY_ENV}")

        async def main():
            call = asyncio.create_task(cascade.cascade_complete(cascade.make_cascade([provider]), []))
            ticks = 0
            while not call.done():
                if "litellm" in sys.modules and llm._litellm is None:
                    ticks += 1
                await asyncio.sleep(0.005)
            return ticks, proto_get(call.result(), "status").name

        ticks, status = asyncio.run(main())
        print(json.dumps({{"ticks": ticks, "status": status}}))
    """)
    assert seen["status"] == "ok", seen
    assert seen["ticks"] > 0, f"no task ran while LiteLLM was being imported: {seen}"


# * Falling through, with the real client

@on_loop
async def test_slow_error_garbage_then_ok(openai_server, key):
    openai_server.reply_text = "(:action :message :text \"here they are\")"
    providers = [scripted(openai_server, "slow", timeout=1.0),
                 scripted(openai_server, "error500"),
                 scripted(openai_server, "garbage"),
                 scripted(openai_server, "ok")]
    result = await cascade_complete(make_cascade(providers), request())
    assert proto_get(result, "status") == K("ok"), result
    assert proto_get(result, "provider") == "openai/scripted-ok"
    assert proto_get(result, "text") == "(:action :message :text \"here they are\")"
    assert proto_get(result, "tool-calls") == []
    # LiteLLM reports a 200 answer whose body is not JSON as an InternalServerError;
    # the cascade finds the JSONDecodeError in its cause chain and calls it :garbage.
    assert outcomes(result) == [K("timeout"), K("error"), K("garbage"), K("ok")], result
    assert openai_server.scripts_seen() == ["slow", "error500", "garbage", "ok"]
    usage = proto_get(result, "usage")
    assert [proto_get(usage, "prompt-tokens"), proto_get(usage, "completion-tokens")] == [11, 7]
    assert proto_get(usage, "cost") == 0.0  # LiteLLM has no price for a scripted model
    last = openai_server.requests[-1]
    assert last["path"] == "/ok/v1/chat/completions"
    assert last["body"]["model"] == "scripted-ok"
    assert last["body"]["messages"] == MESSAGES


@on_loop
async def test_empty_answer_falls_through(openai_server, key):
    openai_server.replies = deque(["first", "second"])
    cascade = make_cascade([scripted(openai_server, "empty"), scripted(openai_server, "ok")])
    first = await cascade_complete(cascade, request())
    second = await cascade_complete(cascade, request())
    assert outcomes(first) == [K("empty"), K("ok")], first
    assert [proto_get(first, "text"), proto_get(second, "text")] == ["first", "second"]
    assert openai_server.scripts_seen() == ["empty", "ok", "empty", "ok"]


@on_loop
async def test_tool_calls_are_parsed(openai_server, key):
    openai_server.tool_calls = [("shell", '{"cmd": "ls -la"}'),
                                ("read_file", '{"path": "notes.txt"}')]
    result = await cascade_complete(make_cascade([scripted(openai_server, "toolcall")]), request(tools=TOOLS))
    assert proto_get(result, "status") == K("ok"), result
    assert proto_get(result, "text") is None
    calls = proto_get(result, "tool-calls")
    assert [(proto_get(c, "name"), json.loads(proto_get(c, "arguments"))) for c in calls] == [
        ("shell", {"cmd": "ls -la"}), ("read_file", {"path": "notes.txt"})]
    assert all(proto_get(c, "id") for c in calls)
    body = openai_server.requests[0]["body"]
    assert body["tools"] == TOOLS
    assert not [k for k in body if k.startswith("_")], body  # no LiteLLM-internal flag leaks out


@on_loop
async def test_cost_of_a_priced_model(openai_server, key):
    provider = scripted(openai_server, "ok", model="openai/gpt-4o-mini")
    result = await cascade_complete(make_cascade([provider]), request())
    assert proto_get(proto_get(result, "usage"), "cost") > 0.0, result


# * Failing without raising

@on_loop
async def test_all_failing_is_a_result_not_an_exception(openai_server, key, monkeypatch):
    monkeypatch.delenv("PASSEPARTOUT_TEST_UNSET_KEY", raising=False)
    providers = [scripted(openai_server, "error500"),
                 make_provider("openai/scripted-ok", api_base=openai_server.url("ok"),
                               api_key_env="PASSEPARTOUT_TEST_UNSET_KEY"),
                 {"name": "broken"}]
    result = await cascade_complete(make_cascade(providers), request())
    assert proto_get(result, "status") == K("failed"), result
    assert outcomes(result) == [K("error"), K("error"), K("error")]
    assert proto_get(result, "reason").startswith("all providers failed: openai/scripted-error500 error")
    assert "PASSEPARTOUT_TEST_UNSET_KEY" in proto_get(result, "reason")
    # a provider whose key is not set is never called
    assert openai_server.scripts_seen() == ["error500"]


@on_loop
async def test_no_providers_fails_with_a_reason():
    result = await cascade_complete(make_cascade([]), request())
    assert proto_get(result, "status") == K("failed")
    assert proto_get(result, "attempts") == []
    assert "no providers" in proto_get(result, "reason")


# * The circuit breaker

class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@on_loop
async def test_breaker_skips_a_failing_provider_then_tries_it_after_the_cooldown(openai_server, key):
    clock = FakeClock()
    cascade = make_cascade([scripted(openai_server, "error500"), scripted(openai_server, "ok")],
                           cooldown=60.0, failure_threshold=3, clock=clock)
    for _ in range(3):
        assert outcomes(await cascade_complete(cascade, request())) == [K("error"), K("ok")]
    assert proto_get(cascade_status(cascade)[0], "state") == K("open")

    skipped = await cascade_complete(cascade, request())
    assert outcomes(skipped) == [K("skipped"), K("ok")]
    assert "3 failures" in proto_get(proto_get(skipped, "attempts")[0], "detail")
    clock.now += 59.0
    assert outcomes(await cascade_complete(cascade, request())) == [K("skipped"), K("ok")]
    assert openai_server.scripts_seen() == ["error500", "ok"] * 3 + ["ok", "ok"]

    clock.now += 2.0  # cool-down over: one trial (half-open), which fails and re-opens
    assert proto_get(cascade_status(cascade)[0], "state") == K("half-open")
    assert outcomes(await cascade_complete(cascade, request())) == [K("error"), K("ok")]
    assert outcomes(await cascade_complete(cascade, request())) == [K("skipped"), K("ok")]
    assert openai_server.scripts_seen()[-3:] == ["error500", "ok", "ok"]


@on_loop
async def test_breaker_closes_after_a_successful_trial(openai_server, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    clock = FakeClock()
    cascade = make_cascade([scripted(openai_server, "ok"), make_provider("symbolic")],
                           cooldown=10.0, failure_threshold=2, clock=clock)
    for _ in range(2):
        assert outcomes(await cascade_complete(cascade, request())) == [K("error"), K("ok")]
    assert outcomes(await cascade_complete(cascade, request())) == [K("skipped"), K("ok")]
    monkeypatch.setenv(KEY_ENV, "sk-now-set")
    clock.now += 10.0
    recovered = await cascade_complete(cascade, request())
    assert outcomes(recovered) == [K("ok")]
    assert proto_get(recovered, "provider") == "openai/scripted-ok"
    assert proto_get(cascade_status(cascade)[0], "state") == K("closed")
    assert proto_get(cascade_status(cascade)[0], "failures") == 0


# * The symbolic provider through the cascade

@on_loop
async def test_symbolic_answers_through_the_cascade():
    result = await cascade_complete(make_cascade([make_provider("symbolic")]), request(text="!ls -la"))
    assert proto_get(result, "status") == K("ok")
    assert proto_get(result, "provider") == "symbolic"
    assert outcomes(result) == [K("ok")]
    action = proto_read(proto_get(result, "text"))
    assert proto_get(action, "action") == K("shell")
    assert proto_get(action, "cmd") == "ls -la"
    assert proto_get(proto_get(result, "usage"), "cost") == 0.0


# * Providers from the configuration

@on_loop
async def test_a_lone_surrogate_in_a_past_turn_does_not_fail_the_call(openai_server, key):
    """A session's history read back from the journal may hold a lone surrogate
    (a turn written before the edges refused them): the request still goes out,
    with it written as its escape, and every later call of the session works."""
    openai_server.replies = deque(["first", "second"])
    past = [{"role": "system", "content": "You propose actions."},
            {"role": "user", "content": "hi \ud800 there"},
            {"role": "assistant", "content": [{"type": "text", "text": "odd \udfff"}]},
            {"role": "user", "content": "list my files"}]
    req = [K("messages"), past, K("tools"), None, K("signal"), proto_get(request(), "signal"),
           K("rejections"), []]
    cascade = make_cascade([scripted(openai_server, "ok")])
    first = await cascade_complete(cascade, req)
    second = await cascade_complete(cascade, req)
    assert [proto_get(first, "status"), proto_get(second, "status")] == [K("ok"), K("ok")], (first, second)
    assert [proto_get(first, "text"), proto_get(second, "text")] == ["first", "second"]
    assert len(openai_server.requests) == 2, "every call reached the server"
    sent = openai_server.requests[-1]["body"]["messages"]
    assert sent[1]["content"] == "hi \\ud800 there", sent
    assert sent[2]["content"] == [{"type": "text", "text": "odd \\udfff"}], sent
    assert past[1]["content"] == "hi \ud800 there", "the caller's history is left as it was"


@on_loop
async def test_max_tokens_is_sent_default_and_per_provider(openai_server, key):
    cfg = {"providers": [{"model": "openai/scripted-ok", "api_base": openai_server.url("ok"),
                          "api_key_env": KEY_ENV, "max-tokens": 77}]}
    configured = providers_from_config(cfg, env={})[0]
    for provider, want in [(scripted(openai_server, "ok"), 1024), (configured, 77)]:
        result = await cascade_complete(make_cascade([provider]), request())
        assert proto_get(result, "status").name == "ok", result
        body = openai_server.requests[-1]["body"]
        assert body.get("max_tokens") == want, f"request body: {body}"


# * The person hears which model failed, once per incident

class Heard:
    """A notify function: what the person was told."""

    def __init__(self):
        self.lines = []

    def __call__(self, text, kind="progress"):
        assert kind == "progress", kind
        self.lines.append(text)


def told(notify, text="hello", session="terminal:local"):
    """A request from SESSION whose step tells the person through NOTIFY."""
    signal = [K("type"), K("event"), K("session"), session,
              K("payload"), [K("sensor"), K("user-input"), K("text"), text]]
    out = [K("messages"), MESSAGES, K("tools"), None, K("signal"), signal, K("rejections"), []]
    return out + [K("notify"), notify] if notify else out


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records
            if r.name == "passepartout.cascade" and r.levelname == "WARNING"]


@on_loop
async def test_a_hung_provider_costs_one_deadline_and_the_person_hears_it(openai_server, key, caplog):
    _litellm_module()  # its import is not the provider's time
    caplog.set_level("WARNING", logger="passepartout.cascade")
    heard = Heard()
    cascade = make_cascade([scripted(openai_server, "hang", timeout=1.0), scripted(openai_server, "ok")])
    result = await cascade_complete(cascade, told(heard))
    assert proto_get(result, "provider") == "openai/scripted-ok", result
    assert outcomes(result) == [K("timeout"), K("ok")], result
    line = "model openai/scripted-hang did not answer in 1 s, trying openai/scripted-ok"
    assert heard.lines == [line], heard.lines
    # one deadline: the hung model was asked once, not tried again
    hung = [r for r in openai_server.requests if r["script"] == "hang"]
    assert len(hung) == 1, f"the hung model was asked {len(hung)} times"
    assert warnings_of(caplog) == [line], caplog.records
    assert await asyncio.to_thread(openai_server.wait_hang_closed), "the hung request was left open"


@on_loop
async def test_an_answer_that_trickles_past_the_deadline_falls_through_in_the_same_words(
        openai_server, key, caplog):
    # Each byte comes well within the 0.5 s timeout, so LiteLLM's client never times
    # out; the whole call's deadline (timeout + DEADLINE_GRACE) ends it, and the
    # person hears what a hung model makes them hear.
    _litellm_module()  # its import is not the provider's time
    caplog.set_level("WARNING", logger="passepartout.cascade")
    openai_server.trickle_seconds = openai_server.MAX_TRICKLE
    heard = Heard()
    cascade = make_cascade([scripted(openai_server, "trickle", timeout=0.5), scripted(openai_server, "ok")])
    result = await cascade_complete(cascade, told(heard))
    assert proto_get(result, "provider") == "openai/scripted-ok", result
    assert outcomes(result) == [K("timeout"), K("ok")], result
    assert proto_get(proto_get(result, "attempts")[0], "detail") == \
        f"no complete answer within {0.5 + DEADLINE_GRACE:g} s", result
    line = "model openai/scripted-trickle did not answer in 0.5 s, trying openai/scripted-ok"
    assert heard.lines == [line], heard.lines
    assert warnings_of(caplog) == [line], caplog.records


def tasks_of_the_cascade():
    """The tasks on the loop running the cascade's code, other than the current one."""
    def code(task):
        coro = task.get_coro()
        return getattr(getattr(coro, "cr_code", None), "co_filename", "")
    return [t for t in asyncio.all_tasks()
            if t is not asyncio.current_task() and code(t).endswith(("cascade.hy", "llm.hy", "wire.hy"))]


@on_loop
async def test_a_cancelled_call_ends_at_once_and_leaves_no_trace(openai_server, key, caplog):
    await asyncio.to_thread(_litellm_module)
    caplog.set_level("DEBUG", logger="passepartout.cascade")
    heard = Heard()
    openai_server.live = "hang"
    cascade = make_cascade([scripted(openai_server, "live", timeout=60.0), scripted(openai_server, "ok")],
                           failure_threshold=1)
    call = asyncio.create_task(cascade_complete(cascade, told(heard)))
    await until(lambda: openai_server.scripts_seen() == ["live"])
    call.cancel()
    # the model has 60 s to answer: ending well before is the cancellation's doing
    done, _ = await asyncio.wait([call], timeout=10.0)
    assert done and call.cancelled(), f"the call went on after its cancellation: {call}"
    assert await asyncio.to_thread(openai_server.wait_hang_closed), "the server still holds the request"
    assert tasks_of_the_cascade() == [], "something of the cancelled call still runs"
    assert openai_server.scripts_seen() == ["live"], "the cascade moved on to the next model"
    assert heard.lines == [], heard.lines
    assert [r.getMessage() for r in caplog.records if r.name == "passepartout.cascade"] == [], caplog.records
    status = cascade_status(cascade)[0]
    assert (proto_get(status, "failures"), proto_get(status, "state")) == (0, K("closed")), status
    # the next failure of the model is the first the breaker counts and the person hears
    openai_server.live = "error401"
    result = await cascade_complete(cascade, told(heard))
    assert proto_get(result, "provider") == "openai/scripted-ok", result
    assert len(heard.lines) == 1 and "refused the key" in heard.lines[0], heard.lines
    assert proto_get(cascade_status(cascade)[0], "failures") == 1, cascade_status(cascade)


@on_loop
async def test_threads_do_not_grow_with_the_number_of_calls(openai_server, key):
    # LiteLLM's acompletion prepares each request in the loop's default executor
    # (threads named asyncio_N, at most min(32, cpus + 4), reused) and logs in a
    # task on the loop; the cascade starts no thread. The scripted server runs in
    # this process too: its threads, one per connection, end with their connection.
    def threads():
        return [t for t in threading.enumerate() if "process_request_thread" not in t.name]
    cascade = make_cascade([scripted(openai_server, "ok")])
    for _ in range(5):  # LiteLLM loads what it loads on its first calls
        await cascade_complete(cascade, request())
    before = threads()
    for _ in range(200):
        result = await cascade_complete(cascade, request())
        assert proto_get(result, "status") == K("ok"), result
    after = threads()
    new = [t.name for t in after if t not in before]
    assert len(after) <= len(before) + 2, f"{len(before)} threads before 200 calls, after: {new}"
    assert all(name.startswith("asyncio_") for name in new), new


@on_loop
async def test_a_notify_that_is_a_coroutine_is_awaited(openai_server, key):
    heard = []

    async def notify(text, kind="progress"):
        await asyncio.sleep(0)
        heard.append(text)
    cascade = make_cascade([scripted(openai_server, "error401"), scripted(openai_server, "ok")])
    result = await cascade_complete(cascade, told(notify))
    assert proto_get(result, "provider") == "openai/scripted-ok", result
    assert len(heard) == 1 and heard[0].startswith("model openai/scripted-error401 refused the key"), heard


@on_loop
async def test_each_failure_is_told_in_words_with_the_providers_message(openai_server, key, monkeypatch):
    monkeypatch.delenv("PASSEPARTOUT_TEST_UNSET_KEY", raising=False)
    openai_server.error_message = "Incorrect API key provided: sk-te***st"
    refused = closed_port()
    port = refused.getsockname()[1]
    try:
        heard = Heard()
        providers = [scripted(openai_server, "error401"),
                     scripted(openai_server, "error429"),
                     make_provider("openai/nowhere", api_base=f"http://127.0.0.1:{port}/v1",
                                   api_key_env=KEY_ENV, timeout=5.0),
                     make_provider("openai/keyless", api_base=openai_server.url("ok"),
                                   api_key_env="PASSEPARTOUT_TEST_UNSET_KEY"),
                     scripted(openai_server, "error500"),
                     make_provider("symbolic")]
        result = await cascade_complete(make_cascade(providers), told(heard))
    finally:
        refused.close()
    assert proto_get(result, "provider") == "symbolic", result
    assert heard.lines == [
        "model openai/scripted-error401 refused the key (401: Incorrect API key provided: sk-te***st), "
        "trying openai/scripted-error429",
        "model openai/scripted-error429 is over its quota or rate limit "
        "(429: Incorrect API key provided: sk-te***st), trying openai/nowhere",
        f"model openai/nowhere could not be reached (Connection refused at 127.0.0.1:{port}), "
        "trying openai/keyless",
        "model openai/keyless has no API key: the environment variable PASSEPARTOUT_TEST_UNSET_KEY "
        "is not set, trying openai/scripted-error500",
        "model openai/scripted-error500 answered with an error (500: the scripted server failed on "
        "purpose), falling back to the built-in commands"], heard.lines


@on_loop
async def test_the_same_failure_on_three_messages_is_told_once(openai_server, key, caplog):
    caplog.set_level("WARNING", logger="passepartout.cascade")
    clock = FakeClock()
    heard = Heard()
    cascade = make_cascade([scripted(openai_server, "error401"), scripted(openai_server, "ok")],
                           cooldown=60.0, failure_threshold=2, clock=clock)
    for n in range(3):
        result = await cascade_complete(cascade, told(heard, f"message {n}"))
        assert proto_get(result, "provider") == "openai/scripted-ok", result
    assert openai_server.scripts_seen() == ["error401", "ok", "error401", "ok", "ok"]
    assert len(heard.lines) == 1 and "refused the key (401:" in heard.lines[0], heard.lines
    assert warnings_of(caplog) == heard.lines, caplog.records
    # the cool-down ends and the trial fails the same way: still the same incident
    clock.now += 61.0
    await cascade_complete(cascade, told(heard, "message 4"))
    assert openai_server.scripts_seen()[-2:] == ["error401", "ok"]
    assert len(heard.lines) == 1, heard.lines
    # another conversation has not heard of it: it is told once, of the open breaker
    other = Heard()
    for n in range(2):
        await cascade_complete(cascade, told(other, f"other {n}", session="telegram:7"))
    assert len(other.lines) == 1, other.lines
    assert other.lines[0].startswith("model openai/scripted-error401 is paused for 60 s after 3 failures "
                                     "in a row (it refused the key (401:"), other.lines
    assert other.lines[0].endswith(", trying openai/scripted-ok"), other.lines


@on_loop
async def test_a_recovery_then_a_new_failure_is_told_again(openai_server, key):
    heard = Heard()
    cascade = make_cascade([scripted(openai_server, "live"), make_provider("symbolic")],
                           failure_threshold=100)
    said = []
    for live in ["error401", "error401", "ok", "ok", "error401", "error401", "error500", "hang"]:
        openai_server.live = live
        before = len(heard.lines)
        await cascade_complete(cascade, told(heard, "help"))
        said.append(len(heard.lines) - before)
    assert said == [1, 0, 0, 0, 1, 0, 1, 1], (said, heard.lines)
    assert heard.lines[0] == heard.lines[1], heard.lines
    assert "answered with an error (500:" in heard.lines[2], heard.lines


@on_loop
async def test_the_fallback_says_it_is_the_fallback_and_names_the_reason_once(openai_server, key):
    heard = Heard()
    cascade = make_cascade([scripted(openai_server, "error401"), make_provider("symbolic")])
    first = proto_read(proto_get(await cascade_complete(cascade, told(heard, "hello")), "text"))
    second = proto_read(proto_get(await cascade_complete(cascade, told(heard, "hello")), "text"))
    reason = "model openai/scripted-error401 refused the key (401: Incorrect API key provided: sk-scr***key)"
    assert heard.lines == [reason + ", falling back to the built-in commands"], heard.lines
    # just told in the line: the answer says what it is, and points to the line
    text = proto_get(first, "text")
    assert "I am the built-in fallback, not a language model (why is said just above)" in text, text
    assert "refused the key" not in text and "passepartout doctor" in text, text
    # the same incident again: no block of commands a second time, one line pointing to help
    text = proto_get(second, "text")
    assert "built-in fallback" in text and "`help`" in text, text
    assert "remember TEXT" not in text and len(text.splitlines()) == 1, text
    # a command it understands is answered as such, without the block either
    third = proto_read(proto_get(await cascade_complete(cascade, told(heard, "list the files")), "text"))
    assert proto_get(third, "action") == K("shell") and proto_get(third, "cmd") == "ls -la", third
    # help asked for is the whole block, with the reason named
    fourth = proto_read(proto_get(await cascade_complete(cascade, told(heard, "help")), "text"))
    text = proto_get(fourth, "text")
    assert "not a language model: model openai/scripted-error401" in text and "refused the key" in text, text
    assert "remember TEXT" in text, text
    # nobody to tell: the answer names it, and only the log heard the line
    quiet = make_cascade([scripted(openai_server, "error401"), make_provider("symbolic")])
    text = proto_get(proto_read(proto_get(await cascade_complete(quiet, told(None, "hello")), "text")), "text")
    assert f"not a language model: {reason}." in text, text


@on_loop
async def test_the_fallback_with_nothing_configured_says_how_to_configure(monkeypatch):
    sock = closed_port()
    port = sock.getsockname()[1]
    try:
        heard = Heard()
        cascade = make_cascade([make_provider("ollama_chat/llama3.2", api_base=f"http://127.0.0.1:{port}",
                                              probe=True),
                                make_provider("symbolic")])
        text = proto_get(proto_read(proto_get(await cascade_complete(cascade, told(heard, "help")), "text")),
                         "text")
    finally:
        sock.close()
    assert heard.lines == [f"model ollama_chat/llama3.2 is not running: nothing accepts connections at "
                           f"127.0.0.1:{port} (Connection refused), falling back to the built-in commands"], \
        heard.lines
    assert "built-in fallback" in text and "PASSEPARTOUT_MODELS=" in text, text


@on_loop
async def test_a_notify_that_fails_does_not_fail_the_call(openai_server, key):
    def broken(text, kind="progress"):
        raise RuntimeError("the chat went away")
    result = await cascade_complete(make_cascade([scripted(openai_server, "error401"), scripted(openai_server, "ok")]),
                                   told(broken))
    assert proto_get(result, "provider") == "openai/scripted-ok", result


# * Checking one provider, as doctor does

@on_loop
async def test_check_provider_asks_for_one_token(openai_server, key):
    status, detail = await check_provider(scripted(openai_server, "ok"))
    assert status == "ok" and detail.startswith("answered in "), detail
    assert openai_server.requests[-1]["body"]["max_tokens"] == 1, openai_server.requests[-1]
    # the check's own deadline, not the provider's 60 s, ends the wait
    assert await check_provider(scripted(openai_server, "hang", timeout=60.0), deadline=1.0) == \
        ("fail", "did not answer in 1 s")
    assert (await check_provider(scripted(openai_server, "error401")))[1].startswith("refused the key (401: ")
    assert (await check_provider(make_provider("symbolic")))[0] == "ok"


# * Tools natively, or as text

def _run_task(openai_server, tmp_path, tools, first_script, tool_results=None):
    """One task through step against the scripted server: the model's first answer
    (FIRST_SCRIPT) proposes a shell action, its second answers "done". The
    request bodies the server saw, and the replies."""
    import os
    from passepartout.daemon import boot, shutdown
    from passepartout.loop import step
    openai_server.live = first_script
    provider = make_provider("openai/scripted-live", api_base=openai_server.url("live"),
                             api_key_env=KEY_ENV, timeout=10, tools=tools, tool_results=tool_results)
    config = tmp_path / "config.toml"
    config.write_text('[sandbox]\nmode = "off"\n')
    env = boot(config_path=str(config),
               environ={"PASSEPARTOUT_DATA_DIR": str(tmp_path / "data"), "HOME": str(tmp_path),
                        KEY_ENV: os.environ[KEY_ENV]},
               providers=[provider, make_provider("symbolic")])
    replies = []
    try:
        queue = [[K("type"), K("event"), K("source"), [K("gateway"), K("test"), K("chat"), "n"],
                  K("payload"), [K("sensor"), K("user-input"), K("text"), "run it"]]]
        async def run():
            while queue:
                for out in await step(queue.pop(0), env):
                    (replies if proto_get(out, K("type")) == K("reply") else queue).append(out)
                openai_server.live = "ok"

        asyncio.run(run())
    finally:
        shutdown(env)
    return [r["body"] for r in openai_server.requests], [proto_get(proto_get(r, K("payload")), K("text"))
                                                         for r in replies]


def test_a_tool_call_and_its_result_go_back_as_the_models_own_conversation(openai_server, key, tmp_path):
    openai_server.tool_calls = [("shell", '{"cmd": "echo native-call", "explanation": "to see"}')]
    openai_server.reply_text = '(:action :message :text "done")'
    bodies, texts = _run_task(openai_server, tmp_path, True, "toolcall", tool_results="native")
    assert texts[-1] == "done", texts
    assert len(bodies) == 2, bodies
    first, second = bodies
    assert first["tool_choice"] == "auto" and first["tools"], first.keys()
    calls = [m for m in second["messages"] if m.get("tool_calls")]
    answers = [m for m in second["messages"] if m.get("role") == "tool"]
    assert len(calls) == 1 and calls[0]["role"] == "assistant", second["messages"]
    call_id = calls[0]["tool_calls"][0]["id"]
    assert calls[0]["tool_calls"][0]["function"]["name"] == "shell"
    assert len(answers) == 1 and answers[0]["tool_call_id"] == call_id, answers
    assert "native-call" in answers[0]["content"], answers
    assert all(isinstance(m.get("content"), str) for m in second["messages"]), second["messages"]
    assert not any("passepartout_call" in m for m in second["messages"]), "the marker leaked out"


def _answered_in_order(messages):
    """The tool_call ids of MESSAGES' assistant turns, when every one is answered
    by tool messages right after it, in the order of the calls (else an AssertionError)."""
    ids = []
    for i, m in enumerate(messages):
        if m.get("tool_calls"):
            want = [c["id"] for c in m["tool_calls"]]
            got = [r["tool_call_id"] for r in messages[i + 1:i + 1 + len(want)] if r.get("role") == "tool"]
            assert got == want, (want, got, messages)
            ids += want
    roles = [m["role"] for m in messages if m["role"] != "tool"][1:]
    assert all(r == ("user" if k % 2 == 0 else "assistant") for k, r in enumerate(roles)), roles
    return ids


def test_two_calls_in_one_answer_run_in_one_step_and_each_gets_its_reply(openai_server, key, tmp_path):
    openai_server.template = "chatml-function-calling"
    openai_server.tool_calls = [("shell", '{"cmd": "echo first-call", "explanation": "one"}'),
                                ("shell", '{"cmd": "echo second-call", "explanation": "two"}')]
    openai_server.reply_text = '(:action :message :text "done")'
    bodies, texts = _run_task(openai_server, tmp_path, True, "toolcall", tool_results="native")
    assert texts[-1] == "done", texts
    assert len(bodies) == 2, "both calls ran before the model was asked again"
    assert not openai_server.errors(), openai_server.errors()
    messages = bodies[1]["messages"]
    turns = [m for m in messages if m.get("tool_calls")]
    assert len(turns) == 1 and len(turns[0]["tool_calls"]) == 2, "one assistant turn carries both calls"
    assert _answered_in_order(messages) == ["call_1_0", "call_1_1"], messages
    replies = [m["content"] for m in messages if m["role"] == "tool"]
    assert "first-call" in replies[0] and "second-call" in replies[1], replies


def test_a_refused_call_beside_an_allowed_one_is_answered_with_its_refusal(openai_server, key, tmp_path):
    openai_server.template = "chatml-function-calling"
    openai_server.tool_calls = [("read-file", '{"path": "../../../etc/shadow"}'),
                                ("shell", '{"cmd": "echo allowed-call", "explanation": "two"}')]
    openai_server.reply_text = '(:action :message :text "done")'
    bodies, texts = _run_task(openai_server, tmp_path, True, "toolcall", tool_results="native")
    assert texts[-1] == "done", texts
    assert len(bodies) == 2, bodies
    assert any("refused" in t for t in texts), texts
    messages = bodies[1]["messages"]
    assert _answered_in_order(messages) == ["call_1_0", "call_1_1"], messages
    replies = [m["content"] for m in messages if m["role"] == "tool"]
    assert ":refused" in replies[0] and "shadow" in replies[0], replies
    assert "allowed-call" in replies[1], replies


def test_two_calls_as_text_are_one_assistant_turn_and_one_user_turn(openai_server, key, tmp_path):
    openai_server.template = "alternating"
    openai_server.tool_calls = [("shell", '{"cmd": "echo first-call", "explanation": "one"}'),
                                ("shell", '{"cmd": "echo second-call", "explanation": "two"}')]
    openai_server.reply_text = '(:action :message :text "done")'
    bodies, texts = _run_task(openai_server, tmp_path, True, "toolcall", tool_results="text")
    assert texts[-1] == "done", texts
    assert len(bodies) == 2 and not openai_server.errors(), openai_server.errors()
    messages = bodies[1]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"], messages
    said, results = messages[2]["content"], messages[3]["content"]
    assert said.index("echo first-call") < said.index("echo second-call"), said
    assert results.index("first-call") < results.index("second-call"), results


def test_a_model_without_tools_gets_the_conversation_as_text(openai_server, key, tmp_path):
    openai_server.replies.extend(['(:action :shell :cmd "echo text-call" :explanation "to see")',
                                  '(:action :message :text "done")'])
    bodies, texts = _run_task(openai_server, tmp_path, False, "ok")
    assert texts[-1] == "done", texts
    second = bodies[1]
    assert "tools" not in second and "tool_choice" not in second, second.keys()
    assert not any(m.get("role") == "tool" or m.get("tool_calls") for m in second["messages"])
    results = [m for m in second["messages"] if m["role"] == "user" and "Result of" in (m["content"] or "")]
    assert results and "text-call" in results[-1]["content"], second["messages"]


# * Requests a local server's chat template renders

def _post(url, body):
    """(status, parsed body) of a chat request sent as is, without LiteLLM."""
    import urllib.error
    import urllib.request
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


CALL = {"id": "call_1", "type": "function",
        "function": {"name": "shell", "arguments": '{"cmd": "ls"}'}}


def test_the_strict_server_fails_as_llama_cpp_python_does(openai_server):
    openai_server.template = "chatml-function-calling"
    conversation = [{"role": "system", "content": "You propose actions."},
                    {"role": "user", "content": "list my files"},
                    {"role": "assistant", "tool_calls": [CALL]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "RESULT-TEXT"}]
    status, body = _post(openai_server.url("ok"), {"model": "m", "messages": conversation,
                                                   "tools": TOOLS, "tool_choice": "auto"})
    assert status == 500, (status, body)
    assert body["error"]["message"] == "'dict object' has no attribute 'content'", body
    # with the key there it renders, and the tool message's content is nowhere in the prompt
    conversation[2]["content"] = ""
    status, body = _post(openai_server.url("ok"), {"model": "m", "messages": conversation,
                                                   "tools": TOOLS, "tool_choice": "auto"})
    assert status == 200, (status, body)
    prompt = openai_server.prompts()[-1]
    assert "functions.shell:" in prompt and "RESULT-TEXT" not in prompt, prompt
    openai_server.template = "alternating"
    status, body = _post(openai_server.url("ok"), {"model": "m", "messages": conversation})
    assert status == 500 and "must alternate" in body["error"]["message"], body


@pytest.mark.parametrize("template", ["chatml-function-calling", "smollm2", "alternating"])
def test_after_a_tool_call_the_next_request_renders_and_shows_the_result(
        openai_server, key, tmp_path, template):
    openai_server.template = template
    openai_server.tool_calls = [("shell", '{"cmd": "echo seen-by-the-model", "explanation": "to see"}')]
    openai_server.reply_text = '(:action :message :text "done")'
    bodies, texts = _run_task(openai_server, tmp_path, None, "toolcall")
    assert openai_server.errors() == [], openai_server.errors()
    assert texts[-1] == "done", texts
    assert len(bodies) == 2, bodies
    first, second = bodies
    assert first["tools"] and first["tool_choice"] == "auto", first.keys()
    roles = [m["role"] for m in second["messages"]]
    assert roles[0] == "system" and all(a != b for a, b in zip(roles[1:], roles[2:])), roles
    assert all(isinstance(m["content"], str) for m in second["messages"]), second["messages"]
    prompt = html.unescape(openai_server.prompts()[-1])  # the function-calling template escapes quotes
    assert '{"action": "shell", "cmd": "echo seen-by-the-model"' in prompt, prompt  # the call
    assert ':output "seen-by-the-model' in prompt, prompt  # and its result


def test_native_results_render_where_a_template_drops_them(openai_server, key, tmp_path):
    """Why text is the default for a server LiteLLM does not know: the native form
    renders through llama-cpp-python's function-calling template, and the result
    is not in the prompt the model reads."""
    openai_server.template = "chatml-function-calling"
    openai_server.tool_calls = [("shell", '{"cmd": "echo never-seen", "explanation": "to see"}')]
    openai_server.reply_text = '(:action :message :text "done")'
    bodies, texts = _run_task(openai_server, tmp_path, None, "toolcall", tool_results="native")
    assert openai_server.errors() == [] and texts[-1] == "done", (openai_server.errors(), texts)
    assert any(m["role"] == "tool" and "never-seen" in m["content"] for m in bodies[1]["messages"])
    prompt = html.unescape(openai_server.prompts()[-1])
    assert "functions.shell:" in prompt and ":output" not in prompt, prompt  # the call, not its result


@on_loop
async def test_check_provider_sends_a_tool_conversation_and_names_a_template_that_cannot(openai_server, key):
    openai_server.template = "alternating"
    native = scripted(openai_server, "ok") | {"tool_results": "native"}
    status, detail = await check_provider(native)
    assert status == "fail" and detail.startswith(
        "cannot render the results of tool calls as tool messages (500: Conversation roles must alternate"), detail
    assert 'set tool_results = "text"' in detail, detail
    seen = len(openai_server.requests)
    status, detail = await check_provider(scripted(openai_server, "ok"))  # text, the default here
    assert status == "ok" and detail.startswith("answered in "), detail
    assert len(openai_server.requests) == seen + 1 and openai_server.errors() == [
        "Conversation roles must alternate user/assistant/user/assistant/..."], openai_server.errors()
    openai_server.template = "chatml-function-calling"
    status, detail = await check_provider(native)
    assert status == "fail" and detail.startswith("drops the results of tool calls"), detail
    body = openai_server.requests[-1]["body"]
    assert body["tools"] and body["max_tokens"] == 1, body


@on_loop
async def test_a_model_litellm_knows_to_call_tools_gets_tool_messages_by_default(openai_server, key):
    call = {"id": "c1", "name": "shell", "arguments": '{"cmd": "ls"}'}
    messages = MESSAGES + [{"role": "user", "content": "Result of ls:\nnotes.txt", "passepartout_call": call}]
    for model, roles in [("openai/gpt-4o-mini", ["system", "user", "assistant", "tool"]),
                         ("openai/scripted-local", ["system", "user", "assistant", "user"])]:
        provider = scripted(openai_server, "ok", model=model)
        result = await cascade_complete(make_cascade([provider]),
                                        [K("messages"), messages, K("tools"), TOOLS])
        assert proto_get(result, "status") == K("ok"), result
        sent = openai_server.requests[-1]["body"]["messages"]
        assert [m["role"] for m in sent] == roles, (model, sent)
        assert all(isinstance(m["content"], str) for m in sent), sent


@on_loop
async def test_an_empty_answer_to_the_tools_is_asked_again_without_them(openai_server, key):
    openai_server.reply_text = '(:action :message :text "in words")'
    result = await cascade_complete(make_cascade([scripted(openai_server, "toolsempty")]), request(tools=TOOLS))
    assert proto_get(result, "status") == K("ok") and proto_get(result, "text") == openai_server.reply_text, result
    first, second = [r["body"] for r in openai_server.requests]
    assert first["tools"] and "tools" not in second and "tool_choice" not in second, (first.keys(), second.keys())
    assert second["messages"] == first["messages"], second
    # a server that answers nothing either way fails as before, after the second request
    openai_server.requests.clear()
    result = await cascade_complete(make_cascade([scripted(openai_server, "empty")]), request(tools=TOOLS))
    assert outcomes(result) == [K("empty")] and len(openai_server.requests) == 2, openai_server.requests


# * Faults as providers mean them

@on_loop
async def test_a_long_retry_after_falls_through_and_is_the_cool_down(openai_server, key):
    openai_server.retry_after = "20"
    heard = Heard()
    clock = FakeClock()
    cascade = make_cascade([scripted(openai_server, "ratelimit"), scripted(openai_server, "ok")], clock=clock)
    first = await cascade_complete(cascade, told(heard))
    assert outcomes(first) == [K("error"), K("ok")], first
    assert "retry after 20 s" in proto_get(proto_get(first, "attempts")[0], "detail"), first
    assert len(heard.lines) == 1 and "rate limit" in heard.lines[0], heard.lines
    second = await cascade_complete(cascade, told(heard))
    assert outcomes(second) == [K("skipped"), K("ok")], second
    clock.now += 21.0
    third = await cascade_complete(cascade, told(heard))
    assert outcomes(third) == [K("error"), K("ok")], third
    # one request per message that asked it: neither LiteLLM nor its HTTP client tried again
    assert openai_server.scripts_seen() == ["ratelimit", "ok", "ok", "ratelimit", "ok"], openai_server.scripts_seen()


@on_loop
async def test_a_short_retry_after_is_waited_and_the_person_told(openai_server, key):
    openai_server.retry_after = "0.2"
    heard = Heard()
    cascade = make_cascade([scripted(openai_server, "ratelimit"), scripted(openai_server, "ok")])
    result = await cascade_complete(cascade, told(heard))
    assert openai_server.scripts_seen() == ["ratelimit", "ratelimit", "ok"], openai_server.scripts_seen()
    assert outcomes(result) == [K("error"), K("ok")], result
    assert heard.lines[0] == "model openai/scripted-ratelimit is over its rate limit; asking it again in 0.2 s", \
        heard.lines


@on_loop
async def test_an_html_page_is_not_an_api_answer_and_names_the_host(openai_server, key):
    heard = Heard()
    cascade = make_cascade([scripted(openai_server, "html200"), scripted(openai_server, "ok")])
    result = await cascade_complete(cascade, told(heard))
    assert outcomes(result) == [K("garbage"), K("ok")], result
    assert len(heard.lines) == 1, heard.lines
    line = heard.lines[0]
    assert "127.0.0.1 answered with a web page, not an API answer" in line and "500" not in line, line


@on_loop
async def test_a_timeout_with_a_healthy_model_behind_opens_the_breaker_at_once(openai_server, key):
    _litellm_module()
    cascade = make_cascade([scripted(openai_server, "hang", timeout=1.0), scripted(openai_server, "ok")])
    assert outcomes(await cascade_complete(cascade, request())) == [K("timeout"), K("ok")]
    for _ in range(3):
        assert outcomes(await cascade_complete(cascade, request())) == [K("skipped"), K("ok")]
    assert openai_server.scripts_seen().count("hang") == 1, openai_server.scripts_seen()


@on_loop
async def test_a_model_that_timed_out_gets_a_short_probe_before_a_full_deadline(openai_server, key):
    _litellm_module()
    cascade = make_cascade([scripted(openai_server, "live", timeout=1.0), make_provider("symbolic")],
                           probe_deadline=0.5)
    openai_server.live = "hang"
    assert outcomes(await cascade_complete(cascade, request())) == [K("timeout"), K("ok")]
    assert proto_get(cascade_status(cascade)[0], "state") == K("closed"), "no healthy model behind: not opened"
    # the next message: a one-token probe first, which hangs too: no full request is sent
    second = await cascade_complete(cascade, request())
    assert outcomes(second) == [K("timeout"), K("ok")], second
    bodies = [r["body"] for r in openai_server.requests]
    assert bodies[1]["max_tokens"] == 1 and len(bodies) == 2, bodies
    assert "short probe" in proto_get(proto_get(second, "attempts")[0], "detail"), second
    # it answers again: the probe, then the full request
    openai_server.live = "ok"
    third = await cascade_complete(cascade, request())
    assert outcomes(third) == [K("ok")], third
    bodies = [r["body"] for r in openai_server.requests]
    assert [b["max_tokens"] for b in bodies[2:]] == [1, 1024], bodies[2:]
    fourth = await cascade_complete(cascade, request())
    assert len(openai_server.requests) == 5, "no probe once it answered"


@on_loop
async def test_the_breakers_outlive_the_process_in_the_store(openai_server, key, tmp_path):
    from passepartout.store import store_open, store_close
    _litellm_module()
    store = store_open(tmp_path / "p.db")
    try:
        providers = [scripted(openai_server, "hang", timeout=1.0), scripted(openai_server, "ok")]
        first = make_cascade(providers, store=store)
        assert outcomes(await cascade_complete(first, request())) == [K("timeout"), K("ok")]
        again = make_cascade(providers, store=store)
        assert proto_get(cascade_status(again)[0], "state") == K("open"), cascade_status(again)
        assert outcomes(await cascade_complete(again, request())) == [K("skipped"), K("ok")]
        assert openai_server.scripts_seen().count("hang") == 1, openai_server.scripts_seen()
    finally:
        store_close(store)


def test_arguments_sent_as_an_object_are_read_without_warnings_on_the_terminal():
    code = f"""
import asyncio, json, os, sys
sys.path.insert(0, {str(ROOT / 'tests')!r})
import hy
from hy.models import Keyword as K
from openai_server import ScriptedOpenAIServer
from passepartout.cascade import make_cascade, cascade_complete
from passepartout.providers import make_provider
from passepartout.proto import proto_get
s = ScriptedOpenAIServer()
s.arguments_as_objects = True
os.environ["K"] = "sk"
c = make_cascade([make_provider("openai/x", api_base=s.url("toolcall"), api_key_env="K")])
tools = [{{"type": "function", "function": {{"name": "shell", "parameters": {{"type": "object"}}}}}}]
r = asyncio.run(cascade_complete(c, [K("messages"), [{{"role": "user", "content": "hi"}}], K("tools"), tools]))
s.stop()
print(json.dumps(proto_get(proto_get(r, K("tool-calls"))[0], K("arguments"))))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(json.loads(out.stdout.strip().splitlines()[-1]))["cmd"] == "ls -la", out.stdout
    assert "serializer warnings" not in out.stderr, out.stderr
