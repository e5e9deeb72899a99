"""Kafka Streams 4.4 with ``group.protocol=streams`` (KIP-1071), exactly-once v2, against Kafka 4.4 and
Odradek alike (the A/B harness), and the group as Kafka 4.4's kafka-streams-groups tool describes it.

The application (io.odradek.driver.StreamsEos, its own JVM per instance) counts each key's records
through a repartition topic and a state store and writes "key -> count" for every input record; the
broker creates both internal topics and assigns the tasks. Two instances share the work while one
joins, one leaves (SIGTERM: a clean close, epoch -1) and one is killed (SIGKILL: its tasks move once
the broker's session timeout fences it, 45 s on both brokers, Kafka's default and minimum). More
input follows each step. Exactly-once means a read_committed reader of the output sees each key's
counts 1, 2, ..., n once each, in order: a record processed twice would repeat a count, a lost one
skip one - across every task moved between the instances, with its store restored from the
changelog.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.support.java_tools import run_tool
from tests.support.real_kafka import Target, comparison_fixtures, create_topic
from tests.support.streams_wire import describe
from tests.support.wire import WireClient
from tools.kafka_dist import JARS, REPO, classpath, java_command

pytestmark = pytest.mark.timeout(600)

KEYS = 8
PER_KEY = 60  # input records per key and phase
PARTITIONS = 4


targets, target = comparison_fixtures("StreamsGroupHeartbeat", "StreamsGroupDescribe", "FindCoordinator",
                                      "OffsetCommit", "OffsetFetch", "InitProducerId", "TxnOffsetCommit", "EndTxn")


# The application's source, run with Java's single-file launcher on the driver's dependencies: the
# jar cache is shared by every checkout of the project on the machine, and one at an older commit
# rebuilds it with an odradek-driver.jar whose StreamsEos lacks the protocol argument.
STREAMS_EOS = REPO / "java" / "driver" / "src" / "main" / "java" / "io" / "odradek" / "driver" / "StreamsEos.java"


def streams_classpath() -> str:
    classpath("driver")
    return os.pathsep.join(str(p) for p in sorted((JARS / "driver").glob("*.jar")) if p.name != "odradek-driver.jar")


class Instance:
    """One Kafka Streams instance (its own JVM, its own state directory)."""

    def __init__(self, target: Target, app_id: str, source: str, sink: str, state_dir: Path, log: Path) -> None:
        self.cmd = java_command(str(STREAMS_EOS),
                                [target.bootstrap, app_id, source, sink, str(state_dir), "1", "streams"],
                                streams_classpath(), ["-Xmx384m", "-XX:+UseSerialGC"])
        self.log_path = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> Instance:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT)
        # The application names its protocol first (Kafka Streams runs the classic one unless told).
        deadline = time.monotonic() + 60
        while "group.protocol" not in self.log() and self.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "group.protocol streams" in self.log(), self.log()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


def produce_input(target: Target, topic: str, phase: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": target.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(PER_KEY):
        for k in range(KEYS):
            p.produce(topic, key=f"k{k}".encode(), value=f"{phase}-{i}".encode())
    assert p.flush(30) == 0


def committed_output(target: Target, topic: str, expected: int, timeout: float) -> list[bytes]:
    """The read_committed output once ``expected`` records are there and nothing more came for 2 s,
    or at the timeout."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": target.bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: list[bytes] = []
    deadline, quiet_until = time.monotonic() + timeout, None
    while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
        batch = [m.value() for m in c.consume(500, timeout=0.3) if m.error() is None]
        got += batch
        if len(got) >= expected and quiet_until is None:
            quiet_until = time.monotonic() + 2
        elif batch and quiet_until is not None:
            quiet_until = time.monotonic() + 2
    c.close()
    return got


