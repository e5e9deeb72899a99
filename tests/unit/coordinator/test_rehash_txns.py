"""Transactional ids whose __transaction_state partition changed when the partition rule was fixed:
their state, written where the previous releases put it, is taken over by Kafka's partition
(broker/coordinator/rehash.py), and an ongoing transaction is completed or aborted from there with
markers the data partitions accept, on real log files.

The "previous release" state is written as it wrote it: the TransactionLogValue on
``legacy_partition_for``'s partition, the producer's batches and its earlier marker (with the old
partition's leader epoch as coordinator epoch) on the data partition. 3 state partitions: 0 and 2
are twins, 1 is its own.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from odradek.broker.coordinator.hashing import legacy_partition_for, partition_for
from odradek.broker.coordinator.partition_writer import ReplicaManagerWriter
from odradek.broker.coordinator.rehash import is_marker_key
from odradek.broker.txn.coordinator import TransactionCoordinator, TxnConfig
from odradek.broker.txn.records import TxnLogValue, TxnState, key_bytes, value_bytes
from odradek.broker.txn.shard import TXN_TOPIC
from odradek.controller import metadata_format
from odradek.controller.image import MetadataImage, PartitionState, TopicImage
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.protocol.records import Record, encode_batch, iter_batches
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.producer_state import ProducerStateManager
from tests.unit.coordinator.test_txn_coordinator import TOPIC, Ids, MarkerLogs, markers, produce
from tests.unit.group.group_harness import Clock

pytestmark = pytest.mark.timeout(20)

N = 3
MOVED = "grp-11"  # old rule: partition 2, Kafka's: 0
STAYS = "grp-1"  # 0 under both
PID, EPOCH = 500, 3
OLD_LEADER_EPOCH, NEW_LEADER_EPOCH = 7, 2  # the old partition's leader epoch is above the new one's


class _Metadata:
    def __init__(self, leader_of_2: int = 1, level: int = metadata_format.LATEST) -> None:
        self.image = MetadataImage()
        self.image.features[metadata_format.FEATURE] = level  # LATEST: the migration is on
        epochs = {0: NEW_LEADER_EPOCH, 1: 0, 2: OLD_LEADER_EPOCH}
        self.image.topics[TXN_TOPIC] = TopicImage(TXN_TOPIC, uuid.uuid4(), {
            p: PartitionState(p, leader_of_2 if p == 2 else 1, epochs[p], 0, (1,), (1,)) for p in range(N)},
            is_internal=True)
        self.image.topics[TOPIC] = TopicImage(TOPIC, uuid.uuid4(), {0: PartitionState(0, 1, 0, 0, (1,), (1,))})


@pytest.fixture
def logs(tmp_path):  # type: ignore[no-untyped-def]
    lg = MarkerLogs(tmp_path / "logs")
    for p in range(N):
        lg.open(TXN_TOPIC, p)
    # The data partition keeps its producers' state, as a broker's does: it refuses a marker whose
    # coordinator epoch is older than the producer's last one.
    data = tmp_path / "logs" / f"{TOPIC}-0"
    lg.logs[(TOPIC, 0)] = Log.open(data, LogConfig(), producer_state=ProducerStateManager(data))
    yield lg
    lg.close()


def test_the_ids_are_what_the_tests_say() -> None:
    assert (legacy_partition_for(MOVED, N), partition_for(MOVED, N)) == (2, 0)
    assert (legacy_partition_for(STAYS, N), partition_for(STAYS, N)) == (0, 0)


def write_previous_release_state(logs: MarkerLogs, clock: Clock, timeout_ms: int = 60_000) -> None:
    """MOVED's producer committed one transaction (its marker from the old partition's leader, at
    coordinator epoch 7) and has a second one open on the data partition."""
    produce(logs, PID, EPOCH, 0, b"committed")
    logs.logs[(TOPIC, 0)].append_end_txn_marker(PID, EPOCH, OLD_LEADER_EPOCH, True, leader_epoch=0)
    produce(logs, PID, EPOCH, 1, b"open")
    ongoing = TxnLogValue(PID, EPOCH, timeout_ms, TxnState.ONGOING, {TOPIC: {0}}, clock.now, clock.now)
    logs.logs[(TXN_TOPIC, 2)].append(encode_batch([Record(timestamp=clock.now, key=key_bytes(MOVED),
                                                          value=value_bytes(ongoing))]), leader_epoch=0)


async def started(logs: MarkerLogs, clock: Clock, metadata: _Metadata | None = None,
                  wait_for_migrations: bool = True) -> TransactionCoordinator:
    metadata = metadata or _Metadata()
    led = {p for p, s in metadata.image.topics[TXN_TOPIC].partitions.items() if s.leader == 1}
    c = TransactionCoordinator(TxnConfig(num_partitions=N, abort_interval_ms=3_600_000, expire_interval_ms=3_600_000),
                               ReplicaManagerWriter(logs), logs, metadata, Ids(), 1, time_ms=clock)
    await c.start()
    deadline = time.monotonic() + 10
    while c.runtime.active_partitions() != led or (wait_for_migrations and c.migrations.busy):
        assert time.monotonic() < deadline, "not loaded"
        await asyncio.sleep(0.005)
    return c


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_an_ongoing_transaction_of_a_moved_id_commits_from_its_new_partition(logs: MarkerLogs) -> None:
    clock = Clock()
    write_previous_release_state(logs, clock)
    c = await started(logs, clock)
    meta = c.describe(MOVED)
    assert meta is not None and (meta.producer_id, meta.producer_epoch, meta.state) == (PID, EPOCH, TxnState.ONGOING)
    assert meta.partitions == {TOPIC: {0}}
    assert c.partition_for(MOVED) == 0
    assert (await c.end_transaction(MOVED, PID, EPOCH, True)).error == ErrorCode.NONE
    await settle()
    # The COMMIT marker is in the data partition: its coordinator epoch (the new partition's leader
    # epoch 2 plus the old one's 7) is not below the 7 of the producer's last marker, which the
    # partition would refuse as a zombie coordinator's.
    assert markers(logs) == [(PID, EPOCH, True), (PID, EPOCH, True)]
    assert c.describe(MOVED).state is TxnState.COMPLETE_COMMIT  # type: ignore[union-attr]
    # The producer goes on: a new incarnation bumps the epoch, the old one is fenced.
    assert await c.init_producer_id(MOVED, 60_000) == (ErrorCode.NONE, PID, EPOCH + 1)
    assert await c.add_partitions(MOVED, PID, EPOCH, {TOPIC: [0]}) == ErrorCode.PRODUCER_FENCED
    await c.shutdown()
    again = await started(logs, clock)
    meta = again.describe(MOVED)
    assert meta is not None and (meta.producer_id, meta.producer_epoch, meta.state) == (PID, EPOCH + 1, TxnState.EMPTY)
    await again.shutdown()


async def test_a_moved_ongoing_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(logs: MarkerLogs) -> None:
    clock = Clock()
    write_previous_release_state(logs, clock, timeout_ms=1000)
    c = await started(logs, clock)
    clock.now += 1001
    assert c.abort_timed_out_transactions() == 1
    await settle()
    assert markers(logs) == [(PID, EPOCH, True), (PID, EPOCH + 1, False)]
    assert (await c.end_transaction(MOVED, PID, EPOCH, True)).error == ErrorCode.PRODUCER_FENCED
    await c.shutdown()


async def test_a_moved_id_waits_while_its_old_partition_cannot_be_read(logs: MarkerLogs) -> None:
    """Partition 2 led by an unreachable broker 2: MOVED (from 2) is not served by partition 0 yet;
    STAYS, on the same partition, is."""
    clock = Clock()
    write_previous_release_state(logs, clock)
    metadata = _Metadata(leader_of_2=2)  # no such broker registered: the twin cannot be read
    c = await started(logs, clock, metadata, wait_for_migrations=False)
    with pytest.raises(KafkaApiError) as err:
        c.describe(MOVED)
    assert err.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert await c.init_producer_id(MOVED, 60_000) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1, -1)
    assert await c.init_producer_id(STAYS, 60_000) == (ErrorCode.NONE, 100, 0)
    await c.shutdown()


def marker_records(logs: MarkerLogs) -> list[int]:
    """The partitions of __transaction_state holding a SWITCHED or MIGRATED marker."""
    out = []
    for p in range(N):
        lg = logs.logs[(TXN_TOPIC, p)]
        data = lg.read(0, 1 << 20).read_bytes() if lg.log_end_offset else b""
        if any(is_marker_key(r.key) for batch in iter_batches(data) for r in batch.records):
            out.append(p)
    return out


async def test_below_the_migrations_level_a_moved_id_stays_where_0_1_0_puts_it_until_the_level_rises(
        logs: MarkerLogs) -> None:
    """At metadata format level 1 (a rolling upgrade from 0.1.0 not finished) the id is served from
    the partition 0.1.0 uses, as every broker of the cluster routes it; nothing is set aside and no
    marker is written. When the level reaches 2 the partitions load again and its state moves."""
    clock = Clock()
    write_previous_release_state(logs, clock)
    metadata = _Metadata(level=1)
    c = await started(logs, clock, metadata)
    assert c.partition_for(MOVED) == 2
    meta = c.describe(MOVED)
    assert meta is not None and (meta.producer_id, meta.producer_epoch, meta.state) == (PID, EPOCH, TxnState.ONGOING)
    # Its markers carry partition 2's leader epoch (7), as 0.1.0's do: the data partition takes them.
    assert (await c.end_transaction(MOVED, PID, EPOCH, True)).error == ErrorCode.NONE
    await settle()
    assert markers(logs) == [(PID, EPOCH, True), (PID, EPOCH, True)]
    assert await c.init_producer_id(MOVED, 60_000) == (ErrorCode.NONE, PID, EPOCH + 1)
    # AddOffsetsToTxn names the group's __consumer_offsets partition by the same rule.
    assert (legacy_partition_for("grp-11", 50), partition_for("grp-11", 50)) == (4, 44)
    assert await c.add_offsets(MOVED, PID, EPOCH + 1, "grp-11") == ErrorCode.NONE
    assert c.describe(MOVED).partitions == {"__consumer_offsets": {4}}  # type: ignore[union-attr]
    assert marker_records(logs) == []

    metadata.image.features[metadata_format.FEATURE] = metadata_format.COORDINATOR_REHASH
    c.follow_partition_rule()
    with pytest.raises(KafkaApiError) as err:
        c.describe(STAYS)  # every partition loads again: retriable
    assert err.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    deadline = time.monotonic() + 10
    while len(c.runtime.active_partitions()) < N or c.migrations.busy:
        assert time.monotonic() < deadline, "not reloaded"
        await asyncio.sleep(0.005)
    assert c.partition_for(MOVED) == 0
    meta = c.describe(MOVED)
    assert meta is not None and (meta.producer_id, meta.producer_epoch, meta.state) == (
        PID, EPOCH + 1, TxnState.ONGOING)
    assert meta.partitions == {"__consumer_offsets": {4}}  # what its transaction holds stays
    assert marker_records(logs) == [0, 2]
    await c.shutdown()
