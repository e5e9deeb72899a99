"""A follower's replica moved between its broker's log dirs while the leader takes a producer's acks=all
writes: the follower stays in the ISR throughout, its moved log ends byte for byte like the leader's,
and once the leader is SIGKILLed it leads with every acknowledged record."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.support.cluster import cluster_or_skip, replicas_in_step
from tests.support.log_dirs import THROTTLE, wait_for

confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.support.fault_checker import read_back  # noqa: E402 (needs confluent_kafka)

TOPIC = "moving-follower"


def follower_replicas(c, node: int) -> list[tuple[str, bool]]:
    described = c.request(node, "DescribeLogDirs", 4, {"topics": [{"topic": TOPIC, "partitions": [0]}]})
    return sorted((r["log_dir"], p["is_future_key"]) for r in described["results"] for t in r["topics"]
                  for p in t["partitions"])


def isr(c, node: int) -> list[int]:
    md = c.request(node, "Metadata", 12, {"topics": [{"name": TOPIC, "topic_id": None}]})
    return sorted(md["topics"][0]["partitions"][0]["isr_nodes"])


def test_a_followers_replica_moves_under_acks_all_writes_and_then_leads_with_every_record(tmp_path: Path) -> None:
    d1 = [tmp_path / "n1a", tmp_path / "n1b"]
    c = cluster_or_skip(tmp_path / "cluster", 2, node_overrides={
        1: {"log.dirs": ",".join(map(str, d1)), THROTTLE: "2000000"}, 2: {"log.dirs": str(tmp_path / "n2")}})
    with c:
        assert c.wait_members(60), c.logs()
        reply = c.request(c.controller_id(), "CreateTopics", 7, {"topics": [{
            "name": TOPIC, "num_partitions": -1, "replication_factor": -1, "assignments": [
                {"partition_index": 0, "broker_ids": [2, 1]}],
            "configs": [{"name": "segment.bytes", "value": "1048576"}]}], "timeout_ms": 10000})
        assert reply["topics"][0]["error_code"] == 0, reply
        assert c.wait_until(lambda: isr(c, 1) == [1, 2], 30)

        acked: dict[int, bytes] = {}
        errors: list[str] = []
        stop = threading.Event()

        def produce() -> None:
            producer = confluent_kafka.Producer({"bootstrap.servers": c.broker(2).bootstrap, "acks": "all",
                                                 "enable.idempotence": True, "linger.ms": 2})

            def on_delivery(err: object, msg: object) -> None:
                if err is not None:
                    errors.append(str(err))
                else:
                    acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]

            i = 0
            while not stop.is_set():
                # ~3 MB at once first, then ~0.5 MB a second (below the move's 2 MB/s throttle).
                producer.produce(TOPIC, value=b"f-%08d-" % i + b"x" * 500, partition=0, on_delivery=on_delivery)
                i += 1
                producer.poll(0)
                if i > 6000 and i % 10 == 0:
                    time.sleep(0.01)
            assert producer.flush(30) == 0

        thread = threading.Thread(target=produce)
        thread.start()
        try:
            wait_for("the first 6,000 acks", lambda: len(acked) >= 6000, timeout=60)
            (start,) = follower_replicas(c, 1)
            dst = str(d1[1]) if start[0] == str(d1[0]) else str(d1[0])
            resp = c.request(1, "AlterReplicaLogDirs", 2, {"dirs": [
                {"path": dst, "topics": [{"name": TOPIC, "partitions": [0]}]}]})
            assert resp["results"][0]["partitions"][0]["error_code"] == 0, resp
            assert (dst, True) in wait_for("the future replica", lambda: follower_replicas(c, 1))
            wait_for("the move", lambda: follower_replicas(c, 1) == [(dst, False)], timeout=120)
            assert isr(c, 2) == [1, 2]  # the follower never left the ISR
            time.sleep(1.0)  # writes after the swap, replicated into the new dir
        finally:
            stop.set()
            thread.join(60)
        assert not errors, errors[:5]
        assert c.wait_until(lambda: replicas_in_step(c, TOPIC, [0], 2), 30)

        c.kill(2)
        assert c.wait_until(lambda: c.request(1, "Metadata", 12, {"topics": [{"name": TOPIC, "topic_id": None}]})
                            ["topics"][0]["partitions"][0]["leader_id"] == 1, 60), c.logs()
        read = dict(read_back(c.broker(1).bootstrap, TOPIC, 1)[0])
        lost = [o for o, v in sorted(acked.items()) if read.get(o) != v]
        assert not lost, f"{len(lost)} acknowledged records lost, e.g. offsets {lost[:5]}"
        assert "Moved moving-follower-0 from" in c.log_text(1)
