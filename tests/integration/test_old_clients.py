"""The oldest release of each client library that Kafka 4.4 still serves, one smoke test each (issues
28 and 32): produce, consume back in a consumer group (a classic group), commit, and read the commit
back, against a real Apache Kafka 4.4 and against Odradek. Newer clients negotiate every API at the
top of the broker's range; these ask for versions years older, and the broker must meet them there.

- The Java client 2.1.0: KIP-896 removed from Kafka 4.0 every API version older than what Kafka 2.1
  knew, and KIP-1124 names 2.1 the oldest client release 4.x supports (java/old-java-client,
  run as tests/support/java/OldJavaClientSmoke.java with only its own jars on the classpath).
- kafka-python 2.0.2: the release KIP-896 counted for kafka-python (tests/support/old_clients.py
  installs it apart from the venv's 3.x; tests/support/old_kafka_python_smoke.py runs it).
- librdkafka 2.0.2 through Debian's kcat 1.7.1: a balanced consumer (-G) whose close commits what
  it consumed. Its compression is tested in test_old_librdkafka_compression.py.

Expected values are Kafka's behaviour: offsets 0..N-1 in send order, every record back unchanged,
the committed offset N (the next one to read). Each test fails naming its step on either target.
A tool that is missing is a skip saying how to install it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.old_clients import KAFKA_PYTHON_DIR, KAFKA_PYTHON_VERSION, kafka_python_installed
from tests.support.real_kafka import (
    CLASSIC_GROUP,
    FETCH,
    PRODUCE,
    TARGETS,
    create_topic,
    open_target,
    require_toolchain,
    unique,
)
from tools.kafka_dist import classpath, java_command

SUPPORT = Path(__file__).resolve().parents[1] / "support"
COUNT = 20


@pytest.fixture(scope="module", params=TARGETS)
def target(request, tmp_path_factory):
    if request.param == "kafka":
        require_toolchain()
    with open_target(request.param, tmp_path_factory.mktemp(request.param)) as t:
        yield t


def _expected_records() -> list[tuple[int, int, str, str]]:
    return [(0, i, f"key-{i}", f"value-{i}") for i in range(COUNT)]


def _parse(stdout: str) -> dict[str, list[list[str]]]:
    lines: dict[str, list[list[str]]] = {}
    for line in stdout.splitlines():
        kind, *fields = line.split()
        lines.setdefault(kind, []).append(fields)
    return lines


def _check_round_trip(out: dict[str, list[list[str]]]) -> None:
    assert [(int(p), int(o)) for p, o in out.get("produced", [])] == [(0, i) for i in range(COUNT)]
    assert [(int(p), int(o), k, v) for p, o, k, v in out.get("consumed", [])] == _expected_records()
    assert out.get("committed") == [["0", str(COUNT)]]


def test_java_client_2_1_produces_consumes_and_commits(target) -> None:
    target.require(*PRODUCE, *FETCH, *CLASSIC_GROUP)
    require_toolchain()
    topic, group = unique("old-java"), unique("old-java-group")
    create_topic(target, topic)
    jars = classpath("old-java-client")
    assert "kafka-clients-2.1.0.jar" in jars and "4.4.0" not in jars
    cmd = java_command(str(SUPPORT / "java" / "OldJavaClientSmoke.java"),
                       [target.bootstrap, topic, group, str(COUNT)], jars,
                       ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    _check_round_trip(_parse(proc.stdout))


def test_kafka_python_2_0_2_produces_consumes_and_commits(target) -> None:
    if not kafka_python_installed():
        pytest.skip(f"kafka-python {KAFKA_PYTHON_VERSION} is not installed under {KAFKA_PYTHON_DIR}: "
                    "`make old-clients` (a prerequisite of `make test`) installs it")
    target.require(*PRODUCE, *FETCH, *CLASSIC_GROUP)
    topic, group = unique("old-kafka-python"), unique("old-kafka-python-group")
    create_topic(target, topic)
    env = {**os.environ, "PYTHONPATH": str(KAFKA_PYTHON_DIR)}
    proc = subprocess.run([sys.executable, str(SUPPORT / "old_kafka_python_smoke.py"), target.bootstrap, topic, group,
                           str(COUNT)], capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-5000:]}"
    out = _parse(proc.stdout)
    # kafka-python infers a broker version from the ApiVersions answer and picks every request
    # version from that guess; Kafka 4.4's answer makes it guess 2.5.0 (seen against Kafka 4.4.0),
    # and Odradek's must make it guess the same, or it would speak other versions to Odradek.
    assert out["client"] == [[KAFKA_PYTHON_VERSION, "2.5.0"]]
    _check_round_trip(out)


@pytest.mark.skipif(shutil.which("kcat") is None,
                    reason="kcat is not installed (Debian package kcat: kcat 1.7.1 on librdkafka 2.0.2)")
def test_librdkafka_2_0_kcat_produces_consumes_and_commits(target) -> None:
    version = subprocess.run(["kcat", "-V"], capture_output=True, text=True, timeout=30).stdout
    assert "librdkafka 2.0." in version, version
    target.require(*PRODUCE, *FETCH, *CLASSIC_GROUP)
    topic, group = unique("old-kcat"), unique("old-kcat-group")
    create_topic(target, topic)
    lines = "".join(f"key-{i}:value-{i}\n" for i in range(COUNT))
    produce = subprocess.run(["kcat", "-b", target.bootstrap, "-P", "-t", topic, "-p", "0", "-K:",
                              "-X", "acks=all"], input=lines, capture_output=True, text=True, timeout=60)
    assert produce.returncode == 0, produce.stderr
    # A balanced consumer (JoinGroup/SyncGroup) that stops after COUNT records; closing it commits
    # the offsets it stored (enable.auto.commit, librdkafka's default).
    consume = subprocess.run(["kcat", "-b", target.bootstrap, "-G", group, topic, "-c", str(COUNT),
                              "-X", "auto.offset.reset=earliest", "-f", "%p %o %k %s\n"],
                             capture_output=True, text=True, timeout=90)
    assert consume.returncode == 0, consume.stderr
    assert [(int(p), int(o), k, v) for p, o, k, v in (line.split() for line in consume.stdout.splitlines())] \
        == _expected_records()
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer({"bootstrap.servers": target.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = reader.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        reader.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, COUNT)]
