"""The transaction APIs on the wire, with Kafka's errors for bad input (nothing appended; a
client's WriteTxnMarkers is validated as Kafka's without an authorizer does), the
__transaction_state records as Kafka's tools read them, and a broker restart in the middle of a
prepared commit (the coordinator completes it when it loads the partition)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from odradek.broker.txn.records import TxnState, decode_value, key_bytes, value_bytes
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import Record, encode_batch, iter_batches
from odradek.storage.log import Log
from odradek.storage.log_config import LogConfig
from odradek.storage.producer_state import ProducerStateManager
from tests.support.wire import WireClient, create_topic

FIND_COORDINATOR, INIT_PID, ADD_PARTITIONS, END_TXN, WRITE_MARKERS, TXN_OFFSET_COMMIT = 10, 22, 24, 26, 27, 28
PRODUCE, FETCH, LIST_OFFSETS = 0, 1, 2
READ_COMMITTED = 1


def wait_coordinator(c: WireClient, txn_id: str) -> None:
    for _ in range(200):
        if c.request(FIND_COORDINATOR, 3, {"key": txn_id, "key_type": 1})["error_code"] == 0:
            return
        time.sleep(0.05)
    raise AssertionError("no transaction coordinator")


def init(c: WireClient, txn_id: str, timeout_ms: int = 60000, version: int = 4) -> dict:
    for _ in range(200):
        r = c.request(INIT_PID, version, {"transactional_id": txn_id, "transaction_timeout_ms": timeout_ms,
                                          "producer_id": -1, "producer_epoch": -1})
        if r["error_code"] not in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                   ErrorCode.NOT_COORDINATOR):
            return r
        time.sleep(0.05)
    raise AssertionError(r)


def add_partitions(c: WireClient, txn_id: str, pid: int, epoch: int, topic: str, parts: list[int],
                   version: int = 3) -> list[int]:
    r = c.request(ADD_PARTITIONS, version, {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                                            "v3_and_below_producer_epoch": epoch,
                                            "v3_and_below_topics": [{"name": topic, "partitions": parts}]})
    return [p["partition_error_code"] for t in r["results_by_topic_v3_and_below"] for p in t["results_by_partition"]]


def end_txn(c: WireClient, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    return c.request(END_TXN, version, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                        "committed": commit})["error_code"]


def produce_txn(c: WireClient, txn_id: str | None, topic: str, pid: int, epoch: int, seq: int,
                *values: bytes) -> int:
    records = encode_batch([Record(timestamp=int(time.time() * 1000), key=None, value=v) for v in values],
                           producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    r = c.request(PRODUCE, 9, {"transactional_id": txn_id, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return r["responses"][0]["partition_responses"][0]["error_code"]


def log_end(c: WireClient, topic: str) -> int:
    r = c.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    return r["topics"][0]["partitions"][0]["offset"]


def lso(c: WireClient, topic: str) -> int:
    r = c.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": READ_COMMITTED, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    return r["topics"][0]["partitions"][0]["offset"]


def new_topic(c: WireClient) -> str:
    name = f"txw-{uuid.uuid4().hex[:8]}"
    create_topic(c, name, 1)
    return name


def test_bad_input_gets_kafkas_errors_and_appends_nothing(broker) -> None:
    with WireClient(broker.host, broker.port) as c:
        topic = new_topic(c)
        txn_id = "tx-bad"
        wait_coordinator(c, txn_id)
        assert init(c, txn_id, timeout_ms=16 * 60 * 1000)["error_code"] == ErrorCode.INVALID_TRANSACTION_TIMEOUT
        assert init(c, "")["error_code"] == ErrorCode.INVALID_REQUEST
        r = init(c, txn_id)
        assert r["error_code"] == 0 and r["producer_epoch"] == 0
        pid, epoch = r["producer_id"], r["producer_epoch"]
        # EndTxn without a transaction
        assert end_txn(c, txn_id, pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
        # TxnOffsetCommit before AddOffsetsToTxn: the offsets partition is not in a transaction
        for _ in range(200):
            if c.request(FIND_COORDINATOR, 3, {"key": "g-bad", "key_type": 0})["error_code"] == 0:
                break
            time.sleep(0.05)
        r = c.request(TXN_OFFSET_COMMIT, 3, {
            "transactional_id": txn_id, "group_id": "g-bad", "producer_id": pid, "producer_epoch": epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
        assert r["topics"][0]["partitions"][0]["error_code"] == ErrorCode.INVALID_TXN_STATE
        r = c.request(9, 7, {"group_id": "g-bad", "topics": [{"name": topic, "partition_indexes": [0]}],
                             "require_stable": True})
        assert r["topics"][0]["partitions"][0]["committed_offset"] == -1
        # a transactional batch for a partition not added
        assert produce_txn(c, txn_id, topic, pid, epoch, 0, b"x") == ErrorCode.INVALID_TXN_STATE
        # a transactional batch without a transactional id
        assert produce_txn(c, None, topic, pid, epoch, 0, b"x") == ErrorCode.INVALID_TXN_STATE
        assert log_end(c, topic) == 0
        # unknown transactional id / producer id; wrong epoch (KIP-588 by version); unknown topic
        assert add_partitions(c, "tx-nobody", pid, epoch, topic, [0]) == [ErrorCode.INVALID_PRODUCER_ID_MAPPING]
        assert add_partitions(c, txn_id, pid + 1, epoch, topic, [0]) == [ErrorCode.INVALID_PRODUCER_ID_MAPPING]
        assert add_partitions(c, txn_id, pid, epoch + 1, topic, [0]) == [ErrorCode.PRODUCER_FENCED]
        assert add_partitions(c, txn_id, pid, epoch + 1, topic, [0], version=1) == [ErrorCode.INVALID_PRODUCER_EPOCH]
        assert add_partitions(c, txn_id, pid, epoch, "no-such-topic", [0]) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        # a proper transaction, then a fenced epoch's EndTxn and produce
        assert add_partitions(c, txn_id, pid, epoch, topic, [0]) == [0]
        assert produce_txn(c, txn_id, topic, pid, epoch, 0, b"a", b"b") == 0
        assert lso(c, topic) == 0 and log_end(c, topic) == 2
        assert end_txn(c, txn_id, pid, epoch - 1, True) == ErrorCode.PRODUCER_FENCED
        assert end_txn(c, txn_id, pid, epoch - 1, True, version=1) == ErrorCode.INVALID_PRODUCER_EPOCH
        assert end_txn(c, txn_id, pid, epoch, False) == 0
        for _ in range(100):  # the markers follow the answer
            if lso(c, topic) == 3:
                break
            time.sleep(0.05)
        assert lso(c, topic) == log_end(c, topic) == 3  # 2 records + the ABORT marker
        assert end_txn(c, txn_id, pid, epoch, False) == 0  # a retry of the finished abort
        assert end_txn(c, txn_id, pid, epoch, True) == ErrorCode.INVALID_TXN_STATE
        # A new incarnation (epoch 1) opens a transaction on the partition.
        r = init(c, txn_id)
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert epoch == 1 and add_partitions(c, txn_id, pid, epoch, topic, [0]) == [0]
        assert produce_txn(c, txn_id, topic, pid, epoch, 0, b"c") == 0 and log_end(c, topic) == 4
    # WriteTxnMarkers from a client (Kafka without an authorizer takes them, as the admin client's
    # abortTransaction needs): the markers are validated, and a bad one appends nothing.
    with WireClient(broker.host, broker.port, client_id="not-a-broker") as c:
        def marker(producer_epoch: int, coordinator_epoch: int, name: str = topic) -> int:
            r = c.request(WRITE_MARKERS, 1, {"markers": [{
                "producer_id": pid, "producer_epoch": producer_epoch, "transaction_result": True,
                "coordinator_epoch": coordinator_epoch, "topics": [{"name": name, "partition_indexes": [0]}]}]})
            return r["markers"][0]["topics"][0]["partitions"][0]["error_code"]

        assert marker(epoch - 1, 0) == ErrorCode.INVALID_PRODUCER_EPOCH  # the producer's epoch is 1 now
        assert marker(epoch, -1) == ErrorCode.TRANSACTION_COORDINATOR_FENCED  # older than the ABORT's
        assert marker(epoch, 0, "no-such-topic") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert log_end(c, topic) == 4 and lso(c, topic) == 3  # nothing appended, still open
        # AddPartitionsToTxn v4+ (broker to coordinator) from a client: the same
        r = c.request(ADD_PARTITIONS, 4, {"transactions": [{
            "transactional_id": "tx-bad", "producer_id": pid, "producer_epoch": epoch, "verify_only": False,
            "topics": [{"name": topic, "partitions": [0]}]}]})
        assert r["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED and not r["results_by_transaction"]


def _state_log(data_dir: Path, partition: int) -> Log:
    d = data_dir / "logs" / f"__transaction_state-{partition}"
    return Log.open(d, LogConfig(), producer_state=ProducerStateManager(d), recovery_point=0)


def test_restart_in_the_middle_of_a_prepared_commit_completes_it(broker) -> None:
    from odradek.broker.coordinator.hashing import partition_for

    txn_id = "tx-restart"
    with WireClient(broker.host, broker.port) as c:
        topic = new_topic(c)
        wait_coordinator(c, txn_id)
        r = init(c, txn_id)
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert add_partitions(c, txn_id, pid, epoch, topic, [0]) == [0]
        assert produce_txn(c, txn_id, topic, pid, epoch, 0, b"one", b"two") == 0
        assert lso(c, topic) == 0
    assert broker.stop() == 0
    # What a coordinator that crashed after writing PrepareCommit (before any marker) leaves.
    state = _state_log(broker.data_dir, partition_for(txn_id, 50))
    last = None
    for batch in iter_batches(state.read(0, 1 << 20).read_bytes()):
        for rec in batch.records:
            if rec.key == key_bytes(txn_id):
                last = decode_value(rec.value)
    assert last is not None and last.state is TxnState.ONGOING and last.partitions == {topic: {0}}
    last.state = TxnState.PREPARE_COMMIT
    state.append(encode_batch([Record(timestamp=int(time.time() * 1000), key=key_bytes(txn_id),
                                      value=value_bytes(last))]), leader_epoch=0)
    state.close()
    broker.start()
    with WireClient(broker.host, broker.port) as c:
        deadline = time.monotonic() + 20
        while lso(c, topic) != 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lso(c, topic) == log_end(c, topic) == 3  # the COMMIT marker
        r = c.request(FETCH, 11, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                  "isolation_level": READ_COMMITTED, "session_id": 0, "session_epoch": -1,
                                  "topics": [{"topic": topic, "partitions": [
                                      {"partition": 0, "fetch_offset": 0, "current_leader_epoch": -1,
                                       "partition_max_bytes": 1 << 20, "log_start_offset": -1}]}],
                                  "forgotten_topics_data": [], "rack_id": ""})
        part = r["responses"][0]["partitions"][0]
        assert not part["aborted_transactions"]
        values = [rec.value for b in iter_batches(bytes(part["records"])) if not b.is_control for rec in b.records]
        assert values == [b"one", b"two"]
        # Completed: the id starts over with the next epoch.
        r = init(c, txn_id)
        assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (0, pid, epoch + 1)


def test_kafkas_dump_log_segments_reads_the_transaction_state_log(broker) -> None:
    """Kafka's DumpLogSegments --transaction-log-decoder reads every state record we write."""
    from odradek.broker.coordinator.hashing import partition_for
    from tests.support.java_tools import run_tool

    txn_id = "tx-dump"
    with WireClient(broker.host, broker.port) as c:
        topic = new_topic(c)
        wait_coordinator(c, txn_id)
        pid = init(c, txn_id)["producer_id"]
        assert add_partitions(c, txn_id, pid, 0, topic, [0]) == [0]
        assert produce_txn(c, txn_id, topic, pid, 0, 0, b"x") == 0
        assert end_txn(c, txn_id, pid, 0, True) == 0
        deadline = time.monotonic() + 10
        while lso(c, topic) != 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    assert broker.stop() == 0
    segment = broker.data_dir / "logs" / f"__transaction_state-{partition_for(txn_id, 50)}" / f"{0:020d}.log"
    out = run_tool("kafka-dump-log",
                   ["--files", str(segment), "--print-data-log", "--transaction-log-decoder"]).stdout
    # Kafka 4.x's decoder prints each record's key and value as JSON ("key: {...} payload: {...}");
    # the SWITCHED/MIGRATED markers (broker/coordinator/rehash.py) are records it skips.
    values = []
    for line in out.splitlines():
        if " key: {" in line and " payload: " in line:
            key, payload = line.split(" key: ", 1)[1].split(" payload: ", 1)
            if json.loads(key)["data"]["transactionalId"] == txn_id:
                values.append(json.loads(payload)["data"])
    assert [v["transactionStatus"] for v in values] == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"], \
        out[-3000:]
    assert all((v["producerId"], v["producerEpoch"], v["transactionTimeoutMs"]) == (pid, 0, 60000) for v in values)
    assert [v["transactionPartitions"] for v in values] == [
        None, [{"topic": topic, "partitionIds": [0]}], [{"topic": topic, "partitionIds": [0]}], []]


def test_a_transaction_open_across_a_restart_is_aborted_at_its_timeout(broker_factory) -> None:
    """The reloaded coordinator knows when the transaction started: past its timeout it aborts it
    (ABORT marker with a bumped epoch; the LSO moves past it, the old producer is fenced)."""
    b = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    txn_id = "tx-expire"
    with WireClient(b.host, b.port) as c:
        topic = new_topic(c)
        wait_coordinator(c, txn_id)
        r = init(c, txn_id, timeout_ms=3000)
        pid, epoch = r["producer_id"], r["producer_epoch"]
        assert add_partitions(c, txn_id, pid, epoch, topic, [0]) == [0]
        assert produce_txn(c, txn_id, topic, pid, epoch, 0, b"open") == 0
    assert b.stop() == 0
    b.start()
    with WireClient(b.host, b.port) as c:
        deadline = time.monotonic() + 20
        while lso(c, topic) != 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lso(c, topic) == log_end(c, topic) == 2  # the ABORT marker
        assert end_txn(c, txn_id, pid, epoch, True) == ErrorCode.PRODUCER_FENCED
        r = init(c, txn_id)
        assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (0, pid, epoch + 2)
