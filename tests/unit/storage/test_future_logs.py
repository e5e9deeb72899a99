"""Future logs on real files: a partition's copy in another log dir (AlterReplicaLogDirs), filled by the
mover's copy functions (odradek.broker.replica.log_dir_mover), swapped in by LogManager.replace_current_with_future,
and what a restart makes of each state a crash can leave (odradek.storage.log_manager's start-up)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from log_test_helpers import batch, read_all, small_config

from odradek.broker.replica.log_dir_mover import copy_batches, divergence, match_future
from odradek.storage.log import Log
from odradek.storage.log_manager import LogManager
from odradek.storage.producer_state import ProducerStateManager

TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
PID = 42


def _manager(dirs: list[Path]) -> LogManager:
    mgr = LogManager(dirs, small_config(), node_id=1, cluster_id="abc",
                     producer_state_factory=lambda _t, _p, d: ProducerStateManager(d))
    mgr.startup()
    return mgr


def _fill(log: Log, n: int, *, epoch: int = 0, first_seq: int = 0) -> None:
    """``n`` idempotent batches of two records each (one producer, consecutive sequences)."""
    for i in range(n):
        log.append(batch(2, value_size=60, tag=i, producer_id=PID, producer_epoch=0,
                         base_sequence=first_seq + 2 * i), leader_epoch=epoch)


def _copy_all(current: Log, future: Log, generation: int | None = None) -> int:
    """What a mover job does before the swap: match, then copy until caught up."""
    while True:
        generation = match_future(current, future, generation)
        copied = copy_batches(current, future, 1 << 30)
        if copied is None:
            generation = None
            continue
        if future.log_end_offset == current.log_end_offset:
            return generation


def _partition_dirs(d: Path) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.startswith("t-"))


def test_copy_while_appending_then_swap_keeps_every_batch_and_the_producer_state(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    mgr = _manager(dirs)
    current = mgr.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    assert mgr.log_dir_of("t", 0) == dirs[0]
    _fill(current, 40)  # several segments (4 KiB each)
    current.delete_records_before(7)  # inside the batch [6, 7]: the copy restarts at 6, then takes 7 back
    future = mgr.create_future_log("t", 0, dirs[1])
    assert future.dir.name.startswith("t-0.") and future.dir.name.endswith("-future")
    assert len(future.dir.name) == len("t-0.") + 32 + len("-future")
    generation = match_future(current, future, None)
    assert copy_batches(current, future, 3000) > 0  # part of it
    _fill(current, 10, first_seq=80)  # the partition keeps taking writes
    generation = _copy_all(current, future, generation)
    _fill(current, 2, first_seq=100)  # appended after the copier's last round: copied inside the swap
    expected = read_all(current)

    retired = mgr.replace_current_with_future("t", 0, generation=generation, max_gap_bytes=1 << 20)
    assert retired is not None
    assert mgr.get_log("t", 0) is current  # the same Log object, now in the other dir
    assert mgr.log_dir_of("t", 0) == dirs[1] and current.dir == dirs[1] / "t-0"
    assert mgr.get_future_log("t", 0) is None
    assert current.log_start_offset == 7 and read_all(current) == expected
    assert _partition_dirs(dirs[1]) == ["t-0"]
    assert [n for n in _partition_dirs(dirs[0]) if n.endswith("-delete")] == [retired.dir.name]
    # The producer state came with the copy: a retry of the last batch is a duplicate.
    retry = current.append(batch(2, value_size=60, tag=1, producer_id=PID, producer_epoch=0, base_sequence=102),
                           leader_epoch=0)
    assert retry.duplicate
    # Appends go to the new dir; the checkpoints moved with the log.
    end = current.log_end_offset
    _fill(current, 1, first_seq=104)
    assert read_all(current, end)[0][0] == end and current.dir.parent == dirs[1]
    assert "t 0 " in (dirs[1] / "recovery-point-offset-checkpoint").read_text()
    assert "t 0 " not in (dirs[0] / "recovery-point-offset-checkpoint").read_text()
    retired.remove()
    assert _partition_dirs(dirs[0]) == []
    expected = read_all(current)
    mgr.shutdown()

    mgr2 = _manager(dirs)
    again = mgr2.get_log("t", 0)
    assert mgr2.log_dir_of("t", 0) == dirs[1] and again.log_start_offset == 7 and read_all(again) == expected
    mgr2.shutdown()


def test_a_truncated_current_log_refuses_the_swap_until_the_copy_is_cut_where_they_diverge(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    mgr = _manager(dirs)
    current = mgr.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    _fill(current, 10, epoch=0)  # offsets 0-19
    _fill(current, 10, epoch=1, first_seq=20)  # offsets 20-39, epoch 1
    future = mgr.create_future_log("t", 0, dirs[1])
    generation = _copy_all(current, future)
    # A follower's truncation: epoch 1 ends at 30 on the leader, which then wrote epoch 2.
    current.truncate_to(30)
    for i in range(3):
        current.append(batch(2, value_size=60, tag=200 + i), leader_epoch=2)
    assert divergence(current, future) == 30
    assert mgr.replace_current_with_future("t", 0, generation=generation, max_gap_bytes=1 << 20) is None
    assert future.log_end_offset == 40  # nothing copied on top of what diverged
    generation = _copy_all(current, future, generation)
    assert future.log_end_offset == current.log_end_offset == 36
    expected = read_all(current)
    retired = mgr.replace_current_with_future("t", 0, generation=generation, max_gap_bytes=1 << 20)
    assert retired is not None and read_all(current) == expected
    assert current.epoch_cache.entries == [(0, 0), (1, 20), (2, 30)]
    retired.remove()
    mgr.shutdown()


def test_a_crash_between_the_swaps_renames_promotes_the_complete_copy(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    mgr = _manager(dirs)
    current = mgr.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    _fill(current, 30)
    future = mgr.create_future_log("t", 0, dirs[1])
    _copy_all(current, future)
    future.flush()
    expected = read_all(current)
    # Log.replace_with_future renames the old dir first; the process dies before the second rename.
    os.rename(current.dir, dirs[0] / f"t-0.{uuid.uuid4().hex}-delete")
    future_name = future.dir.name

    mgr2 = _manager(dirs)  # the dead process's files are left as they were
    log = mgr2.get_log("t", 0)
    assert log is not None and mgr2.log_dir_of("t", 0) == dirs[1] and read_all(log) == expected
    assert mgr2.get_future_log("t", 0) is None
    assert _partition_dirs(dirs[0]) == [] and _partition_dirs(dirs[1]) == ["t-0"]
    assert not (dirs[1] / future_name).exists()
    mgr2.shutdown()


def test_a_restart_mid_copy_keeps_both_logs_and_the_copy_goes_on(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    mgr = _manager(dirs)
    current = mgr.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    _fill(current, 30)
    future = mgr.create_future_log("t", 0, dirs[1])
    match_future(current, future, None)
    copy_batches(current, future, 2500)
    copied_to = future.log_end_offset
    assert 0 < copied_to < current.log_end_offset
    expected = read_all(current)
    # No clean shutdown: the dead process's page cache is all there is (SIGKILL).
    mgr2 = _manager(dirs)
    current2, future2 = mgr2.get_log("t", 0), mgr2.get_future_log("t", 0)
    assert current2 is not None and future2 is not None
    assert mgr2.log_dir_of("t", 0) == dirs[0] and mgr2.future_log_dir_of("t", 0) == dirs[1]
    assert future2.log_end_offset == copied_to and read_all(current2) == expected
    generation = _copy_all(current2, future2)
    retired = mgr2.replace_current_with_future("t", 0, generation=generation, max_gap_bytes=1 << 20)
    assert retired is not None and read_all(current2) == expected and mgr2.log_dir_of("t", 0) == dirs[1]
    retired.remove()
    mgr2.shutdown()


def test_a_future_log_whose_current_log_may_be_in_an_offline_dir_is_not_promoted(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    mgr = _manager(dirs)
    current = mgr.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    _fill(current, 5)
    future = mgr.create_future_log("t", 0, dirs[1])
    _copy_all(current, future)
    mgr.shutdown()
    # d0 cannot be loaded at the next start (another cluster's meta.properties): it goes offline.
    meta = dirs[0] / "meta.properties"
    meta.write_text(meta.read_text().replace("cluster.id=abc", "cluster.id=other"))
    mgr2 = _manager(dirs)
    assert dirs[0] in mgr2.offline_dirs
    assert mgr2.get_log("t", 0) is None and mgr2.get_future_log("t", 0) is not None
    assert any(n.endswith("-future") for n in _partition_dirs(dirs[1]))
    mgr2.shutdown()


def test_a_preferred_dir_takes_the_partition_made_later_and_deleting_takes_the_future_too(tmp_path: Path) -> None:
    dirs = [tmp_path / "d0", tmp_path / "d1", tmp_path / "d2"]
    mgr = _manager(dirs)
    assert mgr.log_dir_by_path(os.path.abspath(dirs[2])) == dirs[2]
    assert mgr.log_dir_by_path(os.path.abspath(dirs[2]) + "/") is None and mgr.log_dir_by_path("d2") is None
    mgr.maybe_update_preferred_log_dir("later", 0, dirs[2])
    assert mgr.get_or_create_log("later", 0).dir == dirs[2] / "later-0"
    assert mgr.preferred_log_dir("later", 0) is None  # used up
    current = mgr.get_or_create_log("t", 0, topic_id=TOPIC_ID)
    _fill(current, 3)
    other = next(d for d in dirs if d != mgr.log_dir_of("t", 0))
    future = mgr.create_future_log("t", 0, other)
    mgr.maybe_update_preferred_log_dir("t", 0, other)  # where its future log is: nothing to prefer
    assert mgr.preferred_log_dir("t", 0) is None
    assert mgr.delete_log("t", 0)
    assert mgr.get_future_log("t", 0) is None and future.closed
    assert all(_partition_dirs(d) == [] for d in dirs)
    mgr.shutdown()


def test_a_moving_partition_is_not_compacted_and_its_cleaner_checkpoint_follows_it(tmp_path: Path) -> None:
    """Kafka's abortAndPauseCleaning / resumeCleaning and alterCheckpointDir around a move."""
    from odradek.protocol.records import Record, encode_batch
    from odradek.storage.cleaner import CleanerConfig, LogCleaner
    from odradek.storage.log_config import LogConfig

    dirs = [tmp_path / "d0", tmp_path / "d1"]
    config = LogConfig(segment_bytes=700, segment_index_bytes=1024, index_interval_bytes=100, file_delete_delay_ms=0,
                       cleanup_policy="compact", min_cleanable_dirty_ratio=0.01)
    mgr = LogManager(dirs, config)
    mgr.startup()
    log = mgr.get_or_create_log("t", 0)
    for i in range(40):
        log.append(encode_batch([Record(timestamp=1000, key=b"k%d" % (i % 3), value=b"v" * 40)]), leader_epoch=0)
    cleaner = LogCleaner(mgr, CleanerConfig())
    assert cleaner.grab_filthiest_log(5000) is not None
    cleaner.abort_and_pause("t", 0)
    assert cleaner.grab_filthiest_log(5000) is None and cleaner.clean_once(5000) is None
    cleaner.resume("t", 0)
    stats = cleaner.clean_once(5000)
    assert stats is not None
    src = mgr.log_dir_of("t", 0)
    dst = dirs[1] if src == dirs[0] else dirs[0]
    before = cleaner.read_checkpoint(src)[("t", 0)]
    future = mgr.create_future_log("t", 0, dst)
    generation = _copy_all(log, future)
    retired = mgr.replace_current_with_future("t", 0, generation=generation, max_gap_bytes=1 << 20)
    assert retired is not None
    cleaner.alter_checkpoint_dir("t", 0, src, dst)
    assert cleaner.read_checkpoint(dst)[("t", 0)] == before
    retired.remove()
    mgr.shutdown()


