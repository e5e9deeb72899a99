"""A step of the system clock changes nothing that a duration times, as in Kafka.

NTP correcting a drift, a VM resumed, an operator's ``date -s``: the wall clock jumps. Kafka times
its durations on a monotonic clock (Time.hiResClockMs, from System.nanoTime) and stamps data with
the wall clock. So after a step:

- the controller keeps its lease and takes metadata changes (Kafka's single-node controller does
  not lose leadership to a clock step; Odradek's local lease was timed on the wall clock, and a
  step forward past its TTL made the broker refuse every metadata change until restarted);
- a share group member keeps its acquired records for the lock duration, no more and no less
  (Kafka's SharePartition times acquisition locks on the monotonic clock);
- a consumer group member heartbeating on time is not fenced (session timeouts are timers).

The broker here is a real Odradek process whose wall clock (``time.time``, ``time.time_ns``) the
test steps: a ``sitecustomize`` module on its PYTHONPATH adds the seconds written in a file to it.
Its monotonic clock is left alone. A topic with LogAppendTime shows that the broker's wall clock did
step (its records are stamped with it), so no test here can pass because the step never happened.
"""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer

from tests.integration.test_share_holds_ab import NONE, acknowledge, acquired, five_held, share_fetch
from tests.support.broker_process import BrokerProcess
from tests.support.real_kafka import Target, create_topic, unique
from tests.support.wire import WireClient

pytestmark = pytest.mark.timeout(180)

HOUR_S = 3600.0
STEPPED_CLOCK = """
    import os, threading, time

    _step_file = os.environ.get("ODRADEK_TEST_WALL_CLOCK_STEP_FILE")
    if _step_file:
        _real_time, _real_time_ns, _step = time.time, time.time_ns, [0.0]

        def _read_step() -> None:
            while True:
                try:
                    with open(_step_file) as f:
                        _step[0] = float(f.read() or 0)
                except (OSError, ValueError):
                    pass
                time.sleep(0.02)

        time.time = lambda: _real_time() + _step[0]
        time.time_ns = lambda: _real_time_ns() + int(_step[0] * 1e9)
        threading.Thread(target=_read_step, name="stepped-wall-clock", daemon=True).start()
"""


class SteppedBroker:
    def __init__(self, broker: BrokerProcess, step_file: Path) -> None:
        self.broker, self.step_file = broker, step_file
        self.target = Target("odradek", broker.host, broker.port, broker)

    def step_to(self, seconds: float) -> None:
        """Set the broker's wall clock ``seconds`` from the real one; return once its records
        are stamped with the stepped clock."""
        self.step_file.write_text(str(seconds))
        deadline = time.monotonic() + 10
        while abs(self.broker_time() - (time.time() + seconds)) > 60:
            assert time.monotonic() < deadline, "the broker's wall clock did not step"
            time.sleep(0.05)

    def broker_time(self) -> float:
        """The broker's wall clock, read off a record it stamps (LogAppendTime)."""
        stamps: list[int] = []
        producer = Producer({"bootstrap.servers": self.target.bootstrap})
        producer.produce("clock", b"t", on_delivery=lambda err, msg: stamps.append(msg.timestamp()[1]))
        assert producer.flush(30) == 0 and stamps, "the clock record was not delivered"
        return stamps[0] / 1000


@pytest.fixture(scope="module")
def stepped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SteppedBroker]:
    base = tmp_path_factory.mktemp("stepped-clock")
    (base / "site").mkdir()
    (base / "site" / "sitecustomize.py").write_text(textwrap.dedent(STEPPED_CLOCK))
    step_file = base / "step"
    step_file.write_text("0")
    mp = pytest.MonkeyPatch()
    mp.setenv("PYTHONPATH", str(base / "site"), prepend=os.pathsep)
    mp.setenv("ODRADEK_TEST_WALL_CLOCK_STEP_FILE", str(step_file))
    # Locks as short as 1 s may be set per group (Kafka's floor for the broker setting).
    broker = BrokerProcess(base / "broker", overrides={"group.share.min.record.lock.duration.ms": "1000"})
    try:
        broker.start()
    finally:
        mp.undo()
    try:
        s = SteppedBroker(broker, step_file)
        create_topic(s.target, "clock", 1, {"message.timestamp.type": "LogAppendTime"})
        yield s
    finally:
        broker.kill()


