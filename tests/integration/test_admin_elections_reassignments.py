"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments on the wire against one
real broker, and Kafka's own kafka-leader-election and kafka-reassign-partitions.

On one node every partition is led by its only replica, so a preferred election is "not needed" and a
reassignment to [1] completes at once; the multi-broker rules are tested on the controller
(tests/unit/controller/test_controller_elections.py, test_controller_reassignments.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.protocol.errors import ErrorCode
from tests.support.broker_process import BrokerProcess
from tests.support.wire import WireClient, create_topic

ELECT_LEADERS = 43
ALTER_REASSIGNMENTS = 45
LIST_REASSIGNMENTS = 46
API_VERSIONS = 18

NOT_NEEDED = "Leader election not needed for topic partition."


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("elections"), overrides={"odradek.metrics.port": "-1"}).start()
    yield b
    b.stop()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[WireClient]:
    with WireClient(broker.host, broker.port) as c:
        yield c


def test_api_versions_advertises_the_new_apis(client: WireClient) -> None:
    keys = {k["api_key"]: (k["min_version"], k["max_version"])
            for k in client.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
            ["api_keys"]}
    assert keys[ELECT_LEADERS] == (0, 2)
    assert keys[ALTER_REASSIGNMENTS] == (0, 1) and keys[LIST_REASSIGNMENTS] == (0, 0)
    # Not ControlledShutdown (7, retired in Kafka 4.0) nor AlterPartition (56, controller listeners
    # only): tests/integration/test_api_versions_surface.py.
    assert 7 not in keys and 56 not in keys


@pytest.mark.parametrize("version", [0, 1, 2])
def test_elect_leaders(client: WireClient, version: int) -> None:
    topic = f"elect-v{version}"
    create_topic(client, topic, 2)
    body = {"election_type": 0, "topic_partitions": [{"topic": topic, "partitions": [0, 1, 5]}], "timeout_ms": 5000}
    resp = client.request(ELECT_LEADERS, version, body)
    if version >= 1:
        assert resp["error_code"] == ErrorCode.NONE
    (result,) = resp["replica_election_results"]
    assert result["topic"] == topic
    assert [(p["partition_id"], p["error_code"], p["error_message"]) for p in result["partition_result"]] == [
        (0, ErrorCode.ELECTION_NOT_NEEDED, NOT_NEEDED),
        (1, ErrorCode.ELECTION_NOT_NEEDED, NOT_NEEDED),
        (5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-5"),
    ]
    # Every partition: those needing nothing are left out.
    resp = client.request(ELECT_LEADERS, version, {"election_type": 1, "topic_partitions": None, "timeout_ms": 5000})
    assert resp["replica_election_results"] == []


def test_elect_leaders_unknown_election_type(client: WireClient) -> None:
    resp = client.request(ELECT_LEADERS, 2, {"election_type": 7, "timeout_ms": 5000,
                                             "topic_partitions": [{"topic": "x", "partitions": [0]}]})
    assert resp["error_code"] == ErrorCode.INVALID_REQUEST
    assert resp["replica_election_results"][0]["partition_result"][0]["error_code"] == ErrorCode.INVALID_REQUEST


def test_reassignments(client: WireClient) -> None:
    create_topic(client, "moving", 2)
    resp = client.request(ALTER_REASSIGNMENTS, 0, {"timeout_ms": 5000, "topics": [
        {"name": "moving", "partitions": [{"partition_index": 0, "replicas": [1]},
                                          {"partition_index": 1, "replicas": None},
                                          {"partition_index": 2, "replicas": [1]},
                                          {"partition_index": 0, "replicas": [4]}]},
        {"name": "nowhere", "partitions": [{"partition_index": 0, "replicas": [1]}]},
    ]})
    assert resp["error_code"] == ErrorCode.NONE and resp["error_message"] is None
    got = [(t["name"], p["partition_index"], p["error_code"], p["error_message"])
           for t in resp["responses"] for p in t["partitions"]]
    assert got == [
        ("moving", 0, ErrorCode.NONE, None),
        ("moving", 1, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."),
        ("moving", 2, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition moving:2."),
        ("moving", 0, ErrorCode.INVALID_REPLICA_ASSIGNMENT,
         "The manual partition assignment includes broker 4, but no such broker is registered."),
        ("nowhere", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nowhere."),
    ]
    for topics in (None, [{"name": "moving", "partition_indexes": [0, 1, 9]}]):
        resp = client.request(LIST_REASSIGNMENTS, 0, {"timeout_ms": 5000, "topics": topics})
        assert resp["error_code"] == ErrorCode.NONE and resp["topics"] == []


# --- Kafka's own tools ------------------------------------------------------------------------

LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"
REASSIGN_PARTITIONS = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"


def test_kafka_leader_election_and_reassign_partitions(broker: BrokerProcess, tmp_path: Path) -> None:
    from tests.support.java_tools import run_tool
    from tests.support.real_kafka import require_toolchain

    require_toolchain()
    b = broker.bootstrap
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, "cli-elect", 2)
    out = run_tool(LEADER_ELECTION, ["--bootstrap-server", b, "--election-type", "preferred",
                                     "--topic", "cli-elect", "--partition", "0"])
    assert "Valid replica already elected for partitions cli-elect-0" in out.stdout, out.stdout
    out = run_tool(LEADER_ELECTION, ["--bootstrap-server", b, "--election-type", "unclean",
                                     "--all-topic-partitions"])
    assert out.returncode == 0

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "cli-elect", "partition": p, "replicas": [1], "log_dirs": ["any"]} for p in (0, 1)]}))
    out = run_tool(REASSIGN_PARTITIONS, ["--bootstrap-server", b, "--reassignment-json-file", str(plan), "--execute"])
    assert "Successfully started partition reassignments for cli-elect-0,cli-elect-1" in out.stdout, out.stdout
    out = run_tool(REASSIGN_PARTITIONS, ["--bootstrap-server", b, "--reassignment-json-file", str(plan), "--verify"])
    assert "Reassignment of partition cli-elect-0 is completed." in out.stdout, out.stdout
    assert "Reassignment of partition cli-elect-1 is completed." in out.stdout, out.stdout
