"""Tests of passepartout/prompt.hy: the prompt assembled from sections."""
import os
import subprocess
import sys
from pathlib import Path

import hy  # noqa: F401
from hy.models import Keyword

from passepartout.context import context_for, make_context
from passepartout.memory import memory_add
from passepartout.proto import proto_get
from passepartout.prompt import (prompt_sections, prompt_report, report_text, system_text,
                                 prompt_file, estimate_tokens, capped)
from passepartout.reason import build_request

BIN = Path(sys.executable).parent


def K(name):
    return Keyword(name)


def said(text, session="terminal:local"):
    return [K("type"), K("event"), K("session"), session, K("source"), [K("gateway"), K("terminal")],
            K("payload"), [K("sensor"), K("user-input"), K("text"), text]]


def names(sections):
    return [proto_get(s, K("name")) for s in sections]


def text_of(sections, name):
    return next(proto_get(s, K("text")) for s in sections if proto_get(s, K("name")) == name)


def test_a_prompt_is_made_of_named_sections_in_order(booted):
    env = booted()
    ctx = context_for(env, "terminal:local")
    sections = prompt_sections(said("hello"), ctx)
    got = names(sections)
    for want in ["base", "persona", "rules", "approvals", "spawning", "actions", "skills", "workspace"]:
        assert want in got, (want, got)
    assert got.index("base") < got.index("rules") < got.index("actions") < got.index("workspace"), got
    assert "memories" not in got, "no memory matches, so no memory section"
    assert "(:action :shell" in text_of(sections, "actions")
    assert "- memory-actions:" in text_of(sections, "skills")
    assert "- status:" not in text_of(sections, "skills"), "a skill of slash commands alone is left out"
    request = build_request(said("hello"), ctx)
    assert proto_get(request, K("messages"))[0]["content"] == system_text(sections)


def test_base_and_persona_are_files_a_person_edits_and_they_are_capped(booted, tmp_path):
    env = booted('[memory]\nfile_cap = 200\n')
    config = env.config
    base = prompt_file(config, "base")
    persona = prompt_file(config, "persona")
    assert base.exists() and persona.exists(), (base, persona)
    assert "Passepartout" in base.read_text(), "the default base prompt is written"
    persona.write_text("Speak like a ship's captain. " * 40)
    sections = prompt_sections(said("hello"), context_for(env, "terminal:local"))
    text = text_of(sections, "persona")
    assert text.startswith("Speak like a ship's captain."), text
    assert "[cut: the file holds 1159 characters; the first 200 are used]" in text, text
    assert len(text) < 300, len(text)
    assert capped("short", 10) == "short", "a short text is kept whole"


def test_the_prompt_files_are_protected_from_the_model(booted):
    env = booted()
    ctx = context_for(env, "terminal:local")
    prompt_dir = os.path.realpath(os.path.join(env.config["data_dir"], "prompt"))
    assert prompt_dir in proto_get(ctx, K("protected")), proto_get(ctx, K("protected"))


def test_a_read_only_worker_is_told_nothing_of_approvals_or_spawning(booted):
    env = booted()
    full = names(prompt_sections(said("look"), context_for(env, "terminal:local")))
    assert "approvals" in full and "spawning" in full, full
    ctx = make_context(workspace=str(env.config["workspace"]), session="worker:1", config=env.config,
                       store=env.store, skills=env.skills,
                       workers=[K("id"), "w1", K("depth"), 1, K("tools"), ["read-file", "memory-search"],
                                K("known"), []])
    got = names(prompt_sections(said("look"), ctx))
    assert "approvals" not in got and "spawning" not in got, got
    assert "actions" in got and "base" in got, got
    writer = make_context(workspace=str(env.config["workspace"]), session="worker:2", config=env.config,
                          store=env.store, skills=env.skills,
                          workers=[K("id"), "w2", K("depth"), 1, K("tools"), ["write-file"], K("known"), []])
    got = names(prompt_sections(said("write"), writer))
    assert "approvals" in got and "spawning" not in got, got


