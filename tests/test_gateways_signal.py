"""The Signal gateway against a signal-cli-rest-api server on loopback, with the daemon's hub."""
import asyncio
import contextlib
import logging
import re

import pytest
from hy.models import Keyword
from hypothesis import given, settings, strategies as st

from passepartout.config import ConfigError
from passepartout.gateways.hub import Hub, Undeliverable, configured_gateways, find_gateway
from passepartout.proto import proto_get, proto_read
from signal_server import SignalServer, free_port

import passepartout.gateways.signal as sig

ACCOUNT = "+15550001111"
ALICE = "+15550002222"
BOB_UUID = "6a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
STRANGER = "+15559998888"


def kw(name):
    return Keyword(name)


def text_of(signal):
    return proto_get(proto_get(signal, kw("payload")), kw("text"))


def source_of(signal):
    return proto_get(signal, kw("source"))


@pytest.fixture
def env(booted):
    """A booted daemon whose model answers every message with "echo: " and its text, at once."""
    e = booted()
    e.complete = lambda request: [kw("status"), kw("ok"), kw("provider"), "script", kw("text"),
                                     "echo: " + text_of(proto_get(request, kw("signal")))]
    return e


@pytest.fixture
def server():
    s = SignalServer(account=ACCOUNT)
    yield s
    s.stop()


def section(url, **more):
    return {"url": url, "number": ACCOUNT, "allowed_numbers": [ALICE, BOB_UUID],
            "poll_interval": 0.01, "retry_delay": 0.01, **more}


@contextlib.asynccontextmanager
async def daemon(env, url, hub_class=Hub, **more):
    """The gateway on URL and the daemon's hub, running for the body of the block."""
    gw = sig.make_signal(section(url, **more), env)
    hub = hub_class(env, [gw])
    task = asyncio.create_task(gw["run"](hub))
    try:
        yield hub
    finally:
        await gw["stop"]()
        await asyncio.wait_for(task, 5)
        await hub.drain(5)
        await hub.close()


async def until(predicate, timeout=30.0):
    """Wait (without blocking the loop) until PREDICATE() is true; its value."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if value or asyncio.get_running_loop().time() > deadline:
            return value
        await asyncio.sleep(0.01)


def inbox(env):
    """The Signal rows of the store's inbox, oldest first, as (key, signal, state)."""
    return [(k, proto_read(s), state) for k, s, state in env.store.query(
        "SELECT key, signal, state FROM inbox WHERE gateway = 'signal' ORDER BY id")]


def sent_texts(server):
    return [s["message"] for s in server.sent]


def reply(chat, text, kind="answer", **payload):
    p = [kw("kind"), kw(kind), kw("text"), text]
    for k, v in payload.items():
        p += [kw(k), v]
    return [kw("type"), kw("reply"), kw("session"), f"signal:{chat}",
            kw("source"), [kw("gateway"), kw("signal"), kw("chat"), chat, kw("user"), chat],
            kw("payload"), p]


# * Settings and registration

def test_a_server_off_this_machine_is_refused_unless_allowed():
    for url in ["http://192.168.1.5:8080", "http://signal.example.org", "https://10.0.0.1"]:
        with pytest.raises(ConfigError) as e:
            sig.make_signal(section(url), {})
        assert "allow_remote" in str(e.value) and "no authentication" in str(e.value), e.value
    gw = sig.make_signal(section("http://192.168.1.5:8080", allow_remote=True), {})
    assert set(gw) >= {"name", "run", "deliver", "stop"} and gw["name"] == "signal"
    assert sig.check_server_url("http://localhost:8080/") == "http://localhost:8080"
    assert sig.check_server_url("http://[::1]:9") == "http://[::1]:9"
    assert sig.check_server_url("http://127.8.0.1/api/") == "http://127.8.0.1/api"
    for url in ["ftp://127.0.0.1/", "127.0.0.1:8080", "http://127.0.0.1:99999", 8080]:
        with pytest.raises(ConfigError):
            sig.check_server_url(url)


