"""Kafka 4.4's newest versions of ApiVersions, Metadata, ListOffsets, OffsetCommit/OffsetFetch,
DescribeGroups, ConsumerGroupDescribe, DescribeCluster, ListTransactions,
AlterPartitionReassignments, Produce, Fetch, DescribeLogDirs and DeleteGroups, on the wire, against
a real Kafka 4.4 and Odradek (issue 28).

Each scenario sends the same raw requests to both and requires the same answers, normalised only
where two clusters must differ (cluster ids, topic ids, group and member ids are their own on each);
the expected values are checked against Kafka's message definitions and behaviour as well:

- ApiVersions v5 (KIP-1242): the cluster id and node id the client expects, both or neither (one
  without the other is INVALID_REQUEST, as a bad software name is). Another cluster's id, or this
  cluster's with another node id, answers REBOOTSTRAP_REQUIRED (129) with no api_keys.
- Metadata v13 (KIP-1102): the top-level error_code, 0 in every answer a broker gives.
- ListOffsets v11 (KIP-1023): -6, the earliest pending upload, is offset -1 without tiered
  storage; -6 before v11, and a negative timestamp Kafka does not define, UNSUPPORTED_VERSION.
- OffsetCommit v10 / OffsetFetch v10: topics by id; an unknown id is UNKNOWN_TOPIC_ID; offsets
  committed by id are read back by name and the other way round. OffsetCommit v0-1 and
  OffsetFetch v0, retired by Kafka 4.0, close the connection.
- DescribeGroups v6 (KIP-1043): GROUP_ID_NOT_FOUND with Kafka's message for an id with no classic
  group (a KIP-848 group's id included), "Dead" with no error before v6.
- ConsumerGroupDescribe v1 (KIP-1099): member_type 1 for a consumer-protocol member.
- DescribeCluster v2 (KIP-1073): include_fenced_brokers and is_fenced (a fenced broker is shown
  in tests/integration/test_cluster_api_versions_4_4.py: a single Kafka node has none).
- ListTransactions v2 (KIP-1152): transactional_id_pattern, a regular expression the whole id must
  match; one that does not compile is INVALID_REGULAR_EXPRESSION.
- AlterPartitionReassignments v1: allow_replication_factor_change, echoed; the replicas are
  checked before the replication factor (the refusal itself needs two brokers: the cluster test).
- Produce v13 (KIP-516): topics by id; an unknown id is UNKNOWN_TOPIC_ID, nothing appended.
- Fetch v18 (KIP-1166): the fetcher's high watermark, which only KRaft's replication reads.
- DescribeLogDirs v5 (KIP-1066): is_cordoned, false without cordoned.log.dirs.
- DeleteGroups v3: error_message, null for classic and consumer groups.
The versions Kafka 4.0 retired are in test_kafka_4_4_retired_versions.py.
"""

from __future__ import annotations

import json
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.protocol.headers import encode_request_header
from tests.support.real_kafka import TARGETS, Target, create_topic, kafka_and_odradek, unique
from tests.support.wire import WireClient

API_VERSIONS, METADATA, LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH = 18, 3, 2, 8, 9
DESCRIBE_GROUPS, CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 15, 68, 69
DESCRIBE_CLUSTER, LIST_TRANSACTIONS, ALTER_REASSIGNMENTS = 60, 66, 45
FIND_COORDINATOR, INIT_PRODUCER_ID = 10, 22
NONE, UNSUPPORTED_VERSION, INVALID_REQUEST, GROUP_ID_NOT_FOUND = 0, 35, 42, 69
UNKNOWN_TOPIC_ID, INVALID_REGULAR_EXPRESSION, REBOOTSTRAP_REQUIRED = 100, 128, 129
INVALID_REPLICA_ASSIGNMENT = 39
ZERO_ID = uuid.UUID(int=0)


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    with kafka_and_odradek(tmp_path_factory) as targets:
        yield targets


def client(target: Target) -> WireClient:
    return WireClient(target.host, target.port)


def same_on_both(targets: dict[str, Target], scenario: Any) -> Any:
    """Run ``scenario(target)`` on each target; its (normalised) results must be equal. Returns Kafka's."""
    results = {name: scenario(targets[name]) for name in TARGETS}
    assert results["odradek"] == results["kafka"]
    return results["kafka"]


