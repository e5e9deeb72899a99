"""Groups whose __consumer_offsets partition changed when the partition rule was fixed: their state,
written where the previous releases put it, is taken over by the partition Kafka's rule names
(broker/coordinator/rehash.py), on real log files.

The "previous release" records are written as that release wrote them (the same Kafka record
formats, on ``legacy_partition_for``'s partition); the expected values are what those records
say. With 3 partitions, 0 and 2 are twins (ids move between them) and 1 is its own.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from group_harness import Clock, Node, started

from odradek.broker.coordinator.hashing import legacy_partition_for, partition_for
from odradek.broker.coordinator.rehash import MIGRATED_KEY, SWITCHED_KEY
from odradek.broker.group import consumer_group_records as CR
from odradek.broker.group import records as R
from odradek.broker.group.classic_group import GroupState
from odradek.broker.group.context import OFFSETS_TOPIC
from odradek.controller import metadata_format
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.protocol.records import Record, encode_batch, iter_batches

pytestmark = pytest.mark.timeout(20)

N = 3
MOVED_TO_0 = "grp-11"  # old rule: partition 2, Kafka's: 0
MOVED_TO_2 = "grp-12"  # old rule: partition 0, Kafka's: 2
KIP848_MOVED_TO_0 = "grp-14"  # a KIP-848 consumer group; old rule: partition 2, Kafka's: 0
STAYS = "grp-1"  # 0 under both


def test_the_ids_are_what_the_tests_say() -> None:
    assert (legacy_partition_for(MOVED_TO_0, N), partition_for(MOVED_TO_0, N)) == (2, 0)
    assert (legacy_partition_for(MOVED_TO_2, N), partition_for(MOVED_TO_2, N)) == (0, 2)
    assert (legacy_partition_for(KIP848_MOVED_TO_0, N), partition_for(KIP848_MOVED_TO_0, N)) == (2, 0)
    assert (legacy_partition_for(STAYS, N), partition_for(STAYS, N)) == (0, 0)


def om(offset: int, metadata: str = "", ts: int = 1_000) -> bytes:
    return R.offset_commit_value(R.OffsetAndMetadata(offset, 3, metadata, ts))


def write(node: Node, partition: int, records: list[tuple[bytes, bytes | None]], producer: tuple[int, int] | None = None,
          ) -> None:
    """Append one batch as the previous release's coordinator did (a transactional one for a producer)."""
    batch = [Record(timestamp=1_000, key=k, value=v) for k, v in records]
    if producer is None:
        data = encode_batch(batch)
    else:
        data = encode_batch(batch, producer_id=producer[0], producer_epoch=producer[1], base_sequence=0,
                            is_transactional=True)
    node.replica_manager.logs[(OFFSETS_TOPIC, partition)].append(data, leader_epoch=0)


def end_txn(node: Node, partition: int, producer: tuple[int, int], commit: bool) -> None:
    node.replica_manager.logs[(OFFSETS_TOPIC, partition)].append_end_txn_marker(
        producer[0], producer[1], 0, commit, leader_epoch=0)


def records(node: Node, partition: int) -> list[tuple[bytes | None, bytes | None]]:
    lg = node.replica_manager.logs[(OFFSETS_TOPIC, partition)]
    out: list[tuple[bytes | None, bytes | None]] = []
    offset = 0
    while offset < lg.log_end_offset:
        for batch in iter_batches(lg.read(offset, 1 << 20).read_bytes()):
            if not batch.is_control:
                out += [(r.key, r.value) for r in batch.records]
            offset = batch.next_offset
    return out


def ends(node: Node) -> list[int]:
    return [node.replica_manager.logs[(OFFSETS_TOPIC, p)].log_end_offset for p in range(N)]


def offsets_of(c, group: str) -> dict[tuple[str, int], tuple[int, str]]:  # type: ignore[no-untyped-def]
    return {(t, p): (m.committed_offset, m.metadata) for t, parts in c.fetch_offsets(group, None)
            for p, m in parts if m is not None}


EMPTY_CLASSIC_GROUP = {"protocol_type": "consumer", "generation": 4, "protocol": "range", "leader": None,
                       "current_state_timestamp": 900, "members": []}


