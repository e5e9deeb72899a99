"""Microbenchmark: odradek.broker.runtime.timing_wheel.Timer against a heapq timer with lazy deletion.

100k pending operations with random delays in [0, 30 s) (as purgatory timeouts), on a fake
millisecond clock so only data-structure cost is measured. Phases, each timed separately:

  insert   add N tasks
  cancel   cancel all N (purgatory ops completed by an event); the heap only flags them (lazy
           deletion) and pays when it pops them later, so "cancel+drain" also shows that cost
  expire   N fresh tasks, clock advanced in 1 ms steps over 30 s (a fixed-tick driver)
  jump     N fresh tasks, clock advanced straight to the next deadline (what AsyncReaper does)
  mixed    insert N, cancel 90 %, expire the rest by jumping (a realistic purgatory)

Usage: .venv/bin/python bench/timer_bench.py [--n 100000] [--repeat 3] [--seed 1] [--no-gc]
Runs in one thread on one loop-less process; the numbers are ops per second (best of --repeat).
"""

from __future__ import annotations

import argparse
import gc
import heapq
import itertools
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from odradek.broker.runtime.timing_wheel import Timer, TimerTask  # noqa: E402

MAX_DELAY_MS = 30_000


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class NoopTask(TimerTask):
    __slots__ = ()

    def run(self) -> None:
        pass


class HeapTask:
    __slots__ = ("delay_ms", "cancelled")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = delay_ms
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True  # lazy deletion: the heap item stays until popped

    def run(self) -> None:
        pass


class HeapTimer:
    """The obvious alternative: heapq of (expiration, seq, task), cancelled items skipped on pop."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._heap: list[tuple[int, int, HeapTask]] = []
        self._seq = itertools.count()

    def add(self, task: HeapTask) -> None:
        heapq.heappush(self._heap, (self._clock() + task.delay_ms, next(self._seq), task))

    def advance_clock(self, now_ms: int) -> int:
        heap = self._heap
        fired = 0
        while heap and heap[0][0] <= now_ms:
            task = heapq.heappop(heap)[2]
            if not task.cancelled:
                fired += 1
                task.run()
        return fired

    def next_expiration_ms(self) -> int | None:
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else None


def make_wheel() -> tuple[Timer, Clock, Callable[[int], NoopTask]]:
    clock = Clock()
    return Timer(tick_ms=1, wheel_size=20, start_ms=0, clock=clock), clock, NoopTask


def make_heap() -> tuple[HeapTimer, Clock, Callable[[int], HeapTask]]:
    clock = Clock()
    return HeapTimer(clock), clock, HeapTask


def drain_steps(timer, clock: Clock) -> int:
    fired = 0
    for now in range(1, MAX_DELAY_MS + 1):
        clock.now = now
        fired += timer.advance_clock(now)
    return fired


def drain_jumps(timer, clock: Clock) -> int:
    fired = 0
    while (nxt := timer.next_expiration_ms()) is not None:
        clock.now = max(clock.now, nxt)
        fired += timer.advance_clock(clock.now)
    return fired


def run_phases(factory, delays: list[int], cancel_order: list[int]) -> dict[str, float]:
    n = len(delays)
    out: dict[str, float] = {}

    timer, clock, task_cls = factory()
    tasks = [task_cls(d) for d in delays]
    t0 = time.perf_counter()
    for t in tasks:
        timer.add(t)
    out["insert"] = n / (time.perf_counter() - t0)

    t0 = time.perf_counter()
    for i in cancel_order:
        tasks[i].cancel()
    cancel_s = time.perf_counter() - t0
    out["cancel"] = n / cancel_s
    t0 = time.perf_counter()
    fired = drain_jumps(timer, clock)
    assert fired == 0, fired
    out["cancel+drain"] = n / (cancel_s + time.perf_counter() - t0)

    timer, clock, task_cls = factory()
    for d in delays:
        timer.add(task_cls(d))
    t0 = time.perf_counter()
    fired = drain_steps(timer, clock)
    out["expire (1 ms steps)"] = fired / (time.perf_counter() - t0)
    assert fired == n, fired

    timer, clock, task_cls = factory()
    for d in delays:
        timer.add(task_cls(d))
    t0 = time.perf_counter()
    fired = drain_jumps(timer, clock)
    out["expire (jump)"] = fired / (time.perf_counter() - t0)
    assert fired == n, fired

    timer, clock, task_cls = factory()
    t0 = time.perf_counter()
    tasks = [task_cls(d) for d in delays]
    for t in tasks:
        timer.add(t)
    for i in cancel_order[: n * 9 // 10]:
        tasks[i].cancel()
    fired = drain_jumps(timer, clock)
    out["mixed 90% cancel"] = n / (time.perf_counter() - t0)
    assert fired == n - n * 9 // 10, fired
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-gc", action="store_true", help="disable the cyclic GC while measuring")
    args = ap.parse_args()
    if args.no_gc:
        # Both timers allocate 100k objects per phase; the wheel's linked entries form cycles that
        # the collector traverses, so this separates structure cost from collector cost.
        gc.disable()

    rng = random.Random(args.seed)
    delays = [rng.randrange(MAX_DELAY_MS) for _ in range(args.n)]
    cancel_order = list(range(args.n))
    rng.shuffle(cancel_order)

    best: dict[str, dict[str, float]] = {}
    for name, factory in (("wheel", make_wheel), ("heapq", make_heap)):
        for _ in range(args.repeat):
            res = run_phases(factory, delays, cancel_order)
            cur = best.setdefault(name, res)
            for k, v in res.items():
                cur[k] = max(cur[k], v)

    gc_note = "gc off" if args.no_gc else "gc on"
    print(f"Python {sys.version.split()[0]}, N={args.n}, delays 0..{MAX_DELAY_MS} ms, best of {args.repeat}, {gc_note}")
    print(f"{'phase':<22}{'wheel ops/s':>14}{'heapq ops/s':>14}{'wheel/heapq':>13}")
    for phase in best["wheel"]:
        w, h = best["wheel"][phase], best["heapq"][phase]
        print(f"{phase:<22}{w:>14,.0f}{h:>14,.0f}{w / h:>12.2f}x")


if __name__ == "__main__":
    main()
