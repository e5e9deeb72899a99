"""Replica placements computed by Kafka 4.4's own StripedReplicaPlacer in a JVM: the expected values of
the placement cross-check come from here, never from controller/placement.py.

``kafka_placements(cases)`` runs tests/support/java/StripedPlacements.java (Java's single-file
launcher, Kafka's jars on the classpath) once for all cases; a second or two. A case is a seed for
``new java.util.Random(seed)``, the brokers in registration order and the placement requests made one
after another with that placer. Raises tools.kafka_dist.ToolchainUnavailable without Java or Kafka's
jars (callers skip, saying so).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tools.kafka_dist import classpath, java_command

SOURCE = Path(__file__).resolve().parent / "java" / "StripedPlacements.java"


@dataclass(frozen=True)
class PlacementCase:
    seed: int
    brokers: Sequence[tuple[int, str | None, bool]]  # (id, rack or None, fenced)
    requests: Sequence[tuple[int, int]]  # (partitions, replication factor)


# One request's answer: the replica lists, or Kafka's error message.
Outcome = list[tuple[int, ...]] | str


def _rack_field(rack: str | None) -> str:
    return "-" if rack is None else "r" + rack.encode("utf-16-be", "surrogatepass").hex()


def kafka_placements(cases: Sequence[PlacementCase]) -> list[list[Outcome]]:
    """For each case, Kafka's answer to each of its requests."""
    lines: list[str] = []
    for case in cases:
        lines.append(f"case {case.seed}")
        lines += [f"broker {i} {_rack_field(rack)} {int(fenced)}" for i, rack, fenced in case.brokers]
        lines += [f"place {n} {rf}" for n, rf in case.requests]
        lines.append("end")
    cmd = java_command(str(SOURCE), [], classpath("kafka"), ["-XX:+UseSerialGC"])
    out = subprocess.run(cmd, input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=300,
                         check=True).stdout
    answers: list[list[Outcome]] = [[]]
    for line in out.splitlines():
        if line == "end":
            answers.append([])
        elif line.startswith("error "):
            answers[-1].append(line[len("error "):])
        else:
            assert line.startswith("ok"), line
            answers[-1].append([tuple(int(b) for b in p.split(",")) for p in line.split()[1:]])
    assert answers[-1] == [] and len(answers) == len(cases) + 1, out
    return answers[:-1]
