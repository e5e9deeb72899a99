"""Java String.hashCode / Utils.abs, and the exact bytes of __consumer_offsets records."""

from __future__ import annotations

import random
import struct

import pytest

from odradek.broker.coordinator.hashing import (
    java_string_hash_code,
    legacy_partition_for,
    partition_for,
    utils_abs,
)
from odradek.broker.group import records as R
from odradek.broker.group.consumer_protocol import subscribed_topics
from tests.support.java_partitions import kafka_partitions
from tools.kafka_dist import ToolchainUnavailable


@pytest.mark.parametrize("text,expected", [
    ("", 0),
    ("a", 97),
    ("group", 98629247),                 # "group".hashCode() in Java
    ("hello", 99162322),
    ("polygenelubricants", -2147483648),  # Integer.MIN_VALUE, the famous case
    ("\u00e9", 233),
    ("\U0001F600", 1772899),              # a surrogate pair: 0xD83D * 31 + 0xDE00
])
def test_java_string_hash_code(text: str, expected: int) -> None:
    assert java_string_hash_code(text) == expected


def test_utils_abs_is_the_absolute_value_with_min_value_mapped_to_zero() -> None:
    # Kafka's Utils.abs: (n == Integer.MIN_VALUE) ? 0 : Math.abs(n).
    assert utils_abs(-2147483648) == 0
    assert utils_abs(-1) == 1
    assert utils_abs(-2147483647) == 2147483647
    assert utils_abs(5) == 5
    assert utils_abs(0) == 0


def _ids() -> list[str]:
    """Ids whose partition the tests compare with Kafka's: the famous MIN_VALUE hash, negative
    hashes, non-ASCII and astral (surrogate-pair) characters, the empty string, and random ones."""
    rng = random.Random(27)
    alphabet = "abcxyzABC019-_.:\u00e9\u00fc\u4e2d\u6587\u0416\U0001F600\U0001D11E\U00010348"
    ids = ["polygenelubricants", "", "g", "group", "faults", "upgrade-txn", "upgrade-open",
           "consumer-group-with-a-long-name", "\u00e9", "\u65e5\u672c\u8a9e-group", "\U0001F600",
           "emoji-\U0001F600-\U0001D11E", "GydZG_", "DESIGNING WORKHOUSES"]
    ids += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))) for _ in range(300)]
    return ids


COUNTS = [50, 1, 3, 5, 7, 64, 100]


@pytest.fixture(scope="module")
def kafka_table() -> dict[str, tuple[int, list[int]]]:
    try:
        return kafka_partitions(_ids(), COUNTS)
    except ToolchainUnavailable as exc:
        pytest.skip(f"Kafka's partitions come from Java, unavailable here: {exc}")


def test_partition_for_is_kafkas_for_every_id(kafka_table: dict[str, tuple[int, list[int]]]) -> None:
    """Expected values computed by Kafka's own Utils.abs and Java's String.hashCode (in a JVM)."""
    negative = 0
    for id_, (hash_code, partitions) in kafka_table.items():
        assert java_string_hash_code(id_) == hash_code, id_
        assert [partition_for(id_, n) for n in COUNTS] == partitions, id_
        negative += hash_code < 0
    assert kafka_table["polygenelubricants"][0] == -2147483648
    assert negative > 100  # the ids the masked rule got wrong are well represented
    assert any(len(i.encode("utf-16-le")) > 2 * len(i) for i in kafka_table)  # surrogate pairs too


def test_the_legacy_rule_differs_exactly_for_negative_hashes_other_than_min_value(
        kafka_table: dict[str, tuple[int, list[int]]]) -> None:
    """What the releases before the fix computed ((hash & 0x7fffffff) % n) against Kafka's: the same
    partition for a non-negative hash and for MIN_VALUE, another one for most negative hashes. The
    state of the moved ones is what broker/coordinator/rehash.py carries over."""
    moved = 0
    for id_, (hash_code, partitions) in kafka_table.items():
        assert legacy_partition_for(id_, 50) == (hash_code & 0x7FFFFFFF) % 50
        if hash_code >= 0 or hash_code == -2147483648:
            assert legacy_partition_for(id_, 50) == partitions[0], id_
        moved += legacy_partition_for(id_, 50) != partitions[0]
    assert moved > 100
    assert legacy_partition_for("faults", 50) == 37 and kafka_table["faults"][1][0] == 11


