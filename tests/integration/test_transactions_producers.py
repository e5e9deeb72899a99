"""Transactional producers end to end on one broker (the transaction coordinator, issue 14):
confluent-kafka and aiokafka commit and abort, a read_committed consumer sees exactly the
committed records, a second producer with the same transactional.id fences the first, a
transaction left open past its timeout is aborted by the broker (both with each client), send_offsets_to_transaction
commits the group's offsets with the transaction (and an abort drops them)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from tests.support.waiting import wait_until
from tests.support.wire import WireClient, create_topic

OVERRIDES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@pytest.fixture
def txn_broker(broker_factory):
    return broker_factory(OVERRIDES)


def _topic(broker, partitions: int = 2) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    with WireClient("127.0.0.1", broker.port) as c:
        create_topic(c, name, partitions)
    return name


def _producer(bootstrap: str, txn_id: str, **extra):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **extra})


def _transaction_state(broker, txn_id: str) -> str:
    """The transaction's state as DescribeTransactions answers it (Kafka's names: Ongoing, CompleteAbort, ...)."""
    with WireClient("127.0.0.1", broker.port) as c:
        (state,) = c.request(65, 0, {"transactional_ids": [txn_id]})["transaction_states"]
    assert state["error_code"] == 0, state
    return state["transaction_state"]


def read_committed(bootstrap: str, topic: str, partitions: int, expected: int,
                   isolation: str = "read_committed") -> list[bytes]:
    """Everything a consumer sees from the start (a while past ``expected``: nothing else may come)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rc-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "isolation.level": isolation})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    quiet_until = None
    while time.monotonic() < deadline and (quiet_until is None or time.monotonic() < quiet_until):
        for m in c.consume(100, timeout=0.3):
            if m.error() is None:
                got.append(m.value())
        if len(got) >= expected and quiet_until is None:
            quiet_until = time.monotonic() + 1.5
    c.close()
    return got


def test_confluent_commit_and_abort(txn_broker) -> None:
    topic = _topic(txn_broker)
    p = _producer(txn_broker.bootstrap, "tx-confluent")
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, f"a{i}".encode(), partition=i % 2)
    p.flush(10)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, b"c-last", partition=0)
    p.commit_transaction(30)
    got = read_committed(txn_broker.bootstrap, topic, 2, 11)
    assert sorted(got) == sorted([f"c{i}".encode() for i in range(10)] + [b"c-last"])
    # read_uncommitted sees the aborted records too (they are in the log), never the markers
    assert len(read_committed(txn_broker.bootstrap, topic, 2, 16, "read_uncommitted")) == 16


def test_second_producer_fences_the_first(txn_broker) -> None:
    from confluent_kafka import KafkaException

    topic = _topic(txn_broker, 1)
    first = _producer(txn_broker.bootstrap, "tx-fence")
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(10)
    second = _producer(txn_broker.bootstrap, "tx-fence")
    second.init_transactions(30)  # aborts the first's open transaction, bumps the epoch
    with pytest.raises(KafkaException) as info:
        first.commit_transaction(10)
    assert info.value.args[0].fatal() or "fenced" in str(info.value).lower(), info.value
    second.begin_transaction()
    second.produce(topic, b"live", partition=0)
    second.commit_transaction(30)
    assert read_committed(txn_broker.bootstrap, topic, 1, 1) == [b"live"]


def test_open_transaction_past_its_timeout_is_aborted(txn_broker) -> None:
    topic = _topic(txn_broker, 1)
    p = _producer(txn_broker.bootstrap, "tx-timeout", **{"transaction.timeout.ms": 2000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"left-open", partition=0)
    p.flush(10)
    # The broker aborts it: a read_committed consumer gets past it (the LSO moves) and sees nothing.
    other = _producer(txn_broker.bootstrap, "tx-after-timeout")
    other.init_transactions(30)
    # transaction.timeout.ms (2 s) passes, and the next cleanup (every 500 ms) aborts it.
    wait_until(lambda: _transaction_state(txn_broker, "tx-timeout") == "CompleteAbort", timeout=15,
               what="the broker's abort of the timed-out transaction")
    other.begin_transaction()
    other.produce(topic, b"after", partition=0)
    other.commit_transaction(30)
    assert read_committed(txn_broker.bootstrap, topic, 1, 1) == [b"after"]


def test_aiokafka_commit_and_abort(txn_broker) -> None:
    from aiokafka import AIOKafkaProducer, TopicPartition

    topic = _topic(txn_broker, 1)

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id="tx-aiokafka")
        await p.start()
        try:
            async with p.transaction():
                for i in range(3):
                    await p.send_and_wait(topic, f"ok{i}".encode(), partition=0)
            await p.begin_transaction()
            await p.send_and_wait(topic, b"no", partition=0)
            await p.abort_transaction()
            # send_offsets_to_transaction (AddOffsetsToTxn + TxnOffsetCommit, aiokafka's old versions)
            async with p.transaction():
                await p.send_and_wait(topic, b"ok3", partition=0)
                await p.send_offsets_to_transaction({TopicPartition(topic, 0): 17}, group)
        finally:
            await p.stop()

    group = f"aio-{uuid.uuid4().hex[:6]}"
    asyncio.run(run())
    assert read_committed(txn_broker.bootstrap, topic, 1, 4) == [b"ok0", b"ok1", b"ok2", b"ok3"]
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group})
    assert consumer.committed([CTopicPartition(topic, 0)], timeout=10)[0].offset == 17
    consumer.close()


