"""bin/kafka-topics, bin/kafka-console-producer, bin/kafka-console-consumer and bin/kafka-consumer-groups
(links to bin/kafka-tool, over tools.kafka_cli) against Odradek, run as a user runs them from the
README: a topic created, lines produced and consumed in a group, the group described. Four JVM launches."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.broker_process import REPO, BrokerProcess
from tests.support.real_kafka import require_toolchain


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
