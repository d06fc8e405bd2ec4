"""A scripted OpenAI-compatible chat server on loopback, for the cascade tests.

The first segment of the request path names the script, so one server plays
every kind of provider at once:

    http://127.0.0.1:PORT/ok/v1        answers a chat.completion with text
    http://127.0.0.1:PORT/toolcall/v1  answers with tool calls
    http://127.0.0.1:PORT/slow/v1      waits longer than a short client timeout
    http://127.0.0.1:PORT/error500/v1  HTTP 500 with an OpenAI-style error body
    http://127.0.0.1:PORT/garbage/v1   HTTP 200 whose body is not JSON
    http://127.0.0.1:PORT/empty/v1     HTTP 200 with empty content and no tool calls
    http://127.0.0.1:PORT/toolsempty/v1  empty content when the request offers tools, else
                                       as `ok` (llama-cpp-python's chatml-function-calling
                                       lets a model that chose to write a message write nothing)
    http://127.0.0.1:PORT/hang/v1      reads the request and never answers (until stop or
                                       until the client closes the connection, which it
                                       records: see `hangs_closed`)
    http://127.0.0.1:PORT/trickle/v1   answers `ok`, but sends the body one byte at a time
                                       for `trickle_seconds`: no single read waits long,
                                       the whole answer does
    http://127.0.0.1:PORT/error401/v1  HTTP 401 (any errorNNN: that status) with an
                                       OpenAI-style error body saying `error_message`
    http://127.0.0.1:PORT/live/v1      answers as the script `live` names at the time,
                                       so one provider can fail, recover and fail again
    http://127.0.0.1:PORT/ratelimit/v1 HTTP 429 with a `retry-after` header of `retry_after`
                                       seconds (a rate limit as providers announce one)
    http://127.0.0.1:PORT/html200/v1   HTTP 200 with an HTML page (a captive portal, a proxy's
                                       login page, a web server where the API should be)

Both /<script>/v1/chat/completions and /<script>/chat/completions are served.

/<script>/v1/embeddings (and /<script>/embeddings) answers with deterministic
vectors of `embedding_dims` numbers (`embedding_vector`): the character
trigrams of each lower-cased word, hashed into the vector's places, so texts
sharing words or most of a word's letters (a misspelling) come out near each
other. They stand for an embedding model's plumbing, not for its quality.
`embedding_script` "error500" fails them instead.
Every request is recorded, in arrival order, as a dict with its script, path and
parsed JSON body.

Strict mode: with `template` set to a name in TEMPLATES, the server first renders
each request's messages into a prompt through that Jinja chat template, the way
llama.cpp's Python server (llama-cpp-python) does, and records the prompt with
the request. A template that cannot render the messages fails the request as
that server does: HTTP 500 with the Jinja error as the message. The usage then
counts the prompt's words as its prompt tokens, so a part of the conversation
the template drops shows in the figures, as it does on a real server.
"""
import base64
import hashlib
import json
import math
import re
import select
import struct
import socket
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


# Two chat templates as llama-cpp-python 0.3 serves them. `chatml-function-calling`
# is its `--chat_format chatml-function-calling` (rendered with StrictUndefined):
# it reads message.content on every assistant message and renders nothing of a
# `tool` message. `smollm2` is the template SmolLM2-135M-Instruct's GGUF carries,
# which the server uses when no chat format is named (Jinja2ChatFormatter): it
# concatenates every message's role and content, so a missing or null content fails.
# `alternating` (below) stands for the templates that refuse any other order of roles.
CHATML_FUNCTION_CALLING = (
    "{% for message in messages %}"
    "<|im_start|>{{ message.role }}\n"
    "{% if message.role == 'system' %}"
    "{{ message.content }}"
    "{% if tool_calls %}"
    "\n\nYou have access to the following functions:\n"
    "{% for tool in tools %}"
    "\nfunctions.{{ tool.function.name }}:\n"
    "{{ tool.function.parameters | tojson }}"
    "\n{% endfor %}"
    "\n\nYou can respond to users messages with either a single message or one or more function calls."
    "{% endif %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% if message.role == 'user' %}"
    "{{ message.content }}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% if message.role == 'assistant' %}"
    "{% if message.content and message.content | length > 0 %}"
    "{% if tool_calls %}"
    "message:\n"
    "{% endif %}"
    "{{ message.content }}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% if 'tool_calls' in message %}"
    "{% for tool_call in message.tool_calls %}"
    "functions.{{ tool_call.function.name }}:\n"
    "{{ tool_call.function.arguments }}"
    "{% endfor %}"
    "<|im_end|>\n"
    "{% endif %}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# The template of many instruction-tuned models of the Llama 2 and Mistral kind:
# after an optional system message the roles must alternate user, assistant, user…,
# and any other role is refused (raise_exception, a ValueError on that server).
ALTERNATING = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system = messages[0]['content'] + '\n\n' %}"
    "{% else %}{% set loop_messages = messages %}{% set system = '' %}{% endif %}"
    "{{ bos_token }}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + (system if loop.first else '') + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}"
    "{% endfor %}"
)


