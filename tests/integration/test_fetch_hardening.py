"""Fetch under hostile conditions (issue 17, defects 3, 5, 9b), over real sockets and real files.

- A response queued for a slow reader sends its own segment's bytes even when the topic is deleted
  and the fd numbers are reused by another topic's files.
- Response size limits: min(request max_bytes, fetch.max.bytes), partition_max_bytes, and the first
  batch of the first non-empty partition returned whole (Kafka's minOneMessage).
- Slow readers stay on sendfile: broker memory does not grow with the bytes they have not read,
  and other clients are served meanwhile.
- A segment file cut short under the broker: the fetching connection is closed, one error is
  logged, everything else keeps working.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

from odradek.protocol.codec import codec
from odradek.protocol.records import Record, decode_records, encode_batch
from tests.support.wire import WireClient

FETCH_V = 12


def create(c: WireClient, name: str, partitions: int) -> None:
    resp = c.request(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
                             "timeout_ms": 5000})
    assert resp["topics"][0]["error_code"] == 0, resp


def delete_topic(c: WireClient, name: str) -> None:
    resp = c.request(20, 4, {"topic_names": [name], "timeout_ms": 5000})
    assert resp["responses"][0]["error_code"] == 0, resp


def big_batch(fill: bytes, kib: int = 256) -> bytes:
    """One batch of ``kib`` records of 1 KiB, every value byte ``fill`` (recognisable on the wire)."""
    return encode_batch([Record(timestamp=1_700_000_000_000, value=fill * 1024) for _ in range(kib)])


def fill_topic(c: WireClient, topic: str, partitions: int, batch: bytes, count: int) -> None:
    for _ in range(count):
        resp = c.request(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": p, "records": batch} for p in range(partitions)]}]})
        for part in resp["responses"][0]["partition_responses"]:
            assert part["error_code"] == 0, part


def fetch_body(topic: str, partitions: list[int], max_bytes: int, partition_max_bytes: int,
               offset: int = 0) -> dict:
    return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "fetch_offset": offset, "partition_max_bytes": partition_max_bytes,
                 "log_start_offset": -1} for p in partitions]}]}


def records_of(resp: dict) -> dict[int, bytes]:
    return {p["partition_index"]: p["records"] or b"" for t in resp["responses"] for p in t["partitions"]}


def slow_socket(broker, rcvbuf: int | None = None) -> socket.socket:
    """A raw client socket; a small receive buffer is set before connecting so the window stays small."""
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(30)
    s.connect((broker.host, broker.port))
    return s


def send_fetch(s: socket.socket, body: dict, corr: int = 1) -> None:
    c = WireClient.__new__(WireClient)
    c.client_id, c.correlation_id = "slow", corr - 1
    _, data = c.encode_request(1, FETCH_V, body)
    s.sendall(data)


def wait_until_sending(s: socket.socket, settle: float = 0.3) -> None:
    """Block until the response's first bytes arrive (the broker has read the fetch and started
    sending), then give it ``settle`` seconds to fill the socket and queue the rest."""
    assert len(s.recv(1, socket.MSG_PEEK)) == 1  # the frame's size prefix begins
    time.sleep(settle)


def recv_frame_or_none(s: socket.socket) -> bytes | None:
    """The whole response frame, or None if the broker closed the connection before its end."""
    def exact(n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = s.recv(min(n - len(buf), 1 << 20))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    head = exact(4)
    if head is None:
        return None
    return exact(struct.unpack(">i", head)[0])


def decode_fetch(frame: bytes) -> dict:
    body, end = codec("FetchResponse", FETCH_V).decode(frame, 4 + 1)  # correlation id + header tags
    assert end == len(frame)
    return body


def rss_anon_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon")


def still_serving(broker, topic: str, partition: int = 0) -> None:
    with WireClient(broker.host, broker.port) as c:
        resp = c.request(1, FETCH_V, fetch_body(topic, [partition], 1 << 20, 1 << 20))
        part = resp["responses"][0]["partitions"][0]
        assert part["error_code"] == 0 and part["records"], part


# -- defect 3: a queued region keeps its own file ---------------------------------------------------


def test_slow_reader_gets_its_topics_bytes_after_delete_and_fd_reuse(broker_factory) -> None:
    broker = broker_factory({"num.network.threads": "2"})
    mib = 1024 * 1024
    with WireClient(broker.host, broker.port) as c:
        create(c, "victim", 2)
        fill_topic(c, "victim", 2, big_batch(b"A"), 32)  # 8 MiB per partition
    s = slow_socket(broker, rcvbuf=4096)
    try:
        # Two partitions: the first region fills the socket, the second waits in the queue.
        send_fetch(s, fetch_body("victim", [0, 1], 64 * mib, 32 * mib))
        wait_until_sending(s)
        with WireClient(broker.host, broker.port) as c:
            delete_topic(c, "victim")
            deadline = time.monotonic() + 10
            while list((broker.data_dir / "logs").glob("victim-*")) and time.monotonic() < deadline:
                time.sleep(0.05)  # the logs are closed and removed once the deletion is applied
            assert not list((broker.data_dir / "logs").glob("victim-*"))
            # New files take the freed fd numbers; give them more bytes than the victim had so a
            # reused number would be read at the queued region's position.
            create(c, "other", 2)
            fill_topic(c, "other", 2, big_batch(b"B"), 40)
        frame = recv_frame_or_none(s)
    finally:
        s.close()
    if frame is None:
        return  # failing the response (connection closed) is allowed; other bytes never are
    assert b"BBBBBBBBBBBBBBBB" not in frame
    parts = records_of(decode_fetch(frame))
    assert set(parts) == {0, 1}
    for raw in parts.values():
        batches = decode_records(raw)  # CRC-checked
        assert batches and all(r.value == b"A" * 1024 for b in batches for r in b.records)
    still_serving(broker, "other")


# -- defect 5: size limits --------------------------------------------------------------------------


def test_fetch_size_limits_follow_kafka(broker_factory) -> None:
    broker = broker_factory({"fetch.max.bytes": str(1024 * 1024)})
    batch = big_batch(b"x", kib=100)  # ~100 KiB
    size = len(batch)
    with WireClient(broker.host, broker.port) as c:
        create(c, "limits", 4)
        fill_topic(c, "limits", 4, batch, 10)  # ~1 MiB per partition, 4 MiB in all
        # max_bytes 100: exactly the first batch of the first partition (progress), nothing else.
        got = records_of(c.request(1, FETCH_V, fetch_body("limits", [0, 1, 2, 3], 100, 1 << 30)))
        assert [len(got[p]) for p in range(4)] == [size, 0, 0, 0]
        # A huge request max_bytes is capped by fetch.max.bytes (1 MiB) across all partitions.
        got = records_of(c.request(1, FETCH_V, fetch_body("limits", [0, 1, 2, 3], 1 << 30, 1 << 30)))
        total = sum(len(v) for v in got.values())
        assert 1024 * 1024 - size < total <= 1024 * 1024
        assert all(len(v) % size == 0 for v in got.values())
        # partition_max_bytes: whole batches within it per partition.
        got = records_of(c.request(1, FETCH_V, fetch_body("limits", [0, 1], 1 << 20, 3 * size + 10)))
        assert [len(got[p]) for p in (0, 1)] == [3 * size, 3 * size]
        # A partition limit below one batch: only the first non-empty partition gets one batch.
        got = records_of(c.request(1, FETCH_V, fetch_body("limits", [0, 1, 2], 1 << 20, 50)))
        assert [len(got[p]) for p in (0, 1, 2)] == [size, 0, 0]
        # ... and a first partition with nothing to return does not use up that exception.
        body = fetch_body("limits", [0, 1], 1 << 20, 50)
        body["topics"][0]["partitions"][0]["fetch_offset"] = 10 * 100  # the log end of partition 0
        got = records_of(c.request(1, FETCH_V, body))
        assert [len(got[p]) for p in (0, 1)] == [0, size]


# -- defect 5: slow readers stay on sendfile with bounded memory ------------------------------------


def test_slow_readers_cost_bounded_memory_and_others_are_served(broker_factory) -> None:
    broker = broker_factory({"num.network.threads": "2"})
    mib = 1024 * 1024
    with WireClient(broker.host, broker.port) as c:
        create(c, "big", 1)
        fill_topic(c, "big", 1, big_batch(b"z"), 128)  # 32 MiB
        create(c, "side", 1)
        fill_topic(c, "side", 1, big_batch(b"s", kib=4), 2)
    pid = broker.proc.pid
    before = rss_anon_kib(pid)
    readers = [slow_socket(broker) for _ in range(3)]
    try:
        for s in readers:
            send_fetch(s, fetch_body("big", [0], 64 * mib, 64 * mib))
        for s in readers:
            wait_until_sending(s, settle=0.5)  # each socket fills; the rest of each region is pending
        grown_kib = rss_anon_kib(pid) - before
        # Bound: 4 MiB for all three together (measured ~130 KiB: a 64 KiB chunk each plus noise). Copying
        # the unsent rest of each region, as before, grows it by ~3 x 25 MiB.
        assert grown_kib < 4 * 1024, f"broker anonymous RSS grew by {grown_kib} KiB with 3 slow readers"
        still_serving(broker, "side")
        for s in readers:
            frame = recv_frame_or_none(s)
            assert frame is not None
            assert len(records_of(decode_fetch(frame))[0]) == 128 * len(big_batch(b"z"))
    finally:
        for s in readers:
            s.close()
    still_serving(broker, "big")


# -- defect 9b: a segment truncated under the broker ------------------------------------------------


def test_segment_truncated_under_the_broker_closes_only_that_fetch(broker_factory) -> None:
    broker = broker_factory()
    with WireClient(broker.host, broker.port) as c:
        create(c, "cut", 2)
        fill_topic(c, "cut", 2, big_batch(b"c", kib=16), 20)  # ~320 KiB per partition
    seg = next((broker.data_dir / "logs").glob("cut-0/00000000000000000000.log"))
    size = seg.stat().st_size
    with open(seg, "r+b") as f:
        f.truncate(size // 2)
    for _ in range(3):  # clients retry: each connection is closed, the error is logged once
        with WireClient(broker.host, broker.port) as c:
            corr, data = c.encode_request(1, FETCH_V, fetch_body("cut", [0], 1 << 20, 1 << 20))
            c.send_raw(data)
            # Closed before a whole response: at the read, or (the latest batches' slice is taken
            # from memory) part-way through sending it, as Kafka's FileRecords.writeTo fails.
            c.sock.settimeout(5)
            assert recv_frame_or_none(c.sock) is None
    text = broker.log_text()
    assert text.count("truncated under the broker") == 1, text
    assert "Traceback" not in text
    still_serving(broker, "cut", partition=1)
    assert broker.alive()


def test_segment_truncated_while_a_region_is_queued_closes_the_connection(broker_factory) -> None:
    """The file is cut after the fetch was read but before the slow reader took the bytes: the
    broker cannot finish the frame honestly, so it closes the connection (no zeros, no garbage)."""
    broker = broker_factory()
    with WireClient(broker.host, broker.port) as c:
        create(c, "cut2", 1)
        fill_topic(c, "cut2", 1, big_batch(b"q"), 40)  # 10 MiB
    seg = next((broker.data_dir / "logs").glob("cut2-0/00000000000000000000.log"))
    s = slow_socket(broker, rcvbuf=4096)
    try:
        send_fetch(s, fetch_body("cut2", [0], 64 << 20, 64 << 20))
        wait_until_sending(s)
        with open(seg, "r+b") as f:
            f.truncate(1 << 20)
        assert recv_frame_or_none(s) is None
    finally:
        s.close()
    assert "truncated under the broker" in broker.log_text()
    assert broker.alive()
