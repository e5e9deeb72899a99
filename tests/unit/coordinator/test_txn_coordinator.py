"""The transaction coordinator over real Log files (no broker process): state transitions as
Kafka's, the records it writes (read back by reloading a fresh coordinator over the same logs),
markers on the data partitions, timed-out transactions aborted, idle ids expired."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from odradek.broker.coordinator.partition_writer import ReplicaManagerWriter
from odradek.broker.txn.coordinator import TransactionCoordinator, TxnConfig
from odradek.broker.txn.records import TxnState
from odradek.broker.txn.shard import TXN_TOPIC
from odradek.controller import metadata_format
from odradek.controller.image import MetadataImage, PartitionState, TopicImage
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.protocol.records import Record, encode_batch, iter_batches
from tests.unit.group.group_harness import Clock, LocalLogs

pytestmark = pytest.mark.timeout(10)

STATE_PARTITIONS = 2
TOPIC = "data"


class MarkerLogs(LocalLogs):
    """LocalLogs plus the replica manager's marker entry point (Log.append_end_txn_marker)."""

    def append_end_txn_markers(self, markers, timeout_ms, callback) -> None:
        results = []
        for topic, partition, pid, epoch, coordinator_epoch, commit, version in markers:
            try:
                results.append(self._log(topic, partition).append_end_txn_marker(
                    pid, epoch, coordinator_epoch, commit, leader_epoch=0, transaction_version=version))
            except KafkaApiError as exc:
                results.append(exc)
        callback(results)


class _Metadata:
    def __init__(self) -> None:
        self.image = MetadataImage()
        self.image.features[metadata_format.FEATURE] = metadata_format.LATEST  # a new cluster's level
        self.image.topics[TXN_TOPIC] = TopicImage(TXN_TOPIC, uuid.uuid4(), {
            p: PartitionState(p, 1, 0, 0, (1,), (1,)) for p in range(STATE_PARTITIONS)}, is_internal=True)
        self.image.topics[TOPIC] = TopicImage(TOPIC, uuid.uuid4(), {0: PartitionState(0, 1, 0, 0, (1,), (1,))})


class Ids:
    def __init__(self) -> None:
        self.next = 100

    async def next_id(self) -> int:
        self.next += 1
        return self.next - 1


@pytest.fixture
def logs(tmp_path: Path):
    lg = MarkerLogs(tmp_path / "logs")
    for p in range(STATE_PARTITIONS):
        lg.open(TXN_TOPIC, p)
    lg.open(TOPIC, 0)
    yield lg
    lg.close()


async def started(logs: MarkerLogs, clock: Clock, **config: int) -> TransactionCoordinator:
    c = TransactionCoordinator(TxnConfig(num_partitions=STATE_PARTITIONS, abort_interval_ms=3_600_000,
                                         expire_interval_ms=3_600_000, **config),
                               ReplicaManagerWriter(logs), logs, _Metadata(), Ids(), 1, time_ms=clock)
    await c.start()
    for _ in range(100):
        if len(c.runtime.active_partitions()) == STATE_PARTITIONS:
            return c
        await asyncio.sleep(0)
    raise AssertionError("not loaded")


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def produce(logs: MarkerLogs, pid: int, epoch: int, seq: int, value: bytes) -> None:
    logs.logs[(TOPIC, 0)].append(encode_batch([Record(timestamp=0, key=None, value=value)], producer_id=pid,
                                              producer_epoch=epoch, base_sequence=seq, is_transactional=True),
                                 leader_epoch=0)


def markers(logs: MarkerLogs) -> list[tuple[int, int, bool]]:
    """(producer id, epoch, commit) of each control batch of the data partition."""
    lg = logs.logs[(TOPIC, 0)]
    out, offset = [], 0
    while offset < lg.log_end_offset:  # a read is one segment's batches
        for batch in iter_batches(lg.read(offset, 1 << 20).read_bytes()):
            if batch.is_control:
                key = batch.records[0].key
                out.append((batch.producer_id, batch.producer_epoch, key[-1] == 1))
            offset = batch.next_offset
    return out


async def test_init_bumps_the_epoch_and_state_survives_a_reload(logs: MarkerLogs) -> None:
    clock = Clock()
    c = await started(logs, clock)
    assert await c.init_producer_id("t1", 60_000) == (ErrorCode.NONE, 100, 0)
    assert await c.init_producer_id("t1", 60_000) == (ErrorCode.NONE, 100, 1)
    assert await c.init_producer_id("t1", 16 * 60_000) == (ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1)
    assert await c.add_partitions("t1", 100, 1, {TOPIC: [0]}) == ErrorCode.NONE
    await c.shutdown()
    again = await started(logs, clock)
    meta = again.describe("t1")
    assert meta is not None and (meta.producer_id, meta.producer_epoch, meta.state) == (100, 1, TxnState.ONGOING)
    assert meta.partitions == {TOPIC: {0}} and meta.start_ms == clock.now
    await again.shutdown()


