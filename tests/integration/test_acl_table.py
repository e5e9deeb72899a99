"""Every API the broker serves, over the wire, against the operation Kafka's KafkaApis checks.

One data dir, four broker runs (on PLAINTEXT every connection is User:ANONYMOUS, so the super user
is toggled by restarting with or without super.users=User:ANONYMOUS; the ACLs live in the
controller's metadata log and survive the restarts):

1. super user: the state the requests act on (topics with records, committed offsets, a
   transaction);
2. no super user, no ACL: each request answers Kafka's authorization error (or hides what it
   would have shown);
3. super user: nothing the refused requests would have done happened (no record produced, no topic
   created or deleted, no offset committed or deleted, no config or partition count changed); then
   each case's ACLs are granted (exactly the operation it needs, on its own resources);
4. no super user: each request succeeds.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.bad_batches import records, wrap
from tests.support.wire import WireClient, create_topic

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ANON = "User:ANONYMOUS"
TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS = 9, 10, 11
TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH = 29, 30, 31, 53
MB = 1 << 20

# What phase 3 grants on the cluster, as an authorized-operations bitfield (KIP-430).
CLUSTER_GRANTED = sum(1 << op for op in (ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS))

Check = Callable[[dict], Any]
Ctx = dict[str, Any]


@dataclass
class Case:
    name: str
    api: int
    version: int
    body: Callable[[Ctx], dict]
    denied: Check  # phase 2: true when the response is Kafka's refusal
    grants: list[tuple[int, str, int]]  # (resource type, name, operation) granted in phase 3
    allowed: Check  # phase 4: true when the request succeeded
    after: Callable[[Ctx, dict], None] | None = None  # phase 4: keep what later cases need
    keep: dict = field(default_factory=dict)


def part(resp: dict, topics: str = "responses", parts: str = "partitions") -> int:
    return resp[topics][0][parts][0]["error_code"]


UNKNOWN_TOPIC_ID = uuid.UUID("6a1f2e3d-0000-4000-8000-00000000abcd")


def share_state_body(**fields: object) -> dict:
    return {"group_id": "g-share", "topics": [{"topic_id": UNKNOWN_TOPIC_ID, "partitions": [{"partition": 0, **fields}]}]}


def fetch_body(topic: str, replica_id: int = -1) -> dict:
    return {"replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": MB, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": MB, "current_leader_epoch": -1,
                 "log_start_offset": -1, "last_fetched_epoch": -1}]}]}


def produce_body(topic: str) -> dict:
    return {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": wrap(records(1), 1)}]}]}


def commit_body(group: str, topic: str, offset: int = 1) -> dict:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


def join_body(ctx: Ctx) -> dict:
    return {"group_id": "g-join", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
            "member_id": ctx.get("member", ""), "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00"}]}


def txn(ctx: Ctx, **extra: Any) -> dict:
    return {"transactional_id": "tx-1", "producer_id": ctx.get("pid", 1), "producer_epoch": ctx.get("epoch", 0),
            **extra}


def keep_member(ctx: Ctx, resp: dict) -> None:
    ctx["member"], ctx["generation"] = resp["member_id"], resp["generation_id"]


def keep_producer(ctx: Ctx, resp: dict) -> None:
    ctx["pid"], ctx["epoch"] = resp["producer_id"], resp["producer_epoch"]


def topics_of_metadata(resp: dict) -> list[str]:
    return sorted(t["name"] for t in resp["topics"])


ZERO_ID = uuid.UUID(int=0)


def dtp_body(topics: list[str]) -> dict:
    return {"topics": [{"name": t} for t in topics], "response_partition_limit": 2000, "cursor": None}


def dtp_answers(resp: dict) -> set[tuple]:
    """(name, error, topic id or "id" for a real one, partition count, authorized operations) per topic."""
    return {(t["name"], t["error_code"], t["topic_id"] if t["topic_id"] == ZERO_ID else "id", len(t["partitions"]),
             t["topic_authorized_operations"]) for t in resp["topics"]}


CASES: list[Case] = [
    Case("Metadata", 3, 12, lambda c: {"topics": [{"name": "t-md", "topic_id": None}],
                                        "allow_auto_topic_creation": False},
         lambda r: r["topics"][0]["error_code"] == TOPIC_AUTH, [(TOPIC, "t-md", DESCRIBE)],
         lambda r: r["topics"][0]["error_code"] == 0),
    Case("Metadata all topics", 3, 12, lambda c: {"topics": None, "allow_auto_topic_creation": False},
         lambda r: r["topics"] == [], [],
         lambda r: "t-md" in topics_of_metadata(r) and "t-wtm" not in topics_of_metadata(r)),  # no ACL on t-wtm
    Case("Metadata (authorized operations)", 3, 10, lambda c: {
        "topics": [{"name": "t-md", "topic_id": None}], "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": True, "include_topic_authorized_operations": True},
        lambda r: r["cluster_authorized_operations"] == 0 and r["topics"][0]["error_code"] == TOPIC_AUTH, [],
        lambda r: r["cluster_authorized_operations"] == CLUSTER_GRANTED
        and r["topics"][0]["topic_authorized_operations"] == 1 << DESCRIBE),
    Case("Metadata auto-create", 3, 12, lambda c: {"topics": [{"name": "t-auto", "topic_id": None}],
                                                    "allow_auto_topic_creation": True},
         lambda r: r["topics"][0]["error_code"] == TOPIC_AUTH, [(TOPIC, "t-auto", DESCRIBE), (TOPIC, "t-auto", CREATE)],
         lambda r: r["topics"][0]["error_code"] == 0 and r["topics"][0]["partitions"]),
    # Named: a topic without DESCRIBE answers TOPIC_AUTHORIZATION_FAILED with the zero id, after the
    # others; all topics: only the describable ones (DescribeTopicPartitionsRequestHandler).
    Case("DescribeTopicPartitions", 75, 0, lambda c: dtp_body(["t-wtm", "t-md"]),
         lambda r: dtp_answers(r) == {("t-md", TOPIC_AUTH, ZERO_ID, 0, -2**31), ("t-wtm", TOPIC_AUTH, ZERO_ID, 0, -2**31)},
         [], lambda r: dtp_answers(r) == {("t-md", 0, "id", 1, 1 << DESCRIBE), ("t-wtm", TOPIC_AUTH, ZERO_ID, 0, -2**31)}
         and r["topics"][-1]["name"] == "t-wtm"),
    Case("DescribeTopicPartitions all topics", 75, 0, lambda c: dtp_body([]), lambda r: r["topics"] == [], [],
         lambda r: "t-md" in topics_of_metadata(r) and "t-wtm" not in topics_of_metadata(r)),
    Case("Produce", 0, 9, lambda c: produce_body("t-prod"), lambda r: part(r, "responses", "partition_responses")
         == TOPIC_AUTH, [(TOPIC, "t-prod", WRITE)], lambda r: part(r, "responses", "partition_responses") == 0),
    Case("Fetch", 1, 12, lambda c: fetch_body("t-fetch"), lambda r: part(r) == TOPIC_AUTH, [(TOPIC, "t-fetch", READ)],
         lambda r: part(r) == 0 and r["responses"][0]["partitions"][0]["high_watermark"] == 1),
    Case("Fetch (follower)", 1, 12, lambda c: fetch_body("t-fetch", replica_id=2), lambda r: part(r) == TOPIC_AUTH,
         [(CLUSTER, "kafka-cluster", CLUSTER_ACTION)], lambda r: part(r) != TOPIC_AUTH),
    Case("ListOffsets", 2, 5, lambda c: {"replica_id": -1, "topics": [{"name": "t-lo", "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]},
        lambda r: part(r, "topics") == TOPIC_AUTH, [(TOPIC, "t-lo", DESCRIBE)], lambda r: part(r, "topics") == 0),
    Case("OffsetCommit", 8, 8, lambda c: commit_body("g-oc", "t-oc"),
         lambda r: part(r, "topics") == GROUP_AUTH, [(GROUP, "g-oc", READ), (TOPIC, "t-oc", READ)],
         lambda r: part(r, "topics") == 0),
    Case("OffsetFetch", 9, 7, lambda c: {"group_id": "g-of", "topics": [{"name": "t-of", "partition_indexes": [0]}]},
         lambda r: r["error_code"] == GROUP_AUTH, [(GROUP, "g-of", DESCRIBE), (TOPIC, "t-of", DESCRIBE)],
         lambda r: r["error_code"] == 0 and r["topics"][0]["partitions"][0]["committed_offset"] == 1),
    Case("OffsetFetch v8", 9, 8, lambda c: {"groups": [{"group_id": "g-of", "topics": None}]},
         lambda r: r["groups"][0]["error_code"] == GROUP_AUTH, [],
         lambda r: r["groups"][0]["error_code"] == 0 and [t["name"] for t in r["groups"][0]["topics"]] == ["t-of"]),
    Case("FindCoordinator", 10, 3, lambda c: {"key": "g-fc", "key_type": 0}, lambda r: r["error_code"] == GROUP_AUTH,
         [(GROUP, "g-fc", DESCRIBE)], lambda r: r["error_code"] == 0),
    Case("FindCoordinator (txn)", 10, 3, lambda c: {"key": "tx-fc", "key_type": 1},
         lambda r: r["error_code"] == TXN_AUTH, [(TXN, "tx-fc", DESCRIBE)], lambda r: r["error_code"] == 0),
    Case("JoinGroup", 11, 3, join_body, lambda r: r["error_code"] == GROUP_AUTH, [(GROUP, "g-join", READ)],
         lambda r: r["error_code"] == 0, after=keep_member),
    Case("SyncGroup", 14, 3, lambda c: {"group_id": "g-join", "generation_id": c.get("generation", 1),
                                         "member_id": c.get("member", "m"), "assignments": [
                                             {"member_id": c.get("member", "m"), "assignment": b""}]},
         lambda r: r["error_code"] == GROUP_AUTH, [], lambda r: r["error_code"] == 0),
    Case("Heartbeat", 12, 3, lambda c: {"group_id": "g-join", "generation_id": c.get("generation", 1),
                                         "member_id": c.get("member", "m")},
         lambda r: r["error_code"] == GROUP_AUTH, [], lambda r: r["error_code"] == 0),
    Case("LeaveGroup", 13, 3, lambda c: {"group_id": "g-join", "members": [{"member_id": c.get("member", "m")}]},
         lambda r: r["error_code"] == GROUP_AUTH, [], lambda r: r["error_code"] == 0),
    Case("DescribeGroups", 15, 5, lambda c: {"groups": ["g-of"], "include_authorized_operations": True},
         lambda r: r["groups"][0]["error_code"] == GROUP_AUTH, [],
         lambda r: r["groups"][0]["error_code"] == 0 and r["groups"][0]["authorized_operations"] == 1 << DESCRIBE),
    Case("ListGroups", 16, 4, lambda c: {}, lambda r: r["error_code"] == 0 and r["groups"] == [], [],
         lambda r: "g-of" in [g["group_id"] for g in r["groups"]]),
    Case("CreateTopics", 19, 5, lambda c: {"topics": [{"name": "t-create", "num_partitions": 1,
                                                        "replication_factor": 1}], "timeout_ms": 5000},
         lambda r: r["topics"][0]["error_code"] == TOPIC_AUTH, [(TOPIC, "t-create", CREATE)],
         # Created; its configs are shown only with DESCRIBE_CONFIGS (not granted).
         lambda r: r["topics"][0]["error_code"] == 0 and r["topics"][0]["topic_config_error_code"] == TOPIC_AUTH
         and r["topics"][0]["configs"] == [] and r["topics"][0]["num_partitions"] == 1),
    Case("DeleteTopics", 20, 6, lambda c: {"topics": [{"name": "t-del", "topic_id": None}], "timeout_ms": 5000},
         lambda r: r["responses"][0]["error_code"] == TOPIC_AUTH, [(TOPIC, "t-del", DELETE)],
         lambda r: r["responses"][0]["error_code"] == 0),
    Case("DeleteRecords", 21, 2, lambda c: {"topics": [{"name": "t-dr", "partitions": [
        {"partition_index": 0, "offset": 1}]}], "timeout_ms": 5000},
        lambda r: part(r, "topics") == TOPIC_AUTH, [(TOPIC, "t-dr", DELETE)],
        lambda r: part(r, "topics") == 0 and r["topics"][0]["partitions"][0]["low_watermark"] == 1),
    Case("InitProducerId (idempotent)", 22, 4, lambda c: {"transactional_id": None, "transaction_timeout_ms": 1000,
                                                          "producer_id": -1, "producer_epoch": -1},
         lambda r: r["error_code"] == CLUSTER_AUTH, [], lambda r: r["error_code"] == 0),  # WRITE t-prod (KIP-679)
    Case("InitProducerId", 22, 4, lambda c: {"transactional_id": "tx-1", "transaction_timeout_ms": 60000,
                                             "producer_id": -1, "producer_epoch": -1},
         lambda r: r["error_code"] == TXN_AUTH, [(TXN, "tx-1", WRITE)], lambda r: r["error_code"] == 0,
         after=keep_producer),
    Case("AddPartitionsToTxn", 24, 3, lambda c: {
        "v3_and_below_transactional_id": "tx-1", "v3_and_below_producer_id": c.get("pid", 1),
        "v3_and_below_producer_epoch": c.get("epoch", 0), "v3_and_below_topics": [{"name": "t-txn", "partitions": [0]}]},
        lambda r: r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == TXN_AUTH,
        [(TOPIC, "t-txn", WRITE)],
        lambda r: r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0),
    Case("AddOffsetsToTxn", 25, 3, lambda c: txn(c, group_id="g-txn"), lambda r: r["error_code"] == TXN_AUTH,
         [(GROUP, "g-txn", READ)], lambda r: r["error_code"] == 0),
    Case("TxnOffsetCommit", 28, 3, lambda c: txn(c, group_id="g-txn", generation_id=-1, member_id="", topics=[
        {"name": "t-txn", "partitions": [{"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
                                          "committed_metadata": ""}]}]),
        lambda r: part(r, "topics") == TXN_AUTH, [(TOPIC, "t-txn", READ)], lambda r: part(r, "topics") == 0),
    Case("DescribeTransactions", 65, 0, lambda c: {"transactional_ids": ["tx-1"]},
         lambda r: r["transaction_states"][0]["error_code"] == TXN_AUTH, [],
         lambda r: r["transaction_states"][0]["error_code"] == 0
         and r["transaction_states"][0]["transaction_state"] == "Ongoing"),
    Case("ListTransactions", 66, 1, lambda c: {"state_filters": [], "producer_id_filters": []},
         lambda r: r["error_code"] == 0 and r["transaction_states"] == [], [],
         lambda r: [t["transactional_id"] for t in r["transaction_states"]] == ["tx-1"]),
    Case("EndTxn", 26, 3, lambda c: txn(c, committed=True), lambda r: r["error_code"] == TXN_AUTH, [],
         lambda r: r["error_code"] == 0),
    Case("WriteTxnMarkers", 27, 1, lambda c: {"markers": [{"producer_id": 4242, "producer_epoch": 0,
                                                           "transaction_result": False, "coordinator_epoch": 0,
                                                           "topics": [{"name": "t-wtm", "partition_indexes": [0]}]}]},
         lambda r: r["markers"][0]["topics"][0]["partitions"][0]["error_code"] == CLUSTER_AUTH, [],
         lambda r: r["markers"][0]["topics"][0]["partitions"][0]["error_code"] == 0),  # CLUSTER_ACTION above
    Case("OffsetForLeaderEpoch", 23, 3, lambda c: {"replica_id": -1, "topics": [{"topic": "t-ofle", "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
        lambda r: part(r, "topics") == TOPIC_AUTH, [(TOPIC, "t-ofle", DESCRIBE)], lambda r: part(r, "topics") == 0),
    Case("DescribeConfigs", 32, 4, lambda c: {"resources": [{"resource_type": 2, "resource_name": "t-cfg",
                                                             "configuration_keys": None}]},
         lambda r: r["results"][0]["error_code"] == TOPIC_AUTH, [(TOPIC, "t-cfg", DESCRIBE_CONFIGS)],
         lambda r: r["results"][0]["error_code"] == 0 and r["results"][0]["configs"]),
    Case("DescribeConfigs (broker)", 32, 4, lambda c: {"resources": [{"resource_type": 4, "resource_name": "1",
                                                                      "configuration_keys": None}]},
         lambda r: r["results"][0]["error_code"] == CLUSTER_AUTH, [(CLUSTER, "kafka-cluster", DESCRIBE_CONFIGS)],
         lambda r: r["results"][0]["error_code"] == 0),
    Case("AlterConfigs", 33, 1, lambda c: {"resources": [{"resource_type": 2, "resource_name": "t-alt", "configs": [
        {"name": "retention.ms", "value": "3600000"}]}]},
        lambda r: r["responses"][0]["error_code"] == TOPIC_AUTH
        and r["responses"][0]["error_message"] == "Topic authorization failed.", [(TOPIC, "t-alt", ALTER_CONFIGS)],
        lambda r: r["responses"][0]["error_code"] == 0),
    Case("IncrementalAlterConfigs", 44, 1, lambda c: {"resources": [{"resource_type": 2, "resource_name": "t-inc",
                                                                     "configs": [{"name": "retention.ms",
                                                                                  "config_operation": 0,
                                                                                  "value": "3600000"}]}]},
         lambda r: r["responses"][0]["error_code"] == TOPIC_AUTH, [(TOPIC, "t-inc", ALTER_CONFIGS)],
         lambda r: r["responses"][0]["error_code"] == 0),
    Case("IncrementalAlterConfigs (broker)", 44, 1, lambda c: {"resources": [{
        "resource_type": 4, "resource_name": "", "configs": [{"name": "max.connections", "config_operation": 0,
                                                              "value": "5000"}]}]},
        lambda r: r["responses"][0]["error_code"] == CLUSTER_AUTH, [(CLUSTER, "kafka-cluster", ALTER_CONFIGS)],
        lambda r: r["responses"][0]["error_code"] == 0),
    Case("IncrementalAlterConfigs (client metrics)", 44, 1, lambda c: {"resources": [{
        "resource_type": 16, "resource_name": "cm", "configs": [{"name": "metrics", "config_operation": 0,
                                                                 "value": "org.apache.kafka."}]}]},
        lambda r: r["responses"][0]["error_code"] == CLUSTER_AUTH, [(CLUSTER, "kafka-cluster", ALTER_CONFIGS)],
        lambda r: r["responses"][0]["error_code"] == 0),
    Case("ListConfigResources", 74, 1, lambda c: {"resource_types": [16]},
         lambda r: r["error_code"] == CLUSTER_AUTH and r["config_resources"] == [],
         [(CLUSTER, "kafka-cluster", DESCRIBE_CONFIGS)],
         lambda r: r["error_code"] == 0 and [x["resource_name"] for x in r["config_resources"]] == ["cm"]),
    Case("DescribeLogDirs", 35, 4, lambda c: {"topics": None}, lambda r: r["error_code"] == CLUSTER_AUTH,
         [(CLUSTER, "kafka-cluster", DESCRIBE)], lambda r: r["error_code"] == 0 and r["results"]),
    Case("AlterReplicaLogDirs", 34, 2, lambda c: {"dirs": [{"path": c["log_dir"], "topics": [
        {"name": "t-md", "partitions": [0]}]}]},
        lambda r: r["results"][0]["partitions"][0]["error_code"] == CLUSTER_AUTH, [],  # ALTER: ElectLeaders' row
        lambda r: r["results"][0]["partitions"][0]["error_code"] == 0),  # NONE: in that dir already
    Case("CreatePartitions", 37, 3, lambda c: {"topics": [{"name": "t-cp", "count": 2, "assignments": None}],
                                               "timeout_ms": 5000},
         lambda r: r["results"][0]["error_code"] == TOPIC_AUTH, [(TOPIC, "t-cp", ALTER)],
         lambda r: r["results"][0]["error_code"] == 0),
    Case("DeleteGroups", 42, 2, lambda c: {"groups_names": ["g-del"]},
         lambda r: r["results"][0]["error_code"] == GROUP_AUTH, [(GROUP, "g-del", DELETE)],
         lambda r: r["results"][0]["error_code"] == 0),
    Case("ElectLeaders", 43, 2, lambda c: {"election_type": 0, "topic_partitions": [{"topic": "t-md", "partitions": [0]}],
                                           "timeout_ms": 5000},
         lambda r: r["error_code"] == CLUSTER_AUTH, [(CLUSTER, "kafka-cluster", ALTER)],
         lambda r: r["error_code"] == 0 and r["replica_election_results"][0]["partition_result"][0]["error_code"] == 84),
    Case("AlterPartitionReassignments", 45, 0, lambda c: {"timeout_ms": 5000, "topics": [
        {"name": "t-md", "partitions": [{"partition_index": 0, "replicas": None}]}]},
        lambda r: r["error_code"] == CLUSTER_AUTH, [], lambda r: r["error_code"] == 0),  # ALTER above
    Case("ListPartitionReassignments", 46, 0, lambda c: {"timeout_ms": 5000, "topics": None},
         lambda r: r["error_code"] == CLUSTER_AUTH, [], lambda r: r["error_code"] == 0),  # DESCRIBE above
    Case("OffsetDelete", 47, 0, lambda c: {"group_id": "g-od", "topics": [{"name": "t-od", "partitions": [
        {"partition_index": 0}]}]}, lambda r: r["error_code"] == GROUP_AUTH,
        [(GROUP, "g-od", DELETE), (TOPIC, "t-od", READ)],
        lambda r: r["error_code"] == 0 and part(r, "topics") == 0),
    Case("AlterPartition", 56, 3, lambda c: {"broker_id": 1, "broker_epoch": -1, "topics": []},
         lambda r: r["error_code"] == CLUSTER_AUTH, [], lambda r: r["error_code"] == 0),  # CLUSTER_ACTION above
    Case("DescribeCluster", 60, 1, lambda c: {"include_cluster_authorized_operations": True, "endpoint_type": 1},
         lambda r: r["error_code"] == 0 and r["cluster_authorized_operations"] == 0, [],
         lambda r: r["cluster_authorized_operations"] == CLUSTER_GRANTED),
    Case("DescribeProducers", 61, 0, lambda c: {"topics": [{"name": "t-dp", "partition_indexes": [0]}]},
         lambda r: part(r, "topics") == TOPIC_AUTH, [(TOPIC, "t-dp", READ)], lambda r: part(r, "topics") == 0),
    Case("ConsumerGroupHeartbeat", 68, 0, lambda c: {"group_id": "g-848", "member_id": "", "member_epoch": 0,
                                                     "rebalance_timeout_ms": 10000,
                                                     "subscribed_topic_names": ["t-848"], "topic_partitions": []},
         lambda r: r["error_code"] == GROUP_AUTH, [(GROUP, "g-848", READ), (TOPIC, "t-848", DESCRIBE)],
         lambda r: r["error_code"] == 0),
    Case("ConsumerGroupDescribe", 69, 0, lambda c: {"group_ids": ["g-848"], "include_authorized_operations": True},
         lambda r: r["groups"][0]["error_code"] == GROUP_AUTH, [],
         lambda r: r["groups"][0]["error_code"] == 0
         and r["groups"][0]["authorized_operations"] == (1 << READ) | (1 << DESCRIBE)),
    Case("DescribeUserScramCredentials", 50, 0, lambda c: {"users": None},
         lambda r: r["error_code"] == CLUSTER_AUTH, [], lambda r: r["error_code"] == 0),  # DESCRIBE above
    Case("AlterUserScramCredentials", 51, 0, lambda c: {"deletions": [], "upsertions": [
        {"name": "u-scram", "mechanism": 1, "iterations": 4096, "salt": b"s" * 16, "salted_password": b"p" * 32}]},
        lambda r: r["results"][0]["error_code"] == CLUSTER_AUTH, [],
        lambda r: r["results"][0]["error_code"] == 0),  # ALTER above
    Case("DescribeClientQuotas", 48, 1, lambda c: {"components": [], "strict": False},
         lambda r: r["error_code"] == CLUSTER_AUTH, [], lambda r: r["error_code"] == 0),  # DESCRIBE_CONFIGS above
    Case("AlterClientQuotas", 49, 1, lambda c: {"entries": [{"entity": [{"entity_type": "user", "entity_name":
                                                                         "u-quota"}],
                                                             "ops": [{"key": "producer_byte_rate", "value": 1048576.0,
                                                                      "remove": False}]}], "validate_only": False},
         lambda r: r["entries"][0]["error_code"] == CLUSTER_AUTH, [],
         lambda r: r["entries"][0]["error_code"] == 0),  # ALTER_CONFIGS above
    Case("UpdateFeatures", 57, 1, lambda c: {"timeout_ms": 5000, "validate_only": False, "feature_updates": [
        {"feature": "transaction.version", "max_version_level": 0, "upgrade_type": 2}]},
        lambda r: r["error_code"] == CLUSTER_AUTH and r["results"] == [], [],
        lambda r: r["error_code"] == 0 and r["results"][0]["error_code"] == 0),  # ALTER above
    Case("DescribeAcls", 29, 3, lambda c: {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
                                           "permission_type": 1, "resource_name_filter": None,
                                           "principal_filter": None, "host_filter": None},
         lambda r: r["error_code"] == CLUSTER_AUTH, [], lambda r: r["error_code"] == 0 and r["resources"]),
    Case("CreateAcls", 30, 3, lambda c: {"creations": [
        {"resource_type": TOPIC, "resource_name": "t-none", "resource_pattern_type": 3, "principal": "User:x",
         "host": "*", "operation": READ, "permission_type": 3}]},
        lambda r: r["results"][0]["error_code"] == CLUSTER_AUTH, [], lambda r: r["results"][0]["error_code"] == 0),
    Case("DeleteAcls", 31, 3, lambda c: {"filters": [
        {"resource_type_filter": TOPIC, "resource_name_filter": "t-none", "pattern_type_filter": 3,
         "principal_filter": "User:x", "host_filter": None, "operation": 1, "permission_type": 1}]},
        lambda r: r["filter_results"][0]["error_code"] == CLUSTER_AUTH, [],
        lambda r: [m["resource_name"] for m in r["filter_results"][0]["matching_acls"]] == ["t-none"]),
    # Share groups (KIP-932), in Kafka's order of checks: READ on the group, DESCRIBE on subscribed topics.
    Case("ShareGroupHeartbeat", 76, 1, lambda c: {"group_id": "g-share", "member_id": "m-share", "member_epoch": 0,
                                                  "rack_id": None, "subscribed_topic_names": ["t-share"]},
         lambda r: r["error_code"] == GROUP_AUTH, [(GROUP, "g-share", READ), (TOPIC, "t-share", DESCRIBE)],
         lambda r: r["error_code"] == 0),
    Case("ShareGroupDescribe", 77, 1, lambda c: {"group_ids": ["g-share"], "include_authorized_operations": False},
         lambda r: r["groups"][0]["error_code"] == GROUP_AUTH, [(GROUP, "g-share", DESCRIBE)],
         lambda r: r["groups"][0]["error_code"] == 0 and len(r["groups"][0]["members"]) == 1),
    Case("ShareFetch", 78, 1, lambda c: {
        "group_id": "g-share", "member_id": "m-share", "share_session_epoch": 0, "max_wait_ms": 0, "min_bytes": 1,
        "max_bytes": MB, "max_records": 10, "batch_size": 10, "share_acquire_mode": 0, "is_renew_ack": False,
        "topics": [], "forgotten_topics_data": []},
        lambda r: r["error_code"] == GROUP_AUTH, [(TOPIC, "t-share", READ)], lambda r: r["error_code"] == 0),
    Case("ShareAcknowledge", 79, 1, lambda c: {"group_id": "g-share", "member_id": "m-share",
                                               "share_session_epoch": 1, "is_renew_ack": False, "topics": []},
         lambda r: r["error_code"] == GROUP_AUTH, [], lambda r: r["error_code"] == 0),  # READ above
    Case("DescribeShareGroupOffsets", 90, 0, lambda c: {"groups": [{"group_id": "g-share", "topics": None}]},
         lambda r: r["groups"][0]["error_code"] == GROUP_AUTH, [],
         lambda r: r["groups"][0]["error_code"] == 0),  # DESCRIBE above
    # Authorized, then refused as Kafka refuses a share group with a member: NON_EMPTY_GROUP (68).
    Case("AlterShareGroupOffsets", 91, 0, lambda c: {"group_id": "g-share", "topics": [
        {"topic_name": "t-share", "partitions": [{"partition_index": 0, "start_offset": 0}]}]},
        lambda r: r["error_code"] == GROUP_AUTH, [], lambda r: r["error_code"] == 68),  # READ above
    Case("DeleteShareGroupOffsets", 92, 0, lambda c: {"group_id": "g-share", "topics": [{"topic_name": "t-share"}]},
         lambda r: r["error_code"] == GROUP_AUTH, [(GROUP, "g-share", DELETE)], lambda r: r["error_code"] == 68),
    # The share coordinator's APIs (83-87, sent by brokers): CLUSTER_ACTION on the cluster (granted with
    # WriteTxnMarkers above); allowed, each answers the coordinator's own error for a topic id nobody has.
    Case("InitializeShareGroupState", 83, 0, lambda c: share_state_body(state_epoch=0, start_offset=0),
         lambda r: part(r, "results") == CLUSTER_AUTH, [], lambda r: part(r, "results") == 3),
    Case("ReadShareGroupState", 84, 0, lambda c: share_state_body(leader_epoch=0),
         lambda r: part(r, "results") == CLUSTER_AUTH, [], lambda r: part(r, "results") == 42),
    Case("WriteShareGroupState", 85, 1, lambda c: share_state_body(state_epoch=0, leader_epoch=0, start_offset=0,
                                                                    state_batches=[]),
         lambda r: part(r, "results") == CLUSTER_AUTH, [], lambda r: part(r, "results") == 42),
    Case("DeleteShareGroupState", 86, 0, lambda c: share_state_body(),
         lambda r: part(r, "results") == CLUSTER_AUTH, [], lambda r: part(r, "results") == 3),
    Case("ReadShareGroupStateSummary", 87, 1, lambda c: share_state_body(leader_epoch=0),
         lambda r: part(r, "results") == CLUSTER_AUTH, [], lambda r: part(r, "results") == 3),
    # Streams groups (KIP-1071): READ on the group, DESCRIBE on the topology's source topics.
    Case("StreamsGroupHeartbeat", 88, 0, lambda c: {
        "group_id": "g-sg", "member_id": "m-sg", "member_epoch": 0, "endpoint_information_epoch": 0,
        "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 10000, "topology": {"epoch": 0, "subtopologies": [
            {"subtopology_id": "0", "source_topics": ["t-sg"], "source_topic_regex": [], "state_changelog_topics": [],
             "repartition_sink_topics": [], "repartition_source_topics": [], "copartition_groups": []}]},
        "active_tasks": [], "standby_tasks": [], "warmup_tasks": [], "process_id": "p-sg", "user_endpoint": None,
        "client_tags": None, "task_offsets": None, "task_end_offsets": None, "shutdown_application": False},
        lambda r: r["error_code"] == GROUP_AUTH, [(GROUP, "g-sg", READ), (TOPIC, "t-sg", DESCRIBE)],
        lambda r: r["error_code"] == 0),
    Case("StreamsGroupDescribe", 89, 0, lambda c: {"group_ids": ["g-sg"], "include_authorized_operations": False},
         lambda r: r["groups"][0]["error_code"] == GROUP_AUTH, [(GROUP, "g-sg", DESCRIBE)],
         lambda r: r["groups"][0]["error_code"] == 0 and len(r["groups"][0]["members"]) == 1),
    # KIP-1331: READ on the group (granted above); allowed, Kafka's answer without a description plugin.
    Case("StreamsGroupTopologyDescriptionUpdate", 93, 0, lambda c: {
        "group_id": "g-sg", "member_id": "m-sg", "topology_epoch": 0,
        "topology_description": {"subtopologies": [], "global_stores": []}},
        lambda r: r["error_code"] == GROUP_AUTH, [], lambda r: r["error_code"] == 35),
]

# Every API the broker serves appears in the table, except those Kafka never authorizes: ApiVersions,
# SaslHandshake and SaslAuthenticate (they come before a principal is known).
# GetTelemetrySubscriptions and PushTelemetry neither (KIP-714: any client may push its metrics).
NEVER_AUTHORIZED = {18, 17, 36, 71, 72}
TABLE_APIS = {c.api for c in CASES}

TOPICS = ["t-md", "t-prod", "t-fetch", "t-lo", "t-oc", "t-of", "t-del", "t-dr", "t-txn", "t-wtm", "t-ofle", "t-cfg",
          "t-alt", "t-inc", "t-cp", "t-od", "t-dp", "t-848", "t-share", "t-sg"]


RETRIABLE = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


def _codes(value: Any) -> set[int]:
    if isinstance(value, dict):
        return {v for k, v in value.items() if k.endswith("error_code")} | {
            c for v in value.values() for c in _codes(v)}
    if isinstance(value, list):
        return {c for v in value for c in _codes(v)}
    return set()


def send(c: WireClient, api: int, version: int, body: dict) -> dict:
    """One request, repeated while a coordinator is still loading after the broker's start."""
    deadline = time.monotonic() + 15
    while True:
        resp = c.request(api, version, body)
        if not _codes(resp) & RETRIABLE or time.monotonic() > deadline:
            return resp
        time.sleep(0.2)


