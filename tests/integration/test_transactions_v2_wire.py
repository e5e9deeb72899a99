"""Transactions v2 (KIP-890 part 2) on the wire, against a real Apache Kafka 4.4 and Odradek (issue 28,
item 3): the same raw requests to both, the same answers required.

One producer runs a sequence of transactions with EndTxn v5, Produce v12 and TxnOffsetCommit v5/v6 (no
AddPartitionsToTxn, no AddOffsetsToTxn: the leaders add the partitions), and every answer is recorded -
error codes, the producer id and epoch EndTxn v5 hands back, the state DescribeTransactions shows, the
log end and last stable offsets - with producer ids and epochs normalised (P for the id InitProducerId
gave, E+n for its epoch plus n). The transcript of Odradek must be Kafka's, step for step; what each
step exercises, and Kafka's answer where it is the rule being checked:

- the epoch sequence: each commit or abort bumps the epoch by one (EndTxn v5 answers P, E+n);
- retries by Kafka's table (TransactionCoordinator.endTransaction for v2): a commit retried with the
  epoch before the bump answers NONE with the current id and epoch; an abort of a committed one with
  it, or a commit with the current epoch of one already ended, INVALID_TXN_STATE; an abort with nothing
  ongoing aborts an empty transaction and bumps;
- late and stray producers: a batch of an ended transaction (its epoch is below the marker's) and of an
  epoch the coordinator has moved past are INVALID_PRODUCER_EPOCH; an unknown producer id
  INVALID_PRODUCER_ID_MAPPING; a new epoch's first batch at another sequence than 0
  OUT_OF_ORDER_SEQUENCE_NUMBER, the partition added anyway;
- TxnOffsetCommit v5 joins the group's offsets partition to the transaction; the offset is visible
  after the commit; v6 by topic id, an unknown id UNKNOWN_TOPIC_ID; a generation for a group the
  coordinator does not have ILLEGAL_GENERATION, from v6 GROUP_ID_NOT_FOUND (KIP-1319);
- a new incarnation's InitProducerId fences an ongoing v2 transaction: CONCURRENT_TRANSACTIONS while
  its abort (one bump) completes, then the epoch after; the old incarnation's batch and EndTxn are
  refused;
- WriteTxnMarkers v2 (KIP-1228) from a client: a v2 marker at the producer's own epoch repeats the
  marker that ended its transaction (written again), an older epoch is INVALID_PRODUCER_EPOCH; v1 at
  the same epoch is written too.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.protocol.records import Record, encode_batch
from tests.support.real_kafka import TARGETS, Target, create_topic, kafka_and_odradek, unique
from tests.support.wire import WireClient

PRODUCE, LIST_OFFSETS, METADATA, OFFSET_FETCH, FIND_COORDINATOR = 0, 2, 3, 9, 10
INIT_PRODUCER_ID, END_TXN, WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT, DESCRIBE_TRANSACTIONS = 22, 26, 27, 28, 65
NONE, CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR = 0, 51, 14, 16
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION = 47, 48, 6, 3
ILLEGAL_GENERATION, GROUP_ID_NOT_FOUND, TRANSACTION_ABORTABLE = 22, 69, 120
ZERO_ID = uuid.UUID(int=0)
DONE = ("CompleteCommit", "CompleteAbort", "Empty")


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Target]]:
    with kafka_and_odradek(tmp_path_factory) as targets:
        yield targets


def new_topic(target: Target, c: WireClient) -> tuple[str, uuid.UUID]:
    name = unique("txv2")
    create_topic(target, name, 1)
    deadline = time.monotonic() + 30
    while True:
        md = c.request(METADATA, 12, {"topics": [{"name": name, "topic_id": None}],
                                      "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        t = md["topics"][0]
        if t["error_code"] == NONE and t["partitions"] and t["partitions"][0]["leader_id"] >= 0:
            return name, t["topic_id"]
        assert time.monotonic() < deadline, md
        time.sleep(0.1)


class Producer:
    """One transactional id's raw requests, its answers normalised for the transcript."""

    def __init__(self, c: WireClient, txn_id: str, topic: str) -> None:
        self.c, self.txn_id, self.topic = c, txn_id, topic
        self.pid, self.epoch0 = -1, -1

    def ids(self, pid: int, epoch: int) -> tuple[str, str]:
        if pid < 0:
            return "-", "-"
        name = "P" if pid == self.pid else "P?"
        return name, f"E+{epoch - self.epoch0}" if pid == self.pid else str(epoch)

    def retried(self, api_key: int, version: int, body: dict, codes: tuple[int, ...]) -> dict:
        """The answer once it is none of ``codes`` (a coordinator loading, a transaction completing)."""
        deadline = time.monotonic() + 30
        while True:
            r = self.c.request(api_key, version, body)
            if r.get("error_code") not in codes:
                return r
            assert time.monotonic() < deadline, r
            time.sleep(0.05)

    def find_coordinator(self, key: str, key_type: int) -> None:
        """Until the coordinator is known (the first FindCoordinator creates Kafka's internal topic)."""
        deadline = time.monotonic() + 30
        while self.c.request(FIND_COORDINATOR, 3, {"key": key, "key_type": key_type})["error_code"] != NONE:
            assert time.monotonic() < deadline
            time.sleep(0.1)

    def init(self) -> tuple:
        self.find_coordinator(self.txn_id, 1)
        concurrent = 0
        while True:
            r = self.retried(INIT_PRODUCER_ID, 5, {"transactional_id": self.txn_id, "transaction_timeout_ms": 60000,
                                                   "producer_id": -1, "producer_epoch": -1},
                             (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR))
            if r["error_code"] != CONCURRENT_TRANSACTIONS:
                break
            concurrent += 1
            time.sleep(0.05)
        if self.pid < 0:
            self.pid, self.epoch0 = r["producer_id"], r["producer_epoch"]
        return ("init", r["error_code"], concurrent > 0, *self.ids(r["producer_id"], r["producer_epoch"]))

    def produce(self, epoch: int, sequence: int, value: bytes, pid: int | None = None) -> int:
        records = encode_batch([Record(timestamp=int(time.time() * 1000), key=None, value=value)],
                               producer_id=self.pid if pid is None else pid, producer_epoch=self.epoch0 + epoch,
                               base_sequence=sequence, is_transactional=True)
        deadline = time.monotonic() + 30
        while True:
            r = self.c.request(PRODUCE, 12, {"transactional_id": self.txn_id, "acks": -1, "timeout_ms": 10000,
                                             "topic_data": [{"name": self.topic, "partition_data": [
                                                 {"index": 0, "records": records}]}]})
            code: int = r["responses"][0]["partition_responses"][0]["error_code"]
            # A new topic's leader may not serve it yet (nothing is appended then): asked again.
            if code not in (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION) or time.monotonic() > deadline:
                return code
            time.sleep(0.1)

    def end(self, epoch: int, commit: bool, pid: int | None = None) -> tuple:
        r = self.c.request(END_TXN, 5, {"transactional_id": self.txn_id, "producer_id": self.pid if pid is None else pid,
                                        "producer_epoch": self.epoch0 + epoch, "committed": commit})
        return (r["error_code"], *self.ids(r["producer_id"], r["producer_epoch"]))

    def describe(self, wait: bool = False) -> tuple:
        """(state, epoch, partitions): once ended when ``wait`` (the markers written)."""
        deadline = time.monotonic() + 30
        while True:
            s = self.c.request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [self.txn_id]})["transaction_states"][0]
            if not wait or s["transaction_state"] in DONE:
                break
            assert time.monotonic() < deadline, s
            time.sleep(0.05)
        # The topic is T; __consumer_offsets has another partition count on each broker: its name counts.
        parts = sorted(f"T-{p}" if t["topic"] == self.topic else t["topic"]
                       for t in s["topics"] for p in t["partitions"])
        return (s["error_code"], s["transaction_state"], self.ids(s["producer_id"], s["producer_epoch"])[1], parts)

    def offsets(self) -> tuple[int, int]:
        """(log end offset, last stable offset) of the topic's partition."""
        return tuple(self.c.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": level, "topics": [
            {"name": self.topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]}
        )["topics"][0]["partitions"][0]["offset"] for level in (0, 1))  # type: ignore[return-value]

    def commit_offset(self, version: int, group: str, epoch: int, topic_id: uuid.UUID, offset: int,
                      generation: int = -1, pid: int | None = None) -> list[int]:
        r = self.c.request(TXN_OFFSET_COMMIT, version, {
            "transactional_id": self.txn_id, "group_id": group, "producer_id": self.pid if pid is None else pid,
            "producer_epoch": self.epoch0 + epoch, "generation_id_or_member_epoch": generation, "member_id": "",
            "group_instance_id": None, "topics": [{"name": self.topic, "topic_id": topic_id, "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        return [p["error_code"] for t in r["topics"] for p in t["partitions"]]

    def committed(self, group: str, expected: int) -> int:
        """The group's committed offset, once it is ``expected`` (the marker applied) or after 10 s."""
        deadline = time.monotonic() + 10
        while True:
            r = self.c.request(OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": [
                {"name": self.topic, "partition_indexes": [0]}]}], "require_stable": True})
            g = r["groups"][0]
            offset: int = g["topics"][0]["partitions"][0]["committed_offset"] if g["topics"] else g["error_code"]
            if offset == expected or time.monotonic() > deadline:
                return offset
            time.sleep(0.05)

    def marker(self, version: int, epoch: int, commit: bool, transaction_version: int) -> int:
        r = self.c.request(WRITE_TXN_MARKERS, version, {"markers": [{
            "producer_id": self.pid, "producer_epoch": self.epoch0 + epoch, "transaction_result": commit,
            "coordinator_epoch": 0, "transaction_version": transaction_version,
            "topics": [{"name": self.topic, "partition_indexes": [0]}]}]})
        return r["markers"][0]["topics"][0]["partitions"][0]["error_code"]