def cluster_identity(target: Target) -> tuple[str, int]:
    with client(target) as c:
        md = c.request(METADATA, 13, {"topics": [], "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False})
    assert md["error_code"] == NONE and len(md["brokers"]) == 1
    return md["cluster_id"], md["brokers"][0]["node_id"]


def new_topic(target: Target, prefix: str, partitions: int = 1) -> tuple[str, uuid.UUID]:
    """A fresh topic, once the broker knows its leader; its name and id."""
    name = unique(prefix)
    create_topic(target, name, partitions)
    deadline = time.monotonic() + 30
    with client(target) as c:
        while True:
            md = c.request(METADATA, 13, {"topics": [{"name": name, "topic_id": ZERO_ID}],
                                          "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
            t = md["topics"][0]
            if t["error_code"] == NONE and all(p["leader_id"] >= 0 for p in t["partitions"]) and t["partitions"]:
                return name, t["topic_id"]
            assert time.monotonic() < deadline, md
            time.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# ApiVersions v5, Metadata v13


def api_versions_v5(target: Target, cluster_id: str | None, node_id: int, software: str = "odradek-test") -> dict:
    with client(target) as c:
        return c.request(API_VERSIONS, 5, {"client_software_name": software, "client_software_version": "1.0",
                                           "cluster_id": cluster_id, "node_id": node_id})


def test_api_versions_v5_checks_the_cluster_and_node_the_client_expects(targets: dict[str, Target]) -> None:
    def scenario(target: Target) -> dict[str, Any]:
        cluster_id, node_id = cluster_identity(target)
        out: dict[str, Any] = {}
        for case, cid, nid in [("right ids", cluster_id, node_id),
                               ("neither", None, -1),
                               ("node id without cluster id", None, node_id),
                               ("cluster id without node id", cluster_id, -1),
                               ("another cluster", "AAAAAAAAAAAAAAAAAAAAAA", node_id),
                               ("another node", cluster_id, node_id + 7)]:
            resp = api_versions_v5(target, cid, nid)
            keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
            out[case] = (resp["error_code"], bool(keys), keys.get(API_VERSIONS), resp["throttle_time_ms"])
        # Kafka checks the software name first (KIP-511's INVALID_REQUEST), then the ids.
        out["bad name, another cluster"] = api_versions_v5(target, "AAAAAAAAAAAAAAAAAAAAAA", node_id, "-bad-")["error_code"]
        # The connection serves on after a refusal: the client chooses to rebootstrap.
        with client(target) as c:
            refused = c.request(API_VERSIONS, 5, {"client_software_name": "t", "client_software_version": "1",
                                                  "cluster_id": "AAAAAAAAAAAAAAAAAAAAAA", "node_id": node_id})
            served = c.request(API_VERSIONS, 4, {"client_software_name": "t", "client_software_version": "1"})
        out["same connection"] = (refused["error_code"], served["error_code"], bool(served["api_keys"]))
        return out

    result = same_on_both(targets, scenario)
    assert result["right ids"] == result["neither"] == (NONE, True, (0, 5), 0)
    for case in ("node id without cluster id", "cluster id without node id"):
        assert result[case] == (INVALID_REQUEST, False, None, 0), case
    for case in ("another cluster", "another node"):
        assert result[case] == (REBOOTSTRAP_REQUIRED, False, None, 0), case
    assert result["bad name, another cluster"] == INVALID_REQUEST
    assert result["same connection"] == (REBOOTSTRAP_REQUIRED, NONE, True)


def test_metadata_v13_answers_with_a_top_level_error_code(targets: dict[str, Target]) -> None:
    def scenario(target: Target) -> dict[str, Any]:
        name, _ = new_topic(target, "md13", 2)
        answers = {}
        with client(target) as c:
            for version in (12, 13):
                md = c.request(METADATA, version, {"topics": [{"name": name, "topic_id": ZERO_ID},
                                                              {"name": unique("absent"), "topic_id": ZERO_ID}],
                                                   "allow_auto_topic_creation": False,
                                                   "include_topic_authorized_operations": False})
                answers[version] = (md["error_code"], [(t["error_code"], len(t["partitions"])) for t in md["topics"]])
        return answers

    assert same_on_both(targets, scenario) == {12: (0, [(0, 2), (3, 0)]), 13: (0, [(0, 2), (3, 0)])}


# ---------------------------------------------------------------------------------------------
# ListOffsets v11


def test_list_offsets_v11_earliest_pending_upload(targets: dict[str, Target]) -> None:
    def scenario(target: Target) -> dict[str, Any]:
        name, _ = new_topic(target, "lo11")
        out = {}
        with client(target) as c:
            for version, timestamp in [(11, -6), (10, -6), (11, -5), (11, -2), (11, -1), (11, -7), (9, -7)]:
                resp = c.request(LIST_OFFSETS, version, {
                    "replica_id": -1, "isolation_level": 0, "timeout_ms": 5000,
                    "topics": [{"name": name, "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]})
                p = resp["topics"][0]["partitions"][0]
                out[(version, timestamp)] = (p["error_code"], p["offset"], p["timestamp"], p["leader_epoch"])
        return out

    result = same_on_both(targets, scenario)
    assert result[(11, -6)] == (NONE, -1, -1, -1)  # nothing tiered: no pending upload offset
    assert result[(10, -6)] == (UNSUPPORTED_VERSION, -1, -1, -1)
    assert result[(11, -5)] == (NONE, -1, -1, -1)
    assert result[(11, -2)][:3] == result[(11, -1)][:3] == (NONE, 0, -1)
    assert result[(11, -7)] == result[(9, -7)] == (UNSUPPORTED_VERSION, -1, -1, -1)


# ---------------------------------------------------------------------------------------------
# OffsetCommit v10, OffsetFetch v10


def commit(c: WireClient, version: int, group: str, topic: dict, offset: int) -> dict:
    """OffsetCommit of partition 0, as a simple consumer (no generation), once the group's
    coordinator serves (a fresh offsets partition is elected and loaded a moment after
    FindCoordinator first names it)."""
    deadline = time.monotonic() + 30
    while True:
        resp = _commit(c, version, group, topic, offset)
        codes = {p["error_code"] for t in resp["topics"] for p in t["partitions"]}
        if not codes & {14, 15, 16} or time.monotonic() > deadline:
            return resp
        time.sleep(0.2)


def _commit(c: WireClient, version: int, group: str, topic: dict, offset: int) -> dict:
    return c.request(OFFSET_COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [{**topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                             "committed_leader_epoch": -1, "committed_metadata": f"m{offset}"}]}]})


def fetch(c: WireClient, version: int, group: str, topics: list[dict] | None) -> dict:
    return c.request(OFFSET_FETCH, version, {"groups": [{"group_id": group, "member_id": None, "member_epoch": -1,
                                                         "topics": topics}], "require_stable": False})["groups"][0]


def retired_version_closes(target: Target, api: int, version: int, group: str) -> bool:
    """Send OffsetCommit v0/v1 or OffsetFetch v0 (no topics), framed by hand: our codec no longer
    knows these versions, as Kafka 4.4's definitions do not."""
    frame = bytearray()
    encode_request_header(frame, api, version, 1, "wire-test", False)
    frame += struct.pack(">h", len(group)) + group.encode()
    if api == OFFSET_COMMIT and version == 1:
        frame += struct.pack(">ih", -1, 0)  # generation -1, empty member id
    frame += struct.pack(">i", 0)  # no topics
    with client(target) as c:
        c.send_raw(struct.pack(">i", len(frame)) + bytes(frame))
        return c.is_closed_by_peer()


def test_offset_commit_and_fetch_v10_name_topics_by_id(targets: dict[str, Target]) -> None:
    def scenario(target: Target) -> dict[str, Any]:
        name, topic_id = new_topic(target, "oc10")
        group = unique("oc10-group")
        unknown_id = uuid.uuid4()

        def topics(answer: dict) -> list[tuple[Any, ...]]:
            ids = {topic_id: "<topic id>", unknown_id: "<unknown id>", ZERO_ID: "<zero>"}
            return [(ids.get(t["topic_id"], t["topic_id"]), t["name"].replace(name, "<name>"),
                     [tuple(p.values()) for p in t["partitions"]]) for t in answer["topics"]]

        out: dict[str, Any] = {}
        with client(target) as c:
            wait_coordinator(c, group, 0)
            out["commit by id"] = topics(commit(c, 10, group, {"topic_id": topic_id}, 5))
            out["commit unknown id"] = topics(commit(c, 10, group, {"topic_id": unknown_id}, 5))
            g = fetch(c, 10, group, [{"topic_id": topic_id, "partition_indexes": [0]},
                                     {"topic_id": unknown_id, "partition_indexes": [0, 1]}])
            out["fetch by id"] = (g["error_code"], topics(g))
            g = fetch(c, 9, group, [{"name": name, "partition_indexes": [0]}])
            out["fetch by name"] = (g["error_code"], topics(g))
            out["commit by name"] = topics(commit(c, 9, group, {"name": name}, 8))
            g = fetch(c, 10, group, None)
            out["fetch all by id"] = (g["error_code"], topics(g))
            g = fetch(c, 9, group, None)
            out["fetch all by name"] = (g["error_code"], topics(g))
        # Retired versions close the connection without an answer.
        for api, version in ((OFFSET_COMMIT, 1), (OFFSET_COMMIT, 0), (OFFSET_FETCH, 0)):
            out[f"api {api} v{version}"] = retired_version_closes(target, api, version, group)
        return out

    result = same_on_both(targets, scenario)
    assert result["commit by id"] == [("<topic id>", "", [(0, NONE)])]
    assert result["commit unknown id"] == [("<unknown id>", "", [(0, UNKNOWN_TOPIC_ID)])]
    assert result["fetch by name"] == (NONE, [("<zero>", "<name>", [(0, 5, -1, "m5", NONE)])])
    assert result["commit by name"] == [("<zero>", "<name>", [(0, NONE)])]
    assert result["fetch by id"] == (NONE, [("<topic id>", "", [(0, 5, -1, "m5", NONE)]),
                                            ("<unknown id>", "", [(0, -1, -1, "", UNKNOWN_TOPIC_ID),
                                                                  (1, -1, -1, "", UNKNOWN_TOPIC_ID)])])
    assert result["fetch all by id"] == (NONE, [("<topic id>", "", [(0, 8, -1, "m8", NONE)])])
    assert all(result[f"api {a} v{v}"] for a, v in ((OFFSET_COMMIT, 1), (OFFSET_COMMIT, 0), (OFFSET_FETCH, 0)))


# ---------------------------------------------------------------------------------------------
# DescribeGroups v6, ConsumerGroupDescribe v1


def describe_groups(c: WireClient, version: int, groups: list[str]) -> list[dict]:
    return c.request(DESCRIBE_GROUPS, version, {"groups": groups, "include_authorized_operations": False})["groups"]


def join_consumer_group(c: WireClient, group: str, topic: str) -> str:
    """One KIP-848 member (ConsumerGroupHeartbeat v1: the client picks its member id), until it is in."""
    member_id = str(uuid.uuid4())
    deadline = time.monotonic() + 30
    while True:
        resp = c.request(CONSUMER_GROUP_HEARTBEAT, 1, {
            "group_id": group, "member_id": member_id, "member_epoch": 0, "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 30000, "subscribed_topic_names": [topic], "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": []})
        if resp["error_code"] == NONE:
            return member_id
        assert resp["error_code"] in (14, 15, 16), resp  # the coordinator still loading / moving
        assert time.monotonic() < deadline, resp
        time.sleep(0.2)


def wait_coordinator(c: WireClient, key: str, key_type: int) -> None:
    deadline = time.monotonic() + 30
    while True:
        resp = c.request(FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]})
        if resp["coordinators"][0]["error_code"] == NONE:
            return
        assert time.monotonic() < deadline, resp
        time.sleep(0.2)


def test_describe_groups_v6_and_consumer_group_describe_v1(targets: dict[str, Target]) -> None:
    def scenario(target: Target) -> dict[str, Any]:
        name, _ = new_topic(target, "dg6")
        unknown, simple, kip848 = unique("no-group"), unique("simple-group"), unique("kip848-group")
        out: dict[str, Any] = {}
        with client(target) as c:
            for g in (unknown, simple, kip848):
                wait_coordinator(c, g, 0)
            assert commit(c, 9, simple, {"name": name}, 3)["topics"][0]["partitions"][0]["error_code"] == NONE
            member = join_consumer_group(c, kip848, name)

            def described(version: int) -> list[tuple[Any, ...]]:
                names = {unknown: "<unknown>", simple: "<simple>", kip848: "<kip848>"}
                by_id = {g["group_id"]: g for g in describe_groups(c, version, [unknown, simple, kip848])}
                return [(names[g["group_id"]], g["error_code"], g["error_message"], g["group_state"],
                         g["protocol_type"], len(g["members"])) for g in (by_id[k] for k in names)]

            out["v5"], out["v6"] = described(5), described(6)
            for version in (0, 1):
                resp = c.request(CONSUMER_GROUP_DESCRIBE, version, {"group_ids": [kip848, unknown],
                                                                    "include_authorized_operations": False})
                # Kafka answers the groups of each coordinator partition together: not in request order.
                by_id = {g["group_id"]: g for g in resp["groups"]}
                g, missing = by_id[kip848], by_id[unknown]
                out[f"cgd v{version}"] = (
                    g["error_code"], [(m["member_id"] == member, m["member_type"]) for m in g["members"]],
                    missing["error_code"], (missing["error_message"] or "").replace(unknown, "<unknown>"))
        out["v6"] = [(g, e, (m or "").replace(unknown, "<unknown>").replace(kip848, "<kip848>")
                      .replace(simple, "<simple>"), *rest) for g, e, m, *rest in out["v6"]]
        return out

    result = same_on_both(targets, scenario)
    assert result["v5"][0] == ("<unknown>", NONE, None, "Dead", "", 0)
    assert result["v6"][0] == ("<unknown>", GROUP_ID_NOT_FOUND, "Group <unknown> not found.", "Dead", "", 0)
    assert result["v6"][2] == ("<kip848>", GROUP_ID_NOT_FOUND, "Group <kip848> is not a classic group.", "Dead", "", 0)
    assert result["cgd v1"] == (NONE, [(True, 1)], GROUP_ID_NOT_FOUND, "Group <unknown> not found.")
    assert result["cgd v0"][1] == [(True, -1)]  # v0 carries no member type: the decoder's default


# ---------------------------------------------------------------------------------------------
# DescribeCluster v2


def test_describe_cluster_v2_include_fenced_brokers(targets: dict[str, Target]) -> None:
    def scenario(target: Target) -> dict[str, Any]:
        cluster_id, node_id = cluster_identity(target)
        out = {}
        with client(target) as c:
            for version, include_fenced in ((1, False), (2, False), (2, True)):
                resp = c.request(DESCRIBE_CLUSTER, version, {"include_cluster_authorized_operations": False,
                                                             "endpoint_type": 1,
                                                             "include_fenced_brokers": include_fenced})
                out[(version, include_fenced)] = (
                    resp["error_code"], resp["cluster_id"] == cluster_id, resp["controller_id"] == node_id,
                    [(b["broker_id"] == node_id, b["host"], b["port"] == target.port, b["is_fenced"])
                     for b in resp["brokers"]])
        return out

    result = same_on_both(targets, scenario)
    assert result[(2, True)] == result[(2, False)] == (NONE, True, True, [(True, "127.0.0.1", True, False)])


# ---------------------------------------------------------------------------------------------
# ListTransactions v2


def init_transactional_producer(c: WireClient, transactional_id: str) -> None:
    wait_coordinator(c, transactional_id, 1)
    deadline = time.monotonic() + 30
    while True:
        resp = c.request(INIT_PRODUCER_ID, 5, {"transactional_id": transactional_id, "transaction_timeout_ms": 60000,
                                               "producer_id": -1, "producer_epoch": -1})
        if resp["error_code"] == NONE:
            return
        assert resp["error_code"] in (14, 15, 16, 51), resp
        assert time.monotonic() < deadline, resp
        time.sleep(0.2)


def test_list_transactions_v2_transactional_id_pattern(targets: dict[str, Target]) -> None:
    def scenario(target: Target) -> dict[str, Any]:
        prefix = unique("lt2").replace("-", "")
        # The last id makes a backtracking engine take exponential time on the pattern (a+)+ below.
        ids = [f"{prefix}-orders-1", f"{prefix}-orders-2", f"{prefix}-payments", f"{prefix}-{'a' * 40}b"]
        out: dict[str, Any] = {}
        with client(target) as c:
            for tid in ids:
                init_transactional_producer(c, tid)

            def listed(version: int, pattern: str | None) -> tuple[int, list[str]]:
                resp = c.request(LIST_TRANSACTIONS, version, {"state_filters": [], "producer_id_filters": [],
                                                              "duration_filter": -1,
                                                              "transactional_id_pattern": pattern})
                return resp["error_code"], sorted(t["transactional_id"].replace(prefix, "<p>")
                                                  for t in resp["transaction_states"]
                                                  if t["transactional_id"].startswith(prefix))

            out["all"] = listed(2, None)
            out["empty pattern"] = listed(2, "")
            out["orders"] = listed(2, f"{prefix}-orders-.*")
            out["partial match"] = listed(2, "orders")  # the whole id must match
            out["alternation"] = listed(2, f"{prefix}-(payments|orders-2)")
            out["invalid"] = listed(2, "orders-(")
            # Kafka matches with RE2/J: linear time, and no backreferences (Python's re had both wrong:
            # the first stalled the broker's handler loop, the second was accepted).
            out["backtracking"] = listed(2, f"{prefix}-(a+)+")
            out["backreference"] = listed(2, f"{prefix}-(orders)-\\1")
            out["v1"] = listed(1, None)
        return out

    result = same_on_both(targets, scenario)
    everything = (NONE, [f"<p>-{'a' * 40}b", "<p>-orders-1", "<p>-orders-2", "<p>-payments"])
    assert result["all"] == result["empty pattern"] == result["v1"] == everything
    assert result["orders"] == (NONE, ["<p>-orders-1", "<p>-orders-2"])
    assert result["partial match"] == (NONE, [])
    assert result["alternation"] == (NONE, ["<p>-orders-2", "<p>-payments"])
    assert result["invalid"] == (INVALID_REGULAR_EXPRESSION, [])
    assert result["backtracking"] == (NONE, [])
    assert result["backreference"] == (INVALID_REGULAR_EXPRESSION, [])


# ---------------------------------------------------------------------------------------------
# AlterPartitionReassignments v1


def test_alter_partition_reassignments_v1_echoes_the_flag(targets: dict[str, Target]) -> None:
    def scenario(target: Target) -> dict[str, Any]:
        name, _ = new_topic(target, "apr1")
        _, node_id = cluster_identity(target)
        out = {}
        with client(target) as c:
            for version, allow, replicas in [(1, False, [node_id]), (1, True, [node_id]), (0, True, [node_id]),
                                             (1, False, [node_id, node_id + 50]), (1, False, [])]:
                resp = c.request(ALTER_REASSIGNMENTS, version, {
                    "timeout_ms": 10000, "allow_replication_factor_change": allow,
                    "topics": [{"name": name, "partitions": [{"partition_index": 0, "replicas": replicas}]}]})
                p = resp["responses"][0]["partitions"][0]
                out[(version, allow, len(replicas))] = (resp["error_code"], resp["allow_replication_factor_change"],
                                                        p["error_code"])
        return out

    result = same_on_both(targets, scenario)
    assert result[(1, False, 1)] == (NONE, False, NONE)
    assert result[(1, True, 1)] == result[(0, True, 1)] == (NONE, True, NONE)
    # An unregistered or missing replica is refused before the replication factor is compared.
    assert result[(1, False, 2)] == result[(1, False, 0)] == (NONE, False, INVALID_REPLICA_ASSIGNMENT)


# ---------------------------------------------------------------------------------------------
# Kafka 4.4's own tools, which send these versions


def test_kafka_4_4_tools_send_the_new_versions(targets: dict[str, Target], tmp_path_factory: pytest.TempPathFactory) -> None:
    """kafka-cluster list-endpoints --include-fenced-brokers (DescribeCluster v2), kafka-transactions
    list --transactional-id-pattern (ListTransactions v2), kafka-reassign-partitions --execute
    --disallow-replication-factor-change (AlterPartitionReassignments v1): each option is refused
    by the tool when the broker lacks the version, so the same output from both brokers shows they
    were sent and answered alike."""
    from tests.support.java_tools import run_tool

    def scenario(target: Target) -> dict[str, Any]:
        out: dict[str, Any] = {}
        bootstrap = target.bootstrap
        endpoints = run_tool("org.apache.kafka.tools.ClusterTool",
                             ["list-endpoints", "--bootstrap-server", bootstrap, "--include-fenced-brokers"]).stdout
        out["list-endpoints"] = [line.split() for line in endpoints.replace(str(target.port), "<port>").splitlines()]

        prefix = unique("cli").replace("-", "")
        with client(target) as c:
            for tid in (f"{prefix}-orders-1", f"{prefix}-payments"):
                init_transactional_producer(c, tid)
        listed = run_tool("org.apache.kafka.tools.TransactionsCommand",
                          ["--bootstrap-server", bootstrap, "list", "--transactional-id-pattern", f"{prefix}-orders-.*"])
        out["transactions"] = sorted(line.split()[0].replace(prefix, "<p>") for line in listed.stdout.splitlines()[1:])

        name, _ = new_topic(target, "cli-reassign")
        _, node_id = cluster_identity(target)
        plan = tmp_path_factory.mktemp("plan") / "plan.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": name, "partition": 0, "replicas": [node_id], "log_dirs": ["any"]}]}))
        executed = run_tool("kafka-reassign-partitions", ["--bootstrap-server", bootstrap, "--execute",
                                                          "--reassignment-json-file", str(plan),
                                                          "--disallow-replication-factor-change"])
        out["reassign"] = executed.stdout.replace(name, "<topic>").strip().splitlines()[-1]
        return out

    result = same_on_both(targets, scenario)
    assert result["list-endpoints"] == [["ID", "HOST", "PORT", "RACK", "STATE", "ENDPOINT_TYPE"],
                                        ["1", "127.0.0.1", "<port>", "null", "unfenced", "broker"]]
    assert result["transactions"] == ["<p>-orders-1"]
    assert result["reassign"].startswith("Successfully started partition reassignment"), result["reassign"]


