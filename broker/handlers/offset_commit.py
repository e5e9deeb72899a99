"""OffsetCommit (api key 8): store a group's consumed positions in __consumer_offsets.

Versions 2-9 (v0-1 were retired by Kafka 4.0, KIP-896: a request for them closes the connection).
- v2: generation_id, member_id; retention_time_ms (-1 = broker default; else an explicit expire
  timestamp).
- v3: throttle_time_ms.
- v4: same as v3.
- v5: retention_time_ms removed.
- v6: committed_leader_epoch (KIP-320).
- v7: group_instance_id (KIP-345).
- v8: flexible.
- v9: GROUP_ID_NOT_FOUND for an unknown group with a generation (KIP-848 semantics).

Each partition is answered with its own error; group-level errors (coordinator, membership,
generation) go to every partition. The answer is sent after the records are appended.
"""

from __future__ import annotations

from collections.abc import Sequence

from broker.group.coordinator import coordinator_of
from broker.request_types import ApiRequest
from broker.security import authz
from protocol.errors import ErrorCode, KafkaApiError

API_KEY = 8
NAME = "OffsetCommit"
VERSIONS = (2, 9)


def _respond(request: ApiRequest, codes: Sequence[int]) -> dict:
    it = iter(codes)
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [{"partition_index": p["partition_index"], "error_code": next(it)}
                                           for p in t["partitions"]]}
        for t in request.body["topics"]]}


async def handle(request: ApiRequest) -> dict:
    if not authz.allowed(request, authz.READ, authz.GROUP, request.body["group_id"]):
        raise KafkaApiError(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    body = request.body
    version = request.api_version
    coordinator = coordinator_of(request)
    partitions = [(t["name"], p["partition_index"], p["committed_offset"], p["committed_leader_epoch"],
                   p["committed_metadata"], -1)
                  for t in body["topics"] for p in t["partitions"]]
    if coordinator is None:
        return _respond(request, [ErrorCode.COORDINATOR_NOT_AVAILABLE] * len(partitions))
    generation = body["generation_id_or_member_epoch"]
    member_id = body["member_id"]
    retention = body["retention_time_ms"] if 2 <= version <= 4 else -1
    # Before v7 there is no group_instance_id: Kafka's null, not the "" our codec fills in.
    instance_id = body["group_instance_id"] if version >= 7 else None
    # Kafka: READ on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED (not committed).
    denied = authz.denied_indexes(request, authz.READ, authz.TOPIC, [p[0] for p in partitions])
    allowed = [p for i, p in enumerate(partitions) if i not in denied]
    codes = iter(await coordinator.commit_offsets(body["group_id"], member_id, instance_id, generation,
                                                  version, retention, allowed) if allowed or not denied else [])
    return _respond(request, [ErrorCode.TOPIC_AUTHORIZATION_FAILED if i in denied else next(codes)
                              for i in range(len(partitions))])


def error_response(request: ApiRequest, code: int) -> dict:
    n = sum(len(t["partitions"]) for t in request.body["topics"])
    return _respond(request, [code] * n)
