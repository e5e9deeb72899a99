"""The orders and hashes of Java collections that Kafka's telemetry answers expose, reproduced.

Kafka's ClientMetricsManager keeps the subscriptions in a ConcurrentHashMap and each client's
requested metrics in a HashSet; a client sees both orders (ListConfigResources lists the map's keys,
GetTelemetrySubscriptions' requested_metrics is the set), and the subscription id is
``CRC32C(set.toString() + pushIntervalMs) ^ clientInstanceId.hashCode()``, so it depends on the set's
iteration order too. Giving the same ids and orders as Kafka lets a client's answers from Kafka and
Odradek be compared (tests/integration/test_client_telemetry_ab.py does).

A java.util.HashMap (and ConcurrentHashMap, before any resize reorders a bin) iterates as
controller/java_hashing.py says; here the table starts at 16 buckets (or the smallest power of two
holding ``n / 0.75`` for ``new HashSet<>(collection)``) and doubles when its size passes three
quarters of it. A bucket of 8 or more keys, which Java turns into a tree, is never the case for a
handful of subscription names or prefixes.

Pure functions; any thread.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from odradek.controller.java_hashing import MASK32, hash_map_order, string_hash
from odradek.protocol.checksum import crc32c


def to_int32(value: int) -> int:
    value &= MASK32
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
    return hash_map_order(unique, string_hash, capacity)


def set_to_string(items: Iterable[str]) -> str:
    """Java's AbstractCollection.toString: "[a, b, c]"."""
    return "[" + ", ".join(items) + "]"


def subscription_id(metrics_in_order: list[str], push_interval_ms: int, client_instance_id: uuid.UUID) -> int:
    """Kafka's ClientMetricsManager.computeSubscriptionId."""
    crc = crc32c((set_to_string(metrics_in_order) + str(push_interval_ms)).encode())
    return to_int32(crc ^ (uuid_hash(client_instance_id) & MASK32))