# ---------------------------------------------------------------------------------------------
# Produce v13, Fetch v18


PRODUCE, FETCH, LIST_OFFSETS_LATEST = 0, 1, -1
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUIRED_ACKS = 3, 21


def produce_v13_body(topics: list[tuple[uuid.UUID, list[int]]], count: int = 2, acks: int = 1) -> dict:
    from tests.support.bad_batches import records, wrap

    return {"transactional_id": None, "acks": acks, "timeout_ms": 5000, "topic_data": [
        {"topic_id": topic_id, "partition_data": [{"index": p, "records": wrap(records(count), count)}
                                                  for p in partitions]}
        for topic_id, partitions in topics]}


def produce_by_id(c: WireClient, topics: list[tuple[uuid.UUID, list[int]]], count: int = 2) -> dict:
    return c.request(PRODUCE, 13, produce_v13_body(topics, count))


def log_end(c: WireClient, name: str) -> int:
    resp = c.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": name, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                       "timestamp": LIST_OFFSETS_LATEST}]}]})
    return resp["topics"][0]["partitions"][0]["offset"]


def test_produce_v13_names_topics_by_id(targets: dict[str, Target]) -> None:
    """KIP-516's Produce v13: the topic id in the request and the answer; an id no topic has (the zero
    id too) answers UNKNOWN_TOPIC_ID on each of its partitions and appends nothing, next to a known
    topic that is appended; a known id with a partition it lacks UNKNOWN_TOPIC_OR_PARTITION; acks=2
    INVALID_REQUIRED_ACKS but for the unknown id's partitions; acks=0 with an unknown id closes the
    connection (an error the client cannot read otherwise)."""
    def scenario(target: Target) -> dict[str, Any]:
        name, topic_id = new_topic(target, "p13")
        unknown = uuid.uuid4()
        labels = {topic_id: "<topic id>", unknown: "<unknown id>", ZERO_ID: "<zero>"}

        def answer(resp: dict) -> list[tuple[Any, ...]]:
            # Kafka answers from a map of partitions: neither topics nor partitions are in request order.
            return sorted((labels.get(t["topic_id"], str(t["topic_id"])), t["name"],
                           sorted((p["index"], p["error_code"], p["base_offset"], p["log_start_offset"],
                                   p["error_message"]) for p in t["partition_responses"]))
                          for t in resp["responses"])

        out: dict[str, Any] = {}
        with client(target) as c:
            out["by id"] = answer(produce_by_id(c, [(topic_id, [0])]))
            out["unknown and zero ids"] = answer(produce_by_id(c, [(unknown, [0, 1]), (ZERO_ID, [0])]))
            out["mixed"] = answer(produce_by_id(c, [(unknown, [0]), (topic_id, [0])], count=3))
            out["missing partition"] = answer(produce_by_id(c, [(topic_id, [7])]))
            out["acks=2"] = answer(c.request(PRODUCE, 13, produce_v13_body([(unknown, [0]), (topic_id, [0])], acks=2)))
        with client(target) as c:  # acks=0: no answer to read, so an error closes the connection
            c.send_raw(c.encode_request(PRODUCE, 13, produce_v13_body([(unknown, [0])], acks=0))[1])
            out["acks=0 unknown id closes"] = c.is_closed_by_peer()
        with client(target) as c:
            out["log end"] = log_end(c, name)
        return out

    result = same_on_both(targets, scenario)
    assert result["by id"] == [("<topic id>", "", [(0, NONE, 0, 0, None)])]
    assert result["unknown and zero ids"] == [("<unknown id>", "", [(0, UNKNOWN_TOPIC_ID, -1, -1, None),
                                                                    (1, UNKNOWN_TOPIC_ID, -1, -1, None)]),
                                              ("<zero>", "", [(0, UNKNOWN_TOPIC_ID, -1, -1, None)])]
    assert result["mixed"] == [("<topic id>", "", [(0, NONE, 2, 0, None)]),
                               ("<unknown id>", "", [(0, UNKNOWN_TOPIC_ID, -1, -1, None)])]
    assert result["missing partition"] == [("<topic id>", "", [(7, UNKNOWN_TOPIC_OR_PARTITION, -1, -1, None)])]
    assert result["acks=2"] == [("<topic id>", "", [(0, INVALID_REQUIRED_ACKS, -1, -1, None)]),
                                ("<unknown id>", "", [(0, UNKNOWN_TOPIC_ID, -1, -1, None)])]
    assert result["acks=0 unknown id closes"] is True
    assert result["log end"] == 5  # 2 + 3: nothing from the refused partitions


