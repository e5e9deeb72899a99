"""DeleteShareGroupOffsets (api key 92): forget an empty share group's share-partitions of whole
topics (KIP-932; ``kafka-share-groups --delete-offsets``).

Version 0 (flexible), as Kafka 4.4. The group must exist as a share group (GROUP_ID_NOT_FOUND) and have
no members (NON_EMPTY_GROUP); a topic's share-partitions are then dropped, and the next ShareFetch
starts them again at share.auto.offset.reset. Authorization: DELETE on the group
(GROUP_AUTHORIZATION_FAILED), READ on each topic (TOPIC_AUTHORIZATION_FAILED); an unknown topic is
UNKNOWN_TOPIC_OR_PARTITION. Only this broker's share-partitions are dropped (they live in memory on
their leaders, broker/share/).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.handlers.alter_share_group_offsets import check_empty_share_group
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.controller import features
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.share.share_partition_manager import SharePartitionManager
    from odradek.protocol.messages import (
        DeleteShareGroupOffsetsRequest,
        DeleteShareGroupOffsetsResponse,
        DeleteShareGroupOffsetsResponseTopic,
    )

API_KEY = 92
NAME = "DeleteShareGroupOffsets"
VERSIONS = (0, 0)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    group_coordinator: GroupCoordinator
    share_partitions: SharePartitionManager
    authz: AuthHelper


def handle(services: Services, request: ApiRequest[DeleteShareGroupOffsetsRequest]) -> DeleteShareGroupOffsetsResponse:
    if not features.share_group_protocol(services.metadata.image.features):
        return error_response(request, ErrorCode.UNSUPPORTED_VERSION)  # share.version 0 (KafkaApis)
    body = request.body
    group_id = body["group_id"]
    if not services.authz.allowed(request, authz.DELETE, authz.GROUP, group_id):
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    code, message = check_empty_share_group(services.group_coordinator, group_id)
    if code != ErrorCode.NONE:
        return error_response(request, code, message)
    image = services.metadata.image
    responses: list[DeleteShareGroupOffsetsResponseTopic] = []
    for t in body["topics"]:
        name = t["topic_name"]
        topic = image.topics.get(name)
        entry: DeleteShareGroupOffsetsResponseTopic = {
            "topic_name": name, "topic_id": topic.topic_id if topic else uuid.UUID(int=0),
            "error_code": ErrorCode.NONE, "error_message": None}
        if not services.authz.allowed(request, authz.READ, authz.TOPIC, name):
            entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif topic is None:
            entry["error_code"] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            services.share_partitions.delete_state(group_id, name)
        responses.append(entry)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "responses": responses}


def error_response(request: ApiRequest[DeleteShareGroupOffsetsRequest], code: int, message: str | None = None) -> DeleteShareGroupOffsetsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": []}
