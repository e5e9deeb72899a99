"""Replication's data path between two brokers in one process: real sockets, real logs.

Node 1 is a full ``Broker`` (single-node local mode, its embedded controller); node 2 is a
``ReplicaManager`` on its own log dir whose metadata is published by node 1's controller, so it
follows the partitions node 1 leads over a real connection (Fetch and OffsetForLeaderEpoch).
Leadership moves are committed to the controller as PartitionChangeRecords (the cluster's
controller would do the same).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.config.broker_config import load_config
from odradek.broker.metadata.broker_metadata import BrokerMetadata
from odradek.broker.network.inter_broker_client import NodeClient
from odradek.broker.replica.partition import Partition
from odradek.broker.replica.replica_manager import ReplicaManager
from odradek.broker.runtime.timing_wheel import Timer
from odradek.broker.server import Broker
from odradek.controller import CreatableTopic, replication_control
from odradek.controller.records import PartitionChangeRecord
from odradek.controller.requests import ReplicaAssignment
from odradek.protocol.errors import ErrorCode
from tests.unit.replica.conftest import batch

TOPIC = "r"
TP = (TOPIC, 0)
FAST = ["replica.fetch.backoff.ms=50", "replica.fetch.wait.max.ms=200", "odradek.metrics.port=-1"]


class Cluster:
    def __init__(self, broker1: Broker, rm2: ReplicaManager, pool: ThreadPoolExecutor) -> None:
        self.broker1 = broker1
        self.rm2 = rm2
        self.pool = pool
        port = broker1.socket_server.bound_ports["PLAINTEXT"]  # type: ignore[union-attr]
        self.client = NodeClient("127.0.0.1", port, "test-client", timeout_s=10)

    @property
    def controller(self) -> Any:
        return self.broker1.embedded_controller.controller  # type: ignore[union-attr]

    @property
    def leader(self) -> Partition:
        return self.broker1.replica_manager.partitions[TP]

    @property
    def follower(self) -> Partition:
        return self.rm2.partitions[TP]

    async def produce(self, records: bytes, acks: int = -1) -> dict:
        body = {"transactional_id": None, "acks": acks, "timeout_ms": 10000,
                "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}]}
        response = await self.client.request(0, 9, body)
        return response["responses"][0]["partition_responses"][0]

    async def fetch(self, offset: int, max_wait_ms: int = 0, replica_id: int = -1,
                    current_leader_epoch: int = -1) -> dict:
        body = {"replica_id": replica_id, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
                "rack_id": "", "topics": [{"topic": TOPIC, "partitions": [
                    {"partition": 0, "current_leader_epoch": current_leader_epoch, "fetch_offset": offset,
                     "last_fetched_epoch": -1,
                     "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
        response = await self.client.request(1, 12, body)
        return response["responses"][0]["partitions"][0]

    async def move_leader(self, leader: int, then: Callable[[], Any] | None = None) -> None:
        """Commit a leader change (the leader epoch goes up by one); ``then`` runs right after
        the commit, before any fetcher had a turn."""
        topic_id = self.controller.image.topics[TOPIC].topic_id
        await self.controller._commit([PartitionChangeRecord(0, topic_id, leader=leader)])
        if then is not None:
            then()
        await asyncio.sleep(0)


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def log_bytes(part: Partition) -> bytes:
    return part.log.read(part.log_start_offset, 1 << 24).read_bytes()


@pytest.fixture
async def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Cluster]:
    """Node 1's extra overrides come from an indirect parametrization."""
    extra = list(getattr(request, "param", []))
    config1 = load_config(None, [f"log.dirs={tmp_path / 'logs1'}", "node.id=1",
                                 "listeners=PLAINTEXT://127.0.0.1:0", *FAST, *extra], environ={})
    broker1 = Broker(config1)
    await broker1.start()
    controller = broker1.embedded_controller.controller  # type: ignore[union-attr]
    # Broker 2 registers an endpoint nobody listens on: node 1 following it fails to connect and
    # retries, as a real follower of a dead leader would.
    await controller.register_broker(2, "127.0.0.1", 9)
    config2 = load_config(None, [f"log.dirs={tmp_path / 'logs2'}", "node.id=2", *FAST], environ={})
    metadata2 = BrokerMetadata(tmp_path / "meta2")
    remove_publisher = controller.add_publisher(metadata2)
    pool = ThreadPoolExecutor(max_workers=2)
    timer2 = Timer()
    rm2 = ReplicaManager(config2, metadata2, timer2, pool, lambda reason: None, lambda: False)
    await rm2.start()
    c = Cluster(broker1, rm2, pool)
    (result,) = await controller.create_topics(
        [CreatableTopic(TOPIC, assignments=[ReplicaAssignment(0, (1, 2))])])
    assert result.error_code == 0, result
    assert await broker1.replica_manager.wait_for_logs([TOPIC]) == {}
    assert await rm2.wait_for_logs([TOPIC]) == {}
    await eventually(lambda: TP in rm2.partitions and TP in broker1.replica_manager.partitions)
    try:
        yield c
    finally:
        await c.client.close()
        remove_publisher()
        await rm2.shutdown()
        timer2.shutdown()
        pool.shutdown(wait=True)
        await broker1.shutdown()


