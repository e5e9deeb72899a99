"""KIP-392 fetch from the closest replica, between two brokers in one process: real sockets, real logs.

Node 1 is a full ``Broker`` in rack ``r1`` with ``replica.selector.class`` set to Kafka's
RackAwareReplicaSelector, leading topic ``r`` on (1, 2); node 2 is a ``ReplicaManager`` in rack
``r2`` following it over a real connection. The leader answers consumers' Fetch v11+ over the wire;
node 2 (no socket server) is read through its replica manager, as its Fetch handler would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from odradek.broker.config.broker_config import load_config
from odradek.broker.metadata.broker_metadata import BrokerMetadata
from odradek.broker.network.inter_broker_client import NodeClient
from odradek.broker.replica.fetch_params import FetchParams, FetchResult
from odradek.broker.replica.fetch_session import CachedPartition
from odradek.broker.replica.replica_manager import ReplicaManager
from odradek.broker.runtime.completion import Completion
from odradek.broker.runtime.timing_wheel import Timer
from odradek.broker.server import Broker
from odradek.controller import CreatableTopic
from odradek.controller.requests import ReplicaAssignment
from odradek.protocol.errors import ErrorCode
from tests.unit.replica.conftest import batch

pytestmark = pytest.mark.timeout(30)

TOPIC = "r"
TP = (TOPIC, 0)
FAST = ["replica.fetch.backoff.ms=50", "replica.fetch.wait.max.ms=200", "odradek.metrics.port=-1"]
SELECTOR = "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector"


class Pair:
    def __init__(self, broker1: Broker, rm2: ReplicaManager) -> None:
        self.broker1 = broker1
        self.rm2 = rm2
        port = broker1.socket_server.bound_ports["PLAINTEXT"]  # type: ignore[union-attr]
        self.client = NodeClient("127.0.0.1", port, "test-client", timeout_s=10)

    async def produce(self, records: bytes) -> int:
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 10000,
                "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}]}
        response = await self.client.request(0, 9, body)
        return int(response["responses"][0]["partition_responses"][0]["error_code"])

    async def fetch(self, offset: int, rack: str, version: int = 11, max_wait_ms: int = 0) -> dict:
        body = {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
                "rack_id": rack, "topics": [{"topic": TOPIC, "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
                     "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
        response = await self.client.request(1, version, body)
        return dict(response["responses"][0]["partitions"][0])

    def fetch_on_follower(self, offset: int, client_rack: str | None, max_wait_ms: int = 0) -> Completion[FetchResult]:
        """A consumer's fetch as node 2's Fetch handler would make it (``client_rack`` None: before v11)."""
        params = FetchParams(max_wait_ms, 1, 1 << 20, 0, False, None, -1, client_rack=client_rack)
        done: Completion[FetchResult] = Completion()
        self.rm2.fetch_messages(params, [CachedPartition(TOPIC, None, 0, offset, 1 << 20)], done)
        return done


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[Pair]:
    config1 = load_config(None, [f"log.dirs={tmp_path / 'logs1'}", "node.id=1", "broker.rack=r1", SELECTOR,
                                 "listeners=PLAINTEXT://127.0.0.1:0", *FAST], environ={})
    broker1 = Broker(config1)
    await broker1.start()
    controller = broker1.embedded_controller.controller  # type: ignore[union-attr]
    await controller.register_broker(2, "127.0.0.1", 9, "r2")
    config2 = load_config(None, [f"log.dirs={tmp_path / 'logs2'}", "node.id=2", "broker.rack=r2", *FAST],
                          environ={})
    metadata2 = BrokerMetadata(tmp_path / "meta2")
    remove_publisher = controller.add_publisher(metadata2)
    pool = ThreadPoolExecutor(max_workers=2)
    timer2 = Timer()
    rm2 = ReplicaManager(config2, metadata2, timer2, pool, lambda reason: None, lambda: False)
    await rm2.start()
    p = Pair(broker1, rm2)
    (result,) = await controller.create_topics([CreatableTopic(TOPIC, assignments=[ReplicaAssignment(0, (1, 2))])])
    assert result.error_code == 0, result
    assert await broker1.replica_manager.wait_for_logs([TOPIC]) == {}
    assert await rm2.wait_for_logs([TOPIC]) == {}
    await eventually(lambda: TP in rm2.partitions and TP in broker1.replica_manager.partitions)
    try:
        yield p
    finally:
        await p.client.close()
        remove_publisher()
        await rm2.shutdown()
        timer2.shutdown()
        pool.shutdown(wait=True)
        await broker1.shutdown()


async def test_the_leader_names_the_follower_in_the_consumers_rack(pair: Pair) -> None:
    assert await pair.produce(batch(3)) == ErrorCode.NONE  # acks=-1: node 2 has the records
    started = time.monotonic()
    redirected = await pair.fetch(0, "r2", max_wait_ms=5000)
    # No records of that partition, and no long poll: the consumer moves at once.
    assert (redirected["error_code"], redirected["preferred_read_replica"], len(redirected["records"])) == (0, 2, 0)
    assert redirected["high_watermark"] == 3 and time.monotonic() - started < 4
    # The leader's own rack, no rack, an unknown rack, or a fetch before v11: read from the leader.
    for rack, version in (("r1", 11), ("", 11), ("r9", 11), ("r2", 10)):
        served = await pair.fetch(0, rack, version)
        assert served["preferred_read_replica"] == -1 and served["records"], (rack, version)


async def test_a_follower_is_not_preferred_before_it_has_the_fetch_offset(pair: Pair) -> None:
    # A fetch offset past what node 2 reported (it fetched up to 3): the leader serves it.
    assert await pair.produce(batch(3)) == ErrorCode.NONE
    leader = pair.broker1.replica_manager.partitions[TP]
    assert leader.follower_state(2)[0] >= 3
    assert (await pair.fetch(3, "r2"))["preferred_read_replica"] == 2
    assert (await pair.fetch(4, "r2"))["preferred_read_replica"] == -1


async def test_a_follower_serves_consumers_up_to_its_high_watermark_and_wakes_them(pair: Pair) -> None:
    assert await pair.produce(batch(3)) == ErrorCode.NONE
    follower = pair.rm2.partitions[TP]
    await eventually(lambda: follower.high_watermark == 3)
    done = pair.fetch_on_follower(0, "r2")
    assert done.done and done.value.partitions[0].error_code == ErrorCode.NONE
    assert done.value.partitions[0].size > 0 and done.value.partitions[0].high_watermark == 3
    # Before v11 a consumer reads only from the leader (Kafka's fetchOnlyFromLeader).
    done = pair.fetch_on_follower(0, None)
    assert done.value.partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # A long poll at the follower's HW waits, and wakes when the fetcher moves that HW.
    waiting = pair.fetch_on_follower(3, "r2", max_wait_ms=8000)
    assert not waiting.done
    assert await pair.produce(batch(2)) == ErrorCode.NONE
    result = await asyncio.wait_for(waiting.wait(), 5)
    assert result.partitions[0].size > 0 and result.partitions[0].high_watermark == 5


async def test_a_consumer_ahead_of_the_followers_high_watermark_waits_there(pair: Pair) -> None:
    assert await pair.produce(batch(3)) == ErrorCode.NONE
    follower = pair.rm2.partitions[TP]
    await eventually(lambda: follower.high_watermark == 3)
    assert await pair.produce(batch(2)) == ErrorCode.NONE  # the leader's HW is 5 at once ...
    follower.high_watermark = 3  # ... while the follower still has 3 (its next fetch brings 5)
    # The consumer learnt offset 4 from the leader: not truncated, it waits for the follower's HW.
    waiting = pair.fetch_on_follower(4, "r2", max_wait_ms=8000)
    assert not waiting.done
    result = await asyncio.wait_for(waiting.wait(), 5)
    assert result.partitions[0].error_code == ErrorCode.NONE and result.partitions[0].high_watermark == 5
