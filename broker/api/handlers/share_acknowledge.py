"""ShareAcknowledge (api key 79): a share-group member acknowledges records it acquired (KIP-932).

Versions 1-2 (flexible), as Kafka 4.4 (v0 was Kafka 4.0's early access).
- v2: is_renew_ack and RENEW acknowledgements, which restart the records' acquisition locks
  (KIP-1222); the answer's acquisition_lock_timeout_ms.

Acknowledge types per offset range (one type for the range, or one per offset): 1 ACCEPT, 2 RELEASE
(delivered again, or archived past ``group.share.delivery.count.limit``), 3 REJECT (never delivered
again), 0 a gap (no record there), 4 RENEW (v2). A range the member does not hold answers
INVALID_RECORD_STATE for its partition and nothing of that partition is applied. The answer waits
until the acknowledgements' state write is durable (broker/share/share_partition_manager.py).

The share session must be open: epoch 0 is INVALID_SHARE_SESSION_EPOCH (a session is opened by a
ShareFetch), -1 closes it after these acknowledgements and releases what the member still holds.
Authorization and errors as ShareFetch's (broker/api/handlers/share_fetch.py); UNSUPPORTED_VERSION while
the cluster's share.version is 0.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.handlers import share_fetch
from odradek.broker.api.handlers.current_leader import CurrentLeaders
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.broker.share.share_partition_manager import ACK_WRITE_TIMEOUT_S
from odradek.broker.share.share_session import FINAL_EPOCH, INITIAL_EPOCH
from odradek.controller import features
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.share.share_partition_manager import SharePartitionManager
    from odradek.protocol.messages import (
        ProduceResponseLeaderIdAndEpoch,
        ShareAcknowledgeRequest,
        ShareAcknowledgeResponse,
        ShareAcknowledgeResponsePartitionData,
    )

API_KEY = 79
NAME = "ShareAcknowledge"
VERSIONS = (1, 2)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    replica_manager: ReplicaManager
    share_partitions: SharePartitionManager
    authz: AuthHelper


async def handle(services: Services, request: ApiRequest[ShareAcknowledgeRequest]) -> ShareAcknowledgeResponse:
    if not features.share_group_protocol(services.metadata.image.features):
        return error_response(request, ErrorCode.UNSUPPORTED_VERSION)  # share.version 0 (KafkaApis)
    body = request.body
    manager = services.share_partitions
    group_id, member_id, epoch = body["group_id"], body["member_id"], body["share_session_epoch"]
    if not group_id or not services.authz.allowed(request, authz.READ, authz.GROUP, group_id):
        return error_response(request, ErrorCode.GROUP_AUTHORIZATION_FAILED if group_id else ErrorCode.INVALID_REQUEST)
    if not member_id:
        return error_response(request, ErrorCode.INVALID_REQUEST, "Member id can't be empty.")
    if epoch == INITIAL_EPOCH:
        return error_response(request, ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                              "A share session is opened by ShareFetch, not ShareAcknowledge.")
    try:
        session = manager.continue_session(group_id, member_id, epoch)
    except KafkaApiError as exc:
        return error_response(request, exc.code, exc.message)
    fetch_services = share_fetch.Services(services.metadata, services.replica_manager, manager, services.authz)
    results, topics = share_fetch.resolve_partitions(fetch_services, request, session, body["topics"])
    acked = []
    durable = []
    for t in body["topics"]:
        for p in t["partitions"]:
            result = results[(t["topic_id"], p["partition_index"])]
            if result.error_code == ErrorCode.NONE and p["acknowledgement_batches"]:
                name = topics[result.topic_id]
                result.error_code, result.error_message = manager.acknowledge(
                    session, name, result.partition,
                    [(b["first_offset"], b["last_offset"], b["acknowledge_types"]) for b in p["acknowledgement_batches"]])
                acked.append(result)
                if result.error_code == ErrorCode.NONE:
                    durable.append((result, manager.durability(group_id, name, result.partition)))
    # Answered once the acknowledgements are durable (SharePartitionManager.acknowledged).
    deadline = time.monotonic() + ACK_WRITE_TIMEOUT_S
    for result, written in durable:
        result.error_code, result.error_message = await manager.acknowledged(written, deadline)
    if acked:
        manager.metrics.share_acknowledgement({topics[r.topic_id] for r in acked},
                                              {topics[r.topic_id] for r in acked if r.error_code})
    if epoch == FINAL_EPOCH:
        manager.close_session(session)
    else:
        session.bump()
    leaders = CurrentLeaders(services.replica_manager, services.metadata, request.listener)
    by_topic: dict[uuid.UUID, list[ShareAcknowledgeResponsePartitionData]] = {}
    for result in results.values():
        leader: ProduceResponseLeaderIdAndEpoch = {"leader_id": -1, "leader_epoch": -1}
        if result.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and result.topic_id in topics:
            leader = leaders.leader_of(topics[result.topic_id], result.partition)
        by_topic.setdefault(result.topic_id, []).append({
            "partition_index": result.partition, "error_code": result.error_code,
            "error_message": result.error_message, "current_leader": leader})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "acquisition_lock_timeout_ms": manager.config.record_lock_duration_ms,
            "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
            "node_endpoints": leaders.node_endpoints()}


def error_response(request: ApiRequest[ShareAcknowledgeRequest], code: int, message: str | None = None) -> ShareAcknowledgeResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "acquisition_lock_timeout_ms": 0,
            "responses": [], "node_endpoints": []}