def partition_count(c: WireClient, topic: str) -> int:
    md = c.request(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False})
    return len(md["topics"][0]["partitions"]) if md["topics"][0]["error_code"] == 0 else -1


def end_offset(c: WireClient, topic: str, timestamp: int = -1) -> int:
    resp = c.request(2, 5, {"replica_id": -1, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]})
    return resp["topics"][0]["partitions"][0]["offset"]


def committed(c: WireClient, group: str, topic: str) -> int:
    resp = send(c, 9, 7, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]})
    return resp["topics"][0]["partitions"][0]["committed_offset"]


def topic_config(c: WireClient, topic: str, key: str) -> str | None:
    resp = c.request(32, 4, {"resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": [key]}]})
    (entry,) = resp["results"][0]["configs"]
    return entry["value"] if entry["config_source"] == 1 else None  # 1: DYNAMIC_TOPIC_CONFIG


def setup(c: WireClient) -> None:
    # FindCoordinator creates __consumer_offsets and __transaction_state, as a client's first call would.
    for key, key_type in (("g-of", 0), ("tx-1", 1)):
        assert send(c, 10, 3, {"key": key, "key_type": key_type})["error_code"] == 0
    for topic in TOPICS:
        create_topic(c, topic, 1)
    for topic in ("t-fetch", "t-dr"):
        assert part(c.request(0, 9, produce_body(topic)), "responses", "partition_responses") == 0
    for group, topic in (("g-of", "t-of"), ("g-del", "t-of"), ("g-od", "t-od")):
        assert part(send(c, 8, 8, commit_body(group, topic)), "topics") == 0
    assert "g-of" in [g["group_id"] for g in c.request(16, 4, {})["groups"]]


