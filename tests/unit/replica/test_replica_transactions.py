"""Transactions on the read side of the replica manager, on real temp-dir logs: markers written
through ``append_end_txn_markers``, the last stable offset held by open transactions and moved by
markers (waking read_committed fetches), aborted transactions in read_committed fetches, and
ListOffsets per isolation level."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from odradek.broker.replica.partition import LATEST_TIMESTAMP, READ_COMMITTED, READ_UNCOMMITTED
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.protocol.records import Record, encode_batch
from odradek.storage.results import AppendInfo
from odradek.storage.txn_index import AbortedTxn
from tests.unit.replica.conftest import Node, batch
from tests.unit.replica.test_replica_manager import _restarted, fetch, produce


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0) -> bytes:
    return encode_batch([Record(timestamp=1000, key=b"k", value=b"v%d" % i) for i in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)


def end_txn(node: Node, *markers: tuple[str, int, int, int, int, bool], timeout_ms: int = 1000) -> list[list[Any]]:
    """Markers of transaction version 0 (WriteTxnMarkers v1's)."""
    calls: list[list[Any]] = []
    node.rm.append_end_txn_markers([(*m, 0) for m in markers], timeout_ms, calls.append)
    return calls


def latest(node: Node, isolation: int) -> int:
    return node.rm.fetch_offset_for_timestamp("t", 0, -1, LATEST_TIMESTAMP, isolation)[0]


async def test_open_transaction_holds_the_lso_and_its_marker_moves_it(node: Node) -> None:
    part = node.rm.leader_partition("t", 0)
    produce(node, [("t", 0, batch(1))])  # 0
    produce(node, [("t", 0, txn_batch(5, 0))])  # 1-2, open
    assert (part.high_watermark, part.last_stable_offset) == (3, 1)
    assert (latest(node, READ_UNCOMMITTED), latest(node, READ_COMMITTED)) == (3, 1)
    waiting = fetch(node, ("t", 0, 1), isolation=READ_COMMITTED)
    assert waiting == []  # nothing stable past offset 1
    produce(node, [("t", 0, batch(1))])  # 3: the HW moves, the LSO does not
    assert waiting == [] and part.last_stable_offset == 1
    (results,) = end_txn(node, ("t", 0, 5, 0, 0, True))  # 4: COMMIT
    assert isinstance(results[0], AppendInfo) and results[0].first_offset == 4
    assert (part.high_watermark, part.last_stable_offset) == (5, 5)
    assert latest(node, READ_COMMITTED) == 5
    assert len(waiting) == 1  # the marker woke the read_committed fetch
    read = waiting[0].partitions[0]
    assert read.size > 0 and read.last_stable_offset == 5 and read.aborted_transactions == []


async def test_read_committed_fetch_returns_aborted_transactions(node: Node) -> None:
    produce(node, [("t", 0, txn_batch(5, 0))])  # 0-1
    produce(node, [("t", 0, txn_batch(6, 0))])  # 2-3
    end_txn(node, ("t", 0, 5, 0, 0, False))  # 4: ABORT of 5, while 6 is open
    part = node.rm.leader_partition("t", 0)
    assert part.last_stable_offset == 2
    (committed,) = fetch(node, ("t", 0, 0), isolation=READ_COMMITTED)
    read = committed.partitions[0]
    assert read.aborted_transactions == [AbortedTxn(5, 0, 4, 2)]
    assert read.records.next_offset == 2  # stops at the LSO
    end_txn(node, ("t", 0, 6, 0, 0, False))  # 5
    (committed,) = fetch(node, ("t", 0, 0), isolation=READ_COMMITTED)
    assert committed.partitions[0].aborted_transactions == [AbortedTxn(5, 0, 4, 2), AbortedTxn(6, 2, 5, 6)]
    (uncommitted,) = fetch(node, ("t", 0, 0))
    assert uncommitted.partitions[0].aborted_transactions is None


async def test_marker_errors(node: Node) -> None:
    produce(node, [("t", 0, txn_batch(5, 0, epoch=2))])
    (results,) = end_txn(node, ("t", 0, 5, 1, 0, False), ("nope", 0, 5, 2, 0, False), ("t", 0, 5, 2, 3, True),
                         ("t", 0, 5, 2, 1, False))
    codes = [r.code if isinstance(r, KafkaApiError) else ErrorCode.NONE for r in results]
    assert codes == [ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NONE,
                     ErrorCode.TRANSACTION_COORDINATOR_FENCED]
    assert node.rm.leader_partition("t", 0).log_end_offset == 3  # the two data records and one marker


async def test_marker_waits_for_the_followers_and_so_does_the_lso(node: Node) -> None:
    part = node.rm.leader_partition("t", 0)
    part.isr = (1, 2)
    part.update_follower_fetch_state(2, 0)
    produce(node, [("t", 0, txn_batch(5, 0))])  # 0-1
    part.update_follower_fetch_state(2, 2)
    assert (part.high_watermark, part.last_stable_offset) == (2, 0)
    calls = end_txn(node, ("t", 0, 5, 0, 0, True))  # 2
    assert calls == []  # acks=-1: waits for the follower
    assert part.last_stable_offset == 0  # the marker is not replicated yet
    part.update_follower_fetch_state(2, 3)
    node.rm.try_complete_delayed_requests(("t", 0))
    assert len(calls) == 1 and isinstance(calls[0][0], AppendInfo)
    assert (part.high_watermark, part.last_stable_offset) == (3, 3)


async def test_an_open_transaction_holds_the_lso_after_a_restart(node: Node) -> None:
    produce(node, [("t", 0, batch(1))])  # 0
    produce(node, [("t", 0, txn_batch(5, 0))])  # 1-2
    rm = await _restarted(node)
    part = rm.leader_partition("t", 0)
    assert (part.high_watermark, part.last_stable_offset) == (3, 1)
    end_txn(node, ("t", 0, 5, 0, 0, False))
    assert part.last_stable_offset == 4
    (committed,) = fetch(node, ("t", 0, 0), isolation=READ_COMMITTED)
    assert committed.partitions[0].aborted_transactions == [AbortedTxn(5, 1, 3, 4)]


async def test_read_committed_poll_past_the_lso_waits_and_an_inner_lso_move_wakes_it(node: Node) -> None:
    part = node.rm.leader_partition("t", 0)
    produce(node, [("t", 0, txn_batch(5, 0))])  # 0-1, producer 5 open
    produce(node, [("t", 0, txn_batch(6, 0))])  # 2-3, producer 6 open
    produce(node, [("t", 0, batch(1))])  # 4
    assert (part.high_watermark, part.last_stable_offset) == (5, 0)
    past = fetch(node, ("t", 0, 3), isolation=READ_COMMITTED)  # beyond the LSO, below the HW
    assert past == []  # waits (Kafka does not answer such a poll at once)
    at = fetch(node, ("t", 0, 0), isolation=READ_COMMITTED)
    assert at == []
    end_txn(node, ("t", 0, 5, 0, 0, True))  # 5: the LSO moves to 2, producer 6's first offset
    assert part.last_stable_offset == 2
    assert len(at) == 1 and at[0].partitions[0].records.next_offset == 2
    assert past == []  # still nothing stable at 3
    end_txn(node, ("t", 0, 6, 0, 0, False))  # 6
    assert part.last_stable_offset == 7
    assert len(past) == 1 and past[0].partitions[0].aborted_transactions == [AbortedTxn(6, 2, 6, 7)]


async def test_delete_records_past_an_open_transaction_moves_the_lso_to_the_new_log_start(node: Node) -> None:
    part = node.rm.leader_partition("t", 0)
    produce(node, [("t", 0, txn_batch(5, 0))])  # 0-1, open
    produce(node, [("t", 0, batch(1))])  # 2
    assert part.last_stable_offset == 0
    assert await node.rm.delete_records("t", 0, 2) == 2
    assert part.last_stable_offset == 2
    assert latest(node, READ_COMMITTED) == 2


async def test_retention_past_an_open_transaction_moves_the_lso_to_the_new_log_start(node_factory) -> None:
    """As after DeleteRecords: once retention deleted the segment where a still-open transaction
    began, the LSO is the new log start at once, not only at the high watermark's next move."""
    node = await node_factory()
    await node.create_topic("ret", **{"retention.ms": "1000"})
    part = node.rm.leader_partition("ret", 0)
    produce(node, [("ret", 0, txn_batch(5, 0))])  # 0-1, open, timestamps of 1970: expired
    part.log.roll()
    produce(node, [("ret", 0, encode_batch([Record(timestamp=int(time.time() * 1000), value=b"new")]))])  # 2
    assert (part.high_watermark, part.last_stable_offset) == (3, 0)
    assert node.rm.periodic.retention() == 1 and part.log_start_offset == 2
    await asyncio.sleep(0.05)  # the recomputation runs on the loop
    assert part.last_stable_offset == 2
    assert node.rm.fetch_offset_for_timestamp("ret", 0, -1, LATEST_TIMESTAMP, READ_COMMITTED)[0] == 2
