"""The providers a configuration names: defaults, [[providers]] tables, PASSEPARTOUT_MODELS."""
import pytest

from passepartout.providers import default_providers, make_provider, providers_from_config


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
                            "max_tokens": 1024, "tools": None, "tool_results": None}
    assert providers[1]["api_base"] == "http://10.0.0.5:11434" and providers[1]["probe"] is True
    twice = providers_from_config({"providers": [{"model": "m"}, {"model": "m"}]}, env={})
    assert [p["name"] for p in twice] == ["m", "m#2", "symbolic"]


def test_bad_provider_tables_are_refused():
    with pytest.raises(ValueError, match="api_key"):
        providers_from_config({"providers": [{"model": "m", "api_key": "sk-secret"}]}, env={})
    with pytest.raises(ValueError, match=r"\[\[providers\]\] #2 has no model"):
        providers_from_config({"providers": [{"model": "m"}, {"name": "x"}]}, env={})
    with pytest.raises(ValueError, match="timeout"):
        make_provider("m", timeout=-1)
    with pytest.raises(ValueError, match=r"\[\[providers\]\] #1 max_tokens must be"):
        providers_from_config({"providers": [{"model": "m", "max_tokens": 0}]}, env={})
    with pytest.raises(ValueError, match="max_tokens"):
        make_provider("m", max_tokens="many")


def test_tool_results_is_a_provider_setting():
    providers = providers_from_config({"providers": [{"model": "m", "tool-results": "text"},
                                                     {"model": "n"}]}, env={})
    assert [p["tool_results"] for p in providers] == ["text", None, None], providers
    with pytest.raises(ValueError, match="tool_results must be 'native' or 'text'"):
        make_provider("m", tool_results="tools")
