"""Share-partitions' state survives a broker crash (KIP-932's share coordinator, issue 30): the
SPSO, the acknowledged records and the delivery counts are written to ``__share_group_state`` and
read back when the restarted leader creates the share-partition again.

Expected values are Kafka 4.4's: acknowledged records are never delivered again; Kafka writes
acknowledgements, releases and expired locks, not acquisitions, so records acquired once and not
acknowledged come back after the restart with delivery count 1, as do records never delivered; each
write carries the SPSO as it stood before the change it writes (DescribeShareGroupOffsets answers
the stored one), as tests/integration/test_share_groups_ab_cluster.py saw of Kafka 4.4."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from odradek.broker.coordinator.hashing import partition_for
from odradek.broker.share.share_state_store import kafka_uuid_string
from tests.integration.test_share_fetch_wire import (
    ACCEPT,
    DESCRIBE_OFFSETS,
    acquired,
    fetch_topics,
    produce,
    share_fetch,
)
from tests.integration.test_share_groups_wire import heartbeat, wait_for_coordinator
from tests.support.java_tools import run_tool
from tests.support.wire import WireClient, create_topic

pytestmark = pytest.mark.timeout(120)

OVERRIDES = {"share.coordinator.state.topic.num.partitions": "3"}
NOT_LEADER_OR_FOLLOWER = 6


def start_offset(c: WireClient) -> int:
    return described(c)[0]


def described(c: WireClient) -> tuple[int, int]:
    """(start offset, lag) DescribeShareGroupOffsets v1 answers for sq-0."""
    offsets = c.request(DESCRIBE_OFFSETS, 1, {"groups": [{"group_id": "sg", "topics": [
        {"topic_name": "sq", "partitions": [0]}]}]})["groups"][0]
    p = offsets["topics"][0]["partitions"][0]
    return p["start_offset"], p["lag"]


def share_partition_started(c: WireClient) -> uuid.UUID:
    """Topic ``sq`` (one partition) and member ``m`` of share group ``sg`` subscribed to it, its
    share-partition initialized at the high watermark (0) by the first fetches, once its partition
    of __share_group_state is created and loaded; the topic's id."""
    topic_id = create_topic(c, "sq", 1)
    wait_for_coordinator(c)
    assert heartbeat(c, subscribed_topic_names=["sq"])["error_code"] == 0
    deadline = time.monotonic() + 30
    while start_offset(c) != 0:
        assert time.monotonic() < deadline, "the share-partition was never initialized"
        share_fetch(c, max_wait_ms=200, topics=fetch_topics(topic_id, [0]))
    return topic_id


def ten_records_acquired(c: WireClient, topic_id: uuid.UUID) -> None:
    """Records 0-9 produced as one batch and acquired by ``m``'s share session, whose next epoch is 2."""
    produce(c, "sq", 0, 10)
    r = share_fetch(c, share_session_epoch=1, topics=fetch_topics(topic_id, [0], {}))
    assert acquired(r) == {0: [(0, 9, 1)]}


def rejoined(c: WireClient) -> float:
    """After a restart: member ``m2`` joins ``sg`` (subscribed to ``sq``) once the group coordinator
    is back; the deadline, 30 s from the start, for what the caller waits for next."""
    deadline = time.monotonic() + 30
    while heartbeat(c, member_id="m2", subscribed_topic_names=["sq"])["error_code"] != 0:
        assert time.monotonic() < deadline, "the group coordinator never came back"
        time.sleep(0.1)
    return deadline


