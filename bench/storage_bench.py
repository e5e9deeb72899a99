"""Storage engine micro-benchmark: append, sendfile read and recovery throughput.

Run: ``.venv/bin/python bench/storage_bench.py [--dir /path] [--mib 128] [--rounds 9]``. Prints a
table of append MB/s (16 KiB and 1 MiB batches, 64 MiB segments so rolls and their background
fsyncs are included) beside the plain os.write ceiling measured in the same run on the same file
system, their ratio, read MB/s via os.sendfile into a socketpair drained by a thread, and recovery
seconds per GiB (unclean open of a log of --mib MiB, scaled).

Shared machines are noisy. Each of --rounds rounds runs the ceiling and the append back to back
(in alternating order) and takes their ratio; the table shows the median ratio over the rounds
and its range, and the best MB/s of each kind. Pairing matters on this project's 2-vCPU VM: the
best-of-3 ratio it used before spread from 0.71 to 1.00 over three runs of the same code, because
the two best runs could come from different minutes of a neighbour's load.
Each run is timed twice: wall clock, and the CPU time of the writing thread (time.thread_time),
which a busy neighbour on a shared VM disturbs less.
Before each timed run the benchmark calls os.sync(), so no run has the kernel writing back the
previous run's dirty pages beside it.
The "crc/write" column is one batch's CRC-32C (which every append must compute) as a fraction of
one plain os.write of it: the append can reach at most 1 / (1 + that) of the ceiling.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from odradek.protocol.checksum import crc32c  # noqa: E402
from odradek.protocol.records import Record, encode_batch  # noqa: E402
from odradek.storage.log import Log  # noqa: E402
from odradek.storage.log_config import LogConfig  # noqa: E402

MIB = 1024 * 1024


def make_batch(size: int) -> bytes:
    per_record = 1024
    n = max(1, size // (per_record + 20))
    return encode_batch([Record(timestamp=1_700_000_000_000 + i, value=os.urandom(per_record)) for i in range(n)])


class Rates(NamedTuple):
    """MB/s by wall clock and by the writing thread's CPU time."""

    wall: float
    cpu: float


def _rates(nbytes: int, wall_s: float, cpu_s: float) -> Rates:
    return Rates(nbytes / wall_s / MIB, nbytes / max(cpu_s, 1e-9) / MIB)


def _best(a: Rates, b: Rates) -> Rates:
    return Rates(max(a.wall, b.wall), max(a.cpu, b.cpu))


def bench_plain_write(dir: Path, chunk: bytes, total: int) -> Rates:
    path = dir / "plain.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.sync()  # see the module docstring: each timed run starts with no writeback under way
    start, cpu = time.perf_counter(), time.thread_time()
    written = 0
    while written < total:
        written += os.write(fd, chunk)
    rates = _rates(written, time.perf_counter() - start, time.thread_time() - cpu)
    os.close(fd)
    path.unlink()
    return rates


def bench_append(dir: Path, raw: bytes, total: int) -> tuple[Rates, Log]:
    log = Log.open(dir, LogConfig(segment_bytes=64 * MIB))
    os.sync()
    start, cpu = time.perf_counter(), time.thread_time()
    appended = 0
    while appended < total:
        log.append(raw, leader_epoch=0)
        appended += len(raw)
    return _rates(appended, time.perf_counter() - start, time.thread_time() - cpu), log


