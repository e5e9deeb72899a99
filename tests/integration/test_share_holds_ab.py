"""What keeps a share group member's records acquired, as raw requests to Kafka 4.4 and to Odradek
(the A/B harness, tests/support/real_kafka.py) with the same answers required.

Kafka's broker releases a member's acquired records when its share session is closed (epoch -1),
when the connection of its session closes, and when their acquisition locks expire - and at no
other time (SharePartitionManager.releaseSession, ShareSessionCache's disconnect listener). In
particular not when a ShareFetch forgets the partition (a client does that when the assignment
moves the partition to another member: it still acknowledges what it already handed to the
application), nor when the member opens a new session (epoch 0) in place of its old one. Releasing
then hands records the member has already delivered to a second member: duplicates.

A RENEW the group does not allow (share.renew.acknowledge.enable=false) is refused and leaves the
records as they were.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

from tests.integration.test_share_groups_java import SHARE_GROUP, produce
from tests.support.config_requests import set_group_configs
from tests.support.real_kafka import TARGETS, Target, create_topic, kafka_and_odradek, unique
from tests.support.wire import WireClient

pytestmark = pytest.mark.timeout(180)

SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACK = 76, 78, 79
ACCEPT, RENEW = 1, 4
NONE, INVALID_RECORD_STATE = 0, 121
RETRIABLE = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    with kafka_and_odradek(tmp_path_factory) as both:
        yield both


def topic_id(c: WireClient, topic: str) -> uuid.UUID:
    r = c.request(3, 12, {"topics": [{"topic_id": None, "name": topic}], "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    return r["topics"][0]["topic_id"]


def share_fetch(c: WireClient, group: str, member: str, epoch: int, tid: uuid.UUID | None,
                forget: bool = False, max_wait_ms: int = 0) -> dict:
    topics = [] if tid is None or forget else [
        {"topic_id": tid, "partitions": [{"partition_index": 0, "partition_max_bytes": 0,
                                          "acknowledgement_batches": []}]}]
    forgotten = [{"topic_id": tid, "partitions": [0]}] if forget else []
    return c.request(SHARE_FETCH, 1, {
        "group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": max_wait_ms,
        "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500, "batch_size": 500,
        "topics": topics, "forgotten_topics_data": forgotten})


def acquired(r: dict) -> list[tuple[int, int, int]]:
    assert r["error_code"] == NONE, r
    return [(a["first_offset"], a["last_offset"], a["delivery_count"])
            for t in r["responses"] for p in t["partitions"] for a in p["acquired_records"]]


def acknowledge(c: WireClient, group: str, member: str, epoch: int, tid: uuid.UUID, first: int, last: int) -> int:
    r = c.request(SHARE_ACK, 1, {"group_id": group, "member_id": member, "share_session_epoch": epoch, "topics": [
        {"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": first, "last_offset": last, "acknowledge_types": [ACCEPT]}]}]}]})
    assert r["error_code"] == NONE, r
    return r["responses"][0]["partitions"][0]["error_code"]


def acquire_all(holder: WireClient, group: str, member: str, tid: uuid.UUID) -> int:
    """The member acquires the topic's five records, all in its first delivery (its first fetches
    may find the state still loading); its session's next epoch."""
    deadline = time.monotonic() + 60
    epoch = 0
    while not (got := acquired(share_fetch(holder, group, member, epoch, tid, max_wait_ms=500))):
        assert time.monotonic() < deadline, "the holder never acquired the records"
        epoch += 1
    assert got == [(0, 4, 1)]
    return epoch + 1


def renew(c: WireClient, group: str, member: str, epoch: int, tid: uuid.UUID, first: int, last: int) -> dict:
    """ShareAcknowledge v2 renewing the locks of first..last (KIP-1222): the partition's answer."""
    r = c.request(SHARE_ACK, 2, {"group_id": group, "member_id": member, "share_session_epoch": epoch,
                                 "is_renew_ack": True, "topics": [
        {"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": first, "last_offset": last, "acknowledge_types": [RENEW]}]}]}]})
    assert r["error_code"] == NONE, r
    return r["responses"][0]["partitions"][0]


