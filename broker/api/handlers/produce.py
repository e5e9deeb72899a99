"""Produce (api key 0): append record batches to partition logs.

Versions 3-13 served; ApiVersions advertises 0-13. v0-2 carry message formats v0/v1, which Odradek
does not store; Kafka 4 dropped them (KIP-896) but still advertises them (KAFKA-18659: librdkafka
before 2.10 decides that the broker takes gzip, snappy and lz4 batches from Produce v0-2 being
advertised, and otherwise sends them uncompressed). A client sends the highest version both sides
know, so only one that knows nothing above v2 sends v0-2: it loses its connection without an
answer, as in Kafka 4.4 (its SocketServer refuses the header, "unsupported version"; here the
dispatcher's version check), and nothing is appended.
- v3: transactional_id; record batch v2 only.
- v4: may answer KAFKA_STORAGE_ERROR.
- v5: log_start_offset in the response.
- v7: zstd allowed (KIP-110); below v7 a zstd batch gets UNSUPPORTED_COMPRESSION_TYPE.
- v8: record_errors and error_message (KIP-467).
- v9: flexible.
- v10: current_leader / node_endpoints tagged fields (KIP-951): filled for NOT_LEADER_OR_FOLLOWER,
  whichever path refused the partition (broker/api/handlers/current_leader.py).
- v11: same as v10 (TRANSACTION_ABORTABLE may be returned, KIP-890).
- v12: same as v11; a transactional batch is a transactions-v2 producer's (KIP-890 part 2): the
  leader itself adds the partition to the producer's transaction (below).
- v13: topics named by topic_id instead of name, in the request and the answer (KIP-516). As Kafka
  4.4's KafkaApis: an id no topic has (the zero id included) answers UNKNOWN_TOPIC_ID on each of its
  partitions, before the topic authorization check and without appending; the others are resolved
  to their names once per topic (``_name_topics_by_id``) and go the way of every other version.
  Versions 3-12 pay one comparison for this.

The appends are the replica manager's (``ReplicaManager.append_records``, then
``Partition.append_records_to_leader``): each batch's header and CRC32C are checked once and its
base offset rewritten by the partition's log; its records are checked by one native pass over
their framing, decompressed first when compressed, without building a Python object per record.
This module translates the request into that call (plus the version-dependent header checks,
``_check_batches``) and the per-partition results into the response.

acks=0 gets no response at all (on an error Kafka closes the connection so the client notices);
acks=1 answers once the batch is in the log; acks=-1 once the high watermark passed it (on one
node the in-sync replica set is this broker, so at once; NOT_ENOUGH_REPLICAS when
min.insync.replicas is larger than the ISR).

Per-partition errors: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, CORRUPT_MESSAGE (nothing
appended), MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, INVALID_RECORD (records that do not add up,
with Kafka's message; + record_errors for per-record findings such as null keys on compacted topics),
UNSUPPORTED_COMPRESSION_TYPE, INVALID_TOPIC_EXCEPTION (internal topics), OUT_OF_ORDER_SEQUENCE_NUMBER,
INVALID_PRODUCER_EPOCH, KAFKA_STORAGE_ERROR; INVALID_REQUIRED_ACKS for every partition when acks
is not 0, 1 or -1.

Transactional batches need the request's transactional_id (INVALID_TXN_STATE otherwise). Each
partition where the producer's transaction at the batch's epoch is not open yet is first verified
to be in its ongoing transaction (KIP-890 part 1, ``_handle_transactional``; by the local
coordinator, or by the remote one with AddPartitionsToTxn v5 verify_only), with Kafka 4.4's
answers: TRANSACTION_ABORTABLE from v11 when it was not added (INVALID_TXN_STATE before, "Partition
was not added to the transaction"), INVALID_PRODUCER_EPOCH for another epoch than the coordinator's
(an older one than the partition's is refused before asking), INVALID_PRODUCER_ID_MAPPING for an
unknown producer, NOT_ENOUGH_REPLICAS (retriable) when the coordinator cannot answer or is
completing the transaction; nothing appended. Requests without transactional_id pay one dict lookup.

From v12 (transactions v2, ``_add_then_append``; Kafka's ReplicaManager.handleProduceAppend with
ADD_PARTITION, whatever transaction.partition.verification.enable says) the client no longer sends
AddPartitionsToTxn: for each partition where the producer's transaction at the batch's epoch is not
open yet, the leader asks the id's coordinator to add it (broker/txn/coordinator.py
``add_for_leader``: locally, or AddPartitionsToTxn v5 to another broker), asking again every
add.partitions.to.txn.retry.backoff.ms while the coordinator answers CONCURRENT_TRANSACTIONS (the
previous transaction's markers being written), for at most add.partitions.to.txn.retry.backoff.max.ms
(capped by request.timeout.ms), then answering CONCURRENT_TRANSACTIONS. Refusals, nothing appended:
the partition's own errors and INVALID_PRODUCER_EPOCH for an epoch below the producer's before the
coordinator is asked; the coordinator's INVALID_PRODUCER_EPOCH (fenced), INVALID_PRODUCER_ID_MAPPING,
INVALID_TXN_STATE ("Partition was not added to the transaction"); NOT_ENOUGH_REPLICAS ("Unable to
verify ...", retriable) when it cannot answer; OUT_OF_ORDER_SEQUENCE_NUMBER for a batch that
needed the add, of a producer the partition remembers no batch of, whose sequence is not 0 (Kafka's
rule: a v2 transaction's epoch starts at 0).

With an authorizer (``_handle_authorizing``, docs/security-acls.md): WRITE on the transactional id
(else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition) and on each topic (else
TOPIC_AUTHORIZATION_FAILED for its partitions, the others appended). Without one the request pays
one attribute test.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from odradek.broker.api.handlers.current_leader import PRODUCE_FROM_VERSION, CurrentLeaders
from odradek.broker.api.request_types import CLOSE_CONNECTION, Answer, ApiRequest, CloseConnection, Later
from odradek.broker.runtime.completion import Completion
from odradek.broker.security import authz
from odradek.protocol.batch_header import COMPRESSION_MASK, HEADER_SIZE, TRANSACTIONAL_BIT
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.security.authz import AuthHelper
    from odradek.broker.txn.coordinator import TransactionCoordinator
    from odradek.protocol.messages import (
        BatchIndexAndErrorMessage,
        PartitionProduceResponse,
        ProduceRequest,
        ProduceResponse,
        TopicProduceResponse,
    )

API_KEY = 0
NAME = "Produce"
VERSIONS = (3, 13)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    config: BrokerConfig
    metadata: BrokerMetadata
    replica_manager: ReplicaManager
    txn_coordinator: TransactionCoordinator
    authz: AuthHelper


# The first version of transactions v2 (Kafka's ProduceRequest.LAST_STABLE_VERSION_BEFORE_TRANSACTION_V2 + 1).
ADD_PARTITION_FROM = 12
TRANSACTION_ABORTABLE_FROM = 11  # KIP-890 part 1's abortable error
TOPIC_IDS_FROM = 13  # KIP-516: topics by id
# Kafka's ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION (see the module docstring).
ADVERTISED_MIN_VERSION = 0

ZSTD = 4
ATTRIBUTES_AT = 21
PRODUCER_ID_AT = 43
BASE_SEQUENCE_AT = 53
# The coordinator errors a leader answers as NOT_ENOUGH_REPLICAS, retriable (Kafka's ReplicaManager).
_UNVERIFIABLE = frozenset({ErrorCode.NETWORK_EXCEPTION, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                           ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


# What a request gets (None: no answer, acks=0).
_Answered: TypeAlias = "ProduceResponse | CloseConnection | None"


def _partition_result(index: int, code: int, message: str | None = None, base_offset: int = -1,
                      log_append_time: int = -1, log_start_offset: int = -1,
                      record_errors: list[BatchIndexAndErrorMessage] | None = None) -> PartitionProduceResponse:
    return {
        "index": index,
        "error_code": code,
        "base_offset": base_offset,
        "log_append_time_ms": log_append_time,
        "log_start_offset": log_start_offset,
        "record_errors": record_errors or [],
        "error_message": message,
    }


def _check_batches(records: Any, version: int = 7, transactional: bool = False) -> None:
    """Header-only checks the log does not know about (they depend on the request version; a
    transactional batch needs the request's transactional_id)."""
    pos, total = 0, len(records)
    while total - pos >= HEADER_SIZE:
        attributes = records[pos + ATTRIBUTES_AT] << 8 | records[pos + ATTRIBUTES_AT + 1]
        codec = attributes & COMPRESSION_MASK
        if codec == ZSTD and version < 7:
            raise KafkaApiError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, "zstd needs Produce v7 or later")
        if codec > ZSTD:
            raise KafkaApiError(ErrorCode.CORRUPT_MESSAGE, f"unknown compression codec {codec}")
        if attributes & TRANSACTIONAL_BIT and not transactional:
            raise KafkaApiError(ErrorCode.INVALID_TXN_STATE, "a transactional batch in a request without transactional_id")
        size = int.from_bytes(records[pos + 8 : pos + 12], "big", signed=True) + 12
        if size <= 12:
            return  # the log reports the malformed batch
        pos += size


