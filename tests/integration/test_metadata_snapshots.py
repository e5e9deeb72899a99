"""Metadata snapshots end to end: thousands of config changes through a real admin client, a store that stays small.

Cluster mode: one etcd and two ``python -m odradek.broker.main`` brokers (tests/support/cluster.py) with
``metadata.log.max.record.bytes.between.snapshots`` at 32 KiB. 3,000 IncrementalAlterConfigs from
confluent-kafka's AdminClient; the number of keys under ``/odradek/`` is sampled throughout and must
stay bounded (without snapshots every change is one more key, forever). Then a broker that is not
the controller restarts (its image comes from the snapshot plus the tail), and the controller's node
is killed so the other node's new controller starts from the snapshot too: both must describe the
same topics and configs as before, and take further changes.

Single node: the same with ``metadata.store=local``; the metadata dir holds one checkpoint and a
short log, and the restarted broker describes the same configs.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.launcher.cluster_launcher import kafka_request
from odradek.controller.etcd_client import etcd_client
from odradek.controller.metadata_log import LOG_FILE_NAME, METADATA_PARTITION_DIR
from odradek.controller.metadata_snapshot import parse_checkpoint_name
from tests.support.broker_process import BrokerProcess
from tests.support.cluster import ClusterProcesses, cluster_or_skip

THRESHOLD = 32 * 1024
CHANGES = 3000
SNAPSHOTS = {"metadata.log.max.record.bytes.between.snapshots": str(THRESHOLD)}
TTL_MS = 2000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcesses]:
    c = cluster_or_skip(tmp_path, 2, {"controller.lease.ttl.ms": str(TTL_MS), **SNAPSHOTS})
    with c:
        assert c.wait_members(30), c.logs()
        yield c


def _admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _set(admin: Any, topic: str, key: str, value: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)


def _create(admin: Any, topic: str, partitions: int, rf: int) -> None:
    from confluent_kafka.admin import NewTopic

    admin.create_topics([NewTopic(topic, partitions, rf, config={"cleanup.policy": "compact"})])[topic].result(30)


def _described(request: Any, topics: list[str]) -> dict[str, dict[str, str]]:
    """Each topic's dynamic (topic-level) configs as one broker describes them (raw DescribeConfigs v4)."""
    response = request("DescribeConfigs", 4, {
        "resources": [{"resource_type": 2, "resource_name": t, "configuration_keys": None} for t in topics],
        "include_synonyms": False, "include_documentation": False})
    out = {}
    for result in response["results"]:
        assert result["error_code"] == 0, result
        out[result["resource_name"]] = {c["name"]: c["value"] for c in result["configs"]
                                        if c["config_source"] == 1}  # DYNAMIC_TOPIC_CONFIG
    return out


def _topics(request: Any) -> dict[str, list[tuple[int, tuple[int, ...]]]]:
    md = request("Metadata", 12, {"topics": None, "allow_auto_topic_creation": False})
    return {t["name"]: sorted((p["partition_index"], tuple(sorted(p["replica_nodes"]))) for p in t["partitions"])
            for t in md["topics"]}


def _etcd_keys(endpoint: str) -> int:
    async def count() -> int:
        client = etcd_client(endpoint)
        try:
            return len(list(await client.get_prefix(b"/odradek/", keys_only=True)))
        finally:
            await client.close()

    return asyncio.run(count())


def test_cluster_etcd_stays_small_and_restarts_load_the_snapshot(cluster: ClusterProcesses) -> None:
    admin = _admin(cluster.bootstrap)
    _create(admin, "busy", 3, 2)
    _create(admin, "quiet", 1, 1)
    _set(admin, "quiet", "retention.ms", "12345")
    start_keys = _etcd_keys(cluster.etcd.endpoint)
    most_keys = start_keys
    for i in range(CHANGES):
        _set(admin, "busy", "retention.ms", str(100_000 + i))
        if i % 100 == 0:
            most_keys = max(most_keys, _etcd_keys(cluster.etcd.endpoint))
    end_keys = _etcd_keys(cluster.etcd.endpoint)
    # A batch of one ConfigRecord is ~130 bytes: one threshold holds ~250 of them. Without snapshots
    # every change stays a key: start_keys + 3,000.
    assert most_keys < start_keys + 2 * THRESHOLD // 100, (start_keys, most_keys)
    assert end_keys < start_keys + 2 * THRESHOLD // 100
    names = ["busy", "quiet"]
    expected = {"busy": {"cleanup.policy": "compact", "retention.ms": str(100_000 + CHANGES - 1)},
                "quiet": {"cleanup.policy": "compact", "retention.ms": "12345"}}

    def request_to(node_id: int) -> Any:
        return lambda api, version, body: cluster.request(node_id, api, version, body)

    for n in cluster.node_ids:
        assert cluster.wait_until(lambda n=n: _described(request_to(n), names) == expected, 15), cluster.logs()
    topics_before = _topics(request_to(1))

    # A broker that is not the controller restarts: its image comes from etcd's snapshot + tail.
    controller = cluster.controller_id()
    other = next(n for n in cluster.node_ids if n != controller)
    cluster.stop(other)
    cluster.start(other)
    assert cluster.wait_members(30), cluster.logs()
    assert _described(request_to(other), names) == expected
    assert _topics(request_to(other)) == topics_before

    # The controller's node dies: the other node's new controller replays the snapshot + tail.
    cluster.kill(controller)
    assert cluster.wait_until(lambda: cluster.controller_id(other) == other, 30), cluster.logs()
    survivor = _admin(f"{cluster.broker(other).host}:{cluster.broker(other).port}")
    _set(survivor, "quiet", "retention.ms", "54321")  # the new controller takes changes
    expected["quiet"]["retention.ms"] = "54321"
    assert cluster.wait_until(lambda: _described(request_to(other), names) == expected, 15), cluster.logs()
    assert {t: [p for p, _ in parts] for t, parts in _topics(request_to(other)).items()} == \
        {t: [p for p, _ in parts] for t, parts in topics_before.items()}
    cluster.start(controller)
    assert cluster.wait_members(30), cluster.logs()
    assert _described(request_to(controller), names) == expected


def test_single_node_metadata_dir_stays_small_and_restart_loads_the_snapshot(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, overrides=SNAPSHOTS).start()
    try:
        admin = _admin(broker.bootstrap)
        _create(admin, "busy", 1, 1)
        for i in range(CHANGES):
            _set(admin, "busy", "retention.ms", str(100_000 + i))
        part = tmp_path / "logs" / METADATA_PARTITION_DIR

        def request(api: str, version: int, body: Any) -> Any:
            return kafka_request(broker.host, broker.port, api, version, body, 5.0)

        expected = {"busy": {"cleanup.policy": "compact", "retention.ms": str(100_000 + CHANGES - 1)}}
        assert _described(request, ["busy"]) == expected
        deadline = time.monotonic() + 10
        while (part / LOG_FILE_NAME).stat().st_size >= 2 * THRESHOLD and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (part / LOG_FILE_NAME).stat().st_size < 2 * THRESHOLD  # not ~400 KB of 3,000 batches
        assert len([n for n in os.listdir(part) if parse_checkpoint_name(n)]) == 1
        broker.restart()
        assert _described(request, ["busy"]) == expected
        _set(_admin(broker.bootstrap), "busy", "retention.ms", "7")
        assert _described(request, ["busy"])["busy"]["retention.ms"] == "7"
    finally:
        broker.stop()
