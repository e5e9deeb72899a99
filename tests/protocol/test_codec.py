"""The schema-compiled codecs: exact bytes, round trips, tagged fields, hostile input."""

from __future__ import annotations

import random
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.codec import Encoded, codec
from odradek.protocol.primitives import DecodeError
from odradek.protocol.schema_data import MESSAGES

ALL = [(name, v) for name, spec in MESSAGES.items() for v in range(spec["valid"][0], spec["valid"][1] + 1)]


@pytest.mark.parametrize("name,version", ALL)
def test_every_message_version_round_trips_its_defaults(name: str, version: int) -> None:
    c = codec(name, version)
    data = c.encode({})
    decoded, end = c.decode(data)
    assert end == len(data)
    assert c.encode(decoded) == data


def test_api_versions_response_v0_exact_bytes() -> None:
    body = {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]}
    data = codec("ApiVersionsResponse", 0).encode(body)
    assert data == bytes.fromhex("0000" "00000001" "0012" "0000" "0004")


def test_api_versions_response_v3_exact_bytes() -> None:
    body = {
        "error_code": 0,
        "api_keys": [{"api_key": 3, "min_version": 0, "max_version": 12}],
        "throttle_time_ms": 7,
    }
    data = codec("ApiVersionsResponse", 3).encode(body)
    # error_code, compact array (1 + 1), one entry + its empty tags, throttle, empty tags
    assert data == bytes.fromhex("0000" "02" "0003" "0000" "000c" "00" "00000007" "00")


def test_compact_string_and_nullable_encoding() -> None:
    c = codec("ApiVersionsRequest", 3)
    data = c.encode({"client_software_name": "kafka-py", "client_software_version": "3.0"})
    assert data == b"\x09kafka-py" + b"\x043.0" + b"\x00"


def test_unknown_tagged_fields_are_skipped() -> None:
    # ApiVersions v3 request with two tags the schema does not know (7 and 9).
    data = b"\x03ab\x03cd" + b"\x02" + b"\x07\x03xyz" + b"\x09\x00"
    body, end = codec("ApiVersionsRequest", 3).decode(data)
    assert end == len(data)
    # v5's cluster_id and node_id are not in v3: their defaults, as in Kafka's ApiVersionsRequestData.
    assert body == {"client_software_name": "ab", "client_software_version": "cd", "cluster_id": None, "node_id": -1}


def test_known_tagged_field_is_decoded_and_encoded_only_when_not_default() -> None:
    c = codec("FetchRequest", 12)
    base = {"max_wait_ms": 500, "min_bytes": 1, "topics": [], "forgotten_topics_data": [], "rack_id": ""}
    plain = c.encode(base)
    tagged = c.encode({**base, "cluster_id": "abc"})
    assert len(tagged) > len(plain)
    assert c.decode(tagged)[0]["cluster_id"] == "abc"
    assert c.decode(plain)[0]["cluster_id"] is None


def test_fields_absent_in_a_version_decode_to_their_default() -> None:
    c = codec("FetchRequest", 4)
    body, _ = c.decode(c.encode({"max_wait_ms": 1, "min_bytes": 1, "topics": []}))
    assert body["session_epoch"] == -1
    assert body["max_bytes"] == 0x7FFFFFFF
    assert body["rack_id"] == ""


def test_uuid_and_arrays_round_trip() -> None:
    tid = uuid.uuid4()
    c = codec("MetadataResponse", 12)
    body = {
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [
            {
                "error_code": 0,
                "name": "t",
                "topic_id": tid,
                "is_internal": False,
                "partitions": [
                    {"error_code": 0, "partition_index": 0, "leader_id": 1, "leader_epoch": 3,
                     "replica_nodes": [1, 2], "isr_nodes": [1], "offline_replicas": []}
                ],
            }
        ],
    }
    decoded, _ = c.decode(c.encode(body))
    topic = decoded["topics"][0]
    assert topic["topic_id"] == tid
    assert topic["partitions"][0]["replica_nodes"] == [1, 2]
    assert topic["partitions"][0]["leader_epoch"] == 3


def test_records_decode_is_a_zero_copy_view() -> None:
    c = codec("ProduceRequest", 3)
    data = c.encode({"acks": 1, "timeout_ms": 100, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"\x01\x02\x03"}]}]})
    body, _ = c.decode(memoryview(data))
    records = body["topic_data"][0]["partition_data"][0]["records"]
    assert isinstance(records, memoryview)
    assert bytes(records) == b"\x01\x02\x03"


@pytest.mark.parametrize("name,version", [("MetadataRequest", 12), ("ProduceRequest", 9), ("FetchRequest", 15),
                                          ("CreateTopicsRequest", 7), ("ApiVersionsRequest", 3)])
def test_every_truncation_raises_decode_error(name: str, version: int) -> None:
    c = codec(name, version)
    sample = {
        "MetadataRequest": {"topics": [{"name": "abc", "topic_id": uuid.uuid4()}]},
        "ProduceRequest": {"acks": -1, "timeout_ms": 1, "topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": b"x" * 10}]}]},
        "FetchRequest": {"topics": [{"topic_id": uuid.uuid4(), "partitions": [{"partition": 0}]}],
                         "cluster_id": "c"},
        "CreateTopicsRequest": {"topics": [{"name": "t", "num_partitions": 3, "configs": [
            {"name": "a", "value": "b"}]}]},
        "ApiVersionsRequest": {"client_software_name": "x", "client_software_version": "y"},
    }[name]
    data = c.encode(sample)
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            c.decode(data[:cut])


