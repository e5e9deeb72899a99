"""ListConfigResources (api key 74; ListClientMetricsResources before Kafka 4.1): the config resources that exist.

Versions 0-1 (flexible).
- v0: the client metrics subscriptions only (what kafka-client-metrics --list shows); no
  resource_type in the answer (a client reads 16).
- v1 (KIP-1142): resource_types, the types wanted (none: every type v1 knows: TOPIC, BROKER,
  BROKER_LOGGER, CLIENT_METRICS, GROUP); a type outside those is UNSUPPORTED_VERSION with no
  resources. Each answered resource carries its type.

As Kafka 4.4's KafkaApis lists them, in this order: groups with configs (the order of Kafka's
HashMap of them, as the first config of each was set), client metrics subscriptions (in the order Kafka's subscription map gives:
broker/client_telemetry/java_order.py), the brokers reachable on the request's listener as
BROKER_LOGGER and then as BROKER resources (by id), every topic (by name; Kafka's order is its
image's hash order). Needs DESCRIBE_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED with
no resources). Runs on the handler loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.handlers.config_resources import BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP, TOPIC
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.client_telemetry import java_order
from odradek.protocol.acl_types import AclOperation
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.client_telemetry.manager import ClientMetricsManager
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import ListConfigResourcesRequest, ListConfigResourcesResponse

API_KEY = 74
NAME = "ListConfigResources"
VERSIONS = (0, 1)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    client_metrics: ClientMetricsManager
    authz: AuthHelper


V1_TYPES = frozenset({TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP})


def handle(services: Services, request: ApiRequest[ListConfigResourcesRequest]) -> ListConfigResourcesResponse:
    if services.authz.authorizer is not None and not services.authz.cluster_allowed(request, AclOperation.DESCRIBE_CONFIGS):
        return error_response(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    supported = V1_TYPES if request.api_version >= 1 else frozenset({CLIENT_METRICS})
    wanted = set(request.body.get("resource_types") or supported)
    if not wanted <= supported:
        return error_response(request, ErrorCode.UNSUPPORTED_VERSION)
    image = services.metadata.image
    listener = request.listener
    brokers = [str(b) for b in sorted(image.brokers) if image.brokers[b].endpoint_for(listener) is not None]
    resources: list[tuple[str, int]] = []
    if GROUP in wanted:
        resources += [(name, GROUP) for name in java_order.hash_order(image.group_configs)]
    if CLIENT_METRICS in wanted:
        resources += [(name, CLIENT_METRICS) for name in services.client_metrics.subscription_names()]
    if BROKER_LOGGER in wanted:
        resources += [(b, BROKER_LOGGER) for b in brokers]
    if BROKER in wanted:
        resources += [(b, BROKER) for b in brokers]
    if TOPIC in wanted:
        resources += [(name, TOPIC) for name in sorted(image.topics)]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "config_resources": [{"resource_name": name, "resource_type": rtype} for name, rtype in resources]}


def error_response(request: ApiRequest[ListConfigResourcesRequest], code: int) -> ListConfigResourcesResponse:
    return {"throttle_time_ms": 0, "error_code": code, "config_resources": []}