def transcript(target: Target) -> list[Any]:
    out: list[Any] = []
    with WireClient(target.host, target.port) as c:
        topic, topic_id = new_topic(target, c)
        p = Producer(c, unique("tx-v2"), topic)
        group = unique("g-v2")
        p.find_coordinator(group, 0)
        out.append(p.init())
        out.append(("first batch", p.produce(0, 0, b"c0")))
        out.append(("describe", p.describe()))
        out.append(("commit", p.end(0, True)))
        out.append(("ended", p.describe(wait=True)))
        out.append(("commit retried with the epoch before the bump", p.end(0, True)))
        out.append(("abort with the epoch before the bump", p.end(0, False)))
        out.append(("commit with the current epoch, nothing ongoing", p.end(1, True)))
        out.append(("abort with nothing ongoing", p.end(1, False)))
        out.append(("ended", p.describe(wait=True)))
        out.append(("a batch of the committed transaction, late", p.produce(0, 1, b"late")))
        out.append(("a batch at the epoch the empty abort ended", p.produce(1, 0, b"stale")))
        out.append(("next transaction", p.produce(2, 0, b"c1"), p.produce(2, 1, b"c2")))
        out.append(("describe", p.describe()))
        out.append(("abort", p.end(2, False)))
        out.append(("ended", p.describe(wait=True)))
        out.append(("a new epoch's first batch at sequence 5", p.produce(3, 5, b"x")))
        out.append(("describe", p.describe()))
        out.append(("abort", p.end(3, False)))
        out.append(("ended", p.describe(wait=True)))
        out.append(("unknown producer id", p.produce(4, 0, b"x", pid=987_654_321)))
        out.append(("an epoch the coordinator has not given", p.produce(10, 0, b"x")))
        out.append(("EndTxn of another producer id", p.end(4, True, pid=987_654_321)))
        out.append(("EndTxn of an epoch ahead", p.end(10, True)))
        out.append(("TxnOffsetCommit v5, no AddOffsetsToTxn", p.commit_offset(5, group, 4, ZERO_ID, 42)))
        out.append(("describe", p.describe()))
        out.append(("commit", p.end(4, True)))
        out.append(("ended", p.describe(wait=True)))
        out.append(("committed offset", p.committed(group, 42)))
        out.append(("TxnOffsetCommit v6, unknown topic id", p.commit_offset(6, group, 5, uuid.uuid4(), 7)))
        out.append(("TxnOffsetCommit v6", p.commit_offset(6, group, 5, topic_id, 43)))
        stranger = unique("g-none")
        p.find_coordinator(stranger, 0)
        out.append(("TxnOffsetCommit v5, no such group, a generation",
                    p.commit_offset(5, stranger, 5, ZERO_ID, 1, generation=3)))
        out.append(("TxnOffsetCommit v6, no such group, a generation",
                    p.commit_offset(6, stranger, 5, topic_id, 1, generation=3)))
        out.append(("commit", p.end(5, True)))
        out.append(("ended", p.describe(wait=True)))
        out.append(("committed offset", p.committed(group, 43)))
        out.append(("open a transaction", p.produce(6, 0, b"zombie")))
        out.append(("a new incarnation", p.init()))
        out.append(("fenced", p.describe()))
        out.append(("the old incarnation's batch", p.produce(6, 1, b"zombie")))
        out.append(("the old incarnation's commit", p.end(6, True)))
        out.append(("v2 marker at the producer's epoch, nothing open", p.marker(2, 7, True, 2)))
        out.append(("v2 marker at an older epoch", p.marker(2, 6, True, 2)))
        out.append(("v1 marker at the producer's epoch", p.marker(1, 7, False, 0)))
        out.append(("offsets", p.offsets()))
    return out


