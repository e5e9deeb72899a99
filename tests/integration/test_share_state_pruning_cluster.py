"""``__share_group_state`` pruned on a 3-broker cluster at RF=3 (issue 30): the share coordinator's
DeleteRecords moves the log start offset on the leader and on both followers (the replica fetchers
follow the leader's log start offset), and after a kill -9 of the leader the new one loads the
pruned log and serves the same state.

The writes are the share coordinator's own APIs (InitializeShareGroupState, WriteShareGroupState,
as a share-partition leader on another broker sends them), so each record is known: a snapshot
(the initialize), then updates and a snapshot every ``share.coordinator.snapshot.update.records.per.snapshot``
updates (Kafka 4.4's ShareCoordinatorShard.generateShareStateRecord), and the prune offset is the
latest snapshot's (ShareCoordinatorOffsetsManager, one share-partition)."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.protocol.errors import ErrorCode
from tests.support.cluster import cluster_or_skip
from tests.support.cluster import wait_through_faults as wait_until

pytestmark = pytest.mark.timeout(300)

STATE_TOPIC = "__share_group_state"
PER_SNAPSHOT = 3
OVERRIDES = {"share.coordinator.state.topic.num.partitions": "1",
             "share.coordinator.state.topic.replication.factor": "3", "min.insync.replicas": "2",
             "share.coordinator.snapshot.update.records.per.snapshot": str(PER_SNAPSHOT),
             "share.coordinator.state.topic.prune.interval.ms": "1000",
             "log.flush.offset.checkpoint.interval.ms": "200"}
RETRIABLE = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    with cluster_or_skip(tmp_path, 3, OVERRIDES) as c:
        yield c


def partition_body(topic_id: object, **fields: object) -> dict:
    return {"group_id": "sg", "topics": [{"topic_id": topic_id, "partitions": [{"partition": 0, **fields}]}]}


def call(c, node: int, api: str, version: int, body: dict) -> dict:  # type: ignore[no-untyped-def]
    """The one partition's answer, retried while the coordinator loads or moves."""
    deadline = time.monotonic() + 60
    while True:
        try:
            part = c.request(node, api, version, body)["results"][0]["partitions"][0]
        except OSError:
            part = {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
        if part["error_code"] not in RETRIABLE:
            return part  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, f"{api}: {part}"
        time.sleep(0.2)


def offsets(state: dict) -> dict[int, tuple[int, int]]:
    """(delivery state, count) per offset: batches compared offset by offset."""
    return {o: (b["delivery_state"], b["delivery_count"]) for b in state["state_batches"]
            for o in range(b["first_offset"], b["last_offset"] + 1)}


def checkpointed_log_start(data_dir: Path) -> int | None:
    path = data_dir / "log-start-offset-checkpoint"
    if not path.exists():
        return None
    for line in path.read_text().splitlines()[2:]:
        topic, partition, offset = line.split()
        if (topic, partition) == (STATE_TOPIC, "0"):
            return int(offset)
    return None


def earliest(c, node: int) -> int:  # type: ignore[no-untyped-def]
    r = c.request(node, "ListOffsets", 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": STATE_TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]})
    p = r["topics"][0]["partitions"][0]
    assert p["error_code"] == 0, p
    return int(p["offset"])


def test_prune_moves_every_replicas_log_start_and_a_new_leader_replays_the_pruned_log(cluster) -> None:  # type: ignore[no-untyped-def]
    c = cluster
    node = c.live_ids()[0]
    r = c.request(node, "CreateTopics", 7, {"topics": [{"name": "sq", "num_partitions": 1, "replication_factor": 3,
                                                        "assignments": [], "configs": []}], "timeout_ms": 30000})
    assert r["topics"][0]["error_code"] == 0, r
    topic_id = r["topics"][0]["topic_id"]
    key = f"sg:{base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip('=')}:0"

    def coordinator() -> int | None:
        found = c.request(node, "FindCoordinator", 6, {"key_type": 2, "coordinator_keys": [key]})["coordinators"][0]
        return found["node_id"] if found["error_code"] == 0 else None  # (the first one creates the topic)
    wait_until(lambda: coordinator() is not None and len(c.partition_state(STATE_TOPIC, 0)[2]) == 3, 60,
               f"{STATE_TOPIC}-0 led with 3 replicas in sync")
    leader = c.partition_state(STATE_TOPIC, 0)[0]

    # Record 0: the initialize's snapshot; then one write per acknowledgement (0-9) after one that
    # holds 10-14 Available at delivery count 2: 11 updates and, every 3, a snapshot.
    assert call(c, leader, "InitializeShareGroupState", 0,
                partition_body(topic_id, state_epoch=0, start_offset=0))["error_code"] == 0
    writes = [[(10, 14, 0, 2)]] + [[(o, o, 2, 1)] for o in range(10)]
    for batches in writes:
        part = call(c, leader, "WriteShareGroupState", 1, partition_body(
            topic_id, state_epoch=0, leader_epoch=0, start_offset=-1, delivery_complete_count=-1,
            state_batches=[{"first_offset": f, "last_offset": la, "delivery_state": s, "delivery_count": n}
                           for f, la, s, n in batches]))
        assert part["error_code"] == 0, part
    kinds = "S" + "".join("S" if (i + 1) % (PER_SNAPSHOT + 1) == 0 else "U" for i in range(len(writes)))
    assert kinds == "SUUUSUUUSUUU"
    last_snapshot = kinds.rindex("S")  # offset 8

    expected = {**{o: (2, 1) for o in range(10)}, **{o: (0, 2) for o in range(10, 15)}}
    # The leader prunes below its latest snapshot; each replica's log start offset follows.
    wait_until(lambda: earliest(c, leader) == last_snapshot, 30, f"the leader's log start at {last_snapshot}")
    wait_until(lambda: all(checkpointed_log_start(c.brokers[n].data_dir) == last_snapshot for n in c.node_ids), 30,
               f"every replica's checkpointed log start at {last_snapshot} "
               f"({[checkpointed_log_start(c.brokers[n].data_dir) for n in c.node_ids]})")

    c.kill(leader)
    wait_until(lambda: c.partition_state(STATE_TOPIC, 0)[0] not in (-1, leader), 60, f"a new leader of {STATE_TOPIC}-0")
    new_leader = c.partition_state(STATE_TOPIC, 0)[0]
    assert earliest(c, new_leader) == last_snapshot
    state = call(c, new_leader, "ReadShareGroupState", 0, partition_body(topic_id, leader_epoch=0))
    assert (state["error_code"], state["state_epoch"], state["start_offset"]) == (0, 0, 0), state
    assert offsets(state) == expected, state
    c.start(leader, timeout=60)
