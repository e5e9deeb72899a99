"""Hostile input over raw sockets: the broker answers with Kafka's error or closes that one
connection, never crashes, never allocates a size it has not checked, and every other connection
keeps working."""

from __future__ import annotations

import os
import random
import socket
import struct
import time

import pytest

from tests.support.wire import WireClient

# Every API the broker advertises, with its version range. A change here is a change to what
# clients are offered: it must come with tests of the API. AlterPartition (56) is served on the
# inter-broker listener only and advertised nowhere (tests/integration/test_api_versions_surface.py).
EXPECTED_APIS = [
    (0, 0, 13),  # Produce (served from v3; v0-2 advertised as Kafka 4.4 does, KAFKA-18659)
    (1, 4, 18),  # Fetch
    (2, 1, 11),  # ListOffsets
    (3, 0, 13),  # Metadata
    (8, 2, 10),  # OffsetCommit (v0-1 retired by Kafka 4.0, KIP-896)
    (9, 1, 10),  # OffsetFetch (v0 retired by Kafka 4.0, KIP-896)
    (10, 0, 6),  # FindCoordinator
    (11, 0, 9),  # JoinGroup
    (12, 0, 4),  # Heartbeat
    (13, 0, 5),  # LeaveGroup
    (14, 0, 5),  # SyncGroup
    (15, 0, 6),  # DescribeGroups
    (16, 0, 5),  # ListGroups
    (17, 0, 1),  # SaslHandshake (v0: bare SASL tokens follow)
    (18, 0, 5),  # ApiVersions
    (19, 2, 7),  # CreateTopics (v0-1 retired by Kafka 4.0, KIP-896)
    (20, 1, 6),  # DeleteTopics (v0 retired by Kafka 4.0, KIP-896)
    (21, 0, 2),  # DeleteRecords
    (22, 0, 5),  # InitProducerId
    (23, 2, 4),  # OffsetForLeaderEpoch (v0-1 retired by Kafka 4.0, KIP-896)
    (24, 0, 5),  # AddPartitionsToTxn
    (25, 0, 4),  # AddOffsetsToTxn
    (26, 0, 5),  # EndTxn
    (27, 1, 2),  # WriteTxnMarkers (v0 retired by Kafka 4.0, KIP-896)
    (28, 0, 6),  # TxnOffsetCommit
    (29, 1, 3),  # DescribeAcls (v0 retired by Kafka 4.0, KIP-896, as for the next three)
    (30, 1, 3),  # CreateAcls
    (31, 1, 3),  # DeleteAcls
    (32, 1, 4),  # DescribeConfigs
    (33, 0, 2),  # AlterConfigs
    (34, 1, 2),  # AlterReplicaLogDirs (v0 retired by Kafka 4.0, KIP-896)
    (35, 1, 5),  # DescribeLogDirs (v0 retired by Kafka 4.0, KIP-896)
    (36, 0, 2),  # SaslAuthenticate
    (37, 0, 3),  # CreatePartitions
    (42, 0, 3),  # DeleteGroups
    (43, 0, 2),  # ElectLeaders
    (44, 0, 1),  # IncrementalAlterConfigs
    (45, 0, 1),  # AlterPartitionReassignments
    (46, 0, 0),  # ListPartitionReassignments
    (47, 0, 0),  # OffsetDelete
    (48, 0, 1),  # DescribeClientQuotas
    (49, 0, 1),  # AlterClientQuotas
    (50, 0, 0),  # DescribeUserScramCredentials
    (51, 0, 0),  # AlterUserScramCredentials
    (57, 0, 2),  # UpdateFeatures
    (60, 0, 2),  # DescribeCluster
    (61, 0, 0),  # DescribeProducers
    (65, 0, 0),  # DescribeTransactions
    (66, 0, 2),  # ListTransactions
    (68, 0, 1),  # ConsumerGroupHeartbeat
    (69, 0, 1),  # ConsumerGroupDescribe
    # GetTelemetrySubscriptions (71) and PushTelemetry (72): advertised only with /metrics on (not here)
    (74, 0, 1),  # ListConfigResources
    (75, 0, 0),  # DescribeTopicPartitions
    (76, 1, 1),  # ShareGroupHeartbeat (KIP-932; v0 was 4.0's early access, gone in 4.4)
    (77, 1, 1),  # ShareGroupDescribe
    (78, 1, 2),  # ShareFetch
    (79, 1, 2),  # ShareAcknowledge
    # 80-81: Raft voters (not served)
    (83, 0, 0),  # InitializeShareGroupState (the share coordinator's, between brokers)
    (84, 0, 0),  # ReadShareGroupState
    (85, 0, 1),  # WriteShareGroupState
    (86, 0, 0),  # DeleteShareGroupState
    (87, 0, 1),  # ReadShareGroupStateSummary
    (88, 0, 1),  # StreamsGroupHeartbeat (KIP-1071)
    (89, 0, 1),  # StreamsGroupDescribe
    (90, 0, 1),  # DescribeShareGroupOffsets
    (91, 0, 0),  # AlterShareGroupOffsets
    (92, 0, 0),  # DeleteShareGroupOffsets
    (93, 0, 0),  # StreamsGroupTopologyDescriptionUpdate (KIP-1331)
]


