"""The provider cascade: the real LiteLLM client against a scripted server on loopback."""
import json
import socket
import subprocess
import sys
import textwrap
import time
from collections import deque
from pathlib import Path

import hy  # noqa: F401
import pytest
from hy.models import Keyword as K

from openai_server import openai_server  # noqa: F401  (the fixture)
from passepartout.cascade import (
    _Failure,
    _with_deadline,
    cascade_complete,
    cascade_status,
    default_providers,
    make_cascade,
    make_provider,
    providers_from_config,
)
from passepartout.proto import proto_get, proto_read

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


def run_python(code):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


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
            import json, sys
            from passepartout.cascade import make_cascade, make_provider, cascade_complete
            from passepartout.proto import proto_get
            providers = [make_provider("ollama_chat/llama3.2", api_base="http://127.0.0.1:{port}", probe=True),
                         make_provider("symbolic")]
            r = cascade_complete(make_cascade(providers), [])
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


# * Falling through, with the real client

def test_slow_error_garbage_then_ok(openai_server, key):
    openai_server.reply_text = "(:action :message :text \"here they are\")"
    providers = [scripted(openai_server, "slow", timeout=1.0),
                 scripted(openai_server, "error500"),
                 scripted(openai_server, "garbage"),
                 scripted(openai_server, "ok")]
    result = cascade_complete(make_cascade(providers), request())
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


def test_empty_answer_falls_through(openai_server, key):
    openai_server.replies = deque(["first", "second"])
    cascade = make_cascade([scripted(openai_server, "empty"), scripted(openai_server, "ok")])
    first = cascade_complete(cascade, request())
    second = cascade_complete(cascade, request())
    assert outcomes(first) == [K("empty"), K("ok")], first
    assert [proto_get(first, "text"), proto_get(second, "text")] == ["first", "second"]
    assert openai_server.scripts_seen() == ["empty", "ok", "empty", "ok"]


def test_tool_calls_are_parsed(openai_server, key):
    openai_server.tool_calls = [("shell", '{"cmd": "ls -la"}'),
                                ("read_file", '{"path": "notes.txt"}')]
    result = cascade_complete(make_cascade([scripted(openai_server, "toolcall")]), request(tools=TOOLS))
    assert proto_get(result, "status") == K("ok"), result
    assert proto_get(result, "text") is None
    calls = proto_get(result, "tool-calls")
    assert [(proto_get(c, "name"), json.loads(proto_get(c, "arguments"))) for c in calls] == [
        ("shell", {"cmd": "ls -la"}), ("read_file", {"path": "notes.txt"})]
    assert all(proto_get(c, "id") for c in calls)
    body = openai_server.requests[0]["body"]
    assert body["tools"] == TOOLS
    assert not [k for k in body if k.startswith("_")], body  # no LiteLLM-internal flag leaks out


def test_cost_of_a_priced_model(openai_server, key):
    provider = scripted(openai_server, "ok", model="openai/gpt-4o-mini")
    result = cascade_complete(make_cascade([provider]), request())
    assert proto_get(proto_get(result, "usage"), "cost") > 0.0, result


# * Failing without raising

def test_all_failing_is_a_result_not_an_exception(openai_server, key, monkeypatch):
    monkeypatch.delenv("PASSEPARTOUT_TEST_UNSET_KEY", raising=False)
    providers = [scripted(openai_server, "error500"),
                 make_provider("openai/scripted-ok", api_base=openai_server.url("ok"),
                               api_key_env="PASSEPARTOUT_TEST_UNSET_KEY"),
                 {"name": "broken"}]
    result = cascade_complete(make_cascade(providers), request())
    assert proto_get(result, "status") == K("failed"), result
    assert outcomes(result) == [K("error"), K("error"), K("error")]
    assert proto_get(result, "reason").startswith("all providers failed: openai/scripted-error500 error")
    assert "PASSEPARTOUT_TEST_UNSET_KEY" in proto_get(result, "reason")
    # a provider whose key is not set is never called
    assert openai_server.scripts_seen() == ["error500"]


def test_no_providers_fails_with_a_reason():
    result = cascade_complete(make_cascade([]), request())
    assert proto_get(result, "status") == K("failed")
    assert proto_get(result, "attempts") == []
    assert "no providers" in proto_get(result, "reason")


def test_the_deadline_bounds_a_call_that_never_ends():
    with pytest.raises(_Failure) as failure:
        _with_deadline(lambda: time.sleep(2), 0.05)
    assert failure.value.outcome == K("timeout")
    assert _with_deadline(lambda: 42, 1.0) == 42


# * The circuit breaker

class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_breaker_skips_a_failing_provider_then_tries_it_after_the_cooldown(openai_server, key):
    clock = FakeClock()
    cascade = make_cascade([scripted(openai_server, "error500"), scripted(openai_server, "ok")],
                           cooldown=60.0, failure_threshold=3, clock=clock)
    for _ in range(3):
        assert outcomes(cascade_complete(cascade, request())) == [K("error"), K("ok")]
    assert proto_get(cascade_status(cascade)[0], "state") == K("open")

    skipped = cascade_complete(cascade, request())
    assert outcomes(skipped) == [K("skipped"), K("ok")]
    assert "3 failures" in proto_get(proto_get(skipped, "attempts")[0], "detail")
    clock.now += 59.0
    assert outcomes(cascade_complete(cascade, request())) == [K("skipped"), K("ok")]
    assert openai_server.scripts_seen() == ["error500", "ok"] * 3 + ["ok", "ok"]

    clock.now += 2.0  # cool-down over: one trial (half-open), which fails and re-opens
    assert proto_get(cascade_status(cascade)[0], "state") == K("half-open")
    assert outcomes(cascade_complete(cascade, request())) == [K("error"), K("ok")]
    assert outcomes(cascade_complete(cascade, request())) == [K("skipped"), K("ok")]
    assert openai_server.scripts_seen()[-3:] == ["error500", "ok", "ok"]


