"""ShareFetch (api key 78): a share-group member acquires records and acknowledges earlier ones
(KIP-932).

Versions 1-2 (flexible), as Kafka 4.4 (v0 was Kafka 4.0's early access).
- v1: max_records and batch_size; the answer's acquisition_lock_timeout_ms.
- v2: share_acquire_mode (KIP-1206: 0 batch_optimized, whole batches up to about max_records;
  1 record_limit, at most max_records) and is_renew_ack with RENEW acknowledgements (KIP-1222):
  a request renewing locks fetches nothing.

The share session (broker/share/share_session.py) names the partitions: epoch 0 opens it (no
acknowledgements allowed: INVALID_REQUEST), -1 closes it after its acknowledgements (nothing is
fetched; what the member still holds is released), others continue it (SHARE_SESSION_NOT_FOUND,
INVALID_SHARE_SESSION_EPOCH). Each partition's acknowledgements are applied first
(acknowledge_error_code: INVALID_RECORD_STATE for records the member does not hold; the answer
waits until their state write is durable, as the read does), then every partition of the session is read (broker/share/share_partition_manager.py): ``records`` are the
log's batches as they are in the file, ``acquired_records`` the offset ranges this member may
deliver, with their delivery counts. A partition answers when it has records, an error or an
acknowledgement outcome, or when the request named it.

Authorization: READ on the group (GROUP_AUTHORIZATION_FAILED, for the whole request) and READ on
each topic (TOPIC_AUTHORIZATION_FAILED per partition); an unknown topic id is UNKNOWN_TOPIC_ID, a
partition led elsewhere NOT_LEADER_OR_FOLLOWER with its current leader and node_endpoints. While
the cluster's share.version is 0 the request answers UNSUPPORTED_VERSION (Kafka's KafkaApis).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.broker.api.handlers.current_leader import CurrentLeaders
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.broker.share.share_partition_manager import ACK_WRITE_TIMEOUT_S, PartitionResult
from odradek.broker.share.share_session import FINAL_EPOCH, INITIAL_EPOCH, ShareSession
from odradek.controller import features
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.share.share_partition_manager import SharePartitionManager
    from odradek.protocol.messages import (
        ProduceResponseLeaderIdAndEpoch,
        ShareFetchRequest,
        ShareFetchResponse,
        ShareFetchResponsePartitionData,
    )

API_KEY = 78
NAME = "ShareFetch"
VERSIONS = (1, 2)

RECORD_LIMIT_MODE = 1


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    replica_manager: ReplicaManager
    share_partitions: SharePartitionManager
    authz: AuthHelper


async def handle(services: Services, request: ApiRequest[ShareFetchRequest]) -> ShareFetchResponse:
    if not features.share_group_protocol(services.metadata.image.features):
        return error_response(request, ErrorCode.UNSUPPORTED_VERSION)  # share.version 0 (KafkaApis)
    body = request.body
    manager = services.share_partitions
    group_id, member_id, epoch = body["group_id"], body["member_id"], body["share_session_epoch"]
    if not group_id or not services.authz.allowed(request, authz.READ, authz.GROUP, group_id):
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED if group_id else ErrorCode.INVALID_REQUEST)
    if not member_id:
        return error_response(request, ErrorCode.INVALID_REQUEST, "Member id can't be empty.")
    has_acks = any(p["acknowledgement_batches"] for t in body["topics"] for p in t["partitions"])
    if epoch == INITIAL_EPOCH and has_acks:
        return error_response(request, ErrorCode.INVALID_REQUEST,
                              "Acknowledge data present on initial fetch request")
    try:
        session = (manager.open_session(group_id, member_id, request.session) if epoch == INITIAL_EPOCH
                   else manager.continue_session(group_id, member_id, epoch))
    except KafkaApiError as exc:
        return error_response(request, exc.code, exc.message)
    results, topics = resolve_partitions(services, request, session, body["topics"])
    for forgotten in body["forgotten_topics_data"]:
        name = topics.get(forgotten["topic_id"]) or _topic_name(services, forgotten["topic_id"])
        if name is not None:
            for index in forgotten["partitions"]:
                manager.forget(session, name, index)
    acks_of = {(t["topic_id"], p["partition_index"]): p["acknowledgement_batches"]
               for t in body["topics"] for p in t["partitions"]}
    acked: list[PartitionResult] = []
    durable = []
    for result in results.values():
        batches = acks_of.get((result.topic_id, result.partition))
        if batches and result.error_code == ErrorCode.NONE:
            name = topics[result.topic_id]
            result.acknowledge_error_code, result.acknowledge_error_message = manager.acknowledge(
                session, name, result.partition,
                [(b["first_offset"], b["last_offset"], b["acknowledge_types"]) for b in batches])
            acked.append(result)
            if result.acknowledge_error_code == ErrorCode.NONE:
                durable.append((result, manager.durability(group_id, name, result.partition)))
    ack_deadline = time.monotonic() + ACK_WRITE_TIMEOUT_S
    if epoch == FINAL_EPOCH:
        manager.close_session(session)
    else:
        if epoch != INITIAL_EPOCH:
            session.bump()
        if not body.get("is_renew_ack"):
            for (name, index), topic_id in session.partitions.items():
                if (topic_id, index) not in results:
                    results[(topic_id, index)] = PartitionResult(topic_id, index)
                    topics[topic_id] = name
            wanted = list(results.values())
            await manager.fetch(session, wanted, topics, body["max_wait_ms"], body["max_bytes"],
                                max(1, body.get("max_records") or 1),
                                body.get("share_acquire_mode") == RECORD_LIMIT_MODE, body["min_bytes"])
            read = [r for r in wanted if r.topic_id in topics]
            manager.metrics.share_fetch({topics[r.topic_id] for r in read},
                                        {topics[r.topic_id] for r in read if r.error_code})
    # The acknowledgements are answered once durable; their writes went on while the fetch waited.
    for result, written in durable:
        result.acknowledge_error_code, result.acknowledge_error_message = await manager.acknowledged(
            written, ack_deadline)
    if acked:
        manager.metrics.share_acknowledgement({topics[r.topic_id] for r in acked},
                                              {topics[r.topic_id] for r in acked if r.acknowledge_error_code})
    named = set(acks_of)
    leaders = CurrentLeaders(services.replica_manager, services.metadata, request.listener)
    by_topic: dict[uuid.UUID, list[ShareFetchResponsePartitionData]] = {}
    for key, result in results.items():
        if not (key in named or result.acquired or result.error_code or result.acknowledge_error_code):
            continue
        by_topic.setdefault(result.topic_id, []).append(_partition_answer(result, topics, leaders))
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "acquisition_lock_timeout_ms": manager.config.record_lock_duration_ms,
            "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
            "node_endpoints": leaders.node_endpoints()}


def resolve_partitions(services: Services, request: ApiRequest[Any], session: ShareSession,
                       requested: Sequence[Mapping[str, Any]]) -> tuple[dict[tuple[uuid.UUID, int], PartitionResult],
                                                                 dict[uuid.UUID, str]]:
    """The request's partitions as results to fill, the known and permitted ones added to the
    session; and topic id -> name."""
    results: dict[tuple[uuid.UUID, int], PartitionResult] = {}
    topics: dict[uuid.UUID, str] = {}
    for t in requested:
        topic_id = t["topic_id"]
        name = _topic_name(services, topic_id)
        code = ErrorCode.NONE
        if name is None:
            code = ErrorCode.UNKNOWN_TOPIC_ID
        elif not services.authz.allowed(request, authz.READ, authz.TOPIC, name):
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        else:
            topics[topic_id] = name
        for p in t["partitions"]:
            index = p["partition_index"]
            result = results[(topic_id, index)] = PartitionResult(topic_id, index, code)
            if code == ErrorCode.NONE:
                topic = services.metadata.image.topics[name]  # type: ignore[index]
                if index not in topic.partitions:
                    result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    session.partitions[(name, index)] = topic_id  # type: ignore[index]
    return results, topics


def _topic_name(services: Services, topic_id: uuid.UUID) -> str | None:
    topic = services.metadata.image.topic_by_id(topic_id)
    return None if topic is None else topic.name


def _partition_answer(result: PartitionResult, topics: dict[uuid.UUID, str], leaders: CurrentLeaders) -> ShareFetchResponsePartitionData:
    leader: ProduceResponseLeaderIdAndEpoch = {"leader_id": -1, "leader_epoch": -1}
    if result.error_code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH):
        leader = leaders.leader_of(topics[result.topic_id], result.partition)
    return {"partition_index": result.partition, "error_code": result.error_code,
            "error_message": result.error_message, "acknowledge_error_code": result.acknowledge_error_code,
            "acknowledge_error_message": result.acknowledge_error_message, "current_leader": leader,
            "records": result.records if result.records is not None else b"",
            "acquired_records": [{"first_offset": f, "last_offset": la, "delivery_count": c}
                                 for f, la, c in result.acquired]}


def error_response(request: ApiRequest[ShareFetchRequest], code: int, message: str | None = None) -> ShareFetchResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "acquisition_lock_timeout_ms": 0,
            "responses": [], "node_endpoints": []}
