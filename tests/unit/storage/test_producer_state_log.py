"""Producer state wired into the log: snapshots on roll/close, load + replay on open, truncation,
log start offset, multi-batch appends; roll-time fsync in the background."""

import os
import shutil
import threading
import time

import pytest
from log_test_helpers import small_config

from odradek.protocol.records import Record, encode_batch
from odradek.storage.log import Log, _flusher
from odradek.storage.log_manager import LogManager
from odradek.storage.producer_state import (
    OutOfOrderSequenceError,
    ProducerStateManager,
    decode_snapshot,
    producer_state_factory,
)

PID = 42


def pbatch(seq: int, n: int = 2, epoch: int = 0, pid: int = PID, ts: int | None = None,
           transactional: bool = False) -> bytes:
    # Current timestamps: producers idle for producer.id.expiration.ms are dropped on load.
    now = time.time_ns() // 1_000_000 if ts is None else ts
    return encode_batch([Record(timestamp=now, key=b"k", value=b"v" * 20) for _ in range(n)],
                        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)


def open_with_state(dir, **kwargs) -> Log:
    return Log.open(dir, small_config(segment_bytes=600), producer_state=ProducerStateManager(dir), **kwargs)


def snapshots(dir) -> list[int]:
    return sorted(int(p.name[:20]) for p in dir.iterdir() if p.name.endswith(".snapshot"))


def test_snapshot_on_roll_and_on_clean_close(tmp_path):
    d = tmp_path / "t-0"
    log = open_with_state(d)
    for i in range(10):
        log.append(pbatch(i * 2), leader_epoch=0)
    log.wait_for_background_flushes()
    bases = [s.base_offset for s in log.segments[1:]]
    assert bases and set(bases[-3:]) <= set(snapshots(d))  # one per roll, three kept
    log.close()
    assert snapshots(d)[-1] == 20  # at the LEO on clean close
    reopened = open_with_state(d, clean_shutdown=True)
    ps = reopened.producer_state
    assert ps.map_end_offset == 20 and ps.last_entry(PID).last_seq == 19
    dup = reopened.append(pbatch(18), leader_epoch=0)  # retry of the last batch
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (18, 19)
    reopened.close()


def test_unclean_open_replays_only_after_newest_snapshot(tmp_path):
    d = tmp_path / "t-0"
    log = open_with_state(d)
    for i in range(10):
        log.append(pbatch(i * 2), leader_epoch=0)
    log.close()
    os.unlink(d / f"{20:020d}.snapshot")  # as if we crashed: only roll-time snapshots remain
    newest = snapshots(d)[-1]
    reopened = open_with_state(d, recovery_point=0)
    assert reopened.producer_state.last_entry(PID).last_seq == 19  # replayed from `newest` to the LEO
    assert newest < 20
    with pytest.raises(OutOfOrderSequenceError):
        reopened.append(pbatch(30), leader_epoch=0)
    assert reopened.append(pbatch(20), leader_epoch=0).first_offset == 20
    reopened.close()


def test_no_snapshot_rebuilds_from_log_start(tmp_path):
    d = tmp_path / "t-0"
    log = open_with_state(d)
    log.append(pbatch(0), leader_epoch=0)
    log.append(pbatch(2), leader_epoch=0)
    log.close()
    for off in snapshots(d):
        os.unlink(d / f"{off:020d}.snapshot")
    reopened = open_with_state(d, clean_shutdown=True)
    assert reopened.producer_state.last_entry(PID).last_seq == 3
    reopened.close()


def test_truncate_to_reloads_producer_state(tmp_path):
    d = tmp_path / "t-0"
    log = open_with_state(d)
    for i in range(10):
        log.append(pbatch(i * 2), leader_epoch=0)
    log.truncate_to(13)  # drops the batch 12-13 and everything after it
    assert log.log_end_offset == 12
    assert log.producer_state.last_entry(PID).last_seq == 11
    assert max(snapshots(d), default=0) <= 12  # snapshots above the new end are gone
    assert log.append(pbatch(12), leader_epoch=0).first_offset == 12  # sequence continues from 11
    log.truncate_fully_and_start_at(100)
    assert log.producer_state.last_entry(PID) is None and snapshots(d) == []
    log.close()


def test_log_start_offset_advance_reaches_producer_state(tmp_path):
    d = tmp_path / "t-0"
    log = open_with_state(d)
    for i in range(10):
        log.append(pbatch(i * 2), leader_epoch=0)
    log.wait_for_background_flushes()
    log.delete_records_before(15)
    ps = log.producer_state
    assert ps.log_start_offset == 15
    assert all(off >= log.segments[0].base_offset for off in snapshots(d))
    assert ps.last_entry(PID).last_seq == 19  # producers are kept (Kafka >= 2.5)
    log.close()


def test_multi_batch_append_checks_batches_in_order(tmp_path):
    d = tmp_path / "t-0"
    log = open_with_state(d)
    info = log.append(pbatch(0) + pbatch(2) + pbatch(4), leader_epoch=0)
    assert (info.first_offset, info.last_offset, info.num_batches) == (0, 5, 3)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(6) + pbatch(9), leader_epoch=0)  # second batch skips 8
    assert log.log_end_offset == 6  # all-or-nothing
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(6) + pbatch(6), leader_epoch=0)  # the same sequence twice in one append
    assert log.append(pbatch(6) + pbatch(0, epoch=1), leader_epoch=0).last_offset == 9  # epoch bump mid-append
    assert log.producer_state.last_entry(PID).producer_epoch == 1
    log.close()


