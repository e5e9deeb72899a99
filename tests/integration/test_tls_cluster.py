"""A 3-broker cluster whose brokers talk to each other over TLS: ``inter.broker.listener.name=SSL``
with ``ssl.client.auth=required``, so every replica fetch, forwarded controller request and
transaction marker must come over TLS with the broker's own key store, and the other broker's host
name is verified (``ssl.endpoint.identification.algorithm=https``, the default). Clients use each
broker's PLAINTEXT listener; a replicated acks=all produce only completes when the followers'
fetches over TLS succeed.
"""

from __future__ import annotations

import time
import uuid

import pytest

from odradek.testing.cluster import ClusterProcesses, NoEtcdError, etcd_binary
from tests.support.broker_process import free_port
from tests.support.certs import TestPki
from tests.support.wire import WireClient


def test_replication_and_forwarding_over_tls(tmp_path) -> None:
    try:
        binary = etcd_binary()
    except NoEtcdError as exc:
        pytest.skip(f"needs etcd: {exc}")
    pki = TestPki(tmp_path / "pki")
    server = pki.server()
    common = {**server.broker_props(), "inter.broker.listener.name": "SSL", "ssl.client.auth": "required"}
    cluster = ClusterProcesses(tmp_path / "cluster", 3, common, etcd=binary, log_level="DEBUG")
    for node in cluster.brokers.values():
        listeners = f"PLAINTEXT://127.0.0.1:{node.port},SSL://127.0.0.1:{free_port()}"
        node.overrides |= {"listeners": listeners, "advertised.listeners": listeners}
    try:
        cluster.start_all()
        assert cluster.wait_members(30)
        topic = f"tls-repl-{uuid.uuid4().hex[:8]}"
        # CreateTopics on every broker but the controller is forwarded to it over TLS.
        non_controller = next(n for n in cluster.node_ids if n != cluster.controller_id())
        with WireClient("127.0.0.1", cluster.broker(non_controller).port) as c:
            resp = c.request(19, 7, {"topics": [{"name": topic, "num_partitions": 3, "replication_factor": 3}],
                                     "timeout_ms": 15000})
            assert resp["topics"][0]["error_code"] == 0, resp

        from confluent_kafka import Consumer, Producer

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(30):
            producer.produce(topic, f"r{i}".encode(), partition=i % 3)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{topic}",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got: set[bytes] = set()
        deadline = time.monotonic() + 40
        while len(got) < 30 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                got.add(m.value())
        consumer.close()
        assert got == {f"r{i}".encode() for i in range(30)}
        # The brokers authenticated each other by certificate on their SSL listeners.
        logs = "".join(cluster.broker(n).log_text(400_000) for n in cluster.node_ids)
        assert "on SSL (TLSv1.3): principal User:CN=localhost,OU=Brokers,O=Odradek Test,C=US" in logs
        # Only PLAINTEXT ports are probed by the launcher: no TLS handshake may have failed.
        assert "SSL handshake failed" not in logs
    finally:
        cluster.close()

