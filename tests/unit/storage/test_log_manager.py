import os

import pytest
from log_test_helpers import batch, read_all, small_config

from odradek.protocol.errors import ErrorCode
from odradek.storage.errors import KafkaStorageError, LogDirOfflineError
from odradek.storage.log_manager import LogManager


def _manager(tmp_path, n_dirs=2, **kwargs):
    dirs = [tmp_path / f"data{i}" for i in range(n_dirs)]
    mgr = LogManager(dirs, small_config(), node_id=1, cluster_id="abc", **kwargs)
    mgr.startup()
    return mgr, dirs


def test_partitions_spread_over_dirs_and_files(tmp_path):
    mgr, dirs = _manager(tmp_path)
    for p in range(4):
        mgr.get_or_create_log("orders", p, topic_id="AAAAAAAAAAAAAAAAAAAAAQ")
    assert sorted(os.listdir(dirs[0]) + os.listdir(dirs[1])).count("meta.properties") == 2
    per_dir = [sum(1 for n in os.listdir(d) if n.startswith("orders-")) for d in dirs]
    assert per_dir == [2, 2]
    assert mgr.get_or_create_log("orders", 0) is mgr.get_log("orders", 0)
    assert mgr.get_log("orders", 9) is None
    props = (dirs[0] / "meta.properties").read_text()
    assert "node.id=1" in props and "cluster.id=abc" in props and "version=1" in props
    mgr.shutdown()


def test_clean_shutdown_marker_and_checkpoints(tmp_path):
    mgr, dirs = _manager(tmp_path, n_dirs=1)
    log = mgr.get_or_create_log("my-topic", 3)
    for _i in range(20):
        log.append(batch(2, value_size=100), leader_epoch=0)
    log.delete_records_before(5)
    expected = read_all(log)
    mgr.shutdown()
    d = dirs[0]
    assert (d / ".kafka_cleanshutdown").exists()
    assert (d / "recovery-point-offset-checkpoint").read_text() == "0\n1\nmy-topic 3 40\n"
    assert (d / "log-start-offset-checkpoint").read_text() == "0\n1\nmy-topic 3 5\n"

    mgr2 = LogManager(dirs, small_config(), node_id=1, cluster_id="abc")
    mgr2.startup()
    assert not (d / ".kafka_cleanshutdown").exists()  # a crash from now on is unclean
    log2 = mgr2.get_log("my-topic", 3)
    assert log2.log_start_offset == 5 and read_all(log2) == expected
    mgr2.shutdown()


def test_unclean_restart_recovers_from_recovery_point(tmp_path):
    mgr, dirs = _manager(tmp_path, n_dirs=1)
    log = mgr.get_or_create_log("t", 0)
    for _i in range(20):
        log.append(batch(2, value_size=100), leader_epoch=0)
    mgr.checkpoint()
    expected = read_all(log)
    seg = log.active_segment
    with open(seg.log_path, "ab") as f:
        f.write(b"torn" * 10)
    # no shutdown(): no marker
    mgr2 = LogManager(dirs, small_config(), node_id=1, cluster_id="abc")
    mgr2.startup()
    assert read_all(mgr2.get_log("t", 0)) == expected
    mgr2.shutdown()


def test_cluster_id_mismatch_takes_dir_offline(tmp_path):
    mgr, dirs = _manager(tmp_path, n_dirs=1)
    mgr.shutdown()
    other = LogManager(dirs, small_config(), node_id=1, cluster_id="different")
    other.startup()
    assert other.offline_dirs == {dirs[0]}


def test_delete_log_renames_then_removes(tmp_path):
    mgr, dirs = _manager(tmp_path, n_dirs=1)
    log = mgr.get_or_create_log("t", 0)
    log.append(batch(1), leader_epoch=0)
    assert mgr.delete_log("t", 0)
    assert mgr.get_log("t", 0) is None
    assert not [n for n in os.listdir(dirs[0]) if n.startswith("t-0")]
    assert not mgr.delete_log("t", 0)
    # a leftover -delete dir from a crash is removed at startup
    (dirs[0] / "t-1.0123abcd-delete").mkdir()
    mgr.shutdown()
    mgr2 = LogManager(dirs, small_config())
    mgr2.startup()
    assert not (dirs[0] / "t-1.0123abcd-delete").exists()
    mgr2.shutdown()