def _response(services: Services, request: ApiRequest[ProduceRequest],
              results: list[Any]) -> ProduceResponse | CloseConnection | None:
    responses: list[TopicProduceResponse] = []
    any_error = False
    leaders: CurrentLeaders | None = None  # KIP-951, made for the first NOT_LEADER_OR_FOLLOWER
    by_id = request.api_version >= TOPIC_IDS_FROM
    i = 0
    for topic in request.body["topic_data"]:
        out: list[PartitionProduceResponse] = []
        for pd in topic["partition_data"]:
            info = results[i]
            i += 1
            if isinstance(info, KafkaApiError):
                any_error = True
                # KIP-467: which batch/record was refused, e.g. a null key on a compacted topic.
                errors: list[BatchIndexAndErrorMessage] = [{"batch_index": b, "batch_index_error_message": msg}
                          for b, msg in getattr(info, "record_errors", None) or ()]
                result = _partition_result(pd["index"], info.code, info.message, record_errors=errors)
                if info.code == ErrorCode.NOT_LEADER_OR_FOLLOWER and request.api_version >= PRODUCE_FROM_VERSION:
                    if leaders is None:
                        leaders = CurrentLeaders(services.replica_manager, services.metadata, request.listener)
                    result["current_leader"] = leaders.leader_of(topic["name"], pd["index"])
                out.append(result)
            else:
                out.append(_partition_result(pd["index"], ErrorCode.NONE, None, info.first_offset,
                                             info.log_append_time, info.log_start_offset))
        answer: TopicProduceResponse = {"name": topic["name"], "partition_responses": out}
        if by_id:
            answer["topic_id"] = topic["topic_id"]
        responses.append(answer)
    if request.body["acks"] == 0:
        # The client does not read a response for acks=0; closing tells it something failed.
        return CLOSE_CONNECTION if any_error else None
    if leaders is not None:
        return {"responses": responses, "throttle_time_ms": 0, "node_endpoints": leaders.node_endpoints()}
    return {"responses": responses, "throttle_time_ms": 0}


