"""A signal-cli-rest-api server on loopback, for the Signal gateway tests.

It speaks the endpoints the gateway uses, as the real server does in its
normal or native mode:

    GET  /v1/about              versions, build, mode, version
    GET  /v1/accounts           the numbers registered here (the one ACCOUNT)
    GET  /v1/receive/{number}   the queued items of that account, removed as
                                they are returned; waits up to `timeout`
                                seconds (capped by `max_wait`) for one to arrive
    POST /v2/send               {"message", "number", "recipients"} → 201
                                {"timestamp"}; 400 {"error"} when malformed

Errors on demand: `fail(endpoint, kind, times)` makes the next TIMES requests
to ENDPOINT ("about", "receive", "send") answer with KIND instead:

    "500"      HTTP 500 with an {"error"} body
    "400"      HTTP 400 with an {"error"} body
    "garbage"  HTTP 200 whose body is not JSON
    "object"   HTTP 200 whose body is a JSON object, not a list
    "drop"     the connection is closed without an answer

A failed request leaves the queue as it was. Every request is recorded in
`requests` (method, path, query, body), every accepted send in `sent`, and
every receive that returned items in `returned`, as (time.perf_counter() once
the answer was written, the items): the moment those items exist nowhere else.
"""
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

ENDPOINTS = ("about", "accounts", "receive", "send")
KINDS = ("500", "400", "garbage", "object", "drop")


