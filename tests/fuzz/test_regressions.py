"""Regression tests for what the fuzzer (tests/fuzz) found in protocol decoding and the dispatcher.

Each sends the finding's bytes over a real socket to a real broker and checks that the broker
answers as Kafka does (here: closes that connection, logs no ERROR) and keeps serving others.
"""

from __future__ import annotations

import random
import socket
import struct
import time

from odradek.protocol.codec import is_flexible
from tests.fuzz.generate import encode_header, generate
from tests.fuzz.harness import served_apis
from tests.fuzz.mutate import BARRIER
from tests.support.wire import WireClient, create_topic


def _closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _no_error_logged(broker) -> None:
    text = broker.log_text()
    assert "] ERROR " not in text and "Traceback" not in text, text[-3000:]


def test_overlong_varint_length_closes_the_connection(broker) -> None:
    """Fuzz finding (mutation "overlong"): a compact length padded past 5 varint bytes was read as
    a valid length; Kafka refuses it ("Varint is too long") and closes the connection."""
    # ApiVersions v3: header v2 (client_id "c", no tags), client_software_name "ab" with its length
    # as a 6-byte varint, client_software_version "1", no tags.
    body = struct.pack(">hhih", 18, 3, 77, 1) + b"c" + b"\x00" + b"\x83\x80\x80\x80\x80\x00ab" + b"\x021" + b"\x00"
    with WireClient(broker.host, broker.port) as bystander, \
            socket.create_connection((broker.host, broker.port), timeout=5) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        assert _closed(s), "broker answered a request with a 6-byte varint"
        assert bystander.request(18, 3, {"client_software_name": "ab", "client_software_version": "1"})[
            "error_code"] == 0
    # Padding within 5 bytes is still a valid varint (Kafka reads it), so it is answered.
    body5 = struct.pack(">hhih", 18, 3, 78, 1) + b"c" + b"\x00" + b"\x83\x80\x80\x80\x00ab" + b"\x021" + b"\x00"
    with socket.create_connection((broker.host, broker.port), timeout=5) as s:
        s.sendall(struct.pack(">i", len(body5)) + body5)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        frame = s.recv(size, socket.MSG_WAITALL)
        assert struct.unpack_from(">ih", frame) == (78, 0)
    _no_error_logged(broker)


def test_offset_commit_with_retention_near_int64_max_is_stored(broker) -> None:
    """Fuzz finding seed=209 case=2138: OffsetCommit v3 with retention_time_ms = 2^63-1 overflowed the
    expire timestamp (now + retention), the __consumer_offsets record failed to encode and the handler
    logged a traceback at ERROR. The commit must succeed and read back."""
    with WireClient(broker.host, broker.port) as c:
        create_topic(c, "t", 1)
        commit = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                  "retention_time_ms": 2**63 - 1,
                  "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                           "committed_metadata": "m"}]}]}
        deadline = time.monotonic() + 15
        while True:
            c.request(10, 0, {"key": "g"})  # FindCoordinator creates __consumer_offsets
            code = c.request(8, 3, commit)["topics"][0]["partitions"][0]["error_code"]
            # coordinator loading / not available / not (yet) coordinator
            if code not in (14, 15, 16) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert code == 0
        fetched = c.request(9, 1, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]})
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 5
    _no_error_logged(broker)


def test_every_length_and_count_at_its_maximum_is_refused_before_allocating(broker) -> None:
    """Each length/count field of one valid request per served API, set to its type's maximum in a
    small frame: the broker closes each connection, never allocates what the field claims, logs no
    ERROR, and still serves."""
    def rss_mb() -> float:
        with open(f"/proc/{broker.proc.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024

    before = rss_mb()
    sent = 0
    for api_key, (_, version) in served_apis().items():
        enc = generate(random.Random(f"max:{api_key}"), api_key, version)
        header, _ = encode_header(api_key, version, 1, "t", is_flexible(enc.name, version))
        for span in enc.spans:
            if span.kind not in ("len16", "len32", "uvar"):
                continue
            top = {"len16": struct.pack(">h", 0x7FFF), "len32": struct.pack(">i", 0x7FFFFFFF),
                   "uvar": b"\xff\xff\xff\xff\x0f"}[span.kind]
            body = enc.body[: span.pos] + top + enc.body[span.pos + span.size:]
            frame = header + body
            with socket.create_connection((broker.host, broker.port), timeout=5) as s:
                s.sendall(struct.pack(">i", len(frame)) + frame + BARRIER)
                assert _closed(s), f"{enc.name} v{version} {span.path} at its maximum was answered"
            sent += 1
    assert sent > 100
    assert rss_mb() - before < 50
    with WireClient(broker.host, broker.port) as c:
        assert c.request(18, 0, {})["error_code"] == 0
    _no_error_logged(broker)