def handle(services: Services, request: ApiRequest[ProduceRequest]) -> Answer[ProduceResponse]:
    body = request.body
    acks = body["acks"]
    refused: dict[int, KafkaApiError] = {}
    if request.api_version >= TOPIC_IDS_FROM:
        refused = _name_topics_by_id(services, request)
    if acks not in (0, 1, -1):
        if refused:  # Kafka: an unknown id's partitions keep UNKNOWN_TOPIC_ID; the appends are refused
            invalid = KafkaApiError(ErrorCode.INVALID_REQUIRED_ACKS)
            count = sum(len(t["partition_data"]) for t in body["topic_data"])
            return _response(services, request, [refused.get(i, invalid) for i in range(count)])
        return error_response(request, ErrorCode.INVALID_REQUIRED_ACKS)
    entries = [(topic["name"], pd["index"], pd["records"])
               for topic in body["topic_data"] for pd in topic["partition_data"]]
    if services.authz.authorizer is not None:
        return _handle_authorizing(services, request, entries, refused)
    if body["transactional_id"] is not None:
        return _handle_transactional(services, request, entries, refused)
    if refused:
        check = _check_batches if request.api_version >= 7 else _check_batches_before_v7
        return _append_verified(services, request, entries, refused, check)
    done: Completion[list[Any]] = Completion()
    check = _check_batches if request.api_version >= 7 else _check_batches_before_v7
    services.replica_manager.append_records(entries, acks, body["timeout_ms"], done, check)
    if done.done:
        return _response(services, request, done.value)
    # acks=-1 waiting for the high watermark: answered on this request's own turn (the future's
    # done callback), not inside the follower fetch that moved the high watermark.
    return Later(done.wait(), functools.partial(_response, services, request))


