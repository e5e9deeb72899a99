"""A transactions-v2 producer's pipelined Produce requests reach the log in the order they were sent.

From Produce v12 the leader adds a partition to the producer's transaction itself, asking the
coordinator, which answers CONCURRENT_TRANSACTIONS while the previous transaction's markers are
still being written; the leader asks again after add.partitions.to.txn.retry.backoff.ms. Kafka
reads a connection's next request only once the previous one is handled, so requests sent behind
a waiting one wait too and every batch is appended in sequence. The Java producer relies on it:
when a later batch (sequence 1) was refused OUT_OF_ORDER_SEQUENCE_NUMBER while the earlier one
(sequence 0) was appended afterwards, the refused batch was next in sequence and the producer
failed for good (Kafka's ProducerPerformance with 15 ms transactions, four runs of four).
"""

from __future__ import annotations

import time
import uuid

from odradek.protocol.records import Record, encode_batch
from tests.integration.test_transactions_v2_wire import END_TXN, NONE, PRODUCE, Producer
from tests.support.wire import WireClient, create_topic


def test_pipelined_batches_of_a_new_transaction_append_in_order(broker_factory) -> None:
    """EndTxn v5 and, pipelined behind it, the next transaction's batch with sequence 0 (the
    transaction still being completed: the coordinator answers CONCURRENT_TRANSACTIONS and the leader
    waits 300 ms to ask again), and 100 ms later the batch with sequence 1 on the same connection:
    both answered NONE in order, both committed; nothing refused, nothing out of order."""
    b = broker_factory({"add.partitions.to.txn.retry.backoff.ms": "300",
                        "add.partitions.to.txn.retry.backoff.max.ms": "5000"})
    topic = f"pipe-{uuid.uuid4().hex[:6]}"
    with WireClient(b.host, b.port) as c:
        create_topic(c, topic, 1)
        p = Producer(c, f"tx-pipe-{uuid.uuid4().hex[:6]}", topic)
        p.init()
        assert p.produce(0, 0, b"first transaction") == NONE

        def batch(epoch: int, sequence: int, value: bytes) -> bytes:
            records = encode_batch([Record(timestamp=int(time.time() * 1000), key=None, value=value)],
                                   producer_id=p.pid, producer_epoch=p.epoch0 + epoch, base_sequence=sequence,
                                   is_transactional=True)
            return c.encode_request(PRODUCE, 12, {"transactional_id": p.txn_id, "acks": -1, "timeout_ms": 10000,
                                                  "topic_data": [{"name": topic, "partition_data": [
                                                      {"index": 0, "records": records}]}]})

        # The commit and, right behind it, the next transaction's first batch at the epoch the commit
        # gives (Kafka bumps it by one): the batch finds the commit under way.
        end_corr, end = c.encode_request(END_TXN, 5, {"transactional_id": p.txn_id, "producer_id": p.pid,
                                                      "producer_epoch": p.epoch0, "committed": True})
        first_corr, first = batch(1, 0, b"second transaction, sequence 0")
        c.send_raw(end + first)
        time.sleep(0.1)
        second_corr, second = batch(1, 1, b"second transaction, sequence 1")
        c.send_raw(second)
        ended = c.read_response(END_TXN, 5, end_corr)
        assert ended["error_code"] == NONE and ended["producer_epoch"] == p.epoch0 + 1
        codes = [c.read_response(PRODUCE, 12, corr)["responses"][0]["partition_responses"][0]
                 for corr in (first_corr, second_corr)]
        assert [(r["error_code"], r["error_message"]) for r in codes] == [(NONE, None), (NONE, None)]
        assert codes[1]["base_offset"] > codes[0]["base_offset"]
        assert p.end(1, True)[0] == NONE
        p.describe(wait=True)
        log_end, stable = p.offsets()
        # first transaction's batch + marker, then the two batches and their marker
        assert (log_end, stable) == (5, 5)
