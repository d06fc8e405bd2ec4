"""passepartout doctor: a row per gateway and per model, the models asked for real."""
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


KEY_ENV = "PASSEPARTOUT_TEST_SCRIPTED_KEY"


def doctor(tmp_path, config_text, **env):
    config = tmp_path / "config.toml"
    config.write_text(config_text)
    environ = {k: v for k, v in os.environ.items()
               if k not in ("PASSEPARTOUT_MODELS", "TELEGRAM_BOT_TOKEN")}
    environ.update(PASSEPARTOUT_DATA_DIR=str(tmp_path / "data"), PASSEPARTOUT_CONFIG=str(config),
                   HOME=str(tmp_path), **env)
    exe = Path(sys.executable).parent / "passepartout"
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "passepartout"]
    start = time.monotonic()
    out = subprocess.run(command + ["doctor"], capture_output=True, text=True, env=environ,
                         cwd=ROOT, timeout=120)
    rows = {}
    for line in out.stdout.splitlines():
        check, _, rest = line.partition("  ")
        status, _, detail = rest.strip().partition("  ")
        rows[check] = (status, detail.strip())
    return out, rows, time.monotonic() - start


def provider(name, url, timeout=5):
    return (f'[[providers]]\nname = "{name}"\nmodel = "openai/{name}"\napi_base = "{url}"\n'
            f'api_key_env = "{KEY_ENV}"\ntimeout = {timeout}\n')


def test_doctor_asks_each_model_once_and_all_at_once(tmp_path, openai_server):
    config = (provider("good", openai_server.url("ok"))
              + provider("badkey", openai_server.url("error401"))
              + provider("hung", openai_server.url("hang"), timeout=2)
              + provider("hung-too", openai_server.url("hang"), timeout=2))
    out, rows, _ = doctor(tmp_path, config, **{KEY_ENV: "sk-scripted"})
    assert out.returncode == 1, out.stdout + out.stderr
    assert rows["model good"][0] == "ok" and rows["model good"][1].startswith("answered in "), out.stdout
    assert rows["model badkey"] == (
        "fail", "refused the key (401: Incorrect API key provided: sk-scr***key)"), out.stdout
    assert rows["model hung"] == ("fail", "did not answer in 2 s"), out.stdout
    assert rows["model hung-too"] == ("fail", "did not answer in 2 s"), out.stdout
    assert rows["model symbolic"][0] == "ok", out.stdout
    # the rows that were there before are still there, in the same shape
    assert {"config", "data dir", "REPL socket", "sandbox", "gateways"} <= set(rows), out.stdout
    # one token each, and the two hung models cost one deadline, not two
    asked = [r["body"] for r in openai_server.requests]
    assert sorted(r["model"] for r in asked) == ["badkey", "good", "hung", "hung-too"], asked
    assert all(r["max_tokens"] == 1 for r in asked), asked
    assert openai_server.most_hanging == 2, "the two hung models were waited on one after the other"


def test_doctor_says_a_missing_key_and_a_local_model_not_running(tmp_path, openai_server):
    config = provider("good", openai_server.url("ok"))
    out, rows, _ = doctor(tmp_path, config)
    assert rows["model good"] == (
        "fail", f"has no API key: the environment variable {KEY_ENV} is not set"), out.stdout
    assert openai_server.requests == []
    out, rows, _ = doctor(tmp_path, "")
    local = rows["model ollama_chat/llama3.2"]
    if local[0] != "ok":  # unless an Ollama runs here, the default local model is a warning
        assert local[0] == "warn" and local[1].startswith("is not running: "), out.stdout
    assert out.returncode == 0, out.stdout + out.stderr


