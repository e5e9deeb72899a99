"""AlterReplicaLogDirs and DescribeLogDirs over the wire, for the tests of moves between a broker's log dirs."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.support.wire import WireClient

ALTER_REPLICA_LOG_DIRS = 34
DESCRIBE_LOG_DIRS = 35
THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"

# (path, topic, partitions): one entry of an AlterReplicaLogDirs request, in request order.
Entry = tuple[str, str, list[int]]


def alter(c: WireClient, entries: Iterable[Entry], version: int = 2) -> list[tuple[str, int, int]]:
    """Send AlterReplicaLogDirs; (topic, partition, error code) of each answered partition, sorted."""
    body: dict[str, Any] = {"dirs": []}
    for path, topic, partitions in entries:
        # One request dir per entry, in the order given (a path or partition twice on purpose).
        body["dirs"].append({"path": path, "topics": [{"name": topic, "partitions": list(partitions)}]})
    resp = c.request(ALTER_REPLICA_LOG_DIRS, version, body)
    assert resp["throttle_time_ms"] == 0, resp
    return sorted((t["topic_name"], p["partition_index"], p["error_code"]) for t in resp["results"]
                  for p in t["partitions"])


def replicas(c: WireClient, topic: str) -> dict[int, list[tuple[str, bool, int, int]]]:
    """partition -> [(log dir, is future, size, offset lag)] from DescribeLogDirs v4, sorted."""
    resp = c.request(DESCRIBE_LOG_DIRS, 4, {"topics": None})
    assert resp["error_code"] == 0, resp
    out: dict[int, list[tuple[str, bool, int, int]]] = {}
    for r in resp["results"]:
        for t in r["topics"]:
            if t["name"] == topic:
                for p in t["partitions"]:
                    out.setdefault(p["partition_index"], []).append(
                        (r["log_dir"], p["is_future_key"], p["partition_size"], p["offset_lag"]))
    return {p: sorted(v) for p, v in out.items()}


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(interval)


def moved(c: WireClient, topic: str, partition: int, log_dir: Path | str) -> bool:
    """The partition's only replica on the broker is its current one, in ``log_dir`` (no future one)."""
    found = replicas(c, topic).get(partition, [])
    return len(found) == 1 and found[0][0] == str(log_dir) and not found[0][1]


def entries_on_disk(log_dir: Path, topic: str, partition: int) -> list[str]:
    """The names in ``log_dir`` that belong to the partition: its dir, a ``-future`` copy, a ``-delete`` one."""
    prefix = f"{topic}-{partition}"
    return sorted(n for n in (p.name for p in Path(log_dir).iterdir())
                  if n == prefix or (n.startswith(prefix + ".") and n.endswith(("-future", "-delete"))))
