"""The native Produce codec (protocol/_produce_codec.c) against the generated one (odradek.protocol.codec).

Every ProduceRequest version 3-13 is decoded by both from generated and from mutated frames (bit
flips, truncations, insertions, hostile lengths): both must give equal dicts or both DecodeError.
Every ProduceResponse version 3-13 is encoded by both: the same bytes, including the shapes the
native encoder hands back to the generated one. v13 names topics by topic_id (KIP-516).
"""

from __future__ import annotations

import random
import shutil
import struct
import tracemalloc
import uuid
from typing import Any

import pytest

from odradek.protocol import primitives as P
from odradek.protocol import produce_codec
from odradek.protocol.codec import Encoded, MessageCodec, codec
from odradek.protocol.errors import ErrorCode
from odradek.protocol.primitives import DecodeError

VERSIONS = range(3, 14)
NAMES = ["t", "orders", "a.b_c-d", "ünïcode-tøpic", "x" * 249]
TOPIC_IDS = [uuid.UUID(int=0), uuid.UUID(int=1), uuid.UUID("7d1fb6a4-9a52-4be4-9f4e-2bd1c3a1e0f5"),
             uuid.UUID(int=2**128 - 1)]


def _native_or_skip() -> None:
    if produce_codec.NATIVE:
        return
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler: the generated Produce codec is in use")
    pytest.fail("protocol/_produce_codec.c is not built: run pip install -e . (make venv)")


def _topic(rng: random.Random) -> dict[str, Any]:
    """A topic as each version names it: v13 by id (the name is not on the wire), before by name."""
    return {"name": rng.choice(NAMES), "topic_id": rng.choice(TOPIC_IDS)}


def _request(rng: random.Random) -> dict[str, Any]:
    return {
        "transactional_id": rng.choice([None, "", "txn-1", "ťx"]),
        "acks": rng.choice([-1, 0, 1, 2, -32768, 32767]),
        "timeout_ms": rng.choice([0, 30000, -1, 2**31 - 1, -(2**31)]),
        "topic_data": [
            {**_topic(rng), "partition_data": [
                {"index": rng.randrange(-5, 2**31 - 1),
                 "records": rng.choice([None, b"", rng.randbytes(rng.randrange(1, 300))])}
                for _ in range(rng.randrange(0, 4))]}
            for _ in range(rng.randrange(0, 4))],
    }


def _plain(value: Any) -> Any:
    """Records (memoryview slices) as bytes, so two decodings compare by content."""
    if isinstance(value, memoryview):
        return ("view", value.tobytes())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _decode(decoder: MessageCodec, frame: bytes, pos: int) -> Any:
    try:
        message, end = decoder.decode(memoryview(frame), pos)
    except DecodeError:
        return DecodeError
    # Kafka 4.4's schema adds topic_id from v13 (KIP-516); before v13 the generated decoder fills a
    # field the version lacks with its default (the zero id), the native one leaves it out: the
    # handler reads names only there. Compared without it before v13; from v13 both give the id
    # and the generated default name, "".
    if decoder.version < 13:
        for topic in message.get("topic_data", ()):
            topic.pop("topic_id", None)
    return _plain(message), end


