"""OffsetCommit (api key 8): store a group's consumed positions in __consumer_offsets.

Versions 2-10 (v0-1 were retired by Kafka 4.0, KIP-896: a request for them closes the connection).
- v2: generation_id, member_id; retention_time_ms (-1 = broker default; else an explicit expire
  timestamp).
- v3: throttle_time_ms.
- v4: same as v3.
- v5: retention_time_ms removed.
- v6: committed_leader_epoch (KIP-320).
- v7: group_instance_id (KIP-345).
- v8: flexible.
- v9: GROUP_ID_NOT_FOUND for an unknown group with a generation (KIP-848 semantics).
- v10: topics by topic_id instead of name, in the request and the answer (KIP-848 follow-up).
  An id no topic has answers UNKNOWN_TOPIC_ID on each of its partitions, before the topic
  authorization check, as Kafka 4.4's KafkaApis does; the offsets are stored by name as ever, so
  OffsetFetch of any version reads them.

Each partition is answered with its own error; group-level errors (coordinator, membership,
generation) go to every partition. The answer is sent after the records are appended.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import coordinator_of
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import OffsetCommitRequest, OffsetCommitResponse

API_KEY = 8
NAME = "OffsetCommit"
VERSIONS = (2, 10)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    group_coordinator: GroupCoordinator
    authz: AuthHelper


def _respond(request: ApiRequest[OffsetCommitRequest], codes: Sequence[int]) -> OffsetCommitResponse:
    """One code per requested partition, in request order; each topic answered as it was named
    (the codec writes name before v10, topic_id from v10)."""
    it = iter(codes)
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "topic_id": t["topic_id"],
         "partitions": [{"partition_index": p["partition_index"], "error_code": next(it)} for p in t["partitions"]]}
        for t in request.body["topics"]]}


def _topic_names(services: Services, request: ApiRequest[OffsetCommitRequest]) -> list[str | None]:
    """Each requested topic's name: from v10 the name of the topic with that id (None: none has it)."""
    topics = request.body["topics"]
    if request.api_version < 10:
        return [t["name"] for t in topics]
    by_id = services.metadata.image.topics_by_id
    return [None if (topic := by_id.get(t["topic_id"])) is None else topic.name for t in topics]


async def handle(services: Services, request: ApiRequest[OffsetCommitRequest]) -> OffsetCommitResponse:
    if not services.authz.allowed(request, authz.READ, authz.GROUP, request.body["group_id"]):
        raise KafkaApiError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    body = request.body
    version = request.api_version
    coordinator = coordinator_of(services.group_coordinator)
    names = _topic_names(services, request)
    requested = [(name, p) for t, name in zip(body["topics"], names, strict=True) for p in t["partitions"]]
    unknown_ids = [name is None for name, _ in requested]
    if coordinator is None:
        return _respond(request, [ErrorCode.UNKNOWN_TOPIC_ID if unknown else ErrorCode.COORDINATOR_NOT_AVAILABLE
                                  for unknown in unknown_ids])
    partitions = [(name, p["partition_index"], p["committed_offset"], p["committed_leader_epoch"],
                   p["committed_metadata"], -1) for name, p in requested if name is not None]
    generation = body["generation_id_or_member_epoch"]
    member_id = body["member_id"]
    retention = body["retention_time_ms"] if 2 <= version <= 4 else -1
    # Before v7 there is no group_instance_id: Kafka's null, not the "" our codec fills in.
    instance_id = body["group_instance_id"] if version >= 7 else None
    # Kafka: READ on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (not committed).
    denied = services.authz.denied_indexes(request, authz.READ, authz.TOPIC, [p[0] for p in partitions])
    allowed = [p for i, p in enumerate(partitions) if i not in denied]
    codes = iter(await coordinator.commit_offsets(body["group_id"], member_id, instance_id, generation,
                                                  version, retention, allowed) if allowed else [])
    known_codes = iter([ErrorCode.TOPIC_AUTHORIZATION_FAILED if i in denied else next(codes)
                        for i in range(len(partitions))])
    return _respond(request, [ErrorCode.UNKNOWN_TOPIC_ID if unknown else next(known_codes)
                              for unknown in unknown_ids])


def error_response(request: ApiRequest[OffsetCommitRequest], code: int) -> OffsetCommitResponse:
    n = sum(len(t["partitions"]) for t in request.body["topics"])
    return _respond(request, [code] * n)