def test_a_clock_step_forward_leaves_the_controller_taking_metadata_changes(stepped: SteppedBroker) -> None:
    stepped.step_to(0)
    create_topic(stepped.target, unique("before-step"), 1)
    stepped.step_to(HOUR_S)
    # An hour on by the wall clock, a moment by the lease's: the controller still holds it.
    create_topic(stepped.target, unique("after-step"), 1)
    stepped.step_to(0)
    create_topic(stepped.target, unique("after-step-back"), 1)


def test_a_clock_step_forward_does_not_expire_a_live_members_locks(stepped: SteppedBroker) -> None:
    stepped.step_to(0)
    with five_held(stepped.target, "clock-held", {"share.record.lock.duration.ms": "30000"}) as h:
        stepped.step_to(HOUR_S)
        # An hour later by the wall clock, a second or so by the lock's: still the holder's.
        assert acquired(share_fetch(h.other, h.group, h.second, 0, h.tid, max_wait_ms=1000)) == []
        assert acknowledge(h.holder, h.group, h.member, h.epoch, h.tid, 0, 4) == NONE
        assert acquired(share_fetch(h.other, h.group, h.second, 1, h.tid, max_wait_ms=1000)) == []


def test_a_clock_step_back_does_not_keep_records_locked(stepped: SteppedBroker) -> None:
    stepped.step_to(HOUR_S)
    with five_held(stepped.target, "clock-held", {"share.record.lock.duration.ms": "2000"}) as h:
        acquired_at = time.monotonic()
        stepped.step_to(0)
        # An hour back by the wall clock: the records still come back when the 2 s lock expires.
        deadline = time.monotonic() + 30
        epoch = 0
        while not (got := acquired(share_fetch(h.other, h.group, h.second, epoch, h.tid, max_wait_ms=1000))):
            assert time.monotonic() < deadline, "the records never came back after the clock stepped back"
            epoch += 1
        assert got == [(0, 4, 2)]
        assert time.monotonic() - acquired_at >= 1.5, "the records came back before their lock expired"


def group_epochs(stepped: SteppedBroker, group: str) -> tuple[int, list[tuple[str, int]]]:
    """ConsumerGroupDescribe: the group epoch and each member's (id, epoch)."""
    with WireClient(stepped.target.host, stepped.target.port) as c:
        g = c.request(69, 0, {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
    assert g["error_code"] == NONE, g
    return g["group_epoch"], sorted((m["member_id"], m["member_epoch"]) for m in g["members"])


def test_a_clock_step_forward_keeps_a_consumer_group_member(stepped: SteppedBroker) -> None:
    """Group session timeouts run on the monotonic timing wheel (Kafka's CoordinatorTimer): a member
    heartbeating on time keeps its assignment across the step, and the group is not rebalanced (a
    member fenced by an expired session rejoins at epoch 0, which bumps the group epoch)."""
    stepped.step_to(0)
    topic, group = unique("clock-group"), unique("cg")
    create_topic(stepped.target, topic, 2)
    consumer = Consumer({"bootstrap.servers": stepped.target.bootstrap, "group.id": group,
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, "the member never got both partitions"
            consumer.poll(0.2)
        before = group_epochs(stepped, group)
        stepped.step_to(HOUR_S)
        until = time.monotonic() + 12  # two heartbeat intervals (5 s) past the step
        while time.monotonic() < until:
            consumer.poll(0.2)
        assert group_epochs(stepped, group) == before
        assert len(consumer.assignment()) == 2
    finally:
        consumer.close()