def _name_topics_by_id(services: Services, request: ApiRequest[ProduceRequest]) -> dict[int, KafkaApiError]:
    """Produce v13: each topic's name from its id, written into the decoded topic, where the rest of
    the path reads it (the appends, the response, KIP-951's current leader). The partitions of an id
    no topic has, by their position among all the request's partitions, are refused with
    UNKNOWN_TOPIC_ID (Kafka 4.4: the name is then empty, and from v13 an empty name is that error)."""
    by_id = services.metadata.image.topics_by_id
    refused: dict[int, KafkaApiError] = {}
    i = 0
    for topic in request.body["topic_data"]:
        known = by_id.get(topic["topic_id"])
        count = len(topic["partition_data"])
        if known is None:
            topic["name"] = ""
            refused.update((j, KafkaApiError(ErrorCode.UNKNOWN_TOPIC_ID)) for j in range(i, i + count))
        else:
            topic["name"] = known.name
        i += count
    return refused


def _handle_authorizing(services: Services, request: ApiRequest[ProduceRequest], entries: list[tuple[str, int, Any]],
                        refused: dict[int, KafkaApiError]) -> Answer[ProduceResponse]:
    """With an authorizer (KafkaApis.handleProduceRequest): WRITE on the transactional id, else the
    whole request answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED; WRITE on each topic, else its
    partitions answer TOPIC_AUTHORIZATION_FAILED and only the others are appended. Partitions
    already ``refused`` (v13's unknown topic ids) are not authorized: Kafka answers them first."""
    txn_id = request.body["transactional_id"]
    if txn_id is not None and not services.authz.allowed(request, authz.WRITE, authz.TRANSACTIONAL_ID, txn_id):
        raise KafkaApiError(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    named = {e[0] for i, e in enumerate(entries) if i not in refused}
    writable = set(services.authz.filter_allowed(request, authz.WRITE, authz.TOPIC, named))
    refused.update({i: KafkaApiError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                    for i, e in enumerate(entries) if i not in refused and e[0] not in writable})
    if txn_id is not None:
        return _handle_transactional(services, request, entries, refused)
    check = _check_batches if request.api_version >= 7 else _check_batches_before_v7
    return _append_verified(services, request, entries, refused, check)


def _txn_producer(records: Any) -> tuple[int, int] | None:
    """(producer id, epoch) of a transactional record set's first batch; None otherwise."""
    if records is None or len(records) < HEADER_SIZE or not (records[ATTRIBUTES_AT + 1] & TRANSACTIONAL_BIT):
        return None
    return (int.from_bytes(records[PRODUCER_ID_AT:PRODUCER_ID_AT + 8], "big", signed=True),
            int.from_bytes(records[PRODUCER_ID_AT + 8:PRODUCER_ID_AT + 10], "big", signed=True))


def _handle_transactional(services: Services, request: ApiRequest[ProduceRequest], entries: list[tuple[str, int, Any]],
                          refused: dict[int, KafkaApiError]) -> Answer[ProduceResponse]:
    """A transactional producer's request: KIP-890 part 1's verification, then the append of the
    verified partitions (the others answered with the verification's error, nothing appended).
    Partitions where the producer's transaction at the batch's epoch is open already were verified
    when it began (an older epoch is refused at once); for the others, where this broker coordinates
    the transactional id it checks the coordinator's state at once, elsewhere it asks the
    coordinator (AddPartitionsToTxn v5 verify_only)."""
    coordinator = services.txn_coordinator
    if request.api_version >= ADD_PARTITION_FROM:
        return _add_then_append(services, request, entries, refused, coordinator)
    txn_id = request.body["transactional_id"]
    assert txn_id is not None  # a transactional request's (see handle)
    remote: dict[tuple[int, int], list[int]] = {}  # (producer id, epoch) -> entries to ask about
    if services.config["transaction.partition.verification.enable"]:
        for producer, indexes in _partitions_to_add(services, request, entries, refused).items():
            for i in indexes:
                topic, index, _ = entries[i]
                code = coordinator.verify(txn_id, producer[0], producer[1], topic, index)
                if code is None:
                    remote.setdefault(producer, []).append(i)
                else:
                    code = ErrorCode.INVALID_PRODUCER_EPOCH if code == ErrorCode.PRODUCER_FENCED else code
                    if code != ErrorCode.NONE:
                        refused[i] = _coordinator_refusal(code, request.api_version)
    if remote:
        return _verify_remotely_then_append(services, request, entries, refused, remote, coordinator)
    return _append_verified(services, request, entries, refused)


def _add_then_append(services: Services, request: ApiRequest[ProduceRequest], entries: list[tuple[str, int, Any]], refused: dict[int, KafkaApiError],
                     coordinator: TransactionCoordinator) -> Answer[ProduceResponse]:
    """Produce v12: the partitions not yet in the producer's transaction at the batch's epoch are
    added by the coordinator first (see the module docstring); a request whose partitions all are
    appends at once, unless an earlier request of its producer is still waiting for the coordinator:
    then it takes its turn behind that one (broker/replica/producer_turns.py says why)."""
    turns = services.replica_manager.producer_turns
    before = dict(refused)
    producers = {p for _, _, records in entries if (p := _txn_producer(records)) is not None}
    if not _partitions_to_add(services, request, entries, refused) and not any(turns.waiting(pid) for pid, _ in producers):
        return _append_verified(services, request, entries, refused)
    # Everything is asked again in the request's turn, from the refusals it arrived with.
    return _add_partitions_then_append(services, request, entries, before, coordinator, sorted({pid for pid, _ in producers}))


def _partitions_to_add(services: Services, request: ApiRequest[ProduceRequest], entries: list[tuple[str, int, Any]],
                       refused: dict[int, KafkaApiError]) -> dict[tuple[int, int], list[int]]:
    """(producer id, epoch) -> the entries whose partition is not in the producer's open transaction
    at that epoch yet: the coordinator adds it (v12) or verifies it (KIP-890 part 1) first. The
    partitions' own refusals go into ``refused``."""
    replicas = services.replica_manager
    to_add: dict[tuple[int, int], list[int]] = {}
    for i, (topic, index, records) in enumerate(entries):
        if i in refused:
            continue
        producer = _txn_producer(records)
        if producer is None:
            continue
        try:
            joined, _ = replicas.transaction_to_join(topic, index, *producer)
        except KafkaApiError as exc:
            refused[i] = exc
            continue
        if not joined:
            to_add.setdefault(producer, []).append(i)
    return to_add


async def _add_partitions_then_append(services: Services, request: ApiRequest[ProduceRequest], entries: list[tuple[str, int, Any]],
                                      refused: dict[int, KafkaApiError], coordinator: TransactionCoordinator,
                                      producer_ids: list[int]) -> ProduceResponse | CloseConnection | None:
    txn_id = request.body["transactional_id"]
    assert txn_id is not None  # a transactional request's (see handle)
    replicas = services.replica_manager
    async with contextlib.AsyncExitStack() as turns:
        for producer_id in producer_ids:  # one in practice: a transactional request carries one producer's batches
            await turns.enter_async_context(replicas.producer_turns.turn(producer_id))
        # Asked now, in the request's turn: the earlier requests of the producer are in the log.
        to_add = _partitions_to_add(services, request, entries, refused)
        for (producer_id, epoch), indexes in to_add.items():
            tps = [(entries[i][0], entries[i][1]) for i in indexes]
            codes = await _add_with_retries(services, request, coordinator, txn_id, producer_id, epoch, tps)
            for i, tp in zip(indexes, tps, strict=True):
                if codes[tp] != ErrorCode.NONE:
                    refused[i] = _coordinator_refusal(codes[tp], request.api_version)
        for (producer_id, epoch), indexes in to_add.items():
            for i in indexes:
                if i in refused:
                    continue
                topic, index, records = entries[i]
                try:
                    _, known = replicas.transaction_to_join(topic, index, producer_id, epoch)
                except KafkaApiError as exc:
                    refused[i] = exc
                    continue
                sequence = int.from_bytes(records[BASE_SEQUENCE_AT:BASE_SEQUENCE_AT + 4], "big", signed=True)
                if not known and sequence != 0:
                    # Kafka's ProducerAppendInfo.checkSequence for a v2 producer the partition remembers no batch
                    # of (retriable for the client while its batch with sequence 0 is still in flight).
                    refused[i] = KafkaApiError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, (
                        f"Invalid sequence number for producer {producer_id} in partition {topic}-{index}: "
                        f"{sequence} (incoming seq. number). Expected sequence 0 for transactions v2 idempotent "
                        "producer with no existing state."))
        # Appended (or queued in the partition's lane, in order) before the turn ends; acks=all waits after.
        result = _append_verified(services, request, entries, refused)
    return await result if asyncio.iscoroutine(result) else result


