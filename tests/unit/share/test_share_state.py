"""Share-partitions' durable state (broker/share/share_state_records.py, share_state_store.py's
shard, SharePartition.durable_state/restore) against Kafka 4.4's share coordinator: a ShareSnapshot
is the whole state, a ShareUpdate's batches replace the offsets they cover and the start offset
prunes what lies below it (ShareCoordinatorShard's merge), a tombstone deletes, and delivery states
are 0 Available, 2 Acknowledged, 4 Archived (an Acquired record is stored Available)."""

from __future__ import annotations

import struct
import uuid

from odradek.broker.share.share_partition import RecordState, SharePartition
from odradek.broker.share.share_state_records import ShareState, encode_key, encode_snapshot
from odradek.broker.share.share_state_store import ShareStateShard, kafka_uuid_string
from odradek.protocol.codec import MessageCodec
from odradek.protocol.share_coordinator_schema_data import MESSAGES

TOPIC = uuid.UUID("f7d65a35-52b9-4a41-93af-be4f9bb54271")
KEY = ("sg", TOPIC, 0)


def update(start_offset: int, batches: list[tuple[int, int, int, int]]) -> tuple[bytes, bytes]:
    key = struct.pack(">h", 1) + MessageCodec("ShareUpdateKey", 0, MESSAGES).encode(
        {"group_id": "sg", "topic_id": TOPIC, "partition": 0})
    value = struct.pack(">h", 0) + MessageCodec("ShareUpdateValue", 0, MESSAGES).encode({
        "snapshot_epoch": 0, "leader_epoch": 3, "start_offset": start_offset, "delivery_complete_count": -1,
        "state_batches": [{"first_offset": f, "last_offset": la, "delivery_state": s, "delivery_count": c}
                          for f, la, s, c in batches]})
    return key, value


