"""A Telegram Bot API server on loopback, and the Telegram figures.

The server speaks the part of the Bot API the gateway uses, over real HTTP:
getMe, getUpdates (long polling with a timeout; an offset confirms every update
below it, as Telegram does), sendMessage, editMessageText, answerCallbackQuery,
sendChatAction and deleteWebhook. Tests play the people: `message`, `edit`, `press` and `raw`
queue updates; `fail` makes the next calls of a method answer 429 with a
retry_after, 409, 500, a body that is not JSON, or drop the connection. Every
call is recorded (`calls`), and what the bot sent is kept per chat (`texts`).

Clients reach it with python-telegram-bot's `base_url` set to `server.base_url`
(http://127.0.0.1:PORT/bot).

The figures (`bench_telegram`, `bench_telegram_kill`) run the Telegram path
end to end and return rows of (name, value, unit, goal) like passepartout.tools.bench.
"""
import asyncio
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict, deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

TOKEN = "123456:TEST-token_for-the-loopback-bot"
BOT_ID = 123456
STRING_PARAMS = {"text", "callback_query_id", "parse_mode", "inline_message_id", "url", "chat_id"}


class _Server(ThreadingHTTPServer):
    """A threading HTTP server that may take its port back after a restart, and
    that takes a client going away mid-request (a daemon killed -9) in its stride."""

    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