def test_doctor_checks_each_gateway(tmp_path):
    from bot_api_server import TOKEN, BotAPIServer
    from signal_server import SignalServer
    bot, signal = BotAPIServer(), SignalServer(account="+4915123456789")
    bot_base = bot.base_url
    try:
        config = (f'[gateways.telegram]\nallowed_users = [42]\napi_base = "{bot_base}"\n'
                  f'[gateways.signal]\nnumber = "+4915123456789"\nurl = "{signal.url}"\n')
        out, rows, _ = doctor(tmp_path, config)
        assert rows["gateway terminal"][0] == "ok", out.stdout
        assert rows["gateway telegram"] == (
            "fail", "the bot token is missing: the environment variable TELEGRAM_BOT_TOKEN is not set"), out.stdout
        assert rows["gateway signal"][0] == "warn" and "allowed_numbers is empty" in rows["gateway signal"][1]
        assert out.returncode == 1
        # a token the Bot API refuses is a failure, and the token is never shown
        out, rows, _ = doctor(tmp_path, config, TELEGRAM_BOT_TOKEN="999:wrong-token-for-this-bot")
        status, detail = rows["gateway telegram"]
        assert status == "fail" and "refused the token in TELEGRAM_BOT_TOKEN" in detail, out.stdout
        assert "wrong-token" not in out.stdout + out.stderr, out.stdout
        out, rows, _ = doctor(tmp_path, config, TELEGRAM_BOT_TOKEN=TOKEN)
        assert rows["gateway telegram"][0] == "ok" and "1 allowed user(s)" in rows["gateway telegram"][1], out.stdout
        assert TOKEN not in out.stdout
        # a server that holds another account, numbers that are not E.164, nothing listening
        other = config.replace('number = "+4915123456789"', 'number = "+4915100000000"')
        out, rows, _ = doctor(tmp_path, other)
        assert rows["gateway signal"][0] == "fail" and "has no account +4915100000000" in rows["gateway signal"][1]
        out, rows, _ = doctor(tmp_path, config + 'allowed_numbers = ["+0123", "+49 151 2345 6789"]\n')
        assert rows["gateway signal"] == ("fail", "not E.164 numbers (+, a country code, at most 15 digits): +0123")
    finally:
        signal.stop()
        bot.stop()
    out, rows, _ = doctor(tmp_path, config)
    status, detail = rows["gateway signal"]
    assert status == "fail" and f"nothing answers at 127.0.0.1:{signal.port}" in detail, out.stdout


def test_doctor_names_a_server_whose_template_cannot_render_a_tool_conversation(tmp_path, openai_server):
    # a server that renders every request through a chat template which insists on
    # alternating user and assistant turns, as many local models' templates do
    openai_server.template = "alternating"
    config = (provider("plain", openai_server.url("ok"))
              + provider("native", openai_server.url("ok")) + 'tool_results = "native"\n')
    out, rows, _ = doctor(tmp_path, config, **{KEY_ENV: "sk-scripted"})
    assert rows["model plain"][0] == "ok", out.stdout
    status, detail = rows["model native"]
    assert status == "fail" and detail.startswith(
        "cannot render the results of tool calls as tool messages (500: Conversation roles must alternate"), out.stdout
    assert detail.endswith('set tool_results = "text" in its [[providers]] table'), detail
    assert out.returncode == 1, out.stdout + out.stderr
    asked = [r["body"] for r in openai_server.requests]
    assert all(r["max_tokens"] == 1 and r["tools"] for r in asked), asked
    assert sorted(r["model"] for r in asked) == ["native", "native", "plain"], asked


def test_doctor_names_the_host_that_failed_and_a_key_the_library_missed(tmp_path, openai_server):
    """A model with no api_base goes where its library sends it: a connection that
    fails there names that host (not the model), and a key the library itself finds
    missing (no api_key_env in the config) is a missing key, not a server's error."""
    base = {k: v for k, v in os.environ.items() if k.startswith("OPENAI_")}
    unset = {k: "" for k in base}
    out, rows, _ = doctor(tmp_path, "", PASSEPARTOUT_MODELS="openai/gpt-4o-mini",
                          **(unset | {"OPENAI_API_KEY": "sk-x", "OPENAI_API_BASE": "http://nothing-here.invalid/v1"}))
    status, detail = rows["model openai/gpt-4o-mini"]
    assert status == "fail" and detail.startswith("could not be reached ("), out.stdout
    assert detail.endswith(" at nothing-here.invalid)"), out.stdout
    out, rows, _ = doctor(tmp_path, "", PASSEPARTOUT_MODELS="openai/gpt-4o-mini",
                          **(unset | {"OPENAI_API_BASE": openai_server.url("ok")}))
    assert rows["model openai/gpt-4o-mini"] == (
        "fail", "has no API key: the environment variable OPENAI_API_KEY is not set"), out.stdout
    assert not openai_server.requests, "no request goes out without a key"
