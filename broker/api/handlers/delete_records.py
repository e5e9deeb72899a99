"""DeleteRecords (api key 21): advance a partition's log start offset.

Versions 0-2.
- v1: same as v0.
- v2: flexible.

``offset`` -1 means the high watermark. Records below the new log start offset are no longer
readable (OFFSET_OUT_OF_RANGE; ListOffsets earliest returns the new start); whole segments below
it are deleted. An offset above the high watermark gets OFFSET_OUT_OF_RANGE; moving backwards is
a no-op that returns the current low watermark, as in Kafka.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        DeleteRecordsPartitionResult,
        DeleteRecordsRequest,
        DeleteRecordsResponse,
        DeleteRecordsTopicResult,
    )

API_KEY = 21
NAME = "DeleteRecords"
VERSIONS = (0, 2)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    replica_manager: ReplicaManager
    authz: AuthHelper


# Partitions answered between two yields to the handler loop: a request of 400,000 partitions
# otherwise held every other client for ~1.5 s.
SLICE = 1000


async def handle(services: Services, request: ApiRequest[DeleteRecordsRequest]) -> DeleteRecordsResponse:
    rm = services.replica_manager
    topics: list[DeleteRecordsTopicResult] = []
    done = 0
    # Kafka: DELETE on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED.
    names = {t["name"] for t in request.body["topics"]}
    deletable = set(services.authz.filter_allowed(request, authz.DELETE, authz.TOPIC, names))
    for t in request.body["topics"]:
        partitions: list[DeleteRecordsPartitionResult] = []
        for p in t["partitions"]:
            done += 1
            if done % SLICE == 0:
                await asyncio.sleep(0)
            out: DeleteRecordsPartitionResult = {"partition_index": p["partition_index"], "low_watermark": -1,
                                                 "error_code": ErrorCode.NONE}
            try:
                if t["name"] not in deletable:
                    raise KafkaApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                out["low_watermark"] = await rm.delete_records(t["name"], p["partition_index"], p["offset"])
            except KafkaApiError as exc:
                out["error_code"] = exc.code
            partitions.append(out)
        topics.append({"name": t["name"], "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