def test_memories_that_bear_on_the_message_enter_the_prompt_without_their_secrets(booted):
    env = booted()
    memory_add(env.store, "Anna's birthday is on the 3rd of March; she likes orchids.")
    memory_add(env.store, "Boiler service: every October, by Hamid.")
    memory_add(env.store, "The orchid shop's API token is ghp_16C7e42F292c6912E7710c838347Ae178B4a")
    sections = prompt_sections(said("what flowers does Anna like? orchids? is the orchid shop open?"), context_for(env, "terminal:local"))
    text = text_of(sections, "memories")
    assert "Anna's birthday" in text, text
    assert "boiler" not in text, "a note that shares no word is not given"
    assert "ghp_16C7e42F292c6912E7710c838347Ae178B4a" not in text, text
    assert "[redacted:" in text, text


def test_the_report_counts_every_section_and_says_how(booted):
    env = booted()
    ctx = context_for(env, "terminal:local")
    history = [{"role": "user", "content": "x" * 400}, {"role": "assistant", "content": "y" * 40}]
    report = prompt_report(said("hello there"), ctx, history)
    sections = proto_get(report, K("sections"))
    assert proto_get(report, K("history-tokens")) == 110, report
    total = sum(proto_get(s, K("tokens")) for s in sections) + 110 + estimate_tokens("hello there")
    assert proto_get(report, K("total")) == total, report
    assert "an estimate" in proto_get(report, K("counted-by")), report
    lines = report_text(report, full=False)
    assert "── base (" in lines and "── history (2 messages, 110 tokens)" in lines, lines
    assert "counted by an estimate" in lines, lines


def test_passepartout_prompt_shows_the_sections(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("")
    env = dict(os.environ, PASSEPARTOUT_DATA_DIR=str(tmp_path / "data"),
               PASSEPARTOUT_CONFIG=str(config), HOME=str(tmp_path), PYTHONDONTWRITEBYTECODE="")
    env.pop("PASSEPARTOUT_MODELS", None)
    out = subprocess.run([str(BIN / "passepartout"), "prompt", "--brief", "what", "is", "up"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "── base (" in out.stdout and "── actions (" in out.stdout, out.stdout
    assert "counted by an estimate" in out.stdout, out.stdout
    out = subprocess.run([str(BIN / "passepartout"), "prompt", "hi"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert "You are Passepartout" in out.stdout, out.stdout


def test_slash_prompt_answers_with_the_sections_and_no_model_is_asked(booted):
    from passepartout.records import events
    from steps import run_task, user_says, text_of
    env = booted()
    run_task(env, user_says("/remember the plumber is Hamid"))
    reply = text_of(run_task(env, user_says("/prompt who is the plumber?"))[-1])
    assert "── base (" in reply and "── memories (" in reply, reply
    assert "counted by an estimate" in reply, reply
    assert not events(env.store, kind="outcome", limit=None), "no model was asked"


def test_the_agenda_section_holds_the_open_items_in_brief(booted):
    from passepartout.agenda import agenda_add, agenda_change
    env = booted()
    ctx = context_for(env, "terminal:local")
    assert "agenda" not in names(prompt_sections(said("hello"), ctx)), "an empty agenda makes no section"
    item = agenda_add(env.store, "call the plumber", "person", "local", "terminal:local")
    sections = prompt_sections(said("hello"), ctx)
    assert text_of(sections, "agenda").startswith("Open agenda items:\n"), sections
    assert "call the plumber" in text_of(sections, "agenda"), sections
    assert names(sections).count("agenda") == 1, f"the agenda is in the prompt once: {names(sections)}"
    agenda_change(env.store, proto_get(item, K("id")), "drop", "person", "local", "terminal:local",
                  reason="the plumber came")
    assert "agenda" not in names(prompt_sections(said("hello"), ctx)), "a dropped item left the prompt"

