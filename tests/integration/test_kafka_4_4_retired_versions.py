"""The request versions Kafka 4.0 retired (KIP-896) that Odradek served until Kafka 4.4's minimums
were taken over, on the wire, against a real Kafka 4.4 and Odradek (issue 28).

Kafka 4.4's message definitions start CreateTopics at v2, DeleteTopics at v1, OffsetForLeaderEpoch
at v2, DescribeAcls/CreateAcls/DeleteAcls, DescribeConfigs and DescribeLogDirs at v1 ("Version 0
was removed in Apache Kafka 4.0, Version 1 is the new baseline"), and ApiVersions advertises those
minimums. A request for a retired version is refused by Kafka's SocketServer while it parses the
header ("Received request for api with key N (...) and unsupported version V"): the connection is
closed without an answer and the request does nothing. Each scenario sends the same hand-encoded
requests to both brokers (our codecs, generated from Kafka 4.4's definitions, no longer know these
versions) and requires the same outcome: closed, and nothing created, deleted or lost. The
produce v0-2 case, advertised though retired, is in test_api_versions_surface.py.

None of the clients Odradek supports needs a retired version (docs/clients.md): each negotiates the
highest version both sides know, and kafka-python 2.0.2, aiokafka 0.14, librdkafka 2.0.2 and the
Java client 2.1.0 all know the new minimums.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol.headers import encode_request_header
from tests.support.bad_batches import records, wrap
from tests.support.real_kafka import TARGETS, Target, create_topic, kafka_and_odradek, unique
from tests.support.wire import WireClient

CREATE_TOPICS, DELETE_TOPICS, OFFSET_FOR_LEADER_EPOCH = 19, 20, 23
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS, DESCRIBE_CONFIGS, DESCRIBE_LOG_DIRS = 29, 30, 31, 32, 35
NAMES = {CREATE_TOPICS: "CreateTopics", DELETE_TOPICS: "DeleteTopics", OFFSET_FOR_LEADER_EPOCH: "OffsetForLeaderEpoch",
         DESCRIBE_ACLS: "DescribeAcls", CREATE_ACLS: "CreateAcls", DELETE_ACLS: "DeleteAcls",
         DESCRIBE_CONFIGS: "DescribeConfigs", DESCRIBE_LOG_DIRS: "DescribeLogDirs"}
# Kafka 4.4's first served version of each (its message definitions' validVersions).
MINIMUMS = {CREATE_TOPICS: 2, DELETE_TOPICS: 1, OFFSET_FOR_LEADER_EPOCH: 2, DESCRIBE_ACLS: 1, CREATE_ACLS: 1,
            DELETE_ACLS: 1, DESCRIBE_CONFIGS: 1, DESCRIBE_LOG_DIRS: 1}
TOPIC_RESOURCE, LITERAL, ANY, READ, ALLOW = 2, 3, 1, 3, 3
ANON = "User:ANONYMOUS"


# -- the retired versions' bodies, encoded by hand (Kafka 3.x's definitions; all non-flexible) ------

def _string(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _array(items: list[bytes]) -> bytes:
    return struct.pack(">i", len(items)) + b"".join(items)


def create_topics_body(version: int, topic: str) -> bytes:
    """[name, num_partitions, replication_factor, assignments [], configs []], timeout_ms; v1: validate_only."""
    topic_entry = _string(topic) + struct.pack(">ih", 1, 1) + _array([]) + _array([])
    body = _array([topic_entry]) + struct.pack(">i", 5000)
    return body + (b"\x00" if version >= 1 else b"")


def delete_topics_body(topic: str) -> bytes:
    return _array([_string(topic)]) + struct.pack(">i", 5000)


def offset_for_leader_epoch_body(topic: str) -> bytes:
    """v0 and v1 alike: [topic, [partition, leader_epoch]]."""
    return _array([_string(topic) + _array([struct.pack(">ii", 0, 0)])])


def acl_filter_v0(topic: str | None) -> bytes:
    """v0's filter has no pattern type (LITERAL implied): type, name, principal, host, operation, permission."""
    return (struct.pack(">b", TOPIC_RESOURCE if topic else ANY) + _string(topic) + _string(None) + _string(None)
            + struct.pack(">bb", ANY, ANY))


def create_acls_body(topic: str) -> bytes:
    creation = (struct.pack(">b", TOPIC_RESOURCE) + _string(topic) + _string(ANON) + _string("*")
                + struct.pack(">bb", READ, ALLOW))
    return _array([creation])


def describe_configs_body(topic: str) -> bytes:
    return _array([struct.pack(">b", TOPIC_RESOURCE) + _string(topic) + struct.pack(">i", -1)])  # every key


def describe_log_dirs_body() -> bytes:
    return struct.pack(">i", -1)  # every partition


def frame(api: int, version: int, body: bytes) -> bytes:
    header = bytearray()
    encode_request_header(header, api, version, 1, "retired-version-test", False)
    return struct.pack(">i", len(header) + len(body)) + bytes(header) + body


def closes(target: Target, api: int, version: int, body: bytes) -> bool:
    with WireClient(target.host, target.port) as c:
        c.send_raw(frame(api, version, body))
        return c.is_closed_by_peer()


# -- what the requests could have changed ---------------------------------------------------------

