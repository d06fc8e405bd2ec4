"""A scripted OpenAI-compatible chat server on loopback, for the cascade tests.

The first segment of the request path names the script, so one server plays
every kind of provider at once:

    http://127.0.0.1:PORT/ok/v1        answers a chat.completion with text
    http://127.0.0.1:PORT/toolcall/v1  answers with tool calls
    http://127.0.0.1:PORT/slow/v1      waits longer than a short client timeout
    http://127.0.0.1:PORT/error500/v1  HTTP 500 with an OpenAI-style error body
    http://127.0.0.1:PORT/garbage/v1   HTTP 200 whose body is not JSON
    http://127.0.0.1:PORT/empty/v1     HTTP 200 with empty content and no tool calls
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

Both /<script>/v1/chat/completions and /<script>/chat/completions are served.
Every request is recorded, in arrival order, as a dict with its script, path and
parsed JSON body.
"""
import json
import select
import socket
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


SCRIPTS = ("ok", "toolcall", "slow", "error500", "garbage", "empty", "hang", "trickle", "live")


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

    and may read:

    hangs_closed    the numbers (1 for the first request) of the `hang` requests whose
                    client closed the connection while waiting; `wait_hang_closed`
                    waits for one
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
        self.requests = []
        self.hangs_closed = []
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

    def _record(self, script, path, body):
        with self._lock:
            self._counter += 1
            self.requests.append({"script": script, "path": path, "body": body})
            return self._counter

    def _next_text(self, body=None):
        responder = self.responder
        if responder is not None and body is not None:
            text = responder(body)
            if text is not None:
                return text
        with self._lock:
            return self.replies.popleft() if self.replies else self.reply_text

    def _completion(self, body, n, message, finish_reason="stop"):
        return {
            "id": f"chatcmpl-scripted-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": (body or {}).get("model", "scripted"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": dict(self.usage),
        }

    def hang(self, connection, n):
        """Wait, answering nothing, until the server stops or the client closes
        CONNECTION (then the request N is recorded in `hangs_closed`)."""
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
                      "function": {"name": name, "arguments": args}}
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


def _handler_for(server):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            parts = [p for p in self.path.split("?")[0].split("/") if p]
            script = parts[0] if parts else ""
            if parts[1:] not in (["v1", "chat", "completions"], ["chat", "completions"]):
                self._send(404, "application/json", _json({"error": {"message": "unknown path"}}))
                return
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"null")
            except ValueError:
                body = None
            n = server._record(script, self.path, body)
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
            status, ctype, payload = server.answer(script, body, n)
            self._send(status, ctype, payload)

        def _send(self, status, ctype, payload, trickle=0):
            try:
                self.send_response(status)
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
