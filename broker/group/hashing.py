"""Which partition of ``__consumer_offsets`` coordinates a group.

Kafka: ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``, where ``hashCode`` is
Java's ``String.hashCode`` (``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, in wrapping
32-bit arithmetic) and ``Utils.abs`` maps ``Integer.MIN_VALUE`` to 0 (``n & 0x7fffffff``), not to
itself as ``Math.abs`` would. Clients and other brokers compute the same partition, so this must
match Java bit for bit, including characters outside the BMP (two UTF-16 code units each).

Pure functions; any thread may call them.
"""

from __future__ import annotations


def java_string_hash_code(s: str) -> int:
    """Java's ``String.hashCode``: a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    # Each UTF-16 code unit is two bytes, big-endian; surrogate pairs count as two units, as in Java.
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def utils_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``n & 0x7fffffff`` (so MIN_VALUE → 0)."""
    return n & 0x7FFFFFFF


def partition_for(group_id: str, num_partitions: int) -> int:
    """The __consumer_offsets partition of ``group_id``."""
    return utils_abs(java_string_hash_code(group_id)) % num_partitions
