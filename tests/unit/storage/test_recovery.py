"""Recovery after unclean shutdown: torn tails, garbage, broken indexes, SIGKILL, write faults."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_test_helpers import batch, open_log, read_all, small_config

from odradek.storage.log import Log

REPO = Path(__file__).resolve().parents[3]


def _fill(dir: Path, n: int = 30, epoch_every: int = 10) -> list:
    log = open_log(dir)
    for i in range(n):
        log.append(batch(2, value_size=100, tag=i, ts=1000 + i), leader_epoch=i // epoch_every)
    expected = read_all(log)
    log.close()
    return expected


def _segment_files(dir: Path, suffix: str) -> list[Path]:
    return sorted(p for p in dir.iterdir() if p.name.endswith(suffix))


def test_torn_tail_is_truncated(tmp_path):
    d = tmp_path / "t-0"
    expected = _fill(d)
    last = _segment_files(d, ".log")[-1]
    size = last.stat().st_size
    os.truncate(last, size - 7)  # cut the last batch in the middle
    log = open_log(d)  # no clean-shutdown marker
    assert read_all(log) == expected[:-1]
    assert log.log_end_offset == expected[-1][0]
    assert last.stat().st_size == size - len(expected[-1][2])
    assert log.append(batch(1), leader_epoch=9).first_offset == expected[-1][0]
    log.close()


@pytest.mark.parametrize("garbage", [b"\x00" * 100, b"\xff" * 3, os.urandom(5000)])
def test_garbage_tail_is_truncated(tmp_path, garbage):
    d = tmp_path / "t-0"
    expected = _fill(d)
    with open(_segment_files(d, ".log")[-1], "ab") as f:
        f.write(garbage)
    log = open_log(d)
    assert read_all(log) == expected
    log.close()


def test_corrupt_batch_in_middle_drops_it_and_later_segments(tmp_path):
    d = tmp_path / "t-0"
    expected = _fill(d)
    logs = _segment_files(d, ".log")
    victim = logs[1]
    data = bytearray(victim.read_bytes())
    data[200] ^= 0xFF  # inside the first or second batch of segment 1
    victim.write_bytes(bytes(data))
    log = open_log(d, recovery_point=0)
    got = read_all(log)
    assert got == expected[: len(got)] and len(got) < len(expected)
    # The damaged batch was the segment's first: the segment is left empty, so it and every
    # later segment go, and the log ends where the previous segment ended.
    assert log.log_end_offset == int(victim.stem[:20])
    assert _segment_files(d, ".log")[-1] == logs[0]
    assert log.epoch_cache.entries and log.epoch_cache.entries[-1][1] < log.log_end_offset
    log.close()


def test_clean_shutdown_skips_scan_but_rebuilds_deleted_index(tmp_path):
    d = tmp_path / "t-0"
    expected = _fill(d)
    idx = _segment_files(d, ".index")[0]
    original = idx.read_bytes()
    idx.unlink()
    _segment_files(d, ".timeindex")[0].unlink()
    log = open_log(d, clean_shutdown=True)
    assert read_all(log) == expected
    assert log.offset_for_timestamp(1003) == (6, 1003)
    log.close()
    assert idx.read_bytes() == original


@pytest.mark.parametrize("damage", ["odd_size", "decreasing", "beyond_segment", "zeros"])
def test_corrupt_index_is_rebuilt_on_clean_open(tmp_path, damage):
    d = tmp_path / "t-0"
    expected = _fill(d)
    idx = _segment_files(d, ".index")[0]
    original = idx.read_bytes()
    if damage == "odd_size":
        idx.write_bytes(original + b"\x01\x02\x03")
    elif damage == "decreasing":
        idx.write_bytes(original[8:16] + original[:8] + original[16:])
    elif damage == "beyond_segment":
        idx.write_bytes(original + (10**6).to_bytes(4, "big") + (1).to_bytes(4, "big"))
    else:
        idx.write_bytes(original + b"\x00" * 80)  # preallocated tail after a crash
    log = open_log(d, clean_shutdown=True)
    assert read_all(log) == expected
    for off in range(0, 60, 7):
        assert log.read(off, 1).first_offset in (off, off - 1)
    log.close()
    assert idx.read_bytes() == original


def test_unclean_restart_with_preallocated_indexes(tmp_path):
    # Simulate a crash: the active segment's indexes keep their preallocated size.
    d = tmp_path / "t-0"
    log = open_log(d)
    for i in range(10):
        log.append(batch(2, value_size=100, ts=i), leader_epoch=0)
    expected = read_all(log)
    for seg in log.segments:
        seg.offset_index.flush()
    log.closed = True  # drop without close(): no trimming, no final time index entry
    log2 = open_log(d)
    assert read_all(log2) == expected and log2.max_timestamp_and_offset() == (9, 18)
    log2.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=25), cut=st.floats(0, 1),
       clean_marker=st.booleans())
def test_recovery_matches_model(tmp_path_factory, sizes, cut, clean_marker):
    """Append batches, cut the log's bytes anywhere, recover: the log is exactly the model's prefix."""
    d = tmp_path_factory.mktemp("model") / "t-0"
    cfg = small_config(segment_bytes=1500)
    log = Log.open(d, cfg)
    model = []
    for i, n in enumerate(sizes):
        info = log.append(batch(n, value_size=60, tag=i, ts=i), leader_epoch=i % 3 and 1)
        model.append((info.first_offset, info.last_offset))
    log.close()
    logs = _segment_files(d, ".log")
    total = sum(p.stat().st_size for p in logs)
    keep = int(total * cut)
    survived_bytes = 0
    for p in logs:
        size = p.stat().st_size
        if survived_bytes + size > keep:
            os.truncate(p, max(keep - survived_bytes, 0))
            keep = survived_bytes  # later files lose everything
        survived_bytes += size
    log = Log.open(d, cfg)
    got = [(b, e) for b, e, _ in read_all(log)]
    assert got == model[: len(got)]
    assert log.log_end_offset == (got[-1][1] + 1 if got else log.log_start_offset)
    offsets = [o for b, e in got for o in range(b, e + 1)]
    assert offsets == list(range(len(offsets)))  # dense
    assert log.append(batch(1), leader_epoch=5).first_offset == log.log_end_offset - 1
    log.close()


WRITER = textwrap.dedent("""
    import sys, os
    sys.path.insert(0, {repo!r}); sys.path.insert(0, {tests!r})
    from log_test_helpers import batch, small_config
    from odradek.storage.log import Log
    log = Log.open({dir!r}, small_config(segment_bytes=64 * 1024, segment_index_bytes=4096))
    i = 0
    while True:
        info = log.append(batch(3, value_size=200, tag=i, ts=i), leader_epoch=1)
        # Acknowledged: report after the append returned (the data is in the page cache).
        os.write(1, (str(info.last_offset) + "\\n").encode())
        i += 1