def test_settings_name_what_is_wrong():
    base = section("http://127.0.0.1:8080")
    cases = [({"number": "015550001111"}, "number"),
             ({"number": None}, "number"),
             ({"allowed_numbers": ["+15550002222", "alice"]}, "'alice'"),
             ({"allowed_numbers": "+15550002222"}, "allowed_numbers"),
             ({"poll_interval": "1"}, "poll_interval"),
             ({"receive_timeout": 0}, "receive_timeout"),
             ({"allow_remote": "yes"}, "allow_remote")]
    for change, needle in cases:
        with pytest.raises(ConfigError) as e:
            sig.signal_settings({**base, **change})
        assert needle in str(e.value), (change, str(e.value))
    s = sig.signal_settings({**base, "allowed_numbers": ["+1 (555) 000-2222", BOB_UUID.upper()]})
    assert s["allowed"] == frozenset([ALICE, BOB_UUID]), s["allowed"]


def test_the_daemon_builds_the_gateway_from_its_config_section(env):
    found = find_gateway(env, "signal")
    assert found and found["headless"] and found["factory"] is sig.make_signal, found
    env.config["gateways"] = {"signal": section("http://127.0.0.1:8080")}
    built = configured_gateways(env)
    assert [g["name"] for g in built] == ["signal"], built
    env.config["gateways"] = {"signal": section("http://192.0.2.7:8080")}
    with pytest.raises(ConfigError):
        configured_gateways(env)


# * Receiving

def test_a_message_is_persisted_as_a_signal_from_its_chat_and_answered(env, server):
    item = server.message(ALICE, "hello there", name="Alice")
    server.queue(item)

    async def go():
        async with daemon(env, server.url):
            await until(lambda: server.sent)
    asyncio.run(go())
    ts = item["envelope"]["timestamp"]
    [(key, signal, state)] = inbox(env)
    assert key == f"{ALICE}:{ts}" and state == "done", (key, state)
    assert proto_get(signal, kw("type")) == kw("event")
    assert source_of(signal) == [kw("gateway"), kw("signal"), kw("chat"), ALICE, kw("user"), ALICE,
                                 kw("message"), ts, kw("name"), "Alice"], source_of(signal)
    assert proto_get(signal, kw("payload")) == [kw("sensor"), kw("user-input"), kw("text"), "hello there"]
    assert server.sent == [{"message": "echo: hello there", "number": ACCOUNT, "recipients": [ALICE]}], \
        server.sent
    assert server.queued() == [], "normal mode removes what it returns"
    receive = [r for r in server.requests if r["path"] == "/v1/receive/%2B15550001111"]
    assert receive and receive[0]["query"]["ignore_attachments"] == ["true"], receive[:1]
    assert receive[0]["query"]["timeout"] == ["1"], receive[0]["query"]
    assert server.paths()[0] == "/v1/about", "the server's mode is checked before polling"


def test_a_sender_known_only_by_uuid_is_answered_by_uuid(env, server):
    server.queue(server.message(None, "no number shown", uuid=BOB_UUID))

    async def go():
        async with daemon(env, server.url):
            await until(lambda: server.sent)
    asyncio.run(go())
    [(key, signal, _)] = inbox(env)
    assert proto_get(source_of(signal), kw("chat")) == BOB_UUID, signal
    assert server.sent == [{"message": "echo: no number shown", "number": ACCOUNT,
                            "recipients": [BOB_UUID]}], server.sent


def test_commands_are_just_text_that_reaches_perceive(env, server):
    server.queue(server.message(ALICE, "/approve K3XQ7P"))

    async def go():
        async with daemon(env, server.url):
            await until(lambda: server.sent)
            server.queue(server.message(ALICE, "/stop"))
            await until(lambda: len(server.sent) >= 2)
    asyncio.run(go())
    assert [text_of(s) for _, s, _ in inbox(env)] == ["/approve K3XQ7P", "/stop"], inbox(env)
    assert all(s["recipients"] == [ALICE] for s in server.sent), server.sent
    texts = sent_texts(server)
    assert "K3XQ7P" in texts[0] and texts[1] == "Stopped: nothing was running.", texts


