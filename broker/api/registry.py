"""The handler registry: one module per Kafka API, and the ApiVersions answer built from it.

A handler module declares, in a docstring header, the versions it serves and what changed per
version, and at module level::

    API_KEY = 3            # Kafka's api key
    NAME = "Metadata"      # Kafka's API name; the codec uses "<NAME>Request"/"<NAME>Response"
    VERSIONS = (0, 12)     # inclusive range served
    def handle(request) -> dict | Awaitable[dict] | None
    async def handle_large(request, buf, body_offset) -> dict   # optional, see HandlerSpec
    ADVERTISED_MIN_VERSION = 0   # optional, see HandlerSpec.advertised_min_version
    def advertised(broker) -> bool   # optional, see HandlerSpec.advertised
    INTER_BROKER_ONLY = True     # optional, see HandlerSpec.inter_broker_only

``handle`` returns the response body (a dict in the newest shape; the codec writes the fields the
request's version has), an awaitable of it for operations that wait (purgatory), or None when the
request gets no response at all (Produce with acks=0). Only registered modules are advertised by
ApiVersions, so nothing unimplemented is ever offered to a client; nor is what only brokers send
the controller (``INTER_BROKER_ONLY``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from odradek.broker.api.request_types import ErrorResponse, Handler, LargeHandler
from odradek.protocol.codec import valid_versions


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
    # Advertised only while ``advertised(broker)`` is true (served either way): Kafka advertises
    # GetTelemetrySubscriptions and PushTelemetry only when it has somewhere to send pushed metrics.
    advertised: Callable[[Any], bool] | None = None

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
    )


def build_registry(modules: list[ModuleType]) -> dict[int, HandlerSpec]:
    registry: dict[int, HandlerSpec] = {}
    for module in modules:
        spec = spec_from_module(module)
        if spec.api_key in registry:
            raise ValueError(f"two handlers for api key {spec.api_key}")
        registry[spec.api_key] = spec
    return dict(sorted(registry.items()))
