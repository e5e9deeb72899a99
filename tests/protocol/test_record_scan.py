"""odradek.protocol.record_scan: the native pass and its pure-Python twin apply the same rules.

The differential tests feed both the records of good batches, the same bytes mutated (flipped
bytes, lying counts, cut or extended), and random bytes; the results must be identical.
"""

from __future__ import annotations

import shutil
import sysconfig

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol import record_scan
from odradek.protocol.record_scan import (
    E_COUNT,
    E_EOF,
    E_HEADER_KEY,
    E_REMAINING,
    E_STRUCTURE,
    F_DELTAS,
    F_KEYS,
    R_NULL_KEY,
    R_OFFSET_DELTA,
    scan_py,
)
from odradek.protocol.records import Record, encode_batch
from tests.support.bad_batches import record, varint

IMPLEMENTATIONS = [scan_py] + ([record_scan.scan] if record_scan.NATIVE else [])

records_st = st.lists(
    st.builds(
        Record,
        timestamp=st.integers(-(2**40), 2**40),
        key=st.none() | st.binary(max_size=20),
        value=st.none() | st.binary(max_size=200),
        headers=st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=10)), max_size=3),
    ),
    min_size=1,
    max_size=20,
)


def _records_of(records: list[Record]) -> bytes:
    return encode_batch(records)[61:]


def test_native_scan_is_built_where_a_compiler_exists():
    # setup.py builds it (pip install -e ., or setup.py build_ext --inplace); without a compiler
    # the package installs and works on the Python twin.
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip("no C compiler: the pure-Python scan is in use")
    assert record_scan.NATIVE, "protocol/_record_scan.c is not built: run pip install -e . (make venv)"


@pytest.mark.parametrize("scan", IMPLEMENTATIONS)
def test_results_of_each_kind(scan):
    good = _records_of([Record(timestamp=1, key=b"k", value=b"v") for _ in range(3)])
    n = len(good)
    assert scan(good, 0, n, 3, F_DELTAS | F_KEYS) is None
    assert scan(good, 0, n, 4, F_DELTAS) == (E_EOF, 3, 0, 0)
    assert scan(good, 0, n, 2, F_DELTAS)[0] == E_REMAINING
    assert scan(good, 0, n, -1, 0) == (E_COUNT, 0, -1, 0)
    assert scan(good, 0, n - 1, 3, 0)[0] in (E_STRUCTURE, E_EOF, 3)
    body = record(0, key=None) + record(2) + record(2, key=None)
    assert scan(body, 0, len(body), 3, F_DELTAS | F_KEYS) == [(0, R_NULL_KEY, -1), (1, R_OFFSET_DELTA, 2),
                                                              (2, R_NULL_KEY, -1)]
    assert scan(body, 0, len(body), 3, 0) is None
    bad_header = record(0, body=b"\x00\x00\x00" + varint(1) + b"k" + varint(-1) + varint(1) + varint(-7) + b"x")
    assert scan(bad_header, 0, len(bad_header), 1, 0) == (E_HEADER_KEY, 0, -7, 0)
    assert scan(b"\xff" * 6, 0, 6, 1, 0) == (E_STRUCTURE, 0, 0, 0)  # a 6-byte varint
    assert scan(memoryview(b"xx" + good), 2, n + 2, 3, F_DELTAS) is None
    assert scan(bytearray(good), 0, n, 3, F_DELTAS) is None
    with pytest.raises(ValueError):
        scan(good, 0, n + 1, 3, 0)


def _agree(data: bytes, start: int, end: int, count: int, flags: int) -> None:
    expected = scan_py(data, start, end, count, flags)
    for scan in IMPLEMENTATIONS[1:]:
        assert scan(data, start, end, count, flags) == expected


@settings(max_examples=400, deadline=None)
@given(records=records_st, flags=st.integers(0, 3), data=st.data())
def test_native_and_python_agree_on_good_and_mutated_records(records, flags, data):
    body = bytearray(_records_of(records))
    count = len(records)
    assert scan_py(bytes(body), 0, len(body), count, F_DELTAS) is None
    mutation = data.draw(st.sampled_from(["none", "flip", "set", "cut", "extend", "count"]))
    if mutation == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            pos = data.draw(st.integers(0, len(body) - 1))
            body[pos] ^= 1 << data.draw(st.integers(0, 7))
    elif mutation == "set":
        pos = data.draw(st.integers(0, len(body) - 1))
        body[pos] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, 0x0F, 0x10]))
    elif mutation == "cut":
        del body[data.draw(st.integers(0, len(body) - 1)):]
    elif mutation == "extend":
        body += data.draw(st.binary(min_size=1, max_size=10))
    elif mutation == "count":
        count = data.draw(st.sampled_from([0, count - 1, count + 1, 2**31 - 1, -1, -(2**31)]))
    _agree(bytes(body), 0, len(body), count, flags)


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=200), count=st.integers(-3, 20), flags=st.integers(0, 3))
def test_native_and_python_agree_on_random_bytes(raw, count, flags):
    _agree(raw, 0, len(raw), count, flags)
