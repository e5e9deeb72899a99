"""What ApiVersions advertises where Kafka 4.4's differs from what it serves, on real sockets.

Produce: advertised from v0, served from v3 (KAFKA-18659, Kafka's
ApiKeys.PRODUCE_API_VERSIONS_RESPONSE_MIN_VERSION = 0). A Produce v0, v1 or v2 request is refused
by Kafka 4.4's SocketServer while it parses the header (UnsupportedVersionException, "unsupported
version"): the connection is closed without an answer and nothing is appended, whatever records
the request carries.

AlterPartition (56): what a leader sends the controller's node to change an ISR, over the
inter-broker listener. Kafka 4.4 serves it on controller listeners only, never advertises it on
broker listeners, and a broker listener closes the connection of a request for an API it does not
serve (SocketServer: "Received request for disabled api"). Odradek serves it on its inter-broker
listener only and advertises it nowhere; the cluster test shows leaders still shrink and expand
ISRs through it when clients have a listener of their own.

ControlledShutdown (7): retired in Kafka 4.0 (no valid version; KRaft brokers ask to shut down in
their heartbeat) and not sent by Odradek brokers either (they leave through etcd: deregister, and
the controller moves their leaderships). Not advertised, not served: the connection closes.

The client-listener tests run against a real Apache Kafka 4.4 too (tests/support/real_kafka.py),
whose broker log names each refusal; Odradek's broker there has a client listener of its own.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.api.handlers import produce
from odradek.broker.launcher.cluster_launcher import free_port
from odradek.protocol.errors import ErrorCode
from tests.support.bad_batches import records, wrap
from tests.support.broker_process import BrokerProcess
from tests.support.cluster import cluster_or_skip
from tests.support.real_kafka import TARGETS, require_toolchain, shared_kafka, unique, wait_until_led
from tests.support.wire import WireClient, create_topic

PRODUCE, CONTROLLED_SHUTDOWN, SASL_HANDSHAKE, ALTER_PARTITION = 0, 7, 17, 56


def two_listeners(internal: int, external: int) -> dict[str, str]:
    """INTERNAL (other brokers: inter.broker.listener.name) and EXTERNAL (clients only)."""
    return {
        "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
        "advertised.listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
    }


@dataclass
class ClientListener:
    """A listener clients use, on a real Kafka 4.4 or on Odradek, and the log of its broker."""

    target: str
    host: str
    port: int
    log_text: Callable[[], str]

    def client(self) -> WireClient:
        return WireClient(self.host, self.port)


@pytest.fixture(scope="module", params=TARGETS)
def listener(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClientListener]:
    if request.param == "kafka":
        require_toolchain()
        kafka = shared_kafka()
        yield ClientListener("kafka", kafka.host, kafka.port, lambda: kafka.log_path.read_text(errors="replace"))
        return
    internal, external = free_port(), free_port()
    b = BrokerProcess(tmp_path_factory.mktemp("odradek"), port=internal,
                      overrides=two_listeners(internal, external)).start()
    try:
        yield ClientListener("odradek", "127.0.0.1", external, b.log_text)
    finally:
        b.kill()


def _create_topic(listener: ClientListener, topic: str) -> None:
    """CreateTopics, then until the partition's leader serves it (Kafka answers CreateTopics once the
    controller committed it; its broker leads the partition a moment later)."""
    with listener.client() as c:
        resp = c.request(19, 7, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
                                 "timeout_ms": 5000})
        assert resp["topics"][0]["error_code"] == 0, resp
        wait_until_led(c, topic, 1)


def _closes(listener: ClientListener, api: int, version: int, body: dict) -> bool:
    with listener.client() as c:
        c.send_raw(c.encode_request(api, version, body)[1])
        return c.is_closed_by_peer()


def _advertised(c: WireClient, version: int) -> dict[int, tuple[int, int]]:
    body = {} if version < 3 else {"client_software_name": "t", "client_software_version": "1"}
    resp = c.request(18, version, body)
    assert resp["error_code"] == 0
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}


def _message_set_v0(value: bytes) -> bytes:
    """One message of format v0 (what Produce v0-1 clients send): offset, size, then crc over magic..end."""
    body = struct.pack(">bbi", 0, 0, -1) + struct.pack(">i", len(value)) + value  # magic, attributes, null key
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


def _produce_body(topic: str, batch: bytes) -> dict:
    return {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}


def _legacy_produce_frame(version: int, topic: str, records: bytes) -> bytes:
    """A whole Produce v0-2 request, size prefix included, encoded by hand: Kafka 4.4's message
    definitions (which our codecs come from) no longer describe these versions. Header v1 (api key,
    version, correlation id, client id), then acks int16, timeout_ms int32, and the topic array
    [name string, partition array [index int32, records bytes]]; v3 put transactional_id first."""
    def string(text: str) -> bytes:
        data = text.encode()
        return struct.pack(">h", len(data)) + data

    body = (struct.pack(">hhi", PRODUCE, version, 7) + string("legacy-client")
            + struct.pack(">hi", 1, 5000) + struct.pack(">i", 1) + string(topic)
            + struct.pack(">i", 1) + struct.pack(">ii", 0, len(records)) + records)
    return struct.pack(">i", len(body)) + body


def _legacy_produce_closes(listener: ClientListener, version: int, topic: str, records: bytes) -> bool:
    with listener.client() as c:
        c.send_raw(_legacy_produce_frame(version, topic, records))
        return c.is_closed_by_peer()


def test_client_listener_advertises_what_kafka_4_4_does(listener: ClientListener) -> None:
    with listener.client() as c:
        for version in (0, 3):
            advertised = _advertised(c, version)
            assert advertised[PRODUCE][0] == 0  # though only v3 and later are served
            assert advertised[SASL_HANDSHAKE] == (0, 1)
            assert CONTROLLED_SHUTDOWN not in advertised and ALTER_PARTITION not in advertised
            if listener.target == "odradek":
                assert advertised[PRODUCE] == (0, produce.VERSIONS[1])


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_close_the_connection_and_append_nothing(listener: ClientListener, version: int) -> None:
    topic = unique(f"legacy-produce-v{version}")
    _create_topic(listener, topic)
    # Both payloads: the legacy message format these versions carried, and a v2 batch (which a
    # Kafka 3.x broker took in a v2 request); Kafka 4.4 never reads past the header.
    for payload in (_message_set_v0(b"legacy"), wrap(records(3), 3)):
        assert _legacy_produce_closes(listener, version, topic, payload)
    with listener.client() as c:
        resp = c.request(PRODUCE, 3, _produce_body(topic, wrap(records(2), 2)))
        partition = resp["responses"][0]["partition_responses"][0]
        assert partition["error_code"] == 0 and partition["base_offset"] == 0  # the log was empty
    expected = {"kafka": f"Received request for api with key 0 (Produce) and unsupported version {version}",
                "odradek": f"Produce v{version} not supported"}
    assert expected[listener.target] in listener.log_text()


def test_controller_apis_close_a_client_listener_connection(listener: ClientListener) -> None:
    topic = unique("controller-apis")
    _create_topic(listener, topic)
    assert _closes(listener, CONTROLLED_SHUTDOWN, 3, {"broker_id": 1, "broker_epoch": -1})
    assert _closes(listener, ALTER_PARTITION, 3, {"broker_id": 1, "broker_epoch": -1, "topics": []})
    expected = {"kafka": ["Unsupported api with key 7 (ControlledShutdown)",
                          "Received request for disabled api with key 56 (ALTER_PARTITION)"],
                "odradek": ["unknown or unsupported api key 7",
                            "AlterPartition (api key 56) is served on the inter-broker listener INTERNAL only"]}
    log = listener.log_text()
    assert all(line in log for line in expected[listener.target]), expected[listener.target]
    with listener.client() as c:  # the broker serves that listener on
        md = c.request(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
        assert md["topics"][0]["partitions"][0]["leader_id"] >= 0


def _alter_partition_body(topic_id: Any, leader_epoch: int, partition_epoch: int, isr: list[int]) -> dict:
    return {"broker_id": 1, "broker_epoch": -1, "topics": [{"topic_id": topic_id, "partitions": [{
        "partition_index": 0, "leader_epoch": leader_epoch, "partition_epoch": partition_epoch,
        "leader_recovery_state": 0, "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": -1} for b in isr]}]}]}


def test_alter_partition_is_served_on_the_inter_broker_listener(tmp_path: Path) -> None:
    """Where leaders send it (Odradek only: Kafka serves it on controller listeners, which this test
    cannot reach as a client); still not advertised there."""
    internal, external = free_port(), free_port()
    b = BrokerProcess(tmp_path, port=internal, overrides=two_listeners(internal, external)).start()
    try:
        with WireClient("127.0.0.1", internal) as c:
            for version in (0, 3):
                advertised = _advertised(c, version)
                assert CONTROLLED_SHUTDOWN not in advertised and ALTER_PARTITION not in advertised
            topic_id = create_topic(c, "isr-of-one", 1)
            md = c.request(3, 12, {"topics": [{"name": "isr-of-one", "topic_id": None}]})
            epoch = md["topics"][0]["partitions"][0]["leader_epoch"]
            # The controller's answer: the ISR as it stands, and its epochs checked.
            unchanged = c.request(ALTER_PARTITION, 3, _alter_partition_body(topic_id, epoch, 0, [1]))["topics"][0]
            assert unchanged["partitions"][0]["error_code"] == 0 and unchanged["partitions"][0]["isr"] == [1]
            fenced = c.request(ALTER_PARTITION, 3, _alter_partition_body(topic_id, epoch - 1, 0, [1]))["topics"][0]
            assert fenced["partitions"][0]["error_code"] == 74  # FENCED_LEADER_EPOCH
    finally:
        b.kill()


def test_controlled_shutdown_is_served_nowhere(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as c:  # the inter-broker listener too
        assert CONTROLLED_SHUTDOWN not in _advertised(c, 3)
    for version in (0, 1, 2, 3):
        body = {"broker_id": 1, "broker_epoch": -1}
        with WireClient(broker.host, broker.port) as c:
            c.send_raw(c.encode_request(CONTROLLED_SHUTDOWN, version, body)[1])
            assert c.is_closed_by_peer()
    with WireClient(broker.host, broker.port) as c:  # still serving; its leadership stays
        create_topic(c, "stays", 1)
        md = c.request(3, 12, {"topics": [{"name": "stays", "topic_id": None}]})
        assert md["topics"][0]["partitions"][0]["leader_id"] == 1


def _partition(c: Any, node: int, topic: str) -> dict:
    md = c.request(node, "Metadata", 12, {"topics": [{"name": topic, "topic_id": None}]}, timeout=2.0)
    return md["topics"][0]["partitions"][0]


def _produce(c: Any, node: int, topic: str, acks: int) -> int:
    reply = c.request(node, "Produce", 9, {"transactional_id": None, "acks": acks, "timeout_ms": 10000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": wrap(records(1), 1)}]}]}, timeout=15)
    return int(reply["responses"][0]["partition_responses"][0]["error_code"])


def test_cluster_leaders_send_it_over_the_inter_broker_listener(tmp_path: Path) -> None:
    """Three brokers, clients on EXTERNAL: the leader (not the controller) shrinks the ISR when its
    follower stops (SIGSTOP) and lags past replica.lag.time.max.ms, and expands it when it is back, each by an
    AlterPartition to the controller's node. The controller's Metadata shows each change."""
    c = cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": "30000", "replica.lag.time.max.ms": "2000"})
    externals = {n: free_port() for n in c.node_ids}
    for n in c.node_ids:
        c.broker(n).overrides.update(two_listeners(c.broker(n).port, externals[n]))
    with c:
        assert c.wait_members(30), c.logs()
        controller = c.controller_id()
        leader, follower = [n for n in c.node_ids if n != controller]
        for n in c.node_ids:
            with WireClient("127.0.0.1", externals[n]) as w:
                advertised = _advertised(w, 3)
                assert CONTROLLED_SHUTDOWN not in advertised and ALTER_PARTITION not in advertised
        reply = c.request(controller, "CreateTopics", 7, {"topics": [{
            "name": "isr-wire", "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": 0, "broker_ids": [leader, follower]}], "configs": []}],
            "timeout_ms": 10000})
        assert reply["topics"][0]["error_code"] == 0, reply
        assert c.wait_until(lambda: _partition(c, controller, "isr-wire")["isr_nodes"] == [leader, follower], 30), \
            c.logs()
        # Kafka's rule (Replica.isCaughtUp): a follower at the leader's log end is never out of sync,
        # however long it has been silent. So the follower first fetches a record (acks=all), then a
        # record it cannot fetch is appended while it is stopped: from then on it lags.
        # The leader takes the partition up from its own watch of the metadata, after the controller
        # shows it: until then the answer is NOT_LEADER_OR_FOLLOWER, which a client retries.
        deadline = time.monotonic() + 30
        while (code := _produce(c, leader, "isr-wire", -1)) == ErrorCode.NOT_LEADER_OR_FOLLOWER \
                and time.monotonic() < deadline:
            time.sleep(0.2)
        assert code == 0, c.logs()
        c.pause(follower)
        try:
            assert _produce(c, leader, "isr-wire", 1) == 0
            assert c.wait_until(lambda: _partition(c, controller, "isr-wire")["isr_nodes"] == [leader], 20), \
                (_partition(c, controller, "isr-wire"), c.logs())
        finally:
            c.resume(follower)
        assert c.wait_until(lambda: sorted(_partition(c, controller, "isr-wire")["isr_nodes"]) ==
                            sorted([leader, follower]), 30), (_partition(c, controller, "isr-wire"), c.logs())
        assert "AlterPartition of isr-wire-0" not in c.log_text(leader)  # no refusal, no retry
        assert "served on the inter-broker listener" not in c.log_text(controller)
