"""Fault injection and the request journal (issue 32, section 3): real broker subprocesses, real
clients (confluent-kafka, raw sockets framed with our codecs, urllib for the admin endpoint)."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from odradek.broker.launcher.cluster_launcher import free_port
from odradek.testing.faults import FaultRequestError, FaultsDisabledError, Journal
from odradek.testing.single_broker import RunningBroker, running_broker
from tests.support.bad_batches import records, wrap
from tests.support.wire import WireClient

NOT_LEADER_OR_FOLLOWER = 6  # Kafka's Errors.NOT_LEADER_OR_FOLLOWER
REQUEST_TIMED_OUT = 7
PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18


@pytest.fixture
def faulty() -> Iterator[RunningBroker]:
    with running_broker(faults=True) as b:
        yield b


def _consume_all(bootstrap: str, topic: str, expected: int,
                 timeout: float = 15.0) -> list[tuple[int | None, bytes | None]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int | None, bytes | None]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.value()))
        # Anything after the expected count would be a duplicate.
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.value()))
    finally:
        c.close()
    return got


def _produce_batch(c: WireClient, topic: str, acks: int = 1, version: int = 9) -> tuple[int, bytes]:
    """One Produce of a one-record batch; returns (correlation id, frame sent)."""
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": wrap(records(1), 1)}]}]}
    return c.encode_request(PRODUCE, version, body)


def test_producer_survives_not_leader_three_times(faulty: RunningBroker) -> None:
    topic = faulty.create_topic()
    rule = faulty.faults.fail_next("Produce", "NOT_LEADER_OR_FOLLOWER", count=3, topic=topic)
    assert rule["remaining"] == 3 and rule["code"] == NOT_LEADER_OR_FOLLOWER
    p = Producer({"bootstrap.servers": faulty.bootstrap, "client.id": "retrier", "enable.idempotence": True,
                  "retry.backoff.ms": 10, "linger.ms": 50})
    reports: list[tuple[object, int | None]] = []
    values = [f"v{i}".encode() for i in range(20)]
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(20) == 0
    assert [err for err, _ in reports] == [None] * len(values)
    assert sorted(off or 0 for _, off in reports) == list(range(len(values)))
    # Every record once, in order.
    assert _consume_all(faulty.bootstrap, topic, len(values)) == list(enumerate(values))
    # The journal: three injected NOT_LEADER_OR_FOLLOWER answers, then the retry that succeeded.
    produced = faulty.journal.entries(api="Produce", client_id="retrier")
    assert [e["error_code"] for e in produced[:4]] == [NOT_LEADER_OR_FOLLOWER] * 3 + [0]
    assert [e["fate"] for e in produced[:4]] == ["injected"] * 3 + [None]
    assert all(e["topics"] == {topic: [0]} for e in produced)
    assert faulty.faults.rules() == []  # used up


def test_consumer_sees_injected_fetch_latency(faulty: RunningBroker) -> None:
    topic = faulty.create_topic()
    p = Producer({"bootstrap.servers": faulty.bootstrap})
    p.produce(topic, b"late")
    assert p.flush(10) == 0
    faulty.faults.delay(1200, api="Fetch", topic=topic, count=1)
    start = time.monotonic()
    got = _consume_all(faulty.bootstrap, topic, 1)
    waited = time.monotonic() - start
    assert got[:1] == [(0, b"late")]
    assert waited >= 1.2
    fetches = faulty.journal.entries(api="Fetch", topic=topic)
    assert fetches[0]["elapsed_ms"] >= 1200
    assert all(e["elapsed_ms"] < 1000 for e in fetches[1:])  # count=1: only the first was held


def test_fail_for_one_topic_leaves_others(faulty: RunningBroker) -> None:
    hit, spared = faulty.create_topic(), faulty.create_topic()
    faulty.faults.fail_next(PRODUCE, REQUEST_TIMED_OUT, count=2, topic=hit, partition=0)
    with WireClient(faulty.host, faulty.port, client_id="raw") as c:
        for topic, code in ((spared, 0), (hit, REQUEST_TIMED_OUT), (spared, 0), (hit, REQUEST_TIMED_OUT), (hit, 0)):
            corr, frame = _produce_batch(c, topic)
            c.send_raw(frame)
            resp = c.read_response(PRODUCE, 9, corr)
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == code, (topic, resp)
    # Nothing of the failed requests was appended: the hit topic holds only the last one's record.
    assert [off for off, _ in _consume_all(faulty.bootstrap, hit, 1)] == [0]
    assert [off for off, _ in _consume_all(faulty.bootstrap, spared, 2)] == [0, 1]


def test_injected_error_on_acks0_produce_closes_the_connection(faulty: RunningBroker) -> None:
    topic = faulty.create_topic()
    faulty.faults.fail_next("produce", NOT_LEADER_OR_FOLLOWER, client_id="fire-and-forget")
    with WireClient(faulty.host, faulty.port, client_id="fire-and-forget") as c:
        _, frame = _produce_batch(c, topic, acks=0)
        c.send_raw(frame)
        assert c.is_closed_by_peer()  # Kafka closes an acks=0 producer's connection on an error
    [entry] = faulty.journal.entries(api="Produce", client_id="fire-and-forget")
    assert entry["fate"] == "dropped" and entry["error_code"] == NOT_LEADER_OR_FOLLOWER
    assert _consume_all(faulty.bootstrap, topic, 0) == []


def test_drop_connection_after_n_requests(faulty: RunningBroker) -> None:
    faulty.faults.drop_connection_after(2, api="ApiVersions", client_id="dropped")
    with WireClient(faulty.host, faulty.port, client_id="dropped") as c:
        for _ in range(2):
            assert c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})[
                "error_code"] == 0
        # Another client's requests do not count toward it.
        with WireClient(faulty.host, faulty.port, client_id="other") as other:
            assert other.request(API_VERSIONS, 3, {"client_software_name": "t",
                                                   "client_software_version": "1"})["error_code"] == 0
        corr, frame = c.encode_request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        c.send_raw(frame)
        assert c.is_closed_by_peer()
    # One-shot: a new connection is served.
    with WireClient(faulty.host, faulty.port, client_id="dropped") as c:
        assert c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})[
            "error_code"] == 0
    fates = [e["fate"] for e in faulty.journal.entries(api="ApiVersions", client_id="dropped")]
    assert fates == [None, None, "dropped", None]


def test_pause_holds_answers_until_resume(faulty: RunningBroker) -> None:
    topic = faulty.create_topic()
    p = Producer({"bootstrap.servers": faulty.bootstrap, "message.timeout.ms": 30000})
    p.produce(topic, b"warm-up")
    assert p.flush(10) == 0
    faulty.faults.pause()
    reports: list[object] = []
    p.produce(topic, b"held", on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(1.5) == 1 and reports == []  # no answer while paused
    faulty.faults.resume()
    assert p.flush(10) == 0 and reports == [None]
    assert [v for _, v in _consume_all(faulty.bootstrap, topic, 2)] == [b"warm-up", b"held"]


def test_bad_rules_are_refused_and_add_nothing(faulty: RunningBroker) -> None:
    topic = faulty.create_topic()
    bad = [
        dict(api="NoSuchApi", code=6),
        dict(api="Produce", code="NO_SUCH_ERROR"),
        dict(api="Produce", code=9999),
        dict(api="Produce", code=0),
        dict(api="Produce", code=6, count=0),
        dict(api="Produce", code=6, partition=0),  # a partition without its topic
        dict(api="Produce", code=6, topic=7),
        dict(api="Produce", code=6, topic=topic, partition="0"),
        dict(api="Produce", code=6, client_id=["x"]),
    ]
    for kwargs in bad:
        with pytest.raises(FaultRequestError):
            faulty.faults.fail_next(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(FaultRequestError, match="not served"):
        faulty.faults.fail_next(1000, 6)
    with pytest.raises(FaultRequestError, match="ms"):
        faulty.faults.delay(-1)
    with pytest.raises(FaultRequestError, match="after"):
        faulty.faults.drop_connection_after(-1)
    assert faulty.faults.rules() == []
    p = Producer({"bootstrap.servers": faulty.bootstrap, "client.id": "after-bad-rules"})
    p.produce(topic, b"x")
    assert p.flush(10) == 0
    assert [e["error_code"] for e in faulty.journal.entries(api="Produce", client_id="after-bad-rules")] == [0]


def test_admin_endpoint_over_http(faulty: RunningBroker) -> None:
    """What a test in another language does: plain HTTP with JSON against the broker subprocess."""
    base = faulty.faults.base_url
    assert base is not None and base.startswith("http://127.0.0.1:")

    def call(method: str, path: str, body: object = None) -> tuple[int, dict]:
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(base + path, data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    topic = faulty.create_topic()
    status, rule = call("POST", "/faults/fail", {"api": "Metadata", "code": "LEADER_NOT_AVAILABLE",
                                                 "client_id": "http-test"})
    assert status == 200 and rule["api"] == "Metadata" and rule["code"] == 5
    for bad in (b"not json", b"[1]", {"api": "Metadata", "code": 5, "colour": "red"}, {"code": 5}):
        status, answer = call("POST", "/faults/fail", bad)
        assert status == 400 and answer["error"], bad
    assert call("POST", "/faults/nothing", {})[0] == 404
    assert call("POST", "/faults/fail", b"{" + b" " * (64 << 10) + b"}")[0] == 400  # over 64 KiB
    for length in ("-1", "ten"):  # a broken Content-Length is refused, not waited on
        conn = http.client.HTTPConnection(base.removeprefix("http://"), timeout=5)
        conn.putrequest("POST", "/faults/fail")
        conn.putheader("Content-Length", length)
        conn.endheaders()
        reply = conn.getresponse()
        assert reply.status == 400 and "Content-Length" in json.loads(reply.read())["error"]
        conn.close()
    assert call("GET", "/journal?bogus=1")[0] == 400
    assert len(call("GET", "/faults")[1]["rules"]) == 1
    with WireClient(faulty.host, faulty.port, client_id="http-test") as c:
        first = c.request(METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                         "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
        second = c.request(METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                          "allow_auto_topic_creation": False,
                                          "include_topic_authorized_operations": False})
    assert first["topics"][0]["error_code"] == 5  # LEADER_NOT_AVAILABLE, Metadata's own error answer
    assert second["topics"][0]["error_code"] == 0
    status, journal = call("GET", "/journal?api=Metadata&client_id=http-test")
    assert status == 200
    assert [(e["api_key"], e["version"], e["error_code"], e["topics"]) for e in journal["entries"]] == [
        (METADATA, 12, 5, {topic: []}), (METADATA, 12, 0, {topic: []})]
    assert call("DELETE", "/journal")[0] == 200
    assert call("GET", "/journal")[1]["entries"] == []
    call("POST", "/faults/delay", {"ms": 10})
    assert call("DELETE", "/faults")[0] == 200 and call("GET", "/faults")[1] == {"rules": [], "paused": False}


def test_off_by_default_refused_and_wire_unchanged(tmp_path: Path) -> None:
    """Without faults=True the API is refused, the port key alone serves nothing, and the broker's
    answers are byte for byte those of a broker with fault injection on and no rule."""
    frames: dict[str, list[bytes]] = {}
    for name, faults in (("off", False), ("on", True)):
        overrides = {} if faults else {"odradek.testing.faults.port": "0"}
        with running_broker(data_dir=tmp_path / name, overrides=overrides, faults=faults) as b:
            if not faults:
                with pytest.raises(FaultsDisabledError):
                    b.faults.fail_next("Produce", 6)
                with pytest.raises(FaultsDisabledError):
                    b.journal.entries()
                assert "no fault injection endpoint" in b.log_text()
                assert "fault injection endpoint on" not in b.log_text()
            topic = b.create_topic("same-name")
            sent: list[bytes] = []
            with WireClient(b.host, b.port, client_id="same") as c:
                for api, version, body in (
                    (API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}),
                    (PRODUCE, 9, None),
                    (PRODUCE, 9, None),
                ):
                    if body is None:
                        corr, frame = _produce_batch(c, topic)
                    else:
                        corr, frame = c.encode_request(api, version, body)
                    c.send_raw(frame)
                    sent.append(c.recv_frame())
            frames[name] = sent
    assert frames["off"] == frames["on"]


def test_apis_without_an_error_response_get_kafkas_error_answer(faulty: RunningBroker) -> None:
    """ApiVersions, DeleteRecords and OffsetForLeaderEpoch handlers have no error_response; an
    injected code is answered as Kafka's getErrorResponse builds it, and the request is not handled."""
    topic = faulty.create_topic()
    p = Producer({"bootstrap.servers": faulty.bootstrap})
    for v in (b"a", b"b"):
        p.produce(topic, v)
    assert p.flush(10) == 0
    for api in ("ApiVersions", "DeleteRecords", "OffsetForLeaderEpoch"):
        faulty.faults.fail_next(api, "NOT_LEADER_OR_FOLLOWER", client_id="fallback")
    with WireClient(faulty.host, faulty.port, client_id="fallback") as c:
        versions = c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert versions["error_code"] == NOT_LEADER_OR_FOLLOWER and versions["api_keys"] == []
        deleted = c.request(21, 2, {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 2}]}],
                                    "timeout_ms": 5000})
        assert deleted["topics"] == [{"name": topic, "partitions": [
            {"partition_index": 0, "low_watermark": -1, "error_code": NOT_LEADER_OR_FOLLOWER}]}]
        epochs = c.request(23, 4, {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
        assert epochs["topics"] == [{"topic": topic, "partitions": [
            {"error_code": NOT_LEADER_OR_FOLLOWER, "partition": 0, "leader_epoch": -1, "end_offset": -1}]}]
    # DeleteRecords was not handled: both records are still there.
    assert [v for _, v in _consume_all(faulty.bootstrap, topic, 2)] == [b"a", b"b"]


def test_move_leader_on_a_cluster_while_a_producer_writes(tmp_path: Path) -> None:
    """ClusterProcesses.move_leader: the partition's leadership moves away and back between an
    idempotent acks=all producer's writes; the producer follows it (told by the old leader) and
    every record lands once, in order."""
    from odradek.testing.cluster import ClusterProcesses, NoEtcdError, etcd_binary

    try:
        binary = etcd_binary()
    except NoEtcdError as exc:
        pytest.skip(f"needs etcd: {exc}")
    # Each broker journals its requests, so the test sees the producer meet the moves.
    ports = {node: free_port() for node in (1, 2, 3)}
    with ClusterProcesses(tmp_path, 3, etcd=binary, overrides={"odradek.testing.faults.enable": "true"},
                          node_overrides={n: {"odradek.testing.faults.port": str(port)}
                                          for n, port in ports.items()}) as cluster:  # started on entry
        journals = {n: Journal(f"http://127.0.0.1:{port}") for n, port in ports.items()}
        topic = "moving"
        created = cluster.request(cluster.controller_id(), "CreateTopics", 7, {
            "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 3, "assignments": [],
                        "configs": [{"name": "min.insync.replicas", "value": "2"}]}],
            "timeout_ms": 10000, "validate_only": False})
        assert created["topics"][0]["error_code"] == 0, created
        assert cluster.wait_until(lambda: len(cluster.partition_state(topic, 0)[2]) == 3, 30), cluster.logs()
        first, replicas, _ = cluster.partition_state(topic, 0)
        with pytest.raises(ValueError, match="not an in-sync replica"):
            cluster.move_leader(topic, 0, 99)
        # No periodic metadata refresh: the producer learns of each move from the old leader's answer.
        p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                      "linger.ms": 5, "retry.backoff.ms": 20, "topic.metadata.refresh.interval.ms": 600000})
        errors: list[object] = []
        values = [f"m{i}".encode() for i in range(300)]
        targets = [r for r in replicas if r != first][:1] + [first]
        for i, v in enumerate(values):
            if i in (100, 200):
                # The records so far acknowledged by the current leader, then the move; the next
                # ones go to the leader the producer knew.
                assert p.flush(30) == 0
                target = targets[(i // 100) - 1]
                cluster.move_leader(topic, 0, target)
                assert cluster.partition_state(topic, 0)[0] == target
            p.produce(topic, v, on_delivery=lambda err, msg: errors.append(err) if err else None)
            p.poll(0)
        assert p.flush(30) == 0 and errors == []
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "moving-check",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes | None] = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) + 1 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
            elif m is None and len(got) >= len(values):
                break
        c.close()
        assert got == values
        # The two leaders that lost the partition answered the producer NOT_LEADER_OR_FOLLOWER.
        for old in (first, targets[0]):
            codes = {e["error_code"] for e in journals[old].entries(api="Produce", topic=topic)}
            assert NOT_LEADER_OR_FOLLOWER in codes, (old, codes)
