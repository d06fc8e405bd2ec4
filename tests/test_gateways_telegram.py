"""Tests of passepartout/gateways/telegram.hy: the real python-telegram-bot client
against a Bot API server on loopback (tests/bot_api_server.py), inside the
daemon's serve."""
import asyncio
import logging
import re
import time

import hy  # noqa: F401
import pytest
from hy.models import Keyword

from bot_api_server import BotAPIServer, TelegramSetup, echo_complete, judge, run_in_process
from passepartout.gateways.telegram import approval_buttons, button_command, split_text
from passepartout.proto import proto_get
from passepartout.skills import make_skill, register_skill

K = Keyword
ALICE, BOB, EVE = 5001, 5002, 6666


@pytest.fixture
def tg(tmp_path):
    setup = TelegramSetup(tmp_path, users=(ALICE, BOB))
    try:
        yield setup
    finally:
        setup.close()


def text_of(signal):
    return proto_get(proto_get(signal, K("payload")), K("text"))


def reply(signal, text, kind="answer", **payload):
    extra = []
    for k, v in payload.items():
        extra += [K(k), v]
    return [K("type"), K("reply"), K("session"), proto_get(signal, K("session")),
            K("source"), proto_get(signal, K("source")),
            K("payload"), [K("kind"), K(kind), K("text"), text] + extra]


def handler_skill(services, name, answers):
    """A skill of SERVICES whose pre-reason handler answers the texts in ANSWERS
    (text -> fn(signal) -> replies)."""
    seen = []

    def handle(signal, ctx):
        text = text_of(signal)
        for prefix, answer in answers.items():
            if text.startswith(prefix):
                seen.append(text)
                return answer(signal)
        return None

    register_skill(services.skills, make_skill(name, priority=1000, handlers=[handle]))
    return seen


# * Pieces

def test_split_text_keeps_every_character_and_respects_the_limit():
    text = ("word " * 3000) + "\n" + ("x" * 5000) + "😀" * 10
    pieces = split_text(text, 4096)
    assert "".join(pieces) == text
    for p in pieces:
        assert len(p.encode("utf-16-le")) // 2 <= 4096, len(p)
    assert pieces[0].endswith(" "), "cut at a space when one is near"


def test_split_text_counts_utf16_units_as_telegram_does():
    assert split_text("😀" * 5, 4) == ["😀😀", "😀😀", "😀"]
    assert split_text("short") == ["short"]


def test_buttons_carry_the_token_and_fall_back_to_the_code():
    markup = approval_buttons([K("code"), "ABCDEF", K("token"), "tok_123-abc"])
    data = [b.callback_data for row in markup.inline_keyboard for b in row]
    assert data == ["approve:tok_123-abc", "deny:tok_123-abc", "approve30:tok_123-abc"], data
    long = approval_buttons([K("code"), "ABCDEF", K("token"), "t" * 60])
    assert [b.callback_data for row in long.inline_keyboard for b in row][0] == "approve:ABCDEF"
    assert approval_buttons([K("token"), "bad token; rm"]) is None


def test_button_data_becomes_the_command_a_person_could_type():
    assert button_command("approve:ABC") == "/approve ABC"
    assert button_command("deny:ABC") == "/deny ABC"
    assert button_command("approve30:ABC") == "/approve ABC 30m"
    assert button_command("approve:ABC /deny X") is None
    assert button_command("launch:ABC") is None
    assert button_command(None) is None


# * Messages end to end

def test_every_message_is_answered_once_and_in_order():
    r = run_in_process(chats=5, per_chat=4, timeout=60)
    assert r["lost"] == 0 and r["duplicated"] == 0 and r["unexpected"] == 0, r
    assert r["order_kept"], r
    assert r["exit"] == 0, r


def test_redelivered_updates_are_not_answered_twice(tg):
    for i in range(3):
        tg.server.message(ALICE, ALICE, f"hello {i}")
    with tg.daemon():
        assert tg.server.wait_for(lambda: len(tg.server.texts(ALICE)) == 3)
        last = tg.server.updates[-1]["update_id"]
        tg.server.redeliver()
        # the gateway has had them all again once it confirms past the last one again
        assert tg.server.wait_for(lambda: tg.server.confirmed > last)
    assert tg.server.texts(ALICE) == ["echo: hello 0", "echo: hello 1", "echo: hello 2"]


