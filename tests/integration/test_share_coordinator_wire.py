"""The share coordinator's APIs on the wire (KIP-932, issue 30): FindCoordinator key type 2 and
InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85),
DeleteShareGroupState (86), ReadShareGroupStateSummary (87), on one real broker that leads every
``__share_group_state`` partition.

Expected codes and messages are Kafka 4.4's (ShareCoordinatorShard's checks, in its order; the
service's empty answer to an empty group id); after each refused request the stored state is read
back unchanged, and it survives a kill -9."""

from __future__ import annotations

import time
import uuid

import pytest

from odradek.broker.share.share_state_store import kafka_uuid_string
from odradek.protocol.errors import ErrorCode
from tests.support.wire import WireClient, create_topic

pytestmark = pytest.mark.timeout(120)

FIND_COORDINATOR, INITIALIZE, READ, WRITE, DELETE, SUMMARY = 10, 83, 84, 85, 86, 87
OVERRIDES = {"share.coordinator.state.topic.num.partitions": "3"}


def one(response: dict) -> dict:
    assert len(response["results"]) == 1 and len(response["results"][0]["partitions"]) == 1, response
    return response["results"][0]["partitions"][0]


def body(topic_id: uuid.UUID, partition: int = 0, group: str = "sg", **fields: object) -> dict:
    return {"group_id": group, "topics": [{"topic_id": topic_id, "partitions": [{"partition": partition, **fields}]}]}


def initialize(c: WireClient, topic_id: uuid.UUID, state_epoch: int, start_offset: int, **kw: object) -> dict:
    return one(c.request(INITIALIZE, 0, body(topic_id, state_epoch=state_epoch, start_offset=start_offset, **kw)))


def read(c: WireClient, topic_id: uuid.UUID, leader_epoch: int = 0, **kw: object) -> dict:
    return one(c.request(READ, 0, body(topic_id, leader_epoch=leader_epoch, **kw)))


def write(c: WireClient, topic_id: uuid.UUID, batches: list[tuple[int, int, int, int]], start_offset: int = -1,
          state_epoch: int = 0, leader_epoch: int = 0, delivery_complete_count: int = -1, **kw: object) -> dict:
    return one(c.request(WRITE, 1, body(
        topic_id, state_epoch=state_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
        delivery_complete_count=delivery_complete_count,
        state_batches=[{"first_offset": f, "last_offset": la, "delivery_state": s, "delivery_count": n}
                       for f, la, s, n in batches], **kw)))


def summary(c: WireClient, topic_id: uuid.UUID, **kw: object) -> dict:
    return one(c.request(SUMMARY, 1, body(topic_id, leader_epoch=0, **kw)))


