"""PushTelemetry (api key 72, KIP-714): a client's metrics, as its subscription asked for them.

Version 0 (flexible): client_instance_id, subscription_id, terminating, compression_type and the
metrics (an OpenTelemetry MetricsData, compressed). The checks, in Kafka's order, and the errors
(INVALID_REQUEST, THROTTLING_QUOTA_EXCEEDED, UNKNOWN_SUBSCRIPTION_ID, UNSUPPORTED_COMPRESSION_TYPE,
TELEMETRY_TOO_LARGE): broker/client_telemetry/manager.py. A payload that passes them is
decompressed (at most telemetry.max.bytes) and decoded off the handler loop, on the IO pool
(broker/client_telemetry/otlp.py), and its points go to /metrics (exporter.py); one that does not
decompress or decode is INVALID_RECORD, as Kafka answers a push its ClientTelemetry receiver throws
on, and nothing of it is served. With /metrics off there is no receiver: the payload is only
decompressed, as Kafka 4.4 does without one (so a payload that is not a MetricsData is then accepted).
An empty payload is accepted without being read. Any client may push (Kafka checks no ACL).

Advertised with GetTelemetrySubscriptions (odradek.metrics.port >= 0).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.client_telemetry import otlp
from odradek.controller.meta_properties import uuid_to_base64
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from odradek.broker.client_telemetry.exporter import ClientTelemetryExporter
    from odradek.broker.client_telemetry.manager import ClientMetricsManager
    from odradek.protocol.messages import PushTelemetryRequest, PushTelemetryResponse

API_KEY = 72
NAME = "PushTelemetry"
VERSIONS = (0, 0)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    client_metrics: ClientMetricsManager
    io_pool: Executor
    client_telemetry: ClientTelemetryExporter | None


log = logging.getLogger(__name__)


def advertised(services: Services) -> bool:
    return services.client_telemetry is not None


async def handle(services: Services, request: ApiRequest[PushTelemetryRequest]) -> PushTelemetryResponse:
    body = request.body
    metrics = body["metrics"] or b""
    verdict = services.client_metrics.check_push(body["client_instance_id"], body["subscription_id"],
                                               body["terminating"], body["compression_type"], len(metrics),
                                               request.client_id, request.session)
    instance = verdict.instance
    if instance is None:
        return _answer(verdict.error)
    if len(metrics) > 0:
        loop = asyncio.get_running_loop()
        max_bytes = services.client_metrics.telemetry_max_bytes
        exporter = services.client_telemetry
        try:
            if exporter is None:
                await loop.run_in_executor(services.io_pool, otlp.decompress_payload, body["compression_type"],
                                           metrics, max_bytes)
            else:
                decoded = await loop.run_in_executor(services.io_pool, otlp.decode, body["compression_type"],
                                                     metrics, max_bytes)
                exporter.record(uuid_to_base64(instance.instance_id), instance.attributes, decoded.points,
                                instance.push_interval_ms)
        except otlp.TelemetryDecodeError as e:
            log.debug("push from client instance %s refused: %s", uuid_to_base64(instance.instance_id), e)
            services.client_metrics.push_done(instance, ErrorCode.INVALID_RECORD)
            return _answer(ErrorCode.INVALID_RECORD)
    services.client_metrics.push_done(instance, ErrorCode.NONE)
    return _answer(ErrorCode.NONE)


def _answer(code: ErrorCode) -> PushTelemetryResponse:
    return {"throttle_time_ms": 0, "error_code": code}


def error_response(request: ApiRequest[PushTelemetryRequest], code: int) -> PushTelemetryResponse:
    return _answer(ErrorCode(code))
