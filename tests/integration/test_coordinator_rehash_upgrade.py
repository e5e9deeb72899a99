"""Groups and transactional ids whose coordinator partition changed when the partition rule was fixed
(issue 27, item 7): a data dir the previous release (0.1.0, the old rule: tests/support/old_release.py)
wrote through real clients opens with this release, and every group's committed offsets and every
transactional id's state are found, on the partition Kafka's rule names (broker/coordinator/rehash.py).

The previous release writes, on one node with Kafka's 50 partitions per internal topic: offsets
committed by groups whose partition moves (negative hashCode: ASCII, Cyrillic, astral ids) and by
some that stay; a group that consumed as a member; a committed transaction's offsets; an aborted
transaction's offsets; and a transaction left open at the stop by a producer that lives on (its
offsets on the old partition, its marker to come). Then this release opens the data dir:

- ``committed()`` answers, for every group, what the previous release acknowledged; the open
  transaction's producer commits it through the new release and its offsets become the group's;
- the groups' and transactional ids' live records are only on Kafka's partitions now (expected
  from Kafka's own code in a JVM), the old partitions hold tombstones;
- a transactional id moved to a new partition fences its previous incarnation there;
- Kafka's DumpLogSegments reads a partition holding the SWITCHED/MIGRATED markers;
- a second restart finds the same.

In a cluster: a rolling upgrade of three 0.1.0 brokers moves the groups across brokers once the
last one runs this release; and while one broker still runs 0.1.0 (metadata format level 1) the
upgraded ones route every id by the old rule too, so a moved group has one coordinator whichever
broker is asked and whoever leads its old partition (broker/coordinator/partition_rule.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.broker.coordinator.hashing import legacy_partition_for
from odradek.testing.cluster import ClusterProcesses
from tests.support.broker_process import BrokerProcess
from tests.support.internal_topics import partitions_holding
from tests.support.java_partitions import kafka_partitions
from tests.support.old_release import release_tree
from tools.kafka_dist import ToolchainUnavailable

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = pytest.mark.timeout(300)

N = 50
DATA = "data"
# Groups: the first five move (negative hashCode), the last two stay.
PLAIN = ["faults", "etl-job", "\u0433\u0440\u0443\u043f\u043f\u0430-1", "grp-\U0001F600\U0001F600", "readers",
         "polygenelubricants"]
MEMBER_GROUP = "billing"  # consumes as a subscribed member, then commits
TXN_COMMITTED, TXN_ABORTED, TXN_OPEN = "orders-tx", "ledger-tx", "tx-\u00e9t\u00e9"  # all three move
GROUPS = [*PLAIN, MEMBER_GROUP]
TXN_IDS = [TXN_COMMITTED, TXN_ABORTED, TXN_OPEN]


CLUSTER_N = 10  # the cluster test's __consumer_offsets partitions (x3 replicas: lighter than 50)


@pytest.fixture(scope="module")
def kafka_table() -> dict[str, list[int]]:
    """Kafka's partition of every id for N and CLUSTER_N partitions, from Kafka's code."""
    try:
        table = kafka_partitions(GROUPS + TXN_IDS, [N, CLUSTER_N])
    except ToolchainUnavailable as exc:
        pytest.skip(f"Kafka's partitions come from Java, unavailable here: {exc}")
    return {i: parts for i, (_, parts) in table.items()}


@pytest.fixture(scope="module")
def kafka(kafka_table: dict[str, list[int]]) -> dict[str, int]:
    return {i: parts[0] for i, parts in kafka_table.items()}


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[BrokerProcess]]:
    started: list[BrokerProcess] = []
    yield started
    for b in started:
        b.kill()


RETRIABLE = {confluent_kafka.KafkaError.NOT_COORDINATOR, confluent_kafka.KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
             confluent_kafka.KafkaError.COORDINATOR_NOT_AVAILABLE}


def _commit(bootstrap: str, group: str, offsets: dict[int, tuple[int, str]]) -> None:
    """Commit, again while the answer is retriable (a cluster's coordinator may still be moving in
    right after __consumer_offsets was made; librdkafka leaves an explicit commit's retry to us)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                consumer.commit(offsets=[TopicPartition(DATA, p, o, metadata=m) for p, (o, m) in offsets.items()],
                                asynchronous=False)
                return
            except KafkaException as exc:
                if exc.args[0].code() not in RETRIABLE or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