def state_of(r: dict) -> tuple[int, int, list[tuple[int, int, int, int]]]:
    assert r["error_code"] == 0, r
    return r["state_epoch"], r["start_offset"], [
        (b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"]) for b in r["state_batches"]]


def find_share_coordinator(c: WireClient, key: str, version: int = 6) -> dict:
    return c.request(FIND_COORDINATOR, version, {"key_type": 2, "coordinator_keys": [key]})["coordinators"][0]


def wait_for_share_coordinator(c: WireClient, key: str) -> dict:
    deadline = time.monotonic() + 30
    while True:
        found = find_share_coordinator(c, key)
        if found["error_code"] == 0:
            return found
        assert found["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE, found
        assert time.monotonic() < deadline, "the share coordinator never became available"
        time.sleep(0.1)


def test_find_coordinator_share_key(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "sq", 1)
        key = f"sg:{kafka_uuid_string(topic_id)}:0"
        # The first lookup creates __share_group_state (Kafka: COORDINATOR_NOT_AVAILABLE meanwhile).
        assert find_share_coordinator(c, key)["error_code"] == ErrorCode.COORDINATOR_NOT_AVAILABLE
        found = wait_for_share_coordinator(c, key)
        assert (found["node_id"], found["host"], found["port"]) == (1, broker.host, broker.port), found
        # Keys not of the form groupId:topicId:partition, and key type 2 below v6: INVALID_REQUEST.
        for bad in ("sg", f"sg:{kafka_uuid_string(topic_id)}", "sg:not-a-uuid:0",
                    f"sg:{kafka_uuid_string(topic_id)}:x", f":{kafka_uuid_string(topic_id)}:0"):
            assert find_share_coordinator(c, bad)["error_code"] == ErrorCode.INVALID_REQUEST, bad
        old = c.request(FIND_COORDINATOR, 5, {"key_type": 2, "coordinator_keys": [key]})["coordinators"][0]
        assert old["error_code"] == ErrorCode.INVALID_REQUEST
        # The group key is unaffected.
        assert c.request(FIND_COORDINATOR, 6, {"key_type": 0, "coordinator_keys": ["sg"]})["coordinators"][0][
            "error_code"] in (0, ErrorCode.COORDINATOR_NOT_AVAILABLE)


def test_delivery_complete_count_kept_as_kafka_keeps_it(broker_factory) -> None:
    """KIP-1226's count, by Kafka 4.4's rules (ShareGroupOffset.fromRequest and
    ShareCoordinatorShard.generateShareStateRecord, read off its jar): initialize sets 0 (and
    leader epoch 0); a write's count is taken for a start offset past the stored one, the larger of
    the two for the same one, and ignored for an older one (-1 included); v0 writes carry -1. The
    count survives kill -9 (replayed from the updates and snapshots)."""
    broker = broker_factory({**OVERRIDES, "share.coordinator.snapshot.update.records.per.snapshot": "2"})
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "sq", 1)
        wait_for_share_coordinator(c, f"sg:{kafka_uuid_string(topic_id)}:0")

        def count() -> tuple[int, int, int]:
            r = summary(c, topic_id)
            assert r["error_code"] == 0, r
            return r["start_offset"], r["leader_epoch"], r["delivery_complete_count"]

        assert initialize(c, topic_id, 0, 0)["error_code"] == 0
        assert count() == (0, 0, 0)
        steps = [  # (start offset, count written, what the summary shows after it)
            (0, 4, (0, 0, 4)),     # same start: max(4, 0)
            (0, 2, (0, 0, 4)),     # same start: max(2, 4)
            (-1, 9, (0, 0, 4)),    # older start (unchanged): the stored count
            (3, 1, (3, 0, 1)),     # newer start: as written
            (3, -1, (3, 0, 1)),    # same start, unknown: max(-1, 1)
        ]
        for start, written, shown in steps:
            assert write(c, topic_id, [(0, 5, 2, 1)], start_offset=start,
                         delivery_complete_count=written)["error_code"] == 0
            assert count() == shown, (start, written)
        r = one(c.request(WRITE, 0, body(topic_id, state_epoch=0, leader_epoch=0, start_offset=6,
                                         state_batches=[])))  # v0: no count, -1
        assert r["error_code"] == 0, r
        assert count() == (6, 0, -1)
        assert write(c, topic_id, [], start_offset=8, delivery_complete_count=2)["error_code"] == 0
        before = count()
        assert before == (8, 0, 2)
        broker.kill()
    broker = broker_factory(OVERRIDES, data_dir=broker.data_dir)
    with WireClient(broker.host, broker.port) as c:
        deadline = time.monotonic() + 30
        while (r := summary(c, topic_id))["error_code"] in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                                            ErrorCode.NOT_COORDINATOR):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert (r["start_offset"], r["leader_epoch"], r["delivery_complete_count"]) == before, r
        broker.kill()


def test_share_state_apis_and_their_errors(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "sq", 2)
        wait_for_share_coordinator(c, f"sg:{kafka_uuid_string(topic_id)}:0")
        unknown_topic = uuid.uuid4()

        # Never initialized: a read is INVALID_REQUEST, a write too; the summary reads -1.
        r = read(c, topic_id)
        assert (r["error_code"], r["error_message"]) == (
            ErrorCode.INVALID_REQUEST, "Read operation on uninitialized share partition not allowed.")
        r = write(c, topic_id, [(0, 9, 2, 1)], start_offset=0)
        assert (r["error_code"], r["error_message"]) == (
            ErrorCode.INVALID_REQUEST, "Write operation on uninitialized share partition not allowed.")
        r = summary(c, topic_id)
        assert (r["error_code"], r["start_offset"], r["state_epoch"], r["leader_epoch"]) == (0, -1, 0, 0), r
        assert c.request(DELETE, 0, body(topic_id))["results"][0]["partitions"][0]["error_code"] == 0

        # Initialize, then write two batches.
        assert initialize(c, topic_id, 1, 5)["error_code"] == 0
        assert state_of(read(c, topic_id, leader_epoch=3)) == (1, 5, [])
        assert write(c, topic_id, [(5, 9, 2, 1), (10, 14, 0, 2)], start_offset=5, state_epoch=1,
                     leader_epoch=3)["error_code"] == 0
        expected = (1, 5, [(5, 9, 2, 1), (10, 14, 0, 2)])
        assert state_of(read(c, topic_id, leader_epoch=3)) == expected
        # A write replaces the offsets its batches cover; start offset -1 keeps the stored one.
        assert write(c, topic_id, [(12, 12, 4, 3)], state_epoch=1, leader_epoch=3)["error_code"] == 0
        expected = (1, 5, [(5, 9, 2, 1), (10, 11, 0, 2), (12, 12, 4, 3), (13, 14, 0, 2)])
        assert state_of(read(c, topic_id, leader_epoch=3)) == expected

        # Refused, each leaving the state as it was.
        refusals = [
            (write(c, topic_id, [(5, 14, 2, 1)], state_epoch=1, leader_epoch=2),
             ErrorCode.FENCED_LEADER_EPOCH, "The leader epoch in the request is older than the epoch on the broker."),
            (write(c, topic_id, [(5, 14, 2, 1)], state_epoch=0, leader_epoch=3),
             ErrorCode.FENCED_STATE_EPOCH, "The coordinator rejected the request because the state epoch did not match."),
            (write(c, topic_id, [(5, 14, 2, 1)], state_epoch=1, leader_epoch=-1),
             ErrorCode.INVALID_REQUEST, "The leader epoch cannot be a negative number."),
            (write(c, topic_id, [(5, 14, 2, 1)], state_epoch=-1, leader_epoch=3),
             ErrorCode.INVALID_REQUEST, "The state epoch cannot be a negative number."),
            (read(c, topic_id, leader_epoch=2),
             ErrorCode.FENCED_LEADER_EPOCH, "The leader epoch in the request is older than the epoch on the broker."),
            (read(c, topic_id, leader_epoch=-1), ErrorCode.INVALID_REQUEST, "The leader epoch cannot be a negative number."),
            (initialize(c, topic_id, 0, 0),
             ErrorCode.FENCED_STATE_EPOCH, "The coordinator rejected the request because the state epoch did not match."),
            (initialize(c, topic_id, -1, 0), ErrorCode.INVALID_REQUEST, "The state epoch cannot be a negative number."),
        ]
        for r, code, message in refusals:
            assert (r["error_code"], r["error_message"]) == (code, message), r
        assert state_of(read(c, topic_id, leader_epoch=3)) == expected

        # An unknown topic id or partition, a negative partition.
        for api, version, fields in ((READ, 0, {"leader_epoch": 0}), (SUMMARY, 1, {"leader_epoch": 0}),
                                     (INITIALIZE, 0, {"state_epoch": 0, "start_offset": 0}), (DELETE, 0, {})):
            for tid, partition, code in ((unknown_topic, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                         (topic_id, 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                         (topic_id, -1, ErrorCode.INVALID_REQUEST)):
                r = one(c.request(api, version, body(tid, partition, **fields)))
                if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and api == READ:
                    code = ErrorCode.INVALID_REQUEST  # nothing stored there: read's first check
                assert r["error_code"] == code, (api, tid, partition, r)
        # No group id, no topics, a topic without partitions: Kafka's empty answer.
        for bad in ({"group_id": "", "topics": body(topic_id, leader_epoch=0)["topics"]},
                    {"group_id": "sg", "topics": []},
                    {"group_id": "sg", "topics": [{"topic_id": topic_id, "partitions": []}]}):
            assert c.request(READ, 0, bad) == {"results": []}
        assert state_of(read(c, topic_id, leader_epoch=3)) == expected

        # A newer leader epoch is recorded by the read: the old leader's writes are fenced.
        assert state_of(read(c, topic_id, leader_epoch=4)) == expected
        assert write(c, topic_id, [(5, 9, 0, 1)], state_epoch=1, leader_epoch=3)["error_code"] == \
            ErrorCode.FENCED_LEADER_EPOCH
        r = summary(c, topic_id)
        # (The count: initialize's 0; these writes carry -1, unknown, which never lowers it.)
        assert (r["error_code"], r["start_offset"], r["state_epoch"], r["leader_epoch"],
                r["delivery_complete_count"]) == (0, 5, 1, 4, 0), r
        # v0 of Write and ReadSummary (no delivery_complete_count): the same answers.
        r = one(c.request(WRITE, 0, body(topic_id, state_epoch=1, leader_epoch=4, start_offset=-1, state_batches=[])))
        assert r["error_code"] == 0, r
        r = one(c.request(SUMMARY, 0, body(topic_id, leader_epoch=0)))
        assert (r["error_code"], r["start_offset"], r["state_epoch"], r["leader_epoch"]) == (0, 5, 1, 4), r
        assert state_of(read(c, topic_id, leader_epoch=4)) == expected
        # The second partition has its own state.
        r = one(c.request(SUMMARY, 1, body(topic_id, 1, leader_epoch=0)))
        assert r["start_offset"] == -1
        broker.kill()

    # All of it was durable.
    broker = broker_factory(OVERRIDES, data_dir=broker.data_dir)
    with WireClient(broker.host, broker.port) as c:
        deadline = time.monotonic() + 30
        while (r := read(c, topic_id, leader_epoch=4))["error_code"] in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                                                          ErrorCode.NOT_COORDINATOR):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert state_of(r) == expected
        # Delete: a tombstone; then the share-partition reads as never initialized.
        assert c.request(DELETE, 0, body(topic_id))["results"][0]["partitions"][0]["error_code"] == 0
        assert read(c, topic_id, leader_epoch=4)["error_code"] == ErrorCode.INVALID_REQUEST
        assert summary(c, topic_id)["start_offset"] == -1
        broker.kill()
    broker = broker_factory(OVERRIDES, data_dir=broker.data_dir)
    with WireClient(broker.host, broker.port) as c:
        deadline = time.monotonic() + 30
        while (r := summary(c, topic_id))["error_code"] != 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert r["start_offset"] == -1  # the tombstone held
