"""The request journal: what a test's clients asked and what they got, queryable from the test.

Kept only while fault injection is on (``odradek.testing.faults.enable``; broker/faults/injection.py notes each
request a wrapped handler answers). One entry per request, as JSON-ready plain values::

    {"seq": 7, "time": 1764329000.12, "api": "Produce", "api_key": 0, "version": 11,
     "client_id": "rdkafka", "correlation_id": 4, "topics": {"orders": [0, 1]},
     "elapsed_ms": 0.4, "error_code": 6, "error_codes": [6], "fate": "injected"}

``elapsed_ms`` is the time from the request's arrival to its answer (an injected delay included).
``topics`` are the topics and partitions the request's body names (by name; Fetch's topic ids are
looked up in the metadata image). ``error_codes`` are the distinct codes anywhere in the answer
(top level, per topic, per partition); ``error_code`` is the first non-zero one, or 0. ``fate`` is
"injected" (a fail rule answered), "dropped" (the connection was closed unanswered; ``error_code``
None, or the code a Produce with acks=0 would have got) or None (the handler answered). A request
without an answer (acks=0) has ``error_code`` None. The journal keeps the newest ``max_entries``.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from odradek.broker.api.request_types import CloseConnection

# Keys under which a request element names its topic, and its partitions' lists.
_TOPIC_NAME_KEYS = ("name", "topic")
_PARTITION_KEYS = ("index", "partition", "partition_index")


def request_topics(body: Mapping[str, Any], name_of: Callable[[Any], str | None]) -> dict[str, list[int]]:
    """The topics a request body names, with their partitions: its top-level lists of topic
    elements (Produce's ``topic_data``, Fetch's and most APIs' ``topics``)."""
    out: dict[str, list[int]] = {}
    for value in body.values():
        if type(value) is not list:
            continue
        for element in value:
            if type(element) is not dict:
                break
            name = next((element[k] for k in _TOPIC_NAME_KEYS if type(element.get(k)) is str and element[k]), None)
            if name is None and element.get("topic_id") is not None:
                name = name_of(element["topic_id"])
            if name is None:
                continue
            partitions = out.setdefault(name, [])
            for inner in element.values():
                if type(inner) is not list:
                    continue
                for p in inner:
                    if type(p) is int:
                        partitions.append(p)
                    elif type(p) is dict:
                        index = next((p[k] for k in _PARTITION_KEYS if type(p.get(k)) is int), None)
                        if index is not None:
                            partitions.append(index)
    return out


def error_codes(answer: Any, found: list[int]) -> list[int]:
    """Every ``error_code`` in an answer body, in the order met (records are never walked into:
    they are bytes or file regions, not dicts or lists)."""
    if type(answer) is dict:
        for key, value in answer.items():
            if key == "error_code" and isinstance(value, int):  # handlers answer ErrorCode (an IntEnum) too
                found.append(int(value))
            elif type(value) in (list, dict):
                error_codes(value, found)
    elif type(answer) is list:
        for value in answer:
            if type(value) in (list, dict):
                error_codes(value, found)
    return found


class RequestJournal:
    def __init__(self, max_entries: int) -> None:
        self._entries: deque[dict[str, Any]] = deque(maxlen=max(1, max_entries))
        self._seq = itertools.count(1)
        self._lock = threading.Lock()  # noted on the handler loop, read from the admin endpoint's thread

    def note(self, api: str, request: Any, topics: dict[str, list[int]], answer: Any, fate: str | None) -> None:
        """One answered (or unanswered) request; ``answer`` is the response body, an error code, or None
        (or a handler's CLOSE_CONNECTION: unanswered too)."""
        if answer is None or isinstance(answer, CloseConnection):
            codes: list[int] = []
            first: int | None = None
        else:
            codes = [int(answer)] if isinstance(answer, int) else error_codes(answer, [])
            first = next((c for c in codes if c != 0), 0)
        entry = {
            "seq": 0, "time": time.time(), "api": api, "api_key": request.api_key,
            "version": request.api_version, "client_id": request.client_id,
            "correlation_id": request.correlation_id,
            "elapsed_ms": round((time.monotonic() - request.received_at) * 1000, 1),
            "topics": {name: sorted(set(parts)) for name, parts in topics.items()},
            "error_code": first, "error_codes": sorted(set(codes)), "fate": fate,
        }
        with self._lock:
            entry["seq"] = next(self._seq)
            self._entries.append(entry)

    def entries(self, api: str | None = None, client_id: str | None = None,
                topic: str | None = None) -> list[dict[str, Any]]:
        """The entries, oldest first, of ``api`` (Kafka's name, any case), ``client_id`` and ``topic``."""
        with self._lock:
            entries = list(self._entries)
        return [e for e in entries
                if (api is None or e["api"].lower() == api.lower())
                and (client_id is None or e["client_id"] == client_id)
                and (topic is None or topic in e["topics"])]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