def _consume_as_member(bootstrap: str, group: str, records: int) -> dict[int, tuple[int, str]]:
    """Subscribe, read ``records`` records, commit the positions; what it committed."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([DATA])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < records and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen += 1
        assert seen == records
        committed = consumer.commit(asynchronous=False)
        return {tp.partition: (tp.offset, "") for tp in committed or [] if tp.offset >= 0}
    finally:
        consumer.close()


def _txn_producer(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "transaction.timeout.ms": 120_000})
    producer.init_transactions(30)
    return producer


def _send_offsets(bootstrap: str, producer: Producer, group: str, partition: int, offset: int) -> None:
    """TxnOffsetCommit of ``group``'s offset inside the producer's transaction (no generation: the
    group's metadata as a consumer that never joined has it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        metadata = consumer.consumer_group_metadata()
    finally:
        consumer.close()
    producer.send_offsets_to_transaction([TopicPartition(DATA, partition, offset)], metadata, 30)


def _committed(bootstrap: str, group: str) -> dict[int, tuple[int, str]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = consumer.committed([TopicPartition(DATA, p) for p in range(3)], timeout=60)
        return {tp.partition: (tp.offset, tp.metadata or "") for tp in tps if tp.offset >= 0}
    finally:
        consumer.close()


def test_groups_and_transactions_written_by_the_previous_release_are_found_on_kafkas_partitions(
        tmp_path: Path, brokers: list[BrokerProcess], kafka: dict[str, int]) -> None:
    moved = [i for i in GROUPS + TXN_IDS if legacy_partition_for(i, N) != kafka[i]]
    assert set(moved) == {*PLAIN[:4], MEMBER_GROUP, *TXN_IDS}, moved  # or this test could not fail on the old rule
    overrides = {"offsets.topic.num.partitions": str(N), "transaction.state.log.num.partitions": str(N)}
    old = BrokerProcess(tmp_path, overrides=overrides, package_root=release_tree())
    brokers.append(old)
    old.start(60)
    bootstrap = old.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(DATA, 3, 1)])[DATA].result(30)
    plain_producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        plain_producer.produce(DATA, value=b"r%d" % i, partition=i % 3)
    assert plain_producer.flush(30) == 0

    # What the previous release acknowledged: the expected state after the upgrade.
    expected: dict[str, dict[int, tuple[int, str]]] = {}
    for i, group in enumerate(PLAIN):
        expected[group] = {p: (10 * i + p, f"{group}:{p}") for p in range(3)}
        _commit(bootstrap, group, expected[group])
    expected[MEMBER_GROUP] = _consume_as_member(bootstrap, MEMBER_GROUP, 30)
    assert expected[MEMBER_GROUP] == {0: (10, ""), 1: (10, ""), 2: (10, "")}
    committed_txn = _txn_producer(bootstrap, TXN_COMMITTED)
    committed_txn.begin_transaction()
    committed_txn.produce(DATA, value=b"committed", partition=0)
    _send_offsets(bootstrap, committed_txn, "etl-job", 0, 777)
    committed_txn.commit_transaction(30)
    expected["etl-job"][0] = (777, "")
    aborted_txn = _txn_producer(bootstrap, TXN_ABORTED)
    aborted_txn.begin_transaction()
    aborted_txn.produce(DATA, value=b"aborted", partition=1)
    _send_offsets(bootstrap, aborted_txn, "etl-job", 1, 999)
    aborted_txn.abort_transaction(30)
    open_txn = _txn_producer(bootstrap, TXN_OPEN)
    open_txn.begin_transaction()
    open_txn.produce(DATA, value=b"open", partition=2)
    _send_offsets(bootstrap, open_txn, "faults", 2, 555)
    assert open_txn.flush(30) == 0
    for group in GROUPS:
        if group != "faults":  # the open transaction's pending offset: UNSTABLE_OFFSET_COMMIT until it ends
            assert _committed(bootstrap, group) == expected[group], group
    assert old.stop() == 0, old.log_text()

    new = BrokerProcess(tmp_path, port=old.port, overrides=overrides)
    brokers.append(new)
    new.start(60)
    # The transaction left open goes on: its producer commits it through this release (the
    # transactional id's state moved; its offsets, on the group's old partition, wait for the marker).
    open_txn.commit_transaction(60)
    expected["faults"][2] = (555, "")
    for group in GROUPS:
        assert _committed(bootstrap, group) == expected[group], group

    # The moved transactional id fences its previous incarnation from its new partition.
    again = _txn_producer(bootstrap, TXN_COMMITTED)
    again.begin_transaction()
    again.produce(DATA, value=b"after", partition=0)
    again.commit_transaction(30)
    committed_txn.begin_transaction()
    committed_txn.produce(DATA, value=b"zombie", partition=0)
    with pytest.raises(KafkaException) as fenced:
        committed_txn.commit_transaction(30)
    assert fenced.value.args[0].fatal(), fenced.value

    # Live records only on Kafka's partitions (the old ones were tombstoned once taken over).
    _wait_for_tombstones(bootstrap)
    holding = partitions_holding(bootstrap, "__consumer_offsets")
    assert {g: holding.get(g) for g in GROUPS} == {g: {kafka[g]} for g in GROUPS}
    holding = partitions_holding(bootstrap, "__transaction_state")
    assert {t: holding.get(t) for t in TXN_IDS} == {t: {kafka[t]} for t in TXN_IDS}
    assert new.stop() == 0, new.log_text()

    _kafka_reads_a_partition_with_markers(tmp_path, kafka["faults"])
    new.start(60)
    for group in GROUPS:
        assert _committed(bootstrap, group) == expected[group], group
    assert "Traceback" not in new.log_text()
    assert new.stop() == 0, new.log_text()


