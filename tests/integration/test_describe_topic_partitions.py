"""DescribeTopicPartitions (75) on the wire and through Kafka 4.4's own tools, against a real Kafka and Odradek.

The comparison test sends the same requests to a real Kafka broker and to Odradek and requires the
same answers, normalised only where the two clusters must differ (topic ids are random; the broker
is node 1 on both): named topics with duplicates, an unknown and an illegal name; a cursor walk two
partitions at a time across topic boundaries; a limit of 0; a cursor past a topic's end; every topic
from a cursor whose topic does not exist; and the bad cursors Kafka refuses with INVALID_REQUEST.

Kafka 4.4's ``kafka-topics --describe --partition-size-limit-per-response`` and ``Admin.describeTopics``
follow ``next_cursor`` page by page (they use this API when the broker advertises it); Odradek's
request metrics show the pages were DescribeTopicPartitions requests, not the Metadata fallback.
``max.request.partition.size.limit`` bounds the pages whatever the request asks.
"""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.java_tools import JavaDriver, run_tool
from tests.support.real_kafka import Target, create_topic, open_target, require_toolchain, unique
from tests.support.wire import WireClient

DESCRIBE_TOPIC_PARTITIONS = 75
NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION, INVALID_REQUEST = 0, 3, 17, 42
ZERO_ID = uuid.UUID(int=0)
# The topics every scenario describes: name suffix -> partitions.
TOPICS = {"a": 5, "b": 3, "c": 1}


def describe(target: Target | BrokerProcess, topics: list[str], limit: int = 2000,
             cursor: tuple[str, int] | None = None) -> dict:
    with WireClient(target.host, target.port) as c:
        return c.request(DESCRIBE_TOPIC_PARTITIONS, 0, {
            "topics": [{"name": t} for t in topics], "response_partition_limit": limit,
            "cursor": None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]}})


def normalised(resp: dict, ids: dict[str, uuid.UUID]) -> dict:
    """The answer with each known topic id replaced by "<id of NAME>" (the zero id stays)."""
    def topic(t: dict) -> dict:
        tid, name = t["topic_id"], t["name"]
        return {**t, "topic_id": tid if tid == ZERO_ID else
                (f"<id of {name}>" if ids.get(name) == tid else f"<unexpected {tid}>")}
    assert resp["throttle_time_ms"] == 0
    return {"topics": [topic(t) for t in resp["topics"]], "next_cursor": resp["next_cursor"]}


def pages(target: Target | BrokerProcess, topics: list[str], limit: int) -> list[tuple[list[tuple[str, int]], Any]]:
    """Follow next_cursor from the start: per page, its (topic, partition)s and its next cursor."""
    out: list[tuple[list[tuple[str, int]], Any]] = []
    cursor = None
    while len(out) < 20:
        resp = describe(target, topics, limit, cursor)
        assert all(t["error_code"] == NONE for t in resp["topics"]), (target, topics, limit, cursor, resp["topics"])
        got = [(t["name"], p["partition_index"]) for t in resp["topics"] for p in t["partitions"]]
        nxt = resp["next_cursor"]
        out.append((got, None if nxt is None else (nxt["topic_name"], nxt["partition_index"])))
        if nxt is None:
            return out
        cursor = (nxt["topic_name"], nxt["partition_index"])
    raise AssertionError(f"no end after 20 pages: {out}")


def scenario(target: Target) -> dict[str, Any]:
    """The same steps on either target; the answers, normalised."""
    prefix = unique("dtp")
    names = {k: f"{prefix}-{k}" for k in TOPICS}
    for k, n in TOPICS.items():
        create_topic(target, names[k], n)
    a, b, c = names["a"], names["b"], names["c"]
    # CreateTopics answers once the controller has the topics; a Kafka broker learns of them a
    # moment later (its metadata publisher): wait until it describes them all.
    deadline = time.monotonic() + 30
    described = describe(target, [a, b, c])
    while any(t["error_code"] != NONE for t in described["topics"]):
        assert time.monotonic() < deadline, described
        time.sleep(0.1)
        described = describe(target, [a, b, c])
    ids = {t["name"]: t["topic_id"] for t in described["topics"]}
    unknown, illegal = f"{prefix}-missing", f"{prefix}-b ad!"

    def named(tag: str) -> str:
        return {a: "A", b: "B", c: "C", unknown: "MISSING", illegal: "ILLEGAL"}.get(tag, tag)

    def answer(resp: dict) -> Any:
        n = normalised(resp, ids)
        text = repr(n)
        for real, tag in ((illegal, "ILLEGAL"), (unknown, "MISSING"), (a, "A"), (b, "B"), (c, "C")):
            text = text.replace(real, tag)
        return text

    out: dict[str, Any] = {}
    out["named, duplicates, unknown, illegal"] = answer(describe(target, [c, a, b, a, unknown, illegal]))
    out["walk by 2"] = [([(named(t), p) for t, p in got], nxt and (named(nxt[0]), nxt[1]))
                        for got, nxt in pages(target, [c, b, a], 2)]
    out["limit 0"] = answer(describe(target, [a, b], limit=0))
    out["cursor past the end"] = answer(describe(target, [c], cursor=(c, 7)))
    out["cursor partition -1"] = answer(describe(target, [a, b], cursor=(a, -1)))
    out["cursor topic not named"] = answer(describe(target, [b, c, b], cursor=(a, 0)))
    # Every topic from a cursor: the shared real Kafka holds other tests' topics too, so each page
    # stops inside this test's topics.
    out["all from (a, 3) by 4"] = answer(describe(target, [], limit=4, cursor=(a, 3)))
    out["all from a missing topic by 3"] = answer(describe(target, [], limit=3, cursor=(f"{prefix}-aa", 0)))
    return out


