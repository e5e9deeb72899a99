"""The orders and hashes of Java collections that Kafka's telemetry answers expose, reproduced.

Kafka's ClientMetricsManager keeps the subscriptions in a ConcurrentHashMap and each client's
requested metrics in a HashSet; a client sees both orders (ListConfigResources lists the map's keys,
GetTelemetrySubscriptions' requested_metrics is the set), and the subscription id is
``CRC32C(set.toString() + pushIntervalMs) ^ clientInstanceId.hashCode()``, so it depends on the set's
iteration order too. Giving the same ids and orders as Kafka lets a client's answers from Kafka and
Odradek be compared (tests/integration/test_client_telemetry_ab.py does).

A java.util.HashMap (and ConcurrentHashMap, before any resize reorders a bin) iterates its table
bucket by bucket, each bucket in insertion order; the bucket of a key is ``spread(hashCode) &
(capacity - 1)`` with ``spread(h) = h ^ (h >>> 16)``; the table starts at 16 buckets (or the
smallest power of two holding ``n / 0.75`` for ``new HashSet<>(collection)``) and doubles when its
size passes three quarters of it. A split on resize keeps each bucket's order, so the final order is
the insertion order sorted (stably) by the final bucket. Not reproduced: a bucket of 8 or more keys
that Java turns into a tree (never the case for a handful of subscription names or prefixes).

Pure functions; any thread.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from protocol.checksum import crc32c

_MASK32 = 0xFFFFFFFF


def string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as an unsigned 32-bit value."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK32
    return h


def to_int32(value: int) -> int:
    value &= _MASK32
    return value - (1 << 32) if value >= 1 << 31 else value


def uuid_hash(value: uuid.UUID) -> int:
    """Kafka's Uuid.hashCode: the two 64-bit halves XORed, then the two 32-bit halves of that."""
    hilo = (value.int >> 64) ^ (value.int & ((1 << 64) - 1))
    return to_int32((hilo >> 32) ^ hilo)


def _capacity_for(count: int, initial: int) -> int:
    capacity = initial
    while count > capacity * 3 // 4:
        capacity *= 2
    return capacity


def hash_order(items: Iterable[str], *, sized_for: int | None = None) -> list[str]:
    """The iteration order of a Java HashSet (or HashMap's keys) after adding ``items`` in order,
    duplicates ignored. ``sized_for``: the set was made by ``new HashSet<>(collection)`` of that many."""
    unique = list(dict.fromkeys(items))
    initial = 16
    if sized_for is not None:
        initial = 1
        while initial < int(sized_for / 0.75) + 1:
            initial *= 2
        initial = max(initial, 16)
    capacity = _capacity_for(len(unique), initial)
    return sorted(unique, key=lambda s: (string_hash(s) ^ (string_hash(s) >> 16)) & (capacity - 1))


def set_to_string(items: Iterable[str]) -> str:
    """Java's AbstractCollection.toString: "[a, b, c]"."""
    return "[" + ", ".join(items) + "]"


def subscription_id(metrics_in_order: list[str], push_interval_ms: int, client_instance_id: uuid.UUID) -> int:
    """Kafka's ClientMetricsManager.computeSubscriptionId."""
    crc = crc32c((set_to_string(metrics_in_order) + str(push_interval_ms)).encode())
    return to_int32(crc ^ (uuid_hash(client_instance_id) & _MASK32))
