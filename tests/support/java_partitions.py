"""Kafka's coordinator partitions, computed by Kafka's own code in a JVM: the expected values of the
partitioning tests come from here, never from broker/coordinator/hashing.py.

``kafka_partitions(ids, counts)`` runs tests/support/java/CoordinatorPartitions.java (Java's
single-file launcher, Kafka's client jar on the classpath: ``Utils.abs(id.hashCode()) % count``, the
expression of GroupCoordinatorService.partitionFor and TransactionStateManager.partitionFor) once
for all ids; about a second. Ids go to it as the hex of their UTF-16 code units, so astral
characters arrive as the surrogate pairs Java's String holds. Raises
tools.kafka_dist.ToolchainUnavailable without Java or Kafka's jars (callers skip, saying so).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from tools.kafka_dist import classpath, java_command

SOURCE = Path(__file__).resolve().parent / "java" / "CoordinatorPartitions.java"


def kafka_partitions(ids: Sequence[str], counts: Sequence[int]) -> dict[str, tuple[int, list[int]]]:
    """id -> (Java's id.hashCode(), [Kafka's partition of id for each of ``counts``])."""
    cmd = java_command(str(SOURCE), [str(c) for c in counts], classpath("kafka"), ["-XX:+UseSerialGC"])
    stdin = "".join(i.encode("utf-16-be").hex() + "\n" for i in ids)
    out = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120, check=True).stdout
    lines = out.splitlines()
    assert len(lines) == len(ids), out
    table: dict[str, tuple[int, list[int]]] = {}
    for id_, line in zip(ids, lines, strict=True):
        hash_code, *partitions = (int(f) for f in line.split())
        table[id_] = (hash_code, partitions)
    return table
