"""One call to a model through LiteLLM, and LiteLLM's import kept off the loop."""
from conftest import run_python


def test_litellm_is_imported_in_the_background_when_a_model_is_configured():
    got = run_python("""
        import json, sys
        import hy
        from passepartout.llm import warm_litellm
        from passepartout.providers import make_provider, default_providers
        none = warm_litellm(default_providers())
        before = 'litellm' in sys.modules
        t = warm_litellm([make_provider("openai/gpt-4o-mini"), make_provider("symbolic")])
        t.join(120)
        print(json.dumps([none is None, before, 'litellm' in sys.modules]))
    """)
    assert got == [True, False, True], got