def test_fetch_v18_serves_as_v17_whatever_high_watermark_the_fetcher_knows(targets: dict[str, Target]) -> None:
    """Fetch v18 (KIP-1166) adds a partition's high_watermark as the fetching replica knows it (tagged;
    9223372036854775807 when not sent). Only KRaft's own replication reads it: Kafka 4.4's broker
    Fetch (FetchRequest.PartitionData) does not carry it, so a consumer's answer is v17's."""
    from tests.support.bad_batches import records, wrap

    def scenario(target: Target) -> dict[str, Any]:
        name, topic_id = new_topic(target, "f18")
        out: dict[str, Any] = {}
        with client(target) as c:
            c.request(PRODUCE, 12, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
                {"name": name, "partition_data": [{"index": 0, "records": wrap(records(3), 3)}]}]})
            for version, known_hw in [(17, None), (18, None), (18, -1), (18, 0), (18, 3), (18, 99)]:
                partition: dict[str, Any] = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                                             "current_leader_epoch": -1, "last_fetched_epoch": -1,
                                             "log_start_offset": -1}
                if known_hw is not None:
                    partition["high_watermark"] = known_hw
                resp = c.request(FETCH, version, {
                    "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                    "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
                    "topics": [{"topic_id": topic_id, "partitions": [partition]}]})
                (t,) = resp["responses"]
                (p,) = t["partitions"]
                out[(version, known_hw)] = (resp["error_code"], t["topic_id"] == topic_id, p["error_code"],
                                            p["high_watermark"], p["last_stable_offset"], p["log_start_offset"],
                                            len(p["records"] or b""))
        return out

    result = same_on_both(targets, scenario)
    assert len(set(result.values())) == 1, result
    error, same_id, code, hw, lso, start, size = result[(18, None)]
    assert (error, same_id, code, hw, lso, start) == (NONE, True, NONE, 3, 3, 0) and size > 0