def test_transactions_v2_answer_as_kafka(targets: dict[str, Target]) -> None:
    results = {name: transcript(targets[name]) for name in TARGETS}
    for kafka_step, odradek_step in zip(results["kafka"], results["odradek"], strict=True):
        assert odradek_step == kafka_step
    steps = {step[0]: step[1:] for step in results["kafka"][:13]}
    # Kafka's rules the transcript rests on (KIP-890 part 2), as Kafka 4.4 answered them.
    assert results["kafka"][0] == ("init", NONE, False, "P", "E+0")
    assert steps["commit"] == ((NONE, "P", "E+1"),)
    assert steps["commit retried with the epoch before the bump"] == ((NONE, "P", "E+1"),)
    assert steps["abort with the epoch before the bump"] == ((INVALID_TXN_STATE, "-", "-"),)
    assert steps["commit with the current epoch, nothing ongoing"] == ((INVALID_TXN_STATE, "-", "-"),)
    assert steps["abort with nothing ongoing"] == ((NONE, "P", "E+2"),)
    assert steps["a batch of the committed transaction, late"] == (INVALID_PRODUCER_EPOCH,)
    later = {step[0]: step[1:] for step in results["kafka"]}
    assert later["TxnOffsetCommit v5, no such group, a generation"] == ([ILLEGAL_GENERATION],)
    assert later["TxnOffsetCommit v6, no such group, a generation"] == ([GROUP_ID_NOT_FOUND],)
    fence = next(step for step in results["kafka"] if step[0] == "a new incarnation")
    assert fence[1] == ("init", NONE, True, "P", "E+8")  # the fencing abort bumped once (E+7), init once more


