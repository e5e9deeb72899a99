"""Kafka 4.4's kafka-features (FeatureCommand, through bin/kafka-features' launcher) against Odradek: one
node, a real Kafka 4.4 beside it, and a cluster of 3 whose levels live through a controller failover
and a restart of every broker (issue 28, item 2).

- describe: the same line format as on a real Kafka 4.4, the features both list at the same finalized
  level (Odradek lists only what it serves: controller/features.py), one epoch for all.
- upgrade / downgrade / disable, with and without --dry-run: the tool's own lines ("can be", "was"),
  a refused level with Kafka's reason and exit 1, the level read back by describe and by every
  broker's ApiVersions; in a cluster through a broker that is not the controller (forwarded).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.support.broker_process import BrokerProcess
from tests.support.cluster import ClusterProcesses, cluster_or_skip
from tests.support.java_tools import run_tool
from tests.support.real_kafka import require_toolchain, shared_kafka
from tests.support.wire import WireClient

LINE = re.compile(r"Feature: (\S+) +SupportedMinVersion: (\S+) +SupportedMaxVersion: (\S+) +"
                  r"FinalizedVersionLevel: (\S+) +Epoch: (\d+)")


def features(bootstrap: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run_tool("kafka-features", ["--bootstrap-server", bootstrap, *args], check=check)


def describe(bootstrap: str) -> dict[str, tuple[str, str, str]]:
    """feature -> (supported min, supported max, finalized), checking every line's format and that
    one epoch heads them all."""
    lines = features(bootstrap, "describe").stdout.splitlines()
    matches = [LINE.fullmatch(line.rstrip()) for line in lines]
    assert lines and all(matches), lines
    assert len({m.group(5) for m in matches if m}) == 1, lines
    return {m.group(1): (m.group(2), m.group(3), m.group(4)) for m in matches if m}


def finalized_level(host: str, port: int, feature: str) -> int:
    with WireClient(host, port) as c:
        r = c.request(18, 4, {"client_software_name": "t", "client_software_version": "1"})
    return {f["name"]: f["max_version_level"] for f in r["finalized_features"]}.get(feature, 0)


def test_describe_as_on_kafka_then_upgrade_and_downgrade_one_node(tmp_path: Path) -> None:
    require_toolchain()
    kafka = describe(shared_kafka().bootstrap)
    b = BrokerProcess(tmp_path).start()
    try:
        odradek = describe(b.bootstrap)
        assert odradek == {"metadata.version": ("4.4-IV2", "4.4-IV2", "4.4-IV2"),
                           "group.version": ("0", "1", "1"), "transaction.version": ("0", "2", "2"),
                           "share.version": ("0", "1", "1"), "streams.version": ("0", "1", "1")}
        # Kafka 4.4 finalizes the same metadata.version, group.version, transaction.version and
        # streams.version; share.version it finalizes at 2 (share groups' dead-letter queues), which
        # Odradek does not support, so a new Odradek cluster starts at 1. Kafka lists more features,
        # none Odradek lists without it.
        assert set(odradek) < set(kafka), kafka
        assert kafka["streams.version"] == odradek["streams.version"]
        assert kafka["share.version"][2] == "2" and odradek["share.version"][2] == "1"
        assert [kafka[f][2] for f in ("metadata.version", "group.version")] == ["4.4-IV2", "1"]
        assert kafka["group.version"][:2] == odradek["group.version"][:2]
        assert kafka["transaction.version"] == odradek["transaction.version"]

        out = features(b.bootstrap, "downgrade", "--feature", "group.version=0", "--dry-run").stdout
        assert out == "group.version can be downgraded to 0.\n"
        assert describe(b.bootstrap)["group.version"][2] == "1"
        assert features(b.bootstrap, "downgrade", "--feature", "group.version=0").stdout == \
            "group.version was downgraded to 0.\n"
        assert describe(b.bootstrap)["group.version"][2] == "0"

        refused = features(b.bootstrap, "upgrade", "--feature", "transaction.version=3", check=False)
        assert refused.returncode == 1
        assert refused.stdout == (
            "Could not upgrade transaction.version to 3. The update failed for all features since the following "
            "feature had an error: Invalid update version 3 for feature transaction.version. Local controller 1 "
            "only supports versions 0-2\n")
        assert "1 out of 1 operation(s) failed." in refused.stderr
        assert features(b.bootstrap, "disable", "--feature", "transaction.version").stdout == \
            "transaction.version was disabled.\n"

        b.stop()
        b.start()  # the levels are in the metadata log
        assert finalized_level(b.host, b.port, "group.version") == 0
        assert finalized_level(b.host, b.port, "transaction.version") == 0
        out = features(b.bootstrap, "upgrade", "--feature", "group.version=1", "--feature",
                       "transaction.version=2").stdout
        assert out == "group.version was upgraded to 1.\ntransaction.version was upgraded to 2.\n"
        assert describe(b.bootstrap) == odradek
    finally:
        b.stop()


def every_broker_at(c: ClusterProcesses, feature: str, level: int) -> bool:
    def at_level() -> bool:
        return all(finalized_level(c.broker(n).host, c.broker(n).port, feature) == level for n in c.live_ids())
    return c.wait_until(at_level, 15)


def test_levels_survive_a_controller_failover_and_a_restart_in_a_cluster(tmp_path: Path) -> None:
    require_toolchain()
    with cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": "3000"}) as c:
        assert c.wait_members(30), c.logs()
        controller = c.controller_id()
        other = next(n for n in c.node_ids if n != controller)
        via = f"{c.broker(other).host}:{c.broker(other).port}"  # forwarded to the controller
        assert describe(via)["group.version"][2] == "1"
        assert features(via, "downgrade", "--feature", "group.version=0").stdout == "group.version was downgraded to 0.\n"
        assert every_broker_at(c, "group.version", 0), c.logs()

        c.kill(controller)
        assert c.wait_until(lambda: c.controller_id(other) not in (-1, controller), 30), c.logs()
        assert every_broker_at(c, "group.version", 0), c.logs()
        new = c.controller_id(other)
        survivor = next(n for n in c.live_ids() if n != new)
        out = features(f"{c.broker(survivor).host}:{c.broker(survivor).port}", "downgrade", "--feature",
                       "transaction.version=0").stdout
        assert out == "transaction.version was downgraded to 0.\n"
        c.start(controller)
        assert every_broker_at(c, "transaction.version", 0) and every_broker_at(c, "group.version", 0), c.logs()

        for n in c.node_ids:
            c.stop(n)
        for n in c.node_ids:
            c.start(n)
        assert c.wait_members(30), c.logs()
        assert every_broker_at(c, "group.version", 0) and every_broker_at(c, "transaction.version", 0), c.logs()
        assert features(c.bootstrap, "upgrade", "--feature", "group.version=1", "--feature",
                        "transaction.version=1").returncode == 0
        assert every_broker_at(c, "group.version", 1) and every_broker_at(c, "transaction.version", 1), c.logs()
