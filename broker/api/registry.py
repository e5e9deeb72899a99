"""The handler registry: one module per Kafka API, and the ApiVersions answer built from it.

A handler module declares, in a docstring header, the versions it serves and what changed per
version, and at module level::

    API_KEY = 3            # Kafka's api key
    NAME = "Metadata"      # Kafka's API name; the codec uses "<NAME>Request"/"<NAME>Response"
    VERSIONS = (0, 12)     # inclusive range served
    @dataclass(frozen=True, slots=True)
    class Services:        # optional: the collaborators the handler uses, by Collaborators' names
        replica_manager: ReplicaManager
        authz: AuthHelper
    def handle(services, request) -> dict | Awaitable[dict] | CLOSE_CONNECTION | None
    async def handle_large(services, request, buf, body_offset) -> dict   # optional, see HandlerSpec
    ADVERTISED_MIN_VERSION = 0   # optional, see HandlerSpec.advertised_min_version
    def advertised(services) -> bool   # optional, see HandlerSpec.advertised
    INTER_BROKER_ONLY = True     # optional, see HandlerSpec.inter_broker_only

A module with ``Services`` takes them as the first argument of ``handle`` (and ``handle_large``,
``advertised``), as mini-redis's ``apply(&db, &mut conn)`` takes its database: the broker builds
its :class:`Collaborators` once, at start, and :func:`bind_handlers` gives each handler exactly the
fields its ``Services`` names (``functools.partial``: calling a bound handler costs what calling
the function does). A handler thus states what it uses, gets nothing else, and a test builds a
handler's ``Services`` from the few parts it needs. A module without ``Services`` uses nothing of
the broker: ``handle(request)``.

``handle`` returns the response body (a dict in the newest shape; the codec writes the fields the
request's version has), an awaitable of it for operations that wait (purgatory), or None when the
request gets no response at all (Produce with acks=0). Only registered modules are advertised by
ApiVersions, so nothing unimplemented is ever offered to a client; nor is what only brokers send
the controller (``INTER_BROKER_ONLY``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from odradek.broker.api.request_types import ErrorResponse, Handler, LargeHandler
from odradek.protocol.codec import valid_versions

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from odradek.broker.client_telemetry.exporter import ClientTelemetryExporter
    from odradek.broker.client_telemetry.manager import ClientMetricsManager
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.replica.fetch_session import FetchSessionCache
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.runtime.metrics import BrokerMetrics
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.share.partition_end_offsets import PartitionEndOffsets
    from odradek.broker.share.share_coordinator import ShareCoordinator
    from odradek.broker.share.share_partition_manager import SharePartitionManager
    from odradek.broker.share.share_persister import SharePersister
    from odradek.broker.txn.coordinator import TransactionCoordinator
    from odradek.broker.txn.producer_ids import ProducerIdSource


@dataclass(frozen=True)
class HandlerSpec:
    api_key: int
    name: str
    min_version: int
    max_version: int
    handle: Handler
    request_schema: str
    response_schema: str
    error_response: ErrorResponse | None
    # Optional ``handle_large(request, buf, body_offset)``: the coroutine the dispatcher calls instead
    # of decoding a frame over dispatcher.LARGE_REQUEST_BYTES itself, so the handler can decode and
    # answer it in slices and let other requests run in between.
    handle_large: LargeHandler | None = None
    # The minimum ApiVersions advertises, when it is below the minimum served: Kafka 4.x advertises
    # Produce from v0 though it serves it from v3 (KAFKA-18659: librdkafka before 2.10 sends
    # gzip/snappy/lz4 batches uncompressed unless Produce v0-2 appear in ApiVersions). A request
    # for an advertised version below ``min_version`` still closes the connection, as in Kafka.
    advertised_min_version: int | None = None
    # Served only on connections to this broker's inter-broker listener, and never advertised: the
    # requests Odradek brokers send the controller's node (AlterPartition). Kafka 4.4 serves them
    # on its controller listeners only, which are never given to clients; on another listener the
    # request closes the connection, as Kafka's SocketServer does for an API its listener does not
    # serve ("Received request for disabled api").
    inter_broker_only: bool = False
    # Advertised only while ``advertised(services)`` is true (served either way): Kafka advertises
    # GetTelemetrySubscriptions and PushTelemetry only when it has somewhere to send pushed metrics.
    advertised: Callable[[Any], bool] | None = None
    # The module's ``Services`` class (None: it uses nothing of the broker), and once bound
    # (:func:`bind_handlers`) the instance ``handle`` was given; an unbound registry (tools, tests)
    # advertises nothing that depends on it.
    services_type: type | None = None
    services: Any = None

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


def spec_from_module(module: ModuleType) -> HandlerSpec:
    lo, hi = module.VERSIONS
    request_schema = f"{module.NAME}Request"
    response_schema = f"{module.NAME}Response"
    # A handler may not claim versions Kafka's schema does not define.
    for schema in (request_schema, response_schema):
        s_lo, s_hi = valid_versions(schema)
        if lo < s_lo or hi > s_hi:
            raise ValueError(f"{module.__name__}: versions {lo}-{hi} outside {schema} {s_lo}-{s_hi}")
    return HandlerSpec(
        api_key=module.API_KEY,
        name=module.NAME,
        min_version=lo,
        max_version=hi,
        handle=module.handle,
        request_schema=request_schema,
        response_schema=response_schema,
        error_response=getattr(module, "error_response", None),
        handle_large=getattr(module, "handle_large", None),
        advertised_min_version=getattr(module, "ADVERTISED_MIN_VERSION", None),
        inter_broker_only=getattr(module, "INTER_BROKER_ONLY", False),
        advertised=getattr(module, "advertised", None),
        services_type=getattr(module, "Services", None),
    )


def build_registry(modules: list[ModuleType]) -> dict[int, HandlerSpec]:
    registry: dict[int, HandlerSpec] = {}
    for module in modules:
        spec = spec_from_module(module)
        if spec.api_key in registry:
            raise ValueError(f"two handlers for api key {spec.api_key}")
        registry[spec.api_key] = spec
    return dict(sorted(registry.items()))


@dataclass(frozen=True)
class Collaborators:
    """Every part of the broker some handler uses, built by ``Broker.start`` before the first
    request is served; a handler's ``Services`` names a few of these fields (and ``handlers``, the
    bound registry itself, which :func:`bind_handlers` supplies)."""

    config: BrokerConfig
    node_id: int
    metadata: BrokerMetadata
    controller_client: ControllerClient
    replica_manager: ReplicaManager
    fetch_sessions: FetchSessionCache
    group_coordinator: GroupCoordinator
    # The share-partitions this broker leads and their share sessions (KIP-932, broker/share/).
    share_partitions: SharePartitionManager
    # The share coordinator of the __share_group_state partitions led here (APIs 83-87).
    share_coordinator: ShareCoordinator
    # Where the share-partitions led here read and write their state (broker/share/share_persister.py).
    share_persister: SharePersister
    # The partitions' latest offsets for share-group lag (broker/share/partition_end_offsets.py).
    partition_end_offsets: PartitionEndOffsets
    txn_coordinator: TransactionCoordinator
    producer_ids: ProducerIdSource
    client_metrics: ClientMetricsManager
    io_pool: Executor
    # Kafka's AuthHelper over the authorizer (an empty one without ``authorizer.class.name``).
    authz: AuthHelper
    # None when odradek.metrics.port is negative.
    metrics: BrokerMetrics | None
    client_telemetry: ClientTelemetryExporter | None


def services_for(services_type: type, collaborators: Collaborators, handlers: Mapping[int, HandlerSpec]) -> Any:
    """An instance of a handler's ``Services`` from the collaborators its fields name."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(services_type):
        if field.name == "handlers":
            values["handlers"] = handlers
        elif field.name in Collaborators.__dataclass_fields__:
            values[field.name] = getattr(collaborators, field.name)
        else:
            raise ValueError(f"{services_type.__module__}.Services.{field.name}: no such collaborator")
    return services_type(**values)


def bind_handlers(registry: Mapping[int, HandlerSpec], collaborators: Collaborators) -> dict[int, HandlerSpec]:
    """The registry with each handler given its ``Services`` (see the module doc): what the
    dispatcher calls. ``handlers`` in a ``Services`` is the returned registry."""
    bound: dict[int, HandlerSpec] = {}
    for key, spec in registry.items():
        if spec.services_type is None:
            bound[key] = spec
            continue
        services = services_for(spec.services_type, collaborators, bound)
        bound[key] = dataclasses.replace(
            spec,
            handle=functools.partial(spec.handle, services),
            handle_large=None if spec.handle_large is None else functools.partial(spec.handle_large, services),
            services=services,
        )
    return bound