def nothing_changed(c: WireClient) -> None:
    assert end_offset(c, "t-prod") == 0  # Produce
    assert end_offset(c, "t-dr", -2) == 0  # DeleteRecords: log start offset
    assert partition_count(c, "t-create") == -1 and partition_count(c, "t-auto") == -1  # CreateTopics, Metadata
    assert partition_count(c, "t-del") == 1 and partition_count(c, "t-cp") == 1  # DeleteTopics, CreatePartitions
    assert committed(c, "g-oc", "t-oc") == -1  # OffsetCommit
    assert committed(c, "g-del", "t-of") == 1 and committed(c, "g-od", "t-od") == 1  # DeleteGroups, OffsetDelete
    assert topic_config(c, "t-alt", "retention.ms") is None and topic_config(c, "t-inc", "retention.ms") is None
    assert c.request(65, 0, {"transactional_ids": ["tx-1"]})["transaction_states"][0]["error_code"] == 105
    quotas = c.request(48, 1, {"components": [], "strict": False})
    assert quotas["error_code"] == 0 and quotas["entries"] == []  # AlterClientQuotas refused
    scram = c.request(50, 0, {"users": [{"name": "u-scram"}]})
    assert scram["results"][0]["error_code"] == 91  # RESOURCE_NOT_FOUND: AlterUserScramCredentials refused
    acls = c.request(29, 3, {"resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
                             "permission_type": 1, "resource_name_filter": None, "principal_filter": None,
                             "host_filter": None})
    assert acls["resources"] == []  # CreateAcls
    features = c.request(18, 4, {"client_software_name": "t", "client_software_version": "1"})["finalized_features"]
    assert {"name": "transaction.version", "max_version_level": 2, "min_version_level": 2} in features  # UpdateFeatures


