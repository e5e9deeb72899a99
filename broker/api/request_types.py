"""The typed seam between the dispatcher and the handlers: what a handler receives and returns.

The dispatcher (broker/api/dispatcher.py, Kafka's KafkaApis) decodes each frame into a ``Request`` and
calls the API's handler with it (broker/api/registry.py describes a handler module). The
handlers annotate their argument with :class:`ApiRequest` rather than the dispatcher's class: the
dispatcher imports every handler, so a handler importing the dispatcher would close a cycle, and a
handler test can pass any object with these fields.

Members are read-only properties (a handler reads the request; a read-only protocol member accepts
the dispatcher's plain attributes and a test's dataclass), except ``body``, see below.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from odradek.broker.api.registry import HandlerSpec
    from odradek.broker.client_telemetry.exporter import ClientTelemetryExporter
    from odradek.broker.client_telemetry.manager import ClientMetricsManager
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.network.connection import Connection
    from odradek.broker.replica.fetch_session import FetchSessionCache
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.runtime.metrics import BrokerMetrics
    from odradek.broker.security.authorizer import StandardAuthorizer
    from odradek.broker.txn.coordinator import TransactionCoordinator
    from odradek.broker.txn.producer_ids import ProducerIdSource

# A request or response body: the codec's dict in the newest shape of the message
# (protocol/codec.py writes the fields the request's version has).
Body: TypeAlias = dict[str, Any]

# What ``handle`` returns: the response body; an awaitable of it for operations that wait
# (purgatory); None when the request gets no response at all (Produce with acks=0).
HandlerResult: TypeAlias = Body | Awaitable[Body | None] | None


class BrokerServices(Protocol):
    """The collaborators a handler may use, and nothing else of the broker (the Broker satisfies it;
    a handler test passes a smaller object). Each is built before the first request is served."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def node_id(self) -> int: ...

    @property
    def handlers(self) -> Mapping[int, HandlerSpec]:
        """The handler registry (ApiVersions advertises it)."""
        ...

    @property
    def metadata(self) -> BrokerMetadata:
        """The metadata image and its change notifications (read-only to handlers)."""
        ...

    @property
    def controller_client(self) -> ControllerClient:
        """Every change to cluster metadata goes through it (topics, partitions, configs)."""
        ...

    @property
    def replica_manager(self) -> ReplicaManager:
        """The one door to partition data: appends, fetches, offsets, DeleteRecords, log dirs."""
        ...

    @property
    def fetch_sessions(self) -> FetchSessionCache: ...

    @property
    def group_coordinator(self) -> GroupCoordinator | None:
        """None until it is started (COORDINATOR_NOT_AVAILABLE)."""
        ...

    @property
    def txn_coordinator(self) -> TransactionCoordinator | None:
        """None until it is started (COORDINATOR_NOT_AVAILABLE)."""
        ...

    @property
    def producer_ids(self) -> ProducerIdSource: ...

    @property
    def metrics(self) -> BrokerMetrics | None:
        """None when odradek.metrics.port is negative."""
        ...

    @property
    def client_metrics(self) -> ClientMetricsManager:
        """Client telemetry subscriptions and the clients pushing (KIP-714)."""
        ...

    @property
    def client_telemetry(self) -> ClientTelemetryExporter | None:
        """Where pushed client metrics go (/metrics); None when odradek.metrics.port is negative."""
        ...

    @property
    def authorizer(self) -> StandardAuthorizer | None:
        """None without ``authorizer.class.name`` (every request allowed); see broker/security/authz.py."""
        ...

    @property
    def io_pool(self) -> Executor:
        """Blocking file work off the handler loop."""
        ...


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

    # Writable: a ``handle_large`` decodes the body itself and stores it here, where the
    # dispatcher's trace log and error_response read it.
    body: Body

    @property
    def conn(self) -> Connection:
        """The client connection the request came on (its peer, and closing it, as Produce does)."""
        ...

    @property
    def received_at(self) -> float:
        """time.monotonic() when the frame was decoded (request latency metrics)."""
        ...

    @property
    def broker(self) -> BrokerServices:
        """What the handler may use of the broker (typed: mypy checks every call a handler makes)."""
        ...


# ``handle(request)``, ``handle_large(request, frame, body_offset)`` and
# ``error_response(request, error_code)`` of a handler module (broker/api/registry.py).
Handler: TypeAlias = Callable[[ApiRequest], HandlerResult]
LargeHandler: TypeAlias = Callable[[ApiRequest, memoryview, int], Awaitable[Body]]
ErrorResponse: TypeAlias = Callable[[ApiRequest, int], Body]


if TYPE_CHECKING:
    from odradek.broker.api import dispatcher

    def _dispatcher_request_is_an_api_request(request: dispatcher.Request) -> ApiRequest:
        # Checked by mypy only: the dispatcher's Request must keep satisfying the protocol.
        return request