class BotAPIServer:
    """A running Bot API server. See the module docstring."""

    def __init__(self, token=TOKEN, port=0, start=True):
        self.token = token
        self.bot = {"id": int(token.split(":")[0]), "is_bot": True, "first_name": "Passepartout",
                    "username": "passepartout_test_bot", "can_join_groups": False,
                    "can_read_all_group_messages": False, "supports_inline_queries": False}
        self.calls = []
        self.stamps = []
        self.updates = []
        self.confirmed = 0
        self.sent = defaultdict(list)      # chat -> [message dict], in the order sent
        self.faults = defaultdict(deque)   # method -> faults still to play
        self.outages = {}                  # method -> (kind, time.monotonic() it ends)
        self._cond = threading.Condition()
        self._update_ids = itertools.count(1000)
        self._message_ids = defaultdict(lambda: itertools.count(1))
        self._callback_ids = itertools.count(1)
        self._stopping = False
        self.controllable = False
        self.port = port
        self._httpd = None
        if start:
            self.start()

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self.port}/bot"

    def start(self):
        """Serve (again) on self.port; a port of 0 picks a free one."""
        self._httpd = _Server(("127.0.0.1", self.port), _handler_for(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._stopping = False
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def stop(self):
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._httpd = None

    # * Playing the people

    def _user(self, user, name):
        return {"id": user, "is_bot": False, "first_name": name or f"User{user}"}

    def _chat(self, chat):
        return {"id": chat, "type": "private" if chat > 0 else "group", "first_name": f"Chat{chat}"}

    def _queue(self, body):
        with self._cond:
            update = dict(body, update_id=next(self._update_ids))
            self.updates.append(update)
            self._cond.notify_all()
            return update["update_id"]

    def message(self, chat, user, text, name=None, **extra):
        """Queue a message from USER in CHAT; its update id."""
        msg = {"message_id": next(self._message_ids[chat]), "date": int(time.time()),
               "chat": self._chat(chat), "from": self._user(user, name)}
        if text is not None:
            msg["text"] = text
        msg.update(extra)
        return self._queue({"message": msg})

    def edit(self, chat, user, message_id, text):
        """Queue an edit of MESSAGE_ID."""
        msg = {"message_id": message_id, "date": int(time.time()), "edit_date": int(time.time()),
               "chat": self._chat(chat), "from": self._user(user, None), "text": text}
        return self._queue({"edited_message": msg})

    def press(self, chat, user, data, message=None):
        """Queue a button press on MESSAGE (a message dict the bot sent), with callback DATA."""
        message = message or {"message_id": 1, "date": int(time.time()), "chat": self._chat(chat),
                              "from": self.bot, "text": "?"}
        query = {"id": str(next(self._callback_ids)), "from": self._user(user, None),
                 "chat_instance": f"ci{chat}", "data": data,
                 "message": {k: message[k] for k in ("message_id", "date", "chat", "from", "text")}}
        return self._queue({"callback_query": query})

    def raw(self, body):
        """Queue BODY (a dict without update_id) as an update, whatever it holds."""
        return self._queue(body)

    def redeliver(self):
        """Forget every confirmation, as if the bot never acknowledged anything."""
        with self._cond:
            self.confirmed = 0
            self._cond.notify_all()

    def fail(self, method, kind, times=1, retry_after=1):
        """Make the next TIMES calls of METHOD fail: kind is "429", "400", "409",
        "500", "garbage" (200 with a body that is not JSON) or "drop" (no answer at all)."""
        with self._cond:
            for _ in range(times):
                self.faults[method].append((kind, retry_after))

    def outage(self, method, kind, seconds):
        """Make every call of METHOD fail as KIND (see fail) for the next SECONDS."""
        with self._cond:
            self.outages[method] = (kind, time.monotonic() + seconds)

    # * What the bot did

    def requests(self, method):
        with self._cond:
            return [params for m, params in self.calls if m == method]

    def times(self, method):
        """When each call of METHOD arrived (time.monotonic)."""
        with self._cond:
            return [t for (m, _), t in zip(self.calls, self.stamps) if m == method]

    def texts(self, chat):
        with self._cond:
            return [m["text"] for m in self.sent[chat]]

    def answered(self):
        with self._cond:
            return sum(len(v) for v in self.sent.values())

    def wait_answered(self, count, timeout=10.0):
        """Wait until the bot has sent COUNT messages; how many it has sent."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                sent = sum(len(v) for v in self.sent.values())
                left = deadline - time.monotonic()
                if sent >= count or left <= 0 or self._stopping:
                    return sent
                self._cond.wait(min(left, 0.5))

    def wait_for(self, predicate, timeout=10.0):
        """Wait until PREDICATE() is true; its last value."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value or time.monotonic() > deadline:
                return value
            time.sleep(0.01)

    # * Answering

    def handle(self, method, params):
        """(status, body dict or bytes, drop) for one call."""
        with self._cond:
            self.calls.append((method, params))
            self.stamps.append(time.monotonic())
            fault = self.faults[method].popleft() if self.faults[method] else None
            outage = self.outages.get(method)
            if fault is None and outage and time.monotonic() < outage[1]:
                fault = (outage[0], 1)
        if fault:
            kind, retry_after = fault
            if kind == "drop":
                return 0, None, True
            if kind == "garbage":
                return 200, b"<html><body>502 Bad Gateway</body></html>", False
            if kind == "429":
                return 429, {"ok": False, "error_code": 429,
                             "description": f"Too Many Requests: retry after {retry_after}",
                             "parameters": {"retry_after": retry_after}}, False
            if kind == "400":
                return 400, {"ok": False, "error_code": 400,
                             "description": "Bad Request: can't parse entities"}, False
            if kind == "409":
                return 409, {"ok": False, "error_code": 409,
                             "description": "Conflict: terminated by other getUpdates request; "
                                            "make sure that only one bot instance is running"}, False
            return 500, {"ok": False, "error_code": 500, "description": "Internal Server Error"}, False
        answer = getattr(self, "_m_" + method, None)
        if answer is None:
            return 404, {"ok": False, "error_code": 404, "description": "Not Found"}, False
        try:
            result = answer(params)
        except _Refused as e:
            return 400, {"ok": False, "error_code": 400, "description": f"Bad Request: {e}"}, False
        return 200, {"ok": True, "result": result}, False

    def _m_getMe(self, params):
        return self.bot

    def _m_deleteWebhook(self, params):
        return True

    def _m_getUpdates(self, params):
        offset = params.get("offset")
        limit = int(params.get("limit") or 100)
        timeout = float(params.get("timeout") or 0)
        deadline = time.monotonic() + timeout
        with self._cond:
            if offset is not None:
                self.confirmed = max(self.confirmed, int(offset))
            while True:
                ready = [u for u in self.updates if u["update_id"] >= self.confirmed][:limit]
                left = deadline - time.monotonic()
                if ready or left <= 0 or self._stopping:
                    return ready
                self._cond.wait(min(left, 0.5))

    def _m_sendMessage(self, params):
        chat = int(params["chat_id"])
        text = params.get("text")
        if not text or not str(text).strip():
            raise _Refused("message text is empty")
        if len(str(text).encode("utf-16-le")) // 2 > 4096:
            raise _Refused("message is too long")
        message = {"message_id": next(self._message_ids[chat]), "date": int(time.time()),
                   "chat": self._chat(chat), "from": self.bot, "text": str(text)}
        if params.get("reply_markup"):
            message["reply_markup"] = params["reply_markup"]
        with self._cond:
            self.sent[chat].append(message)
            self._cond.notify_all()
        return message

    def _m_editMessageText(self, params):
        chat = int(params["chat_id"])
        message_id = int(params["message_id"])
        with self._cond:
            found = [m for m in self.sent[chat] if m["message_id"] == message_id]
            if not found:
                raise _Refused("message to edit not found")
            m = found[0]
            markup = params.get("reply_markup")
            if m["text"] == params["text"] and m.get("reply_markup") == markup:
                raise _Refused("message is not modified: specified new message content and reply "
                               "markup are exactly the same as a current content and reply markup "
                               "of the message")
            m["text"] = str(params["text"])
            m.pop("reply_markup", None)
            if markup:
                m["reply_markup"] = markup
            m["edited"] = True
            return dict(m)

    def _m_answerCallbackQuery(self, params):
        return True

    def _m_sendChatAction(self, params):
        if params.get("action") not in ("typing", "upload_document", "upload_photo", "record_voice"):
            raise _Refused("wrong parameter action in request")
        return True


class _Refused(Exception):
    pass


# * The server in a process of its own

CONTROL = {"message", "edit", "press", "raw", "redeliver", "fail", "outage", "requests", "texts", "answered",
           "wait_answered"}


class ServerProcess:
    """A BotAPIServer running in a child process, so that its threads do not
    share the GIL of the process under measure, as Telegram's servers would not.
    The methods in CONTROL are called in the child over its /control/ path;
    the rest (base_url, wait_for, stop) work as they do on BotAPIServer."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, __file__, "serve"], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            self.proc.kill()
            raise RuntimeError(f"the Bot API server process did not start: {line!r}")
        self.port = int(line.split()[1])
        self.token = TOKEN

    base_url = BotAPIServer.base_url
    wait_for = BotAPIServer.wait_for

    def __getattr__(self, name):
        if name not in CONTROL:
            raise AttributeError(name)

        def call(*args, **kwargs):
            import urllib.request
            body = json.dumps({"args": args, "kwargs": kwargs}).encode()
            request = urllib.request.Request(f"http://127.0.0.1:{self.port}/control/{name}", data=body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as answer:
                return json.loads(answer.read())["result"]
        return call

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc.stdout.close()


def _serve_for_parent():
    """The child's side of ServerProcess: serve until the parent terminates it."""
    server = BotAPIServer()
    server.controllable = True
    print(f"port {server.port}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    done.wait()
    server.stop()


def _decode(ctype, raw):
    """The parameters of a request body, JSON values decoded."""
    if not raw:
        return {}
    if ctype.startswith("application/json"):
        return json.loads(raw)
    params = {}
    for k, values in parse_qs(raw.decode("utf-8"), keep_blank_values=True).items():
        v = values[-1]
        if k not in STRING_PARAMS:
            try:
                v = json.loads(v)
            except ValueError:
                pass
        params[k] = v
    return params


def _handler_for(server):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out at once, not after a delayed ACK

        def log_message(self, *args):
            pass

        def do_GET(self):
            self.do_POST()

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            parts = self.path.split("?")[0].strip("/").split("/")
            if len(parts) == 2 and parts[0] == "control" and server.controllable:
                self._control(parts[1], raw)
                return
            if len(parts) != 2 or parts[0] != "bot" + server.token:
                self._send(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
                return
            try:
                params = _decode(self.headers.get("Content-Type", ""), raw)
            except ValueError:
                self._send(400, {"ok": False, "error_code": 400, "description": "Bad Request: bad body"})
                return
            status, body, drop = server.handle(parts[1], params)
            if drop:
                self.close_connection = True
                try:
                    self.connection.shutdown(2)
                except OSError:
                    pass
                return
            self._send(status, body)

        def _control(self, name, raw):
            """Call the server's method NAME with the JSON arguments in RAW, for the
            process that started this one (see ServerProcess)."""
            if name not in CONTROL:
                self._send(404, {"error": f"no control {name}"})
                return
            call = json.loads(raw or b"{}")
            result = getattr(server, name)(*call.get("args", []), **call.get("kwargs", {}))
            self._send(200, {"result": result})

        def _send(self, status, body):
            payload = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass

    return Handler


# * A model that echoes, for the figures

def echo_complete(request):
    """An instant model (services.complete) that answers each message with "echo: " and its text."""
    import hy  # noqa: F401
    from hy.models import Keyword
    from passepartout.proto import proto_get, proto_print
    signal_ = proto_get(request, Keyword("signal"))
    text = proto_get(proto_get(signal_, Keyword("payload")), Keyword("text"))
    return [Keyword("status"), Keyword("ok"), Keyword("provider"), "echo",
            Keyword("text"), "(:action :message :text " + proto_print("echo: " + str(text)) + ")"]


def echo_openai_server():
    """A scripted OpenAI server (tests/openai_server.py) whose script `echo`
    answers each chat with a :message action echoing the last user message.
    With `limit` set, the answers after the first LIMIT wait until `gate` is set."""
    sys.path.insert(0, str(Path(__file__).parent))
    import hy  # noqa: F401
    from openai_server import ScriptedOpenAIServer, _json
    from passepartout.proto import proto_print

    class EchoServer(ScriptedOpenAIServer):
        def __init__(self):
            self.gate = threading.Event()
            self.limit = None
            self.admitted = 0
            self.echoed = 0
            self.acting = False
            super().__init__()

        def answer(self, script, body, n):
            if script != "echo":
                return super().answer(script, body, n)
            with self._lock:
                self.admitted += 1
                held = self.limit is not None and self.admitted > self.limit
            if held:
                self.gate.wait(60)
            # turns of one role in a row reach a server joined into one (blank line
            # between): each part is read as the turn it was
            users = [part for m in (body or {}).get("messages", []) if m.get("role") == "user"
                     for part in str(m.get("content")).split("\n\n")]
            # what the person said: not a result, not the gates' refusal of an earlier proposal
            said = [u for u in users if not u.startswith(("Result of ", "Your previous proposals were refused"))]
            text = said[-1] if said else ""
            if self.acting and users and not users[-1].startswith("Result of "):
                # first note the message in the workspace's ledger, then answer
                content = ("(:action :shell :cmd " + proto_print(f"echo '{text}' >> ledger.txt")
                           + " :explanation \"note it\")")
            else:
                content = "(:action :message :text " + proto_print("echo: " + str(text)) + ")"
            with self._lock:
                self.echoed += 1
            return 200, "application/json", _json(self._completion(body, n, {"role": "assistant",
                                                                          "content": content}))

    return EchoServer()


# * Running the Telegram path

def write_daemon_config(folder, gateways, grace=10, heartbeat=0.5):
    """A config file in FOLDER for a daemon as a process: its folders in FOLDER,
    no sandbox, no terminal, GRACE seconds of [daemon] shutdown_grace, a
    heartbeat every HEARTBEAT seconds, and the TOML text GATEWAYS (its gateway
    sections and providers) after that."""
    folder = Path(folder)
    config = folder / "config.toml"
    config.write_text(f'''
data_dir = "{folder / 'data'}"
runtime_dir = "{folder / 'run'}"
workspace = "{folder / 'workspace'}"

# Shell commands are the chats' load here, not the subject: the same on a
# machine without bubblewrap, where they would all wait for a person.
[sandbox]
mode = "off"

[daemon]
heartbeat = {heartbeat}
shutdown_grace = {grace}

[gateways.terminal]
enabled = false
{gateways}
''')
    return config


def write_config(folder, server, users, providers="", extra="", grace=10):
    """A config file in FOLDER for a daemon whose Telegram gateway talks to SERVER;
    GRACE is [daemon] shutdown_grace."""
    return write_daemon_config(folder, f'''
[gateways.telegram]
token_env = "PASSEPARTOUT_TEST_BOT_TOKEN"
api_base = "{server.base_url}"
allowed_users = {json.dumps(sorted(users))}
poll_timeout = 1
{extra}
{providers}
''', grace)


def daemon_environ(folder):
    folder = Path(folder)
    return dict(os.environ, HOME=str(folder), PASSEPARTOUT_TEST_BOT_TOKEN=TOKEN,
                PASSEPARTOUT_TEST_ECHO_KEY="sk-loopback-echo-key",
                LITELLM_LOCAL_MODEL_COST_MAP="True")


def conversation(chats, per_chat, first_chat=5001):
    """{chat: [texts]}: what each chat says, in order."""
    return {c: [f"chat {c} message {i}" for i in range(per_chat)]
            for c in range(first_chat, first_chat + chats)}


def say_all(server, talk):
    """Queue every message of TALK, round by round across the chats."""
    per_chat = max(len(v) for v in talk.values())
    for i in range(per_chat):
        for chat, texts in talk.items():
            if i < len(texts):
                server.message(chat, chat, texts[i])


def judge(server, talk):
    """What the bot answered against what was said: a dict of counts and whether order held."""
    lost = duplicated = unexpected = 0
    order_kept = True
    strays = []
    for chat, texts in talk.items():
        want = ["echo: " + t for t in texts]
        got = server.texts(chat)
        counts = defaultdict(int)
        for g in got:
            counts[g] += 1
        lost += sum(1 for w in want if counts[w] == 0)
        duplicated += sum(n - 1 for n in counts.values() if n > 1)
        unexpected += sum(n for g, n in counts.items() if g not in want)
        strays += [(chat, g, n) for g, n in counts.items() if g not in want or n > 1]
        firsts = list(dict.fromkeys(g for g in got if g in want))
        order_kept = order_kept and firsts == [w for w in want if counts[w]]
    return {"lost": lost, "duplicated": duplicated, "unexpected": unexpected,
            "order_kept": order_kept, "answered": server.answered(), "strays": strays[:6]}


def run_in_process(chats=50, per_chat=20, timeout=120.0, in_perceive=False, server_process=False):
    """The Telegram path in this process: a real Bot API server on loopback, the
    real client, the daemon's serve, and the instant echo model. A dict of
    judge's counts and the seconds from start to the last answer. With
    IN_PERCEIVE, a pre-reason handler echoes instead, so no reason or act stage
    runs: what is left is the cost of the path around the loop."""
    import hy  # noqa: F401
    from passepartout.providers import make_provider
    from passepartout.daemon import boot, shutdown
    from passepartout.daemon import serve
    from passepartout.perceive import reply_signal
    from passepartout.skills import make_skill, register_skill

    server = ServerProcess() if server_process else BotAPIServer()
    folder = tempfile.mkdtemp(prefix="passepartout-telegram-")
    talk = conversation(chats, per_chat)
    total = chats * per_chat
    env = None
    try:
        import passepartout.gateways.telegram  # noqa: F401  (its import is not part of the figure)
        config = write_config(folder, server, list(talk))
        environ = daemon_environ(folder)
        env = boot(config_path=str(config), environ=environ, providers=[make_provider("symbolic")])
        env.complete = echo_complete
        if in_perceive:
            from hy.models import Keyword
            from passepartout.proto import proto_get

            def echo(signal_, ctx):
                text = proto_get(proto_get(signal_, Keyword("payload")), Keyword("text"))
                return [reply_signal(signal_, "echo: " + str(text))]

            register_skill(env.skills, make_skill("bench-echo", priority=1000, handlers=[echo]))
        say_all(server, talk)

        async def main():
            stop = asyncio.Event()
            daemon = asyncio.create_task(serve(env, stop=stop))
            answered = asyncio.create_task(asyncio.to_thread(server.wait_answered, total, timeout))
            await asyncio.wait([daemon, answered], return_when=asyncio.FIRST_COMPLETED)
            elapsed = time.perf_counter() - started
            stop.set()
            code = await daemon
            return elapsed, code

        started = time.perf_counter()
        elapsed, code = asyncio.run(main())
        result = judge(server, talk)
        result.update(seconds=elapsed, exit=code, total=total)
        return result
    finally:
        if env is not None:
            shutdown(env)
        server.stop()


def bench_telegram(chats=50, per_chat=20):
    """Figure: chats × messages through the Telegram path with an instant model;
    and, for comparison, answered by a handler in perceive (no reason or act).
    The Bot API server runs in a process of its own, as Telegram's would."""
    r = run_in_process(chats, per_chat, server_process=True)
    name = f"telegram {chats} chats × {per_chat} messages"
    rows = [(f"{name}: answered", r["answered"] - r["duplicated"] - r["unexpected"], f"of {r['total']}",
             f"{r['total']}"),
            (f"{name}: answered twice", r["duplicated"], "", "0"),
            (f"{name}: order kept in every chat", "yes" if r["order_kept"] else "NO", "", "yes"),
            (f"{name}: throughput (the Bot API server in a process of its own)",
             r["total"] / r["seconds"], "messages/s", "≥ 200")]
    p = run_in_process(chats, per_chat, in_perceive=True, server_process=True)
    return rows + [(f"{name}, answered in perceive (no reason, no act): throughput",
                    p["total"] / p["seconds"], "messages/s", "")]


def one_message_walk(runs=5):
    """The walk of one Telegram message through this process, from the update
    the gateway fetched to its reply sent (the hub's record that it went out
    returning), nothing of the daemon replaced: the model is asked through the
    cascade and LiteLLM, over loopback, of the echo OpenAI server; the gates
    judge in this process, so that the code they run is seen too. For each of
    RUNS messages (after one that warms up): the times the project's code moved
    to another thread, the project's files and distinct functions entered, and
    the calls of them. Every thread is profiled. The long poll and the
    heartbeat are long, so that no idle round of either falls in a walk."""
    import sys
    import hy  # noqa: F401
    from passepartout.daemon import boot, shutdown, serve
    from passepartout.llm import _litellm_module

    root = str(Path(__file__).resolve().parent.parent)
    ours = (os.path.join(root, "passepartout"), os.path.join(root, "skills"))
    server = ServerProcess()
    model = echo_openai_server()
    folder = tempfile.mkdtemp(prefix="passepartout-walk-")
    env = None
    walks = []
    state = {"on": False}
    ended = threading.Event()

    def last_step(code):
        # the hub's record that a reply went out: the walk's end once it returns
        return code.co_name == "_sent" and code.co_filename.endswith(("gateway.hy", "hub.hy"))

    def profile(frame, event, arg):
        if not state["on"] or not frame.f_code.co_filename.startswith(ours):
            return
        if not state["kept"]:
            if event == "return" and last_step(frame.f_code):
                state["on"] = False
                ended.set()
            return
        if event == "return":
            if last_step(frame.f_code):
                state["on"] = False
                if state["kept"]:
                    walks.append({k: state[k] for k in ("switches", "calls", "functions")})
                ended.set()
            return
        if event != "call":
            return
        here = threading.get_ident()
        if state["thread"] is not None and here != state["thread"]:
            state["switches"] += 1
        state["thread"] = here
        state["calls"] += 1
        state["functions"].add((frame.f_code.co_filename, frame.f_code.co_name))

    try:
        # their imports are not part of the figure
        import passepartout.gateways.telegram  # noqa: F401
        _litellm_module()
        config = write_daemon_config(folder, f'''
[gateways.telegram]
token_env = "PASSEPARTOUT_TEST_BOT_TOKEN"
api_base = "{server.base_url}"
allowed_users = [5001]
poll_timeout = 30
{echo_providers(model)}
''', heartbeat=60)
        environ = daemon_environ(folder)
        # the cascade reads a provider's key from the process's environment when it asks
        os.environ.setdefault("PASSEPARTOUT_TEST_ECHO_KEY", environ["PASSEPARTOUT_TEST_ECHO_KEY"])
        env = boot(config_path=str(config), environ=environ)
        # on every thread from the start: a thread started before it would not be seen
        threading.setprofile(profile)
        sys.setprofile(profile)

        async def main():
            stop = asyncio.Event()
            daemon = asyncio.create_task(serve(env, stop=stop))
            for n in range(runs + 1):
                ended.clear()
                state.update(thread=None, switches=0, calls=0, functions=set(), on=True, kept=n > 0)
                server.message(5001, 5001, f"walk {n}")
                await asyncio.to_thread(server.wait_answered, n + 1, 25)
                if not await asyncio.to_thread(ended.wait, 60):
                    raise RuntimeError("the reply was sent but the hub never recorded it")
            stop.set()
            await daemon

        asyncio.run(main())
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        if env is not None:
            shutdown(env)
        server.stop()
        model.stop()
    if len(walks) != runs:
        raise RuntimeError(f"{len(walks)} walks of {runs} were counted")
    return walks


def bench_one_message(runs=5):
    """Figures: the walk of one Telegram message (see one_message_walk), medians."""
    import statistics
    walks = one_message_walk(runs)
    name = "one message to its reply (Telegram update to reply sent)"
    files = [len({f for f, _ in w["functions"]}) for w in walks]
    return [(f"{name}: files of the project entered",
             statistics.median(files), f"median of {len(walks)}", "≤ 15"),
            (f"{name}: distinct functions entered",
             statistics.median(len(w["functions"]) for w in walks), f"median of {len(walks)}", "≤ 120"),
            (f"{name}: function entries (told, no goal)",
             statistics.median(w["calls"] for w in walks), f"median of {len(walks)}", ""),
            (f"{name}: thread switches of the project's code",
             statistics.median(w["switches"] for w in walks), f"median of {len(walks)}", "≤ 3")]


def bench_telegram_journal(chats=50, per_chat=20, rounds=3):
    """Figure: the 50 × 20 throughput with every record a turn of the journal
    (the task's records, and each reply delivered), beside the same with them
    appended as plain events (the store before the journal), ROUNDS runs of
    each, alternating; medians and their ratio."""
    import statistics
    from hy.models import Keyword
    import passepartout.task as task
    from passepartout.proto import proto_get
    from passepartout.records import event_append

    def plain(store, record, ts=None):
        return event_append(store, str(proto_get(record, Keyword("event"))), proto_get(record, Keyword("session")),
                            proto_get(record, Keyword("data")) or [], ts=ts)

    import passepartout.gateways.hub as gateway

    def plain_event(store, kind, session, data, ts=None):
        return event_append(store, kind, session, data, ts=ts)

    journal, journal_event = task.journal_append, gateway.journal_event
    with_journal, without = [], []
    try:
        for _ in range(rounds):
            for appenders, into in [((journal, journal_event), with_journal), ((plain, plain_event), without)]:
                task.journal_append, gateway.journal_event = appenders
                r = run_in_process(chats, per_chat, server_process=True)
                into.append(r["total"] / r["seconds"])
    finally:
        task.journal_append, gateway.journal_event = journal, journal_event
    a, b = statistics.median(with_journal), statistics.median(without)
    name = f"telegram {chats} × {per_chat} throughput"
    return [(f"{name}, every record a journal turn", a, "messages/s (median)", ""),
            (f"{name}, records as plain events (before the journal)", b, "messages/s (median)", ""),
            (f"{name}: what the journal costs", 100 * (1 - a / b), "%", "< 10")]


# * The daemon in a thread of this process, for tests

class InProcessDaemon:
    """serve(ENV) on an event loop in a thread of its own, from `with` to its end.
    `code` is what serve returned; an exception it raised is raised again at the end."""

    def __init__(self, env, gateways=None, services=None):
        self.env, self.gateways, self.services = env, gateways, services
        self.code = self.error = self.loop = self.stop = None
        self._ready = threading.Event()

    def __enter__(self):
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self._ready.wait(30)
        return self

    def _run(self):
        import hy  # noqa: F401
        from passepartout.daemon import serve

        async def main():
            self.loop = asyncio.get_running_loop()
            self.stop = asyncio.Event()
            self._ready.set()
            return await serve(self.env, gateways=self.gateways, services=self.services, stop=self.stop)

        try:
            self.code = asyncio.run(main())
        except BaseException as e:  # handed to the test thread
            self.error = e
        finally:
            self._ready.set()

    def finish(self, timeout=30):
        """Stop the daemon and wait for serve to return; its exit code."""
        if self.thread.is_alive() and self.loop is not None:
            try:
                self.loop.call_soon_threadsafe(self.stop.set)
            except RuntimeError:
                pass
        self.thread.join(timeout)
        if self.error is not None:
            raise self.error
        assert not self.thread.is_alive(), "serve did not return after stop"
        return self.code

    def __exit__(self, *exc):
        self.finish()
        return False


class TelegramSetup:
    """A Bot API server, a config whose Telegram gateway talks to it, and a booted
    env whose model is the instant echo (only the symbolic provider otherwise)."""

    def __init__(self, folder, users=(5001, 5002, 5003), extra="", server=None):
        import hy  # noqa: F401
        from passepartout.providers import make_provider
        from passepartout.daemon import boot

        self.folder = Path(folder)
        self.server = server or BotAPIServer()
        self.users = list(users)
        self.config = write_config(self.folder, self.server, self.users, extra=extra)
        self.environ = daemon_environ(self.folder)
        self.env = boot(config_path=str(self.config), environ=self.environ,
                        providers=[make_provider("symbolic")])
        self.env.complete = echo_complete

    def daemon(self, **kw):
        return InProcessDaemon(self.env, **kw)

    def close(self):
        from passepartout.daemon import shutdown
        shutdown(self.env)
        self.server.stop()


# * The daemon as a process, killed and restarted

def daemon_command(config):
    """The command that runs the daemon on CONFIG: `passepartout --config CONFIG daemon`."""
    script = Path(sys.executable).parent / "passepartout"
    base = [str(script)] if script.exists() else [sys.executable, "-m", "passepartout"]
    return base + ["--config", str(config), "daemon"]


def start_daemon(config, environ, log):
    return subprocess.Popen(daemon_command(config), env=environ, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def inbox_rows(folder, state=None, table="inbox"):
    """How many rows of TABLE (the inbox unless told) the daemon's store holds
    (in STATE, if given), read from outside."""
    path = Path(folder) / "data" / "passepartout.sqlite3"
    if not path.exists():
        return 0
    query, params = f"SELECT count(*) FROM {table}", ()
    if state:
        query, params = query + " WHERE state = ?", (state,)
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            return db.execute(query, params).fetchone()[0]
    except sqlite3.Error:
        return 0


def judge_acting(server, talk, ledger):
    """judge for a model that notes each message in LEDGER before answering it:
    a message counts as answered by its echo or by the notice that its action
    was cut off by the kill (which names the message); and how many messages
    were noted more than once (actions run twice) or answered without being noted."""
    result = judge(server, talk)
    lines = Path(ledger).read_text().splitlines() if Path(ledger).exists() else []
    noted = defaultdict(int)
    for line in lines:
        noted[line] += 1
    lost = cut_off = unnoted = notices = 0
    for chat, texts in talk.items():
        got = server.texts(chat)
        for t in texts:
            told = sum(1 for g in got if "may have done part or all of its work" in g and f"'{t}'" in g)
            cut_off += told > 0
            notices += told
            if ("echo: " + t) not in got and not told:
                lost += 1
            if ("echo: " + t) in got and noted[t] == 0:
                unnoted += 1
    # a notice sent twice (the reply-to-mark window) is counted in duplicated, as an echo would be
    result.update(lost=lost, cut_off=cut_off, run_twice=sum(n - 1 for n in noted.values() if n > 1),
                  unnoted=unnoted, unexpected=result["unexpected"] - notices)
    return result


def echo_providers(model):
    """The [[providers]] table of the echo OpenAI server MODEL."""
    return f'''
[[providers]]
name = "echo"
model = "openai/echo-model"
api_base = "{model.url('echo')}"
api_key_env = "PASSEPARTOUT_TEST_ECHO_KEY"
timeout = 30
# turns of one role in a row are kept apart, so that the echo model, which
# echoes the last message, echoes the person's text alone
tool_results = "native"
'''


def run_killed(chats=50, per_chat=20, kill_at=0.4, hold=False, timeout=180.0, acting=False,
               how=signal.SIGKILL, grace=10):
    """The daemon as a process with the real cascade against the echo OpenAI
    server: killed (-9) once KILL_AT of the answers were sent, every update
    then redelivered by the Bot API server, and the daemon started again; at the
    end SIGTERM. With HOLD, the model stops answering at the kill point and the
    kill waits until every answer given so far is marked done, so that only
    model calls are in flight when it lands. With ACTING, the model first has
    each message noted in the workspace's ledger.txt by a shell action, then
    answers (judged by judge_acting). HOW is the signal that stops the first
    daemon (SIGTERM: it then has GRACE seconds to finish, and is killed if it
    has not exited 30 s later). A dict of judge's counts, the first daemon's and
    the second's exit status (after SIGTERM) and the daemon's log."""
    server = BotAPIServer()
    model = echo_openai_server()
    model.acting = acting
    folder = Path(tempfile.mkdtemp(prefix="passepartout-telegram-kill-"))
    talk = conversation(chats, per_chat)
    total = chats * per_chat
    kill_after = max(1, int(total * kill_at))
    config = write_config(folder, server, list(talk), providers=echo_providers(model), grace=grace)
    environ = daemon_environ(folder)
    out = open(folder / "daemon.out", "w+")
    procs = []
    try:
        say_all(server, talk)
        if hold:
            model.limit = kill_after
        procs.append(start_daemon(config, environ, out))
        if hold:
            # every answer given marked done and its reply marked sent (no send
            # between the server and the store), and a model call held in flight
            server.wait_for(lambda: server.answered() >= kill_after and inbox_rows(folder, "done") >= kill_after
                            and inbox_rows(folder, "sent", "outbox") >= server.answered()
                            and model.admitted > kill_after, timeout)
        else:
            server.wait_for(lambda: server.answered() >= kill_after, timeout)
        killed_at = server.answered()
        os.kill(procs[0].pid, how)
        try:
            first = procs[0].wait(30 + grace)
        except subprocess.TimeoutExpired:
            procs[0].kill()
            first = procs[0].wait(30)
        if hold:
            model.gate.set()
        server.redeliver()
        procs.append(start_daemon(config, environ, out))
        ledger = folder / "workspace" / "ledger.txt"
        score = (lambda: judge_acting(server, talk, ledger)) if acting else (lambda: judge(server, talk))
        server.wait_for(lambda: score()["lost"] == 0, timeout)
        # the first daemon may have answered everything before it left (SIGTERM):
        # the second is told to stop only once it handles the signal
        log = folder / "data" / "logs" / "daemon.log"
        server.wait_for(lambda: _read(log).count("daemon started:") >= 2, timeout)
        # what is counted once the daemon has exited includes any duplicate: a
        # SIGTERM drains what it holds before it exits
        procs[1].send_signal(signal.SIGTERM)
        code = procs[1].wait(60)
        result = score()
        out.seek(0)
        result.update(exit=code, first_exit=first, total=total, killed_at=killed_at, output=out.read(),
                      log=_read(folder / "data" / "logs" / "daemon.log"), folder=str(folder),
                      model_calls=model.echoed)
        return result
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        out.close()
        model.gate.set()
        model.stop()
        server.stop()


def _read(path):
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def bench_telegram_kill(chats=50, per_chat=20):
    """Figure: the daemon killed (-9) mid-run and restarted, every update redelivered."""
    r = run_killed(chats, per_chat)
    name = f"telegram kill -9 after {r['killed_at']} of {r['total']} answers and restart"
    return [(f"{name}: lost", r["lost"], "", "0"),
            (f"{name}: answered twice", r["duplicated"], "", "0"),
            (f"{name}: order kept in every chat", "yes" if r["order_kept"] else "NO", "", "yes"),
            (f"{name}: exit status after SIGTERM", r["exit"], "", "0")]


def bench_telegram_kill_acting(chats=50, per_chat=20, trials=3, seed=None):
    """Figure: the daemon killed (-9) at a random moment while every message has
    a shell action run before its answer, and restarted; TRIALS times."""
    import random
    rand = random.Random(seed)
    rows = []
    for n in range(trials):
        at = round(rand.uniform(0.1, 0.9), 2)
        r = run_killed(chats, per_chat, kill_at=at, acting=True)
        name = f"telegram {chats} × {per_chat} acting, kill -9 #{n + 1} after {r['killed_at']} replies"
        rows += [(f"{name}: messages lost", r["lost"], "", "0"),
                 (f"{name}: actions run twice", r["run_twice"], "", "0"),
                 (f"{name}: actions cut off by the kill, their person told", r["cut_off"], "", ""),
                 (f"{name}: answered twice (the reply-to-mark window)", r["duplicated"], "", "")]
    return rows


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        _serve_for_parent()
    else:
        for row in bench_telegram() + bench_telegram_kill():
            print(row)
