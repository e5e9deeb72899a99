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
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from broker.cluster_launcher import free_port
from broker.handlers import produce
from tests.support.bad_batches import records, wrap
from tests.support.broker_process import BrokerProcess
from tests.support.cluster import cluster_or_skip
from tests.support.wire import WireClient, create_topic

PRODUCE, CONTROLLED_SHUTDOWN, ALTER_PARTITION = 0, 7, 56


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


def test_produce_is_advertised_from_v0_whatever_the_api_versions_version(broker: BrokerProcess) -> None:
    with WireClient(broker.host, broker.port) as c:
        for version in (0, 3):
            assert _advertised(c, version)[PRODUCE] == (0, produce.VERSIONS[1])


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_close_the_connection_and_append_nothing(broker: BrokerProcess, version: int) -> None:
    topic = f"legacy-produce-v{version}"
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, topic, 1)
    # Both payloads: the legacy message format these versions carried, and a v2 batch (which a
    # Kafka 3.x broker took in a v2 request); Kafka 4.4 never reads past the header.
    for payload in (_message_set_v0(b"legacy"), wrap(records(3), 3)):
        with WireClient(broker.host, broker.port) as c:
            _, data = c.encode_request(PRODUCE, version, _produce_body(topic, payload))
            c.send_raw(data)
            assert c.is_closed_by_peer()
    with WireClient(broker.host, broker.port) as c:
        resp = c.request(PRODUCE, 3, _produce_body(topic, wrap(records(2), 2)))
        partition = resp["responses"][0]["partition_responses"][0]
        assert partition["error_code"] == 0 and partition["base_offset"] == 0  # the log was empty
    assert f"Produce v{version} not supported" in broker.log_text()


def two_listeners(internal: int, external: int) -> dict[str, str]:
    """INTERNAL (other brokers: inter.broker.listener.name) and EXTERNAL (clients only)."""
    return {
        "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
        "advertised.listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
        "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
    }


def _alter_partition_body(topic_id: Any, leader_epoch: int, partition_epoch: int, isr: list[int]) -> dict:
    return {"broker_id": 1, "broker_epoch": -1, "topics": [{"topic_id": topic_id, "partitions": [{
        "partition_index": 0, "leader_epoch": leader_epoch, "partition_epoch": partition_epoch,
        "leader_recovery_state": 0, "new_isr_with_epochs": [{"broker_id": b, "broker_epoch": -1} for b in isr]}]}]}


def _closes(port: int, api: int, body: dict) -> bool:
    with WireClient("127.0.0.1", port) as c:
        c.send_raw(c.encode_request(api, 3, body)[1])
        return c.is_closed_by_peer()


def test_alter_partition_is_served_on_the_inter_broker_listener_only(tmp_path: Path) -> None:
    internal, external = free_port(), free_port()
    b = BrokerProcess(tmp_path, port=internal, overrides=two_listeners(internal, external)).start()
    try:
        for port in (internal, external):
            with WireClient("127.0.0.1", port) as c:
                for version in (0, 3):
                    advertised = _advertised(c, version)
                    assert CONTROLLED_SHUTDOWN not in advertised and ALTER_PARTITION not in advertised
        with WireClient("127.0.0.1", internal) as c:
            topic_id = create_topic(c, "isr-of-one", 1)
            md = c.request(3, 12, {"topics": [{"name": "isr-of-one", "topic_id": None}]})
            epoch = md["topics"][0]["partitions"][0]["leader_epoch"]
            # Served where leaders send it: the controller's answer (the ISR as it stands).
            unchanged = c.request(ALTER_PARTITION, 3, _alter_partition_body(topic_id, epoch, 0, [1]))
            partition = unchanged["topics"][0]["partitions"][0]
            assert partition["error_code"] == 0 and partition["isr"] == [1]
        # A client listener: the connection closes without an answer, as on Kafka's broker listeners.
        assert _closes(external, ALTER_PARTITION, _alter_partition_body(topic_id, epoch, 0, [1]))
        assert "AlterPartition (api key 56) is served on the inter-broker listener INTERNAL only, not on EXTERNAL" \
            in b.log_text()
        with WireClient("127.0.0.1", external) as c:  # the broker serves that listener on
            md = c.request(3, 12, {"topics": [{"name": "isr-of-one", "topic_id": None}]})
            assert md["topics"][0]["partitions"][0]["leader_id"] == 1
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


def test_cluster_leaders_send_it_over_the_inter_broker_listener(tmp_path: Path) -> None:
    """Three brokers, clients on EXTERNAL: the leader (not the controller) shrinks the ISR when its
    follower stops (SIGSTOP past replica.lag.time.max.ms) and expands it when it is back, each by an
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
        c.pause(follower)
        try:
            assert c.wait_until(lambda: _partition(c, controller, "isr-wire")["isr_nodes"] == [leader], 20), \
                (_partition(c, controller, "isr-wire"), c.logs())
        finally:
            c.resume(follower)
        assert c.wait_until(lambda: sorted(_partition(c, controller, "isr-wire")["isr_nodes"]) ==
                            sorted([leader, follower]), 30), (_partition(c, controller, "isr-wire"), c.logs())
        assert "AlterPartition of isr-wire-0" not in c.log_text(leader)  # no refusal, no retry
        assert "served on the inter-broker listener" not in c.log_text(controller)
