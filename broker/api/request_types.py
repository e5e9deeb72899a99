"""The typed seam between the dispatcher and the handlers: what a handler receives and returns.

The dispatcher (broker/api/dispatcher.py, Kafka's KafkaApis) decodes each frame into a ``Request`` and
calls the API's handler with it (broker/api/registry.py describes a handler module). The
handlers annotate their argument with :class:`ApiRequest` rather than the dispatcher's class: the
dispatcher imports every handler, so a handler importing the dispatcher would close a cycle, and a
handler test can pass any object with these fields.

A handler gets the broker's parts it uses from the registry (its module's ``Services``, see
broker/api/registry.py), never from the request: the request carries what Kafka's
RequestContext does (header, principal, peer, listener) and nothing of the broker. Nor can a handler
close or answer on the connection: it returns :data:`CLOSE_CONNECTION` and the dispatcher closes.

This module imports nothing of the broker at run time or for type checking but the principal, so
every module may import it without closing an import ring.

Members are read-only properties (a handler reads the request; a read-only protocol member accepts
the dispatcher's plain attributes and a test's dataclass), except ``body``, see below.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, Final, Generic, Protocol, TypeAlias, TypeVar

if TYPE_CHECKING:
    from odradek.broker.security.principal import KafkaPrincipal

# A request or response body: the codec's dict in the newest shape of the message
# (protocol/codec.py writes the fields the request's version has).
Body: TypeAlias = dict[str, Any]


class CloseConnection:
    """A handler's answer "no response: close this connection" (:data:`CLOSE_CONNECTION`), as Kafka
    closes it for a Produce with acks=0 that failed, a segment truncated under a fetch, or an ACL
    request with UNKNOWN elements. The dispatcher closes the connection on the handler's behalf
    (the connection's own loop does the closing), then counts the request as answered."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "CLOSE_CONNECTION"


CLOSE_CONNECTION: Final = CloseConnection()

RespT = TypeVar("RespT")
ValueT = TypeVar("ValueT")


class Later(Generic[ValueT, RespT]):
    """An answer that waits for ``future`` (a purgatory's completion) without an asyncio task:
    once the future is done the dispatcher calls ``finish`` with its result, from the future's done
    callback (a loop turn of its own, never inside the code that completed it: an append that
    woke a fetch does not build the fetch's response), and answers what it returns.

    A long-polled Fetch and an acks=all Produce answer this way: a coroutine awaited in a task
    cost a coroutine, a task and a task step per answer on the replication path (issue 31).
    It is awaitable too, for the callers that await a handler's answer themselves."""

    __slots__ = ("future", "finish")

    def __init__(self, future: asyncio.Future[ValueT],
                 finish: Callable[[ValueT], RespT | CloseConnection | None]) -> None:
        self.future = future
        self.finish = finish

    def __await__(self) -> Generator[Any, None, RespT | CloseConnection | None]:
        value = yield from self.future.__await__()
        return self.finish(value)


# What ``handle`` returns: the response body; an awaitable of it (or a :class:`Later`) for
# operations that wait (purgatory); None when the request gets no response at all (Produce with
# acks=0); CLOSE_CONNECTION when the connection must be closed instead of answered.
HandlerResult: TypeAlias = Body | Later[Any, Any] | Awaitable[Body | CloseConnection | None] | CloseConnection | None

# The same for one API, its body typed (protocol/messages.py): ``-> Answer[ProduceResponse]`` for a
# handler that may answer at once, later, not at all or by closing; a handler that always answers
# at once returns its response type itself.
Answer: TypeAlias = RespT | Later[Any, RespT] | Awaitable[RespT | CloseConnection | None] | CloseConnection | None


class ClientSession(Protocol):
    """What a handler may know and note about the client's connection (the dispatcher's
    Connection satisfies it): ApiVersions notes the client's software (KIP-511), client telemetry
    keys a client's instance to its session and forgets it once the session ``closed``."""

    peer: str
    client_software_name: str
    client_software_version: str

    @property
    def closed(self) -> bool: ...


# The body's type: one of protocol/messages.py's TypedDicts, ``ApiRequest[ProduceRequest]``. Invariant,
# since ``body`` is writable.
BodyT = TypeVar("BodyT")


class ApiRequest(Protocol[BodyT]):
    """One decoded request as a handler sees it, its body typed by the handler's annotation."""

    @property
    def api_key(self) -> int: ...

    @property
    def api_version(self) -> int: ...

    @property
    def correlation_id(self) -> int: ...

    @property
    def client_id(self) -> str | None: ...

    # Writable: a ``handle_large`` decodes the body itself and stores it here, where the
    # dispatcher's trace log and error_response read it.
    body: BodyT

    @property
    def principal(self) -> KafkaPrincipal:
        """Who the client is (Kafka's RequestContext.principal): ACLs and quotas match on it."""
        ...

    @property
    def peer(self) -> str:
        """The client's ``host:port`` (IPv6 hosts in brackets)."""
        ...

    @property
    def listener(self) -> str:
        """The name of the listener the request came in on (Metadata answers its endpoints)."""
        ...

    @property
    def session(self) -> ClientSession:
        """The client's connection as far as a handler may see it (no closing, no sending)."""
        ...

    @property
    def received_at(self) -> float:
        """time.monotonic() when the frame was decoded (request latency metrics)."""
        ...


# ``handle(request)``, ``handle_large(request, frame, body_offset)`` and
# ``error_response(request, error_code)`` of a handler as the dispatcher calls them, its module's
# ``Services`` already bound (broker/api/registry.py).
# The dispatcher holds every API's handler, so the body here is Any (the codec's dict).
Handler: TypeAlias = Callable[[ApiRequest[Any]], HandlerResult]
LargeHandler: TypeAlias = Callable[[ApiRequest[Any], memoryview, int], Awaitable[Body]]
ErrorResponse: TypeAlias = Callable[[ApiRequest[Any], int], Body]

