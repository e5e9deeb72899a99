"""ShareGroupDescribe (api key 77): share groups with their members and assignments (KIP-932).

Version 1 (flexible), Kafka 4.4's only one. Per group: state (Empty, Stable), group epoch,
assignment epoch, the assignor (``simple``), and per member its rack, epoch, client id and host,
subscription and assignment (topic ids with names).

An unknown group id answers GROUP_ID_NOT_FOUND ("Group x not found."), one held by a classic or
consumer group GROUP_ID_NOT_FOUND ("Group x is not a share group."); coordinator errors
(NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS...) are per group. While the cluster's share.version
is 0 every group answers UNSUPPORTED_VERSION (Kafka's KafkaApis).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.handlers.group_describe_loop import describe_groups
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import coordinator_of
from odradek.controller import features
from odradek.protocol.acl_operations import AUTHORIZED_OPERATIONS_OMITTED
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        ShareGroupDescribeRequest,
        ShareGroupDescribeResponse,
        ShareGroupDescribeResponseDescribedGroup,
    )

API_KEY = 77
NAME = "ShareGroupDescribe"
VERSIONS = (1, 1)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    group_coordinator: GroupCoordinator
    authz: AuthHelper


def handle(services: Services, request: ApiRequest[ShareGroupDescribeRequest]) -> ShareGroupDescribeResponse:
    if not features.share_group_protocol(services.metadata.image.features):
        return error_response(request, ErrorCode.UNSUPPORTED_VERSION)  # share.version 0 (KafkaApis)
    body = request.body
    coordinator = coordinator_of(services.group_coordinator)
    groups = describe_groups(services.authz, request, body["group_ids"], body["include_authorized_operations"],
                             coordinator.share.describe if coordinator is not None else None, _error_entry)
    return {"throttle_time_ms": 0, "groups": groups}


def _error_entry(group_id: str, code: int) -> ShareGroupDescribeResponseDescribedGroup:
    return {"error_code": code, "error_message": None, "group_id": group_id, "group_state": "", "group_epoch": 0,
            "assignment_epoch": 0, "assignor_name": "", "members": [],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


def error_response(request: ApiRequest[ShareGroupDescribeRequest], code: int) -> ShareGroupDescribeResponse:
    return {"throttle_time_ms": 0, "groups": [_error_entry(g, code) for g in request.body["group_ids"]]}
