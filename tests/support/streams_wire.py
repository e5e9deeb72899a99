"""A streams-group member over raw sockets (StreamsGroupHeartbeat, KIP-1071), for tests that drive
the protocol step by step against Odradek and Kafka 4.4 alike.

``StreamsMember`` behaves as a well-behaved Kafka Streams thread: it joins with the topology, owns
exactly the tasks it was last given (reporting them as owned), and leaves with epoch -1.
``word_count_topology`` is the topology Kafka Streams sends for a word count through a repartition
topic and a state store (subtopology 0 reads the input and writes the repartition topic,
subtopology 1 reads it and keeps the store's changelog).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from tests.support.real_kafka import Target, create_topic
from tests.support.wire import WireClient

HEARTBEAT, DESCRIBE, TOPOLOGY_DESCRIPTION_UPDATE = 88, 89, 93
GROUP_ID_NOT_FOUND = 69

Tasks = dict[str, set[int]]


def word_count_topology(app: str, source: str, epoch: int = 0) -> dict[str, Any]:
    repartition = f"{app}-counts-repartition"
    changelog = f"{app}-counts-changelog"
    return {"epoch": epoch, "subtopologies": [
        {"subtopology_id": "0", "source_topics": [source], "source_topic_regex": [], "state_changelog_topics": [],
         "repartition_sink_topics": [repartition], "repartition_source_topics": [], "copartition_groups": []},
        {"subtopology_id": "1", "source_topics": [], "source_topic_regex": [],
         "state_changelog_topics": [{"name": changelog, "partitions": 0, "replication_factor": 0,
                                     "topic_configs": [{"key": "cleanup.policy", "value": "compact"}]}],
         "repartition_sink_topics": [],
         "repartition_source_topics": [{"name": repartition, "partitions": 0, "replication_factor": 0,
                                        "topic_configs": [{"key": "cleanup.policy", "value": "delete"},
                                                          {"key": "retention.ms", "value": "-1"}]}],
         "copartition_groups": []},
    ]}


def word_count_description(source: str, app: str) -> dict[str, Any]:
    """The topology description (KIP-1331) Kafka Streams sends for word_count_topology: node types
    1 source, 2 processor, 3 sink."""
    def node(name: str, kind: int, successors: list[str], sources: list[str] | None = None,
             sink: str | None = None, stores: list[str] | None = None) -> dict[str, Any]:
        return {"name": name, "node_type": kind, "source_topics": sources or [], "sink_topic": sink,
                "stores": stores or [], "successors": successors}

    return {"subtopologies": [
        {"subtopology_id": "0", "nodes": [
            node("KSTREAM-SOURCE-0000000000", 1, ["KSTREAM-FLATMAPVALUES-0000000001"], sources=[source]),
            node("KSTREAM-FLATMAPVALUES-0000000001", 2, ["counts-repartition-sink"]),
            node("counts-repartition-sink", 3, [], sink=f"{app}-counts-repartition")]},
        {"subtopology_id": "1", "nodes": [
            node("counts-repartition-source", 1, ["KSTREAM-AGGREGATE-0000000003"],
                 sources=[f"{app}-counts-repartition"]),
            node("KSTREAM-AGGREGATE-0000000003", 2, [], stores=["counts"])]},
    ], "global_stores": []}


def topology_description_update(c: WireClient, group: str, member_id: str, epoch: int,
                                description: dict[str, Any] | None) -> dict[str, Any]:
    return c.request(TOPOLOGY_DESCRIPTION_UPDATE, 0, {"group_id": group, "member_id": member_id,
                                                      "topology_epoch": epoch, "topology_description": description})


def heartbeat_body(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "group_id": "g", "member_id": "", "member_epoch": 0, "endpoint_information_epoch": 0, "instance_id": None,
        "rack_id": None, "rebalance_timeout_ms": -1, "topology": None, "active_tasks": None, "standby_tasks": None,
        "warmup_tasks": None, "process_id": None, "user_endpoint": None, "client_tags": None, "task_offsets": None,
        "task_end_offsets": None, "shutdown_application": False}
    body.update(fields)
    return body


def heartbeat(c: WireClient, version: int = 1, **fields: Any) -> dict[str, Any]:
    return c.request(HEARTBEAT, version, heartbeat_body(**fields))


def describe(c: WireClient, group: str, version: int = 1, include_topology_description: bool = False
             ) -> dict[str, Any]:
    body: dict[str, Any] = {"group_ids": [group], "include_authorized_operations": False,
                            "include_topology_description": include_topology_description}
    return c.request(DESCRIBE, version, body)["groups"][0]


def word_count_app(target: Target, app: str, partitions: int) -> tuple[str, dict[str, Any]]:
    """A word count's input topic, ``<app>-words`` with ``partitions``, created on ``target``; returns
    its name and the topology the app's members send."""
    source = f"{app}-words"
    create_topic(target, source, partitions)
    return source, word_count_topology(app, source)


