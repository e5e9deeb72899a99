"""Client metrics subscriptions (KIP-714) in a 3-broker cluster: stored in the metadata log, so every
broker knows them, and they survive the controller's death.

A subscription created through a broker that is not the controller (IncrementalAlterConfigs
forwarded to it, as every config write) is described and listed by every broker, and every broker
hands a client the same subscription (the subscription id depends only on the subscriptions, the
interval and the client instance id, as in Kafka); after the controller is killed (SIGKILL) the
new controller alters it, and every broker, the restarted one too, serves the change.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from odradek.testing.cluster import ClusterProcesses
from tests.support.cluster import cluster_or_skip

INSTANCE = uuid.UUID("0c6a8e9f-3b47-4d2a-9a0e-5c1f2e3d4b5a")


def alter(c: ClusterProcesses, node: int, metrics: str) -> None:
    resp = c.request(node, "IncrementalAlterConfigs", 1, {"validate_only": False, "resources": [
        {"resource_type": 16, "resource_name": "producers",
         "configs": [{"name": "metrics", "config_operation": 0, "value": metrics},
                     {"name": "interval.ms", "config_operation": 0, "value": "1000"}]}]})
    assert resp["responses"][0]["error_code"] == 0, resp


def seen_by(c: ClusterProcesses, node: int) -> tuple:
    described = c.request(node, "DescribeConfigs", 4, {"resources": [
        {"resource_type": 16, "resource_name": "producers", "configuration_keys": ["metrics"]}],
        "include_synonyms": False, "include_documentation": False})["results"][0]["configs"][0]["value"]
    listed = [r["resource_name"] for r in c.request(node, "ListConfigResources", 1, {"resource_types": [16]})[
        "config_resources"]]
    got = c.request(node, "GetTelemetrySubscriptions", 0, {"client_instance_id": INSTANCE})
    return described, listed, got["requested_metrics"], got["subscription_id"]


def everyone_sees(c: ClusterProcesses, metrics: str) -> bool:
    def agreed() -> bool:
        views = {node: seen_by(c, node) for node in c.live_ids()}
        return all(v[:3] == (metrics, ["producers"], [metrics]) for v in views.values()) and len(
            {v[3] for v in views.values()}) == 1
    return c.wait_until(agreed, 30, 0.5)


def test_subscriptions_reach_every_broker_and_survive_the_controller(tmp_path: Path) -> None:
    c = cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": "2000",
                                      "odradek.metrics.port": "0", "odradek.metrics.host": "127.0.0.1"})
    with c:
        assert c.wait_members(30), c.logs()
        controller = c.controller_id()
        other = next(n for n in c.node_ids if n != controller)
        alter(c, other, "org.apache.kafka.producer.")
        assert everyone_sees(c, "org.apache.kafka.producer."), c.logs()

        c.kill(controller)
        survivor = next(n for n in c.live_ids() if n != controller)
        assert c.wait_until(lambda: c.controller_id(survivor) not in (-1, controller), 30), c.logs()
        alter(c, survivor, "org.apache.kafka.consumer.")
        assert everyone_sees(c, "org.apache.kafka.consumer."), c.logs()
        c.start(controller)
        assert everyone_sees(c, "org.apache.kafka.consumer."), c.logs()
