"""``__share_group_state`` over time (issue 30): the share coordinator writes ShareUpdates and a
ShareSnapshot every ``share.coordinator.snapshot.update.records.per.snapshot`` updates, and prunes
the topic itself every ``share.coordinator.state.topic.prune.interval.ms`` below the latest
snapshot of its share-partitions; a broker killed after the prune rebuilds the same state from
what is left.

Expected values are Kafka 4.4's: ShareCoordinatorShard.generateShareStateRecord (a snapshot first,
then updates; a snapshot again once the count of updates since the last one reached the limit),
ShareCoordinatorOffsetsManager / ShareCoordinatorService.performRecordPruning (DeleteRecords below
the oldest latest snapshot: with one share-partition, its latest snapshot's offset), and the
share-partition's rules after a restart (acknowledged records never return, released ones return
with their delivery count kept)."""

from __future__ import annotations

import re
import time

import pytest

from odradek.protocol.errors import ErrorCode
from tests.integration.test_share_fetch_wire import (
    ACCEPT,
    RELEASE,
    acquired,
    fetch_topics,
    produce,
    share_fetch,
)
from tests.integration.test_share_state_durable import (
    fetch_until_acquired,
    rejoined,
    share_partition_started,
    start_offset,
)
from tests.support.java_tools import run_tool
from tests.support.wire import WireClient, create_topic

pytestmark = pytest.mark.timeout(180)

PER_SNAPSHOT = 4
OVERRIDES = {
    "share.coordinator.state.topic.num.partitions": "1",  # every share-partition's state in partition 0
    "share.coordinator.snapshot.update.records.per.snapshot": str(PER_SNAPSHOT),
    "share.coordinator.state.topic.prune.interval.ms": "1000",
    # The log start offset survives a kill -9 only once checkpointed: soon, so the restart loads
    # from the pruned log.
    "log.flush.offset.checkpoint.interval.ms": "200",  # (Odradek checkpoints log start offsets with these)
}
RECORD = re.compile(r"\| offset: (\d+) .* key: \{\"type\":\"(\d)\"")


def earliest(c: WireClient, topic: str = "__share_group_state") -> int:
    resp = c.request(2, 5, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]})
    p = resp["topics"][0]["partitions"][0]
    assert p["error_code"] == ErrorCode.NONE, p
    return int(p["offset"])


def state_records(data_dir) -> list[tuple[int, str]]:
    """(offset, "S" for a ShareSnapshot or "U" for a ShareUpdate) of every record in
    __share_group_state-0's first segment, read by Kafka 4.4's own decoder."""
    segment = data_dir / "logs" / "__share_group_state-0" / f"{0:020d}.log"
    out = run_tool("kafka-dump-log", ["--files", str(segment), "--print-data-log",
                                      "--share-group-state-decoder"]).stdout
    found = [(int(m.group(1)), {"0": "S", "1": "U"}[m.group(2)]) for m in map(RECORD.search, out.splitlines()) if m]
    assert found, out
    return found