def test_strangers_get_one_refusal_and_one_log_line_even_across_a_restart(env, server, caplog):
    caplog.set_level(logging.INFO, logger="passepartout.gateways.signal")
    server.queue(server.message(STRANGER, "let me in"), server.message(STRANGER, "please"),
                 server.message(ALICE, "after the stranger"))

    async def go():
        async with daemon(env, server.url):
            await until(lambda: len(server.sent) >= 2)
        server.queue(server.message(STRANGER, "I'm back"), server.message(ALICE, "again"))
        async with daemon(env, server.url):
            await until(lambda: len(server.sent) >= 3)
    asyncio.run(go())
    to_stranger = [s for s in server.sent if s["recipients"] == [STRANGER]]
    assert [s["message"] for s in to_stranger] == [sig.STRANGER_TEXT], server.sent
    assert sorted(sent_texts(server)) == sorted([sig.STRANGER_TEXT, "echo: after the stranger", "echo: again"])
    refusals = [r.getMessage() for r in caplog.records if STRANGER in r.getMessage() and "refused a" in r.getMessage()]
    assert len(refusals) == 1 and "allowed_numbers" in refusals[0], refusals
    rows = inbox(env)
    assert [(k, st) for k, _, st in rows if STRANGER in k] == [(f"stranger:{STRANGER}", "done")], rows
    assert all("let me in" not in repr(s) for _, s, _ in rows), "a stranger's words are never stored"


class WatchingHub(Hub):
    """The daemon's hub, noting at each receive how many messages the server had
    sent, and how many rows it was given."""

    server = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.watched = []

    async def receive(self, gateway, key, signal):
        self.watched.append((len(self.server.sent), 1))
        return await super().receive(gateway, key, signal)

    async def receive_batch(self, gateway, items):
        self.watched.append((len(self.server.sent), len(items)))
        return await super().receive_batch(gateway, items)


def test_attachments_groups_and_huge_messages_are_refused_with_a_reply(env, server):
    attachment = [{"contentType": "image/jpeg", "filename": "cat.jpg", "id": "a1", "size": 5000}]
    server.queue(server.message(ALICE, "what is this?", attachments=attachment),
                 server.message(ALICE, "hi all", group="Z3JvdXA="),
                 server.message(ALICE, "anyone?", group="Z3JvdXA="),
                 server.message(ALICE, "x" * 20001),
                 server.message(ALICE, "plain text"))
    WatchingHub.server = server

    async def go():
        async with daemon(env, server.url, hub_class=WatchingHub, max_input_chars=20000) as hub:
            await until(lambda: len(server.sent) >= 4)
        return hub
    hub = asyncio.run(go())
    assert hub.watched == [(0, 5)], \
        ("the batch's message and its refusals' records are stored together, before any refusal is sent",
         hub.watched)
    rows = inbox(env)
    assert [text_of(s) for _, s, _ in rows if proto_get(s, kw("payload"))] == ["plain text"], rows
    assert len(rows) == 4 and f"group:Z3JvdXA=:{ALICE}" in [k for k, _, _ in rows], \
        "each refusal is recorded, so a redelivery (or the group's next line) is not refused again"
    texts = sent_texts(server)
    assert len(texts) == 4 and all(s["recipients"] == [ALICE] for s in server.sent), server.sent
    refusals = [t for t in texts if t != "echo: plain text"]
    assert "attachments" in refusals[0] and "not read" in refusals[0], refusals[0]
    assert "direct messages" in refusals[1], refusals[1]
    assert "20001 characters" in refusals[2] and "20000" in refusals[2], refusals[2]
    assert all(st == "done" for _, _, st in inbox(env)), inbox(env)


def test_receipts_typing_reactions_and_odd_items_are_ignored(env, server, caplog):
    caplog.set_level(logging.DEBUG, logger="passepartout.gateways.signal")
    server.queue(server.receipt(ALICE), server.typing(ALICE),
                 server.message(ALICE, None, reaction={"emoji": "👍", "targetSentTimestamp": 1}),
                 {"account": ACCOUNT}, "not an object", {"envelope": {"timestamp": 3}},
                 {"envelope": {"source": ALICE, "dataMessage": {"message": "no timestamp"}}},
                 server.message(ALICE, "real"))

    async def go():
        async with daemon(env, server.url):
            await until(lambda: server.sent)
    asyncio.run(go())
    assert sent_texts(server) == ["echo: real"], "nobody waits for an answer to a receipt"
    assert [text_of(s) for _, s, _ in inbox(env)] == ["real"], inbox(env)
    logged = " | ".join(r.getMessage() for r in caplog.records)
    for needle in ["a receipt", "a typing notice", "reaction", "without an envelope", "without a sender",
                   "without a timestamp"]:
        assert needle in logged, (needle, logged)


# * Sending