def test_breaker_closes_after_a_successful_trial(openai_server, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    clock = FakeClock()
    cascade = make_cascade([scripted(openai_server, "ok"), make_provider("symbolic")],
                           cooldown=10.0, failure_threshold=2, clock=clock)
    for _ in range(2):
        assert outcomes(cascade_complete(cascade, request())) == [K("error"), K("ok")]
    assert outcomes(cascade_complete(cascade, request())) == [K("skipped"), K("ok")]
    monkeypatch.setenv(KEY_ENV, "sk-now-set")
    clock.now += 10.0
    recovered = cascade_complete(cascade, request())
    assert outcomes(recovered) == [K("ok")]
    assert proto_get(recovered, "provider") == "openai/scripted-ok"
    assert proto_get(cascade_status(cascade)[0], "state") == K("closed")
    assert proto_get(cascade_status(cascade)[0], "failures") == 0


# * The symbolic provider through the cascade

def test_symbolic_answers_through_the_cascade():
    result = cascade_complete(make_cascade([make_provider("symbolic")]), request(text="!ls -la"))
    assert proto_get(result, "status") == K("ok")
    assert proto_get(result, "provider") == "symbolic"
    assert outcomes(result) == [K("ok")]
    action = proto_read(proto_get(result, "text"))
    assert proto_get(action, "action") == K("shell")
    assert proto_get(action, "cmd") == "ls -la"
    assert proto_get(proto_get(result, "usage"), "cost") == 0.0


# * Providers from the configuration

def models(providers):
    return [p["model"] for p in providers]


def test_no_configuration_gives_ollama_then_symbolic():
    providers = providers_from_config({}, env={})
    assert models(providers) == ["ollama_chat/llama3.2", "symbolic"]
    ollama = providers[0]
    assert ollama["probe"] is True
    assert ollama["api_base"] == "http://127.0.0.1:11434"
    assert ollama["timeout"] < 60.0
    assert providers == default_providers()
    assert providers_from_config(None, env={"PASSEPARTOUT_MODELS": " , "}) == default_providers()


def test_passepartout_models_replaces_the_configured_list():
    cfg = {"providers": [{"model": "openai/gpt-4o-mini", "api_key_env": "OPENAI_API_KEY"}]}
    providers = providers_from_config(cfg, env={"PASSEPARTOUT_MODELS": "a, b"})
    assert models(providers) == ["a", "b", "symbolic"]
    assert [p["name"] for p in providers] == ["a", "b", "symbolic"]
    assert all(p["api_key_env"] is None and p["probe"] is False for p in providers)


def test_provider_tables():
    cfg = {"providers": [{"model": "openai/gpt-4o-mini", "api_key_env": "OPENAI_API_KEY",
                          "timeout": 20, "name": "mini"},
                         {"model": "ollama/qwen2.5", "api-base": "http://10.0.0.5:11434"},
                         {"model": "openai/gpt-4o-mini"},
                         {"model": "symbolic"}]}
    providers = providers_from_config(cfg, env={})
    assert [p["name"] for p in providers] == ["mini", "ollama/qwen2.5", "openai/gpt-4o-mini", "symbolic"]
    assert providers[0] == {"name": "mini", "model": "openai/gpt-4o-mini", "api_base": None,
                            "api_key_env": "OPENAI_API_KEY", "timeout": 20.0, "probe": False,
                            "max_tokens": 1024}
    assert providers[1]["api_base"] == "http://10.0.0.5:11434" and providers[1]["probe"] is True
    twice = providers_from_config({"providers": [{"model": "m"}, {"model": "m"}]}, env={})
    assert [p["name"] for p in twice] == ["m", "m#2", "symbolic"]


def test_bad_provider_tables_are_refused():
    with pytest.raises(ValueError, match="api_key"):
        providers_from_config({"providers": [{"model": "m", "api_key": "sk-secret"}]}, env={})
    with pytest.raises(ValueError, match="needs a model"):
        providers_from_config({"providers": [{"name": "x"}]}, env={})
    with pytest.raises(ValueError, match="timeout"):
        make_provider("m", timeout=-1)
    with pytest.raises(ValueError, match="max_tokens"):
        providers_from_config({"providers": [{"model": "m", "max_tokens": 0}]}, env={})
    with pytest.raises(ValueError, match="max_tokens"):
        make_provider("m", max_tokens="many")


def test_max_tokens_is_sent_default_and_per_provider(openai_server, key):
    cfg = {"providers": [{"model": "openai/scripted-ok", "api_base": openai_server.url("ok"),
                          "api_key_env": KEY_ENV, "max-tokens": 77}]}
    configured = providers_from_config(cfg, env={})[0]
    for provider, want in [(scripted(openai_server, "ok"), 1024), (configured, 77)]:
        result = cascade_complete(make_cascade([provider]), request())
        assert proto_get(result, "status").name == "ok", result
        body = openai_server.requests[-1]["body"]
        assert body.get("max_tokens") == want, f"request body: {body}"