def _wait_for_tombstones(bootstrap: str) -> None:
    """Each partition writes the tombstones of its moved-out records once its twin took them over
    (right after the load on one node); wait until no group's id has live records on two partitions."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        holding = partitions_holding(bootstrap, "__consumer_offsets")
        if all(len(parts) == 1 for parts in holding.values()):
            return
        time.sleep(0.5)


def _kafka_reads_a_partition_with_markers(tmp_path: Path, partition: int) -> None:
    """Kafka's own reader of __consumer_offsets skips the two markers as an unknown record type and
    decodes the copied records around them."""
    from tests.support.java_tools import run_tool

    segment = tmp_path / "logs" / f"__consumer_offsets-{partition}" / f"{0:020d}.log"
    out = run_tool("org.apache.kafka.tools.DumpLogSegments", ["--files", str(segment), "--print-data-log",
                                                   "--offsets-decoder"]).stdout
    assert sum("key: Unknown record type 32767 at offset" in line for line in out.splitlines()) == 2, out[-3000:]
    assert '"group":"faults","topic":"data","partition":2}} payload: {"version":"3","data":{"offset":555' in out


def test_a_rolling_upgrade_moves_groups_between_partitions_on_different_brokers(
        tmp_path: Path, kafka_table: dict[str, list[int]]) -> None:
    """Three brokers of the previous release, the internal topics with one replica each (so a
    partition stays on its broker: a moved group's old and new partitions are often on different
    brokers); each broker in turn stopped and started on this release. Until the last one is, the
    metadata format level stays 1 and every broker serves every group by the old rule; then a moved
    group's new partition reads its old one with Fetch from the other broker
    (broker/coordinator/twin_reader.py). Groups that do not move are served at every step; at the
    end every group's offsets are the acknowledged ones."""
    from odradek.broker.launcher.cluster_launcher import PACKAGE_ROOT
    from tests.support.cluster import cluster_or_skip

    kafka = {i: parts[1] for i, parts in kafka_table.items()}
    moved = [g for g in PLAIN if legacy_partition_for(g, CLUSTER_N) != kafka[g]]
    stays = [g for g in PLAIN if g not in moved]
    assert len(moved) == 4 and stays == ["readers", "polygenelubricants"], moved
    c = cluster_or_skip(tmp_path, 3, {"offsets.topic.num.partitions": str(CLUSTER_N),
                                      "offsets.topic.replication.factor": "1",
                                      "transaction.state.log.replication.factor": "1",
                                      "transaction.state.log.min.isr": "1"})
    for node in c.brokers.values():
        node.package_root = str(release_tree())
    with c:
        assert c.wait_members(30), c.logs()
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic(DATA, 3, 3)])[DATA].result(30)
        expected = {group: {p: (10 * i + p, f"{group}:{p}") for p in range(3)} for i, group in enumerate(PLAIN)}
        for group, offsets in expected.items():
            _commit(c.bootstrap, group, offsets)
        committed_txn = _txn_producer(c.bootstrap, TXN_COMMITTED)
        committed_txn.begin_transaction()
        committed_txn.produce(DATA, value=b"committed", partition=0)
        _send_offsets(c.bootstrap, committed_txn, "etl-job", 0, 777)
        committed_txn.commit_transaction(30)
        expected["etl-job"][0] = (777, "")
        topic = admin.list_topics("__consumer_offsets", timeout=30).topics["__consumer_offsets"]
        home = {p: meta.replicas[0] for p, meta in topic.partitions.items()}
        apart = [g for g in moved if home[kafka[g]] != home[legacy_partition_for(g, CLUSTER_N)]]
        assert apart, home  # or nothing here would be read from another broker
        for node_id in c.node_ids:
            assert c.stop(node_id) == 0, c.log_text(node_id)
            c.brokers[node_id].package_root = str(PACKAGE_ROOT)
            c.start(node_id, 60)
            assert c.wait_members(60), c.logs()
            for group in stays:
                assert _committed(c.bootstrap, group) == expected[group], (node_id, group)
        for group, offsets in expected.items():
            assert _committed(c.bootstrap, group) == offsets, group
        again = _txn_producer(c.bootstrap, TXN_COMMITTED)  # its state moved too: a new epoch
        again.begin_transaction()
        again.produce(DATA, value=b"after", partition=0)
        again.commit_transaction(30)
        with pytest.raises(KafkaException):
            committed_txn.begin_transaction()
            committed_txn.produce(DATA, value=b"zombie", partition=0)
            committed_txn.commit_transaction(30)
        logs = {node: c.log_text(node, 1_000_000) for node in c.node_ids}
        for g in apart:  # its new partition's broker read the old one from the old one's broker
            new, old = kafka[g], legacy_partition_for(g, CLUSTER_N)
            wanted = (f"__consumer_offsets-{new} took over", f"from __consumer_offsets-{old} (read from broker {home[old]})")
            assert any(all(w in line for w in wanted) for line in logs[home[new]].splitlines()), (g, home, logs[home[new]])
        for text in logs.values():
            assert "Traceback" not in text, text