def metadata_codes(c: WireClient, topics: list[str]) -> list[int]:
    md = c.request(3, 12, {"topics": [{"name": t, "topic_id": None} for t in topics],
                           "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    by_name = {t["name"]: t["error_code"] for t in md["topics"]}
    return [by_name[t] for t in topics]


def end_offset(c: WireClient, topic: str) -> int:
    resp = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    p = resp["topics"][0]["partitions"][0]
    assert p["error_code"] == 0, p
    return p["offset"]


def describe_acls(c: WireClient) -> tuple[int, list[Any]]:
    resp = c.request(DESCRIBE_ACLS, 3, {"resource_type_filter": ANY, "resource_name_filter": None,
                                        "pattern_type_filter": ANY, "principal_filter": None, "host_filter": None,
                                        "operation": ANY, "permission_type": ANY})
    return resp["error_code"], [(r["resource_name"], len(r["acls"])) for r in resp["resources"]]


def advertised_minimums(c: WireClient) -> dict[int, int]:
    resp = c.request(18, 3, {"client_software_name": "retired-test", "client_software_version": "1"})
    assert resp["error_code"] == 0
    return {k["api_key"]: k["min_version"] for k in resp["api_keys"] if k["api_key"] in MINIMUMS}


def retired_requests(keep: str, absent: dict[int, str]) -> list[tuple[int, int, bytes]]:
    """Every retired version of these APIs, aimed at state a served version would change: CreateTopics
    v0/v1 name a topic that does not exist, DeleteTopics v0 and CreateAcls/DeleteAcls v0 the topic
    with records."""
    return [(CREATE_TOPICS, 0, create_topics_body(0, absent[0])),
            (CREATE_TOPICS, 1, create_topics_body(1, absent[1])),
            (DELETE_TOPICS, 0, delete_topics_body(keep)),
            (OFFSET_FOR_LEADER_EPOCH, 0, offset_for_leader_epoch_body(keep)),
            (OFFSET_FOR_LEADER_EPOCH, 1, offset_for_leader_epoch_body(keep)),
            (DESCRIBE_ACLS, 0, acl_filter_v0(None)),
            (CREATE_ACLS, 0, create_acls_body(keep)),
            (DELETE_ACLS, 0, _array([acl_filter_v0(keep)])),
            (DESCRIBE_CONFIGS, 0, describe_configs_body(keep)),
            (DESCRIBE_LOG_DIRS, 0, describe_log_dirs_body())]


# -- the comparison ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    with kafka_and_odradek(tmp_path_factory) as targets:
        yield targets


def test_retired_versions_close_the_connection_and_change_nothing(targets: dict[str, Target]) -> None:
    def scenario(target: Target) -> dict[str, Any]:
        keep = unique("retired-keep")
        absent = {0: unique("retired-create-v0"), 1: unique("retired-create-v1")}
        create_topic(target, keep)
        with WireClient(target.host, target.port) as c:
            produced = c.request(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
                {"name": keep, "partition_data": [{"index": 0, "records": wrap(records(3), 3)}]}]})
            assert produced["responses"][0]["partition_responses"][0]["error_code"] == 0, produced
            acls_before = describe_acls(c)
        out: dict[str, Any] = {}
        log_path = Path(target.broker.log_path)
        log_start = log_path.stat().st_size  # the shared Kafka's log holds other tests' lines too
        for api, version, body in retired_requests(keep, absent):
            out[f"{NAMES[api]} v{version} closed"] = closes(target, api, version, body)
        with WireClient(target.host, target.port) as c:  # a new connection is served as ever
            out["minimums"] = advertised_minimums(c)
            out["topics"] = metadata_codes(c, [keep, absent[0], absent[1]])
            out["records kept"] = end_offset(c, keep)
            out["acls unchanged"] = describe_acls(c) == acls_before
        with open(log_path, "rb") as f:
            f.seek(log_start)
            log = f.read().decode(errors="replace")
        out["logged"] = [bool(re.search(_refusal_line(target, api, version), log))
                         for api, version, _ in retired_requests(keep, absent)]
        return out

    results = {name: scenario(targets[name]) for name in TARGETS}
    assert results["odradek"] == results["kafka"]
    result = results["kafka"]
    assert all(v for k, v in result.items() if k.endswith(" closed")), result
    assert result["minimums"] == MINIMUMS
    assert result["topics"] == [0, 3, 3]  # keep still there; neither CreateTopics made its topic
    assert result["records kept"] == 3
    assert result["acls unchanged"] is True
    assert all(result["logged"]), result["logged"]


def _refusal_line(target: Target, api: int, version: int) -> str:
    """The line each broker logs for the refusal (Kafka: SocketServer's; Odradek: the dispatcher's)."""
    if target.is_odradek:
        return re.escape(f"{NAMES[api]} v{version} not supported")
    return rf"Received request for api with key {api} \(\w+\) and unsupported version {version}"


def test_retired_acl_versions_change_no_acl_with_an_authorizer(broker_factory) -> None:
    """Odradek with StandardAuthorizer (the shared Kafka 4.4 has none, so the comparison above sees
    SECURITY_DISABLED on both): CreateAcls v0 and DeleteAcls v0 close the connection, and the ACLs
    stay as v1-3 left them."""
    b = broker_factory({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                        "super.users": ANON})
    topic = unique("retired-acl")
    with WireClient(b.host, b.port) as c:
        made = c.request(CREATE_ACLS, 1, {"creations": [{
            "resource_type": TOPIC_RESOURCE, "resource_name": topic, "resource_pattern_type": LITERAL,
            "principal": ANON, "host": "*", "operation": READ, "permission_type": ALLOW}]})
        assert made["results"][0]["error_code"] == 0, made
        before = describe_acls(c)
    assert before == (0, [(topic, 1)])
    target = Target("odradek", b.host, b.port, b)
    assert closes(target, CREATE_ACLS, 0, create_acls_body(unique("retired-acl-new")))
    assert closes(target, DELETE_ACLS, 0, _array([acl_filter_v0(topic)]))
    with WireClient(b.host, b.port) as c:
        assert describe_acls(c) == before
    log = b.log_text()
    assert "CreateAcls v0 not supported" in log and "DeleteAcls v0 not supported" in log