def s(text: str) -> bytes:
    b = text.encode()
    return struct.pack(">h", len(b)) + b


def test_offset_commit_key_bytes() -> None:
    # key version 1, then OffsetCommitKey: group, topic, partition
    expected = struct.pack(">h", 1) + s("grp") + s("topic") + struct.pack(">i", 7)
    assert R.offset_commit_key("grp", "topic", 7) == expected
    assert R.decode_key(expected) == R.OffsetKey("grp", "topic", 7)


def test_offset_commit_value_v3_bytes() -> None:
    om = R.OffsetAndMetadata(42, 5, "meta", 1700000000000)
    expected = (struct.pack(">h", 3) + struct.pack(">q", 42) + struct.pack(">i", 5) + s("meta")
                + struct.pack(">q", 1700000000000))
    assert R.offset_commit_value(om) == expected
    assert R.decode_offset_value(expected) == om


def test_offset_commit_value_v1_with_expire_timestamp() -> None:
    om = R.OffsetAndMetadata(42, -1, "", 10, 99)
    expected = struct.pack(">h", 1) + struct.pack(">q", 42) + s("") + struct.pack(">q", 10) + struct.pack(">q", 99)
    assert R.offset_commit_value(om) == expected
    assert R.decode_offset_value(expected) == om


def test_group_metadata_key_and_value_v3_bytes() -> None:
    assert R.group_metadata_key("grp") == struct.pack(">h", 2) + s("grp")
    value = {"protocol_type": "consumer", "generation": 3, "protocol": "range", "leader": "m1",
             "current_state_timestamp": 123,
             "members": [{"member_id": "m1", "group_instance_id": "i1", "client_id": "c", "client_host": "/h",
                          "rebalance_timeout": 300, "session_timeout": 100, "subscription": b"\x01\x02",
                          "assignment": b"\x03"}]}
    expected = (struct.pack(">h", 3) + s("consumer") + struct.pack(">i", 3) + s("range") + s("m1")
                + struct.pack(">q", 123) + struct.pack(">i", 1)
                + s("m1") + s("i1") + s("c") + s("/h") + struct.pack(">ii", 300, 100)
                + struct.pack(">i", 2) + b"\x01\x02" + struct.pack(">i", 1) + b"\x03")
    assert R.group_metadata_value(value) == expected
    assert R.decode_group_value(expected) == value


def test_group_metadata_value_v0_is_read() -> None:
    # v0 (Kafka 0.9): no current_state_timestamp, no rebalance_timeout, no group_instance_id.
    data = (struct.pack(">h", 0) + s("consumer") + struct.pack(">i", 1) + s("range") + s("m")
            + struct.pack(">i", 1) + s("m") + s("c") + s("/h") + struct.pack(">i", 100)
            + struct.pack(">i", 0) + struct.pack(">i", 0))
    v = R.decode_group_value(data)
    assert v["generation"] == 1 and v["members"][0]["session_timeout"] == 100
    assert v["members"][0]["rebalance_timeout"] == -1 and v["current_state_timestamp"] == -1


def test_unknown_and_corrupt_records() -> None:
    assert R.decode_key(struct.pack(">h", 5) + b"whatever") == R.OtherKey(5)
    with pytest.raises(R.CorruptRecordError):
        R.decode_key(b"\x00")
    with pytest.raises(R.CorruptRecordError):
        R.decode_key(struct.pack(">h", 1) + b"\x00\x05ab")  # truncated group string
    with pytest.raises(R.CorruptRecordError):
        R.decode_offset_value(struct.pack(">h", 9) + b"\x00" * 20)  # no such version


def test_subscribed_topics() -> None:
    data = struct.pack(">h", 1) + struct.pack(">i", 2) + s("a") + s("bb") + b"\xff\xff\xff\xff"
    assert subscribed_topics(data) == {"a", "bb"}
    assert subscribed_topics(b"\x00") is None
    assert subscribed_topics(struct.pack(">h", 0) + struct.pack(">i", 99)) is None
