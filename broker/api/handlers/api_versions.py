"""ApiVersions (api key 18): which APIs and versions this broker serves.

Versions 0-5.
- v0: api_keys list.
- v1: throttle_time_ms.
- v2: same as v1.
- v3: flexible; client_software_name/version in the request (KIP-511); supported/finalized
  features as tagged fields (KIP-584; controller/features.py: what this release supports, and the
  levels finalized in the metadata log; features with a 0 minimum only from v4).
- v4: same as v3 (the client may receive UNSUPPORTED_VERSION with the v0 body, KIP-896 era).
- v5: cluster_id and node_id in the request (KIP-1242): the cluster and node the client means to
  reach, learnt from an earlier Metadata answer, both given or neither (null and -1, a bootstrap
  connection): one without the other is INVALID_REQUEST, as a bad software name is (Kafka's
  ApiVersionsRequest.isValid). When this broker is another cluster's, or another node, the answer
  is REBOOTSTRAP_REQUIRED (129) with no api_keys, and the client rebootstraps (the address now
  belongs to another broker).

The answer comes from the handler registry, so only implemented APIs are advertised (Produce from
v0, though v0-2 are not served: Kafka 4.x's KAFKA-18659 exception, see produce.py), except
AlterPartition, which only brokers send the controller's node, on the inter-broker listener (Kafka
4.4 serves it on controller listeners only; its broker listeners do not advertise it). A request
for a version we do not serve is answered by the dispatcher with UNSUPPORTED_VERSION in the v0
body shape and the full list, so the client can retry with a version we know. The response
header is always v0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.registry import HandlerSpec
from odradek.broker.api.request_types import ApiRequest
from odradek.controller import features
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.protocol.messages import ApiVersion, ApiVersionsRequest, ApiVersionsResponse

API_KEY = 18
NAME = "ApiVersions"
VERSIONS = (0, 5)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    node_id: int
    metadata: BrokerMetadata
    handlers: Mapping[int, HandlerSpec]


def api_keys(handlers: Mapping[int, HandlerSpec]) -> list[ApiVersion]:
    """The ApiVersions list: every registered handler's api key and version range (Produce's
    minimum is the one Kafka advertises, below the one it serves: HandlerSpec.advertised_min_version),
    except the APIs only brokers send the controller (HandlerSpec.inter_broker_only) and those this
    broker's setup does not offer now (HandlerSpec.advertised, asked with the handler's bound
    Services: the telemetry APIs without /metrics; an unbound registry offers none of those)."""
    return [
        {"api_key": spec.api_key,
         "min_version": spec.min_version if spec.advertised_min_version is None else spec.advertised_min_version,
         "max_version": spec.max_version}
        for spec in handlers.values()
        if not spec.inter_broker_only
        and (spec.advertised is None or (spec.services is not None and spec.advertised(spec.services)))
    ]


# KIP-511: client software name and version must match this pattern (ApiVersionsRequest.isValid).
_SOFTWARE_PATTERN = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def handle(services: Services, request: ApiRequest[ApiVersionsRequest]) -> ApiVersionsResponse:
    body = request.body
    if not _valid(request.api_version, body):
        return {"error_code": ErrorCode.INVALID_REQUEST, "api_keys": [], "throttle_time_ms": 0}
    if request.api_version >= 3:
        # Kafka's SocketServer keeps a valid v3+ request's software name and version for the connection.
        request.session.client_software_name = body["client_software_name"]
        request.session.client_software_version = body["client_software_version"]
    if request.api_version >= 5 and _meant_for_another_broker(services, request, body["cluster_id"], body["node_id"]):
        return {"error_code": ErrorCode.REBOOTSTRAP_REQUIRED, "api_keys": [], "throttle_time_ms": 0}
    response: ApiVersionsResponse = {
        "error_code": ErrorCode.NONE,
        "api_keys": api_keys(services.handlers),
        "throttle_time_ms": 0,
    }
    _add_features(services, request, response)
    return response


def _add_features(services: Services, request: ApiRequest[ApiVersionsRequest], response: ApiVersionsResponse) -> None:
    """v3+: Kafka's feature levels (controller/features.py). Below v4 a supported feature whose
    minimum is 0 is left out (Kafka's alterFeatureLevel0: Java clients before 3.9 refuse a range
    from 0). The epoch is the metadata image's offset, as Kafka's (KRaftMetadataCache.features)."""
    image = services.metadata.image
    response["supported_features"] = [{"name": name, "min_version": low, "max_version": high}
                                      for name, low, high in features.ADVERTISED
                                      if request.api_version >= 4 or low != 0]
    response["finalized_features_epoch"] = image.offset
    response["finalized_features"] = [{"name": name, "max_version_level": level, "min_version_level": level}
                                      for name, level in features.finalized(image.features).items()]


def _valid(version: int, body: ApiVersionsRequest) -> bool:
    """Kafka's ApiVersionsRequest.isValid: from v5 the cluster id and node id come together; from
    v3 the software name and version match KIP-511's pattern."""
    if version >= 5 and (body["cluster_id"] is None) != (body["node_id"] == -1):
        return False
    return version < 3 or all(_SOFTWARE_PATTERN.fullmatch(body[field] or "")
                              for field in ("client_software_name", "client_software_version"))


def _meant_for_another_broker(services: Services, request: ApiRequest[ApiVersionsRequest], cluster_id: str | None, node_id: int) -> bool:
    """KIP-1242: the client named the cluster and node it meant (a valid request has both or neither)."""
    if cluster_id is None:
        return False
    return cluster_id != services.metadata.cluster_id or node_id != services.node_id


def unsupported_version_response(handlers: Mapping[int, HandlerSpec]) -> ApiVersionsResponse:
    """The v0-shaped answer to an ApiVersions version we do not serve (built by the dispatcher
    before any request object exists)."""
    return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": api_keys(handlers)}
