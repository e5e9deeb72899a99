"""Fault injection for tests: answer requests with an error, late, not at all, or after a pause.

franz-go's kfake lets a Go test make a fake broker fail chosen requests; this gives the same to tests
of any language against a real Odradek. Off unless ``odradek.testing.faults.enable=true``: then the
server wraps every handler of the registry (``FaultInjector.wrap_handlers``) before the dispatcher
sees it, so with the key off the request path is exactly what it is without this module (no test,
no attribute, nothing wrapped).

The rules, each matched against a request's api, client id and the topics/partitions its body names:

- fail: the next ``count`` matching requests get the handler's own ``error_response(request, code)``
  (every partition of the request answered with ``code``), without being handled; the four APIs
  whose handlers have none get Kafka's error answer from broker/faults/answers.py. A Produce with
  acks=0 gets no answer; its connection is closed instead, as Kafka does when such a produce fails.
- delay: matching requests are handled ``ms`` later (``count`` of them, or all until cleared).
- drop: after ``after`` more matching requests are answered, the next one closes its connection
  unanswered (one-shot).
- pause: no request is handled until resume; those that arrived meanwhile are then handled in order.

Rules are added from another thread (the admin endpoint, broker/faults/admin_endpoint.py) under a lock; the
handler loop matches under the same lock. Every request that goes through a wrapped handler is also
noted in the request journal (broker/faults/request_journal.py) with its answer's error codes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import itertools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.broker.api.registry import HandlerSpec
from odradek.broker.api.request_types import CLOSE_CONNECTION
from odradek.broker.faults.answers import FALLBACK_ERROR_RESPONSES
from odradek.broker.faults.request_journal import RequestJournal, request_topics
from odradek.protocol.errors import ErrorCode, KafkaApiError

PRODUCE_KEY = 0


class FaultRuleError(ValueError):
    """A rule that names an unknown api or error code, or a negative count or time."""


@dataclass
class Rule:
    """One fault; ``None`` filters match anything."""

    kind: str  # "fail", "delay" or "drop"
    id: int
    api_key: int | None = None
    client_id: str | None = None
    topic: str | None = None
    partition: int | None = None
    code: int = 0  # fail
    ms: int = 0  # delay
    remaining: int | None = None  # fail/delay: requests left (None: until cleared); drop: answered before the drop

    def matches(self, api_key: int, client_id: str | None, topics: Mapping[str, list[int]]) -> bool:
        if self.api_key is not None and self.api_key != api_key:
            return False
        if self.client_id is not None and self.client_id != client_id:
            return False
        if self.topic is not None:
            partitions = topics.get(self.topic)
            if partitions is None:
                return False
            if self.partition is not None and self.partition not in partitions:
                return False
        return True

    def describe(self, names: Mapping[int, str]) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["api"] = None if self.api_key is None else names.get(self.api_key)
        return out


class FaultInjector:
    """The rules and the journal of one broker; ``wrap_handlers`` puts them in its request path."""

    def __init__(self, handlers: Mapping[int, HandlerSpec], journal_max_entries: int,
                 topic_name_of: Callable[[Any], str | None] = lambda _id: None) -> None:
        self._names = {key: spec.name for key, spec in handlers.items()}
        self._keys = {spec.name.lower(): key for key, spec in handlers.items()}
        self._topic_name_of = topic_name_of
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._resumed: asyncio.Event | None = None  # set while not paused; made on the handler loop
        self._paused = False
        self.journal = RequestJournal(journal_max_entries)

    # --- rules (any thread) -----------------------------------------------------------------------

    def api_key(self, api: str | int | None) -> int | None:
        """An api's key from its Kafka name (any case) or key; None stays None (every api)."""
        if api is None:
            return None
        if isinstance(api, int) and not isinstance(api, bool):
            key = api
        elif isinstance(api, str) and api.lower() in self._keys:
            key = self._keys[api.lower()]
        else:
            raise FaultRuleError(f"unknown api {api!r}")
        if key not in self._names:
            raise FaultRuleError(f"api key {key} is not served by this broker")
        return key

    @staticmethod
    def error_code(code: str | int) -> int:
        try:
            if isinstance(code, str):
                return int(ErrorCode[code.upper()])
            if isinstance(code, bool) or not isinstance(code, int):
                raise KeyError(code)
            return int(ErrorCode(code))
        except (KeyError, ValueError):
            raise FaultRuleError(f"unknown error code {code!r}") from None

    def fail_next(self, api: str | int, code: str | int, count: int = 1, topic: str | None = None,
                  partition: int | None = None, client_id: str | None = None) -> dict[str, Any]:
        code = self.error_code(code)
        if code == 0:
            raise FaultRuleError("code 0 (NONE) is no error to inject")
        return self._add(Rule("fail", 0, self.api_key(api), client_id, topic, partition,
                              code=code, remaining=_count(count, "count", 1)))

    def delay(self, ms: int, api: str | int | None = None, count: int | None = None, topic: str | None = None,
              partition: int | None = None, client_id: str | None = None) -> dict[str, Any]:
        return self._add(Rule("delay", 0, self.api_key(api), client_id, topic, partition, ms=_count(ms, "ms"),
                              remaining=None if count is None else _count(count, "count", 1)))

    def drop_connection_after(self, after: int, api: str | int | None = None,
                              client_id: str | None = None) -> dict[str, Any]:
        return self._add(Rule("drop", 0, self.api_key(api), client_id, remaining=_count(after, "after")))

    def _add(self, rule: Rule) -> dict[str, Any]:
        if rule.partition is not None and rule.topic is None:
            raise FaultRuleError("a partition needs its topic")
        for what, value, kind in (("topic", rule.topic, str), ("client_id", rule.client_id, str),
                                  ("partition", rule.partition, int)):
            if value is not None and (type(value) is not kind):
                raise FaultRuleError(f"{what} must be a {kind.__name__} (got {value!r})")
        with self._lock:
            rule.id = next(self._ids)
            self._rules.append(rule)
        return rule.describe(self._names)

    def rules(self) -> list[dict[str, Any]]:
        with self._lock:
            return [rule.describe(self._names) for rule in self._rules]

    def clear(self) -> None:
        """Remove every rule and resume."""
        with self._lock:
            self._rules.clear()
        self.resume()

    def pause(self) -> None:
        with self._lock:
            self._paused = True
        self._on_loop(self._clear_resumed)

    def resume(self) -> None:
        with self._lock:
            self._paused = False
        self._on_loop(self._set_resumed)

    @property
    def paused(self) -> bool:
        return self._paused

    def _on_loop(self, fn: Callable[[], None]) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(fn)

    def _clear_resumed(self) -> None:
        if self._resumed is not None and self._paused:
            self._resumed.clear()

    def _set_resumed(self) -> None:
        if self._resumed is not None and not self._paused:
            self._resumed.set()

    # --- the request path (handler loop) ----------------------------------------------------------

    def wrap_handlers(self, handlers: Mapping[int, HandlerSpec]) -> dict[int, HandlerSpec]:
        """The registry with every handler run through ``_handle``. A request dropped here is
        answered CLOSE_CONNECTION, as a handler closes one: only the dispatcher touches connections."""
        return {key: dataclasses.replace(spec, handle=functools.partial(self._handle, spec, spec.handle))
                for key, spec in handlers.items()}

    def _handle(self, spec: HandlerSpec, handle: Callable[[Any], Any], request: Any) -> Any:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._resumed = asyncio.Event()
            if not self._paused:
                self._resumed.set()
        if self._paused:
            return self._after_pause(spec, handle, request)
        return self._apply(spec, handle, request)

    async def _after_pause(self, spec: HandlerSpec, handle: Callable[[Any], Any], request: Any) -> Any:
        assert self._resumed is not None
        while self._paused:
            # Cleared here too: pause() clears it through the loop, so a request arriving before
            # that callback runs would otherwise find it still set and spin without yielding.
            self._resumed.clear()
            await self._resumed.wait()
        result = self._apply(spec, handle, request)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _apply(self, spec: HandlerSpec, handle: Callable[[Any], Any], request: Any) -> Any:
        topics = request_topics(request.body, self._topic_name_of)
        fail = delay = None
        drop = False
        with self._lock:
            for rule in list(self._rules):
                if not rule.matches(request.api_key, request.client_id, topics):
                    continue
                if rule.kind == "drop":
                    if rule.remaining:
                        rule.remaining -= 1
                        continue
                    self._rules.remove(rule)
                    drop = True
                elif rule.kind == "fail" and fail is None:
                    fail = rule
                elif rule.kind == "delay" and delay is None:
                    delay = rule
                else:
                    continue
                if rule.remaining is not None and rule.kind != "drop":
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        self._rules.remove(rule)
        if drop:
            self.journal.note(spec.name, request, topics, None, "dropped")
            return CLOSE_CONNECTION
        if delay is not None:
            return self._later(delay.ms, spec, handle, request, topics, fail)
        return self._answer(spec, handle, request, topics, fail)

    async def _later(self, ms: int, spec: HandlerSpec, handle: Callable[[Any], Any], request: Any,
                     topics: dict[str, list[int]], fail: Rule | None) -> Any:
        await asyncio.sleep(ms / 1000)
        result = self._answer(spec, handle, request, topics, fail)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _answer(self, spec: HandlerSpec, handle: Callable[[Any], Any], request: Any,
                topics: dict[str, list[int]], fail: Rule | None) -> Any:
        if fail is not None:
            error_response = spec.error_response or FALLBACK_ERROR_RESPONSES.get(spec.api_key)
            if error_response is None or (request.api_key == PRODUCE_KEY and request.body.get("acks") == 0):
                self.journal.note(spec.name, request, topics, fail.code, "dropped")
                return CLOSE_CONNECTION
            body = error_response(request, ErrorCode(fail.code))
            self.journal.note(spec.name, request, topics, body, "injected")
            return body
        try:
            result = handle(request)
        except KafkaApiError as exc:
            self.journal.note(spec.name, request, topics, int(exc.code), None)
            raise
        except Exception:
            self.journal.note(spec.name, request, topics, int(ErrorCode.UNKNOWN_SERVER_ERROR), None)
            raise
        if result is not None and type(result) is not dict and inspect.isawaitable(result):
            return self._journal_later(spec.name, request, topics, result)
        self.journal.note(spec.name, request, topics, result, None)
        return result

    async def _journal_later(self, api: str, request: Any, topics: dict[str, list[int]], pending: Any) -> Any:
        try:
            result = await pending
        except KafkaApiError as exc:
            self.journal.note(api, request, topics, int(exc.code), None)
            raise
        except asyncio.CancelledError:
            raise
        except Exception:
            self.journal.note(api, request, topics, int(ErrorCode.UNKNOWN_SERVER_ERROR), None)
            raise
        self.journal.note(api, request, topics, result, None)
        return result


def _count(value: Any, what: str, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise FaultRuleError(f"{what} must be a whole number, {least} or more (got {value!r})")
    return value
