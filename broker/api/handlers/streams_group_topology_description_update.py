"""StreamsGroupTopologyDescriptionUpdate (api key 93): a streams group member pushes its
application's topology description (KIP-1331, Kafka 4.4).

Version 0 (flexible). In Kafka's order: UNSUPPORTED_VERSION while streams.version is 0 and
GROUP_AUTHORIZATION_FAILED without READ on the group (KafkaApis, with the error's default message),
COORDINATOR_NOT_AVAILABLE before the group coordinator runs, then the coordinator's answer: with
Kafka's default configuration (no topology description plugin, the one Odradek has) always
UNSUPPORTED_VERSION "The broker has no streams group topology description plugin configured."
(broker/group/streams_topology_descriptions.py). Nothing is stored and no group changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group import streams_topology_descriptions
from odradek.broker.group.coordinator import coordinator_of
from odradek.broker.security import authz
from odradek.controller import features
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        StreamsGroupTopologyDescriptionUpdateRequest,
        StreamsGroupTopologyDescriptionUpdateResponse,
    )

API_KEY = 93
NAME = "StreamsGroupTopologyDescriptionUpdate"
VERSIONS = (0, 0)

# The messages of Kafka's Errors.X.exception(), which KafkaApis's getErrorResponse puts in the answer.
_KAFKA_APIS_MESSAGES = {
    ErrorCode.UNSUPPORTED_VERSION: "The version of API is not supported.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
}


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    group_coordinator: GroupCoordinator
    authz: AuthHelper


def handle(services: Services, request: ApiRequest[StreamsGroupTopologyDescriptionUpdateRequest]
           ) -> StreamsGroupTopologyDescriptionUpdateResponse:
    if not features.streams_group_protocol(services.metadata.image.features):
        return _answer(ErrorCode.UNSUPPORTED_VERSION, _KAFKA_APIS_MESSAGES[ErrorCode.UNSUPPORTED_VERSION])
    if not services.authz.allowed(request, authz.READ, authz.GROUP, request.body["group_id"]):
        return _answer(ErrorCode.GROUP_AUTHORIZATION_FAILED,
                       _KAFKA_APIS_MESSAGES[ErrorCode.GROUP_AUTHORIZATION_FAILED])
    if coordinator_of(services.group_coordinator) is None:
        return _answer(ErrorCode.COORDINATOR_NOT_AVAILABLE, None)
    return _answer(*streams_topology_descriptions.update_outcome())


def _answer(code: int, message: str | None) -> StreamsGroupTopologyDescriptionUpdateResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message}


def error_response(request: ApiRequest[StreamsGroupTopologyDescriptionUpdateRequest], code: int
                   ) -> StreamsGroupTopologyDescriptionUpdateResponse:
    return _answer(code, None)
