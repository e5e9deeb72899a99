"""An ISR change the controller has not answered yet (KIP-497 with the controller away): the leader
keeps the HW on the maximal ISR and sends the change again until it is answered.

A real ReplicaManager on real logs, fed by a real in-process controller (tests/unit/replica/conftest.py);
its AlterPartition goes to that controller, except that the first call gets no answer (what the
forwarding client returns while etcd is away and nobody leads: REQUEST_TIMED_OUT) and the next
ones wait until the test lets the controller answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from odradek.broker.replica.fetch_params import FetchParams, FetchResult
from odradek.broker.replica.fetch_session import CachedPartition
from odradek.controller import CreatableTopic, ReplicaAssignment
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.results import AppendInfo
from tests.unit.replica.conftest import Node, batch


def follower_fetch(node: Node, replica_id: int, offset: int) -> None:
    """A follower's fetch from ``offset`` (its log end), answered at once."""
    answers: list[FetchResult] = []
    node.rm.fetch_messages(FetchParams(0, 1, 1 << 20, 0, False, replica_id=replica_id),
                           [CachedPartition("t", None, 0, offset, 1 << 20)], answers.append)
    assert answers and answers[0].partitions[0].error_code == ErrorCode.NONE, answers


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_a_member_being_added_holds_the_high_watermark_until_the_controller_answers(
        node_factory: Callable[..., Any]) -> None:
    """The controller may commit an expansion and elect the new member while its answer never reaches
    the leader (etcd away, a controller change): from the moment the leader asks, the HW waits for that
    member too (Kafka's maximal ISR), and the request is sent again until it is answered."""
    node = await node_factory()
    controller = node.controller
    for broker in (2, 3):
        await controller.register_broker(broker, "127.0.0.1", 9)
    (created,) = await controller.create_topics([CreatableTopic("t", assignments=[ReplicaAssignment(0, (1, 2, 3))])])
    assert created.error_code == 0, created
    assert await node.rm.wait_for_logs(["t"]) == {}
    await eventually(lambda: ("t", 0) in node.rm.partitions)
    part = node.rm.partitions[("t", 0)]
    shrunk = await controller.alter_partition(part.topic_id, 0, 1, part.leader_epoch, part.partition_epoch, [1, 2])
    assert shrunk.error_code == ErrorCode.NONE and part.isr == (1, 2)

    calls: list[tuple[Any, ...]] = []
    answer_now = asyncio.Event()

    async def controller_away_then_back(*args: Any) -> Any:
        calls.append(args)
        if len(calls) == 1:
            raise KafkaApiError(ErrorCode.REQUEST_TIMED_OUT, None)
        await answer_now.wait()
        return await controller.alter_partition(*args)

    node.rm.isr.alter_partition = controller_away_then_back
    acked: list[list[Any]] = []
    node.rm.append_records([("t", 0, batch(3))], 1, 1000, acked.append)
    follower_fetch(node, 2, 0)
    follower_fetch(node, 2, 3)
    assert part.high_watermark == 3
    follower_fetch(node, 3, 3)  # replica 3 caught up: the leader asks to add it
    assert part.pending_isr == (1, 2, 3) and part.isr == (1, 2)
    # Two more records, which replica 2 has and replica 3 has not: an acks=all write waits for 3.
    node.rm.append_records([("t", 0, batch(2))], -1, 30_000, acked.append)
    follower_fetch(node, 2, 5)
    assert part.high_watermark == 3 and len(acked) == 1
    # No answer: sent again (the first call got none), the member still counted meanwhile.
    await eventually(lambda: len(calls) >= 2)
    assert part.pending_isr == (1, 2, 3) and part.high_watermark == 3 and len(acked) == 1
    answer_now.set()
    await eventually(lambda: part.pending_isr is None)
    assert part.isr == (1, 2, 3) == controller.image.topics["t"].partitions[0].isr
    follower_fetch(node, 3, 5)
    assert part.high_watermark == 5 and len(acked) == 2 and isinstance(acked[1][0], AppendInfo)
