"""AlterReplicaLogDirs (api key 34): move this broker's replica of partitions to another of its log dirs.

Versions 1-2 (v0 retired by Kafka 4.0, KIP-896: the connection closes, as in Kafka 4.4).
- v1: same as v0 (the response comes before any throttling).
- v2: flexible.

Request: ``dirs`` [{path, topics [{name, partitions [int32]}]}]; response: ``results`` [{topic_name,
partitions [{partition_index, error_code}]}] - one entry per partition, the last dir named for a
partition winning, as Kafka's ``AlterReplicaLogDirsRequest.partitionDirs`` map does. ALTER on the
CLUSTER resource is required: without it every (dir, topic) entry of the request is answered
CLUSTER_AUTHORIZATION_FAILED, as Kafka's ``getErrorResponse``. The per-partition codes and the move
itself are odradek.broker.replica.log_dir_mover's (Kafka's ReplicaManager.alterReplicaLogDirs); the answer
comes once each move has started, and DescribeLogDirs shows its progress (the future replica,
``is_future_key``, with its offset lag).
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
        AlterReplicaLogDirPartitionResult,
        AlterReplicaLogDirsRequest,
        AlterReplicaLogDirsResponse,
    )

API_KEY = 34
NAME = "AlterReplicaLogDirs"
VERSIONS = (1, 2)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    replica_manager: ReplicaManager
    authz: AuthHelper


async def handle(services: Services, request: ApiRequest[AlterReplicaLogDirsRequest]) -> AlterReplicaLogDirsResponse:
    if not services.authz.cluster_allowed(request, authz.ALTER):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    requested: dict[tuple[str, int], str] = {}
    for d in request.body["dirs"]:
        for t in d["topics"]:
            for p in t["partitions"]:
                requested.pop((t["name"], p), None)  # the last dir named wins, in the last place
                requested[(t["name"], p)] = d["path"]
    codes = await services.replica_manager.log_dir_mover.alter(requested)
    by_topic: dict[str, list[AlterReplicaLogDirPartitionResult]] = {}
    for (topic, index), code in codes.items():
        by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": code})
    return {"throttle_time_ms": 0,
            "results": [{"topic_name": name, "partitions": parts} for name, parts in by_topic.items()]}


def error_response(request: ApiRequest[AlterReplicaLogDirsRequest], code: int) -> AlterReplicaLogDirsResponse:
    """Kafka's AlterReplicaLogDirsRequest.getErrorResponse: the code for every partition of every
    (dir, topic) entry of the request, as sent."""
    return {"throttle_time_ms": 0, "results": [
        {"topic_name": t["name"], "partitions": [{"partition_index": p, "error_code": code} for p in t["partitions"]]}
        for d in request.body["dirs"] for t in d["topics"]]}
