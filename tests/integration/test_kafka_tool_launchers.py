"""bin/kafka-topics, bin/kafka-console-producer, bin/kafka-console-consumer and bin/kafka-consumer-groups
(links to bin/kafka-tool, over tools.kafka_cli) against Odradek, run as a user runs them from the
README: a topic created, lines produced and consumed in a group, the group described. Four JVM launches.
Every tool name maps to a main class of Kafka 4.4.0's jars, and bin/kafka-transactions (which the README
names) lists a real transactional producer's id."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile

import pytest

from tests.support.broker_process import REPO, BrokerProcess
from tests.support.real_kafka import require_toolchain
from tools.kafka_cli import TOOLS
from tools.kafka_dist import jar_files


def launch(name: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, ODRADEK_PYTHON=sys.executable)
    proc = subprocess.run([str(REPO / "bin" / name), *args], input=input, capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, f"{name} {args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture
def broker(tmp_path):
    require_toolchain()
    b = BrokerProcess(tmp_path).start()
    yield b
    b.stop()


def test_readme_kafka_tools_against_odradek(broker) -> None:
    b = broker.bootstrap
    launch("kafka-topics", "--bootstrap-server", b, "--create", "--topic", "greetings", "--partitions", "2")
    launch("kafka-console-producer", "--bootstrap-server", b, "--topic", "greetings",
           input="hello\nworld\n")
    out = launch("kafka-console-consumer", "--bootstrap-server", b, "--topic", "greetings", "--group", "readers",
                 "--from-beginning", "--max-messages", "2", "--timeout-ms", "20000")
    assert sorted(out.stdout.split()) == ["hello", "world"], out.stdout
    assert " INFO " not in out.stderr  # quiet: WARN and above only
    groups = launch("kafka-consumer-groups", "--bootstrap-server", b, "--describe", "--group", "readers")
    rows = [line.split() for line in groups.stdout.splitlines() if line.startswith("readers")]
    assert sorted(r[2] for r in rows) == ["0", "1"] and sum(int(r[3]) for r in rows) == 2, groups.stdout


def test_every_tool_name_is_a_main_class_of_kafka_4_4_jars() -> None:
    require_toolchain()
    classes = {name[:-len(".class")].replace("/", ".") for jar in jar_files("kafka")
               for name in zipfile.ZipFile(jar).namelist() if name.endswith(".class")}
    assert {tool: main for tool, main in TOOLS.items() if main not in classes} == {}
    # The README's tools, each a link in bin/ as well as a name for bin/kafka-tool.
    for tool in ("kafka-topics", "kafka-console-producer", "kafka-console-consumer", "kafka-consumer-groups",
                 "kafka-configs", "kafka-acls", "kafka-features", "kafka-get-offsets", "kafka-transactions",
                 "kafka-streams-groups"):
        assert tool in TOOLS and os.readlink(REPO / "bin" / tool) == "kafka-tool", tool


def test_kafka_transactions_lists_an_open_transaction(broker) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "readme-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("txn-listed", b"pending")
    assert producer.flush(30) == 0
    try:
        out = launch("kafka-transactions", "--bootstrap-server", broker.bootstrap, "list")
        rows = [line.split() for line in out.stdout.splitlines()]
        assert rows[0][:2] == ["TransactionalId", "Coordinator"], out.stdout
        assert [r[0] for r in rows[1:]] == ["readme-txn"], out.stdout
        out = launch("kafka-tool", "kafka-transactions", "--bootstrap-server", broker.bootstrap,
                     "describe", "--transactional-id", "readme-txn")
        assert "Ongoing" in out.stdout and "txn-listed-0" in out.stdout, out.stdout
    finally:
        producer.abort_transaction(30)