async def _add_with_retries(services: Services, request: ApiRequest[ProduceRequest], coordinator: TransactionCoordinator, transactional_id: str,
                            producer_id: int, epoch: int, tps: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    """The coordinator's answer, asked again while it is CONCURRENT_TRANSACTIONS for a while
    (Kafka's maybeRetryOnConcurrentTransactions)."""
    config = services.config
    backoff_s = config["add.partitions.to.txn.retry.backoff.ms"] / 1000
    deadline = time.monotonic() + min(config["add.partitions.to.txn.retry.backoff.max.ms"],
                                      config["request.timeout.ms"]) / 1000
    while True:
        codes = await coordinator.add_for_leader(transactional_id, producer_id, epoch, tps)
        if time.monotonic() >= deadline or ErrorCode.CONCURRENT_TRANSACTIONS not in codes.values():
            return codes
        await asyncio.sleep(backoff_s)


def _coordinator_refusal(code: ErrorCode, version: int) -> KafkaApiError:
    """A partition the coordinator did not verify or add, as Kafka 4.4's ReplicaManager answers it
    for this Produce version: TRANSACTION_ABORTABLE (not in the transaction) from v11, before it
    INVALID_TXN_STATE (AddPartitionsToTxnManager's DEFAULT_ERROR); CONCURRENT_TRANSACTIONS from v12
    (the leader asked again meanwhile), before it NOT_ENOUGH_REPLICAS, as are the coordinator errors
    that leave the partition unverified (retriable)."""
    if code == ErrorCode.TRANSACTION_ABORTABLE and version < TRANSACTION_ABORTABLE_FROM:
        code = ErrorCode.INVALID_TXN_STATE
    if code == ErrorCode.INVALID_TXN_STATE:
        return KafkaApiError(code, "Partition was not added to the transaction")
    if code in _UNVERIFIABLE or (code == ErrorCode.CONCURRENT_TRANSACTIONS and version < ADD_PARTITION_FROM):
        return KafkaApiError(ErrorCode.NOT_ENOUGH_REPLICAS, "Unable to verify the partition has been added to the "
                             f"transaction. Underlying error: {code.name}")
    return KafkaApiError(code)


async def _verify_remotely_then_append(services: Services, request: ApiRequest[ProduceRequest], entries: list[tuple[str, int, Any]],
                                       refused: dict[int, KafkaApiError],
                                       remote: dict[tuple[int, int], list[int]],
                                       coordinator: TransactionCoordinator) -> ProduceResponse | CloseConnection | None:
    txn_id = request.body["transactional_id"]
    assert txn_id is not None  # a transactional request's (see handle)
    for (producer_id, epoch), indexes in remote.items():
        tps = [(entries[i][0], entries[i][1]) for i in indexes]
        codes = await coordinator.verify_remote(txn_id, producer_id, epoch, tps)
        for i, tp in zip(indexes, tps, strict=True):
            if codes[tp] != ErrorCode.NONE:
                refused[i] = _coordinator_refusal(codes[tp], request.api_version)
    result = _append_verified(services, request, entries, refused)
    return await result if asyncio.iscoroutine(result) else result


def _append_verified(services: Services, request: ApiRequest[ProduceRequest], entries: list[tuple[str, int, Any]],
                     refused: dict[int, KafkaApiError],
                     check: Any = None) -> _Answered | Coroutine[Any, Any, _Answered]:
    body = request.body
    accepted = [e for i, e in enumerate(entries) if i not in refused]
    done: Completion[list[Any]] = Completion()
    if check is None:
        check = _check_txn_batches if request.api_version >= 7 else _check_txn_batches_before_v7
    services.replica_manager.append_records(accepted, body["acks"], body["timeout_ms"], done, check)

    def merged(appended: list[Any]) -> list[Any]:
        it = iter(appended)
        return [refused[i] if i in refused else next(it) for i in range(len(entries))]

    if done.done:
        return _response(services, request, merged(done.value))
    return _respond_merged(services, request, done.wait(), merged)


async def _respond_merged(services: Services, request: ApiRequest[ProduceRequest], waiting: asyncio.Future[list[Any]],
                          merged: Callable[[list[Any]], list[Any]]) -> ProduceResponse | CloseConnection | None:
    return _response(services, request, merged(await waiting))


# The per-record-set check handed to the replica manager (a C-level partial, not a wrapper).
_check_batches_before_v7 = functools.partial(_check_batches, version=6)
_check_txn_batches = functools.partial(_check_batches, transactional=True)
_check_txn_batches_before_v7 = functools.partial(_check_batches, version=6, transactional=True)


def error_response(request: ApiRequest[ProduceRequest], code: int) -> ProduceResponse:
    responses: list[TopicProduceResponse] = []
    for t in request.body["topic_data"]:
        answer: TopicProduceResponse = {
            "name": t["name"], "partition_responses": [_partition_result(p["index"], code) for p in t["partition_data"]]}
        if "topic_id" in t:  # decoded at v13 (the codec writes it from v13 only)
            answer["topic_id"] = t["topic_id"]
        responses.append(answer)
    return {"responses": responses, "throttle_time_ms": 0}
