"""An idempotent producer's sequences on one partition, against a real Kafka 4.4 and Odradek: the same answers.

What the fault suite's paused-leader scenario (docs/replication-faults.md, 1b) turned on. A leader
with no state for a producer takes any first sequence (KIP-360: state may have been removed by
retention or DeleteRecords), so when a producer's first batches to a partition hang in flight to a
paused leader and its next ones reach the new leader, the new leader appends those, and the first
ones can then only get OUT_OF_ORDER_SEQUENCE_NUMBER: they are older than everything it holds and
in none of the last 5 batches it remembers for the producer. Kafka 4.4 answers every step below as
Odradek does; what the retried batches get depends on the last 5 batches alone (a duplicate there
answers NONE with the offset it was written at), and a new epoch starts over at sequence 0.
"""

from __future__ import annotations

import time
from pathlib import Path

from odradek.protocol.records import Record, encode_batch
from tests.support.real_kafka import Target, create_topic, open_target, require_toolchain, unique
from tests.support.wire import WireClient

NONE, COORDINATOR_LOAD_IN_PROGRESS, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH = 0, 14, 45, 47


def steps(target: Target) -> list[tuple[str, int, int | None]]:
    """(step, error code, base offset relative to the producer's first append, or None on error)."""
    topic = unique("seq")
    create_topic(target, topic, 1)
    with WireClient(target.host, target.port) as c:
        deadline = time.monotonic() + 30
        while True:  # a new Kafka answers COORDINATOR_LOAD_IN_PROGRESS for a while; clients retry
            init = c.request(22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                     "producer_id": -1, "producer_epoch": -1})
            if init["error_code"] != COORDINATOR_LOAD_IN_PROGRESS:
                break
            assert time.monotonic() < deadline, init
            time.sleep(0.2)
        assert init["error_code"] == NONE, init
        pid, epoch = init["producer_id"], init["producer_epoch"]
        first: list[int] = []

        def send(step: str, seq: int, count: int = 1, producer_epoch: int = epoch) -> tuple[str, int, int | None]:
            records = encode_batch([Record(timestamp=int(time.time() * 1000), key=None, value=b"v%d" % i)
                                    for i in range(count)], producer_id=pid, producer_epoch=producer_epoch,
                                   base_sequence=seq)
            r = c.request(0, 11, {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
            p = r["responses"][0]["partition_responses"][0]
            if p["error_code"] != NONE:
                return step, p["error_code"], None
            if not first:
                first.append(p["base_offset"])
            return step, NONE, p["base_offset"] - first[0]

        out = [send("no state yet: first batch at sequence 5", 5, 2),
               send("next: 7", 7),
               send("the first batches arrive last: 0-4", 0, 5)]
        out += [send(f"next: {seq}", seq) for seq in range(8, 14)]  # 6 batches: 8 drops out of the last 5
        out += [send("retry of 13 (in the last 5)", 13), send("retry of 9 (in the last 5)", 9),
                send("retry of 8 (older than the last 5)", 8), send("a gap: 15", 15),
                send("a new epoch starts at 0", 0, producer_epoch=epoch + 1),
                send("a new epoch, then a gap: 5", 5, producer_epoch=epoch + 1),
                send("the old epoch after the new one", 14)]
        return out


def test_sequences_are_answered_as_kafka_answers_them(tmp_path: Path) -> None:
    require_toolchain()
    answers = {}
    for name in ("kafka", "odradek"):
        with open_target(name, tmp_path / name) as target:
            target.require("Produce", "InitProducerId", "CreateTopics", "Metadata")
            answers[name] = steps(target)
    assert answers["odradek"] == answers["kafka"]
    # What Kafka answered: a duplicate answers with the offset its batch was written at.
    assert [(code, offset) for _, code, offset in answers["kafka"]] == [
        (NONE, 0), (NONE, 2), (OUT_OF_ORDER_SEQUENCE_NUMBER, None),
        (NONE, 3), (NONE, 4), (NONE, 5), (NONE, 6), (NONE, 7), (NONE, 8),
        (NONE, 8), (NONE, 4), (OUT_OF_ORDER_SEQUENCE_NUMBER, None), (OUT_OF_ORDER_SEQUENCE_NUMBER, None),
        (NONE, 9), (OUT_OF_ORDER_SEQUENCE_NUMBER, None), (INVALID_PRODUCER_EPOCH, None)]