def _mutations(frame: bytes, rng: random.Random) -> list[bytes]:
    out = [frame[:cut] for cut in range(len(frame))] if len(frame) < 80 else \
        [frame[:rng.randrange(len(frame))] for _ in range(40)]
    for _ in range(60):
        b = bytearray(frame)
        for _ in range(rng.randrange(1, 4)):
            at = rng.randrange(len(b)) if b else 0
            kind = rng.randrange(4)
            if kind == 0 and b:
                b[at] ^= 1 << rng.randrange(8)
            elif kind == 1 and b:
                b[at] = rng.choice([0x00, 0x7F, 0x80, 0xFF])
            elif kind == 2:
                b[at:at] = bytes([rng.choice([0x80, 0xFF, 0x01, 0x00])])
            else:
                b[at:at + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x80\x80\x80\x80"])
        out.append(bytes(b))
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_requests_decode_the_same(version: int) -> None:
    _native_or_skip()
    native, generated = codec("ProduceRequest", version), MessageCodec("ProduceRequest", version, native=False)
    assert produce_codec.native_decoder("ProduceRequest", version) is not None  # every served version
    assert native._decode is not generated._decode
    rng = random.Random(version)
    for _ in range(150):
        request = _request(rng)
        prefix = rng.randbytes(rng.randrange(0, 5))  # the request header before the body
        frame = prefix + generated.encode(request)
        expected = _decode(generated, frame, len(prefix))
        assert expected is not DecodeError
        assert _decode(native, frame, len(prefix)) == expected
        message, _ = native.decode(memoryview(frame), len(prefix))
        for topic in message["topic_data"]:
            for partition in topic["partition_data"]:
                records = partition["records"]
                assert records is None or isinstance(records, memoryview)  # zero-copy, as generated
        for mutated in _mutations(frame, rng):
            assert _decode(native, mutated, len(prefix)) == _decode(generated, mutated, len(prefix)), mutated.hex()


def test_v13_decodes_topic_ids_as_uuids() -> None:
    _native_or_skip()
    native = codec("ProduceRequest", 13)
    topic_id = TOPIC_IDS[2]
    frame = MessageCodec("ProduceRequest", 13, native=False).encode({
        "transactional_id": None, "acks": 1, "timeout_ms": 5,
        "topic_data": [{"topic_id": topic_id, "partition_data": [{"index": 0, "records": b"r"}]}]})
    message, end = native.decode(memoryview(frame), 0)
    assert end == len(frame)
    (topic,) = message["topic_data"]
    assert type(topic["topic_id"]) is uuid.UUID and topic["topic_id"] == topic_id and topic["name"] == ""
    with pytest.raises(DecodeError):  # the id cut short
        native.decode(memoryview(frame[:frame.index(topic_id.bytes) + 15]), 0)


@pytest.mark.parametrize("version", [3, 8, 9, 11, 12, 13])
def test_hostile_lengths_are_decode_errors(version: int) -> None:
    _native_or_skip()
    native = codec("ProduceRequest", version)
    flexible = version >= 9
    lie = b"\xff\xff\xff\xff\x0f" if flexible else b"\x7f\xff\xff\xff"  # a count of billions
    head = (b"\x00" if flexible else b"\xff\xff") + struct.pack(">hi", 1, 1000)
    one = b"\x02" if flexible else b"\x00\x00\x00\x01"  # one element follows
    short_name = b"\x06ab" if flexible else b"\x00\x05ab"  # a name longer than the frame
    too_long = b"\xff\xff\xff\xff\xff\x01" if flexible else b"\x80\x00\x00\x00"  # 6-byte varint / -2**31
    for frame in (head + lie, head + one + short_name + lie, head + one + short_name, head + too_long,
                  b"", b"\x00", head[:3]):
        with pytest.raises(DecodeError):
            native.decode(memoryview(frame), 0)
    with pytest.raises(DecodeError):  # a position beyond the frame
        native.decode(memoryview(head), len(head) + 1)


def _response(rng: random.Random) -> dict[str, Any]:
    def partition() -> dict[str, Any]:
        p: dict[str, Any] = {
            "index": rng.randrange(0, 2**31 - 1),
            "error_code": rng.choice([ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER, 0, 87, -1]),
            "base_offset": rng.choice([-1, 0, 2**63 - 1, rng.randrange(0, 2**40)]),
            "log_append_time_ms": rng.choice([-1, 1_700_000_000_000]),
            "log_start_offset": rng.choice([-1, 0, 12345]),
            "record_errors": [{"batch_index": rng.randrange(0, 9), "batch_index_error_message": rng.choice([None, "bad", "ü"])}
                              for _ in range(rng.randrange(0, 3))],
            "error_message": rng.choice([None, "", "out of order", "ünï"]),
        }
        for key in rng.sample(list(p), rng.randrange(0, 3)):  # absent fields take their defaults
            del p[key]
        return p

    def topic() -> dict[str, Any]:
        t = {**_topic(rng), "partition_responses": [partition() for _ in range(rng.randrange(0, 4))]}
        if rng.random() < 0.2:
            t["topic_id"] = rng.choice([None, "absent"])  # both the zero id
            if t["topic_id"] == "absent":
                del t["topic_id"]
        return t

    return {"responses": [topic() for _ in range(rng.randrange(0, 4))],
            "throttle_time_ms": rng.choice([0, 100, 2**31 - 1])}


@pytest.mark.parametrize("version", VERSIONS)
def test_responses_encode_the_same(version: int) -> None:
    _native_or_skip()
    native, generated = codec("ProduceResponse", version), MessageCodec("ProduceResponse", version, native=False)
    assert produce_codec.native_encoder("ProduceResponse", version, generated._encode) is not None
    rng = random.Random(100 + version)
    for _ in range(300):
        response = _response(rng)
        assert native.encode(response) == generated.encode(response)


@pytest.mark.parametrize("version", [3, 8, 9, 10, 11, 12, 13])
def test_shapes_the_native_encoder_declines_encode_the_same(version: int) -> None:
    """A pre-encoded element, KIP-951's tagged fields, a tuple, a value out of range: the native
    encoder leaves them to the generated one, whose bytes (or error) result."""
    _native_or_skip()
    native, generated = codec("ProduceResponse", version), MessageCodec("ProduceResponse", version, native=False)
    partition = {"index": 1, "error_code": 6, "base_offset": -1}
    pre = generated.element_encoder("responses")({"name": "t", "partition_responses": [partition]})
    shapes: list[dict[str, Any]] = [
        {"responses": [pre], "throttle_time_ms": 0},
        {"responses": ({"name": "t", "partition_responses": [partition]},)},
        {"responses": [{"name": "t", "partition_responses": [{**partition, "current_leader": {"leader_id": 2, "leader_epoch": 7}}]}]},
        {"responses": [], "node_endpoints": [{"node_id": 2, "host": "h", "port": 9092, "rack": None}]},
        {"responses": [{"name": None, "partition_responses": []}]},
        {"responses": [{"name": "t", "partition_responses": [{**partition, "error_code": True}]}]},
    ]
    for shape in shapes:
        assert native.encode(shape) == generated.encode(shape), shape
    assert isinstance(pre, Encoded)
    bad_topic = {"topic_id": "not-a-uuid"} if version >= 13 else {"name": 7}
    for bad in ({"responses": [{"name": "t", "partition_responses": [{**partition, "error_code": 40000}]}]},
                {"responses": [{"name": "t", "partition_responses": [{**partition, "base_offset": 2**63}]}]},
                {"responses": [{**bad_topic, "partition_responses": []}]}):
        with pytest.raises(Exception) as native_error:
            native.encode(bad)
        with pytest.raises(Exception) as generated_error:
            generated.encode(bad)
        assert type(native_error.value) is type(generated_error.value)


@pytest.mark.parametrize("version", [8, 9])
def test_a_claimed_count_allocates_nothing_ahead(version: int) -> None:
    """A count is checked only against the bytes left, so a big frame may claim millions of topics;
    the lists grow as elements decode (as the generated decoder's do), never sized from the claim."""
    _native_or_skip()
    flexible = version >= 9
    claim = 4_000_000
    count = P.uvarint_bytes(claim + 1) if flexible else struct.pack(">i", claim)
    frame = (b"\x00" if flexible else b"\xff\xff") + struct.pack(">hi", 1, 1000) + count + b"\xff" * claim
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            codec("ProduceRequest", version).decode(memoryview(frame), 0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # a list sized from the claim would take 32 MB
