"""Tests of odradek.broker.runtime.purgatory: watch / complete / expire, exactly-once completion, purging, bad calls."""

from __future__ import annotations

import asyncio
import logging

import pytest

from odradek.broker.runtime.purgatory import DelayedOperation, DelayedOperationPurgatory
from odradek.broker.runtime.timing_wheel import AsyncReaper, CallbackTask, Timer


class FakeClock:
    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Op(DelayedOperation):
    """A delayed operation completable when ``ready`` is set (like a fetch waiting for bytes)."""

    def __init__(self, delay_ms: int, name: str = "op", ready: bool = False) -> None:
        super().__init__(delay_ms)
        self.name = name
        self.ready = ready
        self.events: list[str] = []

    def try_complete(self) -> bool:
        if self.ready:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.events.append("complete")

    def on_expiration(self) -> None:
        self.events.append("expired")

    def __repr__(self) -> str:
        return f"Op({self.name})"


def make(purge_interval: int = 1000) -> tuple[DelayedOperationPurgatory[Op], Timer, FakeClock]:
    clock = FakeClock()
    timer = Timer(tick_ms=1, wheel_size=20, start_ms=0, clock=clock)
    return DelayedOperationPurgatory("test", timer, purge_interval=purge_interval), timer, clock


def advance(timer: Timer, clock: FakeClock, to: int) -> int:
    clock.now = to
    return timer.advance_clock(to)


# -- the basic cycle ----------------------------------------------------------------------------


def test_completes_immediately_when_possible_and_is_not_watched():
    p, timer, _ = make()
    op = Op(100, ready=True)
    assert p.try_complete_else_watch(op, ["tp-0"]) is True
    assert op.events == ["complete"]
    assert p.watched == 0 and p.delayed == 0 and timer.size == 0


def test_watch_then_complete_by_event_on_any_of_several_keys():
    p, timer, clock = make()
    op = Op(100)
    assert p.try_complete_else_watch(op, ["tp-0", "tp-1", "tp-2"]) is False
    assert p.watched == 3 and p.delayed == 1 and timer.size == 1
    assert p.check_and_complete("tp-1") == 0  # event, but not satisfiable yet
    assert op.events == []
    op.ready = True
    assert p.check_and_complete("tp-2") == 1
    assert op.events == ["complete"]
    assert p.delayed == 0 and timer.size == 0
    # The other keys still hold the completed op until checked or purged.
    assert p.watched == 2
    assert p.check_and_complete("tp-0") == 0
    assert p.watched == 1
    assert sorted(p.watched_keys()) == ["tp-1"]
    # It never expires afterwards.
    assert advance(timer, clock, 1000) == 0
    assert op.events == ["complete"]


def test_expiry_completes_then_calls_on_expiration_once():
    p, timer, clock = make()
    op = Op(50)
    p.try_complete_else_watch(op, ["a", "b"])
    assert advance(timer, clock, 49) == 0
    assert op.events == []
    assert advance(timer, clock, 50) == 1
    assert op.events == ["complete", "expired"]
    assert p.delayed == 0
    op.ready = True
    assert p.check_and_complete("a") == 0
    assert p.check_and_complete("b") == 0
    assert op.events == ["complete", "expired"]
    assert p.watched == 0


def test_many_ops_multiple_keys_events_and_expiries():
    p, timer, clock = make()
    ops = {i: Op(10 * (i + 1), name=str(i)) for i in range(10)}
    for i, op in ops.items():
        p.try_complete_else_watch(op, [f"k{i % 3}", "all"])
    assert p.delayed == 10 and p.watched == 20
    for i in (0, 3, 6, 9):  # k0 ops become satisfiable
        ops[i].ready = True
    assert p.check_and_complete("k0") == 4
    assert advance(timer, clock, 35) == 2  # ops 1 and 2 (expiring at 20, 30) time out
    assert [i for i, op in ops.items() if op.events == ["complete", "expired"]] == [1, 2]
    for op in ops.values():
        op.ready = True
    assert p.check_and_complete("all") == 4  # 4, 5, 7, 8
    assert p.delayed == 0 and timer.size == 0
    assert advance(timer, clock, 10_000) == 0
    for op in ops.values():
        assert op.events.count("complete") == 1


# -- exactly once -------------------------------------------------------------------------------


def test_force_complete_is_idempotent_and_run_after_completion_does_nothing():
    op = Op(10)
    assert op.force_complete() is True
    assert op.force_complete() is False
    op.run()
    assert op.events == ["complete"]
    assert op.is_completed


