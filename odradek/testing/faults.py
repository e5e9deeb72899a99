"""A test's handle on a broker's fault injection and request journal: ``b.faults`` and ``b.journal``.

The broker of odradek.testing.single_broker is a subprocess, so these talk to its admin endpoint
(broker/faults/admin_endpoint.py, loopback HTTP with JSON) with urllib alone. A broker started without
``faults=True`` has neither the endpoint nor the rules: every call raises ``FaultsDisabledError``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlencode


class FaultsDisabledError(RuntimeError):
    """The broker was started without fault injection (``running_broker(faults=True)`` turns it on)."""


class FaultRequestError(ValueError):
    """The broker refused a rule (unknown api or error code, bad count ...); the message is its reason."""


class _Endpoint:
    def __init__(self, base_url: str | None) -> None:
        self.base_url = base_url

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        if self.base_url is None:
            raise FaultsDisabledError("fault injection is off for this broker: start it with faults=True "
                                      "(odradek.testing.faults.enable=true and odradek.testing.faults.port)")
        data = None if body is None else json.dumps({k: v for k, v in body.items() if v is not None}).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            reason = json.loads(exc.read() or b"{}").get("error", str(exc))
            raise FaultRequestError(reason) from None


class Faults(_Endpoint):
    """Rules for the broker's next answers (see broker/faults/injection.py for what each does)."""

    def fail_next(self, api: str | int, code: str | int, count: int = 1, topic: str | None = None,
                  partition: int | None = None, client_id: str | None = None) -> dict[str, Any]:
        """Answer the next ``count`` matching requests with ``code`` (a name such as
        "NOT_LEADER_OR_FOLLOWER", or a number) instead of handling them."""
        return self._call("POST", "/faults/fail", {"api": api, "code": code, "count": count, "topic": topic,
                                                   "partition": partition, "client_id": client_id})

    def delay(self, ms: int, api: str | int | None = None, count: int | None = None, topic: str | None = None,
              partition: int | None = None, client_id: str | None = None) -> dict[str, Any]:
        """Handle matching requests ``ms`` later (``count`` of them, or every one until ``clear``)."""
        return self._call("POST", "/faults/delay", {"ms": ms, "api": api, "count": count, "topic": topic,
                                                    "partition": partition, "client_id": client_id})

    def drop_connection_after(self, after: int, api: str | int | None = None,
                              client_id: str | None = None) -> dict[str, Any]:
        """Answer ``after`` more matching requests, then close the next one's connection unanswered."""
        return self._call("POST", "/faults/drop", {"after": after, "api": api, "client_id": client_id})

    def pause(self) -> None:
        """Handle no request until ``resume`` (those that arrive wait, then run in order)."""
        self._call("POST", "/faults/pause", {})

    def resume(self) -> None:
        self._call("POST", "/faults/resume", {})

    def rules(self) -> list[dict[str, Any]]:
        """The rules still pending (a fail rule with its ``remaining`` count)."""
        rules: list[dict[str, Any]] = self._call("GET", "/faults")["rules"]
        return rules

    def clear(self) -> None:
        """Remove every rule and resume."""
        self._call("DELETE", "/faults")


class Journal(_Endpoint):
    """The requests the broker answered (broker/faults/request_journal.py for an entry's fields)."""

    def entries(self, api: str | None = None, client_id: str | None = None,
                topic: str | None = None) -> list[dict[str, Any]]:
        query = urlencode({k: v for k, v in (("api", api), ("client_id", client_id), ("topic", topic))
                           if v is not None})
        entries: list[dict[str, Any]] = self._call("GET", "/journal" + (f"?{query}" if query else ""))["entries"]
        return entries

    def clear(self) -> None:
        self._call("DELETE", "/journal")