async def test_acks_all_is_answered_once_the_follower_has_the_records(cluster: Cluster) -> None:
    assert cluster.leader.isr == (1, 2) and cluster.follower.leader == 1
    assert cluster.rm2.replica_fetchers.fetching(TP) is not None
    first, second = batch(3), batch(2, value_size=100)
    answer = await cluster.produce(first)
    assert answer["error_code"] == 0 and answer["base_offset"] == 0
    # The HW moved only through the follower's fetch from offset 3: it had them before the answer.
    assert cluster.follower.log_end_offset == 3
    answer = await cluster.produce(second)
    assert answer["error_code"] == 0 and answer["base_offset"] == 3
    assert cluster.follower.log_end_offset == 5 and cluster.leader.high_watermark == 5
    # Byte for byte the leader's batches: same offsets, same leader epochs, same CRCs.
    assert log_bytes(cluster.follower) == log_bytes(cluster.leader)
    assert cluster.follower.log.epoch_cache.entries == cluster.leader.log.epoch_cache.entries == [(0, 0)]
    # The follower's HW comes from the leader's next fetch response.
    await eventually(lambda: cluster.follower.high_watermark == 5)
    # A follower refuses clients, as Kafka's does.
    with pytest.raises(Exception) as refused:
        cluster.rm2.leader_partition(TOPIC, 0)
    assert getattr(refused.value, "code", None) == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_consumer_long_poll_wakes_when_the_follower_moves_the_high_watermark(cluster: Cluster) -> None:
    started = time.monotonic()
    waiting = asyncio.ensure_future(cluster.fetch(0, max_wait_ms=8000))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    assert (await cluster.produce(batch(2), acks=1))["error_code"] == 0
    partition = await waiting
    assert partition["error_code"] == 0 and partition["high_watermark"] == 2
    assert len(partition["records"]) > 0
    assert time.monotonic() - started < 4  # woken by the HW move, not by its 8 s timeout