def test_replies_are_sent_split_and_filtered_by_kind(server):
    long = "\n\n".join(f"paragraph {i} " + "word " * 150 for i in range(6))

    async def go():
        gw = sig.make_signal(section(server.url), {})
        return [await gw["deliver"](reply(ALICE, "the answer")),
                await gw["deliver"](reply(ALICE, "ran (:action :shell) → ok", "trace")),
                await gw["deliver"](reply(ALICE, "Run rm -rf build?", "approval",
                                          approval=[kw("code"), "K3XQ7P", kw("token"), "secret-token"])),
                await gw["deliver"](reply(ALICE, long)),
                await gw["deliver"](reply(STRANGER, "leak")),
                await gw["deliver"](reply(ALICE, "   "))]
    results = asyncio.run(go())
    assert results == [True, False, True, True, False, True], results
    texts = sent_texts(server)
    assert texts[0] == "the answer"
    assert "/approve K3XQ7P" in texts[1] and "/deny K3XQ7P" in texts[1], texts[1]
    assert "secret-token" not in " ".join(texts)
    parts = texts[2:-1]
    assert len(parts) > 1 and all(len(p.encode()) <= sig.MESSAGE_BYTES for p in parts), [len(p) for p in parts]
    assert " ".join(" ".join(parts).split()) == " ".join(long.split()), "parts keep the whole text, in order"
    assert all(p.startswith("paragraph") for p in parts), "cuts fall on paragraph breaks"
    assert texts[-1] == "(the answer was empty)"
    assert all(s["recipients"] == [ALICE] and s["number"] == ACCOUNT for s in server.sent)


OBEYED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def test_a_reply_goes_out_with_control_sequences_shown_not_obeyed(server):
    hostile = ("copied\x1b]52;c;UFdORUQ=\x07 \x1b[2J\x1b[H✓ Approved "
               "\x1b]8;;http://evil.example\x1b\\here\x1b]8;;\x1b\\ \u202eevil\u202c \ud800 end")

    async def go():
        gw = sig.make_signal(section(server.url), {})
        return [await gw["deliver"](reply(ALICE, hostile)),
                await gw["deliver"](reply(ALICE, "Run it? \u2066x\u2069", "approval",
                                          approval=[kw("code"), "K3XQ7P"]))]
    assert asyncio.run(go()) == [True, True]
    shown, asked = sent_texts(server)
    assert not OBEYED.search(shown) and not OBEYED.search(asked), (shown, asked)
    for visible in ["\\x1b]52;c;UFdORUQ=\\x07", "\\x1b[2J", "http://evil.example", "\\u202eevil", "\\ud800 end"]:
        assert visible in shown, (visible, shown)
    assert "\\u2066x\\u2069" in asked and "/approve K3XQ7P" in asked, asked


def test_a_message_that_is_not_valid_text_is_refused_saying_why(env, server):
    asked = []
    answer = env.complete

    def complete(request):
        asked.append(proto_get(request, kw("signal")))
        return answer(request)

    env.complete = complete
    server.queue(server.message(ALICE, "hi \ud800 there"))
    server.queue(server.message(ALICE, "next", name="Al\udcffice"))

    async def go():
        async with daemon(env, server.url):
            await until(lambda: len(server.sent) >= 2)
    asyncio.run(go())
    refused, answered = sent_texts(server)
    assert refused.startswith("Your message was not read: it is not valid text "
                              "(a lone surrogate (\\ud800) at character 4)"), refused
    assert answered == "echo: next", answered
    # the model saw only the valid message; the odd name that came with it, escaped
    assert [text_of(s) for s in asked] == ["next"], asked
    assert proto_get(source_of(asked[0]), kw("name")) == "Al\\udcffice", source_of(asked[0])
    assert [state for _, _, state in inbox(env)] == ["done", "done"], inbox(env)


def test_traces_are_sent_when_the_config_asks(server):
    async def go():
        gw = sig.make_signal(section(server.url, show_traces=True), {})
        return await gw["deliver"](reply(ALICE, "ran (:action :shell) → ok", "trace"))
    assert asyncio.run(go()) is True
    assert sent_texts(server) == ["· ran (:action :shell) → ok"], server.sent


