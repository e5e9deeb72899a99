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

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

API_KEY = 23
NAME = "OffsetForLeaderEpoch"
VERSIONS = (2, 4)


def handle(request: ApiRequest) -> dict:
    rm = request.broker.replica_manager
    topics = []
    # Kafka (KIP-320): CLUSTER_ACTION (brokers), else DESCRIBE on each topic (consumers); the
    # partitions of the others answer TOPIC_AUTHORIZATION_FAILED.
    names = {t["topic"] for t in request.body["topics"]}
    allowed = names if request.broker.authorizer is None or authz.cluster_allowed(request, authz.CLUSTER_ACTION) \
        else set(authz.filter_allowed(request, authz.DESCRIBE, authz.TOPIC, names))
    for t in request.body["topics"]:
        partitions = []
        for p in t["partitions"]:
            out = {"error_code": ErrorCode.NONE, "partition": p["partition"], "leader_epoch": -1, "end_offset": -1}
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