def crc_share(raw: bytes, ceiling: Rates) -> float:
    """One batch's CRC-32C time over one os.write of it at the ceiling's CPU rate."""
    view = memoryview(raw)[21:]
    n = max(10, (64 * MIB) // len(raw))
    cpu = time.thread_time()
    for _ in range(n):
        crc32c(view)
    crc_s = (time.thread_time() - cpu) / n
    return crc_s / (len(raw) / (ceiling.cpu * MIB))


class Paired(NamedTuple):
    """Best rates of each kind, and the median of the per-round append/ceiling ratios."""

    append: Rates
    ceiling: Rates
    ratio: Rates
    ratio_low: Rates
    ratio_high: Rates


def paired_append_and_ceiling(root: Path, raw: bytes, total: int, rounds: int) -> tuple[Paired, Path, Log]:
    """Run the os.write ceiling and the append back to back ``rounds`` times, in alternating order.

    Each round's ratio compares two runs made within a second of each other, so a shared VM's slow
    drifts cancel out; the median of the rounds is the reported ratio. Returns the last log.
    """
    best_rate = best_ceiling = Rates(0.0, 0.0)
    walls: list[float] = []
    cpus: list[float] = []
    log: Log | None = None
    dir = root / "bench"
    for i in range(rounds):
        if log is not None:
            log.close()
            shutil.rmtree(dir)
        dir = root / f"bench-{len(raw)}-{i}"
        if i % 2 == 0:
            ceiling = bench_plain_write(root, raw, total)
            rate, log = bench_append(dir, raw, total)
        else:
            rate, log = bench_append(dir, raw, total)
            ceiling = bench_plain_write(root, raw, total)
        best_rate, best_ceiling = _best(best_rate, rate), _best(best_ceiling, ceiling)
        walls.append(rate.wall / ceiling.wall)
        cpus.append(rate.cpu / ceiling.cpu)
    assert log is not None
    paired = Paired(best_rate, best_ceiling, Rates(median(walls), median(cpus)),
                    Rates(min(walls), min(cpus)), Rates(max(walls), max(cpus)))
    return paired, dir, log


def bench_read(log: Log) -> float:
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MIB)

    def drain() -> None:
        while b.recv(4 * MIB):
            pass

    t = threading.Thread(target=drain)
    t.start()
    offset, sent = log.log_start_offset, 0
    start = time.perf_counter()
    while offset < log.log_end_offset:
        s = log.read(offset, MIB)
        pos, end = s.position, s.position + s.size
        while pos < end:
            pos += os.sendfile(a.fileno(), s.fd, pos, end - pos)
        sent += s.size
        offset = s.next_offset
    elapsed = time.perf_counter() - start
    a.close()
    t.join()
    b.close()
    return sent / elapsed / MIB


def bench_recovery(dir: Path) -> float:
    size = sum(p.stat().st_size for p in dir.glob("*.log"))
    start = time.perf_counter()
    log = Log.open(dir, LogConfig(segment_bytes=128 * MIB), clean_shutdown=False, recovery_point=0)
    elapsed = time.perf_counter() - start
    log.close()
    return elapsed * (1024 * MIB) / size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--mib", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="odradek-bench-", dir=args.dir))
    total = args.mib * MIB
    rows = []
    try:
        for label, size in (("16 KiB", 16 * 1024), ("1 MiB", MIB)):
            raw = make_batch(size)
            paired, dir, log = paired_append_and_ceiling(root, raw, total, args.rounds)
            read_rate = bench_read(log)
            log.close()
            recovery = bench_recovery(dir)
            rows.append((label, paired, crc_share(raw, paired.ceiling), read_rate, recovery))
            shutil.rmtree(dir)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'batch':>8} | {'append MB/s':>11} | {'os.write MB/s':>13} | {'ratio (range)':>17} | "
          f"{'CPU ratio (range)':>17} | {'crc/write':>9} | {'sendfile MB/s':>13} | {'recovery s/GiB':>14}")
    print("-" * 126)
    for label, p, crc, read_rate, recovery in rows:
        wall = f"{p.ratio.wall:.2f} ({p.ratio_low.wall:.2f}-{p.ratio_high.wall:.2f})"
        cpu = f"{p.ratio.cpu:.2f} ({p.ratio_low.cpu:.2f}-{p.ratio_high.cpu:.2f})"
        print(f"{label:>8} | {p.append.wall:11.0f} | {p.ceiling.wall:13.0f} | {wall:>17} | {cpu:>17} | "
              f"{crc:9.2f} | {read_rate:13.0f} | {recovery:14.2f}")
    print(f"(data: {args.mib} MiB per run, {args.rounds} paired rounds: MB/s are the best run, ratios the median "
          f"of the rounds; in {args.dir or tempfile.gettempdir()}; page cache, no fsync on append)")


if __name__ == "__main__":
    main()
