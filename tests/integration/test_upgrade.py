"""Upgrades (issue 27, item 8): what the previous release wrote opens with this one, and a cluster
upgraded node by node under load loses nothing.

The previous release is ``tests/data/releases/odradek-0.1.0.tar.gz`` (tests/support/old_release.py),
run as real broker processes. It writes, through real clients, everything a user's data dir and
metadata store hold: topics with configs (one compacted), idempotent records, a committed and an
aborted transaction, a transaction left open when the broker stops, a consumer group's committed
offsets with metadata, and a client quota. Then this checkout opens the same data dirs (and, for a
cluster, the same etcd) and every one of them must read back as the old release acknowledged it:

1. one node, stopped cleanly (SIGTERM) and after a crash (SIGKILL: the new release recovers the old
   release's segments);
2. a 3-node cluster on etcd, stopped and started again with this release;
3. a rolling upgrade of a 3-node cluster under the fault suite's load (librdkafka and Java
   idempotent acks=all producers, a committing consumer group): each node stopped (SIGTERM) and
   started from this release in turn, judged by the fault suite's checker (no acked write lost, no
   duplicate, dense offsets, commits never back, only retriable errors).

The expected values are what the old release acknowledged to the clients, never what a broker
answers afterwards.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from odradek.broker.launcher.cluster_launcher import PACKAGE_ROOT, kafka_request
from odradek.controller.image import apply
from odradek.controller.metadata_format import LATEST
from odradek.testing.cluster import ClusterProcesses
from tests.support.broker_process import BrokerProcess
from tests.support.cluster import cluster_or_skip
from tests.support.old_release import release_tree
from tests.support.wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402

ORDERS = "orders"
COMPACTED = "compacted"
GROUP = "upgrade-readers"
QUOTA_CLIENT = "upgrade-client"
ORDERS_CONFIGS = {"retention.ms": "86400000", "max.message.bytes": "2000000"}
COMMITTED_OFFSETS = {0: 50, 1: 60, 2: 70}


@dataclass
class Written:
    """What the old release acknowledged: the expected state after the upgrade."""

    orders: dict[int, list[bytes]] = field(default_factory=lambda: {0: [], 1: [], 2: []})
    latest_compacted: dict[bytes, bytes] = field(default_factory=dict)


def _produce(bootstrap: str, written: Written) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5})
    acked: list[tuple[str, int, bytes, bytes]] = []

    def on_delivery(err: object, msg: object) -> None:
        assert err is None, err
        acked.append((msg.topic(), msg.partition(), msg.key(), msg.value()))  # type: ignore[attr-defined]

    for i in range(300):
        producer.produce(ORDERS, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 3,
                         on_delivery=on_delivery)
    for i in range(100):
        producer.produce(COMPACTED, key=f"k{i % 10}".encode(), value=f"c{i}".encode(), on_delivery=on_delivery)
    assert producer.flush(60) == 0
    for topic, partition, key, value in acked:
        if topic == ORDERS:
            written.orders[partition].append(value)
        else:
            written.latest_compacted[key] = value
    assert sum(len(v) for v in written.orders.values()) == 300


OPEN_TXN_CLIENT = """
import sys
from confluent_kafka import Producer
p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "upgrade-open", "transaction.timeout.ms": 5000})
p.init_transactions(30)
p.begin_transaction()
for i in range(5):
    p.produce("orders", value=f"t-open-{i}".encode(), partition=1)
assert p.flush(30) == 0
print("open", flush=True)
sys.stdin.read()
"""


def _transactions(bootstrap: str, written: Written) -> None:
    """A committed and an aborted transaction, then a third left open by a client that is SIGKILLed:
    the new release's coordinator must abort it when its timeout passes."""
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "upgrade-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(10):
        txn.produce(ORDERS, value=f"t-commit-{i}".encode(), partition=0)
    txn.commit_transaction(30)
    written.orders[0] += [f"t-commit-{i}".encode() for i in range(10)]
    txn.begin_transaction()
    for i in range(10):
        txn.produce(ORDERS, value=f"t-abort-{i}".encode(), partition=2)
    txn.abort_transaction(30)
    client = subprocess.Popen([sys.executable, "-c", OPEN_TXN_CLIENT, bootstrap], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert client.stdout is not None
        assert client.stdout.readline().strip() == "open"
    finally:
        client.kill()
        client.wait()


def _commit_group_offsets(bootstrap: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(ORDERS, p, o, metadata=f"m{p}") for p, o in COMMITTED_OFFSETS.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def _alter_quota(host: str, port: int) -> None:
    body = {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": QUOTA_CLIENT}],
                         "ops": [{"key": "producer_byte_rate", "value": 1048576.0, "remove": False}]}],
            "validate_only": False}
    (entry,) = kafka_request(host, port, "AlterClientQuotas", 1, body, timeout=15.0)["entries"]
    assert entry["error_code"] == 0, entry


