"""Java's ``String.hashCode`` and ``java.util.HashMap``'s iteration order, reproduced.

Kafka's answers sometimes show the order of a Java hash collection: the racks StripedReplicaPlacer
walks (controller/placement.py), the subscriptions and metric names a client's telemetry answers
list (broker/client_telemetry/java_order.py). Both need the same two pieces:

- ``String.hashCode``: ``h = 31 * h + c`` over the string's UTF-16 code units, 32-bit wrapping; here
  as an unsigned value.
- A HashMap (or HashSet) iterates its table bucket by bucket, each bucket in insertion order; the
  bucket of a key is ``spread(hashCode) & (capacity - 1)`` with ``spread(h) = h ^ (h >>> 16)``. A
  resize splits each bucket keeping its order, so the final order is the insertion order sorted
  (stably) by the final bucket. Not reproduced: a bucket of 8 or more keys that Java turns into a
  tree. The capacity is the caller's: how the map was sized differs between Kafka's uses.

Pure functions; any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

MASK32 = 0xFFFFFFFF
T = TypeVar("T")


def string_hash(text: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as an unsigned 32-bit value."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & MASK32
    return h


def hash_map_order(items: Iterable[T], hash_of: Callable[[T], int], capacity: int) -> list[T]:
    """The iteration order of a HashMap of ``capacity`` buckets (a power of two) into which ``items``
    were put in this order, keyed by ``hash_of(item)`` (Java's hashCode, signed or unsigned)."""

    def bucket(item: T) -> int:
        h = hash_of(item) & MASK32
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(items, key=bucket)  # stable: insertion order within a bucket