def _leaders(c: ClusterProcesses, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr), as the first live broker's Metadata says."""
    (t,) = [t for t in c.metadata()["topics"] if t["name"] == topic]
    return {p["partition_index"]: (p["leader_id"], p["replica_nodes"], p["isr_nodes"]) for p in t["partitions"]}


def _lead(c: ClusterProcesses, topic: str, partition: int, node_id: int) -> None:
    """Make ``node_id`` the partition's leader: replicas reordered (a reassignment within the ISR
    completes at once), then a preferred leader election."""
    assert c.wait_until(lambda: len(_leaders(c, topic)[partition][2]) == len(c.node_ids), 60), c.logs()
    _, replicas, _ = _leaders(c, topic)[partition]
    order = [node_id, *[r for r in replicas if r != node_id]]
    reply = c.request(c.controller_id(), "AlterPartitionReassignments", 0, {"timeout_ms": 10000, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "replicas": order}]}]})
    assert reply["error_code"] == 0 and reply["responses"][0]["partitions"][0]["error_code"] == 0, reply
    assert c.wait_until(lambda: _leaders(c, topic)[partition][1] == order, 30), c.logs()
    elected = c.request(c.controller_id(), "ElectLeaders", 2, {
        "election_type": 0, "timeout_ms": 10000, "topic_partitions": [{"topic": topic, "partitions": [partition]}]})
    (result,) = elected["replica_election_results"][0]["partition_result"]
    assert result["error_code"] in (0, 84), elected  # 84: ELECTION_NOT_NEEDED (it leads already)
    assert c.wait_until(lambda: _leaders(c, topic)[partition][0] == node_id, 30), c.logs()


def _restart_on_this_release(c: ClusterProcesses, node_id: int) -> None:
    """One step of a rolling upgrade: SIGTERM, start from this checkout, then wait until every
    partition is fully replicated again before the next step (as an operator waits for no
    under-replicated partitions)."""
    from odradek.broker.launcher.cluster_launcher import PACKAGE_ROOT

    assert c.stop(node_id) == 0, c.log_text(node_id)
    c.brokers[node_id].package_root = str(PACKAGE_ROOT)
    c.start(node_id, 60)
    assert c.wait_members(60), c.logs()

    def in_sync() -> bool:
        return all(p["leader_id"] >= 0 and len(p["isr_nodes"]) == len(p["replica_nodes"])
                   for t in c.metadata()["topics"] for p in t["partitions"])

    assert c.wait_until(in_sync, 60, 0.25), c.logs()


def _coordinators(c: ClusterProcesses, key: str, key_type: int) -> dict[int, int]:
    """Broker -> the coordinator it names for ``key`` (-1: an error, e.g. COORDINATOR_NOT_AVAILABLE)."""
    found = {}
    for node_id in c.live_ids():
        reply = c.request(node_id, "FindCoordinator", 3, {"key": key, "key_type": key_type})
        found[node_id] = reply["node_id"] if reply["error_code"] == 0 else -1
    return found