def fetch_until_acquired(c: WireClient, topic_id: uuid.UUID, member: str) -> dict[int, list[tuple[int, int, int]]]:
    """Open a share session and fetch until something is acquired (the share-partition waits while
    its stored state loads)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = acquired(share_fetch(c, member_id=member, max_wait_ms=500, topics=fetch_topics(topic_id, [0])))
        if got.get(0):
            return got
    raise AssertionError("nothing was acquired within 30 s")


def test_share_state_survives_kill_9(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    with WireClient(broker.host, broker.port) as c:
        topic_id = share_partition_started(c)
        for _ in range(3):
            produce(c, "sq", 0, 10)  # batches 0-9, 10-19, 20-29
        # A new session that takes one batch at a time.
        r = share_fetch(c, member_id="m", max_records=10, topics=fetch_topics(topic_id, [0]))
        assert acquired(r) == {0: [(0, 9, 1)]}, r
        # Accept 0-9; the same request acquires 10-19, which is never acknowledged.
        r = share_fetch(c, member_id="m", max_records=10, share_session_epoch=1,
                        topics=fetch_topics(topic_id, [0], {0: [(0, 9, [ACCEPT])]}))
        assert r["responses"][0]["partitions"][0]["acknowledge_error_code"] == 0
        assert acquired(r) == {0: [(10, 19, 1)]}
        assert start_offset(c) == 0  # the write of 0-9's acceptance carried the SPSO before it
        broker.kill()
    broker = broker_factory(OVERRIDES, data_dir=broker.data_dir)
    with WireClient(broker.host, broker.port) as c:
        rejoined(c)
        # Before any fetch the share-partition is not in memory: the answer is the share
        # coordinator's (Kafka's only way): start offset 0 and 0-9 complete, written with it, so the
        # lag is 30 - 0 - 10 (KIP-1226's delivery-complete count).
        deadline = time.monotonic() + 30
        while (shown := described(c)) != (0, 20):
            assert time.monotonic() < deadline, shown
            time.sleep(0.1)
        # 0-9 never again; 10-19 at delivery count 1 (its acquisition was never written); 20-29 once.
        assert fetch_until_acquired(c, topic_id, "m2") == {0: [(10, 29, 1)]}
        assert start_offset(c) == 0  # nothing written since
        r = share_fetch(c, member_id="m2", share_session_epoch=1,
                        topics=fetch_topics(topic_id, [0], {0: [(10, 29, [ACCEPT])]}))
        assert r["responses"][0]["partitions"][0]["acknowledge_error_code"] == 0
        assert acquired(r) == {0: []}
        assert described(c) == (10, 0)
    # Kafka 4.4's own decoder reads the state topic: this share-partition's ShareSnapshot (type 0)
    # and ShareUpdate (type 1) records, the write before the crash holding 0-9 acknowledged at start
    # offset 0 (10-19's acquisition unwritten), the last one 10-29 acknowledged at start offset 10.
    assert broker.stop() == 0
    key = f"sg:{kafka_uuid_string(topic_id)}:0"
    segment = broker.data_dir / "logs" / f"__share_group_state-{partition_for(key, 3)}" / f"{0:020d}.log"
    out = run_tool("kafka-dump-log", ["--files", str(segment), "--print-data-log",
                                      "--share-group-state-decoder"]).stdout
    snapshots, writes = [], []
    for line in out.splitlines():
        if " key: {" in line and " payload: " in line:
            k, payload = (json.loads(part) for part in line.split(" key: ", 1)[1].split(" payload: ", 1))
            assert k["type"] in ("0", "1") and k["data"] == {
                "groupId": "sg", "topicId": kafka_uuid_string(topic_id), "partition": 0}
            if k["type"] == "0":
                snapshots.append(payload["data"])
            writes.append({"startOffset": payload["data"]["startOffset"], "batches": [
                [b["firstOffset"], b["lastOffset"], b["deliveryState"], b["deliveryCount"]]
                for b in payload["data"]["stateBatches"]], "complete": payload["data"].get("deliveryCompleteCount")})
    assert [s["snapshotEpoch"] for s in snapshots] == list(range(len(snapshots)))
    assert {"startOffset": 0, "batches": [[0, 9, 2, 1]], "complete": 10} in writes
    assert writes[-1] == {"startOffset": 10, "batches": [[10, 29, 2, 1]], "complete": 20}


def test_deleted_share_group_offsets_stay_deleted_after_kill_9(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    with WireClient(broker.host, broker.port) as c:
        topic_id = share_partition_started(c)
        ten_records_acquired(c, topic_id)
        r = share_fetch(c, share_session_epoch=2, topics=fetch_topics(topic_id, [0], {0: [(0, 4, [ACCEPT])]}))
        assert start_offset(c) == 0  # written with the SPSO before the acceptance
        # The member leaves (5-9 go back); the empty group's offsets are deleted (Kafka writes a
        # tombstone for the share-partition's state).
        assert heartbeat(c, member_epoch=-1)["member_epoch"] == -1
        share_fetch(c, share_session_epoch=-1)
        r = c.request(92, 0, {"group_id": "sg", "topics": [{"topic_name": "sq"}]})
        assert r["error_code"] == 0 and r["responses"][0]["error_code"] == 0, r
        broker.kill()
    broker = broker_factory(OVERRIDES, data_dir=broker.data_dir)
    with WireClient(broker.host, broker.port) as c:
        deadline = rejoined(c)
        # No state: the share-partition starts again at share.auto.offset.reset (latest: 10).
        while start_offset(c) == -1:
            assert time.monotonic() < deadline, "the share-partition was never initialized"
            assert acquired(share_fetch(c, member_id="m2", max_wait_ms=200,
                                        topics=fetch_topics(topic_id, [0]))) == {0: []}
        assert start_offset(c) == 10
        produce(c, "sq", 0, 3)
        assert fetch_until_acquired(c, topic_id, "m2") == {0: [(10, 12, 1)]}


def test_a_newer_leader_epoch_fences_the_leader_here(broker_factory) -> None:
    """The share-partition's state lives on this broker too, so its leader reads and writes it with
    no request - and the share coordinator's checks still hold, as they do for Kafka 4.4's leader,
    which sends its requests even then: once the state holds a newer leader epoch (a newer leader
    read it; here a ReadShareGroupState at epoch 1000), this leader's writes change nothing and
    its next read of the state answers its fetches NOT_LEADER_OR_FOLLOWER (Kafka's
    SharePartition.fetchPersisterError for FENCED_LEADER_EPOCH), as the refused write answers the
    acknowledgement it carried. Before, the write went through and set the state's leader epoch back
    to this leader's, and the read ignored the epoch."""
    broker = broker_factory(OVERRIDES)
    with WireClient(broker.host, broker.port) as c:
        topic_id = share_partition_started(c)
        ten_records_acquired(c, topic_id)

        def state() -> dict:  # type: ignore[type-arg]
            r = c.request(84, 0, {"group_id": "sg", "topics": [
                {"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": 1000}]}]})
            return r["results"][0]["partitions"][0]  # type: ignore[no-any-return]
        before = state()  # records leader epoch 1000
        assert before["error_code"] == 0, before
        # This leader (epoch 0) accepts 0-4: its write of that is refused by the state, and the
        # acknowledgement is answered after the write, with Kafka's error for the refusal
        # (fetchPersisterError: FENCED_LEADER_EPOCH is NOT_LEADER_OR_FOLLOWER, the coordinator's
        # message kept). Before, it was answered NONE at once and the acceptance was lost.
        r = share_fetch(c, share_session_epoch=2, max_wait_ms=0,
                        topics=fetch_topics(topic_id, [0], {0: [(0, 4, [ACCEPT])]}))
        part = r["responses"][0]["partitions"][0]
        assert (part["acknowledge_error_code"], part["acknowledge_error_message"]) == (
            NOT_LEADER_OR_FOLLOWER, "The leader epoch in the request is older than the epoch on the broker."), r
        after = state()
        assert (after["start_offset"], after["state_batches"]) == (before["start_offset"], before["state_batches"]), \
            (before, after)
        summary = c.request(87, 1, {"group_id": "sg", "topics": [
            {"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": 0}]}]})
        assert summary["results"][0]["partitions"][0]["leader_epoch"] == 1000, summary
        broker.kill()
    broker = broker_factory(OVERRIDES, data_dir=broker.data_dir)
    with WireClient(broker.host, broker.port) as c:
        deadline = rejoined(c)
        # The restarted leader reads the state again: fenced.
        seen = []
        while True:
            r = share_fetch(c, member_id="m2", max_wait_ms=200, topics=fetch_topics(topic_id, [0]))
            assert r["error_code"] == 0, r
            part = r["responses"][0]["partitions"][0]
            seen.append((part["error_code"], len(part["acquired_records"])))
            if seen[-1] != (0, 0):
                break
            assert time.monotonic() < deadline, seen
        assert seen[-1] == (NOT_LEADER_OR_FOLLOWER, 0), seen
        assert part["error_message"] == "The leader epoch in the request is older than the epoch on the broker."