# ---------------------------------------------------------------------------------------------
# DescribeLogDirs v5, DeleteGroups v3


DESCRIBE_LOG_DIRS, DELETE_GROUPS = 35, 42
NON_EMPTY_GROUP = 68


def test_describe_log_dirs_v5_is_cordoned(targets: dict[str, Target]) -> None:
    """DescribeLogDirs v5 (KIP-1066): is_cordoned per log dir, false unless cordoned.log.dirs names it
    (Kafka 4.4's default: none; Odradek does not cordon); v4 carries no such field."""
    from tests.support.bad_batches import records, wrap

    def scenario(target: Target) -> dict[str, Any]:
        name, _ = new_topic(target, "ld5")
        out: dict[str, Any] = {}
        with client(target) as c:
            c.request(PRODUCE, 12, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
                {"name": name, "partition_data": [{"index": 0, "records": wrap(records(4), 4)}]}]})
            for version in (4, 5):
                resp = c.request(DESCRIBE_LOG_DIRS, version, {"topics": [{"topic": name, "partitions": [0]}]})
                out[version] = (resp["error_code"], [
                    (r["error_code"], r["is_cordoned"], r["total_bytes"] > 0,
                     [(t["name"] == name, [(p["partition_index"], p["partition_size"], p["offset_lag"],
                                            p["is_future_key"]) for p in t["partitions"]]) for t in r["topics"]])
                    for r in resp["results"]])
        return out

    result = same_on_both(targets, scenario)
    assert result[5] == result[4]  # v4 decodes is_cordoned as its default, false
    error, (directory,) = result[5]
    assert error == NONE and directory[:3] == (NONE, False, True)
    ((named, ((index, size, lag, future),)),) = directory[3]
    assert named and index == 0 and size > 0 and lag == 0 and future is False


