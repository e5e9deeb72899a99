"""What the kernel charges for writing a broker's log into the page cache on this machine (issue 18).

Every broker, Kafka as much as Odradek, pays this per byte produced: a ``pwritev`` of a 64 KiB
batch copies it into page-cache pages that the kernel allocates for the file. How much that costs
depends on where the pages come from. On a VM whose free memory is handed back to the host
(virtio-balloon free page reporting), a page the guest has not touched lately must first be backed
by the host again, and the copy into it stalls; pages just freed by the guest (a file deleted a
moment ago) are reused at the price of a plain memory copy.

The probe writes ``--gib`` GiB in 64 KiB ``pwritev`` calls (a 61-byte header plus the rest, the
shape of Odradek's append) into a new file under ``--dir``, three ways, and prints the kernel CPU
per call and per GB:

- ``fresh``: pages the guest has not used recently (what a broker taking new data mostly gets);
- ``recycled``: right after deleting a file of the same size (its pages go back to the free lists
  and are taken again);
- ``growing``: the same again while the first file is kept, so the page cache must grow.

    python bench/page_cache_probe.py [--gib 2] [--dir .cache]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path

BATCH = 64 * 1024
HEADER = 61


def write_file(path: Path, size: int) -> tuple[float, float]:
    """Write ``size`` bytes in BATCH-sized pwritev calls: (wall us, kernel us) per call."""
    payload = os.urandom(BATCH)
    iov = [payload[:HEADER], payload[HEADER:]]
    calls = size // BATCH
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_stime
        t0 = time.perf_counter()
        for i in range(calls):
            os.pwritev(fd, iov, i * BATCH)
        wall = time.perf_counter() - t0
        kernel = resource.getrusage(resource.RUSAGE_SELF).ru_stime - before
    finally:
        os.close(fd)
    return wall / calls * 1e6, kernel / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--dir", type=Path, default=Path(".cache"))
    args = ap.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    size = int(args.gib * 2**30)
    first, second = args.dir / "page-cache-probe-1", args.dir / "page-cache-probe-2"
    per_gb = 1e9 / BATCH / 1e6  # calls per GB, times us -> s
    print(f"pwritev of {BATCH // 1024} KiB, {args.gib:g} GiB per case, load {os.getloadavg()[0]:.2f}")
    try:
        rows = [("fresh", write_file(first, size))]
        first.unlink()
        rows.append(("recycled", write_file(second, size)))
        rows.append(("growing", write_file(first, size)))
    finally:
        for path in (first, second):
            path.unlink(missing_ok=True)
    for name, (wall, kernel) in rows:
        print(f"  {name:9s} wall {wall:6.1f} us, kernel {kernel:6.1f} us per call = "
              f"{kernel * per_gb:4.2f} kernel CPU-s per GB")


if __name__ == "__main__":
    main()