""")


def test_sigkill_during_appends_keeps_every_acknowledged_batch(tmp_path):
    d = tmp_path / "t-0"
    code = WRITER.format(repo=str(REPO), tests=str(Path(__file__).parent), dir=str(d))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    acked = -1
    for line in proc.stdout:
        acked = int(line)
        if acked > 3000:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    log = Log.open(d, small_config(segment_bytes=64 * 1024, segment_index_bytes=4096))
    batches = read_all(log)
    offsets = [o for b, e, _ in batches for o in range(b, e + 1)]
    assert offsets == list(range(len(offsets)))
    assert log.log_end_offset >= acked + 1
    assert len(log.segments) > 5
    log.close()


FAULTY = textwrap.dedent("""
    import sys, os, json, resource, signal
    sys.path.insert(0, {repo!r}); sys.path.insert(0, {tests!r})
    from log_test_helpers import batch, small_config
    from odradek.storage.log import Log
    from odradek.storage.errors import LogDirOfflineError, KafkaStorageError
    failed_dirs = []
    log = Log.open({dir!r}, small_config(segment_bytes=1 << 20, segment_index_bytes=4096),
                   on_dir_failure=failed_dirs.append)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
    acked, error = [], None
    for i in range(100):
        try:
            info = log.append(batch(2, value_size=300, tag=i), leader_epoch=0)
            acked.append(info.last_offset)
        except LogDirOfflineError as exc:
            error = type(exc).__name__
            break
    try:
        log.append(batch(1), leader_epoch=0)
        after = "accepted"
    except KafkaStorageError as exc:
        after = type(exc).__name__
    size = os.path.getsize(log.active_segment.log_path)
    print(json.dumps(dict(acked=acked, error=error, after=after, size=size, failed=[str(p) for p in failed_dirs])))
""")


def test_write_error_leaves_no_partial_batch(tmp_path):
    """RLIMIT_FSIZE makes the kernel fail a real write midway (short write, then EFBIG)."""
    d = tmp_path / "t-0"
    code = FAULTY.format(repo=str(REPO), tests=str(Path(__file__).parent), dir=str(d))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["error"] == "LogDirOfflineError" and result["after"] == "KafkaStorageError"
    assert result["failed"] == [str(tmp_path)]
    one = len(batch(2, value_size=300))
    assert result["size"] == len(result["acked"]) * one  # cut back: no half-written batch
    log = Log.open(d, small_config(segment_bytes=1 << 20, segment_index_bytes=4096))
    assert log.log_end_offset == result["acked"][-1] + 1
    assert len(read_all(log)) == len(result["acked"])
    log.close()
