"""Kafka Connect 4.4 in distributed mode against Odradek (issue 32, section 1): the tool users run beside
a broker to move data in and out of it, driven as a user drives it, through its REST API.

One worker (tests/support/connect.py: connect-runtime 4.4.0; the FileStream connectors 4.3.1 as an
isolated plugin, their 4.4.0 jar not being on Maven Central) against a fresh Odradek, and the same
steps against the shared real Kafka 4.4 (the A/B harness, tests/support/real_kafka.py), which passes
them too:

1. Connect creates its three internal topics itself, as its documentation says (the
   ``*.storage.topic`` settings): compacted (``cleanup.policy=compact``), the config topic with one
   partition, the offset topic with ``offset.storage.partitions`` (default 25), the status topic with
   ``status.storage.partitions`` (default 5).
2. A FileStreamSource connector reads a file's lines into a topic, a FileStreamSink connector writes
   the topic into another file, both created with PUT /connectors/{name}/config: the sink file ends up
   with the source's lines, in order.
3. The worker is stopped (SIGTERM: it commits the source's file position and the sink's consumer
   offsets) and started again; it finds both connectors in its config topic, and lines appended
   meanwhile reach the topic and the sink file once each: every line exactly once in both, in order
   (a source offset lost or read back wrong would send the file again; a sink offset lost would write
   the topic again).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.connect import ConnectWorker
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
from tests.support.topic_reader import read_topic
from tests.support.waiting import wait_until

# Connect's own defaults (DistributedConfig): the offset and status topics' partition counts; the
# config topic must have exactly one partition.
EXPECTED_PARTITIONS = {"config": 1, "offset": 25, "status": 5}
CONNECT_APIS = (*PRODUCE, *FETCH, *CLASSIC_GROUP, "CreateTopics", "DescribeConfigs", "InitProducerId")


def _topic_facts(bootstrap: str, topic: str) -> tuple[int, str]:
    """(partition count, cleanup.policy) of ``topic`` as the broker reports them."""
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = len(admin.list_topics(topic, timeout=10).topics[topic].partitions)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    return partitions, configs["cleanup.policy"].value


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture(params=TARGETS)
def target(request, tmp_path):
    require_toolchain()
    with open_target(request.param, tmp_path / request.param) as t:
        yield t


def test_connect_filestream_source_and_sink_resume_without_duplicates(target, tmp_path) -> None:
    target.require(*CONNECT_APIS)
    topic = unique("connect-lines")
    create_topic(target, topic)
    source, sink = tmp_path / "source.txt", tmp_path / "sink.txt"
    first = [f"line-{i}" for i in range(40)]
    source.write_text("".join(line + "\n" for line in first))
    worker = ConnectWorker(tmp_path / "worker", target.bootstrap, unique("connect-cluster"), unique("connect"))
    try:
        worker.start()
        for role, name in worker.topics.items():
            assert _topic_facts(target.bootstrap, name) == (EXPECTED_PARTITIONS[role], "compact"), role

        worker.put_connector("file-source", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1", "file": str(source), "topic": topic})
        worker.put_connector("file-sink", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max": "1", "file": str(sink), "topics": topic})
        worker.wait_running("file-source")
        worker.wait_running("file-sink")
        wait_until(lambda: len(_lines(sink)) >= len(first), timeout=45, what="the sink file's first lines")
        assert _lines(sink) == first

        # SIGTERM: Connect's shutdown hook stops the tasks and commits their offsets before exiting.
        worker.stop()
        assert worker.proc is not None and worker.proc.returncode in (0, 143), worker.log_text()
        second = [f"line-{i}" for i in range(40, 70)]
        with source.open("a") as f:
            f.write("".join(line + "\n" for line in second))

        worker.start()
        # Both connectors come back from the config topic, without being created again.
        worker.wait_running("file-source")
        worker.wait_running("file-sink")
        wait_until(lambda: len(_lines(sink)) >= len(first + second), timeout=45, what="the sink file's later lines")
        # Two more offset-commit intervals (0.5 s), so that a duplicate written late would be seen.
        time.sleep(1.0)
        assert _lines(sink) == first + second
        records = read_topic(target.bootstrap, topic, 1)[0]
        assert [(o, v.decode()) for o, v in records] == list(enumerate(first + second))
    except BaseException:
        print(worker.log_text())
        raise
    finally:
        worker.kill()
