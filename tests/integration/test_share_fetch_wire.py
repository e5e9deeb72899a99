"""Share groups' data path (KIP-932) over raw sockets against the real daemon: ShareFetch v1-2,
ShareAcknowledge v1-2 and DescribeShareGroupOffsets v0-1.

Expected values are Kafka 4.4's SharePartition rules: offsets acquired per whole batch, delivery
counts, ACCEPT/RELEASE/REJECT/RENEW, only the holder may acknowledge (INVALID_RECORD_STATE), the
delivery count limit archives, a closed connection or session releases at once, share sessions'
epochs (ShareSessionCache's errors)."""

from __future__ import annotations

import time
import uuid

import pytest

from odradek.broker.share.share_state_store import kafka_uuid_string
from odradek.protocol.errors import ErrorCode
from tests.integration.test_share_coordinator_wire import summary, wait_for_share_coordinator
from tests.integration.test_share_groups_wire import heartbeat, wait_for_coordinator
from tests.support.bad_batches import records, wrap
from tests.support.wire import WireClient, create_topic

pytestmark = pytest.mark.timeout(120)

SHARE_FETCH, SHARE_ACK, DESCRIBE_OFFSETS = 78, 79, 90
ACCEPT, RELEASE, REJECT, RENEW = 1, 2, 3, 4


def share_fetch(c: WireClient, version: int = 1, **fields) -> dict:
    body = {"group_id": "sg", "member_id": "m", "share_session_epoch": 0, "max_wait_ms": 0, "min_bytes": 1,
            "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500, "share_acquire_mode": 0,
            "is_renew_ack": False, "topics": [], "forgotten_topics_data": []}
    body.update(fields)
    return c.request(SHARE_FETCH, version, body)


def fetch_topics(topic_id: uuid.UUID, partitions: list[int], acks: dict[int, list] | None = None) -> list[dict]:
    acks = acks or {}
    return [{"topic_id": topic_id, "partitions": [
        {"partition_index": p, "partition_max_bytes": 0,
         "acknowledgement_batches": [{"first_offset": f, "last_offset": la, "acknowledge_types": t}
                                     for f, la, t in acks.get(p, [])]} for p in partitions]}]


def open_share_partition(c: WireClient, topic_id: uuid.UUID, version: int = 1, **fields) -> dict:
    """The first ShareFetch of a share-partition, once its state can be read: the share-partition
    starts at "latest" when it is initialized, and __share_group_state is created and loaded on
    first use, asynchronously (as Kafka's share coordinator). A fetch that finds the state still
    loading acquires nothing and initializes nothing, so a record produced after it would lie below
    the start the next fetch picks. Waits for the share coordinator to answer for partition 0, as
    a client's second poll would find it."""
    key = f"{fields.get('group_id', 'sg')}:{kafka_uuid_string(topic_id)}:0"
    wait_for_share_coordinator(c, key)
    deadline = time.monotonic() + 30
    while summary(c, topic_id)["error_code"] in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR,
                                                   ErrorCode.COORDINATOR_NOT_AVAILABLE):
        assert time.monotonic() < deadline, "the share state never loaded"
        time.sleep(0.05)
    return share_fetch(c, version, topics=fetch_topics(topic_id, [0]), **fields)


def acquired(r: dict) -> dict[int, list[tuple[int, int, int]]]:
    assert r["error_code"] == 0, r
    return {p["partition_index"]: [(a["first_offset"], a["last_offset"], a["delivery_count"])
                                   for a in p["acquired_records"]]
            for t in r["responses"] for p in t["partitions"]}


def produce(c: WireClient, topic: str, partition: int, count: int) -> None:
    """One batch of ``count`` records, acks=-1."""
    r = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": wrap(records(count), count)}]}]})
    assert r["responses"][0]["partition_responses"][0]["error_code"] == 0, r