def write_previous_release_state(node: Node) -> None:
    # MOVED_TO_0 on partition 2: an Empty classic group (generation 4) with two offsets, one overwritten
    # later and one deleted; an ordinary commit, and a committed transaction's offset for another partition.
    write(node, 2, [(R.group_metadata_key(MOVED_TO_0), R.group_metadata_value(EMPTY_CLASSIC_GROUP)),
                    (R.offset_commit_key(MOVED_TO_0, "t", 0), om(5, "old")),
                    (R.offset_commit_key(MOVED_TO_0, "t", 1), om(7, "gone"))])
    write(node, 2, [(R.offset_commit_key(MOVED_TO_0, "t", 0), om(50, "newest")),
                    (R.offset_commit_key(MOVED_TO_0, "t", 1), None)])
    write(node, 2, [(R.offset_commit_key(MOVED_TO_0, "u", 0), om(70, "txn"))], producer=(900, 0))
    end_txn(node, 2, (900, 0), commit=True)
    write(node, 2, [(R.offset_commit_key(MOVED_TO_0, "u", 0), om(99, "aborted"))], producer=(901, 0))
    end_txn(node, 2, (901, 0), commit=False)
    # KIP848_MOVED_TO_0 on partition 2: an Empty KIP-848 group at epoch 5 (its member left), and an offset.
    write(node, 2, [CR.group_epoch_record(KIP848_MOVED_TO_0, 5).encode(),
                    CR.target_assignment_epoch_record(KIP848_MOVED_TO_0, 5).encode(),
                    (R.offset_commit_key(KIP848_MOVED_TO_0, "t", 1), om(11, "cg"))])
    # MOVED_TO_2 on partition 0 (a "simple" group: offsets only), next to STAYS, which does not move.
    write(node, 0, [(R.offset_commit_key(MOVED_TO_2, "t", 2), om(20, "b")),
                    (R.offset_commit_key(STAYS, "t", 3), om(30, "s"))])


async def test_moved_groups_are_found_on_their_new_partition_and_gone_from_the_old(node: Node) -> None:
    write_previous_release_state(node)
    c = await started(node)
    assert offsets_of(c, MOVED_TO_0) == {("t", 0): (50, "newest"), ("u", 0): (70, "txn")}
    group = c.groups[MOVED_TO_0]
    assert (group.partition, group.state, group.protocol_type, group.generation_id) == (0, GroupState.EMPTY,
                                                                                     "consumer", 4)
    assert offsets_of(c, MOVED_TO_2) == {("t", 2): (20, "b")}
    assert c.groups[MOVED_TO_2].partition == 2
    assert offsets_of(c, STAYS) == {("t", 3): (30, "s")}
    cgroup = c.consumer.groups[KIP848_MOVED_TO_0]
    assert (cgroup.partition, cgroup.group_epoch, cgroup.assignment_epoch, cgroup.members) == (0, 5, 5, {})
    assert offsets_of(c, KIP848_MOVED_TO_0) == {("t", 1): (11, "cg")}

    # In the logs: the new partitions hold the moved state and their MIGRATED marker; the old ones
    # tombstones for every live record they had of a moved group, and their SWITCHED marker.
    new0, old2 = records(node, 0), records(node, 2)
    for recs in (new0, old2):  # twins: each took over the other's moved groups
        keys = [k for k, _ in recs]
        assert keys.count(SWITCHED_KEY) == 1 and keys.count(MIGRATED_KEY) == 1
    copied = {R.decode_key(k): v for k, v in records(node, 0) if k not in (SWITCHED_KEY, MIGRATED_KEY)
              and R.key_group_id(k) == MOVED_TO_0}
    assert copied == {R.GroupKey(MOVED_TO_0): R.group_metadata_value(EMPTY_CLASSIC_GROUP),
                      R.OffsetKey(MOVED_TO_0, "t", 0): om(50, "newest"), R.OffsetKey(MOVED_TO_0, "u", 0): om(70, "txn")}
    tombstoned = {R.decode_key(k) for k, v in old2 if v is None and k not in (SWITCHED_KEY, MIGRATED_KEY)}
    assert tombstoned >= {R.GroupKey(MOVED_TO_0), R.OffsetKey(MOVED_TO_0, "t", 0), R.OffsetKey(MOVED_TO_0, "u", 0)}
    assert (R.offset_commit_key(MOVED_TO_2, "t", 2), None) in new0

    # A restart reads it all back from the new partitions and writes nothing.
    before = ends(node)
    await c.shutdown()
    again = await started(node)
    assert ends(node) == before
    assert offsets_of(again, MOVED_TO_0) == {("t", 0): (50, "newest"), ("u", 0): (70, "txn")}
    assert offsets_of(again, MOVED_TO_2) == {("t", 2): (20, "b")}
    assert offsets_of(again, STAYS) == {("t", 3): (30, "s")}
    assert again.consumer.groups[KIP848_MOVED_TO_0].group_epoch == 5
    assert offsets_of(again, KIP848_MOVED_TO_0) == {("t", 1): (11, "cg")}
    await again.shutdown()


async def test_a_moved_group_deleted_after_the_upgrade_stays_deleted(node: Node) -> None:
    write_previous_release_state(node)
    c = await started(node)
    assert await c.delete_groups([MOVED_TO_0]) == {MOVED_TO_0: ErrorCode.NONE}
    await c.shutdown()
    again = await started(node)
    assert offsets_of(again, MOVED_TO_0) == {} and MOVED_TO_0 not in again.groups
    await again.shutdown()