def test_log_manager_default_factory(tmp_path):
    mgr = LogManager([tmp_path], small_config(), producer_state_factory=producer_state_factory(1000))
    mgr.startup()
    log = mgr.get_or_create_log("t", 0)
    assert isinstance(log.producer_state, ProducerStateManager)
    assert log.producer_state.producer_id_expiration_ms == 1000
    log.append(pbatch(0), leader_epoch=0)
    mgr.shutdown()
    assert (tmp_path / "t-0" / f"{2:020d}.snapshot").exists()


def test_log_manager_expires_idle_producers_and_keeps_active_ones(tmp_path):
    # Kafka's removeExpiredProducers, run by the broker every producer.id.expiration.check.interval.ms.
    mgr = LogManager([tmp_path], small_config(), producer_state_factory=producer_state_factory(1000))
    mgr.startup()
    log = mgr.get_or_create_log("t", 0)
    other = mgr.get_or_create_log("u", 0)
    now = time.time_ns() // 1_000_000
    idle, active, in_txn = 1, 2, 3
    log.append(pbatch(0, pid=idle, ts=now - 5000), leader_epoch=0)
    log.append(pbatch(0, pid=active, ts=now - 5000), leader_epoch=0)
    log.append(pbatch(2, pid=active, ts=now), leader_epoch=0)  # wrote again just now
    log.append(pbatch(0, pid=in_txn, ts=now - 5000, transactional=True), leader_epoch=0)  # open transaction
    other.append(pbatch(0, pid=idle, ts=now - 5000), leader_epoch=0)
    assert mgr.remove_expired_producers(now) == 2  # from both logs
    assert set(log.producer_state.producers) == {active, in_txn}
    assert {e.producer_id for e in decode_snapshot(log.producer_state.snapshot_bytes())} == {active, in_txn}
    assert not other.producer_state.producers
    # The expired producer is unknown again: like Kafka (KIP-360) any sequence is accepted; the
    # active one keeps its sequence checks.
    assert log.append(pbatch(7, pid=idle), leader_epoch=0).duplicate is False
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(7, pid=active), leader_epoch=0)
    assert log.append(pbatch(4, pid=active), leader_epoch=0).duplicate is False
    assert mgr.remove_expired_producers(now) == 0
    mgr.shutdown()
    reopened = Log.open(tmp_path / "t-0", small_config(), clean_shutdown=True,
                        producer_state=ProducerStateManager(tmp_path / "t-0", 1000))
    assert set(reopened.producer_state.producers) == {idle, active, in_txn}
    reopened.close()


def test_roll_fsync_runs_in_background_and_truncation_wins(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, small_config(segment_bytes=600))
    gate = threading.Event()
    blocker = _flusher().submit(gate.wait)  # hold the flusher thread
    try:
        while len(log.segments) < 3:
            log.append(pbatch(0, pid=-1), leader_epoch=0)
        # The append returned without waiting for the fsync: nothing is durable yet.
        assert log.recovery_point == 0
        log.truncate_to(1)  # truncation before the background flush completes
    finally:
        gate.set()
    blocker.result()
    log.wait_for_background_flushes()
    assert log.recovery_point <= log.log_end_offset == 0
    while len(log.segments) < 2:
        log.append(pbatch(0, pid=-1), leader_epoch=0)
    log.wait_for_background_flushes()
    assert log.recovery_point == log.active_segment.base_offset
    log.close()


def test_roll_writes_its_snapshot_before_the_background_flush_runs(tmp_path):
    # Kafka writes the roll's snapshot under the log lock and only fsyncs it later. Were it written
    # by the flusher, a process dying before the flusher ran (here: the flusher held, the directory
    # copied) after DeleteRecords dropped the older snapshots would reopen with no snapshot at all,
    # forget the producer whose batches were deleted, and append its retry a second time.
    d = tmp_path / "t-0"
    log = open_with_state(d)
    gate = threading.Event()
    blocker = _flusher().submit(gate.wait)  # hold the flusher thread
    try:
        for i in range(3):
            log.append(pbatch(i * 2), leader_epoch=0)
        while len(log.segments) < 4:
            log.append(pbatch(0, pid=-1), leader_epoch=0)  # another, non-idempotent producer
        base = log.active_segment.base_offset
        assert base in snapshots(d)  # on disk at once, not when the flusher gets to it
        assert log.recovery_point == 0  # the fsyncs really are still pending
        log.delete_records_before(base)  # the producer's batches and the older snapshots go
        crashed = tmp_path / "crashed" / "t-0"
        shutil.copytree(d, crashed)  # what a process killed now leaves on disk
    finally:
        gate.set()
    blocker.result()
    log.close()
    reopened = open_with_state(crashed, recovery_point=0, log_start_offset=base)
    assert reopened.producer_state.last_entry(PID).last_seq == 5
    retry = reopened.append(pbatch(4), leader_epoch=0)  # the producer retries its last batch
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (4, 5)
    assert reopened.log_end_offset == log.log_end_offset
    reopened.close()


def test_background_flush_fsyncs_the_roll_snapshot_then_prunes_the_old_ones(tmp_path):
    d = tmp_path / "t-0"
    log = open_with_state(d)
    gate = threading.Event()
    blocker = _flusher().submit(gate.wait)
    try:
        for i in range(25):
            log.append(pbatch(i * 2), leader_epoch=0)
        rolls = [s.base_offset for s in log.segments[1:]]
        assert len(rolls) > 3 and set(rolls) <= set(snapshots(d))  # none pruned before its fsync
    finally:
        gate.set()
    blocker.result()
    log.wait_for_background_flushes()
    assert snapshots(d) == rolls[-3:]  # three kept, as before
    assert not list(d.glob("*.tmp"))
    log.close()