def grant_all(c: WireClient) -> None:
    creations = [{"resource_type": rt, "resource_name": name, "resource_pattern_type": 3, "principal": ANON,
                  "host": "*", "operation": op, "permission_type": 3}
                 for case in CASES for rt, name, op in case.grants]
    # ACL management itself (CreateAcls/DeleteAcls: ALTER, granted with ElectLeaders' ALTER).
    resp = c.request(30, 3, {"creations": creations})
    assert all(r["error_code"] == 0 for r in resp["results"]), resp


def test_every_api_refused_without_its_acl_then_allowed_with_it(broker_factory, tmp_path: Path) -> None:
    from odradek.broker.api.handlers import all_handlers

    assert set(all_handlers()) - NEVER_AUTHORIZED == TABLE_APIS  # a new API needs a row here
    data = tmp_path / "table"
    base = {"authorizer.class.name": STANDARD, "group.initial.rebalance.delay.ms": "0"}
    b = broker_factory({**base, "super.users": ANON}, data_dir=data)
    with WireClient(b.host, b.port) as c:
        setup(c)
    b.stop()

    b = broker_factory(base, data_dir=data)
    ctx: Ctx = {"log_dir": str(data / "logs")}  # the broker's one log dir (tests/support/broker_process.py)
    failures = []
    with WireClient(b.host, b.port) as c:
        for case in CASES:
            resp = send(c, case.api, case.version, case.body(ctx))
            if not case.denied(resp):
                failures.append(f"{case.name} not refused: {resp}")
    assert not failures, "\n".join(failures)
    b.stop()

    b = broker_factory({**base, "super.users": ANON}, data_dir=data)
    with WireClient(b.host, b.port) as c:
        nothing_changed(c)
        grant_all(c)
    b.stop()

    b = broker_factory(base, data_dir=data)
    with WireClient(b.host, b.port) as c:
        for case in CASES:
            resp = send(c, case.api, case.version, case.body(ctx))
            if not case.allowed(resp):
                failures.append(f"{case.name} not allowed: {resp}")
            elif case.after is not None:
                case.after(ctx, resp)
    assert not failures, "\n".join(failures)
