"""Kafka Streams 4.4 with processing.guarantee=exactly_once_v2 against Odradek (issue 28, item 3), on
transactions v2: the Streams producer runs one transaction per commit (records to the output, the
repartition topic and the state store's changelog, and the input offsets through TxnOffsetCommit v5+),
each EndTxn v5 bumping the epoch.

The application (io.odradek.driver.StreamsEos, its own JVM) counts each key's records through a
repartition topic and a state store, writing "key -> count" for every input record. Exactly-once means
a read_committed reader of the output sees each key's counts 1, 2, ..., n once each, in order, whatever
happened meanwhile: a record processed twice would repeat a count, a lost one skip one. Meanwhile the
application is SIGKILLed in the middle of its work and started again (it restores the store from the
changelog, the aborted transaction's records stay invisible), and then the broker itself is SIGKILLed
and restarted under the running application (the coordinator reloads the application's transactional
id and open transaction from __transaction_state), with more input after each.
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.real_kafka import require_toolchain
from tests.support.request_log import request_log_args, versions_used
from tests.support.wire import WireClient, create_topic
from tools.kafka_dist import JARS, classpath, java_command

KEYS = 8
PER_KEY = 150  # input records per key and phase
PHASES = 3


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    require_toolchain()
    b = BrokerProcess(tmp_path / "broker", args=request_log_args(tmp_path / "broker"),
                      overrides={"auto.create.topics.enable": "false", "offsets.topic.num.partitions": "3"})
    b.start()
    try:
        yield b
    finally:
        b.kill()


class StreamsApp:
    """The Streams application as a process: start, SIGKILL, SIGTERM; its output in a file."""

    def __init__(self, broker: BrokerProcess, app_id: str, source: str, sink: str, state_dir: Path,
                 log_path: Path) -> None:
        classpath("driver")  # fills the jar cache if needed
        self.cmd = java_command("io.odradek.driver.StreamsEos",
                                [broker.bootstrap, app_id, source, sink, str(state_dir), "1"],
                                str(JARS / "driver" / "*"), ["-Xmx512m", "-XX:+UseSerialGC"])
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]


def produce_input(broker: BrokerProcess, topic: str, phase: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(PER_KEY):
        for k in range(KEYS):
            p.produce(topic, key=f"k{k}".encode(), value=f"{phase}-{i}".encode())
    assert p.flush(30) == 0


def output(broker: BrokerProcess, topic: str, isolation: str, expected: int, timeout: float) -> list[bytes]:
    """Everything a reader with this isolation sees, once ``expected`` records are there and nothing
    more came for a while, or at the timeout."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "isolation.level": isolation})
    c.assign([TopicPartition(topic, p, 0) for p in range(2)])
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


def wait_for_output(broker: BrokerProcess, topic: str, at_least: int, app: StreamsApp, timeout: float = 90) -> None:
    """Until the committed output holds ``at_least`` records (the application is working)."""
    deadline = time.monotonic() + timeout
    while len(output(broker, topic, "read_committed", at_least, 5)) < at_least:
        assert time.monotonic() < deadline, app.log()
        assert app.proc is not None and app.proc.poll() is None, app.log()


def test_streams_exactly_once_v2_through_an_app_kill_and_a_broker_restart(broker: BrokerProcess,
                                                                         tmp_path: Path) -> None:
    source, sink = f"eos-in-{uuid.uuid4().hex[:6]}", f"eos-out-{uuid.uuid4().hex[:6]}"
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, source, 2)
        create_topic(c, sink, 2)
    app = StreamsApp(broker, f"eos-{uuid.uuid4().hex[:6]}", source, sink, tmp_path / "state", tmp_path / "app.log")
    produce_input(broker, source, 0)
    app.start()
    try:
        # Killed while it works through the first input: the open transaction is left to the broker.
        wait_for_output(broker, sink, KEYS * PER_KEY // 3, app)
        app.kill()
        produce_input(broker, source, 1)
        app.start()
        wait_for_output(broker, sink, KEYS * PER_KEY * 3 // 2, app)
        # The broker goes down under the running application and comes back.
        broker.kill()
        broker.start()
        produce_input(broker, source, 2)
        total = KEYS * PER_KEY * PHASES
        committed = output(broker, sink, "read_committed", total, 180)
        assert app.proc is not None and app.proc.poll() is None, app.log()
    finally:
        if app.proc is not None and app.proc.poll() is None:
            app.stop()
    by_key = counts_by_key(committed)
    assert sorted(by_key) == [f"k{k}" for k in range(KEYS)], app.log()
    for key, counts in by_key.items():
        assert counts == list(range(1, PER_KEY * PHASES + 1)), (key, counts[:20], app.log())
    # The aborted work is in the log (the kills left open transactions the broker aborted), never
    # seen by read_committed.
    uncommitted = output(broker, sink, "read_uncommitted", total, 10)
    assert len(uncommitted) >= total
    # And it was transactions v2: EndTxn v5 only, the offsets with TxnOffsetCommit v5+, no
    # AddPartitionsToTxn or AddOffsetsToTxn from the application (the leaders added the partitions).
    used = versions_used(broker)
    # Produce v12 and later carry transactions v2: Kafka Streams 4.4's producer sends v13 (topic ids);
    # the test's own input producer (librdkafka) v10.
    assert used["EndTxn"] == {5} and used["TxnOffsetCommit"] <= {5, 6} and 13 in used["Produce"], used
    assert "AddPartitionsToTxn" not in used and "AddOffsetsToTxn" not in used, used
