"""ListOffsets (api key 2): offsets by timestamp, earliest, latest and max timestamp.

Versions 1-11 (v0's old-style offset lists were dropped by Kafka 4, KIP-896).
- v1: one offset per partition, with its timestamp; -1 = latest, -2 = earliest.
- v2: isolation_level: latest is the last stable offset under read_committed.
- v4: current_leader_epoch in (KIP-320 fencing), leader_epoch out.
- v6: flexible.
- v7: timestamp -3 = the record with the largest timestamp (KIP-734).
- v8: -4 = earliest local offset (KIP-405; equals the log start offset without tiering).
- v9: -5 = latest tiered offset (KIP-1005; no tiering: offset -1, timestamp -1, leader epoch -1).
- v10: timeout_ms (for remote lookups; nothing here waits).
- v11: -6 = earliest pending upload offset (KIP-1023; no tiering: offset -1, timestamp -1, leader
  epoch -1, as Kafka 4.4's UnifiedLog answers a topic without remote storage).

A special timestamp older than the request's version, or a negative one Kafka does not define,
answers UNSUPPORTED_VERSION for its partition (Kafka's ReplicaManager.isListOffsetsTimestampUnsupported).

Timestamp T >= 0 answers the first offset whose record timestamp is >= T, with that record's
own timestamp — looked up in the time index, then inside the one batch that holds it (also in
compressed batches; broker/replica/partition.py ``fetch_offset_for_timestamp``). When no record qualifies the answer is offset -1, timestamp -1 (a negative
timestamp with a real offset makes the Java client throw). Only offsets below the high watermark
(last stable offset for read_committed) are visible. Latest/earliest answer timestamp -1.
A partition listed twice in one request gets INVALID_REQUEST, as in Kafka.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import Answer, ApiRequest
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        ListOffsetsPartitionResponse,
        ListOffsetsRequest,
        ListOffsetsResponse,
        ListOffsetsTopicResponse,
    )

API_KEY = 2
NAME = "ListOffsets"
VERSIONS = (1, 11)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    replica_manager: ReplicaManager
    authz: AuthHelper


LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6
READ_COMMITTED = 1


# The first version that may send each special timestamp (Kafka's timestampMinSupportedVersion).
_SPECIAL_TIMESTAMP_MIN_VERSION = {LATEST: 1, EARLIEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
                                  EARLIEST_PENDING_UPLOAD: 11}


def _timestamp_unsupported(timestamp: int, version: int) -> bool:
    if timestamp >= 0:
        return False
    min_version = _SPECIAL_TIMESTAMP_MIN_VERSION.get(timestamp)
    return min_version is None or version < min_version


# A request of more partitions than this is answered by a coroutine that yields to the handler
# loop every SLICE partitions (400,000 partitions otherwise held every other client for ~2 s); the
# usual request of a few partitions stays synchronous.
SLICE = 1000


def handle(services: Services, request: ApiRequest[ListOffsetsRequest]) -> Answer[ListOffsetsResponse]:
    answer = _answer(services, request)
    if sum(len(t["partitions"]) for t in request.body["topics"]) > SLICE:
        return _answer_in_slices(answer)
    try:
        while True:
            next(answer)
    except StopIteration as stop:
        done: ListOffsetsResponse = stop.value
        return done


async def _answer_in_slices(answer: Generator[None, None, ListOffsetsResponse]) -> ListOffsetsResponse:
    try:
        while True:
            next(answer)
            await asyncio.sleep(0)
    except StopIteration as stop:
        done: ListOffsetsResponse = stop.value
        return done


def _answer(services: Services, request: ApiRequest[ListOffsetsRequest]) -> Generator[None, None, ListOffsetsResponse]:
    """Build the answer (the generator's return value), yielding every SLICE partitions."""
    body = request.body
    version = request.api_version
    rm = services.replica_manager
    isolation = body["isolation_level"] if version >= 2 else 0
    seen: dict[tuple[str, int], int] = {}
    done = 0
    for t in body["topics"]:
        for p in t["partitions"]:
            key = (t["name"], p["partition_index"])
            seen[key] = seen.get(key, 0) + 1
            done += 1
            if done % SLICE == 0:
                yield
    topics: list[ListOffsetsTopicResponse] = []
    # Kafka: DESCRIBE on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED.
    # None: no authorizer, nothing to check.
    describable = None if services.authz.authorizer is None else set(
        services.authz.filter_allowed(request, authz.DESCRIBE, authz.TOPIC, {t["name"] for t in body["topics"]}))

    for t in body["topics"]:
        name = t["name"]
        partitions: list[ListOffsetsPartitionResponse] = []
        for p in t["partitions"]:
            done += 1
            if done % SLICE == 0:
                yield
            index = p["partition_index"]
            out: ListOffsetsPartitionResponse = {"partition_index": index, "error_code": ErrorCode.NONE,
                                                 "timestamp": -1, "offset": -1, "leader_epoch": -1}
            try:
                if describable is not None and name not in describable:
                    raise KafkaApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                if seen[(name, index)] > 1:
                    raise KafkaApiError(ErrorCode.INVALID_REQUEST, "partition listed more than once")
                if _timestamp_unsupported(p["timestamp"], version):
                    raise KafkaApiError(ErrorCode.UNSUPPORTED_VERSION, "timestamp unknown to this ListOffsets version")
                out["offset"], out["timestamp"], out["leader_epoch"] = rm.fetch_offset_for_timestamp(
                    name, index, p["current_leader_epoch"], p["timestamp"], isolation)
            except KafkaApiError as exc:
                out["error_code"] = exc.code
            partitions.append(out)
        topics.append({"name": name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}


def error_response(request: ApiRequest[ListOffsetsRequest], code: int) -> ListOffsetsResponse:
    return {
        "throttle_time_ms": 0,
        "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": code, "timestamp": -1, "offset": -1,
                 "leader_epoch": -1} for p in t["partitions"]]}
            for t in request.body["topics"]
        ],
    }