def test_event_completion_racing_expiry_in_the_same_tick_completes_once():
    # A task due in the same bucket runs first, makes the op satisfiable and fires the event;
    # the op's own expiry entry, later in the same batch, must then not run.
    p, timer, clock = make()
    op = Op(20)

    def append_to_partition() -> None:
        op.ready = True
        assert p.check_and_complete("tp") == 1

    timer.add(CallbackTask(20, append_to_partition))
    p.try_complete_else_watch(op, ["tp"])
    assert advance(timer, clock, 20) == 1  # only the append ran: the expiry was cancelled
    assert op.events == ["complete"]


def test_expiry_racing_event_in_the_same_tick_completes_once():
    p, timer, clock = make()
    op = Op(20)
    p.try_complete_else_watch(op, ["tp"])
    seen: list[int] = []
    timer.add(CallbackTask(20, lambda: (setattr(op, "ready", True), seen.append(p.check_and_complete("tp")))))
    assert advance(timer, clock, 20) == 2
    assert op.events == ["complete", "expired"]
    assert seen == [0]


def test_on_complete_reentering_the_purgatory():
    # Completing one op appends to another key, which completes a second op (as produce -> fetch).
    p, timer, clock = make()
    second = Op(100, name="second")

    class Chained(Op):
        def on_complete(self) -> None:
            super().on_complete()
            second.ready = True
            p.check_and_complete("tp-b")
            p.check_and_complete("tp-a")  # re-entrant check of the key being iterated

    first = Chained(100, name="first")
    p.try_complete_else_watch(first, ["tp-a"])
    p.try_complete_else_watch(second, ["tp-b"])
    first.ready = True
    assert p.check_and_complete("tp-a") == 1
    assert first.events == ["complete"] and second.events == ["complete"]
    assert p.watched == 0 and p.delayed == 0


# -- purging ------------------------------------------------------------------------------------


def test_completed_ops_are_purged_from_other_keys_after_purge_interval():
    p, timer, clock = make(purge_interval=10)
    ops = [Op(1000, name=str(i)) for i in range(30)]
    for op in ops:
        p.try_complete_else_watch(op, ["event-key", "quiet-key"])
    for op in ops[:10]:
        op.ready = True
    p.check_and_complete("event-key")
    # 10 completed: not more than the interval, quiet-key still holds them.
    assert p.watched == 20 + 30
    ops[10].ready = True
    p.check_and_complete("event-key")  # 11 completed > 10: purge
    assert p.watched == 19 * 2
    assert p.delayed == 19
    # A new watch also triggers the check.
    for op in ops[11:23]:
        op.force_complete()
    assert p.watched == 19 * 2
    p.try_complete_else_watch(Op(1000, name="new"), ["other"])
    assert p.watched == 7 * 2 + 1


def test_purge_completed_on_demand():
    p, _, _ = make()
    ops = [Op(1000) for _ in range(5)]
    for op in ops:
        p.try_complete_else_watch(op, ["x", "y"])
    for op in ops[:3]:
        op.force_complete()
    assert p.watched == 10
    assert p.purge_completed() == 6
    assert p.watched == 4 and p.delayed == 2


# -- bad calls ----------------------------------------------------------------------------------


def test_empty_watch_keys_rejected_and_op_untouched():
    p, timer, _ = make()
    op = Op(10, ready=True)
    with pytest.raises(ValueError):
        p.try_complete_else_watch(op, [])
    assert op.events == [] and not op.is_completed
    assert p.watched == 0 and timer.size == 0
    # The op is still usable afterwards.
    assert p.try_complete_else_watch(op, ["k"]) is True


def test_watching_an_op_twice_is_rejected_and_nothing_lost():
    p, timer, clock = make()
    op = Op(10)
    p.try_complete_else_watch(op, ["k"])
    with pytest.raises(ValueError):
        p.try_complete_else_watch(op, ["k2"])
    assert p.watched == 1 and timer.size == 1
    assert advance(timer, clock, 10) == 1
    assert op.events == ["complete", "expired"]


def test_already_completed_op_is_not_watched():
    p, timer, _ = make()
    op = Op(10)
    op.force_complete()
    assert p.try_complete_else_watch(op, ["k"]) is False
    assert p.watched == 0 and timer.size == 0 and op.events == ["complete"]


