"""KIP-951 leader discovery on the wire, in a cluster of 3 whose leaders move.

A Produce v10+ partition refused with NOT_LEADER_OR_FOLLOWER, and a Fetch v16+ partition refused
with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH, carries ``current_leader`` (leader id and leader
epoch) and the response's ``node_endpoints`` the leader's host, port and rack (Kafka's
KafkaApis.getCurrentLeader). The responses are decoded here by hand from the bytes (not by the
project's codec, which the broker encodes them with), and the expected leader, epoch and endpoint
are what the cluster's Metadata and the brokers' own settings (listeners, ``broker.rack``) say.

Every path that refuses a partition is covered: a broker hosting no replica (the metadata image), a
follower (the replica manager's leader check), FENCED_LEADER_EPOCH (the leader epoch check), an
acks=-1 produce waiting in purgatory when its leader is moved away, and a partition without a leader
(leader -1 and the epoch, no endpoint). Produce v9 and Fetch v15 carry neither field, as in Kafka.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from odradek.testing.cluster import ClusterProcesses
from tests.support.bad_batches import records, wrap
from tests.support.cluster import cluster_or_skip
from tests.support.wire import WireClient

pytestmark = pytest.mark.timeout(180)

NONE = 0
NOT_LEADER_OR_FOLLOWER = 6
FENCED_LEADER_EPOCH = 74
PRODUCE, FETCH, ELECT_LEADERS, ALTER_REASSIGNMENTS = 0, 1, 43, 45


@contextmanager
def running(tmp_path: Path, lease_ms: int) -> Iterator[ClusterProcesses]:
    """3 brokers in racks rack-1..3; a killed broker's leaderships move after ``lease_ms``."""
    c = cluster_or_skip(tmp_path, 3, {"controller.lease.ttl.ms": str(lease_ms), "replica.lag.time.max.ms": "30000",
                                      "auto.leader.rebalance.enable": "false"})
    for node_id, node in c.brokers.items():
        node.overrides["broker.rack"] = f"rack-{node_id}"
    with c:
        assert c.wait_members(30), c.logs()
        yield c


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcesses]:
    with running(tmp_path, 2000) as c:
        yield c


# --- reading the responses by hand (flexible versions: compact strings, arrays, tagged fields) -----

