"""DescribeCluster (api key 60): cluster id, controller id and live brokers (KIP-700).

Versions 0-2 (all flexible).
- v1: endpoint_type in request and response (KIP-919); 1 = BROKER, 2 = CONTROLLER.
- v2: include_fenced_brokers in the request, is_fenced per broker (KIP-1073): with it, registered
  but fenced brokers are listed too (Kafka 4.4's handleDescribeCluster over getBrokerNodes), so
  kafka-cluster/Admin can show brokers that are registered and not serving.

Kafka's AuthHelper.computeDescribeClusterResponse on a broker endpoint:
- an endpoint_type Kafka does not know (not 1 or 2) -> UNSUPPORTED_ENDPOINT_TYPE (INVALID_REQUEST
  on v0, which cannot send one anyway) "Unsupported endpoint type N";
- CONTROLLER (2) asked of this broker endpoint -> MISMATCHED_ENDPOINT_TYPE "The request was sent
  to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER". Odradek's
  controller is embedded and has no endpoint of its own, so that is the truthful answer.
- brokers are the registered, unfenced ones with an endpoint on the request's listener (and the
  fenced ones when v2 asks); controller_id is the active controller if it is an unfenced one,
  else -1 (Kafka never names a node the client cannot reach);
- cluster_authorized_operations: Integer.MIN_VALUE unless requested; with no authorizer every
  CLUSTER operation is allowed (the same bitfield Metadata reports).

Reads the broker's metadata image on the handler loop; writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.protocol.acl_operations import AUTHORIZED_OPERATIONS_OMITTED, CLUSTER_OPERATIONS
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        DescribeClusterBroker,
        DescribeClusterRequest,
        DescribeClusterResponse,
    )

API_KEY = 60
NAME = "DescribeCluster"
VERSIONS = (0, 2)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    authz: AuthHelper


ENDPOINT_BROKER = 1
ENDPOINT_CONTROLLER = 2
_ENDPOINT_NAMES = {ENDPOINT_BROKER: "BROKER", ENDPOINT_CONTROLLER: "CONTROLLER"}


def handle(services: Services, request: ApiRequest[DescribeClusterRequest]) -> DescribeClusterResponse:
    body = request.body
    version = request.api_version
    endpoint_type = body["endpoint_type"] if version >= 1 else ENDPOINT_BROKER
    if endpoint_type not in _ENDPOINT_NAMES:
        code = ErrorCode.INVALID_REQUEST if version == 0 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        return _error(code, f"Unsupported endpoint type {endpoint_type}")
    if endpoint_type != ENDPOINT_BROKER:
        code = ErrorCode.INVALID_REQUEST if version == 0 else ErrorCode.MISMATCHED_ENDPOINT_TYPE
        return _error(code, "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of "
                            f"type {_ENDPOINT_NAMES[endpoint_type]}")
    image = services.metadata.image
    listener = request.listener
    include_fenced = body["include_fenced_brokers"]  # False before v2
    brokers: list[DescribeClusterBroker] = [
        {"broker_id": b.node_id, "host": ep[0], "port": ep[1], "rack": b.rack, "is_fenced": b.fenced}
        for b in sorted(image.brokers.values(), key=lambda b: b.node_id)
        if (include_fenced or not b.fenced) and (ep := b.endpoint_for(listener)) is not None
    ]
    live = {b["broker_id"] for b in brokers if not b["is_fenced"]}
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "endpoint_type": ENDPOINT_BROKER,
        "cluster_id": image.cluster_id,
        "controller_id": image.controller_id if image.controller_id in live else -1,
        "brokers": brokers,
        "cluster_authorized_operations": services.authz.cluster_authorized_operations(request, CLUSTER_OPERATIONS)
        if body["include_cluster_authorized_operations"] else AUTHORIZED_OPERATIONS_OMITTED,
    }


def _error(code: ErrorCode, message: str | None) -> DescribeClusterResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "endpoint_type": ENDPOINT_BROKER,
            "cluster_id": "", "controller_id": -1, "brokers": [],
            "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


def error_response(request: ApiRequest[DescribeClusterRequest], code: int) -> DescribeClusterResponse:
    return _error(ErrorCode(code), None)
