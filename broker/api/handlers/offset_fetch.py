"""OffsetFetch (api key 9): a group's committed offsets.

Versions 1-9 (v0, offsets in ZooKeeper, was retired by Kafka 4.0, KIP-896: a request for it
closes the connection).
- v1: a group's offsets for the topics named.
- v2: topics may be null (= every committed partition); top-level error_code.
- v3: throttle_time_ms.
- v4: same as v3.
- v5: committed_leader_epoch (KIP-320).
- v6: flexible.
- v7: require_stable (KIP-447): a partition with offsets pending in an open transaction
  (TxnOffsetCommit) answers UNSTABLE_OFFSET_COMMIT (retriable) instead of its committed offset.
- v8: several groups per request (KIP-709).
- v9: member_id / member_epoch for KIP-848 groups (ignored for classic groups, as Kafka).
- v10: topics by topic_id instead of name, in the request and the answer (KIP-848 follow-up). An
  id no topic has answers UNKNOWN_TOPIC_ID on each requested partition (offset -1), before the
  topic authorization check; a fetch of every topic answers each with its id and leaves out the
  committed offsets of topics that no longer exist (Kafka 4.4's KafkaApis).

A partition without a committed offset answers offset -1, metadata "" and no error. Before v2
a group-level error (coordinator not available / loading / not coordinator) is put on every
requested partition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import coordinator_of
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.group.coordinator import GroupCoordinator
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        OffsetFetchRequest,
        OffsetFetchResponse,
        OffsetFetchResponseGroup,
        OffsetFetchResponsePartition,
        OffsetFetchResponseTopic,
        OffsetFetchResponseTopics,
    )

API_KEY = 9
NAME = "OffsetFetch"
VERSIONS = (1, 10)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    group_coordinator: GroupCoordinator
    authz: AuthHelper


# The topics of either answer shape, v0-7's OffsetFetchResponseTopic or v8+'s per-group
# OffsetFetchResponseTopics (the same fields but topic_id): one path builds both, and each caller
# casts them to its version's type. The requested topics likewise, by name (any version) or by id (v10).
_TopicAnswers: TypeAlias = list[dict[str, Any]]
_Requested: TypeAlias = Sequence[Mapping[str, Any]]


def _partition(index: int, om: Any, error: int = ErrorCode.NONE) -> dict[str, Any]:
    if om is None:
        return {"partition_index": index, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                "error_code": error}
    return {"partition_index": index, "committed_offset": om.committed_offset,
            "committed_leader_epoch": om.leader_epoch, "metadata": om.metadata, "error_code": error}


def _fetch_group(services: Services, request: ApiRequest[OffsetFetchRequest], group_id: str, topics: _Requested | None, member_id: str | None = None,
                 member_epoch: int = -1) -> tuple[int, _TopicAnswers]:
    """(group error, topics); with require_stable, pending transactional offsets are UNSTABLE_OFFSET_COMMIT."""
    wanted = None if topics is None else [(t["name"], list(t["partition_indexes"])) for t in topics]
    coordinator = coordinator_of(services.group_coordinator)
    try:
        if coordinator is None:
            raise KafkaApiError(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        found = coordinator.fetch_offsets(group_id, wanted, member_id, member_epoch)
    except KafkaApiError as exc:
        if request.api_version < 2:
            # v1 has no top-level error: every requested partition carries it.
            return ErrorCode.NONE, [{"name": t, "partitions": [_partition(p, None, exc.code) for p in parts]}
                                    for t, parts in (wanted or [])]
        return exc.code, []
    txn = coordinator.txn_offsets
    if request.body.get("require_stable") and txn.pending:
        return ErrorCode.NONE, [{"name": t, "partitions": [
            _partition(p, None, ErrorCode.UNSTABLE_OFFSET_COMMIT) if txn.has_pending(group_id, t, p)
            else _partition(p, om) for p, om in parts]} for t, parts in found]
    return ErrorCode.NONE, [{"name": t, "partitions": [_partition(p, om) for p, om in parts]} for t, parts in found]


def _authorized_group(services: Services, request: ApiRequest[OffsetFetchRequest], group_id: str, topics: _Requested | None, member_id: str | None = None,
                      member_epoch: int = -1) -> tuple[int, _TopicAnswers]:
    """Kafka's checks around one group's fetch: DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED);
    requested topics without DESCRIBE answer TOPIC_AUTHORIZATION_FAILED per partition, and a fetch
    of every topic leaves them out."""
    if services.authz.authorizer is None:
        return _fetch_group(services, request, group_id, topics, member_id, member_epoch)
    if not services.authz.allowed(request, authz.DESCRIBE, authz.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    if topics is None:
        error, found = _fetch_group(services, request, group_id, None, member_id, member_epoch)
        return error, services.authz.filter_allowed(request, authz.DESCRIBE, authz.TOPIC, found, lambda t: t["name"])
    denied = services.authz.denied_indexes(request, authz.DESCRIBE, authz.TOPIC, [t["name"] for t in topics])
    allowed = [t for i, t in enumerate(topics) if i not in denied]
    error, found = _fetch_group(services, request, group_id, allowed, member_id, member_epoch) if allowed else (0, [])
    refused = [{"name": t["name"], "partitions": [_partition(p, None, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                                  for p in t["partition_indexes"]]}
               for i, t in enumerate(topics) if i in denied]
    return error, found + refused


def _group_by_topic_ids(services: Services, request: ApiRequest[OffsetFetchRequest], group_id: str, topics: _Requested | None, member_id: str | None,
                        member_epoch: int) -> tuple[int, _TopicAnswers]:
    """v10: the group's offsets for topics named by id, answered with their ids."""
    image = services.metadata.image
    if topics is None:
        error, found = _authorized_group(services, request, group_id, None, member_id, member_epoch)
        answered: _TopicAnswers = []
        for answer in found:
            topic = image.topics.get(answer["name"])
            if topic is not None:  # offsets of a deleted topic have no id to be answered with
                answered.append({**answer, "topic_id": topic.topic_id})
        return error, answered
    by_name: dict[str, Any] = {}
    named: list[dict[str, Any]] = []
    unknown: _TopicAnswers = []
    for t in topics:
        topic = image.topics_by_id.get(t["topic_id"])
        if topic is None:
            unknown.append({"name": "", "topic_id": t["topic_id"], "partitions": [
                _partition(p, None, ErrorCode.UNKNOWN_TOPIC_ID) for p in t["partition_indexes"]]})
        else:
            by_name[topic.name] = t["topic_id"]
            named.append({"name": topic.name, "partition_indexes": t["partition_indexes"]})
    error, found = _authorized_group(services, request, group_id, named, member_id, member_epoch)
    if error != ErrorCode.NONE:
        return error, []
    return error, [{**t, "topic_id": by_name[t["name"]]} for t in found] + unknown