def test_share_fetch_acquires_acknowledges_and_redelivers(broker_factory) -> None:
    broker = broker_factory({"group.share.delivery.count.limit": "2", "group.share.min.delivery.count.limit": "2"})
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "sf", 1)
        wait_for_coordinator(c)
        assert heartbeat(c, subscribed_topic_names=["sf"])["error_code"] == 0
        offsets = c.request(DESCRIBE_OFFSETS, 0, {"groups": [{"group_id": "sg", "topics": [
            {"topic_name": "sf", "partitions": [0]}]}]})["groups"][0]
        assert offsets["topics"][0]["partitions"][0]["start_offset"] == -1  # not initialized yet
        # The first fetch initializes the share-partition at the high watermark ("latest").
        r = open_share_partition(c, topic_id)
        assert acquired(r) == {0: []} and r["acquisition_lock_timeout_ms"] == 30000
        produce(c, "sf", 0, 10)
        r = share_fetch(c, share_session_epoch=1)
        assert acquired(r) == {0: [(0, 9, 1)]}
        assert len(r["responses"][0]["partitions"][0]["records"]) > 0
        # A second member gets nothing while the first holds them all.
        r = share_fetch(c, member_id="other", topics=fetch_topics(topic_id, [0]))
        assert acquired(r) == {0: []}
        # Accept 0-3, release 4-6, reject 7-9: only 4-6 come back, to anyone, delivered a second time.
        r = share_fetch(c, share_session_epoch=2, topics=fetch_topics(
            topic_id, [0], {0: [(0, 3, [ACCEPT]), (4, 6, [RELEASE]), (7, 9, [REJECT])]}))
        assert r["responses"][0]["partitions"][0]["acknowledge_error_code"] == 0
        assert acquired(r) == {0: [(4, 6, 2)]}
        # Acknowledging what another member holds: INVALID_RECORD_STATE, nothing applied.
        r = share_fetch(c, member_id="other", share_session_epoch=1,
                        topics=fetch_topics(topic_id, [0], {0: [(4, 6, [ACCEPT])]}))
        assert r["responses"][0]["partitions"][0]["acknowledge_error_code"] == ErrorCode.INVALID_RECORD_STATE
        # Released after its second delivery (the limit, 2): archived, never delivered again.
        r = c.request(SHARE_ACK, 1, {"group_id": "sg", "member_id": "m", "share_session_epoch": 3,
                                     "topics": fetch_topics(topic_id, [0], {0: [(4, 6, [RELEASE])]})})
        assert r["error_code"] == 0 and r["responses"][0]["partitions"][0]["error_code"] == 0, r
        assert acquired(share_fetch(c, member_id="other", share_session_epoch=2)) == {}
        offsets = c.request(DESCRIBE_OFFSETS, 1, {"groups": [{"group_id": "sg", "topics": None}]})["groups"][0]
        # The stored start offset, as Kafka 4.4 answers it: the last write (4-6 archived) carried the
        # SPSO from before it (4); nothing is left to deliver.
        assert offsets["topics"][0]["partitions"][0]["start_offset"] == 4
        assert offsets["topics"][0]["partitions"][0]["lag"] == 0
        # Sessions: a wrong epoch, no session, acknowledgements on an opening fetch.
        assert share_fetch(c, share_session_epoch=9)["error_code"] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        assert share_fetch(c, member_id="nobody", share_session_epoch=1)["error_code"] == \
            ErrorCode.SHARE_SESSION_NOT_FOUND
        assert share_fetch(c, topics=fetch_topics(topic_id, [0], {0: [(0, 0, [ACCEPT])]}))["error_code"] == \
            ErrorCode.INVALID_REQUEST
        assert share_fetch(c, topics=fetch_topics(uuid.uuid4(), [0]))["responses"][0]["partitions"][0][
            "error_code"] == ErrorCode.UNKNOWN_TOPIC_ID


def test_closed_connection_and_closed_session_release_at_once(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "sc", 1)
        wait_for_coordinator(c)
        open_share_partition(c, topic_id)
        produce(c, "sc", 0, 5)
        with WireClient(broker.host, broker.port) as holder:
            assert acquired(share_fetch(holder, member_id="h", topics=fetch_topics(topic_id, [0]))) == \
                {0: [(0, 4, 1)]}
        # The holder's connection closed: its records are Available again at once, not after 30 s.
        r = share_fetch(c, share_session_epoch=1, max_wait_ms=3000)
        assert acquired(r) == {0: [(0, 4, 2)]}
        # Closing the session (epoch -1) releases too.
        r = share_fetch(c, share_session_epoch=-1)
        assert r["error_code"] == 0
        r = share_fetch(c, member_id="x", topics=fetch_topics(topic_id, [0]))
        assert acquired(r) == {0: [(0, 4, 3)]}


