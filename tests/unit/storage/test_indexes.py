import os
import struct
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.storage.index_file import CorruptIndexError
from odradek.storage.offset_index import OffsetIndex
from odradek.storage.time_index import TimeIndex


def test_offset_index_append_lookup_truncate(tmp_path):
    idx = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 80)
    assert idx.lookup(150) == (100, 0) and idx.max_entries == 10
    for _i, (off, pos) in enumerate([(105, 0), (110, 300), (120, 900)]):
        idx.append(off, pos)
    assert idx.lookup(104) == (100, 0)
    assert idx.lookup(105) == (105, 0) and idx.lookup(119) == (110, 300) and idx.lookup(10**6) == (120, 900)
    with pytest.raises(CorruptIndexError):
        idx.append(120, 1000)
    idx.truncate_to(110)
    assert idx.entries == 1 and idx.lookup(200) == (105, 0)
    idx.close()
    assert os.path.getsize(tmp_path / "00000000000000000100.index") == 8
    assert (tmp_path / "00000000000000000100.index").read_bytes() == struct.pack(">ii", 5, 0)


def test_offset_index_full(tmp_path):
    idx = OffsetIndex(tmp_path / "0.index", 0, 20)  # rounded down to 2 entries
    idx.append(1, 0)
    idx.append(2, 10)
    assert idx.is_full
    idx.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 1000), min_size=0, max_size=60, unique=True), st.integers(0, 1100))
def test_offset_index_lookup_matches_model(tmp_path_factory, rel_offsets, target):
    d = tmp_path_factory.mktemp("idx")
    entries = [(1000 + r, r * 10) for r in sorted(rel_offsets)]
    idx = OffsetIndex(d / "x.index", 1000, 4096)
    for off, pos in entries:
        idx.append(off, pos)
    below = [e for e in entries if e[0] <= 1000 + target]
    assert idx.lookup(1000 + target) == (below[-1] if below else (1000, 0))
    idx.close()
    reopened = OffsetIndex(d / "x.index", 1000, 4096, writable=False)
    reopened.sanity_check(log_size=10**6)
    assert reopened.lookup(1000 + target) == (below[-1] if below else (1000, 0))
    reopened.close()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 500), st.integers(1, 5)), max_size=50), st.integers(0, 600))
def test_time_index_lookup_before_matches_model(tmp_path_factory, steps, target):
    d = tmp_path_factory.mktemp("tidx")
    idx = TimeIndex(d / "x.timeindex", 0, 4096)
    model = []
    offset = 0
    for ts, gap in steps:
        offset += gap
        if idx.maybe_append(ts, offset):
            model.append((ts, offset))
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(model, model[1:], strict=False))
    below = [e for e in model if e[0] < target]
    assert idx.lookup_before(target) == (below[-1] if below else None)
    idx.close()


def test_time_index_final_entry_replaces_same_offset(tmp_path):
    idx = TimeIndex(tmp_path / "0.timeindex", 0, 120)
    assert idx.maybe_append(10, 5)
    assert not idx.maybe_append(10, 6)  # timestamp did not grow
    assert idx.maybe_append(20, 5)  # same offset, larger timestamp: replaced
    assert idx.entries == 1 and idx.entry(0) == (20, 5)
    idx.truncate_to(5)
    assert idx.entries == 0 and idx.last_timestamp == -1
    idx.close()


@pytest.mark.parametrize("content", [
    struct.pack(">ii", 5, 0) + b"\x00\x01",  # not a multiple of 8
    struct.pack(">iiii", 5, 0, 3, 100),  # offsets decreasing
    struct.pack(">iiii", 5, 0, 5, 100),  # offsets repeated
    struct.pack(">ii", 5, 50_000),  # position beyond the log
    struct.pack(">ii", -5, 0),  # offset below the base
])
def test_offset_index_sanity_check_detects_corruption(tmp_path, content):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(content)
    idx = OffsetIndex(path, 0, 1024, writable=False)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(log_size=1000)
    idx.close()