def handle(services: Services, request: ApiRequest[OffsetFetchRequest]) -> OffsetFetchResponse:
    body = request.body
    if request.api_version >= 8:
        groups: list[OffsetFetchResponseGroup] = []
        for g in body["groups"]:
            # v9: member_id/member_epoch, validated for KIP-848 groups.
            member = (g["member_id"], g["member_epoch"]) if request.api_version >= 9 else (None, -1)
            if request.api_version >= 10:
                error, topics = _group_by_topic_ids(services, request, g["group_id"], g["topics"], *member)
            else:
                error, topics = _authorized_group(services, request, g["group_id"], g["topics"], *member)
            groups.append({"group_id": g["group_id"], "topics": cast("list[OffsetFetchResponseTopics]", topics),
                           "error_code": error})
        return {"throttle_time_ms": 0, "groups": groups}
    if request.api_version < 2 and not services.authz.allowed(request, authz.DESCRIBE, authz.GROUP, body["group_id"]):
        # v1 has no top-level error: every requested partition carries it.
        return {"throttle_time_ms": 0, "error_code": 0, "topics": [
            {"name": t["name"], "partitions": cast("list[OffsetFetchResponsePartition]", [
                _partition(p, None, ErrorCode.GROUP_AUTHORIZATION_FAILED) for p in t["partition_indexes"]])}
            for t in body["topics"] or ()]}
    error, topics = _authorized_group(services, request, body["group_id"], body["topics"])
    return {"throttle_time_ms": 0, "topics": cast("list[OffsetFetchResponseTopic]", topics), "error_code": error}


def error_response(request: ApiRequest[OffsetFetchRequest], code: int) -> OffsetFetchResponse:
    body = request.body
    if request.api_version >= 8:
        return {"throttle_time_ms": 0, "groups": [{"group_id": g["group_id"], "topics": [], "error_code": code}
                                                  for g in body["groups"]]}
    return {"throttle_time_ms": 0, "topics": [], "error_code": code}
