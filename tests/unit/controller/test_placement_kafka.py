"""controller/placement.py against Kafka 4.4's own StripedReplicaPlacer (kafka-metadata-4.4.0.jar, run in
a JVM by tests/support/java_placement.py): for the same java.util.Random seed, the same brokers and the
same requests one after another, the same replica lists in the same order, or the same error message.

The clusters are drawn (reproducibly) to reach every branch of Kafka's algorithm: racks and no rack
mixed, "" beside no rack, rack names whose Java hashes collide ("Aa" and "BB") or whose UTF-16 and code
point orders differ, fenced brokers (some racks only fenced), more partitions than unfenced brokers (the
reshuffles), replication factors from -1 to above the broker count, clusters past 12 brokers (Java's
HashMap grows). Skipped, saying why, without Java or Kafka's jars."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from odradek.controller import CreatableTopic, CreatePartitionsTopic
from odradek.controller.java_random import JavaRandom
from odradek.controller.placement import PlacementError, StripedReplicaPlacer, UsableBroker
from odradek.protocol.errors import ErrorCode
from tests.support.java_placement import Outcome, PlacementCase, kafka_placements
from tests.unit.controller.conftest import make_controller
from tools.kafka_dist import ToolchainUnavailable

RACKS: list[str | None] = [None, "", "a", "b", "c", "rack-1", "rack-2", "Aa", "BB", "\U0001f600", "\uff21"]


def _cases(count: int, max_brokers: int, seed: int) -> list[PlacementCase]:
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        racks = rng.sample(RACKS, rng.randint(1, len(RACKS)))
        ids = rng.sample(range(200), rng.randint(0, max_brokers))
        brokers = [(i, rng.choice(racks), rng.random() < 0.25) for i in ids]
        requests = [(rng.randint(0, 30), rng.randint(-1, 6)) for _ in range(rng.randint(1, 4))]
        cases.append(PlacementCase(rng.getrandbits(64) - (1 << 63), brokers, requests))
    return cases


def _kafka(cases: list[PlacementCase]) -> list[list[Outcome]]:
    try:
        return kafka_placements(cases)
    except ToolchainUnavailable as exc:
        pytest.skip(f"Kafka's placer cannot run here: {exc}")


def _ours(case: PlacementCase) -> list[Outcome]:
    placer = StripedReplicaPlacer(JavaRandom(case.seed))
    usable = [UsableBroker(*b) for b in case.brokers]
    answers: list[Outcome] = []
    for partitions, rf in case.requests:
        try:
            answers.append(placer.place(partitions, rf, usable))
        except PlacementError as e:
            answers.append(str(e))
    return answers


def test_same_placements_as_kafkas_placer() -> None:
    cases = _cases(1500, 14, seed=31) + _cases(300, 40, seed=32)
    expected = _kafka(cases)
    mismatches = [(case, want, got) for case, want in zip(cases, expected, strict=True)
                  if (got := _ours(case)) != want]
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ; the first: {mismatches[0]}"
    # The comparison covered placements and every error, not errors alone.
    placed = [a for answers in expected for a in answers if isinstance(a, list) and a]
    errors = {" ".join(a.split()[:2]) for answers in expected for a in answers if isinstance(a, str)}
    assert len(placed) > 1500 and errors == {"Invalid replication", "All brokers", "The target"}, errors


async def test_controller_places_as_kafkas_controller(tmp_path: Path) -> None:
    """CreateTopics then CreatePartitions through the controller, seeded, against Kafka's placer asked
    the same two things with the same seed and brokers in the same registration order."""
    racks = {1: "b", 7: "a", 3: None, 12: "a", 5: "b", 30: "c", 17: None}
    fenced = {12}
    seed = 20260417
    c = make_controller(tmp_path, replica_placer=StripedReplicaPlacer(JavaRandom(seed)))
    await c.start(host="h1", port=9092, rack=racks[1])
    try:
        for node, rack in racks.items():
            if node != 1:
                await c.register_broker(node, f"h{node}", 9000 + node, rack, fenced=node in fenced)
        (created,) = await c.create_topics([CreatableTopic("t", 9, 3)])
        (grown,) = await c.create_partitions([CreatePartitionsTopic("t", 16)])
        assert (created.error_code, grown.error_code) == (ErrorCode.NONE, ErrorCode.NONE)
        parts = c.image.topics["t"].partitions
        ours = [[parts[i].replicas for i in range(9)], [parts[i].replicas for i in range(9, 16)]]
    finally:
        await c.stop()
    case = PlacementCase(seed, [(n, r, n in fenced) for n, r in racks.items()], [(9, 3), (7, 3)])
    assert ours == _kafka([case])[0]
