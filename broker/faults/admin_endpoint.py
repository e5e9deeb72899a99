"""The fault-injection admin endpoint: HTTP with JSON bodies, for tests in any language.

Served only when ``odradek.testing.faults.enable=true`` and ``odradek.testing.faults.port`` is 0 or
more (0 = any free port), on ``odradek.testing.faults.host`` (127.0.0.1 unless set: it lets anyone
who reaches it break the broker's answers). A daemon thread of its own serves it; the rules and the
journal are thread-safe (broker/faults/injection.py, broker/faults/request_journal.py).

    POST   /faults/fail    {"api": "Produce", "code": "NOT_LEADER_OR_FOLLOWER", "count": 3,
                            "topic": "t", "partition": 0, "client_id": "c"}      (code: name or number)
    POST   /faults/delay   {"ms": 500, "api": "Fetch", "count": 2, "topic": ..., "client_id": ...}
    POST   /faults/drop    {"after": 5, "api": "Metadata", "client_id": ...}
    POST   /faults/pause   {}          POST /faults/resume  {}
    GET    /faults         {"rules": [...], "paused": false}
    DELETE /faults         every rule removed, answers resumed
    GET    /journal?api=Produce&client_id=c&topic=t    {"entries": [...]}  (broker/faults/request_journal.py)
    DELETE /journal

A POST answers 200 with the rule it added. A bad rule (unknown api or code, a count below 1, a
partition without its topic, a field this rule does not take, a body that is not a JSON object, over
64 KiB, or whose Content-Length is not a whole number)
answers 400 ``{"error": "..."}`` and adds nothing; an unknown path 404.
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from odradek.broker.faults.injection import FaultInjector, FaultRuleError

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 << 10

# Each POST path: the injector method and the JSON fields it takes.
_ADDERS = {
    "/faults/fail": ("fail_next", {"api", "code", "count", "topic", "partition", "client_id"}),
    "/faults/delay": ("delay", {"ms", "api", "count", "topic", "partition", "client_id"}),
    "/faults/drop": ("drop_connection_after", {"after", "api", "client_id"}),
}


class FaultAdminServer:
    def __init__(self, injector: FaultInjector, host: str, port: int) -> None:
        handler = type("Handler", (_Handler,), {"injector": injector})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-admin", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def shutdown(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Handler(BaseHTTPRequestHandler):
    injector: FaultInjector

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("fault admin %s: " + format, self.client_address[0], *args)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/faults":
            self._json(200, {"rules": self.injector.rules(), "paused": self.injector.paused})
        elif url.path == "/journal":
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            unknown = set(query) - {"api", "client_id", "topic"}
            if unknown:
                self._json(400, {"error": f"unknown query parameter(s): {', '.join(sorted(unknown))}"})
                return
            self._json(200, {"entries": self.injector.journal.entries(**query)})
        else:
            self._json(404, {"error": f"no such path: {url.path}"})

    def do_DELETE(self) -> None:
        path = urlsplit(self.path).path
        if path == "/faults":
            self.injector.clear()
        elif path == "/journal":
            self.injector.journal.clear()
        else:
            self._json(404, {"error": f"no such path: {path}"})
            return
        self._json(200, {})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        try:
            body = self._body()
            if path == "/faults/pause":
                self.injector.pause()
                self._json(200, {"paused": True})
            elif path == "/faults/resume":
                self.injector.resume()
                self._json(200, {"paused": False})
            elif path in _ADDERS:
                method, fields = _ADDERS[path]
                unknown = set(body) - fields
                if unknown:
                    raise FaultRuleError(f"unknown field(s) for {path}: {', '.join(sorted(unknown))}")
                self._json(200, getattr(self.injector, method)(**body))
            else:
                self._json(404, {"error": f"no such path: {path}"})
        except (FaultRuleError, TypeError) as exc:  # TypeError: a required field missing
            self._json(400, {"error": str(exc)})

    def _body(self) -> dict[str, Any]:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:  # read(-1) would wait for the client to close
            raise FaultRuleError("Content-Length must be a whole number, 0 or more")
        if length > MAX_BODY_BYTES:
            raise FaultRuleError(f"body over {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            raise FaultRuleError(f"body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise FaultRuleError("body must be a JSON object")
        return body

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