def api_list_bytes(compact: bool) -> bytes:
    out = bytearray()
    if compact:
        out.append(len(EXPECTED_APIS) + 1)
    else:
        out += struct.pack(">i", len(EXPECTED_APIS))
    for key, lo, hi in EXPECTED_APIS:
        out += struct.pack(">hhh", key, lo, hi)
        if compact:
            out.append(0)
    return bytes(out)


def still_serving(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        assert c.request(18, 0, {})["error_code"] == 0
    assert broker.alive()


def raw_connect(broker) -> socket.socket:
    return socket.create_connection((broker.host, broker.port), timeout=5)


def closed_by_broker(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_api_versions_v0_exact_bytes(broker) -> None:
    with raw_connect(broker) as s:
        # size, api_key 18, version 0, correlation 7, client_id "t"
        s.sendall(struct.pack(">ihhih", 11, 18, 0, 7, 1) + b"t")
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        body = s.recv(size, socket.MSG_WAITALL)
    assert body == struct.pack(">ih", 7, 0) + api_list_bytes(compact=False)


def compact_string(s: str) -> bytes:
    return bytes([len(s) + 1]) + s.encode()


def feature_tags(epoch: int, finalized: list[tuple[str, int]]) -> bytes:
    """ApiVersionsResponse v3's tagged fields: 0 supported_features (v3: only those whose minimum is not
    0, here metadata.version 33-33), 1 finalized_features_epoch, 2 finalized_features (name, max, min);
    zk_migration_ready is false, its default, so absent."""
    supported = b"\x02" + compact_string("metadata.version") + struct.pack(">hh", 33, 33) + b"\x00"
    levels = bytes([len(finalized) + 1]) + b"".join(
        compact_string(name) + struct.pack(">hh", level, level) + b"\x00" for name, level in finalized)
    return (b"\x03" + b"\x00" + bytes([len(supported)]) + supported + b"\x01\x08" + struct.pack(">q", epoch)
            + b"\x02" + bytes([len(levels)]) + levels)


def test_api_versions_v3_exact_bytes_with_v0_response_header(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        r = c.request(18, 4, {"client_software_name": "t", "client_software_version": "1"})
    epoch, finalized = r["finalized_features_epoch"], [(f["name"], f["max_version_level"])
                                                       for f in r["finalized_features"]]
    assert sorted(finalized) == [("group.version", 1), ("metadata.version", 33), ("share.version", 1),
                                 ("streams.version", 1), ("transaction.version", 2)]
    request = struct.pack(">hhih", 18, 3, 9, 2) + b"cl" + b"\x00" + b"\x03ab\x021" + b"\x00"
    with raw_connect(broker) as s:
        s.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        body = s.recv(size, socket.MSG_WAITALL)
    # Response header v0 (no tag byte), error 0, compact api list, throttle 0, the feature tags.
    assert body == (struct.pack(">ih", 9, 0) + api_list_bytes(compact=True) + struct.pack(">i", 0)
                    + feature_tags(epoch, finalized))


def test_api_versions_unsupported_version_gets_error_35_in_v0_shape(broker) -> None:
    request = struct.pack(">hhih", 18, 99, 5, 0) + b"\x00garbage-of-a-future-version"
    with raw_connect(broker) as s:
        s.sendall(struct.pack(">i", len(request)) + request)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        body = s.recv(size, socket.MSG_WAITALL)
    assert body == struct.pack(">ih", 5, 35) + api_list_bytes(compact=False)


def test_api_versions_v3_invalid_software_name_is_invalid_request(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        resp = c.request(18, 3, {"client_software_name": "-bad name-", "client_software_version": "1"})
    assert resp["error_code"] == 42
    still_serving(broker)


@pytest.mark.parametrize("size", [-1, -2147483648, 0x7FFFFFFF, 104857601])
def test_bad_frame_sizes_close_only_that_connection(broker, size: int) -> None:
    with WireClient(broker.host, broker.port) as bystander, raw_connect(broker) as s:
        s.sendall(struct.pack(">i", size))
        assert closed_by_broker(s)
        assert bystander.request(18, 0, {})["error_code"] == 0


def test_zero_size_frame_closes_connection(broker) -> None:
    with raw_connect(broker) as s:
        s.sendall(struct.pack(">i", 0))
        assert closed_by_broker(s)
    still_serving(broker)


def test_declared_size_is_not_allocated_before_the_bytes_arrive(broker) -> None:
    """100 connections each declaring a 100 MB request (the limit) and sending 10 bytes."""
    def rss_kb() -> int:
        with open(f"/proc/{broker.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    before = rss_kb()
    socks = [raw_connect(broker) for _ in range(100)]
    for s in socks:
        s.sendall(struct.pack(">i", 104857600) + b"0123456789")
    time.sleep(0.5)
    grown_mb = (rss_kb() - before) / 1024
    for s in socks:
        s.close()
    assert grown_mb < 64, f"broker RSS grew by {grown_mb:.0f} MB for 1 KB of received bytes"
    still_serving(broker)


def test_truncated_frame_then_disconnect(broker) -> None:
    with raw_connect(broker) as s:
        s.sendall(struct.pack(">i", 100) + b"\x00\x03\x00")
    still_serving(broker)


def test_header_shorter_than_fixed_fields_closes(broker) -> None:
    with raw_connect(broker) as s:
        s.sendall(struct.pack(">i", 3) + b"\x00\x12\x00")
        assert closed_by_broker(s)
    still_serving(broker)


def test_unknown_api_key_closes_connection(broker) -> None:
    with raw_connect(broker) as s:
        s.sendall(struct.pack(">ihhih", 10, 9999, 0, 1, -1))
        assert closed_by_broker(s)
    still_serving(broker)


def test_unsupported_version_of_other_api_closes_connection(broker) -> None:
    with raw_connect(broker) as s:
        s.sendall(struct.pack(">ihhih", 10, 3, 99, 1, -1))
        assert closed_by_broker(s)
    still_serving(broker)


def test_malformed_body_closes_connection(broker) -> None:
    # Metadata v1 whose topics array claims a million entries but carries none.
    with raw_connect(broker) as s:
        s.sendall(struct.pack(">ihhihi", 14, 3, 1, 1, -1, 1_000_000))
        assert closed_by_broker(s)
    # CreateTopics v7 (flexible) with a compact string longer than the frame.
    with raw_connect(broker) as s:
        s.sendall(struct.pack(">ihhih", 13, 19, 7, 1, -1) + b"\x00\x02\x7f\x01")
        assert closed_by_broker(s)
    still_serving(broker)


def test_random_garbage_never_kills_the_broker(broker) -> None:
    rng = random.Random(1234)
    for _ in range(200):
        with raw_connect(broker) as s:
            payload = os.urandom(rng.randint(1, 300))
            if rng.random() < 0.5:
                payload = struct.pack(">i", len(payload)) + payload
            try:
                s.sendall(payload)
                s.settimeout(0.05)
                s.recv(65536)
            except OSError:
                pass
    still_serving(broker)
    # Topics created before and after the barrage still work.
    with WireClient(broker.host, broker.port) as c:
        resp = c.request(19, 5, {"topics": [{"name": "after-garbage", "num_partitions": 1, "replication_factor": 1}],
                                 "timeout_ms": 1000})
        assert resp["topics"][0]["error_code"] == 0


def test_pipelined_requests_answered_in_order(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        sent = []
        data = b""
        for i in range(50):
            if i % 2:
                corr, frame = c.encode_request(3, 12, {"topics": [], "allow_auto_topic_creation": False})
                sent.append((3, 12, corr))
            else:
                corr, frame = c.encode_request(18, 3, {"client_software_name": "x", "client_software_version": "1"})
                sent.append((18, 3, corr))
            data += frame
        c.send_raw(data)
        for api, version, corr in sent:
            c.read_response(api, version, corr)


def test_thousand_idle_connections_do_not_block_service(broker) -> None:
    socks = []
    try:
        for _ in range(1000):
            socks.append(raw_connect(broker))
        still_serving(broker)
        # And the idle ones still work.
        s = socks[500]
        s.sendall(struct.pack(">ihhih", 10, 18, 0, 42, -1))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        assert struct.unpack(">i", s.recv(size, socket.MSG_WAITALL)[:4])[0] == 42
    finally:
        for s in socks:
            s.close()


def test_idle_connections_are_closed_after_connections_max_idle_ms(broker_factory) -> None:
    broker = broker_factory({"connections.max.idle.ms": "300"})
    with raw_connect(broker) as s:
        t0 = time.monotonic()
        assert closed_by_broker(s, timeout=5)
        assert time.monotonic() - t0 >= 0.25
    still_serving(broker)
