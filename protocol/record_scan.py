"""One pass over the records of a v2 batch checking their framing, as Kafka's record iterator does.

Kafka's leader reads every record of a produced batch (LogValidator through DefaultRecordBatch's
iterator and DefaultRecord.readFrom) and refuses the batch with INVALID_RECORD when the records
do not add up. Odradek stores batches as sent, so it must check the same before appending, or a
consumer meets the damage later (librdkafka stalls, kafka-python raises CorruptRecordError).

Rules, per record ``i`` of the ``count`` records in ``data[start:end]`` (see odradek.protocol.records for
the layout), in this order:

* a record must start before ``end`` (else E_EOF: the count promises more records than there are);
* its length varint: at most 5 bytes, value within int32 (E_STRUCTURE), cut short by ``end`` (E_EOF);
  ``0 <= length <= bytes left`` (E_RECORD_SIZE);
* inside the record: attributes byte, timestamp delta varlong (<= 10 bytes, fits int64), offset
  delta varint, key and value (length >= -1, bytes within the record), header count (>= 0:
  E_HEADERS_NEG; <= bytes left in the record: E_HEADERS_BIG), each header's key (length >= 0:
  E_HEADER_KEY) and value (length >= -1); any other field that is malformed or runs past the
  record is E_STRUCTURE;
* the fields must fill the record exactly (E_SIZE_MISMATCH);
* after ``count`` records nothing may remain (E_REMAINING).

Varints are stricter than Java's ByteUtils (which drops excess bits of a fifth byte) and a key or
value length below -1 is refused where Java reads it as null: no client writes either.

With ``F_DELTAS`` every record's offset delta must equal its index (R_OFFSET_DELTA): Odradek
assigns offsets by rewriting only the base offset, so the deltas are what consumers see (Kafka
rewrites a compressed batch whose inner offsets are not 0..n-1; a producer never sends one).
With ``F_KEYS`` a record with a null key is reported (R_NULL_KEY, compacted topics). One finding
per record, the offset delta first. Findings do not stop the scan; framing errors do.

:func:`scan` is the native pass from ``protocol/_record_scan.c`` when it was built (setup.py;
``NATIVE`` says which), else :func:`scan_py`, which implements exactly the same rules and results
(tests/protocol/test_record_scan.py compares them). Pure functions: any thread may call them.
"""

from __future__ import annotations

from collections.abc import Callable

E_EOF = 1
E_STRUCTURE = 2
E_RECORD_SIZE = 3
E_SIZE_MISMATCH = 4
E_HEADERS_NEG = 5
E_HEADERS_BIG = 6
E_HEADER_KEY = 7
E_REMAINING = 8
E_COUNT = 9

R_OFFSET_DELTA = 1
R_NULL_KEY = 2

F_KEYS = 1
F_DELTAS = 2

ScanResult = None | tuple[int, int, int, int] | list[tuple[int, int, int]]


def describe(error: tuple[int, int, int, int]) -> str:
    """Kafka's message (InvalidRecordException) for a framing error returned by :func:`scan`."""
    kind, _index, a, b = error
    if kind == E_EOF:
        return "Incorrect declared batch size, premature EOF reached"
    if kind == E_RECORD_SIZE:
        return (f"Invalid record size: expected {a} bytes in record payload, but instead the buffer has only "
                f"{b} remaining bytes.")
    if kind == E_SIZE_MISMATCH:
        return f"Invalid record size: expected to read {a} bytes in record payload, but instead read {b}"
    if kind == E_HEADERS_NEG:
        return f"Found invalid number of record headers {a}"
    if kind == E_HEADERS_BIG:
        return f"Found invalid number of record headers. {a} is larger than the remaining size of the buffer"
    if kind == E_HEADER_KEY:
        return f"Invalid negative header key size {a}"
    if kind == E_REMAINING:
        return "Incorrect declared batch size, records still remaining in file"
    if kind == E_COUNT:
        return f"Found invalid record count {a} in magic v2 batch"
    return "Found invalid record structure"


