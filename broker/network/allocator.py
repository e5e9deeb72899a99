"""glibc malloc thresholds for the broker process (issue 18: the produce path's kernel time).

Why: a produce request of 64 KiB makes several buffers of 64-256 KiB (the socket read uvloop hands
over, the frame, the response). glibc serves allocations above its mmap threshold (128 KiB at
start, raised only after such a block is freed) with a fresh ``mmap`` and returns them with
``munmap``, and it gives freed memory at the top of a heap back to the kernel above its trim
threshold; every page of such a block is then faulted in again, zero-filled, by the kernel. Under
the saturate load that was ~70 of ~370 us of broker CPU per request, all of it system time
(bench/produce_wire_bench.py, docs/benchmarks/archive/issue18-produce-path.md).

What: at start-up, ``mallopt(M_MMAP_THRESHOLD, 1 MiB)`` keeps blocks up to 1 MiB in the heaps, where
freed ones are reused, and ``mallopt(M_TRIM_THRESHOLD, 16 MiB)`` lets each heap keep up to 16 MiB
free at its top instead of returning it page by page. The price is resident memory: at most about
16 MiB per malloc arena (one per thread that allocates) once a burst freed that much.

Only on glibc; elsewhere, or when the operator set glibc's own ``MALLOC_MMAP_THRESHOLD_`` /
``MALLOC_TRIM_THRESHOLD_`` variables (which win), nothing is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)

# glibc's malloc.h parameter numbers.
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD_BYTES = 1 << 20
TRIM_THRESHOLD_BYTES = 16 << 20

_ENV_KEYS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def tune_malloc() -> bool:
    """Apply the thresholds; True when glibc took both."""
    if any(key in os.environ for key in _ENV_KEYS):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
        # musl and others have no mallopt, or one that ignores these parameters (returns 0).
        # gnu_get_libc_version exists only in glibc.
        libc.gnu_get_libc_version  # noqa: B018
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
    if not ok:
        log.debug("mallopt refused the thresholds; the allocator keeps its defaults")
    return ok
