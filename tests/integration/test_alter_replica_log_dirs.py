"""AlterReplicaLogDirs (api key 34) against a real broker with several log dirs: Kafka 4.4's per-partition
errors on the wire, a move of an idle partition and of one under a producer's and a consumer's load
(every acknowledged record read back, DescribeLogDirs showing the future replica and its lag meanwhile),
a cancelled move, the throttle changed while a move runs, and the preferred dir of a partition made later.

Expected codes are Kafka's (ReplicaManager.alterReplicaLogDirs; the same requests against Kafka 4.4 in
test_alter_replica_log_dirs_ab.py): LOG_DIR_NOT_FOUND 57, KAFKA_STORAGE_ERROR 56, UNKNOWN_TOPIC_OR_PARTITION 3,
INVALID_TOPIC_EXCEPTION 17.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from odradek.protocol.records import Record, encode_batch
from tests.support.log_dirs import THROTTLE, alter, entries_on_disk, moved, replicas, wait_for
from tests.support.wire import WireClient, create_topic

confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.support.fault_checker import read_back  # noqa: E402 (needs confluent_kafka)

NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC, STORAGE_ERROR, LOG_DIR_NOT_FOUND = 0, 3, 17, 56, 57


def produce(c: WireClient, topic: str, partition: int, values: list[bytes]) -> int:
    """One acks=all batch; its base offset."""
    records = encode_batch([Record(timestamp=int(time.time() * 1000), value=v) for v in values])
    resp = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
    part = resp["responses"][0]["partition_responses"][0]
    assert part["error_code"] == 0, part
    return part["base_offset"]


def create_with_configs(c: WireClient, name: str, configs: dict[str, str]) -> None:
    resp = c.request(19, 7, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                         "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
                             "timeout_ms": 5000})
    assert resp["topics"][0]["error_code"] == 0, resp


def values_read(bootstrap: str, topic: str, partitions: int = 1) -> dict[int, list[tuple[int, bytes]]]:
    return read_back(bootstrap, topic, partitions)


def home(c: WireClient, topic: str, partition: int) -> str:
    (only,) = replicas(c, topic)[partition]
    return only[0]


def test_errors_per_partition_on_the_wire(broker_factory, tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    b = broker_factory({"log.dirs": f"{d1},{d2}"})
    with WireClient(b.host, b.port) as c:
        create_topic(c, "mv", 2)
        for p in (0, 1):
            produce(c, "mv", p, [b"a", b"b"])
        before = replicas(c, "mv")
        here0, here1 = home(c, "mv", 0), home(c, "mv", 1)
        other = str(d2) if here0 == str(d1) else str(d1)
        for version in (1, 2):
            got = alter(c, [
                ("/no/such/odradek/dir", "ghost", [0]),
                ("d2", "ghost-relative", [0]),  # relative: not an absolute path of log.dirs
                (f"{other}/", "ghost-slash", [0]),  # the path must be exactly the dir's
                (here0, "mv", [0]),  # where it is already
                (other, "nowhere", [0]),
                (other, "mv", [9]),
                (other, "x" * 214, [0]),  # "<topic>-0.<uuid>-future" would be 256 characters
                (other, "y" * 213, [0]),  # 255 characters: allowed, and unknown
                ("/no/such/odradek/dir", "mv", [1]),  # the last dir named for a partition wins
                (here1, "mv", [1]),
            ], version)
            assert got == sorted([
                ("ghost", 0, LOG_DIR_NOT_FOUND), ("ghost-relative", 0, LOG_DIR_NOT_FOUND),
                ("ghost-slash", 0, LOG_DIR_NOT_FOUND), ("mv", 0, NONE), ("nowhere", 0, UNKNOWN_TOPIC_OR_PARTITION),
                ("mv", 9, UNKNOWN_TOPIC_OR_PARTITION), ("x" * 214, 0, INVALID_TOPIC),
                ("y" * 213, 0, UNKNOWN_TOPIC_OR_PARTITION), ("mv", 1, NONE),
            ]), f"v{version}"
        # Nothing moved and nothing was lost; no future log anywhere.
        assert replicas(c, "mv") == before
        assert all(not is_future for reps in before.values() for _, is_future, _, _ in reps)
        for d in (d1, d2):
            assert not [n for n in (p.name for p in d.iterdir()) if n.endswith("-future")]
    assert {p: [v for _, v in recs] for p, recs in values_read(b.bootstrap, "mv", 2).items()} == \
        {0: [b"a", b"b"], 1: [b"a", b"b"]}
    assert " ERROR " not in b.log_text()


def test_an_offline_dir_answers_kafka_storage_error_and_nothing_moves(broker_factory, tmp_path: Path) -> None:
    good, other, bad = tmp_path / "good", tmp_path / "other", tmp_path / "bad"
    (bad / ".lock").mkdir(parents=True)  # cannot be locked: offline from the start
    b = broker_factory({"log.dirs": f"{good},{other},{bad}", "metadata.log.dir": str(tmp_path / "meta")})
    with WireClient(b.host, b.port) as c:
        create_topic(c, "off", 1)
        produce(c, "off", 0, [b"kept"])
        here = home(c, "off", 0)
        elsewhere = str(other) if here == str(good) else str(good)
        assert alter(c, [(str(bad), "off", [0])]) == [("off", 0, STORAGE_ERROR)]
        # Kafka makes no future log while any dir is offline: the copy might land beside a lost one.
        assert alter(c, [(elsewhere, "off", [0])]) == [("off", 0, STORAGE_ERROR)]
        assert alter(c, [(here, "off", [0])]) == [("off", 0, NONE)]
        assert replicas(c, "off") == {0: [(here, False, replicas(c, "off")[0][0][2], 0)]}
        assert entries_on_disk(Path(elsewhere), "off", 0) == []
    assert [v for _, v in values_read(b.bootstrap, "off")[0]] == [b"kept"]


def test_an_idle_partition_moves_and_moves_back(broker_factory, tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    b = broker_factory({"log.dirs": f"{d1},{d2}"})
    with WireClient(b.host, b.port) as c:
        create_with_configs(c, "idle", {"segment.bytes": "16384", "file.delete.delay.ms": "200"})
        values = [b"v%05d" % i * 20 for i in range(600)]  # ~60 KB: several segments
        for i in range(0, 600, 50):
            produce(c, "idle", 0, values[i:i + 50])
        src = Path(home(c, "idle", 0))
        dst = d2 if src == d1 else d1
        assert alter(c, [(str(dst), "idle", [0])], version=1) == [("idle", 0, NONE)]
        wait_for("the move", lambda: moved(c, "idle", 0, dst))
        assert entries_on_disk(dst, "idle", 0) == ["idle-0"]
        wait_for("the old dir's removal", lambda: entries_on_disk(src, "idle", 0) == [])
        # It keeps serving from the new dir, and takes writes there.
        produce(c, "idle", 0, [b"after"])
        assert alter(c, [(str(src), "idle", [0])]) == [("idle", 0, NONE)]
        wait_for("the move back", lambda: moved(c, "idle", 0, src))
    assert [v for _, v in values_read(b.bootstrap, "idle")[0]] == values + [b"after"]
    assert "Moved idle-0 from" in b.log_text()


class Load:
    """A producer (acks=all, idempotent) and a consumer running on threads until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.acked: dict[int, bytes] = {}
        self.produce_errors: list[str] = []
        self.consumed = 0
        self.consume_errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._produce), threading.Thread(target=self._consume)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def _produce(self) -> None:
        producer = confluent_kafka.Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                                             "enable.idempotence": True, "linger.ms": 2})

        def on_delivery(err: object, msg: object) -> None:
            if err is not None:
                self.produce_errors.append(str(err))
            else:
                self.acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]

        # About 1,000 records (0.5 MB) a second: below the copy's throttle, or no copy could catch up
        # (in Kafka too, a move ends only if it copies faster than the partition is written).
        i = 0
        while not self._stop.is_set():
            producer.produce(self.topic, value=b"load-%08d-" % i + b"x" * 500, partition=0, on_delivery=on_delivery)
            i += 1
            producer.poll(0)
            if i % 10 == 0:
                time.sleep(0.01)
        assert producer.flush(30) == 0

    def _consume(self) -> None:
        consumer = confluent_kafka.Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"load-{self.topic}",
                                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.assign([confluent_kafka.TopicPartition(self.topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        try:
            while not self._stop.is_set():
                for msg in consumer.consume(500, 0.2):
                    if msg.error() is None:
                        self.consumed += 1
                    elif msg.error().code() != confluent_kafka.KafkaError._PARTITION_EOF:
                        self.consume_errors.append(str(msg.error()))
        finally:
            consumer.close()


def test_a_partition_moves_under_a_producers_load_and_every_acknowledged_record_is_read_back(
        broker_factory, tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    # 3 MB/s: the ~6 MB already there take seconds to copy, while the producer adds more.
    b = broker_factory({"log.dirs": f"{d1},{d2}", THROTTLE: "3000000"})
    with WireClient(b.host, b.port) as c:
        create_with_configs(c, "busy", {"segment.bytes": "1048576", "file.delete.delay.ms": "500"})
        for i in range(60):
            produce(c, "busy", 0, [b"pre-%06d-" % (i * 100 + j) + b"p" * 1000 for j in range(100)])
        preloaded = 6000
        src = Path(home(c, "busy", 0))
        dst = d2 if src == d1 else d1
        with Load(b.bootstrap, "busy") as load:
            wait_for("the producer's first acks", lambda: load.acked)
            assert alter(c, [(str(dst), "busy", [0])]) == [("busy", 0, NONE)]
            # Meanwhile DescribeLogDirs shows the future replica in the new dir, behind the current one.
            seen = wait_for("the future replica", lambda: [r for r in replicas(c, "busy")[0] if r[1]])
            (future_dir, _, _, lag), = seen
            current = [r for r in replicas(c, "busy")[0] if not r[1]]
            assert future_dir == str(dst) and lag > 0 and [r[0] for r in current] == [str(src)]
            assert any(n.endswith("-future") for n in entries_on_disk(dst, "busy", 0))
            wait_for("the move", lambda: moved(c, "busy", 0, dst), timeout=120)
            acked_at_swap = len(load.acked)
            wait_for("writes after the swap", lambda: len(load.acked) > acked_at_swap + 500)
        assert not load.produce_errors and not load.consume_errors, (load.produce_errors[:5], load.consume_errors[:5])
        assert load.consumed > 0
        wait_for("the old dir's removal", lambda: entries_on_disk(src, "busy", 0) == [])
        assert entries_on_disk(dst, "busy", 0) == ["busy-0"]
    read = dict(values_read(b.bootstrap, "busy")[0])
    # Every offset once (the idempotent producer's retries were recognized), the preload first.
    assert sorted(read) == list(range(preloaded + len(load.acked)))
    lost = [(o, v) for o, v in sorted(load.acked.items()) if read.get(o) != v]
    assert not lost, f"{len(lost)} acknowledged records not read back, e.g. {lost[:3]}"
    assert read[0].startswith(b"pre-000000-") and read[preloaded - 1].startswith(b"pre-005999-")
    log_text = b.log_text()
    assert "Moved busy-0 from" in log_text and " ERROR " not in log_text


def test_a_move_is_cancelled_by_naming_the_current_dir_and_the_throttle_is_dynamic(
        broker_factory, tmp_path: Path) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    b = broker_factory({"log.dirs": f"{d1},{d2}", THROTTLE: "2000"})  # ~ one 2 KB batch a second
    with WireClient(b.host, b.port) as c:
        create_topic(c, "slow", 1)
        values = [b"s%04d" % i * 100 for i in range(100)]
        for i in range(0, 100, 5):
            produce(c, "slow", 0, values[i:i + 5])
        src = Path(home(c, "slow", 0))
        dst = d2 if src == d1 else d1
        assert alter(c, [(str(dst), "slow", [0])]) == [("slow", 0, NONE)]
        wait_for("the future replica", lambda: len(replicas(c, "slow")[0]) == 2)
        assert alter(c, [(str(dst), "slow", [0])]) == [("slow", 0, NONE)]  # being moved there: nothing new
        (future,) = [r for r in replicas(c, "slow")[0] if r[1]]
        assert future[0] == str(dst) and future[3] > 0
        # Naming the dir it is in cancels the move: the future replica and its files go.
        assert alter(c, [(str(src), "slow", [0])]) == [("slow", 0, NONE)]
        assert moved(c, "slow", 0, src)
        assert entries_on_disk(dst, "slow", 0) == []
        # Again, then lift the throttle for this broker (IncrementalAlterConfigs): the move completes.
        assert alter(c, [(str(dst), "slow", [0])]) == [("slow", 0, NONE)]
        wait_for("the future replica", lambda: len(replicas(c, "slow")[0]) == 2)
        resp = c.request(44, 1, {"resources": [{"resource_type": 4, "resource_name": "1", "configs": [
            {"name": THROTTLE, "config_operation": 0, "value": "100000000"}]}], "validate_only": False})
        assert resp["responses"][0]["error_code"] == 0, resp
        wait_for("the move", lambda: moved(c, "slow", 0, dst), timeout=30)
    assert [v for _, v in values_read(b.bootstrap, "slow")[0]] == values


def test_a_partition_made_later_goes_to_the_dir_named_before_it_existed(broker_factory, tmp_path: Path) -> None:
    """Kafka's preferred log dir: remembered even when the answer is UNKNOWN_TOPIC_OR_PARTITION."""
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    b = broker_factory({"log.dirs": f"{d1},{d2}", "auto.create.topics.enable": "false"})
    with WireClient(b.host, b.port) as c:
        create_topic(c, "first", 1)
        first = Path(home(c, "first", 0))
        # The next partition would go to the emptier dir; ask for the fuller one before it exists.
        assert alter(c, [(str(first), "later", [0])]) == [("later", 0, UNKNOWN_TOPIC_OR_PARTITION)]
        create_topic(c, "later", 2)
        placed = {p: home(c, "later", p) for p in (0, 1)}
        assert placed[0] == str(first), placed
        assert placed[1] != str(first), "only the partition named was placed by preference"


def test_kafka_reassign_partitions_moves_replicas_between_log_dirs(broker_factory, tmp_path: Path) -> None:
    """Kafka 4.4's kafka-reassign-partitions with ``log_dirs``: --execute starts the moves
    (AlterReplicaLogDirs through the Admin client), --verify reports them done (DescribeLogDirs)."""
    import json

    from tests.support.java_tools import run_tool
    from tests.support.real_kafka import require_toolchain

    require_toolchain()
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    b = broker_factory({"log.dirs": f"{d1},{d2}"})
    with WireClient(b.host, b.port) as c:
        create_topic(c, "tool", 2)
        for p in (0, 1):
            produce(c, "tool", p, [b"t%d-%d" % (p, i) for i in range(100)])
        dst = {p: str(d2) if home(c, "tool", p) == str(d1) else str(d1) for p in (0, 1)}
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": "tool", "partition": p, "replicas": [1], "log_dirs": [dst[p]]} for p in (0, 1)]}))
    args = ["--bootstrap-server", b.bootstrap, "--reassignment-json-file", str(plan)]
    out = run_tool("kafka-reassign-partitions", [*args, "--execute"]).stdout
    for p in (0, 1):
        assert f"Successfully started moving log directory to {dst[p]} for replica tool-{p} with broker 1" in out, out
    for _ in range(10):
        out = run_tool("kafka-reassign-partitions", [*args, "--verify"]).stdout
        if "is still in progress" not in out:
            break
    for p in (0, 1):
        assert f"Reassignment of replica tool-{p}-1 completed successfully." in out, out
    with WireClient(b.host, b.port) as c:
        assert all(moved(c, "tool", p, dst[p]) for p in (0, 1))
    assert {p: [v for _, v in recs] for p, recs in values_read(b.bootstrap, "tool", 2).items()} == \
        {p: [b"t%d-%d" % (p, i) for i in range(100)] for p in (0, 1)}


def test_a_replica_the_broker_lacks_answers_replica_not_available_and_is_made_later_in_that_dir(
        tmp_path: Path) -> None:
    """Kafka keeps REPLICA_NOT_AVAILABLE for a partition the broker holds no replica of, and remembers
    the dir: when a reassignment then puts a replica on the broker, it is made there."""
    from tests.support.cluster import cluster_or_skip

    n1 = [tmp_path / "n1a", tmp_path / "n1b"]
    c = cluster_or_skip(tmp_path / "cluster", 2, node_overrides={
        1: {"log.dirs": ",".join(map(str, n1))}, 2: {"log.dirs": str(tmp_path / "n2")}})
    with c:
        assert c.wait_members(60), c.logs()
        reply = c.request(c.controller_id(), "CreateTopics", 7, {"topics": [
            {"name": "there", "num_partitions": -1, "replication_factor": -1, "configs": [],
             "assignments": [{"partition_index": 0, "broker_ids": [2]}]}], "timeout_ms": 10000})
        assert reply["topics"][0]["error_code"] == 0, reply

        def dirs_of_1() -> dict[str, list[str]]:
            described = c.request(1, "DescribeLogDirs", 4, {"topics": None})
            return {r["log_dir"]: [f"{t['name']}-{p['partition_index']}" for t in r["topics"] for p in t["partitions"]]
                    for r in described["results"]}

        assert c.wait_until(lambda: c.metadata(1)["topics"] and any(
            t["name"] == "there" for t in c.metadata(1)["topics"]), 30)
        # Name the dir broker 1 would not choose itself: the fuller one (the first on a tie).
        counts = dirs_of_1()
        target = str(n1[1]) if len(counts[str(n1[0])]) <= len(counts[str(n1[1])]) else str(n1[0])
        resp = c.request(1, "AlterReplicaLogDirs", 2, {"dirs": [
            {"path": target, "topics": [{"name": "there", "partitions": [0]}, {"name": "nowhere", "partitions": [0]}]}]})
        got = sorted((t["topic_name"], p["partition_index"], p["error_code"]) for t in resp["results"]
                     for p in t["partitions"])
        assert got == [("nowhere", 0, UNKNOWN_TOPIC_OR_PARTITION), ("there", 0, 9)]  # 9: REPLICA_NOT_AVAILABLE
        reply = c.request(c.controller_id(), "AlterPartitionReassignments", 0, {"timeout_ms": 10000, "topics": [
            {"name": "there", "partitions": [{"partition_index": 0, "replicas": [2, 1]}]}]})
        assert reply["responses"][0]["partitions"][0]["error_code"] == 0, reply
        assert c.wait_until(lambda: "there-0" in dirs_of_1().get(target, []), 30), dirs_of_1()
        assert all("there-0" not in parts for d, parts in dirs_of_1().items() if d != target)


def test_the_dirs_remembered_for_partitions_not_made_yet_are_bounded(broker_factory, tmp_path: Path) -> None:
    """A client naming made-up partitions cannot grow the broker's memory without end: at most
    10,000 preferred dirs are kept, the oldest forgotten first (Kafka keeps every one)."""
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    b = broker_factory({"log.dirs": f"{d1},{d2}", "auto.create.topics.enable": "false"})
    with WireClient(b.host, b.port) as c:
        create_topic(c, "first", 1)
        first = home(c, "first", 0)
        got = alter(c, [(first, "later", list(range(10_001)))])
        assert got == [("later", p, UNKNOWN_TOPIC_OR_PARTITION) for p in range(10_001)]
        create_topic(c, "later", 1)
        # Partition 0's was the oldest of 10,001: forgotten, so it went where the broker puts a new one.
        assert home(c, "later", 0) != first
        assert alter(c, [(first, "first", [0])]) == [("first", 0, NONE)]  # still serving


def test_version_0_retired_by_kafka_4_0_closes_the_connection_and_moves_nothing(broker_factory, tmp_path: Path) -> None:
    """KIP-896: Kafka 4.4 serves AlterReplicaLogDirs from v1; a v0 request closes the connection, and
    the same request as v1 is answered."""
    import struct

    from odradek.protocol.headers import encode_request_header

    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    b = broker_factory({"log.dirs": f"{d1},{d2}"})
    with WireClient(b.host, b.port) as c:
        create_topic(c, "old", 1)
        here = home(c, "old", 0)
        other = str(d2) if here == str(d1) else str(d1)

        def string(text: str) -> bytes:
            return struct.pack(">h", len(text)) + text.encode()

        # v0's body, encoded by hand: [path, [name, [partition]]]
        body = (struct.pack(">i", 1) + string(other) + struct.pack(">i", 1) + string("old")
                + struct.pack(">ii", 1, 0))
        header = bytearray()
        encode_request_header(header, 34, 0, 1, "v0-client", False)
        with WireClient(b.host, b.port) as v0:
            v0.send_raw(struct.pack(">i", len(header) + len(body)) + bytes(header) + body)
            assert v0.is_closed_by_peer()
        time.sleep(0.5)
        assert replicas(c, "old") == {0: [(here, False, 0, 0)]}
        # The same request as v1 is served.
        assert alter(c, [(other, "old", [0])], version=1) == [("old", 0, NONE)]
        wait_for("the move", lambda: moved(c, "old", 0, other))
