"""The typed seam between the dispatcher and the handlers: what a handler receives and returns.

The dispatcher (broker/dispatcher.py, Kafka's KafkaApis) decodes each frame into a ``Request`` and
calls the API's handler with it (broker/handlers/registry.py describes a handler module). The
handlers annotate their argument with :class:`ApiRequest` rather than the dispatcher's class: the
dispatcher imports every handler, so a handler importing the dispatcher would close a cycle, and a
handler test can pass any object with these fields.

Members are read-only properties: a handler reads the request, it never rebinds its fields, and a
read-only protocol member accepts the dispatcher's plain attributes (and a test's dataclass).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from broker.connection import Connection

# A request or response body: the codec's dict in the newest shape of the message
# (protocol/codec.py writes the fields the request's version has).
Body: TypeAlias = dict[str, Any]

# What ``handle`` returns: the response body; an awaitable of it for operations that wait
# (purgatory); None when the request gets no response at all (Produce with acks=0).
HandlerResult: TypeAlias = Body | Awaitable[Body | None] | None


class ApiRequest(Protocol):
    """One decoded request as a handler sees it."""

    @property
    def api_key(self) -> int: ...

    @property
    def api_version(self) -> int: ...

    @property
    def correlation_id(self) -> int: ...

    @property
    def client_id(self) -> str | None: ...

    @property
    def body(self) -> Body: ...

    @property
    def conn(self) -> Connection:
        """The client connection the request came on (its peer, and closing it, as Produce does)."""
        ...

    @property
    def received_at(self) -> float:
        """time.monotonic() when the frame was decoded (request latency metrics)."""
        ...

    @property
    def broker(self) -> Any:
        """The whole broker. Untyped on purpose: issue 11 item 4 replaces it by the typed
        collaborators a handler uses (replica manager, metadata view, controller client, config)."""
        ...


# ``handle(request)``, ``handle_large(request, frame, body_offset)`` and
# ``error_response(request, error_code)`` of a handler module (broker/handlers/registry.py).
Handler: TypeAlias = Callable[[ApiRequest], HandlerResult]
LargeHandler: TypeAlias = Callable[[ApiRequest, memoryview, int], Awaitable[Body]]
ErrorResponse: TypeAlias = Callable[[ApiRequest, int], Body]


if TYPE_CHECKING:
    from broker import dispatcher

    def _dispatcher_request_is_an_api_request(request: dispatcher.Request) -> ApiRequest:
        # Checked by mypy only: the dispatcher's Request must keep satisfying the protocol.
        return request