def _raise_exception(message):
    raise ValueError(message)


def _chatml_function_calling(body):
    template = ImmutableSandboxedEnvironment(
        autoescape=jinja2.select_autoescape(["html", "xml"]),
        undefined=jinja2.StrictUndefined).from_string(CHATML_FUNCTION_CALLING)
    tools = body.get("tools") or []
    calls = bool(tools) and body.get("tool_choice") not in (None, "none")
    return template.render(messages=body.get("messages") or [], tools=tools if calls else [],
                           tool_calls=True if calls else None, add_generation_prompt=True)


def _smollm2(body):
    template = ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True).from_string(SMOLLM2)
    return template.render(messages=body.get("messages") or [], tools=body.get("tools"),
                           add_generation_prompt=True, bos_token="", eos_token="<|im_end|>")


def _alternating(body):
    template = ImmutableSandboxedEnvironment(
        loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True).from_string(ALTERNATING)
    return template.render(messages=body.get("messages") or [], tools=body.get("tools"),
                           add_generation_prompt=True, bos_token="<s>", eos_token="</s>",
                           raise_exception=_raise_exception)


TEMPLATES = {"chatml-function-calling": _chatml_function_calling, "smollm2": _smollm2,
             "alternating": _alternating}


def render(template, body):
    """The prompt the chat TEMPLATE (a name in TEMPLATES) makes of the request BODY;
    raises what the template raises."""
    return TEMPLATES[template](body if isinstance(body, dict) else {})


SCRIPTS = ("ok", "toolcall", "slow", "error500", "garbage", "empty", "toolsempty", "hang", "trickle", "live",
           "ratelimit", "html200")

HTML_PAGE = (b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head>"
             b"<body><form>Sign in to use this network</form></body></html>")