class _Server(ThreadingHTTPServer):
    """A threading HTTP server that takes a client going away mid-request (a
    daemon killed -9 during its long poll) in its stride."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def free_port():
    """A loopback port nothing listens on (for a server that starts later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SignalServer:
    """A running server for ACCOUNT. `mode` is what /v1/about reports."""

    def __init__(self, account="+15550001111", port=0, mode="normal"):
        self.account = account
        self.mode = mode
        self.max_wait = 0.2
        self.requests = []
        self.sent = []
        self.returned = []
        self._queue = []
        self._faults = {e: [] for e in ENDPOINTS}
        self._outages = {}
        self._clock = 1_700_000_000_000
        self._cond = threading.Condition()
        self._httpd = _Server(("127.0.0.1", port), _handler_for(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    # * What tests do

    def queue(self, *items):
        """Queue received ITEMS (see `message` and friends) for the account."""
        with self._cond:
            self._queue.extend(items)
            self._cond.notify_all()

    def queued(self):
        with self._cond:
            return list(self._queue)

    def fail(self, endpoint, kind, times=1, after=0):
        """Make TIMES requests to ENDPOINT fail as KIND, once AFTER more have been answered."""
        assert endpoint in ENDPOINTS and kind in KINDS, (endpoint, kind)
        with self._cond:
            self._faults[endpoint].extend([None] * after + [kind] * times)

    def paths(self, endpoint=None):
        """The paths requested so far, oldest first."""
        with self._cond:
            return [r["path"] for r in self.requests
                    if endpoint is None or _endpoint(r["method"], r["path"]) == endpoint]

    def wait_sent(self, n, timeout=5.0):
        """Wait until at least N messages were sent; the sent messages."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.sent) < n and time.monotonic() < deadline:
                self._cond.wait(0.05)
            return list(self.sent)

    def wait_returned(self, n=1, timeout=5.0):
        """Wait until N receives have returned items; `returned`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.returned) < n and time.monotonic() < deadline:
                self._cond.wait(0.01)
            return list(self.returned)

    def wait_for(self, predicate, timeout=5.0):
        """Wait until PREDICATE() is true; its last value."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value or time.monotonic() >= deadline:
                return value
            time.sleep(0.02)

    def stop(self):
        with self._cond:
            self.max_wait = 0
            self._cond.notify_all()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    # * Items as signal-cli writes them

    def _timestamp(self):
        with self._cond:
            self._clock += 1
            return self._clock

    def _envelope(self, source, uuid, name, timestamp, **content):
        envelope = {"source": source or uuid, "sourceNumber": source, "sourceUuid": uuid,
                    "sourceName": name, "sourceDevice": 1,
                    "timestamp": timestamp or self._timestamp()}
        envelope.update(content)
        return {"envelope": envelope, "account": self.account}

    def message(self, source, text, timestamp=None, name="Someone", uuid=None,
                attachments=None, group=None, **extra):
        """A data message from SOURCE saying TEXT."""
        timestamp = timestamp or self._timestamp()
        data = {"timestamp": timestamp, "message": text, "expiresInSeconds": 0,
                "viewOnce": False}
        if attachments:
            data["attachments"] = attachments
        if group:
            data["groupInfo"] = {"groupId": group, "type": "DELIVER"}
        data.update(extra)
        return self._envelope(source, uuid or "0d3f7a52-9c1e-4b8a-a3f2-5e6d7c8b9a01", name,
                              timestamp, dataMessage=data)

    def receipt(self, source):
        return self._envelope(source, None, None, None, receiptMessage={
            "when": self._timestamp(), "isDelivery": True, "isRead": False,
            "timestamps": [self._clock - 1]})

    def typing(self, source):
        return self._envelope(source, None, None, None,
                              typingMessage={"action": "STARTED", "timestamp": self._timestamp()})

    # * Answers

    def outage(self, endpoint, kind, seconds):
        """Make every request to ENDPOINT fail as KIND for the next SECONDS."""
        assert endpoint in ENDPOINTS and kind in KINDS, (endpoint, kind)
        with self._cond:
            self._outages[endpoint] = (kind, time.monotonic() + seconds)

    def _fault(self, endpoint):
        with self._cond:
            faults = self._faults[endpoint]
            if faults:
                return faults.pop(0)
            outage = self._outages.get(endpoint)
            return outage[0] if outage and time.monotonic() < outage[1] else None

    def _receive(self, number, query):
        if number != self.account:
            return 400, {"error": f"User {number} is not registered."}
        try:
            timeout = int(query.get("timeout", ["1"])[0])
            limit = int(query.get("max_messages", ["0"])[0])
        except ValueError:
            return 400, {"error": "Couldn't process request - timeout needs to be numeric!"}
        deadline = time.monotonic() + min(timeout, self.max_wait)
        with self._cond:
            while not self._queue and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            n = len(self._queue) if limit <= 0 else min(limit, len(self._queue))
            items, self._queue = self._queue[:n], self._queue[n:]
        return 200, items

    def _send(self, body):
        if not isinstance(body, dict):
            return 400, {"error": "Couldn't process request - invalid request"}
        message, number, recipients = body.get("message"), body.get("number"), body.get("recipients")
        if not isinstance(message, str) or not message:
            return 400, {"error": "Couldn't process request - message missing"}
        if number != self.account:
            return 400, {"error": f"User {number} is not registered."}
        if not (isinstance(recipients, list) and recipients
                and all(isinstance(r, str) for r in recipients)):
            return 400, {"error": "Couldn't process request - please provide at least one recipient"}
        with self._cond:
            self.sent.append({"message": message, "number": number, "recipients": recipients})
            self._cond.notify_all()
        return 201, {"timestamp": str(self._timestamp())}

    def _about(self):
        return 200, {"versions": ["v1", "v2"], "build": 2, "mode": self.mode,
                     "version": "0.92", "capabilities": {"v2/send": ["quotes", "mentions"]}}


def _endpoint(method, path):
    if method == "GET" and path == "/v1/about":
        return "about"
    if method == "GET" and path == "/v1/accounts":
        return "accounts"
    if method == "GET" and path.startswith("/v1/receive/"):
        return "receive"
    if method == "POST" and path == "/v2/send":
        return "send"
    return None


def _handler_for(server):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _answer(self, status, body):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _serve(self, method):
            url = urlsplit(self.path)
            path = url.path
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            query = parse_qs(url.query)
            with server._cond:
                server.requests.append({"method": method, "path": path, "query": query,
                                        "body": body})
            endpoint = _endpoint(method, path)
            if endpoint is None:
                return self._answer(404, {"error": "not found"})
            fault = server._fault(endpoint)
            if fault == "drop":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault in ("500", "400"):
                return self._answer(int(fault), {"error": f"scripted {fault}"})
            if fault == "garbage":
                return self._answer(200, b"[{\"envelope\": {\"source\": <html>oops")
            if fault == "object":
                return self._answer(200, {"unexpected": True})
            if endpoint == "about":
                return self._answer(*server._about())
            if endpoint == "accounts":
                return self._answer(200, [server.account])
            if endpoint == "receive":
                number = unquote(path[len("/v1/receive/"):])
                status, items = server._receive(number, query)
                self._answer(status, items)
                if status == 200 and items:
                    with server._cond:
                        server.returned.append((time.perf_counter(), items))
                        server._cond.notify_all()
                return
            return self._answer(*server._send(body))

        def do_GET(self):
            self._serve("GET")

        def do_POST(self):
            self._serve("POST")

    return Handler