def test_share_fetch_v2_record_limit_and_renew(broker_factory) -> None:
    broker = broker_factory({"group.share.record.lock.duration.ms": "2000",
                             "group.share.min.record.lock.duration.ms": "1000"})
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "sv", 1)
        wait_for_coordinator(c)
        open_share_partition(c, topic_id, 2)
        produce(c, "sv", 0, 10)
        # record_limit (1): at most max_records, cutting the batch.
        r = share_fetch(c, 2, share_session_epoch=1, max_records=4, share_acquire_mode=1)
        assert acquired(r) == {0: [(0, 3, 1)]}
        # batch_optimized (0): the whole batch.
        r = share_fetch(c, 2, share_session_epoch=2, max_records=1)
        assert acquired(r) == {0: [(4, 9, 1)]}
        # RENEW keeps 0-3 past their lock; 4-9 expire and go to another member.
        for epoch in (3, 4):
            time.sleep(1.2)
            r = c.request(SHARE_ACK, 2, {"group_id": "sg", "member_id": "m", "share_session_epoch": epoch,
                                         "is_renew_ack": True,
                                         "topics": fetch_topics(topic_id, [0], {0: [(0, 3, [RENEW])]})})
            assert r["responses"][0]["partitions"][0]["error_code"] == 0 and r["acquisition_lock_timeout_ms"] == 2000
        r = share_fetch(c, 2, member_id="other", topics=fetch_topics(topic_id, [0]))
        assert acquired(r) == {0: [(4, 9, 2)]}


def test_alter_and_delete_share_group_offsets_of_an_empty_group(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "so", 1)
        wait_for_coordinator(c)
        assert heartbeat(c, subscribed_topic_names=["so"])["error_code"] == 0
        open_share_partition(c, topic_id)
        produce(c, "so", 0, 6)
        assert acquired(share_fetch(c, share_session_epoch=1)) == {0: [(0, 5, 1)]}
        alter = {"group_id": "sg", "topics": [{"topic_name": "so", "partitions": [
            {"partition_index": 0, "start_offset": 2}]}]}
        # A member is in the group: refused whole, nothing changed.
        r = c.request(91, 0, alter)
        assert (r["error_code"], r["responses"]) == (ErrorCode.NON_EMPTY_GROUP, []), r
        r = c.request(92, 0, {"group_id": "sg", "topics": [{"topic_name": "so"}]})
        assert r["error_code"] == ErrorCode.NON_EMPTY_GROUP, r
        assert c.request(91, 0, {**alter, "group_id": "nope"})["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND
        assert heartbeat(c, member_epoch=-1)["member_epoch"] == -1
        share_fetch(c, share_session_epoch=-1)
        # Empty: the share-partition starts over at 2; offsets outside the log are refused.
        r = c.request(91, 0, {"group_id": "sg", "topics": [{"topic_name": "so", "partitions": [
            {"partition_index": 0, "start_offset": 2}, {"partition_index": 7, "start_offset": 0}]}]})
        assert [(p["partition_index"], p["error_code"]) for p in r["responses"][0]["partitions"]] == \
            [(0, 0), (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)], r
        r = c.request(91, 0, {**alter, "topics": [{"topic_name": "so", "partitions": [
            {"partition_index": 0, "start_offset": 99}]}]})
        assert r["responses"][0]["partitions"][0]["error_code"] == ErrorCode.INVALID_REQUEST
        offsets = c.request(DESCRIBE_OFFSETS, 1, {"groups": [{"group_id": "sg", "topics": None}]})["groups"][0]
        assert [(p["start_offset"], p["lag"]) for p in offsets["topics"][0]["partitions"]] == [(2, 4)]
        assert acquired(share_fetch(c, member_id="n", topics=fetch_topics(topic_id, [0]))) == {0: [(2, 5, 1)]}
        share_fetch(c, member_id="n", share_session_epoch=-1)
        # Deleted: no start offset any more.
        r = c.request(92, 0, {"group_id": "sg", "topics": [{"topic_name": "so"}, {"topic_name": "nope"}]})
        assert [(t["topic_name"], t["error_code"]) for t in r["responses"]] == \
            [("so", 0), ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)], r
        offsets = c.request(DESCRIBE_OFFSETS, 0, {"groups": [{"group_id": "sg", "topics": None}]})["groups"][0]
        assert offsets["topics"] == []
