"""A real client's offsets and transactional ids land on the coordinator partitions Kafka chooses
(issue 27, item 7): the expected partitions come from Kafka's own code in a JVM
(tests/support/java_partitions.py), the observed ones from reading ``__consumer_offsets`` and
``__transaction_state`` back with a consumer."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from odradek.broker.coordinator.hashing import legacy_partition_for
from tests.support.broker_process import BrokerProcess
from tests.support.internal_topics import partitions_holding
from tests.support.java_partitions import kafka_partitions
from tools.kafka_dist import ToolchainUnavailable

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

OFFSETS_PARTITIONS = 50  # Kafka's default offsets.topic.num.partitions (and transaction.state.log.num.partitions)

# Negative hashes (the ones the old rule put elsewhere), MIN_VALUE, non-ASCII and astral characters.
GROUPS = ["faults", "billing", "etl-job", "\u0433\u0440\u0443\u043f\u043f\u0430-1", "grp-\U0001F600\U0001F600",
          "polygenelubricants", "readers", "gr\u00fc\u00dfe-gruppe", "\u65e5\u672c\u8a9e", "emoji-\U0001F600"]
TXN_IDS = ["upgrade-txn", "upgrade-open", "orders-tx", "tx-\u00e9t\u00e9", "tx-\U0001D11E", "payments-1"]


@pytest.fixture(scope="module")
def kafka() -> dict[str, tuple[int, list[int]]]:
    try:
        return kafka_partitions(GROUPS + TXN_IDS, [OFFSETS_PARTITIONS])
    except ToolchainUnavailable as exc:
        pytest.skip(f"Kafka's partitions come from Java, unavailable here: {exc}")


def test_offsets_and_transactional_ids_land_on_kafkas_partitions(broker_factory: Callable[..., BrokerProcess],
                                                                 kafka: dict[str, tuple[int, list[int]]]) -> None:
    # The ids must include ones the old rule placed elsewhere, or this test could not fail on it.
    assert sum(legacy_partition_for(g, OFFSETS_PARTITIONS) != kafka[g][1][0] for g in GROUPS) >= 4
    assert sum(legacy_partition_for(t, OFFSETS_PARTITIONS) != kafka[t][1][0] for t in TXN_IDS) >= 3
    b = broker_factory({"offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)})
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("data", 2, 1)])["data"].result(30)
    for i, group in enumerate(GROUPS):
        consumer = confluent_kafka.Consumer({"bootstrap.servers": b.bootstrap, "group.id": group,
                                             "enable.auto.commit": False})
        try:
            committed = [confluent_kafka.TopicPartition("data", p, 10 * i + p, metadata=f"m{i}") for p in range(2)]
            consumer.commit(offsets=committed, asynchronous=False)
            back = consumer.committed([confluent_kafka.TopicPartition("data", p) for p in range(2)], timeout=30)
            assert [(tp.offset, tp.metadata) for tp in back] == [(10 * i, f"m{i}"), (10 * i + 1, f"m{i}")]
        finally:
            consumer.close()
    for txn_id in TXN_IDS:
        producer = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap, "transactional.id": txn_id})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("data", value=txn_id.encode(), partition=0)
        producer.commit_transaction(30)

    groups = partitions_holding(b.bootstrap, "__consumer_offsets")
    assert {g: groups.get(g) for g in GROUPS} == {g: {kafka[g][1][0]} for g in GROUPS}
    txns = partitions_holding(b.bootstrap, "__transaction_state")
    assert {t: txns.get(t) for t in TXN_IDS} == {t: {kafka[t][1][0]} for t in TXN_IDS}
