"""Metadata (api key 3): brokers, cluster id, controller, topics, partitions, leaders, epochs.

Versions 0-13.
- v0: topics array; an empty array means "all topics".
- v1: null topics = all topics, empty = none; controller_id; is_internal; rack.
- v2: cluster_id.
- v3: throttle_time_ms.
- v4: allow_auto_topic_creation (before v4 auto-creation is always requested).
- v5: offline_replicas.
- v7: leader_epoch (KIP-320).
- v8: authorized operations (KIP-430), v8-10 for the cluster.
- v9: flexible.
- v10: topic ids (KIP-516).
- v11: cluster authorized operations removed.
- v12: topics may be requested by id (name null).
- v13: top-level error_code (KIP-1102). Kafka 4.4's broker sets it only in the error answer to a
  whole request (MetadataRequest.getErrorResponse); every answer here carries 0. A client that
  gets REBOOTSTRAP_REQUIRED in it rebootstraps; no Kafka broker sends that yet.

Before v12 a null name or a non-zero topic id is INVALID_REQUEST for the whole request (Kafka 3.9's
KafkaApis: "Topic name can not be null" / "Topic IDs are not supported in requests for version");
the v10/v11 response could not even carry the null name.

Unknown topics get UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID by id) unless auto-creation is
enabled (auto.create.topics.enable) and allowed by the request; then the topic is created with
num.partitions/default.replication.factor and returned with its partitions. Illegal names get
INVALID_TOPIC_EXCEPTION and are never created. Internal topics are not auto-created here.

Large requests (broker/api/dispatcher.py routes frames over LARGE_REQUEST_BYTES to ``handle_large``):
a request naming hundreds of thousands of topics is decoded and answered SLICE topics at a time,
yielding the handler loop between slices, so other clients keep being served; the answer is kept
as a few encoded chunks (odradek.protocol.codec.EncodedArray) rather than one dict per topic, so memory
stays a small multiple of the request. The answer is the one ``handle`` would give.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from odradek.broker.api.handlers import metadata_authz
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.metadata.controller_client import (
    MAX_PARTITIONS_PER_BATCH,
    CreatableTopic,
    invalid_topic_reason,
)
from odradek.protocol.acl_operations import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER_OPERATIONS,
    TOPIC_OPERATIONS,
)
from odradek.protocol.codec import Encoded, EncodedArray, codec, read_array_header
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        MetadataRequest,
        MetadataRequestTopic,
        MetadataResponse,
        MetadataResponseBroker,
        MetadataResponsePartition,
        MetadataResponseTopic,
    )

API_KEY = 3
NAME = "Metadata"
VERSIONS = (0, 13)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    config: BrokerConfig
    metadata: BrokerMetadata
    controller_client: ControllerClient
    replica_manager: ReplicaManager
    authz: AuthHelper


ZERO_UUID = uuid.UUID(int=0)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def _partitions(topic: Any, live: set[int]) -> list[MetadataResponsePartition]:
    out: list[MetadataResponsePartition] = []
    for p in sorted(topic.partitions.values(), key=lambda p: p.partition):
        leader = p.leader if p.leader in live else -1
        out.append(
            {
                "error_code": ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                "partition_index": p.partition,
                "leader_id": leader,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replicas),
                "isr_nodes": list(p.isr),
                # Not live, or in a failed log dir of its broker (KIP-858).
                "offline_replicas": [r for r in p.replicas if r not in live or r in p.offline_replicas],
            }
        )
    return out


def topic_metadata(topic: Any, live: set[int], include_ops: bool) -> MetadataResponseTopic:
    return {
        "error_code": ErrorCode.NONE,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.is_internal,
        "partitions": _partitions(topic, live),
        "topic_authorized_operations": TOPIC_OPERATIONS if include_ops else AUTHORIZED_OPERATIONS_OMITTED,
    }


def _error_topic(code: ErrorCode, name: str | None, topic_id: uuid.UUID = ZERO_UUID) -> MetadataResponseTopic:
    return {"error_code": code, "name": name, "topic_id": topic_id, "is_internal": False, "partitions": [],
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


def _names_or_ids_invalid(requested: list[MetadataRequestTopic]) -> bool:
    """v10/v11 carry a topic_id and a nullable name, but lookups by id start at v12 (KafkaApis)."""
    for t in requested:
        if t["name"] is None or t["topic_id"] != ZERO_UUID:
            return True
    return False


def invalid_request_response(requested: list[MetadataRequestTopic]) -> MetadataResponse:
    """Kafka's MetadataRequest.getErrorResponse for INVALID_REQUEST: every requested topic gets the
    error, a null name becomes "" (the v10/v11 response cannot carry null), no brokers; v13 and
    later would carry it at the top level too (no v12+ request gets here)."""
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.INVALID_REQUEST,
        "brokers": [],
        "cluster_id": None,
        "controller_id": -1,
        "topics": [_invalid_request_topic(t) for t in requested],
        "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }


def _invalid_request_topic(t: MetadataRequestTopic) -> MetadataResponseTopic:
    return {"error_code": ErrorCode.INVALID_REQUEST, "name": "" if t["name"] is None else t["name"],
            "topic_id": t["topic_id"], "is_internal": False, "partitions": [],
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}


def handle(services: Services, request: ApiRequest[MetadataRequest]) -> MetadataResponse | Awaitable[MetadataResponse]:
    body = request.body
    version = request.api_version
    image = services.metadata.image
    requested = body["topics"]
    if version == 0 and not requested:
        requested = None  # v0: empty means all
    if requested and version < 12 and _names_or_ids_invalid(requested):
        return invalid_request_response(requested)
    allow_auto = body["allow_auto_topic_creation"] if version >= 4 else True
    auto_create = allow_auto and services.config["auto.create.topics.enable"]
    if services.authz.authorizer is not None:
        return metadata_authz.handle(services, request, requested, auto_create)
    to_create = []
    if requested is not None:
        for t in requested:
            name = t["name"]
            if name is None:
                continue
            if name not in image.topics and not invalid_topic_reason(name) and name not in INTERNAL_TOPICS:
                if auto_create and name not in to_create:
                    to_create.append(name)
    if to_create:
        return create_then_answer(services, request, to_create)
    return build_response(services, request)


async def create_then_answer(services: Services, request: ApiRequest[MetadataRequest], names: list[str],
                             answer: Callable[[ApiRequest[MetadataRequest]], MetadataResponse] | None = None,
                             ) -> MetadataResponse:
    """Auto-create ``names``, then answer (``build_response``, or the authorizing path's ``answer``)."""
    await services.controller_client.create_topics([CreatableTopic(name) for name in names])
    log_errors = await services.replica_manager.wait_for_logs(names)
    response = answer(request) if answer is not None else build_response(services, request)
    if log_errors:
        # An auto-created topic whose logs could not be made answers their error
        # (KAFKA_STORAGE_ERROR, retriable), not partitions nothing can be produced to. The
        # response lists the requested topics in order.
        image = services.metadata.image
        for i, t in enumerate(request.body["topics"] or ()):  # topics were named: some were created
            name = t["name"]
            failed = None if name is None else log_errors.get(name)
            if failed is not None and name in image.topics:
                response["topics"][i] = _error_topic(failed.code, name, image.topics[name].topic_id)
    return response


class _Answerer:
    """Answers one requested topic (a cached Encoded entry, or an error entry dict)."""

    __slots__ = ("image", "version", "include_ops", "cache", "live")

    def __init__(self, metadata: BrokerMetadata, request: ApiRequest[MetadataRequest], include_ops: bool) -> None:
        self.image = metadata.image
        self.version = request.api_version
        self.include_ops = include_ops
        self.cache = metadata.topic_metadata_cache
        self.live = set(self.image.live_broker_ids())

    def entry(self, topic: Any) -> Encoded:
        live, include_ops = self.live, self.include_ops
        return self.cache.entry(self.image, self.version, include_ops, topic,
                                lambda: topic_metadata(topic, live, include_ops))

    def answer(self, t: MetadataRequestTopic) -> MetadataResponseTopic | Encoded:
        image = self.image
        name = t["name"]
        if name is None:
            topic_id = t["topic_id"]
            topic = image.topics_by_id.get(topic_id)
            if topic is None:
                return _error_topic(ErrorCode.UNKNOWN_TOPIC_ID, None, topic_id)
            return self.entry(topic)
        topic = image.topics.get(name)
        if topic is not None:
            return self.entry(topic)
        if invalid_topic_reason(name):
            return _error_topic(ErrorCode.INVALID_TOPIC_EXCEPTION, name)
        return _error_topic(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)


def build_response(services: Services, request: ApiRequest[MetadataRequest]) -> MetadataResponse:
    body = request.body
    answerer = _Answerer(services.metadata, request, bool(body["include_topic_authorized_operations"]))
    requested = body["topics"]
    if request.api_version == 0 and not requested:
        requested = None
    topics: list[MetadataResponseTopic | Encoded]
    if requested is None:
        topics = [answerer.entry(topic) for topic in answerer.image.topics.values()]
    else:
        topics = [answerer.answer(t) for t in requested]
    return _response(services, request, topics)


def _response(services: Services, request: ApiRequest[MetadataRequest],
              topics: Sequence[MetadataResponseTopic | Encoded] | EncodedArray) -> MetadataResponse:
    body = request.body
    image = services.metadata.image
    listener = request.listener
    brokers: list[MetadataResponseBroker] = [
        {"node_id": b.node_id, "host": ep[0], "port": ep[1], "rack": b.rack}
        for b in image.brokers.values()
        if not b.fenced and (ep := b.endpoint_for(listener)) is not None
    ]
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "brokers": brokers,
        "cluster_id": image.cluster_id,
        "controller_id": image.controller_id,
        # Entries may be Encoded, already in the element's wire form (the codec copies them).
        "topics": cast("list[MetadataResponseTopic]", topics),
        "cluster_authorized_operations": CLUSTER_OPERATIONS
        if body["include_cluster_authorized_operations"]
        else AUTHORIZED_OPERATIONS_OMITTED,
    }