def join(c: WireClient, group: str, topic: str) -> str:
    """A member of the share group (ShareGroupHeartbeat), once its coordinator answers."""
    member = uuid.uuid4().hex[:22]
    deadline = time.monotonic() + 60
    while True:
        r = c.request(SHARE_GROUP_HEARTBEAT, 1, {"group_id": group, "member_id": member, "member_epoch": 0,
                                                 "rack_id": None, "subscribed_topic_names": [topic]})
        if r["error_code"] == NONE:
            return member
        assert r["error_code"] in RETRIABLE and time.monotonic() < deadline, r
        c.request(10, 1, {"key": group, "key_type": 0})
        time.sleep(0.2)


@dataclass
class Held:
    """Five records of a one-partition topic, all acquired by ``member`` (on ``holder``) in its
    first delivery; ``second`` (on ``other``) is a member of the same share group."""

    holder: WireClient
    other: WireClient
    group: str
    member: str
    second: str
    tid: uuid.UUID
    epoch: int  # the holder's session's next epoch


@contextmanager
def five_held(target: Target, prefix: str, configs: dict[str, str] | None = None) -> Iterator[Held]:
    """A new topic and share group (``configs`` beside share.auto.offset.reset=earliest), its five
    records held by one of two members; both connections close on exit."""
    topic, group = unique(prefix), unique("sg")
    create_topic(target, topic, 1)
    with WireClient(target.host, target.port) as c:
        set_group_configs(c, group, {"share.auto.offset.reset": "earliest", **(configs or {})})
        tid = topic_id(c, topic)
    produce(target, topic, [f"{prefix}{i}" for i in range(5)], 1)
    with WireClient(target.host, target.port) as holder, WireClient(target.host, target.port) as other:
        member, second = join(holder, group, topic), join(other, group, topic)
        yield Held(holder, other, group, member, second, tid, acquire_all(holder, group, member, tid))


@pytest.mark.parametrize("name", TARGETS)
def test_forgetting_the_partition_or_reopening_the_session_keeps_the_records_acquired(
        targets: dict[str, Target], name: str) -> None:
    target = targets[name]
    target.require(*SHARE_GROUP)
    with five_held(target, "hold") as h:
        holder, other, group, member, second, tid = h.holder, h.other, h.group, h.member, h.second, h.tid
        # It forgets the partition: the records stay its own.
        assert share_fetch(holder, group, member, h.epoch, tid, forget=True)["error_code"] == NONE
        assert acquired(share_fetch(other, group, second, 0, tid, max_wait_ms=1000)) == []
        # It opens a new session in place of the old one: still its own.
        assert share_fetch(holder, group, member, 0, None)["error_code"] == NONE
        assert acquired(share_fetch(other, group, second, 1, tid, max_wait_ms=1000)) == []
        # So its acknowledgement of what it was handed is taken, and nothing is delivered twice.
        assert acknowledge(holder, group, member, 1, tid, 0, 4) == NONE
        assert acquired(share_fetch(other, group, second, 2, tid, max_wait_ms=1000)) == []

@pytest.mark.parametrize("name", TARGETS)
def test_renew_is_refused_where_the_group_config_disables_it(targets: dict[str, Target], name: str) -> None:
    """share.renew.acknowledge.enable=false: Kafka's SharePartition answers a RENEW from the holder
    INVALID_RECORD_STATE with "Renewing acquisition locks is not enabled for the group." and applies
    nothing of that acknowledgement. A group without the config renews (its default is true)."""
    target = targets[name]
    target.require(*SHARE_GROUP)
    with five_held(target, "renew", {"share.renew.acknowledge.enable": "false"}) as h:
        answer = renew(h.holder, h.group, h.member, h.epoch, h.tid, 0, 4)
        assert (answer["error_code"], answer["error_message"]) == (
            INVALID_RECORD_STATE, "Renewing acquisition locks is not enabled for the group."), answer
        # The records are still the holder's, as they were: another member gets none, its ACCEPT is taken.
        assert acquired(share_fetch(h.other, h.group, h.second, 0, h.tid, max_wait_ms=1000)) == []
        assert acknowledge(h.holder, h.group, h.member, h.epoch + 1, h.tid, 0, 4) == NONE
        assert acquired(share_fetch(h.other, h.group, h.second, 1, h.tid, max_wait_ms=1000)) == []
    with five_held(target, "renewed") as h:
        assert renew(h.holder, h.group, h.member, h.epoch, h.tid, 0, 4)["error_code"] == NONE
