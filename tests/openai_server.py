"""A scripted OpenAI-compatible chat server on loopback, for the cascade tests.

The first segment of the request path names the script, so one server plays
every kind of provider at once:

    http://127.0.0.1:PORT/ok/v1        answers a chat.completion with text
    http://127.0.0.1:PORT/toolcall/v1  answers with tool calls
    http://127.0.0.1:PORT/slow/v1      waits longer than a short client timeout
    http://127.0.0.1:PORT/error500/v1  HTTP 500 with an OpenAI-style error body
    http://127.0.0.1:PORT/garbage/v1   HTTP 200 whose body is not JSON
    http://127.0.0.1:PORT/empty/v1     HTTP 200 with empty content and no tool calls
    http://127.0.0.1:PORT/hang/v1      reads the request and never answers (until stop)
    http://127.0.0.1:PORT/error401/v1  HTTP 401 (any errorNNN: that status) with an
                                       OpenAI-style error body saying `error_message`
    http://127.0.0.1:PORT/live/v1      answers as the script `live` names at the time,
                                       so one provider can fail, recover and fail again

Both /<script>/v1/chat/completions and /<script>/chat/completions are served.
Every request is recorded, in arrival order, as a dict with its script, path and
parsed JSON body.
"""
import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


SCRIPTS = ("ok", "toolcall", "slow", "error500", "garbage", "empty", "hang", "live")


class ScriptedOpenAIServer:
    """A running server. Attributes tests may set before a request:

    reply_text      the text the `ok` (and `slow`) script answers
    replies         a deque of texts; when not empty, `ok` answers the next one
    usage           the usage figures every answer carries
    tool_calls      the (name, arguments-json) pairs the `toolcall` script answers
    slow_seconds    how long `slow` waits before answering (at most MAX_SLOW)
    error_message   what an `errorNNN` script other than error500 says went wrong
    live            the script `live` answers as (default "ok")
    """

    MAX_SLOW = 5.0

    def __init__(self):
        self.reply_text = "scripted answer"
        self.replies = deque()
        self.usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        self.tool_calls = [("shell", json.dumps({"cmd": "ls -la", "explanation": "list the files"}))]
        self.slow_seconds = 3.0
        self.error_message = "Incorrect API key provided: sk-scr***key"
        self.live = "ok"
        self.requests = []
        self._lock = threading.Lock()
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

    def _next_text(self):
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

    def answer(self, script, body, n):
        if script == "live":
            script = self.live
        if script == "hang":
            self._stopping.wait()
            return 503, "application/json", _json({"error": {"message": "stopped"}})
        if script in ("ok", "slow"):
            if script == "slow":
                self._stopping.wait(min(self.slow_seconds, self.MAX_SLOW))
            message = {"role": "assistant", "content": self._next_text()}
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
            status, ctype, payload = server.answer(script, body, n)
            self._send(status, ctype, payload)

        def _send(self, status, ctype, payload):
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout): nothing to answer

    return Handler
