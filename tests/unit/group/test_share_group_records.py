"""The share-group records of __consumer_offsets against Kafka 4.4's ShareGroup*.json (group-coordinator
jar): key = int16 record type + the key message (version 0, not flexible); value = int16 version 0 +
the value message (flexible: compact strings and arrays, a tagged-field section per struct). The
expected bytes are written out by hand from those schemas, not produced by our codec."""

from __future__ import annotations

import uuid

from odradek.broker.group import share_group_records as SGR
from odradek.broker.group.share_group import ShareGroup, ShareGroupMember, records_of_change, replay_into

TOPIC = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def s16(text: str) -> bytes:  # a non-flexible string: int16 length
    return len(text).to_bytes(2, "big") + text.encode()


def cs(text: str) -> bytes:  # a compact string: uvarint length + 1
    return bytes([len(text) + 1]) + text.encode()


def i32(n: int) -> bytes:
    return n.to_bytes(4, "big", signed=True)


def member() -> ShareGroupMember:
    return ShareGroupMember("m1", member_epoch=4, previous_member_epoch=3, rack_id=None, client_id="c",
                            client_host="/h", subscribed_topic_names=frozenset({"t"}),
                            assignment={TOPIC: frozenset({1, 0})})


def test_group_metadata_key_11_and_value() -> None:
    key, value = SGR.group_metadata_record("g", 3, 5).encode()
    assert key == b"\x00\x0b" + s16("g")
    assert value == b"\x00\x00" + i32(3) + (5).to_bytes(8, "big") + b"\x00"


def test_member_metadata_key_10_and_value() -> None:
    key, value = SGR.member_metadata_record("g", member()).encode()
    assert key == b"\x00\x0a" + s16("g") + s16("m1")
    # rack_id null (compact: 0), client_id, client_host, subscribed_topic_names [t], no tags
    assert value == b"\x00\x00" + b"\x00" + cs("c") + cs("/h") + b"\x02" + cs("t") + b"\x00"


def test_target_assignment_keys_12_13_and_values() -> None:
    key, value = SGR.target_assignment_metadata_record("g", 3).encode()
    # assignment_timestamp is tagged with default 0: not written at its default
    assert key == b"\x00\x0c" + s16("g") and value == b"\x00\x00" + i32(3) + b"\x00"
    key, value = SGR.target_assignment_record("g", "m1", {TOPIC: frozenset({1, 0})}).encode()
    assert key == b"\x00\x0d" + s16("g") + s16("m1")
    assert value == b"\x00\x00" + b"\x02" + TOPIC.bytes + b"\x03" + i32(0) + i32(1) + b"\x00" + b"\x00"


def test_current_member_assignment_key_14_and_value() -> None:
    key, value = SGR.current_assignment_record("g", member()).encode()
    assert key == b"\x00\x0e" + s16("g") + s16("m1")
    assert value == (b"\x00\x00" + i32(4) + i32(3) + b"\x00"  # epochs, state STABLE
                     + b"\x02" + TOPIC.bytes + b"\x03" + i32(0) + i32(1) + b"\x00" + b"\x00")


def test_state_partition_metadata_key_15_and_value() -> None:
    key, value = SGR.state_partition_metadata_record("g", [(TOPIC, "t", 2)]).encode()
    assert key == b"\x00\x0f" + s16("g")
    assert value == (b"\x00\x00" + b"\x01"  # initializing_topics: empty
                     + b"\x02" + TOPIC.bytes + cs("t") + b"\x03" + i32(0) + i32(1) + b"\x00"  # initialized
                     + b"\x01" + b"\x00")  # deleting_topics: empty; no tags


def test_tombstones_and_decode() -> None:
    assert SGR.tombstone(SGR.GROUP_METADATA, "g").encode() == (b"\x00\x0b" + s16("g"), None)
    key, value = SGR.member_metadata_record("g", member()).encode()
    rec = SGR.decode(key, value)
    assert (rec.kind, rec.group_id, rec.member_id) == (10, "g", "m1")
    assert rec.value is not None and rec.value["subscribed_topic_names"] == ["t"]
    assert SGR.is_share_group_key(key) and not SGR.is_share_group_key(b"\x00\x03" + s16("g"))
    assert not SGR.is_share_group_key(b"\x00\x09" + s16("g"))  # Kafka 4.0's partition metadata: gone in 4.4


def test_a_group_replays_from_its_change_records_and_its_deletion_removes_it() -> None:
    group = ShareGroup("g", group_epoch=2, assignment_epoch=2, members={"m1": member()},
                       subscribed_metadata=((TOPIC, 2),))
    records = records_of_change("g", None, group, {TOPIC: "t"})
    assert [r.kind for r in records] == [10, 11, 13, 12, 14, 15]  # Kafka's order for a new group
    groups: dict[str, ShareGroup] = {}
    for r in records:
        replay_into(groups, SGR.decode(*r.encode()))
    assert groups == {"g": group}
    # the member leaves: its three tombstones, the epoch; then the empty group is deleted
    empty = ShareGroup("g", group_epoch=3, assignment_epoch=3, subscribed_metadata=((TOPIC, 2),))
    left = records_of_change("g", group, empty, {TOPIC: "t"})
    assert [(r.kind, r.value is None) for r in left] == [(14, True), (13, True), (10, True), (11, False),
                                                         (12, False)]
    for r in left:
        replay_into(groups, SGR.decode(*r.encode()))
    assert groups == {"g": empty}
    gone = records_of_change("g", empty, None, {TOPIC: "t"})
    assert [(r.kind, r.value) for r in gone] == [(12, None), (15, None), (11, None)]
    for r in gone:
        replay_into(groups, SGR.decode(*r.encode()))
    assert groups == {}
    # nothing changed: nothing written
    assert records_of_change("g", empty, ShareGroup("g", 3, 3, {}, ((TOPIC, 2),)), {TOPIC: "t"}) == []