def test_a_send_retries_server_errors_and_gives_a_bad_request_up_at_once(server):
    async def go():
        gw = sig.make_signal(section(server.url), {})
        server.fail("send", "500", 2)
        server.fail("send", "drop", 1)
        ok = await gw["deliver"](reply(ALICE, "after three failures"))
        n_before = len(server.paths("send"))
        server.fail("send", "400", 1)
        with pytest.raises(Undeliverable) as refused:
            await gw["deliver"](reply(ALICE, "refused by the server"))
        return ok, refused.value, len(server.paths("send")) - n_before
    ok, refused, attempts = asyncio.run(go())
    assert ok is True and sent_texts(server) == ["after three failures"], server.sent
    assert attempts == 1, f"a 400 was tried {attempts} times"
    assert "scripted 400" in str(refused), refused


def test_a_reply_to_a_server_that_stays_down_is_left_to_the_hub_to_keep():
    async def go():
        gw = sig.make_signal(section(f"http://127.0.0.1:{free_port()}"), {})
        with pytest.raises(sig.SignalUnreachable) as e:
            await gw["deliver"](reply(ALICE, "nobody listens"))
        return e.value
    e = asyncio.run(go())
    assert isinstance(e, ConnectionError) and f"{sig.SEND_ATTEMPTS} tries" in str(e), e


def test_a_long_reply_tried_again_does_not_send_its_first_parts_twice(server):
    """The server takes the first part of a long reply and fails the second
    more often than the gateway tries: the reply is left to the hub, and when
    it is delivered again only the parts not yet sent go out."""
    long = "\n\n".join(f"paragraph {i} " + "word " * 300 for i in range(6))

    async def go():
        gw = sig.make_signal(section(server.url), {})
        server.fail("send", "500", sig.SEND_ATTEMPTS, after=1)
        with pytest.raises(sig.SignalUnreachable):
            await gw["deliver"](reply(ALICE, long))
        return await gw["deliver"](reply(ALICE, long))
    assert asyncio.run(go()) is True
    parts = sig.split_text(long)
    assert len(parts) >= 3, len(parts)
    assert sent_texts(server) == parts, [t[:20] for t in sent_texts(server)]


def test_replies_sent_while_the_server_fails_longer_than_its_tries_are_kept_and_sent_later(env, server):
    """The server answers 500 to more sends than the gateway tries: the hub
    keeps the replies and sends them, in order, once the server takes them."""
    failing = 2 * sig.SEND_ATTEMPTS
    server.fail("send", "500", failing)
    for text in ["one", "two", "three"]:
        server.queue(server.message(ALICE, text))

    async def go():
        async with daemon(env, server.url) as hub:
            service = asyncio.create_task(hub.outbox_service(every=0.05))
            await until(lambda: len(server.sent) == 3, 30)
            # the last one is marked sent just after the server has it
            await until(lambda: not env.store.query("SELECT 1 FROM outbox WHERE state = 'pending'"), 10)
            service.cancel()
            return env.store.query("SELECT state, count(*) FROM outbox GROUP BY state")
    outbox = asyncio.run(go())
    assert sent_texts(server) == ["echo: one", "echo: two", "echo: three"], server.sent
    assert len(server.paths("send")) >= failing + 3, "the scripted failures were not all met"
    assert outbox == [("sent", 3)], outbox


def test_a_server_that_stops_answering_shows_as_degraded_until_it_answers_again(env, server):
    from passepartout.daemon import degraded, gateway_states
    gw = sig.make_signal(section(server.url), env)

    def down():
        return degraded(gateway_states([gw], {"signal": "running"}))

    async def go():
        hub = Hub(env, [gw])
        task = asyncio.create_task(gw["run"](hub))
        try:
            assert await until(lambda: gw["state"]() == "polling"), gw["state"]()
            assert down() == []
            server.outage("receive", "500", 1.0)
            assert await until(down, 30) == ["signal"], gw["state"]()
            said = gw["state"]()
            assert await until(lambda: not down(), 30), gw["state"]()
            return said
        finally:
            await gw["stop"]()
            await asyncio.wait_for(task, 5)
            await hub.close()

    said = asyncio.run(go())
    assert said.startswith("the server does not answer") and "500" in said, said


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab é€😀\n"), max_size=3000),
       st.integers(min_value=8, max_value=400))
def test_split_text_keeps_every_word_within_the_limit(text, limit):
    parts = sig.split_text(text, limit, 10_000)
    assert all(p and len(p.encode()) <= limit for p in parts), parts
    assert "".join("".join(parts).split()) == "".join(text.split())


def test_split_text_says_what_it_left_out():
    parts = sig.split_text("word " * 10_000, 100, 3)
    assert len(parts) == 3 and "was not sent" in parts[-1], parts
    assert sig.split_text("", 100) == [] and sig.split_text("short", 100) == ["short"]