def test_retention_and_config_update(tmp_path):
    mgr, _ = _manager(tmp_path, n_dirs=1)
    log = mgr.get_or_create_log("t", 0)
    for _i in range(30):
        log.append(batch(2, value_size=100, ts=1000), leader_epoch=0)
    assert mgr.run_retention(now_ms=100_000) == 0  # 7 days default retention
    mgr.update_config("t", small_config(retention_ms=1000))
    assert mgr.run_retention(now_ms=100_000) > 0
    assert log.log_start_offset > 0 and len(log.segments) == 1
    mgr.update_config("t", small_config(flush_ms=0))
    log.append(batch(1), leader_epoch=0)
    assert mgr.flush_dirty(now_ms=10**13) == 1 and log.recovery_point == log.log_end_offset
    mgr.shutdown()


def test_retention_with_high_watermarks_deletes_expired_active_segments_and_checkpoints_the_start(tmp_path):
    mgr, dirs = _manager(tmp_path, n_dirs=1)
    mgr.update_config("t", small_config(retention_ms=1000))
    logs = [mgr.get_or_create_log("t", p) for p in range(3)]
    for log in logs:
        for _i in range(30):
            log.append(batch(2, value_size=100, ts=1000), leader_epoch=0)
    # t-0 is replicated to its end, t-1 only up to 59, t-2 has no partition here.
    hws = {0: 60, 1: 59, 2: None}
    asked = []

    def high_watermark(topic, partition, log):
        asked.append((topic, partition, log is logs[partition]))
        return hws[partition]

    assert mgr.run_retention(now_ms=100_000, high_watermark=high_watermark) > 0
    assert sorted(asked) == [("t", 0, True), ("t", 1, True), ("t", 2, True)]
    assert [(log.log_start_offset, log.log_end_offset, len(log.segments)) for log in logs] == [
        (60, 60, 1), (logs[1].active_segment.base_offset, 60, 1), (logs[2].active_segment.base_offset, 60, 1)]
    assert logs[0].active_segment.size == 0 and logs[1].active_segment.size > 0 and logs[2].active_segment.size > 0
    mgr.checkpoint()
    assert "t 0 60" in (dirs[0] / "log-start-offset-checkpoint").read_text().splitlines()
    mgr.shutdown()
    mgr2 = LogManager(dirs, small_config(retention_ms=1000))
    mgr2.startup({"t": small_config(retention_ms=1000)})
    log = mgr2.get_log("t", 0)
    assert (log.log_start_offset, log.log_end_offset) == (60, 60)
    assert log.append(batch(1), leader_epoch=0).first_offset == 60
    mgr2.shutdown()


def test_disk_error_takes_only_that_dir_offline(tmp_path):
    """A real OSError (EBADF: the segment's fd closed under the log) on one dir's partition."""
    mgr, dirs = _manager(tmp_path)
    bad = mgr.get_or_create_log("t", 0)
    good = mgr.get_or_create_log("t", 1)
    assert mgr.log_dir_of("t", 0) != mgr.log_dir_of("t", 1)
    bad.append(batch(1), leader_epoch=0)
    os.close(bad.active_segment.fd)
    with pytest.raises(LogDirOfflineError) as info:
        bad.append(batch(1), leader_epoch=0)
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert mgr.offline_dirs == {mgr.log_dir_of("t", 0)}
    with pytest.raises(KafkaStorageError):
        mgr.get_log("t", 0)
    with pytest.raises(KafkaStorageError):
        bad.read(0, 100)
    assert good.append(batch(1), leader_epoch=0).first_offset == 0
    # new partitions avoid the offline dir
    assert mgr.get_or_create_log("u", 0) and mgr.log_dir_of("u", 0) == mgr.log_dir_of("t", 1)
    bad.active_segment.fd = -1  # already closed above: keep the segment's handle from closing
    bad.active_segment.file.fd = -1  # the number again (another file may have it by now)
    mgr.shutdown()
    assert not (mgr.log_dir_of("t", 0) / ".kafka_cleanshutdown").exists()
    assert (mgr.log_dir_of("t", 1) / ".kafka_cleanshutdown").exists()