def test_the_chat_shows_typing_while_the_model_thinks(tg):
    """The model answers only once the chat has been shown the bot typing; the
    dots are for the chat that wrote, and stop with its reply."""
    async def slow(request):
        deadline = time.monotonic() + 30
        while not tg.server.requests("sendChatAction") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return echo_complete(request)

    tg.env.complete = slow
    tg.server.message(ALICE, ALICE, "think about it")
    with tg.daemon():
        assert tg.server.wait_for(lambda: tg.server.texts(ALICE))
    assert tg.server.texts(ALICE) == ["echo: think about it"]
    actions = tg.server.requests("sendChatAction")
    assert actions and all(int(a["chat_id"]) == ALICE and a["action"] == "typing" for a in actions), actions


def test_strangers_get_one_short_refusal_logged_once(tg, caplog):
    caplog.set_level(logging.INFO)
    tg.server.message(EVE, EVE, "let me in")
    tg.server.message(EVE, EVE, "please")
    tg.server.message(ALICE, ALICE, "hi")
    with tg.daemon():
        assert tg.server.wait_for(lambda: tg.server.texts(ALICE))
        assert tg.server.wait_for(lambda: tg.server.confirmed > tg.server.updates[-1]["update_id"])
    refusals = tg.server.texts(EVE)
    assert len(refusals) == 1 and "private assistant" in refusals[0], refusals
    lines = [r for r in caplog.records if "not in allowed_users" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert tg.server.texts(ALICE) == ["echo: hi"]


def test_an_empty_allow_list_answers_no_one(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    setup = TelegramSetup(tmp_path, users=())
    try:
        setup.server.message(ALICE, ALICE, "hi")
        with setup.daemon():
            assert setup.server.wait_for(lambda: setup.server.texts(ALICE))
        assert "private assistant" in setup.server.texts(ALICE)[0]
        assert any("allowed_users is empty" in r.getMessage() for r in caplog.records)
    finally:
        setup.close()


def test_long_replies_are_split_and_sent_as_plain_text(tg):
    long = "\n".join(f"line {i} " + "·" * 80 for i in range(120))
    handler_skill(tg.env, "long-answer", {"/long": lambda s: [reply(s, long)]})
    tg.server.message(ALICE, ALICE, "/long")
    with tg.daemon():
        assert tg.server.wait_for(lambda: "".join(tg.server.texts(ALICE)) == long)
    sent = tg.server.requests("sendMessage")
    assert len(sent) == len(split_text(long)) >= 3, len(sent)
    assert all("parse_mode" not in p for p in sent), "replies go out without a parse mode"


def test_traces_are_hidden_and_every_other_kind_shown(tg):
    handler_skill(tg.env, "kinds", {"/kinds": lambda s: [reply(s, "ran something", "trace"),
                                                 reply(s, "a notice", "notice"),
                                                 reply(s, "an error", "error"),
                                                 reply(s, "the answer")]})
    tg.server.message(ALICE, ALICE, "/kinds")
    with tg.daemon():
        assert tg.server.wait_for(lambda: len(tg.server.texts(ALICE)) == 3)
        store = tg.env.store
        assert tg.server.wait_for(lambda: store.query("SELECT 1 FROM outbox WHERE state = 'pending'") == [])
    assert tg.server.texts(ALICE) == ["a notice", "an error", "the answer"]
    # the journal's conversation holds what the person saw, not the trace kept back
    told = store.query("SELECT data FROM events WHERE kind = 'delivered' ORDER BY id")
    kinds = [re.search(r":kind :(\w+)", d).group(1) for (d,) in told]
    assert kinds == ["notice", "error", "answer"], told
    assert store.query("SELECT state FROM outbox ORDER BY id") == [("sent",)] * 4, "the trace is done with too"


# * What a person is shown, and what is not text

OBEYED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def test_a_reply_goes_out_with_control_sequences_shown_not_obeyed(tg):
    hostile = ("copied\x1b]52;c;UFdORUQ=\x07 \x1b[2J\x1b[H✓ Approved "
               "\x1b]8;;http://evil.example\x1b\\here\x1b]8;;\x1b\\ \u202eevil\u202c \ud800 end")
    handler_skill(tg.env, "hostile", {"/show": lambda s: [reply(s, hostile)]})
    tg.server.message(ALICE, ALICE, "/show")
    tg.server.message(ALICE, ALICE, "after")
    with tg.daemon():
        assert tg.server.wait_for(lambda: len(tg.server.texts(ALICE)) == 2, timeout=20), tg.server.texts(ALICE)
        store = tg.env.store
        assert tg.server.wait_for(lambda: store.query("SELECT 1 FROM outbox WHERE state = 'pending'") == [])
    shown, after = tg.server.texts(ALICE)
    assert not OBEYED.search(shown), repr(shown)
    for visible in ["\\x1b]52;c;UFdORUQ=\\x07", "\\x1b[2J", "http://evil.example", "\\u202eevil", "\\ud800 end"]:
        assert visible in shown, (visible, shown)
    assert after == "echo: after", "the reply after it was not held back"


def test_a_message_that_is_not_valid_text_is_refused_saying_why(tg):
    tg.server.message(ALICE, ALICE, "hi \ud800 there")
    tg.server.message(ALICE, ALICE, "next")
    with tg.daemon():
        assert tg.server.wait_for(lambda: len(tg.server.texts(ALICE)) == 2, timeout=20), tg.server.texts(ALICE)
        store = tg.env.store
        assert tg.server.wait_for(lambda: store.query("SELECT 1 FROM inbox WHERE state = 'pending'") == [])
    refused, answered = tg.server.texts(ALICE)
    assert refused.startswith("Your message was not read: it is not valid text "
                              "(a lone surrogate (\\ud800) at character 4)"), refused
    assert answered == "echo: next", answered


def test_progress_under_one_key_is_one_message_edited(tg):
    handler_skill(tg.env, "progress", {"/progress": lambda s: [
        reply(s, "Workflow 'w', 3 workers: 1 running, 2 waiting", "progress", **{"progress-key": "workflow-f1"}),
        reply(s, "Workflow 'w', 3 workers: 1 done, 2 running", "progress", **{"progress-key": "workflow-f1"}),
        reply(s, "Workflow 'w', 3 workers: 3 done", "progress", **{"progress-key": "workflow-f1"}),
        reply(s, "the answer")]})
    tg.server.message(ALICE, ALICE, "/progress")
    with tg.daemon():
        assert tg.server.wait_for(lambda: len(tg.server.texts(ALICE)) == 2)
        store = tg.env.store
        assert tg.server.wait_for(lambda: store.query("SELECT 1 FROM outbox WHERE state = 'pending'") == [])
    assert tg.server.texts(ALICE) == ["Workflow 'w', 3 workers: 3 done", "the answer"]
    assert tg.server.sent[ALICE][0].get("edited"), tg.server.sent[ALICE][0]


# * Buttons

def test_approval_buttons_become_approve_commands_and_the_message_shows_the_outcome(tg):
    approval = [K("code"), "QWERTY", K("token"), "tok-42"]
    seen = handler_skill(tg.env, "approvals-stand-in", {
        "/risky": lambda s: [reply(s, "Run rm -rf build? Code QWERTY", "approval", approval=approval)],
        "/approve": lambda s: [reply(s, "Approved: ran rm -rf build", "notice")],
    })
    tg.server.message(ALICE, ALICE, "/risky")
    with tg.daemon():
        assert tg.server.wait_for(lambda: tg.server.texts(ALICE))
        asked = tg.server.sent[ALICE][0]
        keyboard = asked["reply_markup"]["inline_keyboard"]
        datas = [b["callback_data"] for row in keyboard for b in row]
        assert datas == ["approve:tok-42", "deny:tok-42", "approve30:tok-42"], datas
        tg.server.press(ALICE, ALICE, "approve30:tok-42", message=asked)
        assert tg.server.wait_for(lambda: asked.get("edited"))
        assert tg.server.wait_for(lambda: tg.server.requests("answerCallbackQuery"))
    assert seen == ["/risky", "/approve tok-42 30m"], seen
    toasts = [p.get("text") for p in tg.server.requests("answerCallbackQuery")]
    assert toasts == ["Approving, and allowing this kind for 30m…"], toasts
    assert asked["text"] == "Run rm -rf build? Code QWERTY\n\nApproved: ran rm -rf build", asked["text"]
    assert "reply_markup" not in asked, "the buttons are gone once answered"
    assert len(tg.server.texts(ALICE)) == 1, "the outcome edits the message instead of adding one"


def test_a_button_with_unknown_data_is_answered_and_reaches_no_one(tg, caplog):
    caplog.set_level(logging.INFO)
    seen = handler_skill(tg.env, "approvals-stand-in", {"/": lambda s: [reply(s, "handled")]})
    tg.server.press(ALICE, ALICE, "launch:missiles")
    tg.server.press(EVE, EVE, "approve:tok")
    with tg.daemon():
        assert tg.server.wait_for(lambda: len(tg.server.requests("answerCallbackQuery")) == 2)
    assert seen == []
    texts = [p.get("text") for p in tg.server.requests("answerCallbackQuery")]
    assert "This button is no longer understood." in texts and "Not allowed." in texts, texts
    assert any("unknown data" in r.getMessage() for r in caplog.records)


# * The Bot API misbehaving

def test_retry_after_is_honoured_on_429(tg):
    tg.server.fail("sendMessage", "429", retry_after=1)
    tg.server.message(ALICE, ALICE, "hi")
    with tg.daemon():
        assert tg.server.wait_for(lambda: tg.server.texts(ALICE), timeout=15)
    times = tg.server.times("sendMessage")
    assert len(times) == 2, times
    assert times[1] - times[0] >= 1.0, "the second try came before retry_after had passed"
    assert tg.server.texts(ALICE) == ["echo: hi"]


def test_network_errors_are_retried_and_bad_requests_are_not(tg, caplog):
    caplog.set_level(logging.INFO)
    tg.server.fail("sendMessage", "drop")
    tg.server.fail("sendMessage", "500")
    tg.server.message(ALICE, ALICE, "first")
    with tg.daemon():
        assert tg.server.wait_for(lambda: tg.server.texts(ALICE), timeout=15)
        assert len(tg.server.requests("sendMessage")) == 3
        tg.server.fail("sendMessage", "400")
        tg.server.message(BOB, BOB, "second")
        assert tg.server.wait_for(lambda: any("could not deliver" in r.getMessage() for r in caplog.records))
    assert tg.server.texts(ALICE) == ["echo: first"]
    assert len(tg.server.requests("sendMessage")) == 4, "a 400 was retried"
    assert tg.server.texts(BOB) == []


def test_polling_survives_429_garbage_and_dropped_connections(tg, caplog):
    caplog.set_level(logging.INFO)
    tg.server.fail("getUpdates", "429", retry_after=1)
    tg.server.fail("getUpdates", "garbage")
    tg.server.fail("getUpdates", "drop")
    tg.server.message(ALICE, ALICE, "still there?")
    with tg.daemon():
        assert tg.server.wait_for(lambda: tg.server.texts(ALICE), timeout=20)
    assert tg.server.texts(ALICE) == ["echo: still there?"]
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "flood control" in messages and "polling failed" in messages, messages


def test_a_409_is_said_retried_and_recovered_from(tg, caplog):
    """Another poller holds the bot for a while: the gateway says so at once, the
    heartbeat says degraded, and once the other stops the message is answered."""
    from passepartout.records import kv_get
    caplog.set_level(logging.INFO)
    tg.server.fail("getUpdates", "409", times=2)
    tg.server.message(ALICE, ALICE, "after the conflict")
    beats = []
    with tg.daemon() as d:
        assert tg.server.wait_for(lambda: any("409 Conflict" in r.getMessage() for r in caplog.records))

        def degraded_beat():
            beat = kv_get(tg.env.store, "daemon:heartbeat")
            if beat and proto_get(beat, K("degraded")):
                beats.append(beat)
            return beats

        assert tg.server.wait_for(degraded_beat, timeout=10), "the heartbeat never said degraded"
        assert tg.server.wait_for(lambda: tg.server.texts(ALICE), timeout=20), "the gateway did not recover"
        assert d.thread.is_alive()
    assert tg.server.texts(ALICE) == ["echo: after the conflict"]
    states = dict(zip(*[iter(proto_get(beats[0], K("gateways")))] * 2))
    assert "409 Conflict" in states["telegram"], states
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR and "409" in r.getMessage()]
    assert len(errors) == 1 and "another program is polling this bot" in errors[0].getMessage(), \
        "the first 409 of the incident is an error, the next ones are not repeated as errors"
    assert any("polling again after 2 409 Conflicts" in r.getMessage() for r in caplog.records)
    assert any("degraded" in r.getMessage() for r in caplog.records)
    assert d.code == 0


def test_a_gateway_that_fails_is_started_again(tg, caplog):
    """A gateway whose run raises is supervised: started again after a pause, and
    the heartbeat says degraded meanwhile."""
    import asyncio
    caplog.set_level(logging.INFO)
    runs = []

    async def run(hub):
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("the service went away")
        while True:
            await asyncio.sleep(0.05)

    async def nothing(*a):
        return None

    gateway = {"name": "flaky", "run": run, "deliver": nothing, "stop": nothing, "close": nothing}
    with tg.daemon(gateways=[gateway]):
        deadline = time.monotonic() + 60
        while len(runs) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert len(runs) == 2, runs
    assert any("gateway flaky failed (1 time(s))" in r.getMessage() and "starting it again in 1 s" in r.getMessage()
               for r in caplog.records)


def test_a_server_down_at_start_is_waited_for(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    server = BotAPIServer()
    port = server.port
    server.stop()  # the port is known, nobody answers on it
    setup = TelegramSetup(tmp_path, users=(ALICE,), server=server)
    try:
        with setup.daemon() as d:
            assert server.wait_for(lambda: any("polling failed" in r.getMessage() for r in caplog.records))
            assert d.thread.is_alive()
            server.message(ALICE, ALICE, "are you up?")
            server.port = port
            server.start()
            assert server.wait_for(lambda: server.texts(ALICE), timeout=20)
        assert server.texts(ALICE) == ["echo: are you up?"]
    finally:
        setup.close()


# * Bad input

def test_edits_unknown_updates_and_unreadable_updates_are_logged_and_passed_over(tg, caplog):
    caplog.set_level(logging.INFO)
    tg.server.message(ALICE, ALICE, "original")
    tg.server.edit(ALICE, ALICE, 1, "edited")
    tg.server.raw({"message_reaction_count": {"chat": {"id": ALICE, "type": "private"},
                                              "message_id": 1, "date": 0, "reactions": []}})
    tg.server.raw({"a_kind_from_the_future": {"x": 1}})
    tg.server.raw({"message": {"message_id": "not a number", "chat": "nor a chat"}})
    tg.server.message(ALICE, ALICE, "after")
    with tg.daemon():
        assert tg.server.wait_for(lambda: len(tg.server.texts(ALICE)) == 2)
        assert tg.server.wait_for(lambda: tg.server.confirmed > tg.server.updates[-1]["update_id"])
    assert tg.server.texts(ALICE) == ["echo: original", "echo: after"]
    messages = [r.getMessage() for r in caplog.records]
    assert any("ignored an edit of message 1" in m for m in messages), messages
    assert any("message_reaction_count" in m and "does not read" in m for m in messages), messages
    assert any("a_kind_from_the_future" in m and "does not read" in m for m in messages), messages
    assert any("cannot be read" in m for m in messages), messages


def test_huge_and_textless_messages_get_a_reply_and_reach_no_model(tg):
    calls = []
    tg.env.complete = lambda request: calls.append(request) or [K("status"), K("failed")]
    tg.server.message(ALICE, ALICE, "x" * 20000)
    tg.server.message(BOB, BOB, None, photo=[{"file_id": "f", "file_unique_id": "u", "width": 1, "height": 1}])
    with tg.daemon():
        assert tg.server.wait_for(lambda: tg.server.texts(ALICE) and tg.server.texts(BOB))
    assert "too long" in tg.server.texts(ALICE)[0] and "20000" in tg.server.texts(ALICE)[0]
    assert tg.server.texts(BOB) == ["I can only read text messages."]
    assert calls == []


def test_judge_sees_loss_duplicates_and_disorder():
    server = BotAPIServer(start=False)
    talk = {1: ["a", "b", "c"]}
    for t in ["echo: b", "echo: a", "echo: a"]:
        server.sent[1].append({"text": t})
    r = judge(server, talk)
    assert (r["lost"], r["duplicated"], r["order_kept"]) == (1, 1, False), r


def test_an_update_is_confirmed_only_after_the_hub_has_it(tg):
    """The offset moves past an update only once receive has returned: while the
    hub holds the updates of a batch, Telegram is never told they were received.
    They are handed over in the order they came."""
    import asyncio
    from passepartout.gateways.telegram import make_telegram

    first = tg.server.message(ALICE, ALICE, "one")
    tg.server.message(ALICE, ALICE, "two")
    section = tg.env.config["gateways"]["telegram"]

    class HoldingHub:
        def __init__(self):
            self.keys = []
            self.release = asyncio.Event()

        async def receive(self, gateway, key, signal):
            self.keys.append(key)
            await self.release.wait()
            return True

        async def claim(self, gateway, key, note=None):
            return True

    async def main():
        gateway = make_telegram(section, tg.env)
        hub = HoldingHub()
        run = asyncio.create_task(gateway["run"](hub))
        while len(hub.keys) < 2:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        held = (list(hub.keys), tg.server.confirmed, len(tg.server.requests("getUpdates")))
        hub.release.set()
        while tg.server.confirmed <= first + 1:
            await asyncio.sleep(0.01)
        await gateway["stop"]()
        await run
        await gateway["close"]()
        return held, hub.keys

    (keys, confirmed, polls), all_keys = asyncio.run(main())
    assert keys == [f"123456:{first}", f"123456:{first + 1}"], keys
    assert confirmed <= first and polls == 1, (confirmed, polls)
    assert all_keys == keys, all_keys


# * The HTTP transport

def _transport_call(url, read_timeout=0.3):
    """What AiohttpRequest.post gives for URL: the result, or the exception."""
    import asyncio
    from passepartout.gateways.telegram import AiohttpRequest

    async def main():
        request = AiohttpRequest(pool_size=1, read_timeout=read_timeout, connect_timeout=1.0)
        await request.initialize()
        try:
            return await request.post(url)
        except Exception as e:  # handed to the test
            return e
        finally:
            await request.shutdown()

    return asyncio.run(main())


def test_the_transport_gives_the_librarys_errors():
    """A server that never answers is TimedOut; one that is not there is a
    NetworkError; both are errors the gateway retries. A bad request is BadRequest."""
    import socket
    import threading
    from telegram.error import BadRequest, NetworkError, TimedOut

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)
    held = []
    threading.Thread(target=lambda: held.append(silent.accept()), daemon=True).start()
    try:
        started = time.monotonic()
        quiet = _transport_call(f"http://127.0.0.1:{silent.getsockname()[1]}/bot1:x/getMe")
        waited = time.monotonic() - started
    finally:
        for conn, _ in held:
            conn.close()
        silent.close()
    assert isinstance(quiet, TimedOut), repr(quiet)
    assert waited < 5, waited

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    refused = _transport_call(f"http://127.0.0.1:{port}/bot1:x/getMe")
    assert isinstance(refused, NetworkError) and not isinstance(refused, TimedOut), repr(refused)

    server = BotAPIServer()
    try:
        server.fail("getMe", "400")
        bad = _transport_call(server.base_url + server.token + "/getMe")
        good = _transport_call(server.base_url + server.token + "/getMe")
    finally:
        server.stop()
    assert isinstance(bad, BadRequest), repr(bad)
    assert good["username"] == "passepartout_test_bot", good