def test_try_complete_raising_is_logged_others_still_complete(caplog):
    p, _, _ = make()

    class Broken(Op):
        def try_complete(self) -> bool:
            if self.ready:
                raise RuntimeError("broken check")
            return False

    bad = Broken(100, name="bad")
    good = Op(100, name="good")
    p.try_complete_else_watch(bad, ["k"])
    p.try_complete_else_watch(good, ["k"])
    bad.ready = good.ready = True
    with caplog.at_level(logging.ERROR, logger="odradek.broker.runtime.purgatory"):
        assert p.check_and_complete("k") == 1
    assert "broken check" in caplog.text
    assert good.events == ["complete"]
    assert not bad.is_completed and p.watched == 1 and p.delayed == 1  # still watched, not lost


def test_check_unknown_key_returns_zero():
    p, _, _ = make()
    assert p.check_and_complete("nobody") == 0


def test_cancel_for_key_returns_ops_without_completing_them():
    p, timer, clock = make()
    a, b = Op(10, name="a"), Op(10, name="b")
    p.try_complete_else_watch(a, ["gone"])
    p.try_complete_else_watch(b, ["gone", "other"])
    b.force_complete()
    assert p.cancel_for_key("gone") == [a]
    assert p.cancel_for_key("gone") == []
    assert p.delayed == 0 and timer.size == 0
    assert advance(timer, clock, 100) == 0
    assert a.events == []


def test_shutdown_returns_pending_ops_and_rejects_new_ones():
    p, timer, clock = make()
    a, b, c = Op(10, name="a"), Op(20, name="b"), Op(30, name="c")
    for op in (a, b, c):
        p.try_complete_else_watch(op, ["k"])
    c.force_complete()
    left = p.shutdown()
    assert set(left) == {a, b}
    assert timer.size == 0 and p.watched == 0 and p.delayed == 0
    assert advance(timer, clock, 1000) == 0
    assert a.events == [] and b.events == []
    with pytest.raises(RuntimeError):
        p.try_complete_else_watch(Op(10), ["k"])


def test_timer_disabled_never_expires():
    clock = FakeClock()
    timer = Timer(start_ms=0, clock=clock)
    p = DelayedOperationPurgatory("no-timer", timer, timer_enabled=False)
    op = Op(5)
    p.try_complete_else_watch(op, ["k"])
    assert timer.size == 0
    assert advance(timer, clock, 100) == 0
    op.ready = True
    assert p.check_and_complete("k") == 1


# -- on a real loop -----------------------------------------------------------------------------


async def test_purgatory_on_a_real_loop_with_the_async_reaper():
    """The reaper expires a watched operation at its deadline: not before it by the timer's own
    clock, and before a loop timer armed 5 ms after it has fired. Both hold on a machine however
    loaded: a late loop runs its due timers in deadline order, the reaper's first. (Wall-clock
    bounds, 40 +- 20 ms, broke under 3 test workers on 2 cores.) A reaper that wakes on a poll
    interval or late fires after the 5 ms one; one that advances the wheel early runs the expiry
    before the timer's clock reaches the deadline. 10 ms is within the first wheel (20 x 1 ms), so
    the reaper arms once, for exactly the deadline."""
    loop = asyncio.get_running_loop()
    timer = Timer()
    reaper = AsyncReaper(timer)
    reaper.start()
    p: DelayedOperationPurgatory[Op] = DelayedOperationPurgatory("fetch", timer)
    order: list[tuple[str, int]] = []

    class TimedOp(Op):
        def on_expiration(self) -> None:
            super().on_expiration()
            order.append(("expired", timer.now_ms()))

    expiring = TimedOp(10, name="expiring")
    satisfied = Op(30, name="satisfied")
    deadline_ms = timer.now_ms() + 10
    p.try_complete_else_watch(expiring, ["tp-0"])
    loop.call_later(0.015, lambda: order.append(("loop timer 5 ms later", timer.now_ms())))
    p.try_complete_else_watch(satisfied, ["tp-1"])
    satisfied_deadline_ms = timer.now_ms() + 30
    satisfied.ready = True
    assert p.check_and_complete("tp-1") == 1
    while len(order) < 2:
        await asyncio.sleep(0.002)
        assert timer.now_ms() - deadline_ms < 5000, order
    assert [what for what, _ in order] == ["expired", "loop timer 5 ms later"], order
    assert order[0][1] >= deadline_ms, (order, deadline_ms)
    assert expiring.events == ["complete", "expired"]
    # Completed before its deadline, the satisfied one never expires, also once that has passed.
    while timer.now_ms() < satisfied_deadline_ms + 10:
        await asyncio.sleep(0.005)
    assert satisfied.events == ["complete"]
    assert timer.size == 0
    reaper.stop()
    timer.shutdown()
