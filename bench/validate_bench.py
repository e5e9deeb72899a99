"""Cost of validating the records of produced batches (odradek.storage.record_validator), per batch.

Run: ``.venv/bin/python bench/validate_bench.py [--batches 2000] [--rounds 5]``. For 16 KiB batches
of 100-byte and of 1 KiB records, uncompressed, lz4 and zstd, prints microseconds per batch of:

* scan      the record pass alone over the (decompressed) records: native and pure Python;
* decomp    the bounded decompression the validation does for compressed batches;
* append    Log.append of the batch (fast path, 64 MiB segments, tmpfs or disk as --dir), with the
            record validation, and with it switched off (as before it existed); "cost" is the median
            of the paired differences (each round runs both, in alternating order), "share" that
            cost over the append with validation.

Medians over --rounds rounds (thread CPU time, which a busy neighbour disturbs less than wall time).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from odradek.protocol import record_scan  # noqa: E402
from odradek.protocol.compression import decompress  # noqa: E402
from odradek.protocol.records import Record, encode_batch  # noqa: E402
from odradek.storage import log as log_module  # noqa: E402
from odradek.storage.log import Log  # noqa: E402
from odradek.storage.log_config import LogConfig  # noqa: E402
from odradek.storage.record_validator import uncompressed_limit  # noqa: E402

BATCH = 16 * 1024
CODECS = {"none": 0, "lz4": 3, "zstd": 4}


def make_batch(record_size: int, codec: int) -> tuple[bytes, bytes, int]:
    """(batch, its records uncompressed, record count): about 16 KiB of records, half-compressible values."""
    n = max(1, BATCH // (record_size + 12))
    records = [Record(timestamp=1_700_000_000_000 + i, key=b"key-%06d" % i,
                      value=os.urandom(record_size // 2) + b"x" * (record_size - record_size // 2)) for i in range(n)]
    raw = encode_batch(records, compression=codec)
    return raw, encode_batch(records)[61:], n


def per_batch_us(fn, batches: int, rounds: int) -> float:
    results = []
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(batches):
            fn()
        results.append((time.thread_time() - start) / batches * 1e6)
    return median(results)


def _append_round(dir: Path, raw: bytes, batches: int, validate: bool) -> float:
    config = LogConfig(segment_bytes=64 * 1024 * 1024, index_interval_bytes=4096, file_delete_delay_ms=0)
    original = log_module.plain_records_ok
    if not validate:
        log_module.plain_records_ok = lambda *args: True
    path = dir / f"{'v' if validate else 'n'}-0"
    try:
        log = Log.open(path, config)
        start = time.thread_time()
        for _ in range(batches):
            log.append(raw, leader_epoch=0)
        elapsed = (time.thread_time() - start) / batches * 1e6
        log.close()
    finally:
        log_module.plain_records_ok = original
        shutil.rmtree(path, ignore_errors=True)
    return elapsed


def bench_append(dir: Path, raw: bytes, batches: int, rounds: int) -> tuple[float, float, float]:
    """(with validation, without, median of the paired differences): rounds alternate the order,
    so a neighbour's load hits both sides alike."""
    with_v, without, diffs = [], [], []
    for r in range(rounds):
        order = (True, False) if r % 2 == 0 else (False, True)
        got = {validate: _append_round(dir, raw, batches, validate) for validate in order}
        with_v.append(got[True])
        without.append(got[False])
        diffs.append(got[True] - got[False])
    return median(with_v), median(without), median(diffs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    dir = Path(tempfile.mkdtemp(prefix="validate-bench-", dir=args.dir))
    print(f"native scan: {record_scan.NATIVE}; {args.batches} batches x {args.rounds} rounds; us per 16 KiB batch")
    print(f"{'records':>8} {'codec':>5} {'n':>4} {'scan C':>7} {'scan py':>8} {'decomp':>7} "
          f"{'append':>7} {'no valid.':>9} {'cost':>6} {'share':>6}")
    try:
        for record_size in (100, 1024):
            for name, codec in CODECS.items():
                raw, records, n = make_batch(record_size, codec)
                native = per_batch_us(lambda r=records, n=n: record_scan.scan(r, 0, len(r), n, record_scan.F_DELTAS),
                                      args.batches, args.rounds) if record_scan.NATIVE else float("nan")
                python = per_batch_us(lambda r=records, n=n: record_scan.scan_py(r, 0, len(r), n, record_scan.F_DELTAS),
                                      max(args.batches // 20, 10), args.rounds)
                body = memoryview(raw)[61:]
                cap = uncompressed_limit(1048588, len(raw))
                decomp = per_batch_us(lambda b=body, c=codec, m=cap: decompress(c, b, max_size=m),
                                      args.batches, args.rounds) if codec else 0.0
                with_v, without, cost = bench_append(dir, raw, args.batches, args.rounds)
                print(f"{record_size:>7}B {name:>5} {n:>4} {native:>7.2f} {python:>8.1f} {decomp:>7.2f} "
                      f"{with_v:>7.2f} {without:>9.2f} {cost:>6.2f} {cost / with_v:>6.1%}")
    finally:
        shutil.rmtree(dir, ignore_errors=True)


if __name__ == "__main__":
    main()