# * A server that misbehaves

def test_server_errors_and_malformed_answers_are_survived(env, server, caplog):
    caplog.set_level(logging.INFO, logger="passepartout.gateways.signal")
    server.fail("about", "garbage", 1)
    for kind in ["500", "garbage", "drop", "object", "400", "500"]:
        server.fail("receive", kind, 1)
    server.queue(server.message(ALICE, "still here"))

    async def go():
        async with daemon(env, server.url):
            await until(lambda: server.sent)
    asyncio.run(go())
    assert sent_texts(server) == ["echo: still here"], server.sent
    assert len(server.paths("receive")) >= 7, server.paths("receive")
    logged = " | ".join(r.getMessage() for r in caplog.records)
    assert "not JSON" in logged and "instead of a list" in logged and "answers again" in logged, logged


def test_a_server_down_at_start_is_waited_for(env, caplog):
    caplog.set_level(logging.DEBUG, logger="passepartout.gateways.signal")
    port = free_port()
    holder = {}

    async def go():
        async with daemon(env, f"http://127.0.0.1:{port}", retry_delay=0.005):
            await until(lambda: sum("failed" in r.getMessage() for r in caplog.records) >= 4)
            server = holder["server"] = SignalServer(account=ACCOUNT, port=port)
            server.queue(server.message(ALICE, "you are up"))
            await until(lambda: server.sent)
    try:
        asyncio.run(go())
    finally:
        if "server" in holder:
            holder["server"].stop()
    assert sent_texts(holder["server"]) == ["echo: you are up"], holder["server"].sent
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "failed" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_a_server_in_json_rpc_mode_is_not_polled(env, caplog):
    server = SignalServer(account=ACCOUNT, mode="json-rpc")
    try:
        async def go():
            async with daemon(env, server.url):
                await until(lambda: server.paths("about"))
                # the refusal is logged once the gateway has read the mode, instead of a poll
                await until(lambda: any(r.levelno == logging.ERROR and "json-rpc" in r.getMessage()
                                        for r in caplog.records))
        asyncio.run(go())
        assert server.paths("receive") == [], server.paths()
        errors = [r.getMessage() for r in caplog.records
                  if r.levelno == logging.ERROR and r.name == "passepartout.gateways.signal"]
        assert len(errors) == 1 and "json-rpc" in errors[0] and "native" in errors[0], errors
    finally:
        server.stop()


# * Persistence

def test_a_redelivered_message_is_answered_once_even_after_a_restart(env, server, caplog):
    caplog.set_level(logging.INFO, logger="passepartout.gateways.signal")
    item = server.message(ALICE, "only once", timestamp=1_700_000_123_456)
    server.queue(item, item)

    async def go():
        async with daemon(env, server.url):
            await until(lambda: server.sent and not server.queued())
            await asyncio.sleep(0.05)
        server.queue(item, later)
        async with daemon(env, server.url):
            await until(lambda: len(server.sent) >= 2)
    later = server.message(ALICE, "and this")
    asyncio.run(go())
    assert sent_texts(server) == ["echo: only once", "echo: and this"], server.sent
    assert [k for k, _, _ in inbox(env)] == [f"{ALICE}:1700000123456",
                                             f"{ALICE}:{later['envelope']['timestamp']}"], inbox(env)
    assert sum("delivered again" in r.getMessage() for r in caplog.records) == 2


def test_a_refusal_is_not_repeated_for_a_redelivered_message(env, server):
    item = server.message(ALICE, "see this", attachments=[{"contentType": "image/png", "id": "x"}])
    server.queue(item, item, server.message(ALICE, "next"))

    async def go():
        async with daemon(env, server.url):
            await until(lambda: len(server.sent) >= 2)
        server.queue(item, server.message(ALICE, "last"))
        async with daemon(env, server.url):
            await until(lambda: len(server.sent) >= 3)
    asyncio.run(go())
    refusals = [t for t in sent_texts(server) if "attachments" in t]
    assert len(refusals) == 1 and len(server.sent) == 3, server.sent


class FailingHub(Hub):
    """The daemon's hub over a store that fails the first FAILURES writes
    (a batch or a single message); `calls` counts both, `batches` the batches."""

    failures = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = self.batches = 0

    def _fail(self):
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError("disk I/O error")

    async def receive(self, gateway, key, signal):
        self._fail()
        return await super().receive(gateway, key, signal)

    async def receive_batch(self, gateway, items):
        self.batches += 1
        self._fail()
        return await super().receive_batch(gateway, items)