def test_delete_groups_v3_error_message(targets: dict[str, Target]) -> None:
    """DeleteGroups v3 adds error_message per group. Kafka 4.4 fills it only where a share group's or a
    streams group's deletion fails (GroupCoordinatorService); for classic and consumer groups it is
    null, with the code: GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, or NONE and the offsets gone."""
    def scenario(target: Target) -> dict[str, Any]:
        name, _ = new_topic(target, "dg3")
        unknown, simple, kip848 = unique("dg3-none"), unique("dg3-simple"), unique("dg3-kip848")
        labels = {unknown: "<unknown>", simple: "<simple>", kip848: "<kip848>"}
        out: dict[str, Any] = {}
        with client(target) as c:
            for g in labels:
                wait_coordinator(c, g, 0)
            assert commit(c, 9, simple, {"name": name}, 3)["topics"][0]["partitions"][0]["error_code"] == NONE
            join_consumer_group(c, kip848, name)
            for version, groups in [(2, [unknown, kip848]), (3, [unknown, kip848, simple])]:
                resp = c.request(DELETE_GROUPS, version, {"groups_names": groups})
                out[version] = sorted((labels[r["group_id"]], r["error_code"], r["error_message"])
                                      for r in resp["results"])
            g = fetch(c, 9, simple, [{"name": name, "partition_indexes": [0]}])
            out["simple's offsets"] = [(p["committed_offset"], p["error_code"]) for t in g["topics"]
                                       for p in t["partitions"]]
        return out

    result = same_on_both(targets, scenario)
    assert result[2] == [("<kip848>", NON_EMPTY_GROUP, None), ("<unknown>", GROUP_ID_NOT_FOUND, None)]
    assert result[3] == [("<kip848>", NON_EMPTY_GROUP, None), ("<simple>", NONE, None),
                         ("<unknown>", GROUP_ID_NOT_FOUND, None)]
    assert result["simple's offsets"] == [(-1, NONE)]