def ready_coordinator(c: WireClient, group: str) -> None:
    """FindCoordinator until it answers (the first one creates __consumer_offsets), then describe until
    the coordinator has loaded (GROUP_ID_NOT_FOUND for the group not yet made, not a retriable error)."""
    deadline = time.monotonic() + 30
    while c.request(10, 1, {"key": group, "key_type": 0})["error_code"] != 0 or \
            describe(c, group)["error_code"] != GROUP_ID_NOT_FOUND:
        assert time.monotonic() < deadline, "the group coordinator never became available"
        time.sleep(0.2)


def rows(tasks: Tasks) -> list[dict[str, Any]]:
    return [{"subtopology_id": s, "partitions": sorted(ps)} for s, ps in sorted(tasks.items()) if ps]


def tasks_of(rows_: list[dict[str, Any]] | None) -> Tasks:
    return {r["subtopology_id"]: set(r["partitions"]) for r in rows_ or () if r["partitions"]}


class StreamsMember:
    def __init__(self, c: WireClient, group: str, topology: dict[str, Any], process_id: str | None = None,
                 version: int = 1, instance_id: str | None = None) -> None:
        self.c, self.group, self.topology, self.version = c, group, topology, version
        self.instance_id = instance_id  # a static member's, sent in every heartbeat
        self.member_id = str(uuid.uuid4())
        self.process_id = process_id or str(uuid.uuid4())
        self.epoch = 0
        self.active: Tasks = {}
        self.standby: Tasks = {}
        self.warmup: Tasks = {}
        self.last: dict[str, Any] = {}

    def join(self, **extra: Any) -> dict[str, Any]:
        r = heartbeat(self.c, self.version, group_id=self.group, member_id=self.member_id, member_epoch=0,
                      rebalance_timeout_ms=30000, topology=self.topology, process_id=self.process_id,
                      instance_id=self.instance_id, active_tasks=[], standby_tasks=[], warmup_tasks=[], **extra)
        self._take(r)
        return r

    def beat(self) -> dict[str, Any]:
        r = heartbeat(self.c, self.version, group_id=self.group, member_id=self.member_id, member_epoch=self.epoch,
                      instance_id=self.instance_id, active_tasks=rows(self.active), standby_tasks=rows(self.standby),
                      warmup_tasks=rows(self.warmup))
        self._take(r)
        return r

    def leave(self, epoch: int = -1) -> dict[str, Any]:
        """-1 leaves; -2 is a static member's temporary leave (its tasks wait for its instance id)."""
        return heartbeat(self.c, self.version, group_id=self.group, member_id=self.member_id, member_epoch=epoch,
                         instance_id=self.instance_id)

    def statuses(self) -> set[int]:
        return {s["status_code"] for s in self.last.get("status") or ()}

    def _take(self, r: dict[str, Any]) -> None:
        self.last = r
        assert r["error_code"] == 0, r
        self.epoch = r["member_epoch"]
        if r["active_tasks"] is not None:
            self.active = tasks_of(r["active_tasks"])
            self.standby = tasks_of(r["standby_tasks"])
            self.warmup = tasks_of(r["warmup_tasks"])


def converge(members: list[StreamsMember], total_active: int, timeout_s: float = 30.0) -> None:
    """Heartbeat round-robin until every active task has exactly one owner, the members are at one
    epoch, no status is answered and the group describes as Stable (every member reconciled, standby
    tasks included); after every heartbeat, no active task may have two owners (revocation before
    assignment)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for m in members:
            m.beat()
            owned = [(s, p) for x in members for s, ps in x.active.items() for p in ps]
            assert len(owned) == len(set(owned)), f"an active task with two owners: {sorted(owned)}"
        owned = [(s, p) for x in members for s, ps in x.active.items() for p in ps]
        if len(owned) == total_active and len({m.epoch for m in members}) == 1 and \
                all(not m.statuses() for m in members) and \
                describe(members[0].c, members[0].group)["group_state"] == "Stable":
            return
        time.sleep(0.2)
    raise AssertionError(f"no convergence: {[(m.epoch, m.active, m.last.get('status')) for m in members]}")
