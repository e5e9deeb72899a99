"""Group configs on a 3-broker cluster on etcd: stored once, seen by every broker, kept across a controller kill.

- IncrementalAlterConfigs sent to a broker that is not the controller is validated there and forwarded;
  every broker's DescribeConfigs then shows the group's override;
- a refused value sent to a non-controller answers Kafka's INVALID_CONFIG message and stores nothing;
- after the controller is SIGKILLed, the survivors still show the override, a new controller takes a
  further change, and the killed broker, restarted, shows both.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.timeout(240)

GROUP = "cluster-group"
LOCK, LIMIT = "share.record.lock.duration.ms", "share.delivery.count.limit"


def alter(cluster: Any, node: int, key: str, value: str) -> tuple[int, str | None]:
    r = cluster.request(node, "IncrementalAlterConfigs", 1, {"validate_only": False, "resources": [
        {"resource_type": 32, "resource_name": GROUP,
         "configs": [{"name": key, "config_operation": 0, "value": value}]}]}, timeout=15)
    return r["responses"][0]["error_code"], r["responses"][0]["error_message"]


def overrides(cluster: Any, node: int) -> dict[str, str]:
    r = cluster.request(node, "DescribeConfigs", 4, {"resources": [
        {"resource_type": 32, "resource_name": GROUP, "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})
    return {e["name"]: e["value"] for e in r["results"][0]["configs"] if e["config_source"] == 8}


@pytest.mark.odradek_cluster(brokers=3)
def test_group_configs_are_cluster_wide_and_survive_a_controller_kill(odradek_cluster) -> None:
    cluster = odradek_cluster
    controller = cluster.controller_id()
    others = [n for n in cluster.node_ids if n != controller]
    assert alter(cluster, others[0], LOCK, "20000") == (0, None)
    assert cluster.wait_until(lambda: all(overrides(cluster, n) == {LOCK: "20000"} for n in cluster.node_ids))
    assert alter(cluster, others[1], LOCK, "14999") == (
        40, "share.record.lock.duration.ms must be in the range 15000 to 60000 inclusive.")
    assert all(overrides(cluster, n) == {LOCK: "20000"} for n in cluster.node_ids)

    cluster.kill(controller)
    assert cluster.wait_until(lambda: cluster.controller_id(others[0]) in others, timeout=60)
    assert all(overrides(cluster, n) == {LOCK: "20000"} for n in others)
    assert cluster.wait_until(lambda: alter(cluster, others[1], LIMIT, "3") == (0, None), timeout=60)
    both = {LOCK: "20000", LIMIT: "3"}
    assert cluster.wait_until(lambda: all(overrides(cluster, n) == both for n in others))
    cluster.start(controller)
    assert cluster.wait_until(lambda: overrides(cluster, controller) == both, timeout=60)