def test_send_offsets_to_transaction_commits_with_it_and_abort_drops_them(txn_broker) -> None:
    """consume-transform-produce: the group's offsets are committed by the transaction's commit
    only (OffsetFetch shows nothing after an abort and the committed ones after a commit)."""
    from confluent_kafka import Consumer, TopicPartition

    source, sink = _topic(txn_broker, 1), _topic(txn_broker, 1)
    seed = _producer(txn_broker.bootstrap, "tx-seed")
    seed.init_transactions(30)
    seed.begin_transaction()
    for i in range(6):
        seed.produce(source, f"in{i}".encode(), partition=0)
    seed.commit_transaction(30)

    group = f"ctp-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.subscribe([source])
    batch: list = []
    deadline = time.monotonic() + 30
    while len(batch) < 6 and time.monotonic() < deadline:
        batch += [m for m in consumer.consume(10, timeout=0.5) if m.error() is None]
    assert len(batch) == 6

    p = _producer(txn_broker.bootstrap, "tx-ctp")
    p.init_transactions(30)

    def committed() -> int:
        return consumer.committed([TopicPartition(source, 0)], timeout=10)[0].offset

    # An aborted transaction's offsets are dropped.
    p.begin_transaction()
    for m in batch[:3]:
        p.produce(sink, m.value().upper(), partition=0)
    p.send_offsets_to_transaction([TopicPartition(source, 0, batch[2].offset() + 1)],
                                  consumer.consumer_group_metadata(), 30)
    p.abort_transaction(30)
    assert committed() < 0
    # A committed one's are visible with its records.
    p.begin_transaction()
    for m in batch:
        p.produce(sink, m.value().upper(), partition=0)
    p.send_offsets_to_transaction([TopicPartition(source, 0, batch[-1].offset() + 1)],
                                  consumer.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    deadline = time.monotonic() + 10
    while committed() != 6 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert committed() == batch[-1].offset() + 1 == 6
    consumer.close()
    assert read_committed(txn_broker.bootstrap, sink, 1, 6) == [f"IN{i}".encode() for i in range(6)]


def test_pending_offsets_survive_a_broker_restart_and_commit_with_the_transaction(txn_broker) -> None:
    """send_offsets_to_transaction, then the broker restarts before the commit: the reloaded
    group coordinator restores the open transaction's offsets as pending (OffsetFetch shows none),
    and the commit makes them the group's."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    source = _topic(txn_broker, 1)
    group = f"restart-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    p = _producer(txn_broker.bootstrap, "tx-restart-offsets")
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(source, b"out", partition=0)
    p.send_offsets_to_transaction([TopicPartition(source, 0, 42)], consumer.consumer_group_metadata(), 30)
    assert txn_broker.stop() == 0
    txn_broker.start()
    # Pending, not committed: a read_uncommitted consumer's OffsetFetch shows nothing, a
    # read_committed one's (require_stable) gets UNSTABLE_OFFSET_COMMIT until the commit.
    uncommitted = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": group,
                            "isolation.level": "read_uncommitted"})
    assert uncommitted.committed([TopicPartition(source, 0)], timeout=20)[0].offset < 0
    uncommitted.close()
    with pytest.raises(KafkaException):
        consumer.committed([TopicPartition(source, 0)], timeout=2)
    p.commit_transaction(60)
    deadline = time.monotonic() + 10
    while consumer.committed([TopicPartition(source, 0)], timeout=10)[0].offset != 42 \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    assert consumer.committed([TopicPartition(source, 0)], timeout=10)[0].offset == 42
    consumer.close()


def test_aiokafka_second_producer_fences_the_first(txn_broker) -> None:
    """A second aiokafka producer with the same transactional_id fences the first: the first's commit
    fails with ProducerFenced (EndTxn answers INVALID_PRODUCER_EPOCH to aiokafka's old EndTxn version,
    as Kafka does) and its records stay invisible to read_committed consumers."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import ProducerFenced

    topic = _topic(txn_broker, 1)

    async def run() -> None:
        first = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id="tx-aio-fence")
        second = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id="tx-aio-fence")
        await first.start()
        try:
            await first.begin_transaction()
            await first.send_and_wait(topic, b"zombie", partition=0)
            await second.start()  # InitProducerId: aborts the first's open transaction, bumps the epoch
            with pytest.raises(ProducerFenced):
                await first.commit_transaction()
            async with second.transaction():
                await second.send_and_wait(topic, b"live", partition=0)
        finally:
            await first.stop()
            await second.stop()

    asyncio.run(run())
    assert read_committed(txn_broker.bootstrap, topic, 1, 1) == [b"live"]
    assert read_committed(txn_broker.bootstrap, topic, 1, 2, "read_uncommitted") == [b"zombie", b"live"]


