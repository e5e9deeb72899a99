"""SASL in a 3-broker cluster (etcd): brokers talk to each other over a SASL_PLAINTEXT inter-broker
listener (PLAIN, the listener's JAAS username/password), and a SCRAM credential created through any
broker (forwarded to the controller) lets a client log in on every broker. Skipped without etcd."""

from __future__ import annotations

from pathlib import Path

from odradek.broker.security.sasl.client import scram_upsertion
from tests.support.broker_process import free_port
from tests.support.cluster import cluster_or_skip, replicas_in_step
from tests.support.sasl import MECHANISMS, PLAIN_JAAS, login_scram
from tests.support.wire import WireClient


def test_scram_users_reach_every_broker_and_brokers_authenticate_to_each_other(tmp_path: Path) -> None:
    cluster = cluster_or_skip(tmp_path, 3, overrides={
        "sasl.enabled.mechanisms": MECHANISMS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
    })
    sasl_ports: dict[int, int] = {}
    for node_id, node in cluster.brokers.items():
        sasl_ports[node_id] = free_port()
        listeners = f"PLAINTEXT://127.0.0.1:{node.port},SASL_PLAINTEXT://127.0.0.1:{sasl_ports[node_id]}"
        node.overrides.update({"listeners": listeners, "advertised.listeners": listeners})
    with cluster:
        assert cluster.wait_members()
        controller = cluster.controller_id()
        first = next(n for n in cluster.node_ids if n != controller)
        resp = cluster.request(first, "AlterUserScramCredentials", 0, {
            "deletions": [], "upsertions": [scram_upsertion("SCRAM-SHA-512", "frank", "frank-secret")]})
        assert [r["error_code"] for r in resp["results"]] == [0], resp

        def logs_in(node_id: int) -> bool:
            with WireClient("127.0.0.1", sasl_ports[node_id]) as c:
                return login_scram(c, "SCRAM-SHA-512", "frank", "frank-secret")["error_code"] == 0

        for node_id in cluster.node_ids:
            assert cluster.wait_until(lambda n=node_id: logs_in(n), timeout=15), f"broker {node_id}"

        # A 3-replica topic written with acks=all through SASL: followers fetch over SASL inter-broker
        # connections, so the ISR stays complete.
        from kafka import KafkaProducer

        topic = "sasl-replicated"
        created = cluster.request(controller, "CreateTopics", 7, {"topics": [
            {"name": topic, "num_partitions": 1, "replication_factor": 3, "assignments": [], "configs": []}],
            "timeout_ms": 10000, "validate_only": False})
        assert created["topics"][0]["error_code"] == 0, created
        producer = KafkaProducer(bootstrap_servers=f"127.0.0.1:{sasl_ports[first]}", acks="all",
                                 security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                                 sasl_plain_username="frank", sasl_plain_password="frank-secret")
        for i in range(20):
            producer.send(topic, f"m{i}".encode()).get(timeout=30)
        producer.close()
        # Every follower holds the 20 records: it fetched them over a SASL inter-broker connection.
        assert cluster.wait_until(lambda: replicas_in_step(cluster, topic, [0], 3), 15), cluster.logs()
        meta = cluster.metadata(controller)
        [part] = next(t for t in meta["topics"] if t["name"] == topic)["partitions"]
        assert sorted(part["isr_nodes"]) == cluster.node_ids, part
        assert "SASL login" not in cluster.logs()
        assert "Failed authentication" not in cluster.logs()
