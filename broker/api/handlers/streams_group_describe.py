"""StreamsGroupDescribe (api key 89): KIP-1071 streams groups as the group coordinator holds them.

Versions 0-1 (flexible from v0).
- v0: KIP-1071. Per group: state (Empty, NotReady, Assigning, Reconciling, Stable), group and
  assignment epochs, the topology (with the partition counts decided for internal topics once it
  is ready) and every member with its process, endpoint, client tags, reported task offsets, its
  assignment and its target assignment.
- v1: include_topology_description (KIP-1331): as Kafka 4.4 without a topology description plugin,
  a found group's topology_description_status is NOT_STORED (1) when asked, NOT_REQUESTED (0) when
  not, and topology_description null (broker/group/streams_topology_descriptions.py);
  assignor_name ("sticky").

As Kafka's KafkaApis: UNSUPPORTED_VERSION for every group while streams.version is 0; a group the
principal may not DESCRIBE is GROUP_AUTHORIZATION_FAILED (listed first, as Kafka lists them);
with an authorizer, a group whose topology names a topic the principal may not DESCRIBE is
TOPIC_AUTHORIZATION_FAILED without its members or topology. Unknown ids are GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group import streams_topology_descriptions
from odradek.broker.group.coordinator import coordinator_of
from odradek.broker.security import authz
from odradek.controller import features
from odradek.protocol.acl_operations import AUTHORIZED_OPERATIONS_OMITTED, GROUP_OPERATIONS
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        StreamsGroupDescribeRequest,
        StreamsGroupDescribeResponse,
        StreamsGroupDescribeResponseDescribedGroup,
    )

API_KEY = 89
NAME = "StreamsGroupDescribe"
VERSIONS = (0, 1)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    group_coordinator: GroupCoordinator
    authz: AuthHelper


def handle(services: Services, request: ApiRequest[StreamsGroupDescribeRequest]) -> StreamsGroupDescribeResponse:
    body = request.body
    if not features.streams_group_protocol(services.metadata.image.features):
        return error_response(request, ErrorCode.UNSUPPORTED_VERSION)  # streams.version 0 (KafkaApis)
    coordinator = coordinator_of(services.group_coordinator)
    denied: list[StreamsGroupDescribeResponseDescribedGroup] = []
    groups: list[StreamsGroupDescribeResponseDescribedGroup] = []
    for group_id in body["group_ids"]:
        if not services.authz.allowed(request, authz.DESCRIBE, authz.GROUP, group_id):
            denied.append(_error_entry(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if coordinator is None:
            groups.append(_error_entry(group_id, ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        entry = coordinator.streams.describe(group_id, request.api_version)
        if entry["error_code"] == ErrorCode.NONE:
            entry["topology_description_status"] = streams_topology_descriptions.describe_status(
                body.get("include_topology_description", False))
        if body["include_authorized_operations"] and entry["error_code"] == ErrorCode.NONE:
            entry["authorized_operations"] = services.authz.authorized_operations(request, authz.GROUP, group_id,
                                                                                 GROUP_OPERATIONS)
        groups.append(entry)
    if services.authz.authorizer is not None:
        groups = [_hide_unauthorized_topics(services, request, g) for g in groups]
    return {"throttle_time_ms": 0, "groups": denied + groups}


def _hide_unauthorized_topics(services: Services, request: ApiRequest[StreamsGroupDescribeRequest],
                              group: StreamsGroupDescribeResponseDescribedGroup) -> StreamsGroupDescribeResponseDescribedGroup:
    topology = group.get("topology")
    if topology is None:
        return group
    topics = {t for s in topology["subtopologies"] or () for t in
              [*s["source_topics"], *s["repartition_sink_topics"], *(i["name"] for i in s["repartition_source_topics"]),
               *(i["name"] for i in s["state_changelog_topics"])]}
    if len(services.authz.filter_allowed(request, authz.DESCRIBE, authz.TOPIC, topics)) == len(topics):
        return group
    entry = _error_entry(group["group_id"], ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    entry["error_message"] = "The described group uses topics that the client is not authorized to describe."
    return entry


def _error_entry(group_id: str, code: int) -> StreamsGroupDescribeResponseDescribedGroup:
    return {"error_code": code, "error_message": None, "group_id": group_id, "group_state": "", "group_epoch": 0,
            "assignment_epoch": 0, "topology": None, "members": [],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED, "topology_description": None,
            "topology_description_status": 0, "assignor_name": None}


def error_response(request: ApiRequest[StreamsGroupDescribeRequest], code: int) -> StreamsGroupDescribeResponse:
    return {"throttle_time_ms": 0, "groups": [_error_entry(g, code) for g in request.body["group_ids"]]}