class ScriptedOpenAIServer:
    """A running server. Attributes tests may set before a request:

    reply_text      the text the `ok` (and `slow`) script answers
    replies         a deque of texts; when not empty, `ok` answers the next one
    responder       a function of the request's JSON body returning the text `ok`
                    answers, or None to answer from `replies` (a script that answers
                    each conversation by what it was told, whatever order they come in)
    usage           the usage figures every answer carries
    tool_calls      the (name, arguments-json) pairs the `toolcall` script answers
    slow_seconds    how long `slow` waits before answering (at most MAX_SLOW)
    error_message   what an `errorNNN` script other than error500 says went wrong
    live            the script `live` answers as (default "ok")
    trickle_seconds how long `trickle` takes to send its body (at most MAX_TRICKLE)
    template        strict mode: the name of a chat template in TEMPLATES every
                    request is rendered through first (None: no rendering)
    retry_after     the `retry-after` header `ratelimit` sends (seconds, as text)
    arguments_as_objects  `toolcall` sends each call's arguments as a JSON object rather
                    than a string (what some non-conformant servers do)

    and may read:

    hangs_closed    the numbers (1 for the first request) of the `hang` requests whose
                    client closed the connection while waiting; `wait_hang_closed`
                    waits for one
    most_hanging    the most `hang` requests waiting at one time (requests made
                    at once, not one after another, show as more than one)
    """

    MAX_SLOW = 5.0
    MAX_TRICKLE = 30.0

    def __init__(self):
        self.reply_text = "scripted answer"
        self.replies = deque()
        self.responder = None
        self.usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        self.tool_calls = [("shell", json.dumps({"cmd": "ls -la", "explanation": "list the files"}))]
        self.slow_seconds = 3.0
        self.error_message = "Incorrect API key provided: sk-scr***key"
        self.live = "ok"
        self.trickle_seconds = 3.0
        self.template = None
        self.embedding_dims = 64
        self.embedding_script = "ok"
        self.retry_after = "20"
        self.arguments_as_objects = False
        self.requests = []
        self.hangs_closed = []
        self.most_hanging = 0
        self._hanging = 0
        self._lock = threading.Lock()
        self._closed = threading.Condition(self._lock)
        self._stopping = threading.Event()
        self._counter = 0
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def url(self, script):
        """The api_base a client uses to reach SCRIPT."""
        return f"{self.base_url}/{script}/v1"

    def scripts_seen(self):
        """The script of every request so far, in arrival order."""
        with self._lock:
            return [r["script"] for r in self.requests]

    def wait_hang_closed(self, count=1, timeout=10.0):
        """True once COUNT `hang` requests were closed by their client, False after TIMEOUT s."""
        with self._closed:
            return self._closed.wait_for(lambda: len(self.hangs_closed) >= count, timeout)

    def stop(self):
        """Stop serving; a request still waiting in `slow` is released at once."""
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    # What each script answers, as (status, content-type, body bytes).

    def _record(self, script, path, body, prompt=None, error=None):
        with self._lock:
            self._counter += 1
            self.requests.append({"script": script, "path": path, "body": body,
                                  "prompt": prompt, "error": error})
            return self._counter

    def prompts(self):
        """The prompt of every request the template rendered, in arrival order."""
        with self._lock:
            return [r["prompt"] for r in self.requests if r["prompt"] is not None]

    def errors(self):
        """The template error of every request that could not be rendered."""
        with self._lock:
            return [r["error"] for r in self.requests if r["error"] is not None]

    def _render(self, body):
        """(prompt, error) of BODY in strict mode; (None, None) otherwise."""
        if not self.template:
            return None, None
        try:
            return render(self.template, body), None
        except Exception as e:  # what llama-cpp-python's server answers with a 500
            return None, str(e)

    def _next_text(self, body=None):
        responder = self.responder
        if responder is not None and body is not None:
            text = responder(body)
            if text is not None:
                return text
        with self._lock:
            return self.replies.popleft() if self.replies else self.reply_text

    def _completion(self, body, n, message, finish_reason="stop"):
        usage = dict(self.usage)
        prompt = self.requests[n - 1]["prompt"] if 0 < n <= len(self.requests) else None
        if prompt is not None:
            usage["prompt_tokens"] = len(prompt.split())
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return {
            "id": f"chatcmpl-scripted-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": (body or {}).get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": usage,
        }

    def hang(self, connection, n):
        """Wait, answering nothing, until the server stops or the client closes
        CONNECTION (then the request N is recorded in `hangs_closed`)."""
        with self._lock:
            self._hanging += 1
            self.most_hanging = max(self.most_hanging, self._hanging)
        try:
            return self._hang(connection, n)
        finally:
            with self._lock:
                self._hanging -= 1

    def _hang(self, connection, n):
        while not self._stopping.is_set():
            readable, _, _ = select.select([connection], [], [], 0.05)
            if not readable:
                continue
            try:
                gone = connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                gone = True
            if gone:
                with self._closed:
                    self.hangs_closed.append(n)
                    self._closed.notify_all()
                return None
            self._stopping.wait(0.05)  # the client sent more: it is still there
        return 503, "application/json", _json({"error": {"message": "stopped"}})

    def trickle(self, body, n):
        """Answer as `ok` does, the body a byte at a time over `trickle_seconds`
        (JSON allows the leading spaces that pad it)."""
        message = {"role": "assistant", "content": self._next_text()}
        answer = _json(self._completion(body, n, message))
        seconds = min(self.trickle_seconds, self.MAX_TRICKLE)
        pad = max(1, int(seconds / 0.1))
        return 200, "application/json", b" " * pad + answer, pad

    def answer(self, script, body, n):
        if script == "live":
            script = self.live
        if script == "toolsempty":
            script = "empty" if (body or {}).get("tools") else "ok"
        if script == "hang":
            self._stopping.wait()
            return 503, "application/json", _json({"error": {"message": "stopped"}})
        if script in ("ok", "slow"):
            if script == "slow":
                self._stopping.wait(min(self.slow_seconds, self.MAX_SLOW))
            message = {"role": "assistant", "content": self._next_text(body)}
            return 200, "application/json", _json(self._completion(body, n, message))
        if script == "toolcall":
            calls = [{"id": f"call_{n}_{i}", "type": "function",
                      "function": {"name": name,
                                   "arguments": json.loads(args) if self.arguments_as_objects else args}}
                     for i, (name, args) in enumerate(self.tool_calls)]
            message = {"role": "assistant", "content": None, "tool_calls": calls}
            return 200, "application/json", _json(self._completion(body, n, message, "tool_calls"))
        if script == "empty":
            message = {"role": "assistant", "content": ""}
            return 200, "application/json", _json(self._completion(body, n, message))
        if script == "error500":
            error = {"error": {"message": "the scripted server failed on purpose",
                               "type": "server_error", "param": None, "code": "internal_error"}}
            return 500, "application/json", _json(error)
        status = script[len("error"):]
        if script.startswith("error") and status.isdigit() and 400 <= int(status) <= 599:
            error = {"error": {"message": self.error_message, "type": "scripted_error",
                               "param": None, "code": status}}
            return int(status), "application/json", _json(error)
        if script == "garbage":
            return 200, "application/json", b"<html>this is not json</html>"
        error = {"error": {"message": f"no script called {script!r}", "type": "invalid_request_error",
                           "param": None, "code": "not_found"}}
        return 404, "application/json", _json(error)


