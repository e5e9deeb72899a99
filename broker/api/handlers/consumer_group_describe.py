"""ConsumerGroupDescribe (api key 69): KIP-848 groups with their members and assignments.

Versions 0-1 (flexible).
- v0: KIP-848. Per group: state (Empty, Assigning, Reconciling, Stable), group epoch,
  assignment epoch, the server assignor in use, and per member its subscription, member epoch,
  current assignment and target assignment (topic ids with names).
- v1: member_type per member (KIP-1099): 1, a consumer-protocol member (0 would be a classic
  member of a consumer group, which Odradek does not mix in; -1 unknown).

A group id that is unknown, or held by a classic group, answers GROUP_ID_NOT_FOUND; coordinator
errors (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS...) are per group.
While the cluster's group.version is 0 every group answers UNSUPPORTED_VERSION (Kafka's KafkaApis).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.handlers.group_describe_loop import describe_groups
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import coordinator_of
from odradek.controller import features

# The same group resource as DescribeGroups: without an authorizer, every operation it supports.
from odradek.protocol.acl_operations import AUTHORIZED_OPERATIONS_OMITTED
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        ConsumerGroupDescribeRequest,
        ConsumerGroupDescribeResponse,
        ConsumerGroupDescribeResponseDescribedGroup,
    )

API_KEY = 69
NAME = "ConsumerGroupDescribe"
VERSIONS = (0, 1)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    group_coordinator: GroupCoordinator
    authz: AuthHelper


def handle(services: Services, request: ApiRequest[ConsumerGroupDescribeRequest]) -> ConsumerGroupDescribeResponse:
    if not features.consumer_group_protocol(services.metadata.image.features):
        return error_response(request, ErrorCode.UNSUPPORTED_VERSION)  # group.version 0 (KafkaApis)
    body = request.body
    coordinator = coordinator_of(services.group_coordinator)
    groups = describe_groups(services.authz, request, body["group_ids"], body["include_authorized_operations"],
                             coordinator.consumer.describe if coordinator is not None else None, _error_entry)
    return {"throttle_time_ms": 0, "groups": groups}


def _error_entry(group_id: str, code: int) -> ConsumerGroupDescribeResponseDescribedGroup:
    return {"error_code": code, "error_message": None, "group_id": group_id, "group_state": "", "group_epoch": 0,
            "assignment_epoch": 0, "assignor_name": "", "members": [], "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


def error_response(request: ApiRequest[ConsumerGroupDescribeRequest], code: int) -> ConsumerGroupDescribeResponse:
    return {"throttle_time_ms": 0, "groups": [_error_entry(g, code) for g in request.body["group_ids"]]}