class _Malformed(Exception):
    """Internal to scan_py: a field is malformed (``truncated``: cut short by its bound)."""

    def __init__(self, truncated: bool) -> None:
        self.truncated = truncated


def _varint(p: bytes | bytearray | memoryview, pos: int, end: int) -> tuple[int, int]:
    raw = 0
    for n in range(5):
        if pos >= end:
            raise _Malformed(True)
        b = p[pos]
        pos += 1
        if n == 4 and b > 0x0F:
            raise _Malformed(False)
        raw |= (b & 0x7F) << (7 * n)
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
    raise _Malformed(False)  # unreachable, as in C


def _skip_varlong(p: bytes | bytearray | memoryview, pos: int, end: int) -> int:
    for n in range(10):
        if pos >= end:
            raise _Malformed(True)
        b = p[pos]
        pos += 1
        if n == 9 and b > 0x01:
            raise _Malformed(False)
        if b < 0x80:
            return pos
    raise _Malformed(False)


def _skip_bytes(p: bytes | bytearray | memoryview, pos: int, end: int) -> tuple[int, int]:
    length, pos = _varint(p, pos, end)
    if length < -1 or length > end - pos:
        raise _Malformed(False)
    return length, pos + max(length, 0)


def scan_py(data: bytes | bytearray | memoryview, start: int, end: int, count: int, flags: int) -> ScanResult:
    """The pure-Python pass; same arguments and results as the native ``scan``."""
    if start < 0 or end > len(data) or start > end:
        raise ValueError("scan: start/end outside the buffer")
    if count < 0:
        return (E_COUNT, 0, count, 0)
    findings: list[tuple[int, int, int]] = []
    pos = start
    for index in range(count):
        if pos >= end:
            return (E_EOF, index, 0, 0)
        try:
            length, pos = _varint(data, pos, end)
        except _Malformed as exc:
            return (E_EOF if exc.truncated else E_STRUCTURE, index, 0, 0)
        if length < 0 or length > end - pos:
            return (E_RECORD_SIZE, index, length, end - pos)
        record_start, record_end = pos, pos + length
        try:
            if record_end - pos < 1:
                raise _Malformed(False)
            pos = _skip_varlong(data, pos + 1, record_end)
            delta, pos = _varint(data, pos, record_end)
            key_length, pos = _skip_bytes(data, pos, record_end)
            _, pos = _skip_bytes(data, pos, record_end)
            headers, pos = _varint(data, pos, record_end)
            if headers < 0:
                return (E_HEADERS_NEG, index, headers, 0)
            if headers > record_end - pos:
                return (E_HEADERS_BIG, index, headers, 0)
            for _ in range(headers):
                header_key, pos = _varint(data, pos, record_end)
                if header_key < 0:
                    return (E_HEADER_KEY, index, header_key, 0)
                if header_key > record_end - pos:
                    raise _Malformed(False)
                _, pos = _skip_bytes(data, pos + header_key, record_end)
        except _Malformed:
            return (E_STRUCTURE, index, 0, 0)
        if pos != record_end:
            return (E_SIZE_MISMATCH, index, length, pos - record_start)
        if flags & F_DELTAS and delta != index:
            findings.append((index, R_OFFSET_DELTA, delta))
        elif flags & F_KEYS and key_length < 0:
            findings.append((index, R_NULL_KEY, key_length))
    if pos != end:
        return (E_REMAINING, count, end - pos, 0)
    return findings or None


def _load_native() -> Callable[..., ScanResult] | None:
    try:
        from odradek.protocol._record_scan import scan as native  # built by setup.py (optional)
    except ImportError:
        return None
    return native


_native = _load_native()
NATIVE = _native is not None
scan: Callable[[bytes | bytearray | memoryview, int, int, int, int], ScanResult] = _native or scan_py
