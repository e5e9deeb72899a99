"""The data path at the protocol level: exact errors, idempotence, long polls, timestamp lookups,
fetch sessions, DeleteRecords — raw requests over a real socket to the real daemon."""

from __future__ import annotations

import struct
import threading
import time
import uuid

import pytest

from odradek.protocol.records import Record, encode_batch
from tests.support.waiting import wait_until
from tests.support.wire import WireClient

PRODUCE_V = 9
FETCH_V = 12


def create(c: WireClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> uuid.UUID:
    resp = c.request(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                                          "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                             "timeout_ms": 5000})
    assert resp["topics"][0]["error_code"] == 0, resp
    return resp["topics"][0]["topic_id"]


def produce(c: WireClient, topic: str, records: bytes, partition: int = 0, acks: int = -1,
            version: int = PRODUCE_V) -> dict:
    resp = c.request(0, version, {"transactional_id": None, "acks": acks, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    return resp["responses"][0]["partition_responses"][0]


def list_offset(c: WireClient, topic: str, timestamp: int, partition: int = 0, version: int = 7) -> dict:
    resp = c.request(2, version, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp}]}]})
    return resp["topics"][0]["partitions"][0]


def fetch(c: WireClient, topic: str, offset: int, partition: int = 0, max_wait_ms: int = 0, min_bytes: int = 1,
          max_bytes: int = 1 << 20, session_id: int = 0, session_epoch: int = -1, version: int = FETCH_V) -> dict:
    return c.request(1, version, {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
                                  "max_bytes": max_bytes, "isolation_level": 0, "session_id": session_id,
                                  "session_epoch": session_epoch,
                                  "topics": [{"topic": topic, "partitions": [
                                      {"partition": partition, "fetch_offset": offset, "partition_max_bytes": max_bytes,
                                       "log_start_offset": -1}]}],
                                  "forgotten_topics_data": [], "rack_id": ""})


def leo(c: WireClient, topic: str, partition: int = 0) -> int:
    return list_offset(c, topic, -1, partition)["offset"]


def batch(values: list[bytes], timestamps: list[int] | None = None, **kw) -> bytes:
    ts = timestamps or [1_700_000_000_000 + i for i in range(len(values))]
    return encode_batch([Record(timestamp=t, key=None, value=v) for v, t in zip(values, ts, strict=True)], **kw)


@pytest.fixture
def client(broker):
    with WireClient(broker.host, broker.port) as c:
        yield c


def test_produce_then_fetch_returns_the_exact_batch_with_assigned_offsets(client) -> None:
    create(client, "t")
    first = produce(client, "t", batch([b"a", b"b", b"c"]))
    second = produce(client, "t", batch([b"d"]))
    assert (first["error_code"], first["base_offset"]) == (0, 0)
    assert (second["error_code"], second["base_offset"]) == (0, 3)
    resp = fetch(client, "t", 0)
    part = resp["responses"][0]["partitions"][0]
    assert part["error_code"] == 0 and part["high_watermark"] == 4 and part["log_start_offset"] == 0
    from odradek.protocol.records import decode_records

    batches = decode_records(part["records"])
    assert [r.offset for b in batches for r in b.records] == [0, 1, 2, 3]
    assert [r.value for b in batches for r in b.records] == [b"a", b"b", b"c", b"d"]


def test_corrupt_crc_gets_corrupt_message_and_log_end_does_not_move(client) -> None:
    create(client, "crc")
    produce(client, "crc", batch([b"ok"]))
    bad = bytearray(batch([b"x", b"y"]))
    bad[-1] ^= 0xFF
    resp = produce(client, "crc", bytes(bad))
    assert resp["error_code"] == 2  # CORRUPT_MESSAGE
    assert leo(client, "crc") == 1
    # A valid batch after a corrupt one in the same request: the whole set is rejected.
    resp = produce(client, "crc", batch([b"good"]) + bytes(bad))
    assert resp["error_code"] == 2
    assert leo(client, "crc") == 1