def test_odradek_answers_as_kafka_does(tmp_path: Path) -> None:
    require_toolchain()
    answers = {}
    for name in ("kafka", "odradek"):
        with open_target(name, tmp_path / name) as target:
            target.require("DescribeTopicPartitions", "CreateTopics")
            answers[name] = scenario(target)
    kafka, odradek = answers["kafka"], answers["odradek"]
    for step in kafka:
        assert odradek[step] == kafka[step], f"{step}:\nkafka:   {kafka[step]}\nodradek: {odradek[step]}"
    # What Kafka answered, spelled out for the walk (the rules in the handler's docstring).
    assert kafka["walk by 2"] == [
        ([("A", 0), ("A", 1)], ("A", 2)), ([("A", 2), ("A", 3)], ("A", 4)), ([("A", 4), ("B", 0)], ("B", 1)),
        ([("B", 1), ("B", 2)], ("C", 0)), ([("C", 0)], None)]


# --- Odradek alone: the broker's bound, and the checks no comparison needs -------------------------

@pytest.fixture
def bounded(tmp_path: Path):
    b = BrokerProcess(tmp_path / "bounded", overrides={"max.request.partition.size.limit": "3",
                                                       "odradek.metrics.port": "0",
                                                       "odradek.metrics.host": "127.0.0.1"})
    b.start()
    try:
        yield b
    finally:
        b.kill()


def requests_served(broker: BrokerProcess, api: str) -> float:
    port = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", broker.log_text()).group(1))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith(f'kafka_network_requestmetrics_requests_total{{request="{api}"'))


def test_the_broker_limit_bounds_every_page(bounded: BrokerProcess) -> None:
    with WireClient(bounded.host, bounded.port) as c:
        resp = c.request(19, 7, {"topics": [{"name": "wide", "num_partitions": 8, "replication_factor": 1}],
                                 "timeout_ms": 5000})
        assert resp["topics"][0]["error_code"] == 0
    # The request asks for 2000; the broker's max.request.partition.size.limit (3) wins.
    assert pages(bounded, ["wide"], 2000) == [
        ([("wide", 0), ("wide", 1), ("wide", 2)], ("wide", 3)),
        ([("wide", 3), ("wide", 4), ("wide", 5)], ("wide", 6)),
        ([("wide", 6), ("wide", 7)], None)]
    p = describe(bounded, ["wide"])["topics"][0]["partitions"][0]
    assert (p["leader_id"], p["leader_epoch"], p["replica_nodes"], p["isr_nodes"], p["offline_replicas"],
            p["eligible_leader_replicas"], p["last_known_elr"]) == (1, 0, [1], [1], [], [], [])


def test_admin_describe_topics_follows_the_cursor(bounded: BrokerProcess) -> None:
    """Kafka 4.4's Admin.describeTopics asks for 2000 partitions a page; the broker gives 3, and the
    client follows next_cursor to the topic's 8 partitions, every page a DescribeTopicPartitions."""
    require_toolchain()
    with WireClient(bounded.host, bounded.port) as c:
        for name, n in (("wide", 8), ("narrow", 2)):
            resp = c.request(19, 7, {"topics": [{"name": name, "num_partitions": n, "replication_factor": 1}],
                                     "timeout_ms": 5000})
            assert resp["topics"][0]["error_code"] == 0
    before = requests_served(bounded, "DescribeTopicPartitions")
    with JavaDriver(bounded.bootstrap) as driver:
        described = driver.admin("describe_topics", topics=["wide", "narrow"])
    assert [p["partition"] for p in described["wide"]["partitions"]] == list(range(8))
    assert [p["partition"] for p in described["narrow"]["partitions"]] == [0, 1]
    assert all(p["leader"] == 1 and p["isr"] == [1] for t in described.values() for p in t["partitions"])
    # 10 partitions, 3 a page: 4 pages (the client asks again from each cursor).
    assert requests_served(bounded, "DescribeTopicPartitions") - before >= 4


@pytest.mark.parametrize("target_name", ["kafka", "odradek"])
def test_kafka_topics_describe_pages_through_a_topic(tmp_path: Path, target_name: str) -> None:
    require_toolchain()
    with open_target(target_name, tmp_path) as target:
        target.require("DescribeTopicPartitions", "CreateTopics")
        topic = unique("cli-pages")
        create_topic(target, topic, 7)
        out = run_tool("kafka-topics", ["--bootstrap-server", target.bootstrap, "--describe", "--topic", topic,
                                        "--partition-size-limit-per-response", "2"]).stdout
        assert re.search(rf"Topic: {re.escape(topic)}\s+TopicId: \S+\s+PartitionCount: 7\s+ReplicationFactor: 1",
                         out), out
        assert [int(n) for n in re.findall(r"Partition: (\d+)\s+Leader: 1\s+Replicas: 1\s+Isr: 1", out)] == \
            list(range(7)), out