def test_aiokafka_open_transaction_past_its_timeout_is_aborted(txn_broker) -> None:
    """An aiokafka transaction left open past transaction_timeout_ms is aborted by the broker: the LSO
    moves past it (a read_committed consumer sees nothing of it) and the late commit is fenced."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import ProducerFenced
    from confluent_kafka import Consumer, TopicPartition

    topic = _topic(txn_broker, 1)

    def stable_and_end() -> tuple[int, int]:
        offsets = []
        for isolation in ("read_committed", "read_uncommitted"):
            c = Consumer({"bootstrap.servers": txn_broker.bootstrap, "group.id": "lso-probe",
                          "isolation.level": isolation})
            offsets.append(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
            c.close()
        return offsets[0], offsets[1]

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id="tx-aio-timeout",
                             transaction_timeout_ms=5000)
        await p.start()
        try:
            await p.begin_transaction()
            await p.send_and_wait(topic, b"left-open", partition=0)
            assert stable_and_end() == (0, 1)  # the open transaction holds the LSO (for 5 s)
            deadline = time.monotonic() + 30
            while stable_and_end() != (2, 2) and time.monotonic() < deadline:  # record + ABORT marker
                await asyncio.sleep(0.3)
            assert stable_and_end() == (2, 2)
            with pytest.raises(ProducerFenced):
                await p.commit_transaction()
        finally:
            await p.stop()

    asyncio.run(run())
    assert read_committed(txn_broker.bootstrap, topic, 1, 0) == []


def test_librdkafka_and_aiokafka_keep_transactions_v1_on_a_v2_cluster(tmp_path) -> None:
    """The broker finalizes transaction.version 2 and advertises EndTxn v5 and Produce v12, as Kafka
    4.4; librdkafka (2.16, confluent-kafka) and aiokafka (0.14) do not implement KIP-890 part 2 and
    pick lower versions - AddPartitionsToTxn v0-3 before producing, EndTxn v4 at most, Produce v11 at
    most - so their transactions run as version 1 ones, committed and aborted as before (the request
    log shows what each sent)."""
    from aiokafka import AIOKafkaProducer

    from tests.support.broker_process import BrokerProcess
    from tests.support.request_log import request_log_args, versions_used

    b = BrokerProcess(tmp_path / "broker", args=request_log_args(tmp_path / "broker"), overrides=OVERRIDES).start()
    try:
        with WireClient(b.host, b.port) as c:
            finalized = c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert {f["name"]: f["max_version_level"] for f in finalized["finalized_features"]}["transaction.version"] == 2
        topic = _topic(b, 1)
        p = _producer(b.bootstrap, "tx-v1-librdkafka")
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, b"librdkafka", partition=0)
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce(topic, b"aborted", partition=0)
        p.flush(10)
        p.abort_transaction(30)
        librdkafka = versions_used(b)
        b.log_path.write_bytes(b"")  # the broker appends (O_APPEND): the next client's requests alone

        async def aiokafka() -> None:
            producer = AIOKafkaProducer(bootstrap_servers=b.bootstrap, transactional_id="tx-v1-aiokafka")
            await producer.start()
            try:
                async with producer.transaction():
                    await producer.send_and_wait(topic, b"aiokafka", partition=0)
            finally:
                await producer.stop()

        asyncio.run(aiokafka())
        aio = versions_used(b)
        assert sorted(read_committed(b.bootstrap, topic, 1, 2)) == [b"aiokafka", b"librdkafka"]
    finally:
        b.kill()
    for used in (librdkafka, aio):
        assert max(used["EndTxn"]) <= 4 and max(used["Produce"]) <= 11 and max(used["AddPartitionsToTxn"]) <= 3, used