async def test_a_moved_group_waits_for_an_open_transaction_on_its_old_partition(node: Node, clock: Clock) -> None:
    write(node, 2, [(R.offset_commit_key(MOVED_TO_0, "t", 0), om(5, "before"))])
    write(node, 2, [(R.offset_commit_key(MOVED_TO_0, "t", 0), om(6, "in txn"))], producer=(902, 0))
    c = await started_without_waiting(node)
    await asyncio.sleep(0.2)
    # Its state cannot be complete while the transaction may still commit: LOAD_IN_PROGRESS
    # (retriable) for the moved group only; the partition's other groups are served.
    with pytest.raises(KafkaApiError) as err:
        c.fetch_offsets(MOVED_TO_0, None)
    assert err.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert await c.commit_offsets(STAYS, "", None, -1, 8, -1, [("t", 3, 31, -1, "", -1)]) == [ErrorCode.NONE]
    end_txn(node, 2, (902, 0), commit=True)  # the transaction's marker lands on the old partition
    deadline = time.monotonic() + 10
    while c.migrations.busy and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert offsets_of(c, MOVED_TO_0) == {("t", 0): (6, "in txn")}
    await c.shutdown()


async def started_without_waiting(node: Node):  # type: ignore[no-untyped-def]
    """A coordinator whose partitions are active, its migrations possibly still waiting."""
    from odradek.broker.coordinator.partition_writer import ReplicaManagerWriter
    from odradek.broker.group.context import GroupConfig
    from odradek.broker.group.coordinator import GroupCoordinator

    c = GroupCoordinator(GroupConfig.from_broker_config(node.config), ReplicaManagerWriter(node.replica_manager),
                         node.timer, node.metadata, node.node_id)
    await c.start()
    for _ in range(100):
        if len(c.runtime.active_partitions()) == N:
            return c
        await asyncio.sleep(0)
    raise AssertionError("not loaded")


def marker_partitions(node: Node) -> list[int]:
    return [p for p in range(N) if any(k in (SWITCHED_KEY, MIGRATED_KEY) for k, _ in records(node, p))]


async def test_below_the_migrations_level_groups_stay_where_0_1_0_puts_them_until_the_level_rises(
        node: Node) -> None:
    """At metadata format level 1 (a rolling upgrade from 0.1.0 not finished) every group is routed,
    loaded and written where 0.1.0 puts it, as the cluster's old brokers do; nothing is set aside, no
    marker is written. When the level reaches 2 every partition loads again (retriable errors
    meanwhile) and the moved groups' state, including what was committed at level 1, moves."""
    node.metadata.image.features[metadata_format.FEATURE] = 1
    write_previous_release_state(node)
    c = await started(node)
    assert [c.partition_for(g) for g in (MOVED_TO_0, MOVED_TO_2, STAYS)] == [2, 0, 0]
    assert offsets_of(c, MOVED_TO_0) == {("t", 0): (50, "newest"), ("u", 0): (70, "txn")}
    assert c.groups[MOVED_TO_0].partition == 2
    assert c.consumer.groups[KIP848_MOVED_TO_0].partition == 2
    assert offsets_of(c, MOVED_TO_2) == {("t", 2): (20, "b")}
    # A commit at level 1 lands where 0.1.0 would write it.
    assert await c.commit_offsets(MOVED_TO_0, "", None, -1, 8, -1, [("t", 0, 60, -1, "level 1", -1)]) == [
        ErrorCode.NONE]
    assert R.decode_key(records(node, 2)[-1][0]) == R.OffsetKey(MOVED_TO_0, "t", 0)
    # Loading again at level 1 (a leadership coming back) changes and writes nothing.
    before = ends(node)
    await c.shutdown()
    c = await started(node)
    assert offsets_of(c, MOVED_TO_0) == {("t", 0): (60, "level 1"), ("u", 0): (70, "txn")}
    assert ends(node) == before and marker_partitions(node) == []

    node.metadata.image.features[metadata_format.FEATURE] = metadata_format.COORDINATOR_REHASH
    c.follow_partition_rule()
    with pytest.raises(KafkaApiError) as err:
        c.fetch_offsets(STAYS, None)  # every partition loads again: retriable
    assert err.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    deadline = time.monotonic() + 10
    while len(c.runtime.active_partitions()) < N or c.migrations.busy:
        assert time.monotonic() < deadline, "not reloaded"
        await asyncio.sleep(0.005)
    assert [c.partition_for(g) for g in (MOVED_TO_0, MOVED_TO_2, STAYS)] == [0, 2, 0]
    assert offsets_of(c, MOVED_TO_0) == {("t", 0): (60, "level 1"), ("u", 0): (70, "txn")}
    assert c.groups[MOVED_TO_0].partition == 0
    assert c.consumer.groups[KIP848_MOVED_TO_0].partition == 0
    assert offsets_of(c, MOVED_TO_2) == {("t", 2): (20, "b")}
    assert offsets_of(c, STAYS) == {("t", 3): (30, "s")}
    assert marker_partitions(node) == [0, 2]
    await c.shutdown()