def test_transactions_come_with_the_copy(tmp_path: Path) -> None:
    """Open, committed and aborted transactions: the copy's .txnindex and producer state answer as the
    current log's did (the high watermark fed to both, as the partition and the mover do)."""
    dirs = [tmp_path / "d0", tmp_path / "d1"]
    mgr = _manager(dirs)
    current = mgr.get_or_create_log("t", 0, topic_id=TOPIC_ID)

    def txn(pid: int, seq: int) -> None:
        current.append(batch(2, value_size=80, producer_id=pid, producer_epoch=0, base_sequence=seq,
                             is_transactional=True), leader_epoch=0)

    def settle(log: Log) -> None:
        log.producer_state.on_high_watermark_updated(log.log_end_offset)

    for round_ in range(6):
        txn(1, 4 * round_)
        txn(2, 2 * round_)
        txn(1, 4 * round_ + 2)
        current.append_end_txn_marker(1, 0, 0, round_ % 2 == 0, leader_epoch=0)
        settle(current)
        current.append_end_txn_marker(2, 0, 0, False, leader_epoch=0)
        settle(current)
    txn(3, 0)  # left open
    settle(current)
    future = mgr.create_future_log("t", 0, dirs[1])
    generation = match_future(current, future, None)
    while future.log_end_offset < current.log_end_offset:
        copy_batches(current, future, 700)  # small rounds, the high watermark fed after each
        settle(future)
    end = current.log_end_offset
    aborted = current.collect_aborted_txns(0, end)
    first_unstable = current.producer_state.first_unstable_offset()
    assert len(aborted) == 9 and first_unstable is not None
    retired = mgr.replace_current_with_future("t", 0, generation=generation, max_gap_bytes=1 << 20)
    assert retired is not None and current.dir.parent == dirs[1]
    assert current.collect_aborted_txns(0, end) == aborted
    assert current.producer_state.first_unstable_offset() == first_unstable
    retired.remove()
    mgr.shutdown()
