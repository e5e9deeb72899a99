"""``MarkerWriter``: a transaction's COMMIT/ABORT markers to the leaders of its partitions
(Kafka's TransactionMarkerChannelManager, one request per leader per round).

Partitions this broker leads get their markers through ``ReplicaManager.append_end_txn_markers``
(the coordinator's origin, acks=-1); the others through WriteTxnMarkers (api 27) over a
``NodeClient`` to their leader on the inter-broker listener: v2 with the transaction's version
(KIP-1228) for a transactions-v2 transaction, whose markers the leader checks more strictly; v1
otherwise, which every Odradek release serves (a cluster with an older broker cannot finalize
transaction.version 2, so v2 never goes to one). A round's retriable failures
(leader moved, not enough replicas, timeout, node unreachable) are retried after a backoff with
the leaders of the then current metadata; a deleted topic's markers are dropped; errors Kafka
treats as impossible for a coordinator (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED,
...) are logged and dropped: the partition's producer state already holds a newer truth.
``write`` returns when every partition is done or the caller no longer wants it (the coordinator
resigned its partition). Owned by the handler loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from odradek.broker.network.inter_broker_client import NodeClient, NodeClients, NodeUnavailableError
from odradek.broker.runtime.completion import Completion
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.replica.delayed_produce import ProduceCallback
    from odradek.controller.image import MetadataImage
    from odradek.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1
WRITE_TXN_MARKERS_V2 = 2  # transaction_version (KIP-1228)
RETRY_BACKOFF_S = 0.1

RETRIABLE = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.LEADER_NOT_AVAILABLE,
})

TopicPartition = tuple[str, int]


# (topic, partition, producer id, producer epoch, coordinator epoch, commit, transaction version)
Marker = tuple[str, int, int, int, int, bool, int]


class MarkerReplicas(Protocol):
    def append_end_txn_markers(self, markers: list[Marker], timeout_ms: int, callback: ProduceCallback) -> None: ...


class ImageView(Protocol):
    @property
    def image(self) -> MetadataImage: ...


class MarkerWriter:
    def __init__(self, replicas: MarkerReplicas, metadata: ImageView, node_id: int, timeout_ms: int) -> None:
        self.replicas = replicas
        self.metadata = metadata
        self.node_id = node_id
        self.timeout_ms = timeout_ms
        self._clients = NodeClients(f"broker-{node_id}-txn-marker-sender")

    async def close(self) -> None:
        await self._clients.close()

    async def write(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                    partitions: set[TopicPartition], wanted: Callable[[], bool], transaction_version: int = 0) -> None:
        pending = set(partitions)
        while pending and wanted():
            image = self.metadata.image
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(pending):
                state = image.partition(*tp)
                if state is None:
                    pending.discard(tp)  # the topic is gone: nothing to mark
                elif state.leader >= 0:
                    by_leader.setdefault(state.leader, []).append(tp)
            rounds = [self._write_to(leader, tps, producer_id, producer_epoch, coordinator_epoch, commit,
                                     transaction_version) for leader, tps in by_leader.items()]
            for done in await asyncio.gather(*rounds):
                pending -= done
            if pending and wanted():
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def _write_to(self, leader: int, tps: list[TopicPartition], producer_id: int, producer_epoch: int,
                        coordinator_epoch: int, commit: bool, transaction_version: int) -> set[TopicPartition]:
        """The partitions of ``tps`` that are done (marked, or dropped for good)."""
        try:
            if leader == self.node_id:
                codes = await self._write_local(tps, producer_id, producer_epoch, coordinator_epoch, commit,
                                                transaction_version)
            else:
                codes = await self._write_remote(leader, tps, producer_id, producer_epoch, coordinator_epoch, commit,
                                                 transaction_version)
        except (NodeUnavailableError, KafkaApiError) as exc:
            log.debug("markers for producer %d to broker %d: %s", producer_id, leader, exc)
            return set()
        done: set[TopicPartition] = set()
        for tp, code in codes.items():
            if code == ErrorCode.NONE:
                done.add(tp)
            elif code not in RETRIABLE:
                log.warning("dropping the %s marker of producer %d (epoch %d) for %s-%d: %s",
                            "COMMIT" if commit else "ABORT", producer_id, producer_epoch, tp[0], tp[1],
                            ErrorCode(code).name)
                done.add(tp)
        return done

    async def _write_local(self, tps: list[TopicPartition], producer_id: int, producer_epoch: int,
                           coordinator_epoch: int, commit: bool, transaction_version: int) -> dict[TopicPartition, int]:
        done: Completion[list[Any]] = Completion()
        self.replicas.append_end_txn_markers(
            [(t, p, producer_id, producer_epoch, coordinator_epoch, commit, transaction_version) for t, p in tps],
            self.timeout_ms, done)
        results = done.value if done.done else await done.wait()
        return {tp: (r.code if isinstance(r, KafkaApiError) else ErrorCode.NONE) for tp, r in zip(tps, results, strict=True)}

    async def _write_remote(self, leader: int, tps: list[TopicPartition], producer_id: int, producer_epoch: int,
                            coordinator_epoch: int, commit: bool, transaction_version: int) -> dict[TopicPartition, int]:
        client = self.client(leader)
        if client is None:
            return {}
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        body: WriteTxnMarkersRequest = {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
            "coordinator_epoch": coordinator_epoch, "transaction_version": transaction_version,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}]}
        version = WRITE_TXN_MARKERS_V2 if transaction_version >= 2 else WRITE_TXN_MARKERS_VERSION
        response: WriteTxnMarkersResponse = await client.request(WRITE_TXN_MARKERS, version, body,
                                                                 timeout_s=self.timeout_ms / 1000 + 5)
        codes: dict[TopicPartition, int] = {}
        for marker in response["markers"]:
            for topic in marker["topics"]:
                for result in topic["partitions"]:
                    codes[(topic["name"], result["partition_index"])] = result["error_code"]
        return codes

    def client(self, node: int) -> NodeClient | None:
        """This coordinator's connection to broker ``node`` (markers, verification)."""
        reg = self.metadata.image.brokers.get(node)
        if reg is None:
            return None
        return self._clients.get(node, reg.host, reg.port)