def _json(value):
    return json.dumps(value).encode("utf-8")


def embedding_vector(text, dims=64):
    """The scripted server's vector of TEXT: its words' character trigrams hashed into DIMS places."""
    v = [0.0] * dims
    for word in re.findall(r"[^\W_]+", text.lower()):
        padded = f"^{word}$"
        for i in range(max(1, len(padded) - 2)):
            h = hashlib.blake2b(padded[i:i + 3].encode("utf-8"), digest_size=4).digest()
            n = int.from_bytes(h, "little")
            v[n % dims] += 1.0 if (n >> 16) & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / norm for x in v]


def _handler_for(server):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            script = parts[0] if parts else ""
            if parts[1:] in (["v1", "embeddings"], ["embeddings"]):
                self._embeddings(script)
                return
            if parts[1:] not in (["v1", "chat", "completions"], ["chat", "completions"]):
                self._send(404, "application/json", _json({"error": {"message": "unknown path"}}))
                return
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"null")
            except ValueError:
                body = None
            prompt, error = server._render(body)
            n = server._record(script, self.path, body, prompt, error)
            if error is not None:
                failure = {"error": {"message": error, "type": "internal_server_error",
                                     "param": None, "code": None}}
                self._send(500, "application/json", _json(failure))
                return
            now = server.live if script == "live" else script
            if now == "hang":
                answer = server.hang(self.connection, n)
                if answer:
                    self._send(*answer)
                return
            if now == "trickle":
                status, ctype, payload, pad = server.trickle(body, n)
                self._send(status, ctype, payload, trickle=pad)
                return
            if now == "ratelimit":
                error = {"error": {"message": "Rate limit reached for requests", "type": "requests",
                                   "param": None, "code": "rate_limit_exceeded"}}
                self._send(429, "application/json", _json(error),
                           headers={"retry-after": server.retry_after})
                return
            if now == "html200":
                self._send(200, "text/html; charset=utf-8", HTML_PAGE)
                return
            status, ctype, payload = server.answer(script, body, n)
            self._send(status, ctype, payload)

        def _embeddings(self, script):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null") if length else None
            server._record(script, self.path, body)
            if script == "error500" or server.embedding_script == "error500":
                self._send(500, "application/json",
                           _json({"error": {"message": "the scripted server failed on purpose"}}))
                return
            texts = body.get("input") if isinstance(body, dict) else None
            texts = [texts] if isinstance(texts, str) else list(texts or [])
            data = []
            for i, text in enumerate(texts):
                vector = embedding_vector(str(text), server.embedding_dims)
                if body.get("encoding_format") == "base64":
                    vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
                data.append({"object": "embedding", "index": i, "embedding": vector})
            tokens = sum(len(str(t).split()) for t in texts)
            self._send(200, "application/json",
                       _json({"object": "list", "data": data, "model": body.get("model", "scripted"),
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}))

        def _send(self, status, ctype, payload, trickle=0, headers=None):
            try:
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                for i in range(trickle):  # the padding, a byte every tenth of a second
                    self.wfile.write(payload[i:i + 1])
                    self.wfile.flush()
                    if server._stopping.wait(0.1):
                        break
                self.wfile.write(payload[trickle:])
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout): nothing to answer

    return Handler