def test_time_index_sanity_check(tmp_path):
    path = tmp_path / "0.timeindex"
    path.write_bytes(struct.pack(">qiqi", 50, 1, 40, 2))
    idx = TimeIndex(path, 0, 1024, writable=False)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    idx.close()
    path.write_bytes(struct.pack(">qi", 50, 9))
    idx = TimeIndex(path, 0, 1024, writable=False)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(next_offset=5)
    idx.close()


# -- entries held in memory until a page fills (odradek.storage.index_file, "Writes") ----------------------

def _position(rel: int) -> int:
    return rel * 10 + 7  # never 0: an entry read from unwritten (zero) file bytes would show


def _file_entries(path) -> list[tuple[int, int]]:
    raw = path.read_bytes()
    return [struct.unpack_from(">ii", raw, i) for i in range(0, len(raw) - len(raw) % 8, 8)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("append"), st.integers(1, 700)),
                          st.tuples(st.just("truncate"), st.integers(0, 3000))), max_size=8),
       st.integers(0, 3000))
def test_offset_index_matches_model_across_page_writes_and_truncations(tmp_path_factory, ops, target):
    """Hundreds of entries cross the 4 KiB page at which the in-memory entries are written out."""
    d = tmp_path_factory.mktemp("idx")
    idx = OffsetIndex(d / "0.index", 0, 64 * 1024)
    model: list[tuple[int, int]] = []
    for op, n in ops:
        if op == "append":
            start = model[-1][0] + 1 if model else 1
            for rel in range(start, start + n):
                idx.append(rel, _position(rel))
                model.append((rel, _position(rel)))
        else:
            idx.truncate_to(n)
            model = [e for e in model if e[0] < n]
        assert idx.entries == len(model)
        below = [e for e in model if e[0] <= target]
        assert idx.lookup(target) == (below[-1] if below else (0, 0))
    idx.close()
    assert _file_entries(d / "0.index") == model
    reopened = OffsetIndex(d / "0.index", 0, 64 * 1024, writable=False)
    reopened.sanity_check(log_size=10**6)
    below = [e for e in model if e[0] <= target]
    assert reopened.lookup(target) == (below[-1] if below else (0, 0))
    reopened.close()


def test_flush_and_trim_write_the_entries_held_in_memory(tmp_path):
    path = tmp_path / "0.index"
    idx = OffsetIndex(path, 0, 64 * 1024)
    for rel in range(1, 11):
        idx.append(rel, _position(rel))
    idx.flush()
    assert _file_entries(path)[:10] == [(rel, _position(rel)) for rel in range(1, 11)]
    idx.append(11, _position(11))
    idx.trim_to_valid_size()
    assert _file_entries(path) == [(rel, _position(rel)) for rel in range(1, 12)]
    idx.close()


def test_time_index_final_entry_replaces_an_entry_already_written(tmp_path):
    path = tmp_path / "0.timeindex"
    idx = TimeIndex(path, 0, 12 * 1000)
    for i in range(1, 400):  # more than one page of 12-byte entries: the first ones are written
        assert idx.maybe_append(i * 10, i)
    idx.flush()  # now every entry is in the file and none in memory
    assert idx.maybe_append(99_999, 399)  # same offset: replaces the last entry where it lies
    assert idx.entries == 399 and idx.entry(398) == (99_999, 399)
    idx.close()
    raw = path.read_bytes()
    assert len(raw) == 399 * 12 and struct.unpack_from(">qi", raw, 398 * 12) == (99_999, 399)


def test_concurrent_lookups_never_see_a_missing_or_torn_entry(tmp_path):
    """A reader thread looks entries up while the writer appends across many page writes."""
    import threading

    idx = OffsetIndex(tmp_path / "0.index", 0, 1 << 20)
    idx.append(1, _position(1))
    stop = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        target = 1
        while not stop.is_set():
            try:
                offset, position = idx.lookup(target)
            except Exception as exc:  # noqa: BLE001 - any exception is the failure reported
                errors.append(repr(exc))
                return
            if offset < 1 or offset > target or position != _position(offset):
                errors.append(f"lookup({target}) gave {(offset, position)}")
                return
            target = target * 7 % 20_000 + 1

    thread = threading.Thread(target=reader)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show within the run
    try:
        thread.start()
        for rel in range(2, 20_001):
            idx.append(rel, _position(rel))
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    idx.close()
    assert not errors