def test_a_store_that_fails_is_retried_then_the_person_is_told(env, server):
    async def go():
        FailingHub.failures = 2
        server.queue(server.message(ALICE, "saved at the third try"))
        async with daemon(env, server.url, hub_class=FailingHub) as flaky:
            await until(lambda: server.sent)
        FailingHub.failures = 10_000
        server.queue(server.message(ALICE, "never saved"))
        async with daemon(env, server.url, hub_class=FailingHub) as broken:
            await until(lambda: len(server.sent) >= 2)
        return flaky, broken
    flaky, broken = asyncio.run(go())
    assert flaky.batches == 1 and flaky.calls == 3, \
        ("a batch the store would not take is stored one message at a time, each retried",
         flaky.batches, flaky.calls)
    assert broken.calls == 1 + sig.PERSIST_ATTEMPTS, (broken.calls, sig.PERSIST_ATTEMPTS)
    texts = sent_texts(server)
    assert texts[0] == "echo: saved at the third try" and "send it again" in texts[1], texts
    assert [text_of(s) for _, s, _ in inbox(env)] == ["saved at the third try"], inbox(env)


def test_stop_ends_run_after_persisting_the_batch_in_hand(env, server):
    server.max_wait = 2.0

    async def go():
        gw = sig.make_signal(section(server.url, poll_interval=30), env)
        hub = Hub(env, [gw])
        task = asyncio.create_task(gw["run"](hub))
        await until(lambda: server.paths("receive"))
        await gw["stop"]()
        server.queue(*[server.message(ALICE, f"m{i}") for i in range(5)])
        await asyncio.wait_for(task, 5)
        persisted = [text_of(s) for _, s, _ in inbox(env)]
        await hub.drain(5)
        await hub.close()
        return persisted
    persisted = asyncio.run(go())
    assert persisted == [f"m{i}" for i in range(5)], persisted
    assert len(server.paths("receive")) == 1 and server.queued() == []
    assert sorted(sent_texts(server)) == [f"echo: m{i}" for i in range(5)], server.sent


def test_a_batch_is_all_in_the_inbox_before_its_first_message_is_handled(env, server):
    """The server deletes what it returns: the whole batch is stored before any
    of it is handled, so the first model call already sees every message pending."""
    import threading
    first_call, lock = [], threading.Lock()

    def complete(request):
        # two chats' steps call at once: only the first records what it saw
        with lock:
            if not first_call:
                first_call.append((env.store.query(
                    "SELECT count(*) FROM inbox WHERE gateway = 'signal' AND state = 'pending'")[0][0],
                    len(server.sent)))
        return [kw("status"), kw("ok"), kw("provider"), "script", kw("text"),
                "echo: " + text_of(proto_get(request, kw("signal")))]

    env.complete = complete
    texts = [f"batch message {i}" for i in range(20)]
    server.queue(*[server.message(ALICE, t) if i % 2 else server.message(None, t, uuid=BOB_UUID)
                   for i, t in enumerate(texts)])

    async def go():
        async with daemon(env, server.url):
            await until(lambda: len(server.sent) >= len(texts), 10)
    asyncio.run(go())
    assert first_call == [(len(texts), 0)], \
        ("(pending rows, replies sent) at the first model call", first_call)
    assert sorted(sent_texts(server)) == sorted("echo: " + t for t in texts), server.sent
    assert len(server.paths("receive")) >= 1 and len(server.returned) == 1, \
        ("the 20 messages came in one receive", len(server.returned))


def test_a_daemon_killed_right_after_a_receive_loses_nothing():
    """The daemon as a process, killed (-9) as soon as a receive that returned
    100 messages (which the server then no longer holds) is committed, before
    it has answered them, and started again: each is answered. How long
    the batch exists only in memory is a figure (tests/signal_faults.py)."""
    from signal_faults import run_killed
    r = run_killed(messages=100)
    assert r["in_first_batch"] == 100, ("one receive returned them all", r["in_first_batch"])
    assert r["lost"] == 0, (r["lost"], r["output"][-3000:])
    assert r["exit"] == 0, ("exit status after SIGTERM", r["exit"], r["output"][-3000:])