@pytest.mark.parametrize("garbage", [b"\x00" * 10, b"\x00" * 61, b"\xff" * 100])
def test_malformed_record_sets_are_rejected_whole(client, garbage: bytes) -> None:
    create(client, "garbage")
    assert produce(client, "garbage", garbage)["error_code"] == 2
    assert leo(client, "garbage") == 0


def test_unknown_topic_and_partition(broker, client) -> None:
    create(client, "known", 2)
    assert produce(client, "missing", batch([b"x"]))["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert produce(client, "known", batch([b"x"]), partition=7)["error_code"] == 3
    part = fetch(client, "missing", 0)["responses"][0]["partitions"][0]
    assert part["error_code"] == 3


def test_invalid_required_acks(client) -> None:
    create(client, "acks")
    assert produce(client, "acks", batch([b"x"]), acks=2)["error_code"] == 21  # INVALID_REQUIRED_ACKS
    assert leo(client, "acks") == 0


def test_acks_zero_gets_no_response_but_is_stored(client) -> None:
    create(client, "acks0")
    corr, frame = client.encode_request(0, PRODUCE_V, {"transactional_id": None, "acks": 0, "timeout_ms": 1000,
                                                      "topic_data": [{"name": "acks0", "partition_data": [
                                                          {"index": 0, "records": batch([b"q"])}]}]})
    client.send_raw(frame)
    # The next response on the connection answers the next request, not the acks=0 produce.
    assert leo(client, "acks0") == 1


def test_message_too_large(broker, client) -> None:
    create(client, "small", configs={"max.message.bytes": "1000"})
    resp = produce(client, "small", batch([b"x" * 2000]))
    assert resp["error_code"] == 10  # MESSAGE_TOO_LARGE
    assert leo(client, "small") == 0
    assert produce(client, "small", batch([b"x" * 100]))["error_code"] == 0


def test_zstd_needs_produce_v7(client) -> None:
    create(client, "z")
    zstd_batch = batch([b"zz" * 100], compression=4)
    assert produce(client, "z", zstd_batch, version=6)["error_code"] == 76  # UNSUPPORTED_COMPRESSION_TYPE
    assert produce(client, "z", zstd_batch, version=7)["error_code"] == 0
    assert leo(client, "z") == 1


def test_producing_to_internal_topic_is_refused(client) -> None:
    # __consumer_offsets is created by the coordinator; create it as an internal topic name here.
    resp = client.request(19, 7, {"topics": [{"name": "__consumer_offsets", "num_partitions": 1,
                                              "replication_factor": 1}], "timeout_ms": 1000})
    if resp["topics"][0]["error_code"] != 0:
        pytest.skip("internal topic could not be created through CreateTopics")
    assert produce(client, "__consumer_offsets", batch([b"x"]))["error_code"] == 17


def test_idempotent_retry_is_stored_once_and_gap_is_out_of_order(client) -> None:
    create(client, "idem")
    init = client.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert init["error_code"] == 0 and init["producer_id"] >= 0
    pid, epoch = init["producer_id"], init["producer_epoch"]
    b0 = batch([b"a", b"b"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
    first = produce(client, "idem", b0)
    retry = produce(client, "idem", b0)
    assert first["error_code"] == retry["error_code"] == 0
    assert retry["base_offset"] == first["base_offset"] == 0
    assert leo(client, "idem") == 2
    gap = produce(client, "idem", batch([b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=5))
    assert gap["error_code"] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    assert leo(client, "idem") == 2
    nxt = produce(client, "idem", batch([b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=2))
    assert (nxt["error_code"], nxt["base_offset"]) == (0, 2)
    # A stale epoch is fenced.
    bumped = produce(client, "idem", batch([b"d"], producer_id=pid, producer_epoch=epoch + 1, base_sequence=0))
    assert bumped["error_code"] == 0
    stale = produce(client, "idem", batch([b"e"], producer_id=pid, producer_epoch=epoch, base_sequence=3))
    assert stale["error_code"] == 47  # INVALID_PRODUCER_EPOCH
    assert leo(client, "idem") == 4


def test_producer_ids_are_never_reused_across_restarts(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        before = {c.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 1})["producer_id"]
                  for _ in range(5)}
    broker.kill()
    broker.start()
    with WireClient(broker.host, broker.port) as c:
        after = {c.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 1})["producer_id"]
                 for _ in range(5)}
    assert len(before) == 5 and len(after) == 5
    assert min(after) > max(before)


def test_idempotent_duplicate_detected_after_restart(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        create(c, "idem-restart")
        init = c.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})
        b0 = batch([b"a"], producer_id=init["producer_id"], producer_epoch=0, base_sequence=0)
        assert produce(c, "idem-restart", b0)["base_offset"] == 0
    broker.kill()
    broker.start()
    with WireClient(broker.host, broker.port) as c:
        retry = produce(c, "idem-restart", b0)
        assert (retry["error_code"], retry["base_offset"]) == (0, 0)
        assert leo(c, "idem-restart") == 1


def _idle_and_active_producers(c: WireClient, topic: str) -> tuple[int, int]:
    """Two producers that wrote sequence 0: the batch timestamp is the producer's last activity,
    one a minute ago (idle), one a minute ahead (active)."""
    now = int(time.time() * 1000)
    idle, active = (c.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000})["producer_id"]
                    for _ in range(2))
    for pid, ts in ((idle, now - 60_000), (active, now + 60_000)):
        assert produce(c, topic, batch([b"a"], [ts], producer_id=pid, producer_epoch=0,
                                       base_sequence=0))["error_code"] == 0
    return idle, active