def state_records(target: Target, txn_id: str) -> list[dict[str, Any]]:
    """The id's __transaction_state values as Kafka 4.4's DumpLogSegments --transaction-log-decoder
    prints them, in log order (timestamps and the producer id itself left out: each broker has its own)."""
    from odradek.broker.coordinator.hashing import partition_for
    from tests.support.java_tools import run_tool

    with WireClient(target.host, target.port) as c:
        md = c.request(METADATA, 12, {"topics": [{"name": "__transaction_state", "topic_id": None}],
                                      "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    partitions = len(md["topics"][0]["partitions"])  # 5 on the shared Kafka, Kafka's 50 on Odradek
    directory = target.broker.data_dir / "logs" / f"__transaction_state-{partition_for(txn_id, partitions)}"
    out = run_tool("kafka-dump-log", ["--files", ",".join(str(f) for f in sorted(directory.glob("*.log"))),
                                      "--print-data-log", "--transaction-log-decoder"]).stdout
    values = []
    for line in out.splitlines():
        if " key: {" in line and " payload: " in line:
            key, payload = line.split(" key: ", 1)[1].split(" payload: ", 1)
            if json.loads(key)["data"]["transactionalId"] == txn_id:
                values.append(json.loads(payload))
    return values


def test_transaction_state_records_as_kafka_writes_them(targets: dict[str, Target]) -> None:
    """A v2 transaction's __transaction_state records - read by Kafka's own decoder - hold what Kafka
    4.4's hold: TransactionLogValue v1 with the client's transaction version (2 once the leader added
    a partition or EndTxn v5 ended it), the previous producer id of every transition, the epoch bumped
    in Prepare*, and the partitions."""
    def scenario(target: Target) -> list[Any]:
        with WireClient(target.host, target.port) as c:
            topic, _ = new_topic(target, c)
            p = Producer(c, unique("tx-v2-log"), topic)
            p.init()
            assert p.produce(0, 0, b"c0") == NONE
            assert p.end(0, True) == (NONE, "P", "E+1")
            p.describe(wait=True)
            assert p.produce(1, 0, b"a0") == NONE
            assert p.end(1, False) == (NONE, "P", "E+2")
            p.describe(wait=True)
            records = state_records(target, p.txn_id)
        out = []
        for r in records:
            v = r["data"]
            out.append((r["version"], v["transactionStatus"], p.ids(v["producerId"], v["producerEpoch"]),
                        p.ids(v.get("previousProducerId", -1), 0)[0], v.get("nextProducerId", -1),
                        v.get("clientTransactionVersion", 0), v["transactionTimeoutMs"],
                        [(t["topic"] == topic, t["partitionIds"]) for t in v["transactionPartitions"] or ()],
                        v["transactionStartTimestampMs"] >= 0))
        return out

    results = {name: scenario(targets[name]) for name in TARGETS}
    assert results["odradek"] == results["kafka"]
    statuses = [r[1] for r in results["kafka"]]
    assert statuses == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit", "Ongoing", "PrepareAbort",
                        "CompleteAbort"], results["kafka"]
    # Version 1 throughout; transaction version 2 from the leader's add; the epoch bumped in Prepare*.
    assert [(r[0], r[2][1], r[5]) for r in results["kafka"]] == [
        ("1", "E+0", 0), ("1", "E+0", 2), ("1", "E+1", 2), ("1", "E+1", 2), ("1", "E+1", 2), ("1", "E+2", 2),
        ("1", "E+2", 2)]


def test_kip890_part1_verification_answers_as_kafka(targets: dict[str, Target]) -> None:
    """Transactions v1 producers (AddPartitionsToTxn from the client; Produce up to v11) get KIP-890
    part 1's defence against hanging transactions as on Kafka 4.4: a transactional batch for a partition
    not in the producer's ongoing transaction - never added, or after the transaction ended - is
    refused before anything is appended, TRANSACTION_ABORTABLE from Produce v11 (an abortable error:
    the client aborts and goes on), INVALID_TXN_STATE before; a batch at an epoch the coordinator has
    not given is refused even where the transaction is open at the current epoch; TxnOffsetCommit
    without AddOffsetsToTxn likewise (v4 TRANSACTION_ABORTABLE, v3 INVALID_TXN_STATE, another epoch
    INVALID_PRODUCER_EPOCH)."""
    def scenario(target: Target) -> list[Any]:
        out: list[Any] = []
        with WireClient(target.host, target.port) as c:
            topic, _ = new_topic(target, c)
            p = Producer(c, unique("tx-v1"), topic)
            group = unique("g-v1")
            p.find_coordinator(group, 0)
            out.append(p.init())

            def produce(version: int, epoch: int, sequence: int, pid: int | None = None) -> int:
                records = encode_batch([Record(timestamp=int(time.time() * 1000), key=None, value=b"v")],
                                       producer_id=p.pid if pid is None else pid,
                                       producer_epoch=p.epoch0 + epoch, base_sequence=sequence, is_transactional=True)
                r = c.request(PRODUCE, version, {"transactional_id": p.txn_id, "acks": -1, "timeout_ms": 10000,
                                                 "topic_data": [{"name": topic, "partition_data": [
                                                     {"index": 0, "records": records}]}]})
                return r["responses"][0]["partition_responses"][0]["error_code"]

            out.append(("not added, v11", produce(11, 0, 0)))
            out.append(("not added, v10", produce(10, 0, 0)))
            out.append(("TxnOffsetCommit v4 without AddOffsetsToTxn", p.commit_offset(4, group, 0, ZERO_ID, 5)))
            out.append(("TxnOffsetCommit v3 without AddOffsetsToTxn", p.commit_offset(3, group, 0, ZERO_ID, 5)))
            out.append(("TxnOffsetCommit v3, an epoch ahead", p.commit_offset(3, group, 2, ZERO_ID, 5)))
            out.append(("TxnOffsetCommit v4, another producer id", p.commit_offset(4, group, 0, ZERO_ID, 5,
                                                                               pid=987_654_321)))
            added = c.request(24, 3, {"v3_and_below_transactional_id": p.txn_id, "v3_and_below_producer_id": p.pid,
                                      "v3_and_below_producer_epoch": p.epoch0,
                                      "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
            out.append(("added", added["results_by_topic_v3_and_below"][0]["results_by_partition"][0]
                        ["partition_error_code"]))
            out.append(("added, v11", produce(11, 0, 0)))
            out.append(("an epoch ahead, v11", produce(11, 3, 0)))
            out.append(("another producer id, v11", produce(11, 0, 0, pid=987_654_321)))
            ended = c.request(END_TXN, 4, {"transactional_id": p.txn_id, "producer_id": p.pid,
                                           "producer_epoch": p.epoch0, "committed": True})
            out.append(("commit (EndTxn v4: no bump)", ended["error_code"], p.describe(wait=True)))
            out.append(("after the commit, same epoch, v11", produce(11, 0, 1)))
            out.append(("after the commit, same epoch, v9", produce(9, 0, 1)))
            out.append(("offsets", p.offsets()))
        return out

    results = {name: scenario(targets[name]) for name in TARGETS}
    assert results["odradek"] == results["kafka"]
    steps = {step[0]: step[1:] for step in results["kafka"]}
    assert steps["not added, v11"] == (TRANSACTION_ABORTABLE,) and steps["not added, v10"] == (INVALID_TXN_STATE,)
    assert steps["TxnOffsetCommit v4 without AddOffsetsToTxn"] == ([TRANSACTION_ABORTABLE],)
    assert steps["TxnOffsetCommit v3, an epoch ahead"] == ([INVALID_PRODUCER_EPOCH],)
    assert steps["after the commit, same epoch, v11"] == (TRANSACTION_ABORTABLE,)
    # A batch at an epoch the coordinator has not given, while the transaction is open on the partition
    # at the current one, is verified too - and refused: appended, it would hold the LSO for good.
    assert steps["an epoch ahead, v11"] == (INVALID_PRODUCER_EPOCH,)
    assert steps["offsets"] == ((2, 2),)