class Reader:
    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos

    def fixed(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(">" + fmt, self.data, self.pos)
        self.pos += struct.calcsize(">" + fmt)
        return value

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    def string(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def array(self, element: Any) -> list | None:
        n = self.uvarint() - 1
        return None if n < 0 else [element(self) for _ in range(n)]

    def tagged(self, known: dict[int, Any]) -> dict[int, Any]:
        """The tagged fields: each known tag decoded by its reader, which must use its size exactly."""
        out = {}
        for _ in range(self.uvarint()):
            tag, size = self.uvarint(), self.uvarint()
            end = self.pos + size
            if tag in known:
                out[tag] = known[tag](self)
                assert self.pos == end, f"tag {tag}: read {self.pos - end + size} of {size} bytes"
            self.pos = end
        return out


@dataclass
class PartitionAnswer:
    index: int
    error_code: int
    current_leader: tuple[int, int] | None  # (leader id, leader epoch) when the tagged field is there


def leader_and_epoch(r: Reader) -> tuple[int, int]:
    leader, epoch = r.fixed("i"), r.fixed("i")
    r.tagged({})
    return leader, epoch


def node_endpoint(r: Reader) -> tuple[int, str | None, int, str | None]:
    node = (r.fixed("i"), r.string(), r.fixed("i"), r.string())
    r.tagged({})
    return node


def read_produce_response(frame: bytes) -> tuple[list[PartitionAnswer], list | None]:
    """Produce v9-11: (every partition's answer, node_endpoints or None when absent)."""
    r = Reader(frame, 4)
    r.tagged({})  # response header v1

    def partition(r: Reader) -> PartitionAnswer:
        index, code = r.fixed("i"), r.fixed("h")
        r.fixed("q"), r.fixed("q"), r.fixed("q")  # base offset, log append time, log start offset
        r.array(lambda r: (r.fixed("i"), r.string(), r.tagged({})))  # record_errors
        r.string()  # error_message
        tags = r.tagged({0: leader_and_epoch})
        return PartitionAnswer(index, code, tags.get(0))

    def topic(r: Reader) -> list[PartitionAnswer]:
        r.string()
        answers = r.array(partition) or []
        r.tagged({})
        return answers

    topics = r.array(topic) or []
    r.fixed("i")  # throttle_time_ms
    tags = r.tagged({0: lambda r: r.array(node_endpoint)})
    assert r.pos == len(frame), f"{len(frame) - r.pos} bytes left"
    return [p for t in topics for p in t], tags.get(0)


def read_fetch_response(frame: bytes) -> tuple[list[PartitionAnswer], list | None]:
    """Fetch v13-17 (topic ids): (every partition's answer, node_endpoints or None when absent)."""
    r = Reader(frame, 4)
    r.tagged({})
    r.fixed("i"), r.fixed("h"), r.fixed("i")  # throttle_time_ms, error_code, session_id

    def partition(r: Reader) -> PartitionAnswer:
        index, code = r.fixed("i"), r.fixed("h")
        r.fixed("q"), r.fixed("q"), r.fixed("q")  # high watermark, last stable offset, log start
        r.array(lambda r: (r.fixed("q"), r.fixed("q"), r.tagged({})))  # aborted_transactions
        r.fixed("i")  # preferred_read_replica
        size = r.uvarint() - 1
        r.pos += max(size, 0)  # records
        tags = r.tagged({1: leader_and_epoch})
        return PartitionAnswer(index, code, tags.get(1))

    def topic(r: Reader) -> list[PartitionAnswer]:
        r.pos += 16  # topic id
        answers = r.array(partition) or []
        r.tagged({})
        return answers

    topics = r.array(topic) or []
    tags = r.tagged({0: lambda r: r.array(node_endpoint)})
    assert r.pos == len(frame), f"{len(frame) - r.pos} bytes left"
    return [p for t in topics for p in t], tags.get(0)


# --- requests ---------------------------------------------------------------------------------------

def produce_body(topic: str, acks: int = -1, timeout_ms: int = 5000) -> dict:
    return {"acks": acks, "timeout_ms": timeout_ms, "transactional_id": None,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": wrap(records(1), 1)}]}]}


def send(c: ClusterProcesses, node: int, api: int, version: int, body: dict) -> tuple[WireClient, int]:
    client = WireClient(c.broker(node).host, c.broker(node).port, timeout=30)
    corr, data = client.encode_request(api, version, body)
    client.send_raw(data)
    return client, corr


def ask(c: ClusterProcesses, node: int, api: int, version: int, body: dict) -> bytes:
    client, corr = send(c, node, api, version, body)
    with client:
        frame = client.recv_frame()
    assert struct.unpack_from(">i", frame)[0] == corr
    return frame


def produce(c: ClusterProcesses, node: int, topic: str, version: int = 11) -> tuple[list[PartitionAnswer], list | None]:
    return read_produce_response(ask(c, node, PRODUCE, version, produce_body(topic)))


def fetch(c: ClusterProcesses, node: int, topic_id: uuid.UUID, leader_epoch: int = -1,
          version: int = 17) -> tuple[list[PartitionAnswer], list | None]:
    body = {"replica_id": -1, "replica_state": None, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{"topic": "", "topic_id": topic_id, "partitions": [
                {"partition": 0, "current_leader_epoch": leader_epoch, "fetch_offset": 0, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": []}
    return read_fetch_response(ask(c, node, FETCH, version, body))


def create_topic(c: ClusterProcesses, name: str, replicas: list[int]) -> uuid.UUID:
    body = {"name": name, "num_partitions": -1, "replication_factor": -1,
            "assignments": [{"partition_index": 0, "broker_ids": replicas}], "configs": []}
    reply = c.request(c.controller_id(), "CreateTopics", 7, {"topics": [body], "timeout_ms": 10000})
    assert reply["topics"][0]["error_code"] == 0, reply
    return reply["topics"][0]["topic_id"]


def state(c: ClusterProcesses, topic: str, via: int) -> dict:
    md = c.request(via, "Metadata", 12, {"topics": [{"name": topic, "topic_id": None}]})
    return dict(md["topics"][0]["partitions"][0])


def wait_state(c: ClusterProcesses, topic: str, leader: int, isr: int, timeout: float = 30) -> int:
    """Until every live broker says ``leader`` leads with an ISR of ``isr``; returns the leader epoch."""
    def settled() -> bool:
        seen = [state(c, topic, n) for n in c.live_ids()]
        return all(s["leader_id"] == leader and len(s["isr_nodes"]) == isr for s in seen) and \
            len({s["leader_epoch"] for s in seen}) == 1
    assert c.wait_until(settled, timeout, 0.2), ([state(c, topic, n) for n in c.live_ids()], c.logs())
    return int(state(c, topic, c.live_ids()[0])["leader_epoch"])


def endpoint_of(c: ClusterProcesses, node: int) -> tuple[int, str, int, str]:
    """What node_endpoints must say of ``node``: its advertised listener and its broker.rack."""
    b = c.broker(node)
    return node, b.host, b.port, f"rack-{node}"


# --- the tests -------------------------------------------------------------------------------------

def test_produce_to_a_follower_or_a_stranger_names_the_leader_and_its_endpoint(cluster: ClusterProcesses) -> None:
    c = cluster
    leader, follower, stranger = c.node_ids
    create_topic(c, "led", [leader, follower])
    epoch = wait_state(c, "led", leader, 2)
    for node in (follower, stranger):  # the replica manager's check; the metadata image's
        answers, endpoints = produce(c, node, "led")
        assert [(p.error_code, p.current_leader) for p in answers] == [(NOT_LEADER_OR_FOLLOWER, (leader, epoch))]
        assert endpoints == [endpoint_of(c, leader)]
    # The leader appends: no field at all.
    answers, endpoints = produce(c, leader, "led")
    assert [(p.error_code, p.current_leader) for p in answers] == [(NONE, None)] and endpoints is None
    # v9 (flexible, but before KIP-951): the same refusal without the fields, as Kafka.
    answers, endpoints = produce(c, follower, "led", version=9)
    assert [(p.error_code, p.current_leader) for p in answers] == [(NOT_LEADER_OR_FOLLOWER, None)]
    assert endpoints is None


def test_after_the_leader_moves_produce_and_fetch_name_the_new_leader(cluster: ClusterProcesses) -> None:
    c = cluster
    first, second, stranger = c.node_ids
    topic_id = create_topic(c, "moves", [first, second])
    old_epoch = wait_state(c, "moves", first, 2)
    c.kill(first)
    new_epoch = wait_state(c, "moves", second, 1)
    assert new_epoch > old_epoch
    answers, endpoints = produce(c, stranger, "moves")
    assert [(p.error_code, p.current_leader) for p in answers] == [(NOT_LEADER_OR_FOLLOWER, (second, new_epoch))]
    assert endpoints == [endpoint_of(c, second)]
    # A consumer still at the old epoch: FENCED_LEADER_EPOCH from the new leader, naming itself.
    answers, endpoints = fetch(c, second, topic_id, leader_epoch=old_epoch)
    assert [(p.error_code, p.current_leader) for p in answers] == [(FENCED_LEADER_EPOCH, (second, new_epoch))]
    assert endpoints == [endpoint_of(c, second)]
    # A broker hosting no replica: NOT_LEADER_OR_FOLLOWER, naming the new leader.
    answers, endpoints = fetch(c, stranger, topic_id)
    assert [(p.error_code, p.current_leader) for p in answers] == [(NOT_LEADER_OR_FOLLOWER, (second, new_epoch))]
    assert endpoints == [endpoint_of(c, second)]
    # Fetch v15 has the tagged field in its schema, but Kafka fills it from v16 only.
    answers, endpoints = fetch(c, stranger, topic_id, version=15)
    assert [(p.error_code, p.current_leader) for p in answers] == [(NOT_LEADER_OR_FOLLOWER, None)]
    assert endpoints is None
    # The right epoch at the leader: records, no field.
    answers, endpoints = fetch(c, second, topic_id, leader_epoch=new_epoch)
    assert [(p.error_code, p.current_leader) for p in answers] == [(NONE, None)] and endpoints is None


def test_a_partition_without_a_leader_is_named_with_leader_minus_one_and_no_endpoint(
        cluster: ClusterProcesses) -> None:
    c = cluster
    only, other, _ = c.node_ids
    topic_id = create_topic(c, "orphan", [only])
    wait_state(c, "orphan", only, 1)
    c.kill(only)
    assert c.wait_until(lambda: all(state(c, "orphan", n)["leader_id"] == -1 for n in c.live_ids()), 30), c.logs()
    epoch = int(state(c, "orphan", other)["leader_epoch"])
    # No endpoint to name: node_endpoints is empty, and an empty tagged array is not written.
    answers, endpoints = produce(c, other, "orphan")
    assert [(p.error_code, p.current_leader) for p in answers] == [(NOT_LEADER_OR_FOLLOWER, (-1, epoch))]
    assert endpoints is None
    answers, endpoints = fetch(c, other, topic_id)
    assert [(p.error_code, p.current_leader) for p in answers] == [(NOT_LEADER_OR_FOLLOWER, (-1, epoch))]
    assert endpoints is None


def test_a_produce_waiting_in_purgatory_when_leadership_moves_names_the_new_leader(tmp_path: Path) -> None:
    """An acks=-1 produce waits on the leader L for a paused follower P (still in the ISR: its lease
    and replica.lag.time.max.ms, 30 s, outlast the test); a preferred-leader election then moves the
    partition to T: L answers the waiting produce with NOT_LEADER_OR_FOLLOWER and names T (Kafka's
    DelayedProduce completing on leadership loss)."""
    with running(tmp_path, 30000) as c:
        purgatory_case(c)


def purgatory_case(c: ClusterProcesses) -> None:
    controller = c.controller_id()
    paused = next(n for n in c.node_ids if n != controller)
    leader, target = (n for n in c.node_ids if n != paused)
    create_topic(c, "waits", [leader, target, paused])
    wait_state(c, "waits", leader, 3)
    # Make T the preferred replica without moving the leadership (a reorder-only reassignment).
    reply = c.request(controller, "AlterPartitionReassignments", 0, {"timeout_ms": 10000, "topics": [
        {"name": "waits", "partitions": [{"partition_index": 0, "replicas": [target, leader, paused]}]}]})
    assert reply["error_code"] == NONE and reply["responses"][0]["partitions"][0]["error_code"] == NONE, reply
    assert c.wait_until(lambda: state(c, "waits", controller)["replica_nodes"] == [target, leader, paused], 20)
    epoch = wait_state(c, "waits", leader, 3)
    c.pause(paused)
    try:
        client, corr = send(c, leader, PRODUCE, 11, produce_body("waits", acks=-1, timeout_ms=25000))
        with client:
            time.sleep(0.5)  # appended on L, waiting for P
            reply = c.request(controller, "ElectLeaders", 2, {"election_type": 0, "timeout_ms": 10000,
                                                               "topic_partitions": [{"topic": "waits", "partitions": [0]}]})
            result = reply["replica_election_results"][0]["partition_result"][0]
            assert result["error_code"] == NONE, reply
            frame = client.recv_frame()
        assert struct.unpack_from(">i", frame)[0] == corr
        answers, endpoints = read_produce_response(frame)
        new_epoch = int(state(c, "waits", controller)["leader_epoch"])
        assert new_epoch > epoch
        assert [(p.error_code, p.current_leader) for p in answers] == [(NOT_LEADER_OR_FOLLOWER, (target, new_epoch))]
        assert endpoints == [endpoint_of(c, target)]
    finally:
        c.resume(paused)
