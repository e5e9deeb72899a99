"""SASL_SSL between brokers: a 3-broker cluster (etcd) whose inter-broker listener is SASL_SSL (PLAIN,
the listener's JAAS username/password, over TLS verifying the other broker's certificate). A 3-replica
topic written with acks=all over SASL_SSL keeps its full ISR (followers fetch over SASL_SSL), and a
client bootstrapped on one broker is led to the others' SASL_SSL endpoints. Skipped without etcd."""

from __future__ import annotations

from pathlib import Path

from odradek.broker.security.sasl.client import scram_upsertion
from tests.support.broker_process import free_port
from tests.support.certs import TestPki
from tests.support.cluster import cluster_or_skip, replicas_in_step
from tests.support.sasl import MECHANISMS, PLAIN_JAAS, kafka_python_config, login_scram, tls_wire_client


def test_brokers_replicate_over_sasl_ssl(tmp_path: Path) -> None:
    pki = TestPki(tmp_path / "pki")
    cluster = cluster_or_skip(tmp_path / "cluster", 3, overrides={
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": MECHANISMS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        **pki.server().broker_props(),
    })
    ports: dict[int, int] = {}
    for node_id, node in cluster.brokers.items():
        ports[node_id] = free_port()
        listeners = f"PLAINTEXT://127.0.0.1:{node.port},SASL_SSL://127.0.0.1:{ports[node_id]}"
        node.overrides.update({"listeners": listeners, "advertised.listeners": listeners})
    with cluster:  # starts etcd and the brokers
        assert cluster.wait_members()
        controller = cluster.controller_id()
        resp = cluster.request(controller, "AlterUserScramCredentials", 0, {
            "deletions": [], "upsertions": [scram_upsertion("SCRAM-SHA-512", "frank", "frank-secret")]})
        assert [r["error_code"] for r in resp["results"]] == [0], resp

        def logs_in(node_id: int) -> bool:
            with tls_wire_client("127.0.0.1", ports[node_id], pki.ca_pem) as c:
                return login_scram(c, "SCRAM-SHA-512", "frank", "frank-secret")["error_code"] == 0

        for node_id in cluster.node_ids:
            assert cluster.wait_until(lambda n=node_id: logs_in(n), timeout=15), f"broker {node_id}"

        topic = "sasl-ssl-replicated"
        created = cluster.request(controller, "CreateTopics", 7, {"topics": [
            {"name": topic, "num_partitions": 3, "replication_factor": 3, "assignments": [], "configs": []}],
            "timeout_ms": 10000, "validate_only": False})
        assert created["topics"][0]["error_code"] == 0, created
        from kafka import KafkaConsumer, KafkaProducer

        first = next(n for n in cluster.node_ids if n != controller)
        cfg = kafka_python_config(f"127.0.0.1:{ports[first]}", "SCRAM-SHA-512", "frank", "frank-secret",
                                  ca=pki.ca_pem)
        producer = KafkaProducer(**cfg, acks="all")
        for i in range(30):  # three partitions, led by all three brokers: each one's SASL_SSL endpoint
            producer.send(topic, f"m{i}".encode(), partition=i % 3).get(timeout=30)
        producer.close()
        consumer = KafkaConsumer(topic, **cfg, group_id="g-sasl-ssl", auto_offset_reset="earliest",
                                 consumer_timeout_ms=15000)
        got = sorted(m.value for _, m in zip(range(30), consumer, strict=False))
        consumer.close()
        assert got == sorted(f"m{i}".encode() for i in range(30))
        # Every follower holds its partition's records: it fetched them over SASL_SSL.
        assert cluster.wait_until(lambda: replicas_in_step(cluster, topic, [0, 1, 2], 3), 15), cluster.logs()
        meta = cluster.metadata(controller)
        parts = next(t for t in meta["topics"] if t["name"] == topic)["partitions"]
        for part in parts:
            assert sorted(part["isr_nodes"]) == cluster.node_ids, part
        logs = cluster.logs()
        assert "SASL login" not in logs and "Failed authentication" not in logs, logs
        assert "Traceback" not in logs

        # A restarted follower's fetchers start with the broker, before its listeners: they too must
        # speak TLS from their first connection (a plaintext SaslHandshake to the leaders' SASL_SSL
        # port would be refused there as "SSL handshake failed" and logged as a failed SASL login).
        follower = next(n for n in cluster.node_ids if n not in (controller, first))
        assert cluster.stop(follower) == 0
        cluster.start(follower)
        assert cluster.wait_until(lambda: all(
            sorted(p["isr_nodes"]) == cluster.node_ids
            for t in cluster.metadata(controller)["topics"] if t["name"] == topic for p in t["partitions"]),
            timeout=30)
        logs = cluster.logs()
        assert "SASL login" not in logs and "SSL handshake failed" not in logs, logs
