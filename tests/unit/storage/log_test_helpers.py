"""Shared helpers for the storage tests: build v2 batches with odradek.protocol.records.encode_batch."""

from __future__ import annotations

from pathlib import Path

from odradek.protocol.batch_header import parse_header
from odradek.protocol.records import Record, decode_batch, encode_batch
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig


def batch(n: int = 1, *, ts: int | list[int] = 1000, value_size: int = 10, tag: int = 0, **kwargs) -> bytes:
    """One batch of ``n`` records (base offset 0, as a producer sends it)."""
    stamps = ts if isinstance(ts, list) else [ts] * n
    records = [Record(timestamp=stamps[i], key=b"k%d" % i, value=bytes([tag % 256]) * value_size)
               for i in range(n)]
    return encode_batch(records, **kwargs)


def read_all(log: Log, start: int | None = None) -> list[tuple[int, int, bytes]]:
    """(base_offset, last_offset, batch bytes) of every batch from ``start`` to the log end."""
    out = []
    offset = log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        slice_ = log.read(offset, 1 << 30)
        data = slice_.read_bytes()
        assert data, f"empty read at {offset} below LEO {log.log_end_offset}"
        pos = 0
        while pos < len(data):
            h = parse_header(data, pos)
            out.append((h.base_offset, h.last_offset, data[pos:pos + h.size]))
            pos += h.size
            offset = h.next_offset
    return out


def values_of(raw: bytes) -> list[bytes | None]:
    return [r.value for r in decode_batch(raw).records]


def small_config(**overrides) -> LogConfig:
    base = dict(segment_bytes=4096, segment_index_bytes=1024, index_interval_bytes=100, file_delete_delay_ms=0)
    base.update(overrides)
    return LogConfig(**base)


def open_log(dir: Path, config: LogConfig | None = None, **kwargs) -> Log:
    return Log.open(dir, config or small_config(), **kwargs)
