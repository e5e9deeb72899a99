import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.index_file import CorruptIndexError
from storage.offset_index import OffsetIndex
from storage.time_index import TimeIndex


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
