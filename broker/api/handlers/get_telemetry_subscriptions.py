"""GetTelemetrySubscriptions (api key 71, KIP-714): which metrics a client pushes, and how often.

Version 0 (flexible): client_instance_id in (the zero id on the first request: the broker assigns
one); the answer carries the id assigned (or the one sent), the subscription id, the compression
types accepted for pushes, the push interval, telemetry.max.bytes, delta temporality (always) and
the requested metric prefixes. Kafka's ClientMetricsManager semantics, throttling included:
broker/client_telemetry/manager.py. Any client may ask (Kafka checks no ACL).

Advertised by ApiVersions only while the broker serves the pushed metrics (odradek.metrics.port >= 0),
as Kafka advertises it only with a ClientTelemetry receiver; served either way, as Kafka serves it.
Runs on the handler loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.client_telemetry import manager
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.client_telemetry.exporter import ClientTelemetryExporter
    from odradek.broker.client_telemetry.manager import ClientMetricsManager
    from odradek.protocol.messages import GetTelemetrySubscriptionsRequest, GetTelemetrySubscriptionsResponse

API_KEY = 71
NAME = "GetTelemetrySubscriptions"
VERSIONS = (0, 0)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    client_metrics: ClientMetricsManager
    client_telemetry: ClientTelemetryExporter | None


def advertised(services: Services) -> bool:
    """Kafka's ApiVersionsResponse leaves the telemetry APIs out without a metrics receiver."""
    return services.client_telemetry is not None


def handle(services: Services, request: ApiRequest[GetTelemetrySubscriptionsRequest]) -> GetTelemetrySubscriptionsResponse:
    return services.client_metrics.get_subscriptions(request.body["client_instance_id"], request.client_id,
                                                          request.session)


def error_response(request: ApiRequest[GetTelemetrySubscriptionsRequest], code: int) -> GetTelemetrySubscriptionsResponse:
    return manager.error_response(ErrorCode(code))
