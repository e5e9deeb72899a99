"""Transactions v2 (KIP-890 part 2) in the transaction coordinator over real Log files: the epoch
bump of every commit and abort (in the Prepare* record, in the markers, in the answer), the hand-over
to a new producer id when the bump exhausts the epoch and the retries across it, and the coordinator's
own aborts at each finalized transaction.version. Expected values are Kafka 4.4's
(TransactionCoordinator.endTransaction, TransactionMetadata.prepareAbortOrCommit/prepareComplete); the
wire comparison with a real Kafka 4.4 is tests/integration/test_transactions_v2_wire.py."""

from __future__ import annotations

import time

import pytest

from odradek.broker.coordinator.hashing import partition_for
from odradek.broker.txn.coordinator import EndResult, TransactionCoordinator
from odradek.broker.txn.records import TxnLogValue, TxnState, decode_value, key_bytes, value_bytes
from odradek.broker.txn.shard import TXN_TOPIC
from odradek.controller import features
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import Record, encode_batch, iter_batches
from tests.unit.coordinator.test_txn_coordinator import (
    TOPIC,
    MarkerLogs,
    logs,
    markers,
    produce,
    settle,
    started,
)
from tests.unit.group.group_harness import Clock

pytestmark = pytest.mark.timeout(10)
__all__ = ["logs"]  # the fixture, shared with test_txn_coordinator

V2 = 2


def at_level(c: TransactionCoordinator, level: int) -> None:
    """The cluster's finalized transaction.version (a new cluster's metadata.version with it)."""
    c.metadata.image.features.update({features.METADATA_VERSION: features.METADATA_VERSION_LEVEL,
                                      features.TRANSACTION_VERSION: level})


def records_of(logs: MarkerLogs, txn_id: str) -> list[TxnLogValue]:
    """Every value ``txn_id`` has in __transaction_state, in log order."""
    out = []
    for p in range(2):
        lg = logs.logs[(TXN_TOPIC, p)]
        offset = 0
        while offset < lg.log_end_offset:
            for batch in iter_batches(lg.read(offset, 1 << 20).read_bytes()):
                out += [decode_value(r.value) for r in batch.records if r.key == key_bytes(txn_id) and r.value]
                offset = batch.next_offset
    return out


async def test_each_v2_commit_and_abort_bumps_the_epoch(logs: MarkerLogs) -> None:
    clock = Clock()
    c = await started(logs, clock)
    at_level(c, 2)  # TransactionLogValue v1, whose tagged fields hold the version and previous id
    _, pid, epoch = await c.init_producer_id("v2-a", 60_000)
    assert await c.add_partitions("v2-a", pid, epoch, {TOPIC: [0]}, client_transaction_version=V2) == ErrorCode.NONE
    produce(logs, pid, epoch, 0, b"c")
    assert await c.end_transaction("v2-a", pid, epoch, True, V2) == EndResult(ErrorCode.NONE, pid, epoch + 1)
    await settle()
    assert markers(logs) == [(pid, epoch + 1, True)]  # the marker carries the bumped epoch
    # The next transaction runs at the bumped epoch; its abort bumps again.
    assert await c.add_partitions("v2-a", pid, epoch + 1, {TOPIC: [0]}, client_transaction_version=V2) == 0
    produce(logs, pid, epoch + 1, 0, b"a")
    assert await c.end_transaction("v2-a", pid, epoch + 1, False, V2) == EndResult(ErrorCode.NONE, pid, epoch + 2)
    await settle()
    assert markers(logs) == [(pid, epoch + 1, True), (pid, epoch + 2, False)]
    states = [(v.state, v.producer_epoch, v.client_transaction_version, v.previous_producer_id)
              for v in records_of(logs, "v2-a")]
    assert states == [(TxnState.EMPTY, epoch, 0, pid),
                      (TxnState.ONGOING, epoch, V2, pid), (TxnState.PREPARE_COMMIT, epoch + 1, V2, pid),
                      (TxnState.COMPLETE_COMMIT, epoch + 1, V2, pid),
                      (TxnState.ONGOING, epoch + 1, V2, pid), (TxnState.PREPARE_ABORT, epoch + 2, V2, pid),
                      (TxnState.COMPLETE_ABORT, epoch + 2, V2, pid)]
    await c.shutdown()
    again = await started(logs, clock)  # memory is the replay of the log
    at_level(again, 2)
    meta = again.describe("v2-a")
    assert meta is not None and (meta.state, meta.producer_epoch, meta.client_transaction_version) == (
        TxnState.COMPLETE_ABORT, epoch + 2, V2)
    assert await again.end_transaction("v2-a", pid, epoch + 1, False, V2) == EndResult(ErrorCode.NONE, pid, epoch + 2)
    await again.shutdown()


