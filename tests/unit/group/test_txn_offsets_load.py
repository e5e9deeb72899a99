"""TxnOffsetCommit's offsets across a reload, over real __consumer_offsets logs.

The loader hands transactional records and markers to the group shard (Kafka's
CoordinatorLoaderImpl): the marker alone decides a transaction's offsets on reload, so a broker
that crashes right after writing a COMMIT marker comes back with the offsets committed, an ABORT
drops them, and a transaction still open at load leaves them pending until its marker lands.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from group_harness import Clock, Node, started

from odradek.broker.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from odradek.protocol.records import iter_batches

pytestmark = pytest.mark.timeout(10)

GROUP = "txn-group"
PRODUCER_ID, EPOCH = 4000, 3


async def settle() -> None:
    import asyncio

    for _ in range(5):
        await asyncio.sleep(0)


async def commit_in_transaction(c: GroupCoordinator, offset: int) -> int:
    """Commit ``offset`` for u-0 inside the producer's transaction; the group's partition."""
    errors = await c.commit_txn_offsets(GROUP, PRODUCER_ID, EPOCH, "", None, -1, [("u", 0, offset, -1, "m")])
    assert [int(e) for e in errors] == [0]
    return c.partition_for(GROUP)


def committed(c: GroupCoordinator) -> int | None:
    [(_, [(_, om)])] = c.fetch_offsets(GROUP, [("u", [0])])
    return None if om is None else om.committed_offset


async def crash_and_reload(node: Node, tmp_path: Path, c: GroupCoordinator, clock: Clock) -> tuple[Node, GroupCoordinator]:
    """Drop the coordinator without a shutdown and reopen the logs from disk (a crash)."""
    c.runtime.active = False
    node.replica_manager.close()
    fresh = Node(tmp_path, clock)
    return fresh, await started(fresh)


def batches(node: Node, partition: int) -> list:
    return list(iter_batches(node.replica_manager.read_internal(OFFSETS_TOPIC, partition, 0, 1 << 20)))


@pytest.mark.parametrize("commit", [True, False])
async def test_a_marker_alone_decides_the_offsets_on_reload(node: Node, tmp_path: Path, clock: Clock,
                                                            commit: bool) -> None:
    c = await started(node)
    partition = await commit_in_transaction(c, 42)
    assert committed(c) is None and c.txn_offsets.has_pending(GROUP, "u", 0)
    # The marker lands and the broker crashes before anything else is written.
    node.replica_manager.logs[(OFFSETS_TOPIC, partition)].append_end_txn_marker(
        PRODUCER_ID, EPOCH, 0, commit, leader_epoch=0)
    node, c = await crash_and_reload(node, tmp_path, c, clock)
    try:
        assert committed(c) == (42 if commit else None)
        assert not c.txn_offsets.has_pending(GROUP, "u", 0)
    finally:
        node.replica_manager.close()


async def test_an_open_transaction_stays_pending_then_its_marker_commits_it(node: Node, tmp_path: Path,
                                                                             clock: Clock) -> None:
    c = await started(node)
    await c.commit_offsets(GROUP, "", None, -1, 8, -1, [("u", 0, 7, -1, "", -1)])
    partition = await commit_in_transaction(c, 42)
    node, c = await crash_and_reload(node, tmp_path, c, clock)
    try:
        # Reloaded: the ordinary commit is the group's offset, the transaction's is pending.
        assert committed(c) == 7 and c.txn_offsets.has_pending(GROUP, "u", 0)
        log = node.replica_manager.logs[(OFFSETS_TOPIC, partition)]
        end = log.log_end_offset
        log.append_end_txn_marker(PRODUCER_ID, EPOCH, 0, True, leader_epoch=0)
        c.on_transaction_completed(OFFSETS_TOPIC, partition, PRODUCER_ID, True)  # the replica manager's call
        await settle()
        assert committed(c) == 42 and not c.txn_offsets.has_pending(GROUP, "u", 0)
        # Only the marker was written: no second, ordinary offset record.
        assert log.log_end_offset == end + 1
        assert batches(node, partition)[-1].is_control
    finally:
        node.replica_manager.close()


async def test_an_abort_at_runtime_drops_the_offsets_and_writes_nothing(node: Node) -> None:
    c = await started(node)
    await c.commit_offsets(GROUP, "", None, -1, 8, -1, [("u", 0, 7, -1, "", -1)])
    partition = await commit_in_transaction(c, 42)
    log = node.replica_manager.logs[(OFFSETS_TOPIC, partition)]
    log.append_end_txn_marker(PRODUCER_ID, EPOCH, 0, False, leader_epoch=0)
    end = log.log_end_offset
    c.on_transaction_completed(OFFSETS_TOPIC, partition, PRODUCER_ID, False)
    await settle()
    assert committed(c) == 7 and not c.txn_offsets.has_pending(GROUP, "u", 0)
    assert log.log_end_offset == end


async def test_an_ordinary_commit_written_after_the_transactions_offset_wins_at_its_commit(node: Node) -> None:
    # Kafka's replayEndTransactionMarker: a transaction's offset is committed over an older record
    # only; an ordinary commit written between the transaction's offset record and its marker is
    # the newer one and stays.
    c = await started(node)
    partition = await commit_in_transaction(c, 42)
    await c.commit_offsets(GROUP, "", None, -1, 8, -1, [("u", 0, 50, -1, "", -1)])
    assert committed(c) == 50
    node.replica_manager.logs[(OFFSETS_TOPIC, partition)].append_end_txn_marker(
        PRODUCER_ID, EPOCH, 0, True, leader_epoch=0)
    c.on_transaction_completed(OFFSETS_TOPIC, partition, PRODUCER_ID, True)
    await settle()
    assert committed(c) == 50 and not c.txn_offsets.has_pending(GROUP, "u", 0)


async def test_a_transactions_offset_still_wins_over_an_older_ordinary_commit_of_another_partition(
        node: Node) -> None:
    # Only the partition with a newer ordinary record keeps it; the transaction's other offsets commit.
    c = await started(node)
    errors = await c.commit_txn_offsets(GROUP, PRODUCER_ID, EPOCH, "", None, -1,
                                        [("t", 0, 42, -1, "m"), ("t", 1, 43, -1, "m")])
    assert [int(e) for e in errors] == [0, 0]
    partition = c.partition_for(GROUP)
    await c.commit_offsets(GROUP, "", None, -1, 8, -1, [("t", 0, 50, -1, "", -1)])
    node.replica_manager.logs[(OFFSETS_TOPIC, partition)].append_end_txn_marker(
        PRODUCER_ID, EPOCH, 0, True, leader_epoch=0)
    c.on_transaction_completed(OFFSETS_TOPIC, partition, PRODUCER_ID, True)
    await settle()
    [(_, got)] = c.fetch_offsets(GROUP, [("t", [0, 1])])
    assert [om.committed_offset for _, om in got] == [50, 43]


@pytest.mark.parametrize("marker_before_crash", [True, False])
async def test_the_newer_ordinary_commit_also_wins_on_reload(node: Node, tmp_path: Path, clock: Clock,
                                                             marker_before_crash: bool) -> None:
    c = await started(node)
    await c.commit_offsets(GROUP, "", None, -1, 8, -1, [("u", 0, 7, -1, "", -1)])  # older than the transaction's
    partition = await commit_in_transaction(c, 42)
    await c.commit_offsets(GROUP, "", None, -1, 8, -1, [("u", 0, 50, -1, "", -1)])  # newer
    if marker_before_crash:
        node.replica_manager.logs[(OFFSETS_TOPIC, partition)].append_end_txn_marker(
            PRODUCER_ID, EPOCH, 0, True, leader_epoch=0)
    node, c = await crash_and_reload(node, tmp_path, c, clock)
    try:
        assert committed(c) == 50
        if not marker_before_crash:  # still open at the load: pending, then its marker lands
            assert c.txn_offsets.has_pending(GROUP, "u", 0)
            node.replica_manager.logs[(OFFSETS_TOPIC, partition)].append_end_txn_marker(
                PRODUCER_ID, EPOCH, 0, True, leader_epoch=0)
            c.on_transaction_completed(OFFSETS_TOPIC, partition, PRODUCER_ID, True)
            await settle()
        assert committed(c) == 50 and not c.txn_offsets.has_pending(GROUP, "u", 0)
    finally:
        node.replica_manager.close()
