"""`make pipeline` twice: the generator's second run continues after the first (new event ids, later
event times), so the job has new windows to aggregate instead of duplicates and late data. No Spark."""

from __future__ import annotations

import json

from confluent_kafka import Consumer, TopicPartition

from pipeline import generate
from tests.support.broker_process import BrokerProcess


def read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe", "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        values: list[bytes] = []
        for _ in range(200):  # bounded: ~20 s at most
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            if len(values) >= expected:
                break
        return values
    finally:
        c.close()


def test_a_second_run_continues_the_event_stream(tmp_path) -> None:
    broker = BrokerProcess(tmp_path).start()
    try:
        args = ["--bootstrap", broker.bootstrap, "--events", "40", "--create-topic", "--partitions", "2",
                "--bad-ratio", "0", "--duplicate-ratio", "0"]
        assert generate.main(args) == 0
        assert generate.main(args) == 0
        events = [json.loads(v) for v in read_all(broker.bootstrap, "events", 80)]
        assert len(events) == 80
        assert len({e["event_id"] for e in events}) == 80  # the second run did not resend e-0000000..39
        first_run = {f"e-{i:07d}" for i in range(40)}
        latest_first = max(e["event_time"] for e in events if e["event_id"] in first_run)
        assert max(e["event_time"] for e in events if e["event_id"] not in first_run) > latest_first
    finally:
        broker.stop()
