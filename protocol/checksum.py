"""CRC-32C (Castagnoli, RFC 3720's iSCSI polynomial 0x1EDC6F41, reflected): Kafka's batch checksum.

Record batch v2 carries a CRC-32C over everything from its attributes to its end; the broker
checks it once per produced batch, recomputes it when it rewrites CRC-covered fields, and the
metadata log and producer-state snapshots use the same function for their own frames.
``crc32c(data, value=0)`` continues from ``value``, so a checksum can be computed in pieces:
``crc32c(b + c) == crc32c(c, crc32c(b))``.

Which library computes it: ``crc32c_rs`` when it is installed, else ``crc32c`` (ICRAR). Both give
the same results (tests/protocol/test_checksum.py compares them on random input). The first
picks a folding implementation by CPU model (VPCLMULQDQ on AVX-512 machines); the second uses the
SSE 4.2 ``crc32`` instruction. Measured on this project's 2-vCPU Xeon VM: 1 MiB in 24 µs against
65 µs, 16 KiB in 0.47 µs against 1.6 µs. At the append path's 1 MiB batches that CRC alone was a
fifth of the cost of writing the batch to the page cache
(docs/benchmarks/archive/issue03-storage-append-path.md).
"""

from __future__ import annotations

from typing import Protocol


class _Crc32c(Protocol):
    def __call__(self, data: bytes | bytearray | memoryview, value: int = 0, /) -> int: ...


def _pick() -> tuple[_Crc32c, str]:
    try:
        from crc32c_rs import crc32c as fast

        return fast, "crc32c_rs"
    except (ImportError, RuntimeError):  # not installed, or no implementation for this CPU
        from crc32c import crc32c as portable

        return portable, "crc32c"


crc32c, IMPLEMENTATION = _pick()