def _all_name(c: ClusterProcesses, key: str, key_type: int, coordinator: int) -> bool:
    """Every broker names ``coordinator`` (a broker still applying the last leadership change may
    answer the one before for a moment: polled)."""
    seen: list[dict[int, int]] = []
    ok = c.wait_until(lambda: seen.append(_coordinators(c, key, key_type)) or set(seen[-1].values()) == {coordinator},
                      30)
    assert ok, (key, coordinator, seen[-3:])
    return ok


def test_a_mixed_cluster_routes_moved_ids_by_the_old_rule_until_the_last_broker_is_upgraded(
        tmp_path: Path, kafka_table: dict[str, list[int]]) -> None:
    """Broker 1 runs 0.1.0, brokers 2 and 3 this release: the metadata format level stays 1, so the
    upgraded brokers route every group and transactional id by 0.1.0's rule too
    (broker/coordinator/partition_rule.py). A group whose partition moves with Kafka's rule is served
    by one coordinator, the leader of its old partition, whichever broker a client asks - also while
    that partition's leadership goes from the old broker to an upgraded one and back - and every
    commit, plain or transactional, lands there and reads back. Once broker 1 is upgraded the level
    rises, and the group's committed offsets are the last ones acknowledged, on Kafka's partition."""
    from odradek.controller.metadata_format import LATEST
    from tests.integration.test_upgrade import metadata_format_in_etcd
    from tests.support.cluster import cluster_or_skip

    kafka = {i: parts[1] for i, parts in kafka_table.items()}
    group = next(g for g in PLAIN if legacy_partition_for(g, CLUSTER_N) != kafka[g])
    old, new = legacy_partition_for(group, CLUSTER_N), kafka[group]
    assert legacy_partition_for(TXN_COMMITTED, CLUSTER_N) != kafka[TXN_COMMITTED]
    offsets = "__consumer_offsets"
    c = cluster_or_skip(tmp_path, 3, {"offsets.topic.num.partitions": str(CLUSTER_N),
                                      "transaction.state.log.num.partitions": str(CLUSTER_N)})
    for node in c.brokers.values():
        node.package_root = str(release_tree())
    with c:
        assert c.wait_members(30), c.logs()
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic(DATA, 3, 3)])[DATA].result(30)
        assert c.wait_until(lambda: _coordinators(c, group, 0)[1] > 0, 30), c.logs()  # __consumer_offsets made
        for node_id in (2, 3):  # a rolling upgrade that stops before broker 1
            _restart_on_this_release(c, node_id)
        assert metadata_format_in_etcd(c) == 1

        # The group's old partition led by the 0.1.0 broker, its new one by an upgraded broker.
        _lead(c, offsets, old, 1)
        _lead(c, offsets, new, 2)
        expected: dict[int, tuple[int, str]] = {}
        for step, leader in enumerate([1, 2, 3, 1]):  # the old partition's leadership back and forth
            _lead(c, offsets, old, leader)
            assert _all_name(c, group, 0, leader)
            expected = {p: (100 * step + p, f"step {step}") for p in range(3)}
            _commit(c.bootstrap, group, expected)
            assert _committed(c.bootstrap, group) == expected, step
        # A transaction's offsets, through whichever coordinators the old rule names.
        assert c.wait_until(lambda: min(_coordinators(c, TXN_COMMITTED, 1).values()) > 0, 60), c.logs()
        txn_leader = _leaders(c, "__transaction_state")[legacy_partition_for(TXN_COMMITTED, CLUSTER_N)][0]
        assert _all_name(c, TXN_COMMITTED, 1, txn_leader)
        producer = _txn_producer(c.bootstrap, TXN_COMMITTED)
        producer.begin_transaction()
        producer.produce(DATA, value=b"committed", partition=0)
        _send_offsets(c.bootstrap, producer, group, 0, 777)
        producer.commit_transaction(30)
        expected[0] = (777, "")
        assert c.wait_until(lambda: _committed(c.bootstrap, group) == expected, 30), _committed(c.bootstrap, group)
        holding = partitions_holding(c.bootstrap, offsets)
        assert holding[group] == {old}, holding  # nothing on Kafka's partition yet
        assert metadata_format_in_etcd(c) == 1

        _restart_on_this_release(c, 1)
        assert c.wait_until(lambda: metadata_format_in_etcd(c) == LATEST, 30), c.logs()
        assert _all_name(c, group, 0, _leaders(c, offsets)[new][0])
        assert _committed(c.bootstrap, group) == expected
        _wait_for_tombstones(c.bootstrap)
        holding = partitions_holding(c.bootstrap, offsets)
        assert holding[group] == {new}, holding
        for node_id in c.node_ids:
            assert "Traceback" not in c.log_text(node_id, 1_000_000)