def _answer_to_a_sequence_gap(c: WireClient, topic: str, pid: int) -> int:
    """0 if the broker has no state for ``pid`` (Kafka, KIP-360: an unknown producer is accepted at
    any sequence); OUT_OF_ORDER_SEQUENCE_NUMBER (45) while its state is kept."""
    return produce(c, topic, batch([b"gap"], producer_id=pid, producer_epoch=0, base_sequence=5))["error_code"]


def test_idle_producer_state_expires_and_active_state_stays(broker_factory) -> None:
    # producer.id.expiration.ms / .check.interval.ms: without expiry the state of every producer
    # that ever wrote stays in memory (and in snapshots) forever.
    broker = broker_factory({"producer.id.expiration.ms": "2000",
                             "producer.id.expiration.check.interval.ms": "100"})
    with WireClient(broker.host, broker.port) as c:
        create(c, "expiry")
        idle, active = _idle_and_active_producers(c, "expiry")
        # Each try answers 45 and changes nothing while the idle producer's state is kept.
        wait_until(lambda: _answer_to_a_sequence_gap(c, "expiry", idle) == 0, what="the idle producer's expiry")
        assert _answer_to_a_sequence_gap(c, "expiry", active) == 45


def test_producer_id_expiration_is_dynamic(broker_factory) -> None:
    # Kafka's DynamicProducerStateManagerConfig: an IncrementalAlterConfigs of the cluster-wide
    # default reaches the producer state of partitions already open, from the next check.
    broker = broker_factory({"producer.id.expiration.check.interval.ms": "100"})
    with WireClient(broker.host, broker.port) as c:
        create(c, "dyn-expiry")
        idle, active = _idle_and_active_producers(c, "dyn-expiry")
        time.sleep(0.5)  # the default (a day) expires nobody
        assert _answer_to_a_sequence_gap(c, "dyn-expiry", idle) == 45
        alter = {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": "producer.id.expiration.ms", "config_operation": 0, "value": "2000"}]}], "validate_only": False}
        assert c.request(44, 1, alter)["responses"][0]["error_code"] == 0
        wait_until(lambda: _answer_to_a_sequence_gap(c, "dyn-expiry", idle) == 0,
                   what="the idle producer's expiry at the new value")
        assert _answer_to_a_sequence_gap(c, "dyn-expiry", active) == 45


def test_long_poll_returns_at_max_wait_without_data(client) -> None:
    create(client, "lp")
    t0 = time.monotonic()
    resp = fetch(client, "lp", 0, max_wait_ms=500)
    elapsed = time.monotonic() - t0
    part = resp["responses"][0]["partitions"][0]
    assert part["error_code"] == 0 and part["records"] in (b"", None)
    assert 0.45 <= elapsed < 2.0


def test_long_poll_returns_early_when_data_arrives(broker, client) -> None:
    create(client, "lp2")

    def later() -> None:
        time.sleep(0.3)
        with WireClient(broker.host, broker.port) as other:
            produce(other, "lp2", batch([b"wake"]))

    threading.Thread(target=later).start()
    t0 = time.monotonic()
    resp = fetch(client, "lp2", 0, max_wait_ms=10_000)
    elapsed = time.monotonic() - t0
    part = resp["responses"][0]["partitions"][0]
    assert part["high_watermark"] == 1 and len(part["records"]) > 0
    assert 0.25 <= elapsed < 2.0


def test_min_bytes_waits_for_enough_data(broker, client) -> None:
    create(client, "mb")
    produce(client, "mb", batch([b"x"]))

    def later() -> None:
        time.sleep(0.3)
        with WireClient(broker.host, broker.port) as other:
            produce(other, "mb", batch([b"y" * 5000]))

    threading.Thread(target=later).start()
    t0 = time.monotonic()
    resp = fetch(client, "mb", 0, max_wait_ms=5000, min_bytes=4000)
    assert time.monotonic() - t0 >= 0.25
    assert len(resp["responses"][0]["partitions"][0]["records"]) > 4000


def test_offset_out_of_range(client) -> None:
    create(client, "oor")
    produce(client, "oor", batch([b"a", b"b"]))
    part = fetch(client, "oor", 5)["responses"][0]["partitions"][0]
    assert part["error_code"] == 1 and part["high_watermark"] == 2
    assert fetch(client, "oor", 2)["responses"][0]["partitions"][0]["error_code"] == 0  # log end is fine


def test_fetch_starts_at_the_batch_holding_the_offset(client) -> None:
    create(client, "mid")
    produce(client, "mid", batch([b"a", b"b", b"c"]))
    from odradek.protocol.records import decode_records

    part = fetch(client, "mid", 1)["responses"][0]["partitions"][0]
    (b,) = decode_records(part["records"])
    assert b.base_offset == 0 and [r.offset for r in b.records] == [0, 1, 2]


def test_kip74_first_batch_even_if_larger_than_max_bytes(client) -> None:
    create(client, "big")
    produce(client, "big", batch([b"x" * 10_000]))
    produce(client, "big", batch([b"y" * 10_000]))
    part = fetch(client, "big", 0, max_bytes=100)["responses"][0]["partitions"][0]
    from odradek.protocol.records import decode_records

    assert len(decode_records(part["records"])) == 1


def test_fetch_by_topic_id_v13(client) -> None:
    topic_id = create(client, "by-id")
    produce(client, "by-id", batch([b"a"]))
    resp = client.request(1, 13, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                  "session_id": 0, "session_epoch": -1,
                                  "topics": [{"topic_id": topic_id, "partitions": [
                                      {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]},
                                             {"topic_id": uuid.uuid4(), "partitions": [
                                                 {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100}]}],
                                  "forgotten_topics_data": [], "rack_id": ""})
    known, unknown = resp["responses"]
    assert known["topic_id"] == topic_id and known["partitions"][0]["high_watermark"] == 1
    assert unknown["partitions"][0]["error_code"] == 100  # UNKNOWN_TOPIC_ID


def test_incremental_fetch_session(client) -> None:
    create(client, "s1")
    create(client, "s2")
    produce(client, "s1", batch([b"a"]))
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "session_id": 0,
            "session_epoch": 0, "topics": [
                {"topic": "s1", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]},
                {"topic": "s2", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    full = client.request(1, FETCH_V, body)
    session = full["session_id"]
    assert session > 0 and len(full["responses"]) == 2
    # Incremental: the client moved s1's position past the record it got; nothing else changed,
    # so the response is empty.
    inc = dict(body, session_id=session, session_epoch=1, topics=[
        {"topic": "s1", "partitions": [{"partition": 0, "fetch_offset": 1, "partition_max_bytes": 1 << 20}]}])
    resp = client.request(1, FETCH_V, inc)
    assert resp["error_code"] == 0 and resp["responses"] == []
    # New data on s2 only: only s2 comes back (the session remembers s1's new position).
    inc = dict(inc, topics=[])
    produce(client, "s2", batch([b"b"]))
    resp = client.request(1, FETCH_V, dict(inc, session_epoch=2))
    assert [t["topic"] for t in resp["responses"]] == ["s2"]
    # A wrong epoch, an unknown session.
    assert client.request(1, FETCH_V, dict(inc, session_epoch=9))["error_code"] == 71  # INVALID_FETCH_SESSION_EPOCH
    assert client.request(1, FETCH_V, dict(inc, session_id=session + 12345, session_epoch=1))["error_code"] == 70
    # Forgetting s1 and closing the session.
    resp = client.request(1, FETCH_V, dict(inc, session_epoch=3, forgotten_topics_data=[
        {"topic": "s1", "partitions": [0]}]))
    assert resp["error_code"] == 0
    resp = client.request(1, FETCH_V, dict(body, session_id=session, session_epoch=-1))
    assert resp["session_id"] == 0 and len(resp["responses"]) == 2


def test_fenced_and_unknown_leader_epoch(client) -> None:
    create(client, "epochs")
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "session_id": 0,
            "session_epoch": -1, "forgotten_topics_data": [], "rack_id": ""}

    def fetch_epoch(e: int) -> int:
        resp = client.request(1, FETCH_V, dict(body, topics=[{"topic": "epochs", "partitions": [
            {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 100, "current_leader_epoch": e}]}]))
        return resp["responses"][0]["partitions"][0]["error_code"]

    assert fetch_epoch(0) == 0
    assert fetch_epoch(5) == 75  # UNKNOWN_LEADER_EPOCH
    assert fetch_epoch(-1) == 0


def test_list_offsets_timestamp_semantics(client) -> None:
    create(client, "ts")
    produce(client, "ts", batch([b"a", b"b", b"c"], [1000, 2000, 3000]))
    produce(client, "ts", batch([b"d", b"e"], [4000, 5000], compression=1))  # gzip
    produce(client, "ts", batch([b"f", b"g"], [6000, 5500], compression=3))  # lz4, out of order

    def at(ts: int) -> tuple[int, int]:
        p = list_offset(client, "ts", ts)
        assert p["error_code"] == 0
        return p["offset"], p["timestamp"]

    assert at(1000) == (0, 1000)       # exact hit
    assert at(1500) == (1, 2000)       # between records
    assert at(0) == (0, 1000)          # before the first
    assert at(4500) == (4, 5000)       # inside a compressed batch
    assert at(5200) == (4, 5000) or at(5200) == (5, 6000)
    assert at(5200) == (5, 6000)       # first record with ts >= T, in offset order
    assert at(9000) == (-1, -1)        # after the last: no offset, no timestamp
    assert list_offset(client, "ts", -2)["offset"] == 0
    latest = list_offset(client, "ts", -1)
    assert (latest["offset"], latest["timestamp"]) == (7, -1)
    mx = list_offset(client, "ts", -3)
    assert (mx["offset"], mx["timestamp"]) == (5, 6000)


def test_list_offsets_on_empty_partition_and_duplicates(client) -> None:
    create(client, "empty")
    assert (list_offset(client, "empty", 123)["offset"], list_offset(client, "empty", 123)["timestamp"]) == (-1, -1)
    assert list_offset(client, "empty", -3)["offset"] == -1
    resp = client.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "empty", "partitions": [{"partition_index": 0, "timestamp": -1},
                                         {"partition_index": 0, "timestamp": -2}]}]})
    assert [p["error_code"] for p in resp["topics"][0]["partitions"]] == [42, 42]  # INVALID_REQUEST
    assert list_offset(client, "nope", -1)["error_code"] == 3