async def test_the_bump_that_exhausts_the_epoch_hands_over_to_a_new_producer_id(logs: MarkerLogs) -> None:
    """At epoch 32766 (Short.MaxValue - 1, exhausted) a commit prepares at 32767 with a new producer id
    (TransactionLogValue's next_producer_id) and completes as that id at epoch 0, which EndTxn v5
    answers; a retry names the old id and epoch; the new id goes on."""
    old_pid, exhausted = 5000, 32766
    state = logs.logs[(TXN_TOPIC, partition_for("v2-x", 2))]
    # A producer already at the exhausted epoch, as a coordinator before this one left it.
    state.append(encode_batch([Record(timestamp=int(time.time() * 1000), key=key_bytes("v2-x"), value=value_bytes(
        TxnLogValue(old_pid, exhausted, 60_000, TxnState.COMPLETE_COMMIT, {}, 0, 0, old_pid, -1, V2), 1))]),
        leader_epoch=0)
    c = await started(logs, Clock())
    at_level(c, 2)
    assert await c.add_partitions("v2-x", old_pid, exhausted, {TOPIC: [0]}, client_transaction_version=V2) == 0
    produce(logs, old_pid, exhausted, 0, b"last")
    result = await c.end_transaction("v2-x", old_pid, exhausted, True, V2)
    new_pid = result.producer_id
    assert result == EndResult(ErrorCode.NONE, new_pid, 0) and new_pid not in (old_pid, -1)
    await settle()
    assert markers(logs) == [(old_pid, exhausted + 1, True)]
    prepared, completed = records_of(logs, "v2-x")[-2:]
    assert (prepared.state, prepared.producer_id, prepared.producer_epoch, prepared.next_producer_id) == (
        TxnState.PREPARE_COMMIT, old_pid, exhausted + 1, new_pid)
    assert (completed.state, completed.producer_id, completed.producer_epoch, completed.previous_producer_id,
            completed.next_producer_id) == (TxnState.COMPLETE_COMMIT, new_pid, 0, old_pid, -1)
    # A retry of the commit names the old id at the exhausted epoch: the new id and epoch 0 again.
    assert await c.end_transaction("v2-x", old_pid, exhausted, True, V2) == EndResult(ErrorCode.NONE, new_pid, 0)
    assert (await c.end_transaction("v2-x", old_pid, exhausted, False, V2)).error == ErrorCode.INVALID_TXN_STATE
    # Any other epoch of the old id is a producer id the coordinator no longer maps.
    assert (await c.end_transaction("v2-x", old_pid, 3, True, V2)).error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    # The new id goes on at epoch 0; the old one is unknown to the coordinator now.
    assert await c.add_partitions("v2-x", new_pid, 0, {TOPIC: [0]}, client_transaction_version=V2) == 0
    assert await c.add_partitions("v2-x", old_pid, exhausted + 1, {TOPIC: [0]}) == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    await c.shutdown()


@pytest.mark.parametrize("level", [1, 2])
async def test_a_timeout_abort_takes_the_finalized_transaction_version(logs: MarkerLogs, level: int) -> None:
    """Kafka 4.4 aborts a timed-out transaction at the cluster's transaction.version, bumping the epoch
    once either way; at 2 the abort is a v2 one, so the producer's late EndTxn v5 commit - naming the
    epoch before the bump - is a retry of an aborted transaction: INVALID_TXN_STATE (what the Java
    client throws as InvalidTxnStateException); at 1 an EndTxn of the old epoch is PRODUCER_FENCED."""
    clock = Clock()
    c = await started(logs, clock)
    at_level(c, level)
    version = V2 if level == 2 else 0
    _, pid, epoch = await c.init_producer_id("v2-t", 1000)
    assert await c.add_partitions("v2-t", pid, epoch, {TOPIC: [0]}, client_transaction_version=version) == 0
    produce(logs, pid, epoch, 0, b"late")
    clock.now += 1001
    assert c.abort_timed_out_transactions() == 1
    await settle()
    assert markers(logs) == [(pid, epoch + 1, False)]
    aborted = records_of(logs, "v2-t")[-1]
    assert (aborted.state, aborted.producer_epoch, aborted.client_transaction_version) == (
        TxnState.COMPLETE_ABORT, epoch + 1, version)
    late = await c.end_transaction("v2-t", pid, epoch, True, version)
    assert late.error == (ErrorCode.INVALID_TXN_STATE if level == 2 else ErrorCode.PRODUCER_FENCED)
    await c.shutdown()


async def test_a_v2_end_while_the_markers_are_written_is_concurrent(logs: MarkerLogs) -> None:
    """Prepare* waits for its markers: Kafka's metadata is pending its Complete* meanwhile, so a retry
    (the epoch before the bump) of either kind answers CONCURRENT_TRANSACTIONS, an older epoch
    PRODUCER_FENCED; the next transaction's add waits too."""
    c = await started(logs, Clock())
    _, pid, epoch = await c.init_producer_id("v2-c", 60_000)
    assert await c.add_partitions("v2-c", pid, epoch, {TOPIC: [0]}, client_transaction_version=V2) == 0
    c.markers.write = _never_done  # type: ignore[method-assign]
    assert await c.end_transaction("v2-c", pid, epoch, True, V2) == EndResult(ErrorCode.NONE, pid, epoch + 1)
    for commit in (True, False):
        assert (await c.end_transaction("v2-c", pid, epoch, commit, V2)).error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert (await c.end_transaction("v2-c", pid, epoch + 1, True, V2)).error == ErrorCode.PRODUCER_FENCED
    assert await c.add_partitions("v2-c", pid, epoch + 1, {TOPIC: [0]}, client_transaction_version=V2) == \
        ErrorCode.CONCURRENT_TRANSACTIONS
    await c.shutdown()


async def _never_done(*args: object, **kwargs: object) -> None:
    """A marker round that does not end while the test runs (the leaders are away)."""
    import asyncio

    await asyncio.Event().wait()
