"""Metadata and DescribeCluster answer with the endpoint of the listener the request came in on.

Kafka registers every advertised listener of a broker and answers a client with the endpoints of the
listener it connected to; a listener a broker lacks leaves that broker out. This is what lets a
container cluster advertise ``brokerN:9092`` to its peers and ``localhost:909N`` to the host
(docker/compose.yaml). Other brokers reach each other on ``inter.broker.listener.name``.
"""

from __future__ import annotations

from pathlib import Path

from odradek.broker.launcher.cluster_launcher import free_port, kafka_request
from tests.support.broker_process import BrokerProcess
from tests.support.cluster import cluster_or_skip


def two_listeners(internal: int, external: int, external_host: str) -> dict[str, str]:
    return {
        "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
        "advertised.listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://{external_host}:{external}",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
    }


def test_single_node_answers_each_listener_with_its_own_endpoint(tmp_path: Path) -> None:
    internal, external = free_port(), free_port()
    b = BrokerProcess(tmp_path, port=internal, overrides=two_listeners(internal, external, "localhost")).start()
    try:
        via_internal = kafka_request("127.0.0.1", internal, "Metadata", 12, {"topics": None})
        via_external = kafka_request("127.0.0.1", external, "Metadata", 12, {"topics": None})
        assert [(x["host"], x["port"]) for x in via_internal["brokers"]] == [("127.0.0.1", internal)]
        assert [(x["host"], x["port"]) for x in via_external["brokers"]] == [("localhost", external)]
        described = kafka_request("127.0.0.1", external, "DescribeCluster", 0, {})
        assert [(x["host"], x["port"]) for x in described["brokers"]] == [("localhost", external)]
    finally:
        b.stop()


def test_cluster_brokers_register_every_listener(tmp_path: Path) -> None:
    c = cluster_or_skip(tmp_path, 2, {"controller.lease.ttl.ms": "2000"})
    externals = {n: free_port() for n in c.node_ids}
    for n in c.node_ids:
        node = c.broker(n)
        node.overrides.update(two_listeners(node.port, externals[n], f"ext{n}.example"))
    with c:
        assert c.wait_members(30), c.logs()
        via_external = kafka_request("127.0.0.1", externals[1], "Metadata", 12, {"topics": None})
        assert sorted((x["node_id"], x["host"], x["port"]) for x in via_external["brokers"]) == \
            [(n, f"ext{n}.example", externals[n]) for n in c.node_ids]
        via_internal = c.metadata(2)
        assert sorted((x["node_id"], x["host"], x["port"]) for x in via_internal["brokers"]) == \
            [(n, "127.0.0.1", c.broker(n).port) for n in c.node_ids]
