"""Tests of hybrid recall (memory.hy): words at once, meaning once embedded, fused by rank."""
import asyncio

import hy  # noqa: F401
import pytest
from hy.models import Keyword

from openai_server import ScriptedOpenAIServer
from passepartout.memory import (memory_add, memory_recall, memory_search, embed_pending, embed_cached,
                                 prepare_recall, recall_summary, rrf, pending_memories, EMBED_BATCH)
from passepartout.proto import proto_get
from passepartout.store import store_open, store_path_for

MODEL = "openai/scripted-embed"
KEY = "PASSEPARTOUT_TEST_API_KEY"


def K(name):
    return Keyword(name)


def texts(hits):
    return [proto_get(h, K("text")) for h in hits]


@pytest.fixture(scope="module")
def server():
    s = ScriptedOpenAIServer()
    yield s
    s.stop()


@pytest.fixture
def store(tmp_path):
    s = store_open(store_path_for(tmp_path))
    yield s
    s.close()


def config_for(server, script="ok"):
    return {"memory": {"embedding_model": MODEL, "embedding_api_base": server.url(script),
                       "embedding_api_key_env": KEY}}


def settings_for(server, script="ok"):
    return (MODEL, server.url(script), KEY)


def embedding_requests(server, since):
    return [r for r in server.requests[since:] if r["path"].endswith("/embeddings")]


NOTES = ["Anna likes orchids and her birthday is in March.",
         "The boiler is serviced every October by Hamid.",
         "Backups of the photo library run every Sunday night."]


def test_offline_recall_is_by_words_and_says_so(store):
    for n in NOTES:
        memory_add(store, n)
    assert texts(memory_recall(store, "orchids")) == [NOTES[0]], "found by its words"
    assert memory_recall(store, "orchidz") == [], "a misspelling is not found by words"
    assert recall_summary(store, {}) == "by words (FTS5); no embedding model is configured", \
        recall_summary(store, {})


def test_a_note_is_found_by_words_at_once_and_by_meaning_once_embedded(store, server):
    for n in NOTES:
        memory_add(store, n)
    config = config_for(server)
    # written, not embedded: words find it, a misspelling does not
    assert texts(memory_recall(store, "orchids", model=MODEL)) == [NOTES[0]]
    assert "0 of 3 notes embedded" in recall_summary(store, config), recall_summary(store, config)
    asyncio.run(embed_pending(store, settings_for(server)))
    assert pending_memories(store, MODEL) == [], "every note has its vector"
    asyncio.run(embed_cached(store, settings_for(server), ["orchidz for Ana"]))
    got = texts(memory_recall(store, "orchidz for Ana", model=MODEL))
    assert got[0] == NOTES[0], got
    assert "3 of 3 notes embedded" in recall_summary(store, config), recall_summary(store, config)


def test_embedding_is_batched_and_cached_by_content(store, server):
    for i in range(EMBED_BATCH + 8):
        memory_add(store, f"note number {i} about the garden")
    memory_add(store, "note number 0 about the garden")  # the same text again: embedded once
    before = len(server.requests)
    asyncio.run(embed_pending(store, settings_for(server)))
    calls = embedding_requests(server, before)
    assert len(calls) == 2, [len(c["body"]["input"]) for c in calls]
    sent = [t for c in calls for t in c["body"]["input"]]
    assert len(sent) == len(set(sent)) == EMBED_BATCH + 8, len(sent)
    before = len(server.requests)
    asyncio.run(embed_cached(store, settings_for(server), ["note number 3 about the garden"]))
    assert embedding_requests(server, before) == [], "a text embedded before is not sent again"


def test_a_failing_embedding_server_leaves_recall_by_words(store, server):
    for n in NOTES:
        memory_add(store, n)

    async def go():
        await prepare_recall(store, config_for(server, "error500"), "when is the boiler serviced")
        await store.memo["embedding"]

    asyncio.run(go())
    assert pending_memories(store, MODEL) != [], "nothing was embedded"
    assert texts(memory_recall(store, "boiler", model=MODEL)) == [NOTES[1]], "words still find it"


def test_reciprocal_rank_fusion_rewards_agreement():
    def hit(i):
        return [K("id"), i, K("text"), f"t{i}", K("ts"), 0.0, K("score"), 1.0]
    fused = rrf([[hit(1), hit(2), hit(3)], [hit(3), hit(2), hit(4)]], 3)
    ids = [proto_get(h, K("id")) for h in fused]
    assert ids == [3, 2, 1], ids
    assert proto_get(fused[0], K("score")) == round(1 / 63 + 1 / 61, 6), fused


def test_the_prompt_gives_a_note_found_by_meaning(booted, server):
    from passepartout.context import context_for
    from passepartout.prompt import prompt_sections
    env = booted(f'[memory]\nembedding_model = "{MODEL}"\nembedding_api_base = "{server.url("ok")}"\n'
                 f'embedding_api_key_env = "{KEY}"\n')
    for n in NOTES:
        memory_add(env.store, n)
    question = "wann wird der Boilerservice gemacht"
    asyncio.run(prepare_recall(env.store, env.config, question))

    async def settle():
        await env.store.memo["embedding"]

    asyncio.run(settle())
    signal = [K("type"), K("event"), K("session"), "test:t1", K("source"), [K("gateway"), K("test")],
              K("payload"), [K("sensor"), K("user-input"), K("text"), question]]
    sections = prompt_sections(signal, context_for(env, "test:t1"))
    memories = next(proto_get(s, K("text")) for s in sections if proto_get(s, K("name")) == "memories")
    assert "boiler is serviced" in memories, memories
    assert memory_search(env.store, question) == [], "no word of the question is in the note"


def test_status_and_doctor_say_how_memory_is_recalled(booted, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path
    from steps import run_task, user_says, text_of
    env = booted()
    status = text_of(run_task(env, user_says("/status"))[-1])
    assert "Memory: recalled by words (FTS5); no embedding model is configured." in status, status
    config = tmp_path / "doctor.toml"
    config.write_text(f'[memory]\nembedding_model = "{MODEL}"\n')
    out = subprocess.run([str(Path(sys.executable).parent / "passepartout"), "--config", str(config), "doctor"],
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PASSEPARTOUT_DATA_DIR=str(tmp_path / "data"), HOME=str(tmp_path)))
    row = next(line for line in out.stdout.splitlines() if line.startswith("memory"))
    assert "by words (FTS5) and meaning (openai/scripted-embed, 0 of 0 notes embedded)" in row, out.stdout
