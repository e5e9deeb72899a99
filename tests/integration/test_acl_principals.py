"""ACLs decided for named principals over the wire: mutual-TLS clients take their principal from the
certificate (``ssl.principal.mapping.rules``), SASL clients from their login (PLAIN, SCRAM); a super
user administers, hosts match the client's address, and a PLAINTEXT connection stays
User:ANONYMOUS."""

from __future__ import annotations

import ssl
import uuid
from pathlib import Path

from tests.support.bad_batches import records, wrap
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.certs import TestPki
from tests.support.wire import WireClient

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC, WRITE, DESCRIBE, DENY, ALLOW = 2, 4, 8, 2, 3


def acl(name: str, op: int, perm: int, principal: str, host: str = "*") -> dict:
    return {"resource_type": TOPIC, "resource_name": name, "resource_pattern_type": 3, "principal": principal,
            "host": host, "operation": op, "permission_type": perm}


def produce(c: WireClient, topic: str) -> int:
    resp = c.request(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": wrap(records(1), 1)}]}]})
    return resp["responses"][0]["partition_responses"][0]["error_code"]


def test_certificate_principals_super_users_and_hosts(tmp_path: Path) -> None:
    pki = TestPki(tmp_path / "pki")
    server = pki.server()
    plain, mtls = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:{plain},MTLS://127.0.0.1:{mtls}"
    broker = BrokerProcess(tmp_path / "broker", port=plain, overrides={
        "listeners": listeners, "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL",
        **server.broker_props(),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=Clients,.*$/$1/L",
        "authorizer.class.name": STANDARD, "super.users": "User:admin",
    }).start()

    def client(name: str) -> WireClient:
        issued = pki.client(name)
        ctx = ssl.create_default_context(cafile=str(pki.ca_pem))
        ctx.load_cert_chain(str(issued.cert_pem), str(issued.key_pem))
        return WireClient("127.0.0.1", mtls, ssl_context=ctx)

    topic = f"orders-{uuid.uuid4().hex[:6]}"
    try:
        with client("admin") as admin, client("alice") as alice, client("bob") as bob, \
                WireClient("127.0.0.1", plain) as anonymous:
            resp = admin.request(19, 7, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
                                         "timeout_ms": 5000})
            assert resp["topics"][0]["error_code"] == 0  # a super user may do anything
            made = admin.request(30, 3, {"creations": [acl(topic, WRITE, ALLOW, "User:alice")]})
            assert made["results"][0]["error_code"] == 0
            assert produce(alice, topic) == 0
            assert produce(bob, topic) == 29  # TOPIC_AUTHORIZATION_FAILED
            assert produce(anonymous, topic) == 29
            # Only the super user manages ACLs.
            assert alice.request(30, 3, {"creations": [acl(topic, WRITE, ALLOW, "User:bob")]})[
                "results"][0]["error_code"] == 31
            # A DENY for alice from her address overrides her ALLOW; one for another host does not.
            made = admin.request(30, 3, {"creations": [acl(topic, WRITE, DENY, "User:alice", "10.9.9.9")]})
            assert made["results"][0]["error_code"] == 0
            assert produce(alice, topic) == 0
            made = admin.request(30, 3, {"creations": [acl(topic, WRITE, DENY, "User:alice", "127.0.0.1")]})
            assert made["results"][0]["error_code"] == 0
            assert produce(alice, topic) == 29
            end = admin.request(2, 5, {"replica_id": -1, "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
            assert end["topics"][0]["partitions"][0]["offset"] == 2  # only alice's two allowed records
    finally:
        broker.stop()


def test_sasl_principals_plain_and_scram(tmp_path: Path) -> None:
    from odradek.broker.security.sasl.client import scram_upsertion
    from tests.support.sasl import login_plain, login_scram, start_sasl_broker

    b = start_sasl_broker(tmp_path / "sasl", {"authorizer.class.name": STANDARD, "super.users": "User:admin"})
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    try:
        with WireClient(b.host, b.plain_port) as anonymous:
            # SCRAM credentials are managed with ALTER on the cluster: not by User:ANONYMOUS.
            resp = anonymous.request(51, 0, {"deletions": [], "upsertions": [
                scram_upsertion("SCRAM-SHA-512", "carol", "carol-secret", 4096)]})
            assert resp["results"][0]["error_code"] == 31
            with WireClient(b.host, b.sasl_port) as admin:
                assert login_plain(admin, "admin", "admin-secret")["error_code"] == 0
                resp = admin.request(51, 0, {"deletions": [], "upsertions": [
                    scram_upsertion("SCRAM-SHA-512", "carol", "carol-secret", 4096)]})
                assert resp["results"][0]["error_code"] == 0
                resp = admin.request(19, 7, {"topics": [{"name": topic, "num_partitions": 1,
                                                         "replication_factor": 1}], "timeout_ms": 5000})
                assert resp["topics"][0]["error_code"] == 0
                made = admin.request(30, 3, {"creations": [acl(topic, WRITE, ALLOW, "User:alice")]})
                assert made["results"][0]["error_code"] == 0
                with WireClient(b.host, b.sasl_port) as alice, WireClient(b.host, b.sasl_port) as carol:
                    assert login_plain(alice, "alice", "alice-secret")["error_code"] == 0
                    assert login_scram(carol, "SCRAM-SHA-512", "carol", "carol-secret")["error_code"] == 0
                    assert produce(alice, topic) == 0
                    assert produce(carol, topic) == 29
                    assert produce(anonymous, topic) == 29
                    made = admin.request(30, 3, {"creations": [acl(topic, WRITE, ALLOW, "User:carol")]})
                    assert made["results"][0]["error_code"] == 0
                    assert produce(carol, topic) == 0
    finally:
        b.process.kill()