async def test_fetch_from_a_broker_that_is_not_a_replica_is_refused(cluster: Cluster) -> None:
    await cluster.produce(batch(1))
    partition = await cluster.fetch(0, replica_id=3)
    assert partition["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # With its leader epoch, Kafka answers UNKNOWN_LEADER_EPOCH (the pair is not known yet).
    partition = await cluster.fetch(0, replica_id=3, current_leader_epoch=0)
    assert partition["error_code"] == ErrorCode.UNKNOWN_LEADER_EPOCH
    # Broker 2 is a replica: it may fetch past the HW too.
    assert (await cluster.fetch(0, replica_id=2))["error_code"] == ErrorCode.NONE


async def test_a_follower_with_a_divergent_tail_truncates_to_the_leader(
        cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """KIP-101: node 2 leads epoch 1 and appends records nobody copies; node 1 leads epoch 2 and
    appends others at the same offsets; node 2, following again, truncates its tail and copies."""
    assert (await cluster.produce(batch(3)))["error_code"] == 0
    await eventually(lambda: cluster.follower.high_watermark == 3)
    await cluster.move_leader(2)
    assert cluster.follower.leader == 2 and cluster.follower.leader_epoch == 1
    # The new leader stops fetching, the old one starts following it (and fails to connect).
    assert cluster.rm2.replica_fetchers.fetching(TP) is None
    assert cluster.broker1.replica_manager.replica_fetchers.fetching(TP) is not None
    done: list[Any] = []
    cluster.rm2.append_records([(TOPIC, 0, batch(3, value_size=77))], 1, 1000, done.append)
    assert cluster.follower.log_end_offset == 6
    caplog.set_level("INFO", "odradek.broker.replica.replica_fetcher")
    # Node 1 leads epoch 2 and appends at offsets 3-4 before node 2 asks where its epoch 1 ends.
    await cluster.move_leader(1, lambda: cluster.broker1.replica_manager.append_records(
        [(TOPIC, 0, batch(2))], 1, 1000, done.append))
    assert cluster.leader.leader_epoch == 2
    assert cluster.broker1.replica_manager.replica_fetchers.fetching(TP) is None
    await eventually(lambda: cluster.follower.log_end_offset == 5 and cluster.leader.high_watermark == 5)
    assert log_bytes(cluster.follower) == log_bytes(cluster.leader)
    assert cluster.follower.log.epoch_cache.entries == [(0, 0), (2, 3)]
    # The leader does not know epoch 1: it answered where its largest smaller epoch (0) ends.
    assert "the leader's epoch 0 ends at offset 3 (our log end 6)" in caplog.text
    assert "Truncating r-0 to offset 3 (log end 6)" in caplog.text


@pytest.mark.parametrize("cluster", [["replica.lag.time.max.ms=600"]], indirect=True)
async def test_a_lagging_follower_leaves_the_isr_and_rejoins_once_caught_up(cluster: Cluster) -> None:
    assert (await cluster.produce(batch(1)))["error_code"] == 0
    # The follower stops fetching (a paused broker): past replica.lag.time.max.ms the leader
    # shrinks the ISR through AlterPartition, and the waiting acks=-1 produce is answered.
    cluster.rm2.replica_fetchers.remove_partitions([TP])
    started = time.monotonic()
    answer = await cluster.produce(batch(2))
    elapsed = time.monotonic() - started
    assert answer["error_code"] == 0 and 0.3 < elapsed < 5
    assert cluster.leader.isr == (1,) and cluster.leader.high_watermark == 3
    p = cluster.controller.image.topics[TOPIC].partitions[0]
    assert (p.isr, p.partition_epoch) == ((1,), 1)
    # It fetches again, reaches the HW, and the leader adds it back.
    follower = cluster.follower
    cluster.rm2.replica_fetchers.add_partitions(
        {TP: (1, follower.leader_epoch, follower.topic_id, follower.log_end_offset)})
    await eventually(lambda: cluster.leader.isr == (1, 2))
    p = cluster.controller.image.topics[TOPIC].partitions[0]
    assert (p.isr, p.partition_epoch) == ((1, 2), 2) and cluster.follower.log_end_offset == 3


@pytest.mark.parametrize("cluster", [["replica.lag.time.max.ms=600", "min.insync.replicas=2"]], indirect=True)
async def test_acks_all_below_min_insync_replicas_after_the_isr_shrank(cluster: Cluster) -> None:
    assert (await cluster.produce(batch(1)))["error_code"] == 0
    cluster.rm2.replica_fetchers.remove_partitions([TP])
    # Appended, but the ISR fell below min.insync.replicas while it waited (Kafka's answer).
    assert (await cluster.produce(batch(1)))["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert (await cluster.produce(batch(1)))["error_code"] == ErrorCode.NOT_ENOUGH_REPLICAS
    assert (await cluster.produce(batch(1), acks=1))["error_code"] == ErrorCode.NONE


async def test_a_follower_behind_the_leaders_log_start_restarts_there(cluster: Cluster) -> None:
    """OFFSET_OUT_OF_RANGE below the leader's log start (DeleteRecords while the follower was
    away): the follower empties its log and restarts at the leader's batch holding that offset."""
    assert (await cluster.produce(batch(2)))["error_code"] == 0
    cluster.rm2.replica_fetchers.remove_partitions([TP])
    assert (await cluster.produce(batch(3), acks=1))["error_code"] == 0  # offsets 2-4
    leader = cluster.leader  # drops the follower from the ISR (the HW can then pass it)
    shrunk = await cluster.controller.alter_partition(leader.topic_id, 0, 1, 0, leader.partition_epoch, [1])
    assert shrunk.error_code == 0 and leader.high_watermark == 5
    assert await cluster.broker1.replica_manager.delete_records(TOPIC, 0, 3) == 3  # mid-batch
    follower = cluster.follower
    assert follower.log_end_offset == 2
    cluster.rm2.replica_fetchers.add_partitions(
        {TP: (1, follower.leader_epoch, follower.topic_id, follower.log_end_offset)})
    await eventually(lambda: cluster.follower.log_end_offset == 5 and cluster.follower.log_start_offset == 3)
    leader_bytes = cluster.leader.log.read(3, 1 << 20).read_bytes()  # the whole batch 2-4
    assert cluster.follower.log.read(3, 1 << 20).read_bytes() == leader_bytes
    await eventually(lambda: cluster.leader.isr == (1, 2))  # caught up: back in the ISR


async def test_a_follower_applies_retention_up_to_its_own_high_watermark(cluster: Cluster) -> None:
    """Kafka runs retention on followers too, bounded by the high watermark the leader gave them:
    the follower's expired active segment goes once its HW reached its log end, and it goes on
    replicating at the same offsets."""
    assert (await cluster.produce(batch(3)))["error_code"] == 0  # timestamps of 1970: expired
    follower = cluster.follower
    await eventually(lambda: follower.high_watermark == 3)
    follower.log.update_config(follower.log.config.with_overrides({"retention.ms": "1000"}))  # here only
    cluster.rm2.replica_fetchers.remove_partitions([TP])
    assert (await cluster.produce(batch(2), acks=1))["error_code"] == 0  # offsets 3-4, HW still 3
    follower.append_records_to_follower(cluster.leader.log.read(3, 1 << 20).read_bytes())
    assert (follower.log_end_offset, follower.high_watermark) == (5, 3)
    assert await cluster.rm2.run_blocking(cluster.rm2.periodic.retention) == 0  # its one segment holds 3-4, above its HW
    cluster.rm2.replica_fetchers.add_partitions(
        {TP: (1, follower.leader_epoch, follower.topic_id, follower.log_end_offset)})
    await eventually(lambda: follower.high_watermark == 5)
    assert await cluster.rm2.run_blocking(cluster.rm2.periodic.retention) == 1
    assert (follower.log_start_offset, follower.log_end_offset) == (5, 5)
    assert cluster.leader.log_start_offset == 0  # its own retention, not the leader's (whose check has not run)
    answer = await cluster.produce(batch(2))
    assert answer["error_code"] == 0 and answer["base_offset"] == 5
    assert follower.log_end_offset == 7
    assert log_bytes(follower) == cluster.leader.log.read(5, 1 << 20).read_bytes()


async def fetch_as_replica(cluster: Cluster, offset: int, replica_epoch: int) -> dict:
    """Fetch v15 as broker 2, naming ``replica_epoch`` in its replica state (KIP-903)."""
    topic_id = cluster.controller.image.topics[TOPIC].topic_id
    body = {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "replica_state": {"replica_id": 2, "replica_epoch": replica_epoch},
            "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "current_leader_epoch": cluster.leader.leader_epoch, "fetch_offset": offset,
                 "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
    response = await cluster.client.request(1, 15, body)
    return response["responses"][0]["partitions"][0]


@pytest.mark.parametrize("cluster", [["replica.lag.time.max.ms=600"]], indirect=True)
async def test_a_follower_fetching_as_an_earlier_incarnation_is_not_added_to_the_isr(
        cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    """KIP-903: broker 2 registered again (a restart that may have lost its log); a fetch that
    still names its old broker epoch does not bring it back into the ISR, one with the current
    epoch does, and the AlterPartition names that epoch."""
    caplog.set_level("INFO", replication_control.log.name)  # where "Rejecting AlterPartition" is logged
    assert (await cluster.produce(batch(1)))["error_code"] == 0
    cluster.rm2.replica_fetchers.remove_partitions([TP])
    assert (await cluster.produce(batch(2)))["error_code"] == 0  # answered once the ISR shrank
    assert cluster.leader.isr == (1,)
    old_epoch = cluster.controller.image.brokers[2].broker_epoch
    new_epoch = await cluster.controller.register_broker(2, "127.0.0.1", 9)
    await eventually(lambda: cluster.broker1.replica_manager.image.brokers[2].broker_epoch == new_epoch)
    end = cluster.leader.log_end_offset
    for _ in range(5):  # caught up, but as the old incarnation
        assert (await fetch_as_replica(cluster, end, old_epoch))["error_code"] == 0
        await asyncio.sleep(0.1)
    assert cluster.leader.isr == (1,)
    assert cluster.controller.image.topics[TOPIC].partitions[0].isr == (1,)
    # The leader itself held back (the controller would have refused it too).
    assert "Rejecting AlterPartition" not in caplog.text
    assert (await fetch_as_replica(cluster, end, new_epoch))["error_code"] == 0
    await eventually(lambda: cluster.controller.image.topics[TOPIC].partitions[0].isr == (1, 2))
    assert cluster.leader.follower_broker_epoch(2) == new_epoch


def leader_sessions(cluster: Cluster) -> list[Any]:
    return list(cluster.broker1.fetch_sessions.sessions.values())


async def test_the_follower_fetches_in_an_incremental_session(cluster: Cluster) -> None:
    """Kafka's replica fetcher keeps a fetch session (KIP-227, its FetchSessionHandler): the first
    Fetch is full and opens it, the later ones are incremental on it (their epoch counts up) and
    name only the partitions whose fetch state changed."""
    await eventually(lambda: len(leader_sessions(cluster)) == 1)
    (session,) = leader_sessions(cluster)
    assert list(session.partitions) == [(cluster.leader.topic_id, 0)]
    epoch = session.epoch
    for n in range(3):
        answer = await cluster.produce(batch(2))
        assert answer["error_code"] == 0 and answer["base_offset"] == 2 * n
    assert cluster.follower.log_end_offset == 6 and log_bytes(cluster.follower) == log_bytes(cluster.leader)
    # Still that one session, three rounds (or more) further on.
    assert leader_sessions(cluster) == [session] and session.epoch >= epoch + 3
    assert session.partitions[(cluster.leader.topic_id, 0)].fetch_offset == 6


async def test_a_follower_whose_session_is_gone_opens_another_and_replicates_on(cluster: Cluster) -> None:
    """The leader evicted the session (its cache is full, say): the follower's next incremental
    Fetch answers FETCH_SESSION_ID_NOT_FOUND, and the follower starts over with a full Fetch at
    once, as Kafka's FetchSessionHandler does, not after replica.fetch.backoff.ms."""
    await eventually(lambda: len(leader_sessions(cluster)) == 1)
    (old,) = leader_sessions(cluster)
    cluster.broker1.fetch_sessions.remove(old.session_id)
    started = time.monotonic()
    answer = await cluster.produce(batch(2))
    assert answer["error_code"] == 0
    assert time.monotonic() - started < 5
    await eventually(lambda: len(leader_sessions(cluster)) == 1)
    (new,) = leader_sessions(cluster)
    assert new.session_id != old.session_id
    assert cluster.follower.log_end_offset == 2 and log_bytes(cluster.follower) == log_bytes(cluster.leader)