def test_kafka_uuid_string_is_url_safe_base64_without_padding() -> None:
    # Kafka's Uuid.ZERO_UUID and Uuid.METADATA_TOPIC_ID (new Uuid(0L, 1L)) print so.
    assert kafka_uuid_string(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert kafka_uuid_string(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"


def test_updates_merge_into_the_snapshot_and_a_tombstone_deletes() -> None:
    shard = ShareStateShard(0)
    shard.replay(0, *encode_snapshot(KEY, ShareState(10, batches=[(10, 19, 0, 1), (20, 29, 2, 1)])))
    # 15-24 archived after a second delivery; the start offset unchanged (-1).
    shard.replay(1, *update(-1, [(15, 24, 4, 2)]))
    assert shard.states[KEY].batches == [(10, 14, 0, 1), (15, 24, 4, 2), (25, 29, 2, 1)]
    assert shard.states[KEY].leader_epoch == 3
    # The start offset moves to 25: everything below it goes.
    shard.replay(2, *update(25, []))
    assert (shard.states[KEY].start_offset, shard.states[KEY].batches) == (25, [(25, 29, 2, 1)])
    shard.replay(3, encode_key(KEY), None)
    assert shard.states == {}


def test_an_unreadable_record_is_skipped_and_the_rest_loads() -> None:
    shard = ShareStateShard(0)
    shard.replay(0, b"\x00", b"")  # shorter than its type
    shard.replay(1, struct.pack(">h", 7) + b"x", b"")  # not a share-state type
    key, value = encode_snapshot(KEY, ShareState(5))
    shard.replay(2, key, value[:-3])  # cut short
    shard.replay(3, key, value)
    assert shard.states[KEY].start_offset == 5


def test_written_state_is_kafkas_acquisitions_unwritten_and_the_start_before_the_acknowledgement() -> None:
    # Kafka 4.4's SharePartition writes on acknowledgement with the SPSO it had before (its cached
    # SPSO moves once the write succeeded), and never writes an acquisition.
    sp = SharePartition("sg", "t", 0, 0, delivery_count_limit=5, max_in_flight=100)
    sp.acquire("m", [(0, 9), (10, 19)], 500, now_ms=0, lock_ms=1000)
    assert sp.durable_state() == (0, [])
    sp.acknowledge("m", [(0, 4, [1]), (5, 6, [3])], now_ms=1, lock_ms=1000)
    assert sp.start_offset == 7
    start, batches = sp.durable_state()
    assert (start, batches) == (0, [(0, 4, int(RecordState.ACKNOWLEDGED), 1), (5, 6, int(RecordState.ARCHIVED), 1)])
    # A new leader moves past what was finished; 7-19 were never written: delivered once more, as new.
    again = SharePartition.restore("sg", "t", 0, start, batches, delivery_count_limit=5, max_in_flight=100)
    assert (again.start_offset, again.next_offset) == (7, 7)
    assert again.durable_state() == (7, [])
    assert again.acquire("n", [(0, 9), (10, 19)], 500, now_ms=0, lock_ms=1000) == [(7, 19, 1)]


def test_a_released_record_is_written_with_its_count_and_a_renewal_writes_nothing() -> None:
    sp = SharePartition("sg", "t", 0, 0, delivery_count_limit=5, max_in_flight=100)
    sp.acquire("m", [(0, 9)], 500, now_ms=0, lock_ms=1000)
    sp.acknowledge("m", [(0, 9, [4])], now_ms=1, lock_ms=1000)  # RENEW
    assert sp.durable_state() == (0, [])
    sp.acknowledge("m", [(0, 9, [2])], now_ms=2, lock_ms=1000)  # RELEASE
    assert sp.durable_state() == (0, [(0, 9, int(RecordState.AVAILABLE), 1)])
    # Delivered again (count 2 in memory): the store still has the release's count.
    assert sp.acquire("m", [(0, 9)], 500, now_ms=3, lock_ms=1000) == [(0, 9, 2)]
    assert sp.durable_state() == (0, [(0, 9, int(RecordState.AVAILABLE), 1)])
    # The lock expires: written Available, delivered twice.
    assert sp.expire_locks(5000) == 10
    assert sp.durable_state() == (0, [(0, 9, int(RecordState.AVAILABLE), 2)])
    again = SharePartition.restore("sg", "t", 0, *sp.durable_state(), delivery_count_limit=5, max_in_flight=100)
    assert again.acquire("n", [(0, 9)], 500, now_ms=0, lock_ms=1000) == [(0, 9, 3)]


def test_each_write_carries_the_start_offset_the_previous_one_left() -> None:
    sp = SharePartition("sg", "t", 0, 2, delivery_count_limit=5, max_in_flight=100)
    sp.acquire("a", [(2, 11)], 500, now_ms=0, lock_ms=1000)
    sp.acknowledge("a", [(2, 11, [1])], now_ms=1, lock_ms=1000)
    assert sp.durable_state() == (2, [(2, 11, int(RecordState.ACKNOWLEDGED), 1)])
    sp.acquire("b", [(12, 21), (22, 31)], 500, now_ms=2, lock_ms=1000)
    sp.acknowledge("b", [(12, 31, [1])], now_ms=3, lock_ms=1000)
    assert sp.durable_state() == (12, [(12, 31, int(RecordState.ACKNOWLEDGED), 1)])
    assert sp.start_offset == 32


def test_restore_reads_offsets_missing_between_stored_ranges_as_never_delivered() -> None:
    # 10-14 acquired once and never written; 15-19 released after one delivery.
    again = SharePartition.restore("sg", "t", 0, 10, [(15, 19, 0, 1)], 5, 100)
    assert (again.start_offset, again.next_offset) == (10, 20)
    assert again.acquire("m", [(10, 19), (20, 24)], 500, now_ms=0, lock_ms=1000) == [
        (10, 14, 1), (15, 19, 2), (20, 24, 1)]


def test_restore_keeps_acknowledged_and_archived_offsets_done() -> None:
    again = SharePartition.restore("sg", "t", 0, 10, [(10, 12, 2, 1), (13, 14, 0, 1), (15, 16, 4, 5)], 5, 100)
    assert again.start_offset == 13
    assert again.acquire("m", [(10, 16), (17, 20)], 500, now_ms=0, lock_ms=1000) == [(13, 14, 2), (17, 20, 1)]