def test_a_log_that_may_live_in_an_offline_dir_is_not_created_afresh(tmp_path):
    """Dir 0 holds t-0 but is offline at start-up: t-0 must not reappear, empty, in dir 1."""
    mgr, dirs = _manager(tmp_path)
    mgr.get_or_create_log("t", 0).append(batch(1), leader_epoch=0)
    assert mgr.log_dir_of("t", 0) == dirs[0]
    mgr.shutdown()
    (dirs[0] / "meta.properties").write_text("cluster.id=someone-else\n")  # dir 0 fails at load
    seen: list[tuple] = []
    again = LogManager(dirs, small_config(), node_id=1, cluster_id="abc")
    again.on_dir_offline = lambda d, reason: seen.append((d, reason))
    again.startup()
    assert again.offline_dirs == {dirs[0]} and seen and seen[0][0] == dirs[0]
    with pytest.raises(KafkaStorageError, match="offline log directory"):
        again.get_or_create_log("t", 0)
    assert not (dirs[1] / "t-0").exists()
    # A partition that exists nowhere is new: it goes to the online dir.
    assert again.get_or_create_log("t", 1) is not None and again.log_dir_of("t", 1) == dirs[1]
    again.shutdown()


def test_loading_many_partitions_logs_progress_and_a_summary(tmp_path, caplog):
    """A long load (recovery after a crash) reports partitions done / total and MB/s at most every
    progress_interval_s, then one summary line; a short interval makes every partition report."""
    import logging

    caplog.set_level(logging.INFO, logger="odradek.storage.log_manager")
    mgr, dirs = _manager(tmp_path, n_dirs=1)
    # A first start on a new, empty dir is not reported as an unclean shutdown.
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("Loaded 0 partitions")
            and r.getMessage().endswith("(no logs yet)")], caplog.text
    caplog.clear()
    for p in range(12):
        mgr.get_or_create_log("t", p).append(batch(3, value_size=200), leader_epoch=0)
    mgr.flush_dirty()  # no shutdown(): the next start-up is an unclean one that recovers
    caplog.set_level(logging.INFO, logger="odradek.storage.log_manager")
    mgr2 = LogManager(dirs, small_config(), node_id=1, cluster_id="abc", progress_interval_s=0.0)
    mgr2.startup()
    try:
        messages = [r.getMessage() for r in caplog.records if r.name == "odradek.storage.log_manager"]
        progress = [m for m in messages if m.startswith("Loading logs in")]
        assert len(progress) == 11  # every partition but the last; the summary covers the last
        assert "recovering" in progress[0] and "1/12 partitions" in progress[0] and "MB/s" in progress[0]
        assert "11/12 partitions, 91% done" in progress[-1]
        summary = [m for m in messages if m.startswith("Loaded 12 partitions")]
        assert len(summary) == 1 and "recovered" in summary[0]
        assert len(mgr2.all_logs()) == 12
    finally:
        mgr2.shutdown()
    caplog.clear()
    mgr3 = LogManager(dirs, small_config(), node_id=1, cluster_id="abc")  # default interval: 10 s
    mgr3.startup()
    mgr3.shutdown()
    messages = [r.getMessage() for r in caplog.records if r.name == "odradek.storage.log_manager"]
    assert not [m for m in messages if m.startswith("Loading logs in")]
    assert [m for m in messages if m.startswith("Loaded 12 partitions") and "(clean shutdown)" in m]


def test_a_dir_failing_while_another_failure_is_being_handled_does_not_break_the_reader(tmp_path):
    """Two dirs fail together: the loop reads offline_dirs (ReplicaManager._fatal_log_dir_failure,
    DescribeLogDirs) while an IO thread marks the second one. With a mutated set the reader got
    "RuntimeError: Set changed size during iteration"; each reader must see one consistent set."""
    mgr, dirs = _manager(tmp_path, n_dirs=3)
    first = mgr.get_or_create_log("t", 0)
    second = mgr.get_or_create_log("t", 1)
    assert mgr.log_dir_of("t", 0) != mgr.log_dir_of("t", 1)
    first.append(batch(1), leader_epoch=0)
    second.append(batch(1), leader_epoch=0)
    os.close(first.active_segment.fd)
    os.close(second.active_segment.fd)
    with pytest.raises(LogDirOfflineError):
        first.append(batch(1), leader_epoch=0)
    seen = []
    for d in mgr.offline_dirs:  # a reader mid-iteration when the second dir fails
        with pytest.raises(LogDirOfflineError):
            second.append(batch(1), leader_epoch=0)
        seen.append(d)
    assert seen == [mgr.log_dir_of("t", 0)]
    assert mgr.offline_dirs == {mgr.log_dir_of("t", 0), mgr.log_dir_of("t", 1)}
    for log in (first, second):
        log.active_segment.fd = -1
        log.active_segment.file.fd = -1
    mgr.shutdown()