# ---------------------------------------------------------------------------------------------------
# Large requests, a slice at a time

SLICE = 2000  # topics decoded (or answered) between two yields to the handler loop


async def handle_large(services: Services, request: ApiRequest[MetadataRequest], buf: memoryview, pos: int) -> MetadataResponse:
    """``handle`` for a large frame: ``buf[pos:]`` is the undecoded request body.

    Pass 1 walks the topics array (checking it, finding the fields after it, noting the names
    auto-creation would need); pass 2 walks it again and encodes each answer into chunks. Both
    yield to the loop every SLICE topics. A malformed body raises DecodeError (the dispatcher then
    closes the connection, as for any malformed request).
    """
    version = request.api_version
    request_codec = codec("MetadataRequest", version)
    flexible = request_codec.flexible
    count, first = read_array_header(buf, pos, flexible)
    if count <= 0 or services.authz.authorizer is not None:
        # No topic list to slice: whatever made the frame large is small work (tagged fields). With
        # an authorizer the request is answered whole (metadata_authz).
        decoded, _ = request_codec.decode(buf, pos)
        request.body = cast("MetadataRequest", decoded)
        result = handle(services, request)
        return await result if inspect.isawaitable(result) else result
    decode_topic = request_codec.element_decoder("topics")
    may_create = bool(services.config["auto.create.topics.enable"])
    invalid = False
    candidates: dict[str, None] = {}  # names auto-creation would create, in request order
    too_many = False  # more than one request may create: the controller would refuse them all
    end = first
    for done in range(0, count, SLICE):
        image = services.metadata.image
        for _ in range(min(SLICE, count - done)):
            t, end = decode_topic(buf, end)
            name = t["name"]
            if version < 12 and (name is None or t["topic_id"] != ZERO_UUID):
                invalid = True
            if (may_create and not too_many and name is not None and name not in image.topics
                    and name not in INTERNAL_TOPICS and not invalid_topic_reason(name)):
                candidates[name] = None
                too_many = len(candidates) > MAX_PARTITIONS_PER_BATCH
        await asyncio.sleep(0)
    # The fields after the array, decoded by the codec behind an empty array.
    empty = b"\x01" if flexible else b"\x00\x00\x00\x00"
    decoded, _ = request_codec.decode(memoryview(empty + bytes(buf[end:])))
    request.body = body = cast("MetadataRequest", decoded)
    if not invalid:
        allow_auto = body["allow_auto_topic_creation"] if version >= 4 else True
        if may_create and allow_auto and candidates and not too_many:
            names = list(candidates)
            await services.controller_client.create_topics([CreatableTopic(name) for name in names])
            await services.replica_manager.wait_for_logs(names)
    del candidates
    encode_entry = codec("MetadataResponse", version).element_encoder("topics")
    answerer = _Answerer(services.metadata, request, bool(body["include_topic_authorized_operations"]))
    topics = EncodedArray()
    at = first
    for done in range(0, count, SLICE):
        chunk = bytearray()
        n = min(SLICE, count - done)
        if invalid:
            for _ in range(n):
                t, at = decode_topic(buf, at)
                chunk += encode_entry(_invalid_request_topic(cast("MetadataRequestTopic", t)))
        else:
            answerer.image = services.metadata.image  # the image may have moved on while we yielded
            for _ in range(n):
                t, at = decode_topic(buf, at)
                entry = answerer.answer(cast("MetadataRequestTopic", t))
                chunk += entry if isinstance(entry, Encoded) else encode_entry(entry)
        topics.append_chunk(chunk, n)
        await asyncio.sleep(0)
    if invalid:
        response = invalid_request_response([])
        response["topics"] = cast("list[MetadataResponseTopic]", topics)  # Encoded chunks, see _response
        return response
    return _response(services, request, topics)
