"""Tests of odradek.broker.runtime.timing_wheel: expiry order and precision, cascading, O(1) cancel, the async reaper."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.broker.runtime.timing_wheel import (
    AsyncReaper,
    CallbackTask,
    Timer,
    TimerTask,
    TimerTaskEntry,
    TimerTaskList,
)


class FakeClock:
    """A settable millisecond clock so the timer is driven deterministically."""

    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Recorder(TimerTask):
    """Records the clock value at which it ran."""

    def __init__(self, delay_ms: int, clock: FakeClock, log: list, name: object = None) -> None:
        super().__init__(delay_ms)
        self.clock = clock
        self.log = log
        self.name = name
        self.expiration = clock.now + delay_ms
        self.fired_at: list[int] = []

    def run(self) -> None:
        self.fired_at.append(self.clock.now)
        self.log.append(self)


def make(tick_ms: int = 1, wheel_size: int = 20, start: int = 0) -> tuple[Timer, FakeClock]:
    clock = FakeClock(start)
    return Timer(tick_ms=tick_ms, wheel_size=wheel_size, start_ms=start, clock=clock), clock


def step_to(timer: Timer, clock: FakeClock, end: int, step: int = 1) -> None:
    while clock.now < end:
        clock.now = min(end, clock.now + step)
        timer.advance_clock(clock.now)


def walk(lst: TimerTaskList) -> list[TimerTaskEntry]:
    """Walk the list both ways and check the links agree (the structure is intact)."""
    root = lst._root
    fwd, e = [], root.next
    while e is not root:
        assert e.list is lst
        fwd.append(e)
        e = e.next
    back, e = [], root.prev
    while e is not root:
        back.append(e)
        e = e.prev
    assert back == fwd[::-1]
    assert len(fwd) == lst.size
    return fwd


# -- ordering and precision ---------------------------------------------------------------------


def test_tasks_fire_in_expiry_order_each_at_its_expiration():
    timer, clock = make()
    log: list[Recorder] = []
    delays = list(range(0, 500, 7)) + [3, 3, 250, 1, 499]
    random.Random(1).shuffle(delays)
    tasks = [Recorder(d, clock, log) for d in delays]
    for t in tasks:
        timer.add(t)
    assert timer.size == len(tasks)
    assert timer.advance_clock(0) == 1  # the delay-0 task is due at once
    step_to(timer, clock, 600)
    assert timer.size == 0
    assert [t.expiration for t in log] == sorted(t.expiration for t in tasks)
    for t in tasks:
        assert t.fired_at == [t.expiration]  # tick 1 ms: exact


def test_same_bucket_runs_in_insertion_order():
    timer, clock = make(tick_ms=10)
    log: list[Recorder] = []
    tasks = [Recorder(d, clock, log, name=i) for i, d in enumerate([15, 12, 19, 10])]
    for t in tasks:
        timer.add(t)
    assert timer.advance_clock(9) == 0
    assert timer.advance_clock(10) == 4
    assert [t.name for t in log] == [0, 1, 2, 3]


def test_coarse_tick_fires_within_one_tick_never_late():
    timer, clock = make(tick_ms=10, wheel_size=8)
    log: list[Recorder] = []
    tasks = [Recorder(d, clock, log) for d in range(10, 3000, 13)]
    for t in tasks:
        timer.add(t)
    step_to(timer, clock, 3100)
    for t in tasks:
        (fired,) = t.fired_at
        # The bucket expires at the start of its tick: up to tick-1 early, never late.
        assert t.expiration - 10 < fired <= t.expiration


def test_no_empty_ticks_clock_jumps_to_next_bucket():
    timer, clock = make(tick_ms=1, wheel_size=20)
    log: list[Recorder] = []
    far = Recorder(1_000_000, clock, log)
    timer.add(far)
    # Follow next_expiration_ms: each step is one bucket of a coarser-to-finer wheel, not a tick.
    steps = 0
    while not log:
        nxt = timer.next_expiration_ms()
        assert nxt is not None and nxt <= far.expiration
        clock.now = nxt
        timer.advance_clock(nxt)
        steps += 1
    assert far.fired_at == [1_000_000]
    assert steps <= timer.wheel.levels + 1
    assert timer.next_expiration_ms() is None


def test_idle_advance_moves_the_wheel_so_new_tasks_stay_in_the_finest_wheel():
    timer, clock = make(tick_ms=1, wheel_size=20)
    clock.now = 100_000
    timer.advance_clock(100_000)
    assert timer.wheel.current_time_ms == 100_000
    t = Recorder(5, clock, [])
    timer.add(t)
    assert timer.wheel.levels == 1  # no overflow wheel needed: no cascading after idle time
    assert timer.wheel.buckets[100_005 % 20].size == 1


def test_advance_with_nothing_due_fires_nothing():
    timer, clock = make()
    assert timer.advance_clock(10_000) == 0
    t = Recorder(5, clock, [])
    clock.now = 10_000
    timer.add(t)
    assert timer.advance_clock(10_004) == 0
    assert timer.advance_clock(10_005) == 1


# -- cascading through overflow wheels ----------------------------------------------------------


def test_far_future_tasks_cascade_through_several_levels():
    # tick 1, 4 buckets: levels span 4, 16, 64, 256, 1024, 4096 ms.
    timer, clock = make(tick_ms=1, wheel_size=4)
    log: list[Recorder] = []
    delays = [3, 17, 70, 300, 1000, 4000]
    tasks = [Recorder(d, clock, log) for d in delays]
    for t in tasks:
        timer.add(t)
    assert timer.wheel.levels == 6
    step_to(timer, clock, 4100)
    for t in tasks:
        assert t.fired_at == [t.expiration]
    assert [t.expiration for t in log] == sorted(delays)


def test_big_jump_fires_cascaded_tasks_once_and_in_order():
    timer, clock = make(tick_ms=1, wheel_size=4)
    log: list[Recorder] = []
    tasks = [Recorder(d, clock, log) for d in (4000, 5, 999, 64, 63, 1000)]
    for t in tasks:
        timer.add(t)
    clock.now = 999
    assert timer.advance_clock(999) == 4
    assert [t.expiration for t in log] == [5, 63, 64, 999]
    clock.now = 100_000
    assert timer.advance_clock(100_000) == 2
    assert [t.expiration for t in log][4:] == [1000, 4000]
    assert timer.size == 0


def test_overflow_bucket_expiring_reinserts_into_lower_wheel():
    timer, clock = make(tick_ms=1, wheel_size=10)
    t = Recorder(57, clock, [])
    timer.add(t)
    level2 = timer.wheel.overflow_wheel
    assert level2 is not None and level2.tick_ms == 10
    assert sum(b.size for b in level2.buckets) == 1
    assert sum(b.size for b in timer.wheel.buckets) == 0
    timer.advance_clock(50)  # the level-2 bucket [50, 60) expires: t moves down
    assert sum(b.size for b in level2.buckets) == 0
    assert sum(b.size for b in timer.wheel.buckets) == 1
    assert t.fired_at == []
    clock.now = 57
    assert timer.advance_clock(57) == 1


@settings(max_examples=60, deadline=None)
@given(
    tick=st.integers(1, 7),
    size=st.integers(2, 9),
    start=st.integers(0, 10_000),
    delays=st.lists(st.integers(-5, 5_000), min_size=1, max_size=60),
    cancel_mask=st.lists(st.booleans(), min_size=60, max_size=60),
    steps=st.lists(st.integers(1, 400), min_size=1, max_size=40),
)
def test_property_each_task_fires_once_at_first_advance_past_its_bucket(
    tick, size, start, delays, cancel_mask, steps
):
    timer, clock = make(tick_ms=tick, wheel_size=size, start=start)
    log: list[Recorder] = []
    tasks = [Recorder(d, clock, log) for d in delays]
    for t in tasks:
        timer.add(t)
    cancelled = {id(t) for t, c in zip(tasks, cancel_mask, strict=False) if c}
    for t in tasks:
        if id(t) in cancelled:
            t.cancel()
    assert timer.size == len(tasks) - len(cancelled)
    prev = start
    i = 0
    while clock.now < start + 5_100:
        clock.now += steps[i % len(steps)]
        i += 1
        fired_before = len(log)
        timer.advance_clock(clock.now)
        for t in log[fired_before:]:
            due = (t.expiration // tick) * tick  # start of its bucket's tick
            assert prev < due <= clock.now or (due <= start + tick and prev == start)
        prev = clock.now
    for t in tasks:
        assert len(t.fired_at) == (0 if id(t) in cancelled else 1)
    assert timer.size == 0


# -- cancellation -------------------------------------------------------------------------------


def test_cancel_unlinks_in_place_and_cancelled_tasks_never_run():
    timer, clock = make(tick_ms=1, wheel_size=20)
    log: list[Recorder] = []
    tasks = [Recorder(7, clock, log, name=i) for i in range(5)]
    for t in tasks:
        timer.add(t)
    bucket = timer.wheel.buckets[7]
    assert [e.task for e in walk(bucket)] == tasks
    tasks[2].cancel()  # middle
    assert bucket.size == 4 and timer.size == 4
    assert [e.task for e in walk(bucket)] == [tasks[0], tasks[1], tasks[3], tasks[4]]
    tasks[0].cancel()  # head
    tasks[4].cancel()  # tail
    assert [e.task for e in walk(bucket)] == [tasks[1], tasks[3]]
    assert timer.size == 2
    tasks[4].cancel()  # twice: no-op
    assert timer.size == 2
    assert tasks[4].is_cancelled and not tasks[4].is_pending and tasks[1].is_pending
    step_to(timer, clock, 20)
    assert [t.name for t in log] == [1, 3]
    assert timer.size == 0


def test_cancel_in_overflow_wheel_and_ready_list():
    timer, clock = make(tick_ms=1, wheel_size=4)
    far = Recorder(900, clock, [])
    due = Recorder(0, clock, [])
    timer.add(far)
    timer.add(due)
    assert timer.size == 2
    far.cancel()
    due.cancel()
    assert timer.size == 0
    clock.now = 10_000
    assert timer.advance_clock(10_000) == 0
    assert far.fired_at == [] and due.fired_at == []


def test_cancel_of_a_later_task_by_an_earlier_one_in_the_same_batch():
    timer, clock = make()
    log: list = []
    victim = Recorder(5, clock, log, name="victim")
    killer = CallbackTask(5, victim.cancel)
    timer.add(killer)
    timer.add(victim)
    clock.now = 5
    assert timer.advance_clock(5) == 1
    assert log == []


def test_cancel_after_firing_is_a_no_op():
    timer, clock = make()
    t = Recorder(1, clock, [])
    timer.add(t)
    clock.now = 1
    assert timer.advance_clock(1) == 1
    t.cancel()
    t.cancel()
    assert t.fired_at == [1]
    assert timer.size == 0
    assert timer.advance_clock(100) == 0


# -- re-adding ----------------------------------------------------------------------------------


def test_readding_moves_the_task_it_fires_once_at_the_new_time():
    timer, clock = make()
    log: list[Recorder] = []
    t = Recorder(10, clock, log)
    timer.add(t)
    t.delay_ms = 30
    timer.add(t)
    assert timer.size == 1
    assert timer.wheel.buckets[10].size == 0
    step_to(timer, clock, 50)
    assert t.fired_at == [30]


def test_readding_a_cancelled_task_schedules_it_again():
    timer, clock = make()
    t = Recorder(5, clock, [])
    timer.add(t)
    t.cancel()
    timer.add(t)
    step_to(timer, clock, 10)
    assert t.fired_at == [5]


def test_periodic_task_readding_itself_from_run():
    timer, clock = make()
    times: list[int] = []

    class Periodic(TimerTask):
        def run(self) -> None:
            times.append(clock.now)
            if len(times) < 4:
                timer.add(self)

    timer.add(Periodic(10))
    step_to(timer, clock, 100)
    assert times == [10, 20, 30, 40]


def test_zero_delay_task_readding_itself_does_not_spin():
    timer, clock = make()
    runs = []

    class Again(TimerTask):
        def run(self) -> None:
            runs.append(1)
            timer.add(self)

    timer.add(Again(0))
    assert timer.advance_clock(0) == 1
    assert timer.advance_clock(0) == 1
    assert len(runs) == 2 and timer.size == 1


# -- due tasks, errors, shutdown ----------------------------------------------------------------


def test_due_and_negative_delay_tasks_run_on_next_advance_not_inside_add():
    timer, clock = make(start=100)
    log: list[Recorder] = []
    a = Recorder(0, clock, log)
    b = Recorder(-50, clock, log)
    timer.add(a)
    timer.add(b)
    assert log == [] and timer.size == 2
    assert timer.next_expiration_ms() is not None and timer.next_expiration_ms() <= 100
    assert timer.advance_clock(100) == 2
    assert log == [a, b]


def test_failing_task_is_logged_and_others_still_run(caplog):
    timer, clock = make()
    log: list[Recorder] = []

    def boom() -> None:
        raise RuntimeError("boom")

    timer.add(Recorder(3, clock, log, name="before"))
    timer.add(CallbackTask(3, boom))
    timer.add(Recorder(3, clock, log, name="after"))
    with caplog.at_level(logging.ERROR, logger="odradek.broker.runtime.timing_wheel"):
        assert timer.advance_clock(3) == 3
    assert [t.name for t in log] == ["before", "after"]
    assert "boom" in caplog.text
    assert timer.size == 0


def test_shutdown_drops_pending_tasks_and_rejects_adds():
    timer, clock = make(tick_ms=1, wheel_size=4)
    log: list[Recorder] = []
    tasks = [Recorder(d, clock, log) for d in (0, 3, 50, 5000)]
    for t in tasks:
        timer.add(t)
    timer.shutdown()
    assert timer.size == 0
    assert all(t.is_cancelled for t in tasks)
    with pytest.raises(RuntimeError):
        timer.add(Recorder(1, clock, log))
    assert timer.advance_clock(10**9) == 0
    assert log == []


def test_invalid_wheel_parameters_are_rejected():
    with pytest.raises(ValueError):
        Timer(tick_ms=0, clock=FakeClock())
    with pytest.raises(ValueError):
        Timer(wheel_size=1, clock=FakeClock())


def test_many_tasks_size_accounting():
    timer, clock = make(tick_ms=1, wheel_size=20)
    rng = random.Random(7)
    tasks = [CallbackTask(rng.randrange(0, 30_000), lambda: None) for _ in range(5000)]
    for t in tasks:
        timer.add(t)
    assert timer.size == 5000
    for t in tasks[::2]:
        t.cancel()
    assert timer.size == 2500
    clock.now = 30_000
    assert timer.advance_clock(30_000) == 2500
    assert timer.size == 0


# -- the async reaper on a real loop ------------------------------------------------------------


# The reaper's timing is checked against the timer's own clock and the loop's own timers, not
# against wall-clock bounds: +-20 ms around the deadline broke on 2 cores under 3 test workers,
# where the loop itself wakes late. "Not before": the task runs when the timer's clock has reached
# its expiration. "Not after": it runs before a loop timer armed 5 ms after its deadline, which a
# late loop still runs after it (due timers run in deadline order). A reaper that sleeps a poll
# interval (Kafka's thread polls every 200 ms), arms for a bucket's end, or misses a re-arm fails
# the second; one that advances the wheel before the deadline fails the first.


async def test_reaper_fires_at_the_deadline_not_before_and_not_after_a_loop_timer_5_ms_later():
    loop = asyncio.get_running_loop()
    timer = Timer()
    reaper = AsyncReaper(timer)
    reaper.start()
    ran: dict[str, int] = {}  # name -> the timer's clock when it ran
    order: list[str] = []
    expirations = {}
    # 10 and 15 ms sit in the first wheel (20 x 1 ms), each in its own bucket, so the reaper arms
    # for exactly each deadline: one that fires late, or advances the wheel early (running the
    # 15 ms task at 10), is caught whatever the clock's phase. 50 ms cascades from a 20 ms bucket:
    # the reaper must re-arm for it after that bucket fires.
    for name, delay in (("10 ms", 10), ("15 ms", 15), ("50 ms", 50)):
        expirations[name] = timer.now_ms() + delay
        timer.add(CallbackTask(delay, lambda n=name: (ran.setdefault(n, timer.now_ms()), order.append(n))))
        loop.call_later((delay + 5) / 1000, lambda n=name: order.append(f"loop timer after {n}"))
    while len(order) < 6:
        await asyncio.sleep(0.005)
        assert timer.now_ms() - expirations["50 ms"] < 5000, order
    for name, expiration in expirations.items():
        assert order.index(name) < order.index(f"loop timer after {name}"), order
        assert ran[name] >= expiration, (name, ran, expirations)
    reaper.stop()


async def test_reaper_rearms_when_an_earlier_task_is_added():
    loop = asyncio.get_running_loop()
    timer = Timer()
    reaper = AsyncReaper(timer)
    reaper.start()
    order: list[str] = []
    late = loop.create_future()
    # 1000 ms lands in the third wheel (400 ms buckets), so the reaper first arms for a bucket at
    # least 600 ms away, well after the early task's 30 ms, whatever the clock's phase.
    timer.add(CallbackTask(1000, lambda: (order.append("late"), late.set_result(None))))
    await asyncio.sleep(0.01)
    armed_for_late = reaper.armed_at_ms
    assert armed_for_late is not None
    early = loop.create_future()
    early_expiration = timer.now_ms() + 30
    timer.add(CallbackTask(30, lambda: (order.append("early"), early.set_result(timer.now_ms()))))
    assert reaper.armed_at_ms is not None and reaper.armed_at_ms <= early_expiration < armed_for_late
    # A loop timer 5 ms after the early task's deadline runs after it (see above), whatever the load.
    loop.call_later(0.035, lambda: order.append("loop timer"))
    fired_at = await asyncio.wait_for(early, 2)
    assert fired_at >= early_expiration
    # (The loop timer may have run too by now: a late loop runs it before this coroutine resumes.)
    assert order[0] == "early" and "late" not in order, order
    await asyncio.wait_for(late, 3)
    assert order == ["early", "loop timer", "late"]
    assert reaper.armed_at_ms is None  # nothing left: the reaper sleeps without a timer
    reaper.stop()


async def test_reaper_runs_zero_delay_task_promptly_and_survives_errors():
    loop = asyncio.get_running_loop()
    timer = Timer()
    reaper = AsyncReaper(timer)
    reaper.start()

    def boom() -> None:
        raise ValueError("task failure")

    timer.add(CallbackTask(0, boom))
    done = loop.create_future()
    timer.add(CallbackTask(0, lambda: done.set_result(True)))
    assert await asyncio.wait_for(done, 1)
    again = loop.create_future()
    timer.add(CallbackTask(5, lambda: again.set_result(True)))
    assert await asyncio.wait_for(again, 1)
    reaper.stop()


async def test_reaper_stop_and_timer_shutdown_prevent_firing():
    timer = Timer()
    reaper = AsyncReaper(timer)
    reaper.start()
    fired: list[int] = []
    timer.add(CallbackTask(20, lambda: fired.append(1)))
    reaper.stop()
    await asyncio.sleep(0.05)
    assert fired == []
    assert timer.size == 1  # still pending: stop() pauses the driver, it does not drop tasks
    reaper.start()
    await asyncio.sleep(0.02)
    assert fired == [1]
    timer.add(CallbackTask(20, lambda: fired.append(2)))
    timer.shutdown()
    assert not reaper.running
    await asyncio.sleep(0.05)
    assert fired == [1]


async def test_second_reaper_on_same_timer_is_rejected():
    timer = Timer()
    first = AsyncReaper(timer)
    first.start()
    with pytest.raises(RuntimeError):
        AsyncReaper(timer).start()
    first.stop()
