"""OffsetDelete (api key 47): delete a group's committed offsets of topics it does not consume (KIP-496).

Version 0.

Group errors: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP (a non-consumer group with members), the
coordinator errors. Partition errors: UNKNOWN_TOPIC_OR_PARTITION (no such topic),
GROUP_SUBSCRIBED_TO_TOPIC (a member of the non-empty group subscribes to it). Deleted offsets
get tombstones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import coordinator_of
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import OffsetDeleteRequest, OffsetDeleteResponse

API_KEY = 47
NAME = "OffsetDelete"
VERSIONS = (0, 0)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    group_coordinator: GroupCoordinator
    authz: AuthHelper


async def handle(services: Services, request: ApiRequest[OffsetDeleteRequest]) -> OffsetDeleteResponse:
    if not services.authz.allowed(request, authz.DELETE, authz.GROUP, request.body["group_id"]):
        raise KafkaApiError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    body = request.body
    coordinator = coordinator_of(services.group_coordinator)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    partitions = [(t["name"], p["partition_index"]) for t in body["topics"] for p in t["partitions"]]
    # Kafka: READ on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (kept).
    denied = services.authz.denied_indexes(request, authz.READ, authz.TOPIC, [tp[0] for tp in partitions])
    error, deleted = await coordinator.delete_offsets(body["group_id"],
                                                      [tp for i, tp in enumerate(partitions) if i not in denied])
    if error != ErrorCode.NONE:
        return error_response(request, error)
    rest = iter(deleted)
    codes = [ErrorCode.TOPIC_AUTHORIZATION_FAILED if i in denied else next(rest) for i in range(len(partitions))]
    it = iter(codes)
    return {"error_code": ErrorCode.NONE, "throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": next(it)}
                                           for p in t["partitions"]]} for t in body["topics"]]}


def error_response(request: ApiRequest[OffsetDeleteRequest], code: int) -> OffsetDeleteResponse:
    return {"error_code": code, "throttle_time_ms": 0, "topics": []}