def write_with_old_release(bootstrap: str, replication_factor: int) -> Written:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic(ORDERS, 3, replication_factor, config=ORDERS_CONFIGS),
        NewTopic(COMPACTED, 1, replication_factor, config={"cleanup.policy": "compact"}),
    ])
    for f in futures.values():
        f.result(30)
    written = Written()
    _produce(bootstrap, written)
    _transactions(bootstrap, written)
    _commit_group_offsets(bootstrap)
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    _alter_quota(host, int(port))
    return written


def read_committed(bootstrap: str, topic: str, expected: dict[int, int], timeout: float = 60.0,
                   ) -> dict[int, list[tuple[bytes, bytes]]]:
    """(key, value)s of ``topic`` read with read_committed until partition p gave ``expected[p]`` of them
    (an open transaction holds back the last stable offset until it ends: this waits it out)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in expected])
        out: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in expected}
        deadline = time.monotonic() + timeout
        while any(len(out[p]) < n for p, n in expected.items()) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            out[msg.partition()].append((msg.key(), msg.value()))
        # Anything more than expected shows up too.
        for msg in consumer.consume(1000, 1.0):
            if not msg.error():
                out[msg.partition()].append((msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def check_with_this_release(bootstrap: str, written: Written) -> None:
    """Everything the old release acknowledged, read back through this one; then it takes new writes."""
    orders = read_committed(bootstrap, ORDERS, {p: len(v) for p, v in written.orders.items()})
    assert {p: [v for _, v in kvs] for p, kvs in orders.items()} == written.orders
    compacted = read_committed(bootstrap, COMPACTED, {0: 100})
    latest: dict[bytes, bytes] = {}
    for key, value in compacted[0]:
        latest[key] = value
    assert latest == written.latest_compacted

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resources = [ConfigResource(ConfigResource.Type.TOPIC, ORDERS), ConfigResource(ConfigResource.Type.TOPIC, COMPACTED)]
    described = {r.name: {k: e.value for k, e in f.result(30).items()}
                 for r, f in admin.describe_configs(resources).items()}
    for key, value in ORDERS_CONFIGS.items():
        assert described[ORDERS][key] == value
    assert described[COMPACTED]["cleanup.policy"] == "compact"

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(ORDERS, p) for p in range(3)], timeout=30)
    finally:
        consumer.close()
    assert {tp.partition: (tp.offset, tp.metadata) for tp in committed} == {
        p: (o, f"m{p}") for p, o in COMMITTED_OFFSETS.items()}

    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    quotas = kafka_request(host, int(port), "DescribeClientQuotas", 1, {
        "components": [{"entity_type": "client-id", "match_type": 0, "match": QUOTA_CLIENT}], "strict": True})
    assert quotas["error_code"] == 0, quotas
    assert [(v["key"], v["value"]) for e in quotas["entries"] for v in e["values"]] == [("producer_byte_rate", 1048576.0)]

    # The old transactional id goes on under this release (its epoch is bumped, nothing is stuck).
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "upgrade-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(ORDERS, value=b"after-upgrade-txn", partition=0)
    txn.commit_transaction(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    producer.produce(ORDERS, value=b"after-upgrade", partition=1)
    assert producer.flush(30) == 0
    # The transaction left open by the killed client holds partition 1's last stable offset until the
    # new coordinator aborts it at its 5 s timeout: "after-upgrade" becomes readable only then.
    after = read_committed(bootstrap, ORDERS, {0: len(written.orders[0]) + 1, 1: len(written.orders[1]) + 1,
                                               2: len(written.orders[2])}, timeout=90.0)
    assert [v for _, v in after[0]] == written.orders[0] + [b"after-upgrade-txn"]
    assert [v for _, v in after[1]] == written.orders[1] + [b"after-upgrade"]


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
def test_a_single_node_data_dir_of_the_previous_release_opens_with_everything_it_acknowledged(
        tmp_path: Path, stop: str) -> None:
    old = BrokerProcess(tmp_path, package_root=release_tree())
    old.start(30)
    try:
        written = write_with_old_release(old.bootstrap, 1)
    finally:
        if stop == "SIGTERM":
            assert old.stop() == 0, old.log_text()
        else:
            old.kill()
    new = BrokerProcess(tmp_path, port=old.port)
    new.start(60)
    try:
        check_with_this_release(new.bootstrap, written)
        # The feature levels 0.1.0 behaved at, finalized when the format rose: KIP-848 stays on and
        # transaction.version 0 (TransactionLogValue v0) until kafka-features raises it.
        assert finalized_features(new.host, new.port) == UPGRADED_LEVELS
    finally:
        assert new.stop() == 0, new.log_text()


UPGRADED_LEVELS = {"metadata.version": 33, "group.version": 1}


def finalized_features(host: str, port: int) -> dict[str, int]:
    with WireClient(host, port) as c:
        r = c.request(18, 4, {"client_software_name": "t", "client_software_version": "1"})
    return {f["name"]: f["max_version_level"] for f in r["finalized_features"]}


def metadata_format_in_etcd(c: ClusterProcesses) -> int:
    """The ``odradek.metadata.format`` level the cluster's metadata log in etcd holds (its image's)."""
    import asyncio

    from odradek.broker.cluster.keys import CLUSTER_ID_KEY, ClusterKeys
    from odradek.controller.etcd_client import etcd_client
    from odradek.controller.etcd_log_store import EtcdMetadataKeys, read_from
    from odradek.controller.image import MetadataImage
    from odradek.controller.image_records import load_snapshot

    async def read() -> int:
        client = etcd_client(c.etcd.endpoint)
        try:
            cluster_id = bytes((await client.get(CLUSTER_ID_KEY)).value).decode()
            contents = await read_from(client, EtcdMetadataKeys.under(ClusterKeys(cluster_id).metadata_prefix), 0)
        finally:
            await client.close()
        image = MetadataImage()
        if contents.snapshot is not None:
            load_snapshot(image, contents.snapshot.records, contents.snapshot.end_offset)
        for batch in contents.batches:
            for record in batch.records:
                apply(image, record)
        return image.metadata_format

    return asyncio.run(read())


def _run_from(c: ClusterProcesses, root: Path | str) -> None:
    for node in c.brokers.values():
        node.package_root = str(root)


def test_a_cluster_of_the_previous_release_opens_with_everything_it_acknowledged(tmp_path: Path) -> None:
    c = cluster_or_skip(tmp_path, 3)
    _run_from(c, release_tree())
    with c:
        assert c.wait_members(30), c.logs()
        written = write_with_old_release(c.bootstrap, 3)
        c.cluster.stop()
        _run_from(c, PACKAGE_ROOT)
        c.cluster.start(90)
        assert c.wait_members(60), c.logs()
        check_with_this_release(c.bootstrap, written)
        # Every registered broker runs this release now: the controller raised the metadata format.
        assert c.wait_until(lambda: metadata_format_in_etcd(c) == LATEST, 30), c.logs()
        assert c.wait_until(lambda: all(finalized_features(c.broker(n).host, c.broker(n).port) == UPGRADED_LEVELS
                                        for n in c.node_ids), 10), c.logs()


def test_a_rolling_upgrade_under_load_loses_nothing(tmp_path: Path) -> None:
    """Each node of a previous-release cluster stopped (SIGTERM) and started from this release in turn
    while both idempotent acks=all producers and the consumer group run; the fault suite's checker
    judges what the clients saw (no acked write lost, no duplicate, dense offsets, commits never back,
    only retriable errors, no UNKNOWN_SERVER_ERROR)."""
    from tests.integration.test_cluster_faults import (
        FAST,
        TOPIC,
        create_topic,
        load_on,
        partitions_now,
        wait_full_isr,
    )
    from tests.support.fault_checker import failover

    c = cluster_or_skip(tmp_path, 3, FAST)
    _run_from(c, release_tree())
    with c:
        assert c.wait_members(30), c.logs()
        create_topic(c, TOPIC)
        wait_full_isr(c)
        with load_on(c) as load:
            load.wait_both_clients()
            for node_id in c.node_ids:
                # Until the last broker runs this release the store keeps 0.1.0's format: nothing the
                # old brokers could not read (a snapshot, a new record type) is written.
                assert metadata_format_in_etcd(c) == 1
                led = [p for p, s in partitions_now(c).items() if s["leader_id"] == node_id]
                at = load.history.mark(f"upgrade {node_id}")
                code = c.stop(node_id)
                assert code == 0, (code, c.log_text(node_id))
                c.brokers[node_id].package_root = PACKAGE_ROOT
                c.start(node_id)
                wait_full_isr(c)
                load.note(failover(load.history, f"rolling upgrade of broker {node_id}", at, node_id, led))
            assert c.wait_until(lambda: metadata_format_in_etcd(c) == LATEST, 30), c.logs()
            load.wait_acks(200, since=time.monotonic())
            checker = load.finish()
        load.check(checker)
