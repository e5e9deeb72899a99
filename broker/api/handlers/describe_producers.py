"""DescribeProducers (api key 61): the producer state of partitions this broker leads
(``kafka-transactions.sh describe-producers``: a hanging transaction shows as a producer whose
current_txn_start_offset stays put).

Version 0 (flexible). Per partition: Kafka's leader errors (UNKNOWN_TOPIC_OR_PARTITION,
NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR) or every producer the partition remembers: id,
epoch, last sequence, last timestamp, coordinator epoch and the first offset of its open
transaction (-1 when none), from ``ReplicaManager.active_producers``.
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
        DescribeProducersRequest,
        DescribeProducersResponse,
        PartitionResponse,
        ProducerState,
        TopicResponse,
    )

API_KEY = 61
NAME = "DescribeProducers"
VERSIONS = (0, 0)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    replica_manager: ReplicaManager
    authz: AuthHelper


def _partition(index: int, code: int, message: str | None = None,
               producers: list[ProducerState] | None = None) -> PartitionResponse:
    return {"partition_index": index, "error_code": code, "error_message": message, "active_producers": producers or []}


def handle(services: Services, request: ApiRequest[DescribeProducersRequest]) -> DescribeProducersResponse:
    replicas = services.replica_manager
    topics: list[TopicResponse] = []
    # Kafka: READ on each topic, else its partitions answer TOPIC_AUTHORIZATION_FAILED.
    readable = set(services.authz.filter_allowed(request, authz.READ, authz.TOPIC, {t["name"] for t in request.body["topics"]}))
    for t in request.body["topics"]:
        out = []
        for index in t["partition_indexes"]:
            if t["name"] not in readable:
                out.append(_partition(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED, None))
                continue
            try:
                out.append(_partition(index, ErrorCode.NONE, None, replicas.active_producers(t["name"], index)))
            except KafkaApiError as exc:
                out.append(_partition(index, exc.code, exc.message))
        topics.append({"name": t["name"], "partitions": out})
    return {"throttle_time_ms": 0, "topics": topics}


def error_response(request: ApiRequest[DescribeProducersRequest], code: int) -> DescribeProducersResponse:
    return {"throttle_time_ms": 0, "topics": [
        {"name": t["name"], "partitions": [_partition(i, code) for i in t["partition_indexes"]]}
        for t in request.body["topics"]]}