def test_updates_snapshots_prune_and_replay_after_kill_9(broker_factory) -> None:
    broker = broker_factory(OVERRIDES)
    with WireClient(broker.host, broker.port) as c:
        topic_id = share_partition_started(c)
        for _ in range(20):
            produce(c, "sq", 0, 1)  # 20 one-record batches, 0-19
        r = share_fetch(c, member_id="m", topics=fetch_topics(topic_id, [0]))
        assert acquired(r) == {0: [(0, 19, 1)]}, r
        epoch = 1
        # Many small acknowledgements, each one write of the share-partition's state.
        for offset in range(16):
            r = share_fetch(c, member_id="m", share_session_epoch=epoch,
                            topics=fetch_topics(topic_id, [0], {0: [(offset, offset, [ACCEPT])]}))
            assert r["responses"][0]["partitions"][0]["acknowledge_error_code"] == 0, r
            epoch += 1
        # 16-19 released without a new acquisition (ShareAcknowledge): written Available, delivered once.
        r = c.request(79, 1, {"group_id": "sg", "member_id": "m", "share_session_epoch": epoch,
                              "topics": fetch_topics(topic_id, [0], {0: [(16, 19, [RELEASE])]})})
        assert r["error_code"] == 0 and r["responses"][0]["partitions"][0]["error_code"] == 0, r
        assert start_offset(c) == 16

        # Updates, and a snapshot each time PER_SNAPSHOT updates followed the last one.
        deadline, seen = time.monotonic() + 15, -1
        while True:  # until every write is in the log: the count stays for a second
            written = state_records(broker.data_dir)
            kinds = "".join(k for _, k in written)
            if len(kinds) == seen or time.monotonic() > deadline:
                break
            seen = len(kinds)
            time.sleep(1)
        assert len(kinds) >= 18, kinds  # the initialization, 16 acceptances, the release
        expected = "S" + ("U" * PER_SNAPSHOT + "S") * ((len(kinds) - 1) // (PER_SNAPSHOT + 1))
        expected += "U" * (len(kinds) - len(expected))
        assert kinds == expected, kinds
        assert kinds.count("S") >= 3, kinds

        # The prune moves the log start offset to the latest snapshot: nothing before it is needed.
        last_snapshot = max(offset for offset, kind in written if kind == "S")
        deadline = time.monotonic() + 15
        while earliest(c) != last_snapshot:
            assert time.monotonic() < deadline, f"log start {earliest(c)}, the latest snapshot at {last_snapshot}"
            time.sleep(0.2)
        time.sleep(1)  # the log start offset checkpointed
        broker.kill()

    broker = broker_factory(OVERRIDES, data_dir=broker.data_dir)
    with WireClient(broker.host, broker.port) as c:
        rejoined(c)
        assert earliest(c) == last_snapshot  # the restart loaded the pruned log
        produce(c, "sq", 0, 3)  # 20-22
        # 0-15 never again; 16-19 with their delivery count kept (1, so now 2); 20-22 once.
        assert fetch_until_acquired(c, topic_id, "m2") == {0: [(16, 19, 2), (20, 22, 1)]}
        assert start_offset(c) == 16


def test_an_idle_share_partition_is_snapshotted_again_and_stops_pinning_the_log(broker_factory) -> None:
    """Kafka 4.4's snapshotColdPartitions: the prune offset is the oldest latest snapshot, so a
    share-partition nobody writes holds the log back until its cold snapshot; once every one is
    cold-snapshotted nothing more is written."""
    from tests.integration.test_share_coordinator_wire import (
        INITIALIZE,
        body,
        one,
        read,
        state_of,
        wait_for_share_coordinator,
        write,
    )

    broker = broker_factory({"share.coordinator.state.topic.num.partitions": "1",
                             "share.coordinator.snapshot.update.records.per.snapshot": "2",
                             "share.coordinator.state.topic.prune.interval.ms": "500",
                             "share.coordinator.cold.partition.snapshot.interval.ms": "4000"})
    with WireClient(broker.host, broker.port) as c:
        topic_id = create_topic(c, "sq", 2)
        wait_for_share_coordinator(c, "idle:AAAAAAAAAAAAAAAAAAAAAA:0")
        # 0: the idle share-partition's snapshot; 1: the busy one's, then U U S U U S at 2-7.
        assert one(c.request(INITIALIZE, 0, body(topic_id, 0, "idle", state_epoch=0, start_offset=0)))["error_code"] == 0
        assert one(c.request(INITIALIZE, 0, body(topic_id, 1, state_epoch=0, start_offset=0)))["error_code"] == 0
        for o in range(6):
            assert write(c, topic_id, [(o, o, 2, 1)], partition=1)["error_code"] == 0
        time.sleep(1.5)  # three prune rounds: the idle snapshot at offset 0 holds everything
        assert earliest(c) == 0
        # Both are snapshotted again once their last snapshot is 4 s old; the log start follows.
        deadline = time.monotonic() + 20
        while earliest(c) < 8:
            assert time.monotonic() < deadline, f"log start {earliest(c)}"
            time.sleep(0.2)
        assert state_of(read(c, topic_id, partition=1)) == (0, 0, [(o, o, 2, 1) for o in range(6)])
        assert state_of(one(c.request(84, 0, body(topic_id, 0, "idle", leader_epoch=0)))) == (0, 0, [])
    written = state_records(broker.data_dir)
    cold = [offset for offset, kind in written if kind == "S" and offset >= 8]
    assert len(cold) >= 2, written
    # Every one cold-snapshotted (create != write timestamp): the next rounds write nothing.
    end = written[-1][0]
    time.sleep(9)
    assert state_records(broker.data_dir)[-1][0] == end