def counts_by_key(records: list[bytes]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r in records:
        key, count = r.decode().split(" -> ")
        out.setdefault(key, []).append(int(count))
    return out


def wait_for_members(target: Target, app: str, n: int, *instances: Instance, timeout: float = 120) -> dict:
    """Until the group is Stable with ``n`` members that own every task between them."""
    deadline = time.monotonic() + timeout
    with WireClient(target.host, target.port) as c:
        while True:
            d = describe(c, app)
            owned = [(t["subtopology_id"], p) for m in d["members"] for t in m["assignment"]["active_tasks"]
                     for p in t["partitions"]]
            if d["error_code"] == 0 and d["group_state"] == "Stable" and len(d["members"]) == n and \
                    len(owned) == 2 * PARTITIONS and len(set(owned)) == len(owned):
                return d
            assert time.monotonic() < deadline, (d["group_state"], d["group_epoch"], d["assignment_epoch"], [
                (m["member_id"], m["member_epoch"], m["assignment"], m["target_assignment"]) for m in d["members"]],
                [i.log() for i in instances])
            time.sleep(0.5)


def test_two_instances_join_leave_and_die_with_exactly_once_counts(target: Target, tmp_path: Path) -> None:
    app = "streams-wc"
    source, sink = f"{app}-in", f"{app}-out"
    create_topic(target, source, PARTITIONS)
    create_topic(target, sink, PARTITIONS)
    a = Instance(target, app, source, sink, tmp_path / "a", tmp_path / "a.log")
    b = Instance(target, app, source, sink, tmp_path / "b", tmp_path / "b.log")
    expected = 0
    try:
        produce_input(target, source, 0)
        expected += KEYS * PER_KEY
        a.start()
        assert len(committed_output(target, sink, expected, 120)) >= expected, a.log()
        # b joins: the tasks are shared, a Stable group of two.
        b.start()
        d = wait_for_members(target, app, 2, a, b)
        assert all(m["assignment"]["active_tasks"] for m in d["members"]), d
        produce_input(target, source, 1)
        expected += KEYS * PER_KEY
        assert len(committed_output(target, sink, expected, 120)) >= expected, (a.log(), b.log())
        # kafka-streams-groups 4.4 describes the group: both members, their tasks.
        tool = run_tool("kafka-streams-groups", ["--bootstrap-server", target.bootstrap, "--describe",
                                                 "--group", app, "--members"])
        rows = [line.split() for line in tool.stdout.splitlines() if line.strip()]
        assert rows[0][:2] == ["GROUP", "MEMBER"], tool.stdout
        assert len([r for r in rows[1:] if r[0] == app]) == 2, tool.stdout
        state = run_tool("kafka-streams-groups", ["--bootstrap-server", target.bootstrap, "--describe",
                                                  "--group", app, "--state"])
        assert "Stable" in state.stdout and app in state.stdout, state.stdout
        # b leaves cleanly: a takes every task back.
        b.stop()  # the JVM exits 143 (SIGTERM) after its shutdown hook closed Kafka Streams
        assert b.log().rstrip().endswith("state NOT_RUNNING"), b.log()
        wait_for_members(target, app, 1, a, b)
        produce_input(target, source, 2)
        expected += KEYS * PER_KEY
        assert len(committed_output(target, sink, expected, 120)) >= expected, a.log()
        # b comes back and is killed: its tasks return to a once the broker fences it.
        b.start()
        wait_for_members(target, app, 2, a, b)
        b.kill()
        produce_input(target, source, 3)
        expected += KEYS * PER_KEY
        wait_for_members(target, app, 1, a, b, timeout=150)
        committed = committed_output(target, sink, expected, 180)
        assert a.alive(), a.log()
    finally:
        for inst in (a, b):
            if inst.alive():
                inst.stop()
    by_key = counts_by_key(committed)
    assert sorted(by_key) == [f"k{k}" for k in range(KEYS)], a.log()
    for key, counts in by_key.items():
        assert counts == list(range(1, 4 * PER_KEY + 1)), (key, counts[:20], a.log(), b.log())