def test_hostile_array_count_is_refused_before_allocating() -> None:
    # MetadataRequest v1: topics array claims 2**31-1 entries with 0 bytes behind it.
    with pytest.raises(DecodeError):
        codec("MetadataRequest", 1).decode(struct.pack(">i", 0x7FFFFFFF))


def test_negative_string_length_other_than_null_is_an_error() -> None:
    with pytest.raises(DecodeError):
        codec("MetadataRequest", 1).decode(struct.pack(">ih", 1, -5))


def test_non_nullable_string_sent_as_null_is_an_error() -> None:
    with pytest.raises(DecodeError):
        codec("MetadataRequest", 1).decode(struct.pack(">ih", 1, -1))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.sampled_from(ALL))
def test_random_bytes_never_escape_as_anything_but_decode_error(data: bytes, name_version) -> None:
    name, version = name_version
    try:
        codec(name, version).decode(data)
    except DecodeError:
        pass


def test_bit_flips_of_valid_requests_never_crash() -> None:
    rng = random.Random(7)
    c = codec("CreateTopicsRequest", 5)
    data = bytearray(c.encode({"topics": [{"name": "topic", "num_partitions": 3, "replication_factor": 1,
                                           "configs": [{"name": "retention.ms", "value": "1000"}]}],
                               "timeout_ms": 1000}))
    for _ in range(2000):
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        try:
            c.decode(bytes(mutated))
        except DecodeError:
            pass


def test_absent_nullable_field_decodes_to_null_not_empty_string() -> None:
    # JoinGroup v4 has no group_instance_id; Kafka's default for it is null (not a static member).
    c = codec("JoinGroupRequest", 4)
    body, _ = c.decode(c.encode({"group_id": "g", "session_timeout_ms": 10, "member_id": "", "protocol_type": "c",
                                 "protocols": []}))
    assert body["group_instance_id"] is None
    # SyncGroup v3 lacks protocol_type/protocol_name (added nullable in v5): null, not "".
    c = codec("SyncGroupRequest", 3)
    body, _ = c.decode(c.encode({"group_id": "g", "generation_id": 1, "member_id": "m", "assignments": []}))
    assert body["protocol_type"] is None and body["protocol_name"] is None


def _metadata_topic(name: str, partitions: int) -> dict:
    return {"error_code": 0, "name": name, "topic_id": uuid.uuid4(), "is_internal": False,
            "partitions": [{"error_code": 0, "partition_index": i, "leader_id": 1, "leader_epoch": 3,
                            "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}
                           for i in range(partitions)],
            "topic_authorized_operations": -(2**31)}


def test_encoded_elements_are_copied_verbatim_in_every_version() -> None:
    for version in range(13):
        c = codec("MetadataResponse", version)
        a, b = _metadata_topic("a", 3), _metadata_topic("b", 1)
        message = {"throttle_time_ms": 0, "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
                   "cluster_id": "cid", "controller_id": 1, "topics": [a, b],
                   "cluster_authorized_operations": -(2**31)}
        plain = c.encode(message)
        topic_encoder = c.element_encoder("topics")
        encoded_a = topic_encoder(a)
        assert type(encoded_a) is Encoded
        # Mixed with ordinary dicts, in any position, the bytes are the same.
        assert c.encode(dict(message, topics=[encoded_a, b])) == plain
        assert c.encode(dict(message, topics=[a, topic_encoder(b)])) == plain
        # A nested array works the same way.
        part_encoder = c.element_encoder("topics", "partitions")
        a_parts = dict(a, partitions=[part_encoder(p) for p in a["partitions"]])
        assert c.encode(dict(message, topics=[a_parts, b])) == plain
        assert c.decode(plain)[0]["topics"][0]["name"] == "a"


def test_element_encoder_needs_a_struct_array_of_that_version() -> None:
    with pytest.raises(ValueError, match="no struct array"):
        codec("MetadataResponse", 12).element_encoder("brokers", "nope")
    with pytest.raises(ValueError, match="no struct array"):
        codec("MetadataResponse", 12).element_encoder("cluster_id")


def test_unsigned_varint_longer_than_five_bytes_is_refused() -> None:
    # ApiVersions v3 (flexible): client_software_name "ab" as compact string, length+1 = 3.
    # Kafka reads at most 5 varint bytes ("Varint is too long"); 5 padded bytes are still a varint.
    c = codec("ApiVersionsRequest", 3)
    five = b"\x83\x80\x80\x80\x00"
    body, _ = c.decode(five + b"ab" + b"\x021" + b"\x00")
    assert body["client_software_name"] == "ab"
    for padded in (b"\x83\x80\x80\x80\x80\x00", b"\x83" + b"\x80" * 8 + b"\x00"):
        with pytest.raises(DecodeError, match="longer than 5 bytes"):
            c.decode(padded + b"ab" + b"\x021" + b"\x00")
    # The same holds for tagged-field counts and the request header's tag section.
    with pytest.raises(DecodeError):
        c.decode(b"\x03ab\x021" + b"\x80\x80\x80\x80\x80\x00")