def test_delete_records_advances_log_start(client) -> None:
    create(client, "dr")
    for i in range(5):
        produce(client, "dr", batch([b"%d" % i, b"x"]))
    resp = client.request(21, 2, {"topics": [{"name": "dr", "partitions": [{"partition_index": 0, "offset": 4}]}],
                                  "timeout_ms": 5000})
    p = resp["topics"][0]["partitions"][0]
    assert (p["error_code"], p["low_watermark"]) == (0, 4)
    assert list_offset(client, "dr", -2)["offset"] == 4
    assert fetch(client, "dr", 2)["responses"][0]["partitions"][0]["error_code"] == 1
    part = fetch(client, "dr", 4)["responses"][0]["partitions"][0]
    assert part["log_start_offset"] == 4 and part["error_code"] == 0
    beyond = client.request(21, 2, {"topics": [{"name": "dr", "partitions": [{"partition_index": 0, "offset": 99}]}],
                                    "timeout_ms": 5000})
    assert beyond["topics"][0]["partitions"][0]["error_code"] == 1
    assert list_offset(client, "dr", -2)["offset"] == 4


def test_offset_for_leader_epoch(client) -> None:
    create(client, "ofle")
    produce(client, "ofle", batch([b"a", b"b"]))
    resp = client.request(23, 4, {"replica_id": -1, "topics": [{"topic": "ofle", "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
    p = resp["topics"][0]["partitions"][0]
    assert (p["error_code"], p["leader_epoch"], p["end_offset"]) == (0, 0, 2)


def test_raw_produce_frame_sizes_are_checked_before_parsing(client) -> None:
    # A Produce whose records length claims more bytes than the frame holds: the connection closes.
    body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", 1_000_000)
    header = struct.pack(">hhih", 0, 3, 1, -1)
    client.send_raw(struct.pack(">i", len(header) + len(body)) + header + body)
    assert client.is_closed_by_peer()


def test_copying_fetch_returns_the_same_bytes_as_sendfile(broker_factory) -> None:
    payload = batch([b"r%d" % i for i in range(100)], compression=1)
    answers = []
    for sendfile in ("true", "false"):
        b = broker_factory({"odradek.fetch.sendfile": sendfile})
        with WireClient(b.host, b.port) as c:
            create(c, "same")
            produce(c, "same", payload)
            produce(c, "same", payload)
            answers.append(bytes(fetch(c, "same", 0)["responses"][0]["partitions"][0]["records"]))
    assert answers[0] == answers[1] and len(answers[0]) == 2 * len(payload)


def test_deleted_then_recreated_topic_starts_empty(client) -> None:
    first_id = create(client, "phoenix", 2)
    produce(client, "phoenix", batch([b"old1", b"old2", b"old3"]))
    resp = client.request(20, 6, {"topics": [{"name": "phoenix", "topic_id": uuid.UUID(int=0)}], "timeout_ms": 5000})
    assert resp["responses"][0]["error_code"] == 0
    second_id = create(client, "phoenix", 2)
    assert second_id != first_id
    assert leo(client, "phoenix") == 0
    part = fetch(client, "phoenix", 0)["responses"][0]["partitions"][0]
    assert part["error_code"] == 0 and part["high_watermark"] == 0 and not part["records"]
    assert produce(client, "phoenix", batch([b"new"]))["base_offset"] == 0


def test_creating_a_large_topic_does_not_stall_other_requests(broker, client) -> None:
    """Log files are created off the handler loop: ApiVersions keeps answering meanwhile."""
    latencies: list[float] = []
    done = threading.Event()

    def ping() -> None:
        with WireClient(broker.host, broker.port) as other:
            while not done.is_set():
                t0 = time.monotonic()
                other.request(18, 3, {"client_software_name": "p", "client_software_version": "1"})
                latencies.append(time.monotonic() - t0)
                time.sleep(0.01)

    pinger = threading.Thread(target=ping)
    pinger.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    client.sock.settimeout(120)  # each new partition fsyncs its directory: slow disks take a while
    create(client, "wide", 500)
    took = time.monotonic() - t0
    done.set()
    pinger.join()
    # Every partition is served as soon as CreateTopics has answered.
    assert produce(client, "wide", batch([b"x"]), partition=499)["error_code"] == 0
    assert took > 0.3, "creating 500 partitions was too quick to show anything"
    assert max(latencies) < took / 2, (max(latencies), took)
