"""OffsetForLeaderEpoch (api key 23): the end offset of a leader epoch (KIP-101, KIP-320).

Versions 2-4 (v0-1 retired by Kafka 4.0, KIP-896: the connection closes, as in Kafka 4.4).
- v2: current_leader_epoch in the request (fencing: FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH);
  leader_epoch in the response (since v1).
- v3: replica_id (-1 consumer, -2 debug).
- v4: flexible.

Consumers use it after a leader change to check that their position is still on the log
(truncation detection); librdkafka sends it even when not advertised. The answer is the epoch
itself (or the largest smaller one known) and the start offset of the next epoch, or the log end
offset for the current epoch; unknown epochs answer -1/-1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        OffsetForLeaderEpochRequest,
        OffsetForLeaderEpochResponse,
        OffsetForLeaderEpochResponseEpochEndOffset,
        OffsetForLeaderTopicResult,
    )

API_KEY = 23
NAME = "OffsetForLeaderEpoch"
VERSIONS = (2, 4)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    replica_manager: ReplicaManager
    authz: AuthHelper


def handle(services: Services, request: ApiRequest[OffsetForLeaderEpochRequest]) -> OffsetForLeaderEpochResponse:
    rm = services.replica_manager
    topics: list[OffsetForLeaderTopicResult] = []
    # Kafka (KIP-320): CLUSTER_ACTION (brokers), else DESCRIBE on each topic (consumers); the
    # partitions of the others answer TOPIC_AUTHORIZATION_FAILED.
    names = {t["topic"] for t in request.body["topics"]}
    allowed = names if services.authz.authorizer is None or services.authz.cluster_allowed(request, authz.CLUSTER_ACTION) \
        else set(services.authz.filter_allowed(request, authz.DESCRIBE, authz.TOPIC, names))
    for t in request.body["topics"]:
        partitions: list[OffsetForLeaderEpochResponseEpochEndOffset] = []
        for p in t["partitions"]:
            out: OffsetForLeaderEpochResponseEpochEndOffset = {"error_code": ErrorCode.NONE, "partition": p["partition"], "leader_epoch": -1, "end_offset": -1}
            if t["topic"] not in allowed:
                out["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                partitions.append(out)
                continue
            try:
                # Followers and consumers alike get the log's own answer, past the HW too (Kafka's).
                out["leader_epoch"], out["end_offset"] = rm.last_offset_for_leader_epoch(
                    t["topic"], p["partition"], p["current_leader_epoch"], p["leader_epoch"])
            except KafkaApiError as exc:
                out["error_code"] = exc.code
            partitions.append(out)
        topics.append({"topic": t["topic"], "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
