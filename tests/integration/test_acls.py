"""ACLs against the real daemon: CreateAcls/DescribeAcls/DeleteAcls over the wire, SECURITY_DISABLED
without an authorizer, and requests refused without the ACL then allowed with exactly it.

On PLAINTEXT every connection is User:ANONYMOUS, so a broker started with
super.users=User:ANONYMOUS sets up state and ACLs; the same data dir is then restarted without the
super user, and the ACLs (kept by the controller's metadata log) decide.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.support.broker_process import REPO
from tests.support.wire import WireClient, create_topic

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC, GROUP, CLUSTER = 2, 3, 4
LITERAL, PREFIXED = 3, 4
READ, WRITE, CREATE, DELETE, DESCRIBE = 3, 4, 5, 6, 8
DENY, ALLOW = 2, 3
ANON = "User:ANONYMOUS"


def creation(rtype: int, name: str, op: int, perm: int = ALLOW, pattern: int = LITERAL, principal: str = ANON) -> dict:
    return {"resource_type": rtype, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": "*", "operation": op, "permission_type": perm}


def describe_all(c: WireClient) -> dict:
    return c.request(29, 3, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                             "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})


def produce(c: WireClient, topic: str) -> int:
    from tests.support.bad_batches import records, wrap

    resp = c.request(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": wrap(records(1), 1)}]}]})
    return resp["responses"][0]["partition_responses"][0]["error_code"]


def end_offset(c: WireClient, topic: str) -> int:
    resp = c.request(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    p = resp["topics"][0]["partitions"][0]
    assert p["error_code"] == 0, p
    return p["offset"]


def test_acl_apis_without_authorizer_answer_security_disabled(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        assert c.request(30, 3, {"creations": [creation(TOPIC, "t", READ)]})["results"][0]["error_code"] == 54
        assert describe_all(c)["error_code"] == 54
        resp = c.request(31, 3, {"filters": [{"resource_type_filter": 1, "resource_name_filter": None,
                                              "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                              "operation": 1, "permission_type": 1}]})
        assert resp["filter_results"][0]["error_code"] == 54


def test_unknown_authorizer_class_refused_at_start_up(tmp_path: Path) -> None:
    from odradek.broker.config.broker_config import ConfigError, load_config

    try:
        load_config(None, ["authorizer.class.name=kafka.security.authorizer.AclAuthorizer", "node.id=1"], environ={})
    except ConfigError as e:
        assert "authorizer.class.name" in str(e)
    else:
        raise AssertionError("accepted an unknown authorizer")


def test_acls_round_trip_and_decide_requests(broker_factory, tmp_path: Path) -> None:
    data = tmp_path / "acl-broker"
    admin = broker_factory({"authorizer.class.name": STANDARD, "super.users": ANON}, data_dir=data)
    with WireClient(admin.host, admin.port) as c:
        ids = {name: create_topic(c, name, 1) for name in ("orders", "logs-app", "secret")}
        bad = c.request(30, 3, {"creations": [creation(TOPIC, "", READ), creation(CLUSTER, "other", DESCRIBE),
                                              creation(TOPIC, "x", 1)]})
        assert [r["error_code"] for r in bad["results"]] == [42, 42, 42]
        made = c.request(30, 3, {"creations": [
            creation(TOPIC, "orders", WRITE),
            creation(TOPIC, "logs-", WRITE, pattern=PREFIXED),
            creation(TOPIC, "*", DESCRIBE, principal="User:*"),
            creation(TOPIC, "secret", DESCRIBE, perm=DENY),
            creation(TOPIC, "gone", DELETE),
            creation(CLUSTER, "kafka-cluster", 12),  # IDEMPOTENT_WRITE
        ]})
        assert [r["error_code"] for r in made["results"]] == [0] * 6
        listed = describe_all(c)
        assert listed["error_code"] == 0
        names = sorted((r["resource_name"], r["pattern_type"]) for r in listed["resources"])
        assert names == [("*", LITERAL), ("gone", LITERAL), ("kafka-cluster", LITERAL), ("logs-", PREFIXED),
                         ("orders", LITERAL), ("secret", LITERAL)]
        removed = c.request(31, 3, {"filters": [{"resource_type_filter": TOPIC, "resource_name_filter": "gone",
                                                 "pattern_type_filter": LITERAL, "principal_filter": ANON,
                                                 "host_filter": "*", "operation": 1, "permission_type": 1}]})
        assert [m["resource_name"] for m in removed["filter_results"][0]["matching_acls"]] == ["gone"]
        assert len(describe_all(c)["resources"]) == 5
    admin.stop()

    user = broker_factory({"authorizer.class.name": STANDARD}, data_dir=data)
    with WireClient(user.host, user.port) as c:
        # ACL management needs ALTER/DESCRIBE on the cluster.
        assert describe_all(c)["error_code"] == 31  # CLUSTER_AUTHORIZATION_FAILED
        assert c.request(30, 3, {"creations": [creation(TOPIC, "t", READ)]})["results"][0]["error_code"] == 31
        # Literal and prefixed WRITE allow, nothing else does.
        assert produce(c, "orders") == 0
        assert produce(c, "logs-app") == 0
        assert produce(c, "secret") == 29  # TOPIC_AUTHORIZATION_FAILED
        # Produce v13 names topics by id: WRITE is decided on the id's topic; an id no topic has is
        # UNKNOWN_TOPIC_ID before any authorization, as Kafka 4.4's KafkaApis answers it.
        from tests.support.bad_batches import records, wrap

        no_such_id = uuid.uuid4()
        resp = c.request(0, 13, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
            {"topic_id": i, "partition_data": [{"index": 0, "records": wrap(records(1), 1)}]}
            for i in (ids["orders"], ids["secret"], no_such_id)]})
        assert {t["topic_id"]: t["partition_responses"][0]["error_code"] for t in resp["responses"]} == {
            ids["orders"]: 0, ids["secret"]: 29, no_such_id: 100}
        assert end_offset(c, "orders") == 2  # v9's record and v13's
        # Metadata: DENY DESCRIBE beats the User:* ALLOW on "*"; the listing hides "secret".
        md = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": True})
        assert sorted(t["name"] for t in md["topics"]) == ["logs-app", "orders"]
        ops = {t["name"]: t["topic_authorized_operations"] for t in md["topics"]}
        assert ops["orders"] == (1 << WRITE) | (1 << DESCRIBE)
        md = c.request(3, 12, {"topics": [{"name": "secret", "topic_id": None}, {"name": "newone", "topic_id": None}],
                               "allow_auto_topic_creation": True})
        assert [t["error_code"] for t in md["topics"]] == [29, 29]  # no CREATE: not created
        # By id (v12): refused with the name hidden; an unknown id is UNKNOWN_TOPIC_ID.
        unknown = uuid.uuid4()
        md = c.request(3, 12, {"topics": [{"name": None, "topic_id": i} for i in (ids["secret"], unknown)],
                               "allow_auto_topic_creation": False})
        assert [(t["error_code"], t["name"], t["topic_id"]) for t in md["topics"]] == [
            (29, None, ids["secret"]), (100, None, unknown)]
        # DeleteTopics: describable but no DELETE, and undescribable, both TOPIC_AUTHORIZATION_FAILED;
        # describable and missing: UNKNOWN_TOPIC_OR_PARTITION.
        resp = c.request(20, 6, {"topics": [{"name": n, "topic_id": None} for n in ("orders", "secret", "nope")],
                                 "timeout_ms": 5000})
        assert {r["name"]: r["error_code"] for r in resp["responses"]} == {"orders": 29, "secret": 29, "nope": 3}
        # By id: the name only where the principal may DESCRIBE the topic.
        resp = c.request(20, 6, {"topics": [{"name": None, "topic_id": ids[n]} for n in ("orders", "secret")],
                                 "timeout_ms": 5000})
        assert {r["topic_id"]: (r["name"], r["error_code"]) for r in resp["responses"]} == {
            ids["orders"]: ("orders", 29), ids["secret"]: (None, 29)}
        # Cluster operations are reported only to whom may DESCRIBE the cluster (Kafka): 0 here,
        # though IDEMPOTENT_WRITE is granted.
        resp = c.request(60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1})
        assert resp["error_code"] == 0 and resp["cluster_authorized_operations"] == 0
        # Groups: no ACL on the group.
        resp = c.request(10, 3, {"key": "g1", "key_type": 0})
        assert resp["error_code"] == 30  # GROUP_AUTHORIZATION_FAILED
        resp = c.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 1000, "producer_id": -1,
                                 "producer_epoch": -1})
        assert resp["error_code"] == 0  # idempotent producer: IDEMPOTENT_WRITE (or WRITE on a topic, KIP-679)
    user.stop()

    admin = broker_factory({"authorizer.class.name": STANDARD, "super.users": ANON}, data_dir=data)
    with WireClient(admin.host, admin.port) as c:
        # Nothing changed by the refused requests: "secret" empty (v9 and v13 refused), still there,
        # "newone" never made; "orders" has the v9 and the v13 record.
        assert end_offset(c, "secret") == 0 and end_offset(c, "orders") == 2
        md = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False})
        assert sorted(t["name"] for t in md["topics"]) == ["logs-app", "orders", "secret"]
    admin.stop()


def test_allow_everyone_if_no_acl_found(broker_factory) -> None:
    b = broker_factory({"authorizer.class.name": STANDARD, "allow.everyone.if.no.acl.found": "true"})
    with WireClient(b.host, b.port) as c:
        create_topic(c, "free", 1)
        assert produce(c, "free") == 0


def kafka_acls(args: list[str]) -> subprocess.CompletedProcess:
    """bin/kafka-acls (a link to bin/kafka-tool), as a user runs it."""
    env = dict(os.environ, ODRADEK_PYTHON=sys.executable)
    proc = subprocess.run([str(REPO / "bin" / "kafka-acls"), *args], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, f"kafka-acls {args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_kafka_acls_cli_and_confluent_client(broker_factory, tmp_path: Path) -> None:
    from tests.support.real_kafka import require_toolchain

    require_toolchain()
    data = tmp_path / "cli-broker"
    admin = broker_factory({"authorizer.class.name": STANDARD, "super.users": ANON}, data_dir=data)
    b = admin.bootstrap
    with WireClient(admin.host, admin.port) as c:
        create_topic(c, "pay-in", 1)
    kafka_acls(["--bootstrap-server", b, "--add", "--allow-principal", "User:*", "--operation", "Write",
                            "--operation", "Describe", "--topic", "pay-", "--resource-pattern-type", "prefixed"])
    kafka_acls(["--bootstrap-server", b, "--add", "--deny-principal", ANON, "--operation", "Describe",
                            "--group", "g", "--transactional-id", "tx"])
    kafka_acls(["--bootstrap-server", b, "--add", "--allow-principal", ANON, "--operation", "Describe",
                            "--cluster"])
    out = kafka_acls(["--bootstrap-server", b, "--list"]).stdout
    assert "name=pay-, patternType=PREFIXED" in out and "operation=WRITE" in out, out
    assert "resourceType=GROUP" in out and "permissionType=DENY" in out and "resourceType=CLUSTER" in out, out
    kafka_acls(["--bootstrap-server", b, "--remove", "--force", "--cluster"])
    out = kafka_acls(["--bootstrap-server", b, "--list", "--cluster"]).stdout
    assert "operation=DESCRIBE" not in out, out  # the cluster's only ACL is gone
    admin.stop()

    user = broker_factory({"authorizer.class.name": STANDARD}, data_dir=data)
    from confluent_kafka import KafkaError, Producer

    errors: list = []
    p = Producer({"bootstrap.servers": user.bootstrap, "enable.idempotence": False, "message.timeout.ms": 5000})
    p.produce("pay-in", b"ok", on_delivery=lambda err, msg: errors.append(err))
    p.produce("other", b"no", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    codes = sorted(str(e.code()) if e is not None else "ok" for e in errors)
    assert "ok" in codes, errors
    assert any(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in errors), errors


def test_java_client_sees_topic_and_group_authorization_exceptions(broker_factory, tmp_path: Path) -> None:
    from tests.support.java_tools import DriverError, JavaDriver
    from tests.support.real_kafka import require_toolchain

    require_toolchain()
    data = tmp_path / "java-broker"
    admin = broker_factory({"authorizer.class.name": STANDARD, "super.users": ANON,
                            "group.initial.rebalance.delay.ms": "0"}, data_dir=data)
    with WireClient(admin.host, admin.port) as c:
        for topic in ("j-ok", "j-no"):
            create_topic(c, topic, 1)
        made = c.request(30, 3, {"creations": [creation(TOPIC, "j-ok", WRITE), creation(TOPIC, "j-ok", READ)]})
        assert [r["error_code"] for r in made["results"]] == [0, 0]
        for _ in range(50):  # the first FindCoordinator creates __consumer_offsets
            if c.request(10, 3, {"key": "jg", "key_type": 0})["error_code"] == 0:
                break
            time.sleep(0.2)
    admin.stop()

    user = broker_factory({"authorizer.class.name": STANDARD, "group.initial.rebalance.delay.ms": "0"},
                          data_dir=data)
    with JavaDriver(user.bootstrap) as driver:
        # Idempotent producer: InitProducerId passes with WRITE on some topic (KIP-679).
        assert driver.call("produce", topic="j-ok", count=3)["sent"] == 3
        try:
            driver.call("produce", topic="j-no", count=1, config={"max.block.ms": "10000"})
        except DriverError as e:
            assert e.error_class == "TopicAuthorizationException", e
        else:
            raise AssertionError("produced to a topic without WRITE")
        try:
            driver.call("consume_subscribe", topic="j-ok", group="jg", max_records=3, timeout_ms=10000)
        except DriverError as e:
            assert e.error_class == "GroupAuthorizationException", e
        else:
            raise AssertionError("joined a group without READ")


def test_unknown_codes_close_the_connection_or_answer_invalid_request(broker_factory) -> None:
    b = broker_factory({"authorizer.class.name": STANDARD, "super.users": ANON})
    any_filter = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                  "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
    # Code 0 (UNKNOWN) fails Kafka's request parsing: the connection is closed, nothing stored.
    for api, body in ((30, {"creations": [creation(0, "t", READ)]}),
                      (30, {"creations": [creation(TOPIC, "t", 0)]}),
                      (29, {**any_filter, "operation": 0}),
                      (31, {"filters": [{**any_filter, "permission_type": 0}]})):
        with WireClient(b.host, b.port) as c:
            corr, frame = c.encode_request(api, 3, body)
            c.send_raw(frame)
            assert c.is_closed_by_peer(), (api, body)
    with WireClient(b.host, b.port) as c:
        # Another code no enum knows reads as UNKNOWN: INVALID_REQUEST for that creation only.
        made = c.request(30, 3, {"creations": [creation(99, "t", READ), creation(TOPIC, "t", 99),
                                               creation(TOPIC, "ok", READ)]})
        assert [r["error_code"] for r in made["results"]] == [42, 42, 0]
        assert [r["resource_name"] for r in describe_all(c)["resources"]] == ["ok"]
        # ...matches nothing in DescribeAcls, and fails that filter of DeleteAcls.
        assert c.request(29, 3, {**any_filter, "resource_type_filter": 99})["resources"] == []
        resp = c.request(31, 3, {"filters": [{**any_filter, "pattern_type_filter": 99}, any_filter]})
        assert [r["error_code"] for r in resp["filter_results"]] == [42, 0]
        assert describe_all(c)["resources"] == []


def test_every_advertised_acl_api_version_round_trips(broker_factory) -> None:
    """CreateAcls/DescribeAcls/DeleteAcls v1-3 (ApiVersions advertises them all; v0, without a pattern
    type, was retired by Kafka 4.0, KIP-896: tests/integration/test_kafka_4_4_retired_versions.py), v2 is the
    first flexible version."""
    b = broker_factory({"authorizer.class.name": STANDARD, "super.users": ANON})
    with WireClient(b.host, b.port) as c:
        for version in range(1, 4):
            name = f"v{version}-topic"
            made = creation(TOPIC, name, READ, principal=f"User:u{version}")
            any_filter = {"resource_type_filter": TOPIC, "resource_name_filter": name, "pattern_type_filter": LITERAL,
                          "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}
            assert c.request(30, version, {"creations": [made]})["results"][0]["error_code"] == 0, version
            listed = c.request(29, version, any_filter)
            assert listed["error_code"] == 0
            assert [(r["resource_name"], [a["principal"] for a in r["acls"]]) for r in listed["resources"]] == [
                (name, [f"User:u{version}"])], (version, listed)
            removed = c.request(31, version, {"filters": [any_filter]})["filter_results"][0]
            assert removed["error_code"] == 0 and [m["resource_name"] for m in removed["matching_acls"]] == [name]
            assert c.request(29, version, any_filter)["resources"] == []
