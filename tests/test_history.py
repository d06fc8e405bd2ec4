"""Tests of compaction (history.hy): older turns summarised, never dropped in silence."""
import hy  # noqa: F401
from hy.models import Keyword

from passepartout.history import COMPACTION_PROMPT, latest_summary
from passepartout.journal import journal_rows, turn_dict, journal_verify
from passepartout.proto import proto_get
from passepartout.records import events
from steps import run_task, user_says

SMALL = '[memory]\ncontext_tokens = 600\nhistory_share = 0.5\nkeep_turns = 4\n'


def K(name):
    return Keyword(name)


def script(env, summariser):
    """ENV's model answers every step with a message, and a compaction request with SUMMARISER(request)."""
    calls = {"steps": [], "compactions": []}

    def complete(request):
        messages = proto_get(request, K("messages"))
        if messages[0]["content"] == COMPACTION_PROMPT:
            calls["compactions"].append(request)
            return summariser(request)
        calls["steps"].append(request)
        return [K("status"), K("ok"), K("provider"), "script", K("text"), '(:action :message :text "noted")']

    env.complete = complete
    return calls


def said_turns(env, session="test:t1"):
    return [e for e in events(env.store, session=session, kinds=["input", "answer"], limit=None)]


def parents_of(env, event_id):
    for row in journal_rows(env.store):
        d = turn_dict(row)
        if d["id"] == event_id:
            return d["parents"]
    raise AssertionError(f"no turn {event_id}")


def talk(env, n):
    for i in range(n):
        run_task(env, user_says(f"fact number {i}: the colour of box {i} is shade {i * 7} of blue"))


def test_older_turns_are_summarised_and_the_summary_stands_in_for_them(booted):
    env = booted(SMALL)
    calls = script(env, lambda r: [K("status"), K("ok"), K("provider"), "script",
                                   K("text"), f"SUMMARY {len(calls['compactions'])}: boxes are blue"])
    talk(env, 30)
    assert calls["compactions"], "no compaction was asked for"
    summary = latest_summary(env.store, "test:t1")
    assert summary is not None, "no summary turn"
    assert proto_get(summary, K("text")).startswith("SUMMARY"), summary
    assert proto_get(summary, K("by")) == "script", summary
    # the summary's parents are the turns it covers (and the summary before it)
    through = proto_get(summary, K("through"))
    covered = set()
    for e in events(env.store, kind="summary", session="test:t1", limit=None):
        covered |= set(parents_of(env, proto_get(e, K("id"))))
    turns = said_turns(env)
    older = [proto_get(e, K("id")) for e in turns if proto_get(e, K("id")) <= through]
    assert older and set(older) <= covered, (older, covered)
    # the last model call carries the summary and the recent turns, and every
    # turn is either given or covered by a summary
    last = calls["steps"][-1]
    given = "\n".join(str(m["content"]) for m in proto_get(last, K("messages")))
    assert "Earlier in this conversation" in given and proto_get(summary, K("text")) in given, given
    for e in turns:
        text = proto_get(proto_get(e, K("data")), K("text"))
        assert proto_get(e, K("id")) in covered or text in given, f"turn {proto_get(e, K('id'))} dropped: {text}"
    assert "fact number 29" in given, "the newest turn is given"
    # the history stays within its budget: the prompt does not grow with the conversation
    sizes = [sum(len(str(m["content"])) for m in proto_get(r, K("messages"))[1:]) for r in calls["steps"]]
    assert max(sizes[-10:]) < 2 * 300 * 4, sizes
    assert proto_get(journal_verify(env.store), K("ok")), "the journal's chain holds"


def test_with_no_model_answering_the_oldest_turns_are_named_as_left_out(booted):
    env = booted(SMALL)
    script(env, lambda r: [K("status"), K("ok"), K("provider"), "symbolic", K("text"), "I cannot"])
    talk(env, 24)
    summary = latest_summary(env.store, "test:t1")
    assert summary is not None, "no summary turn"
    assert proto_get(summary, K("left-out")) is True, summary
    text = proto_get(summary, K("text"))
    assert "are left out: no model was free to summarise them" in text, text
    first = proto_get(said_turns(env)[0], K("id"))
    assert f"#{first} to #" in text, (first, text)


def test_what_is_sent_to_be_summarised_and_kept_carries_no_secret(booted):
    env = booted(SMALL)
    key = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    calls = script(env, lambda r: [K("status"), K("ok"), K("provider"), "script",
                                   K("text"), f"the person's token is {key}"])
    run_task(env, user_says(f"my github token is {key}, keep it safe"))
    talk(env, 26)
    assert calls["compactions"], "no compaction was asked for"
    body = proto_get(calls["compactions"][0], K("messages"))[1]["content"]
    assert key not in body and "[redacted" in body, body
    text = proto_get(latest_summary(env.store, "test:t1"), K("text"))
    assert key not in text and "[redacted" in text, text


def test_the_compaction_role_is_a_provider_of_its_own(tmp_path):
    from openai_server import ScriptedOpenAIServer
    from passepartout.daemon import boot, shutdown
    server = ScriptedOpenAIServer()
    server.reply_text = "SUMMARISED BY THE COMPACTION MODEL"
    config = tmp_path / "config.toml"
    config.write_text(SMALL + 'compaction_model = "summariser"\n\n'
                      f'[[providers]]\nname = "summariser"\nmodel = "openai/summariser"\n'
                      f'api_base = "{server.url("ok")}"\napi_key_env = "PASSEPARTOUT_TEST_API_KEY"\n')
    env = boot(config_path=str(config),
               environ={"PASSEPARTOUT_DATA_DIR": str(tmp_path / "data"), "HOME": str(tmp_path),
                        "PASSEPARTOUT_TEST_API_KEY": "pp-test-key-7f3a9c2e51b84d06"})
    try:
        calls = script(env, lambda r: [K("status"), K("ok"), K("provider"), "script", K("text"), "NOT THIS"])
        talk(env, 26)
        summary = latest_summary(env.store, "test:t1")
        assert summary is not None, "no summary turn"
        assert proto_get(summary, K("text")) == "SUMMARISED BY THE COMPACTION MODEL", summary
        assert proto_get(summary, K("by")) == "summariser", summary
        assert not calls["compactions"], "the main models were not asked to summarise"
        asked = [r for r in server.requests if r["path"].endswith("/chat/completions")]
        assert asked and asked[0]["body"]["messages"][0]["content"] == COMPACTION_PROMPT, asked[:1]
    finally:
        shutdown(env)
        server.stop()
