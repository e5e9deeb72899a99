"""File descriptors per segment (issue 17, defect 2): one per segment, the .log's, as in Kafka.

Before the fix a segment held five (its .log, each index's file and the duplicate Python's mmap
keeps of it), and every roll queued a background fsync holding duplicates of every not yet
durable segment's descriptors, so fast rolling piled them up until the process ran out.
Descriptors are counted in /proc/self/fd and mappings in /proc/self/maps, on real files.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from log_test_helpers import batch, open_log, read_all, small_config

from odradek.storage import log as log_module
from odradek.storage.log import Log
from odradek.storage.offset_index import OffsetIndex
from odradek.storage.time_index import TimeIndex

# Descriptors the test process may open meanwhile (the flusher thread's transient ones, pytest).
SLACK = 6


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def mapped_paths(under: Path) -> list[str]:
    """Files under ``under`` that the process has mapped (one line of /proc/self/maps each)."""
    prefix = str(under)
    with open("/proc/self/maps") as maps:
        return [line.split(None, 5)[5].strip() for line in maps
                if len(line.split(None, 5)) == 6 and line.split(None, 5)[5].startswith(prefix)]


def fill(log: Log, batches: int, **kwargs) -> None:
    raw = batch(5, value_size=100)
    for _ in range(batches):
        log.append(raw, leader_epoch=0, **kwargs)


def test_rolled_segments_hold_one_descriptor_each(tmp_path):
    before = open_fds()
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=2000))
    fill(log, 240)
    log.wait_for_background_flushes()
    segments = len(log.segments)
    assert segments >= 60
    held = open_fds() - before
    assert held <= segments + SLACK, f"{held} descriptors for {segments} segments"
    expected = read_all(log)
    log.close()
    assert open_fds() - before <= SLACK

    # Reopened after a clean shutdown, and after every old segment has been read through its index.
    log = open_log(tmp_path / "t-0", small_config(segment_bytes=2000), clean_shutdown=True)
    assert open_fds() - before <= segments + SLACK
    assert read_all(log) == expected
    for offset in range(0, log.log_end_offset, 3):
        assert log.read(offset, 1).size > 0
    held = open_fds() - before
    assert held <= segments + SLACK, f"{held} descriptors for {segments} segments after reads"
    log.close()
    assert open_fds() - before <= SLACK


def test_pending_roll_flushes_hold_no_descriptors(tmp_path):
    """segment.ms = 1 rolls at every append; with the flusher busy, queued fsyncs pile up."""
    gate = threading.Event()
    blocker = log_module._flusher().submit(gate.wait, 30)
    try:
        before = open_fds()
        log = open_log(tmp_path / "t-0", small_config(segment_bytes=1 << 20, segment_ms=1))
        for i in range(150):  # record timestamps 10 ms apart: each batch rolls a new segment
            log.append(batch(1, ts=1_000_000 + 10 * i), leader_epoch=0)
        segments = len(log.segments)
        assert segments == 150
        assert log.recovery_point == 0  # nothing flushed yet: every roll's fsync is queued
        held = open_fds() - before
        assert held <= segments + SLACK, f"{held} descriptors for {segments} segments, 149 flushes queued"
    finally:
        gate.set()
        blocker.result(30)
    log.wait_for_background_flushes(30)
    assert log.recovery_point == log.segments[-1].base_offset  # every rolled segment is durable
    assert all(seg.flushed_size == seg.size for seg in log.segments[:-1])
    assert open_fds() - before <= segments + SLACK
    log.close()


def test_old_segment_indexes_are_mapped_only_when_read(tmp_path):
    config = small_config(segment_bytes=2000)
    log = open_log(tmp_path / "t-0", config)
    fill(log, 60)
    expected = read_all(log)
    bases = [seg.base_offset for seg in log.segments]
    log.close()

    log = open_log(tmp_path / "t-0", config, clean_shutdown=True)
    assert mapped_paths(tmp_path) == []  # Kafka's LazyIndex: opening maps nothing
    middle = log.segments[len(bases) // 2]
    target = middle.base_offset + 7
    slice_ = log.read(target, 1)
    assert slice_.first_offset <= target < slice_.next_offset
    mapped = mapped_paths(tmp_path)
    assert mapped == [str(middle.offset_index.path)], mapped
    assert read_all(log) == expected  # every old segment's index works once mapped
    # offset_for_timestamp goes through the time indexes
    assert log.offset_for_timestamp(0) == (0, 1000)
    log.close()
    assert mapped_paths(tmp_path) == []


def test_rebuilt_and_recovered_indexes_keep_one_descriptor_per_segment(tmp_path):
    config = small_config(segment_bytes=2000)
    before = open_fds()
    log = open_log(tmp_path / "t-0", config)
    fill(log, 60)
    expected = read_all(log)
    segments = len(log.segments)
    log.close()
    # A corrupt index of an old segment is rebuilt on a clean open.
    second = sorted(p for p in (tmp_path / "t-0").iterdir() if p.suffix == ".index")[1]
    second.write_bytes(b"\xff" * 16)
    log = open_log(tmp_path / "t-0", config, clean_shutdown=True)
    assert read_all(log) == expected
    assert open_fds() - before <= segments + SLACK
    log.close_quietly()  # like a crash: no clean shutdown, so the next open recovers every segment
    log = open_log(tmp_path / "t-0", config, recovery_point=0)
    assert read_all(log) == expected
    assert open_fds() - before <= segments + SLACK
    log.close()


def test_index_written_past_its_mapping_is_mapped_again(tmp_path):
    """A trimmed index mapped by a reader, then grown again (its segment active after truncation)."""
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, 64 * 1024)
    for i in range(10):
        index.append(i * 10, i * 100)
    index.close()
    index = OffsetIndex(path, 0, 64 * 1024, writable=False)
    assert index.lookup(55) == (50, 500)  # maps the 80-byte file
    index.ensure_preallocated()
    for i in range(10, 2000):  # several 4 KiB pages, written out with pwrite
        index.append(i * 10, i * 100)
    index.write_tail()
    assert index.lookup(19_995) == (19_990, 199_900)
    assert [index.entry(i) for i in (0, 999, 1999)] == [(0, 0), (9_990, 99_900), (19_990, 199_900)]
    index.close()


def test_time_index_final_entry_beyond_a_full_mapped_file(tmp_path):
    path = tmp_path / "0.timeindex"
    index = TimeIndex(path, 0, 120)  # room for 10 entries
    for i in range(10):
        assert index.maybe_append(1000 + i, i)
    index.write_tail()
    assert index.lookup_before(1005) == (1004, 4)  # mapped at 120 bytes
    # The roll-time final entry may go one past a full index (Kafka's skipFullCheck).
    assert not index.maybe_append(2000, 20)
    assert index.maybe_append(2000, 20, skip_full_check=True)
    index.write_tail()
    assert index.entry(10) == (2000, 20)
    assert index.lookup_before(5000) == (2000, 20)
    index.close()
    assert path.stat().st_size == 11 * 12


def test_a_mapping_lives_until_its_last_reader_lets_go(tmp_path):
    from odradek.storage.mapped_file import map_readonly  # new with the fix

    path = tmp_path / "data"
    path.write_bytes(bytes(range(256)) * 16)
    fd = os.open(path, os.O_RDONLY)
    try:
        mapping = map_readonly(fd, 4096)
    finally:
        os.close(fd)  # the mapping needs no descriptor
    assert mapped_paths(tmp_path) == [str(path)]
    view = mapping[100:104]
    del mapping  # the owner drops it; a reader still holds a slice
    assert bytes(view) == bytes([100, 101, 102, 103])
    assert mapped_paths(tmp_path) == [str(path)]
    del view
    assert mapped_paths(tmp_path) == []


def test_lookups_racing_mapping_drops_and_growth_stay_correct(tmp_path):
    """Readers look entries up while the owner drops the mapping and the file outgrows it.

    A mapping is unmapped only once no reader holds it; unmapping it under a reader would crash
    the process (SIGSEGV), reading a mapping shorter than the entries would raise.
    """
    index = OffsetIndex(tmp_path / "0.index", 0, 1 << 20)
    for rel in range(1, 101):
        index.append(rel, rel * 100)
    index.trim_to_valid_size()  # an inactive segment's index: the file holds exactly 100 entries
    stop = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        target = 1
        while not stop.is_set():
            try:
                offset, position = index.lookup(target)
            except Exception as exc:  # noqa: BLE001 - any exception is the failure reported
                errors.append(repr(exc))
                return
            if not 1 <= offset <= target or position != offset * 100:
                errors.append(f"lookup({target}) gave {(offset, position)}")
                return
            target = target * 7 % 100 + 1

    threads = [threading.Thread(target=reader) for _ in range(2)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show within the run
    try:
        for thread in threads:
            thread.start()
        for i in range(300):
            index.release_mapping()
            index.resize(100 * 8 + 8 * (i % 7))  # grows past the mapping the readers made
            time.sleep(0)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        sys.setswitchinterval(interval)
    index.close()
    assert not errors