async def test_commit_writes_markers_then_complete(logs: MarkerLogs) -> None:
    c = await started(logs, Clock())
    _, pid, epoch = await c.init_producer_id("t2", 60_000)
    assert (await c.end_transaction("t2", pid, epoch, True)).error == ErrorCode.INVALID_TXN_STATE
    assert await c.add_partitions("t2", pid, epoch, {TOPIC: [0]}) == ErrorCode.NONE
    produce(logs, pid, epoch, 0, b"v")
    assert (await c.end_transaction("t2", pid, epoch, True)).error == ErrorCode.NONE
    await settle()
    assert markers(logs) == [(pid, epoch, True)]
    meta = c.describe("t2")
    assert meta is not None and meta.state is TxnState.COMPLETE_COMMIT and meta.partitions == {}
    assert (await c.end_transaction("t2", pid, epoch, True)).error == ErrorCode.NONE  # retry
    assert (await c.end_transaction("t2", pid, epoch, False)).error == ErrorCode.INVALID_TXN_STATE
    await c.shutdown()


async def test_a_new_incarnation_aborts_the_open_transaction_with_a_bumped_epoch(logs: MarkerLogs) -> None:
    c = await started(logs, Clock())
    _, pid, epoch = await c.init_producer_id("t3", 60_000)
    assert await c.add_partitions("t3", pid, epoch, {TOPIC: [0]}) == ErrorCode.NONE
    produce(logs, pid, epoch, 0, b"zombie")
    assert await c.init_producer_id("t3", 60_000) == (ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1)
    await settle()
    assert markers(logs) == [(pid, epoch + 1, False)]
    assert await c.init_producer_id("t3", 60_000) == (ErrorCode.NONE, pid, epoch + 2)
    # the old incarnation is fenced everywhere
    assert await c.add_partitions("t3", pid, epoch, {TOPIC: [0]}) == ErrorCode.PRODUCER_FENCED
    assert (await c.end_transaction("t3", pid, epoch, True)).error == ErrorCode.PRODUCER_FENCED
    assert c.verify("t3", pid, epoch, TOPIC, 0) == ErrorCode.PRODUCER_FENCED  # Kafka's verification answer
    await c.shutdown()


async def test_timed_out_transaction_is_aborted_and_idle_ids_expire(logs: MarkerLogs) -> None:
    clock = Clock()
    c = await started(logs, clock, id_expiration_ms=10_000)
    _, pid, epoch = await c.init_producer_id("t4", 1000)
    assert await c.add_partitions("t4", pid, epoch, {TOPIC: [0]}) == ErrorCode.NONE
    produce(logs, pid, epoch, 0, b"late")
    assert c.abort_timed_out_transactions() == 0
    clock.now += 1001
    assert c.abort_timed_out_transactions() == 1
    await settle()
    assert markers(logs) == [(pid, epoch + 1, False)]
    meta = c.describe("t4")
    assert meta is not None and meta.state is TxnState.COMPLETE_ABORT
    assert c.expire_transactional_ids() == 0
    clock.now += 10_001
    assert c.expire_transactional_ids() == 1
    await settle()
    assert c.describe("t4") is None
    await c.shutdown()
    again = await started(logs, clock)
    assert again.describe("t4") is None  # the tombstone is in the log
    await again.shutdown()


async def test_kip360_producer_recovers_after_the_coordinator_aborted_its_transaction(logs: MarkerLogs) -> None:
    clock = Clock()
    c = await started(logs, clock)
    _, pid, epoch = await c.init_producer_id("t5", 1000)
    assert await c.add_partitions("t5", pid, epoch, {TOPIC: [0]}) == ErrorCode.NONE
    clock.now += 1001
    assert c.abort_timed_out_transactions() == 1
    await settle()
    # The aborted producer names its (now previous) epoch: it goes on with the current one.
    assert await c.init_producer_id("t5", 1000, pid, epoch) == (ErrorCode.NONE, pid, epoch + 1)
    assert await c.init_producer_id("t5", 1000, pid, epoch + 1) == (ErrorCode.NONE, pid, epoch + 2)
    # An older epoch than the previous one is a zombie.
    assert await c.init_producer_id("t5", 1000, pid, epoch) == (ErrorCode.PRODUCER_FENCED, -1, -1)
    await c.shutdown()
