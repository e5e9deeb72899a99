"""Hierarchical timing wheel and the timer built on it (Kafka's SystemTimer / TimingWheel).

Behaviour (as org.apache.kafka.server.util.timer in Kafka 4.0):

1. A ``TimingWheel`` has ``wheel_size`` buckets of ``tick_ms`` each, so it spans
   ``interval_ms = tick_ms * wheel_size``. Its ``current_time_ms`` is always a multiple of ``tick_ms``.
   A task expiring at ``e`` goes to bucket ``(e // tick_ms) % wheel_size`` whose expiration is the
   *start* of its tick, ``(e // tick_ms) * tick_ms``; so a task fires up to ``tick_ms - 1`` early,
   never late (beyond the driver's own latency).
2. ``add`` returns False when the task is already due (``e < current_time_ms + tick_ms``) or
   cancelled; the caller (``Timer``) then runs it instead of storing it.
3. A task beyond the interval goes to an overflow wheel, created lazily, whose tick is the lower
   wheel's interval; levels stack as far as needed. When an overflow bucket expires, its entries are
   re-inserted from the bottom wheel: they cascade to finer wheels, or are run when due.
4. Buckets are circular doubly-linked lists with a sentinel (``TimerTaskList``). Each entry knows its
   list, so insert and cancel are O(1); insert is O(levels) including the overflow descent.
5. Buckets sit in a heap ordered by expiration (Kafka uses a DelayQueue). A bucket is pushed only
   when its expiration changes, i.e. once per rotation of its wheel, not once per task; so the heap
   holds at most one item per non-empty bucket and ``advance_clock`` jumps straight to the next
   non-empty bucket: there are no empty ticks, however long the clock was idle.
6. A bucket slot can only be reused for a new expiration after its old expiration has been
   reached and the bucket flushed; so a bucket in the heap never changes expiration under it
   (a heap item whose stored expiration disagrees with its bucket is skipped, defensively).

Differences from Kafka, and why:

* Kafka's SystemTimer runs due tasks on an executor thread and protects the wheel with a
  read-write lock, so ``add`` may race ``advanceClock``. Odradek's timer is owned by one asyncio
  event loop: ``add``, ``cancel`` and ``advance_clock`` must all be called on that loop, and there
  are no locks. Due tasks run *inside* ``advance_clock``, never inside ``add``: a task that is
  already due when added waits in a "ready" list for the next ``advance_clock`` (the reaper asks for
  one at once), which keeps ``add`` free of re-entrant callbacks, as Kafka's executor hand-off does.
* Kafka's reaper thread polls the DelayQueue with a 200 ms timeout. ``AsyncReaper`` instead sleeps
  on the loop (``call_later``) until the earliest bucket, and re-arms when a bucket earlier than the
  armed deadline is pushed.
* ``advance_clock`` also moves the wheels to ``now_ms`` once the due buckets are flushed (Kafka
  only moves them to the expiration of a polled bucket). This keeps new tasks in the finest wheel
  instead of cascading through overflow levels after an idle period; rule 6 still holds because
  every bucket that expired at or before ``now_ms`` has just been flushed.

Time is an integer millisecond count from an injectable clock (default: ``storage.clock.monotonic_ms``),
so unit tests drive the timer deterministically with ``advance_clock(now_ms)``.

Callers: the event loop that owns the Timer only. Not thread-safe.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable, Iterator

from odradek.storage.clock import monotonic_ms

__all__ = [
    "AsyncReaper",
    "CallbackTask",
    "Timer",
    "TimerTask",
    "TimerTaskEntry",
    "TimerTaskList",
    "TimingWheel",
]

log = logging.getLogger(__name__)

# Kafka's SystemTimer defaults (tickMs=1, wheelSize=20).
DEFAULT_TICK_MS = 1
DEFAULT_WHEEL_SIZE = 20


class TimerTask:
    """Something to run once ``delay_ms`` after it is added to a Timer; subclasses override ``run``.

    A task is in at most one bucket at a time: adding it again moves it (the old entry is unlinked).
    """

    __slots__ = ("delay_ms", "_entry")

    def __init__(self, delay_ms: int) -> None:
        self.delay_ms = int(delay_ms)
        # The entry that currently schedules this task; None once cancelled (or before first add).
        self._entry: TimerTaskEntry | None = None

    def run(self) -> None:
        """Called on the timer's loop when the task expires."""
        raise NotImplementedError

    def cancel(self) -> None:
        """Unschedule the task in O(1). A cancelled task never runs; cancelling twice is harmless."""
        entry = self._entry
        if entry is not None:
            self._entry = None
            lst = entry.list
            if lst is not None:
                lst.remove(entry)

    @property
    def is_cancelled(self) -> bool:
        """Kafka's isCancelled: True when no entry holds the task (cancelled, or never added)."""
        return self._entry is None

    @property
    def is_pending(self) -> bool:
        """True while the task sits in a timer bucket (or the ready list) waiting to run."""
        entry = self._entry
        return entry is not None and entry.list is not None


class CallbackTask(TimerTask):
    """A TimerTask that calls a zero-argument function: convenient for one-off timeouts."""

    __slots__ = ("_fn",)

    def __init__(self, delay_ms: int, fn: Callable[[], object]) -> None:
        super().__init__(delay_ms)
        self._fn = fn

    def run(self) -> None:
        self._fn()


class TimerTaskEntry:
    """A task's place in a bucket: the absolute expiration and the links of the bucket's list."""

    __slots__ = ("task", "expiration_ms", "list", "next", "prev")

    def __init__(self, task: TimerTask | None, expiration_ms: int) -> None:
        self.task = task
        self.expiration_ms = expiration_ms
        self.list: TimerTaskList | None = None
        self.next: TimerTaskEntry | None = None
        self.prev: TimerTaskEntry | None = None
        if task is not None:
            # A task re-added while still scheduled moves: unlink its previous entry first.
            old = task._entry
            if old is not None and old is not self and old.list is not None:
                old.list.remove(old)
            task._entry = self

    @property
    def cancelled(self) -> bool:
        # Superseded entries count as cancelled too: the task now belongs to a newer entry.
        return self.task is None or self.task._entry is not self

    def remove(self) -> None:
        lst = self.list
        if lst is not None:
            lst.remove(self)


class _TaskCounter:
    """Number of entries in all lists of one Timer (Kafka shares an AtomicInteger the same way)."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class TimerTaskList:
    """A bucket: circular doubly-linked list of entries with a sentinel root, plus its expiration.

    root.next is the head, root.prev the tail; insertion order is kept (tasks of one bucket run in
    the order they were added). ``expiration_ms`` is -1 while the bucket is not in the heap.
    """

    __slots__ = ("_root", "_counter", "size", "expiration_ms")

    def __init__(self, counter: _TaskCounter | None = None) -> None:
        root = TimerTaskEntry(None, -1)
        root.next = root
        root.prev = root
        self._root = root
        self._counter = counter if counter is not None else _TaskCounter()
        self.size = 0
        self.expiration_ms = -1

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the expiration; True when it changed, i.e. the bucket must be (re)pushed on the heap."""
        changed = self.expiration_ms != expiration_ms
        self.expiration_ms = expiration_ms
        return changed

    def add(self, entry: TimerTaskEntry) -> None:
        """Append at the tail in O(1); an entry already in another list is moved."""
        if entry.list is not None:
            entry.list.remove(entry)
        root = self._root
        tail = root.prev
        assert tail is not None
        entry.next = root
        entry.prev = tail
        entry.list = self
        tail.next = entry
        root.prev = entry
        self.size += 1
        self._counter.n += 1

    def remove(self, entry: TimerTaskEntry) -> None:
        """Unlink in O(1); a no-op when the entry is not in this list."""
        if entry.list is not self:
            return
        nxt = entry.next
        prv = entry.prev
        assert nxt is not None and prv is not None
        nxt.prev = prv
        prv.next = nxt
        entry.next = None
        entry.prev = None
        entry.list = None
        self.size -= 1
        self._counter.n -= 1

    def flush(self) -> list[TimerTaskEntry]:
        """Detach and return every entry (in order) and mark the bucket as not queued.

        The whole list is detached before the caller touches any entry, so callbacks that add tasks
        cannot extend the list being drained.
        """
        root = self._root
        out: list[TimerTaskEntry] = []
        entry = root.next
        while entry is not root:
            assert entry is not None
            nxt = entry.next
            entry.next = None
            entry.prev = None
            entry.list = None
            out.append(entry)
            entry = nxt
        root.next = root
        root.prev = root
        self._counter.n -= self.size
        self.size = 0
        self.expiration_ms = -1
        return out

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[TimerTask]:
        """The live tasks in list order (for tests and debugging)."""
        root = self._root
        entry = root.next
        while entry is not root:
            assert entry is not None
            nxt = entry.next
            if not entry.cancelled and entry.task is not None:
                yield entry.task
            entry = nxt


class TimingWheel:
    """One level of the hierarchy; see the module docstring for the rules."""

    __slots__ = (
        "tick_ms",
        "wheel_size",
        "interval_ms",
        "current_time_ms",
        "buckets",
        "overflow_wheel",
        "_counter",
        "_offer",
    )

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        counter: _TaskCounter,
        offer: Callable[[TimerTaskList], None],
    ) -> None:
        if tick_ms <= 0 or wheel_size <= 1:
            raise ValueError(f"tick_ms must be > 0 and wheel_size > 1, got {tick_ms} and {wheel_size}")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_time_ms = start_ms - (start_ms % tick_ms)
        self.buckets = [TimerTaskList(counter) for _ in range(wheel_size)]
        self.overflow_wheel: TimingWheel | None = None
        self._counter = counter
        # Called with a bucket whose expiration just changed: the Timer pushes it on its heap.
        self._offer = offer

    def add(self, entry: TimerTaskEntry) -> bool:
        """Store the entry in this wheel or an overflow wheel; False if cancelled or already due."""
        wheel = self
        expiration = entry.expiration_ms
        if entry.cancelled:
            return False
        # Climb levels iteratively rather than recursively: cheaper in Python, same result as Kafka.
        while True:
            tick = wheel.tick_ms
            current = wheel.current_time_ms
            if expiration < current + tick:
                return False
            if expiration < current + wheel.interval_ms:
                virtual_id = expiration // tick
                bucket = wheel.buckets[virtual_id % wheel.wheel_size]
                # TimerTaskList.add, inlined: this is the hot path of every insert and cascade.
                if entry.list is not None:
                    entry.list.remove(entry)
                root = bucket._root
                tail = root.prev
                entry.next = root
                entry.prev = tail
                entry.list = bucket
                # root.prev is never None (a list is circular); add()'s assert is left out here.
                tail.next = entry  # type: ignore[union-attr]
                root.prev = entry
                bucket.size += 1
                wheel._counter.n += 1
                bucket_expiration = virtual_id * tick
                if bucket.expiration_ms != bucket_expiration:
                    # The bucket was empty/flushed (or held an older rotation): queue it once.
                    bucket.expiration_ms = bucket_expiration
                    wheel._offer(bucket)
                return True
            overflow = wheel.overflow_wheel
            if overflow is None:
                overflow = TimingWheel(
                    wheel.interval_ms, wheel.wheel_size, current, wheel._counter, wheel._offer
                )
                wheel.overflow_wheel = overflow
            wheel = overflow

    def advance_clock(self, time_ms: int) -> None:
        """Move this wheel (and the levels above) to ``time_ms`` rounded down to each one's tick."""
        wheel: TimingWheel | None = self
        while wheel is not None and time_ms >= wheel.current_time_ms + wheel.tick_ms:
            wheel.current_time_ms = time_ms - (time_ms % wheel.tick_ms)
            # Kafka passes the lower wheel's rounded time upwards; rounding is monotone, same thing.
            time_ms = wheel.current_time_ms
            wheel = wheel.overflow_wheel

    @property
    def levels(self) -> int:
        """Number of wheels in the hierarchy from this one upwards (for tests and metrics)."""
        n = 0
        wheel: TimingWheel | None = self
        while wheel is not None:
            n += 1
            wheel = wheel.overflow_wheel
        return n


class Timer:
    """Kafka's SystemTimer for one asyncio loop: add tasks, advance the clock, due tasks run.

    Drive it either by calling ``advance_clock(now_ms)`` (tests, or a caller with its own tick), or
    with an ``AsyncReaper`` which does so on the loop exactly when the earliest bucket is due.
    """

    def __init__(
        self,
        tick_ms: int = DEFAULT_TICK_MS,
        wheel_size: int = DEFAULT_WHEEL_SIZE,
        start_ms: int | None = None,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self._clock = clock
        self._counter = _TaskCounter()
        # Heap items are (bucket expiration, sequence, bucket); the sequence breaks ties because
        # buckets themselves are not ordered.
        self._queue: list[tuple[int, int, TimerTaskList]] = []
        self._seq = itertools.count()
        self._ready = TimerTaskList(self._counter)
        self._wakeup: Callable[[int], None] | None = None
        self._closed = False
        self.wheel = TimingWheel(
            tick_ms, wheel_size, clock() if start_ms is None else start_ms, self._counter, self._offer
        )

    # -- scheduling ------------------------------------------------------------------------------

    def now_ms(self) -> int:
        return self._clock()

    def add(self, task: TimerTask) -> None:
        """Schedule ``task`` to run ``task.delay_ms`` from now (re-adding a task reschedules it).

        A task that is already due is not run here but on the next ``advance_clock``.
        """
        if self._closed:
            raise RuntimeError("timer is shut down")
        self._add_entry(TimerTaskEntry(task, self._clock() + task.delay_ms))

    def _add_entry(self, entry: TimerTaskEntry) -> None:
        if not self.wheel.add(entry) and not entry.cancelled:
            self._ready.add(entry)
            if self._wakeup is not None:
                self._wakeup(entry.expiration_ms)

    def _offer(self, bucket: TimerTaskList) -> None:
        expiration = bucket.expiration_ms
        heapq.heappush(self._queue, (expiration, next(self._seq), bucket))
        if self._wakeup is not None:
            self._wakeup(expiration)

    # -- expiry ----------------------------------------------------------------------------------

    def advance_clock(self, now_ms: int | None = None) -> int:
        """Flush every bucket due at ``now_ms`` (default: the clock), run due tasks; return how many ran.

        Tasks run in bucket-expiration order, and in insertion order within a bucket. A task
        cancelled by an earlier task of the same batch does not run. Exceptions from a task are
        logged and do not stop the others. Tasks added by running tasks (even with delay 0) wait
        for the next call, so a task that re-adds itself cannot spin this loop.
        """
        if now_ms is None:
            now_ms = self._clock()
        queue = self._queue
        wheel = self.wheel
        while queue and queue[0][0] <= now_ms:
            expiration, _, bucket = heapq.heappop(queue)
            if bucket.expiration_ms != expiration:
                continue  # stale heap item (see rule 6); cannot happen, but never flush twice
            wheel.advance_clock(expiration)
            # Re-insert: entries cascade into finer buckets, or land in the ready list when due.
            for entry in bucket.flush():
                self._add_entry(entry)
        wheel.advance_clock(now_ms)
        if not self._ready.size:
            return 0
        fired = 0
        for entry in self._ready.flush():
            task = entry.task
            if task is None or task._entry is not entry:
                continue  # cancelled or re-added by a task that ran earlier in this batch
            fired += 1
            try:
                task.run()
            except Exception:
                log.exception("timer task %r failed", task)
        return fired

    def next_expiration_ms(self) -> int | None:
        """When ``advance_clock`` next has work: the earliest bucket (or now if tasks are ready)."""
        if self._ready.size:
            return self._ready_deadline()
        queue = self._queue
        while queue and queue[0][2].expiration_ms != queue[0][0]:
            heapq.heappop(queue)  # drop stale items so the answer is exact
        return queue[0][0] if queue else None

    def _ready_deadline(self) -> int:
        root = self._ready._root
        head = root.next
        assert head is not None and head is not root
        return head.expiration_ms

    @property
    def size(self) -> int:
        """Tasks scheduled and not yet run or cancelled (Kafka's size())."""
        return self._counter.n

    @property
    def is_shutdown(self) -> bool:
        return self._closed

    def shutdown(self) -> None:
        """Drop every pending task without running it (they become cancelled); later adds raise."""
        self._closed = True
        for _, _, bucket in self._queue:
            for entry in bucket.flush():
                if entry.task is not None and entry.task._entry is entry:
                    entry.task._entry = None
        self._queue.clear()
        for entry in self._ready.flush():
            if entry.task is not None and entry.task._entry is entry:
                entry.task._entry = None
        if self._wakeup is not None:
            self._wakeup(-1)


class AsyncReaper:
    """Drives a Timer from an asyncio loop: sleeps until the earliest bucket, then advances.

    Unlike Kafka's ExpirationReaper thread (which polls every 200 ms), this arms one loop timer
    (``call_later``) for the earliest non-empty bucket and re-arms it whenever the Timer pushes an
    earlier bucket, so an idle broker does not wake up at all. Start and stop it on the owning loop.
    """

    def __init__(self, timer: Timer, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.timer = timer
        self._loop = loop
        self._handle: asyncio.TimerHandle | None = None
        self.armed_at_ms: int | None = None  # deadline the loop timer is armed for, if any
        self._running = False
        self._firing = False  # inside advance_clock: _fire re-arms once at the end

    def start(self) -> None:
        if self._running:
            return
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if self.timer._wakeup is not None:
            raise RuntimeError("the timer already has a reaper")
        self._running = True
        self.timer._wakeup = self._on_deadline
        self._rearm()

    def stop(self) -> None:
        self._running = False
        if self.timer._wakeup == self._on_deadline:
            self.timer._wakeup = None
        self._disarm()

    @property
    def running(self) -> bool:
        return self._running

    def _disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.armed_at_ms = None

    def _on_deadline(self, expiration_ms: int) -> None:
        # Called by the Timer when a bucket is queued or a task becomes ready; -1 means shutdown.
        if self.timer.is_shutdown:
            self.stop()
            return
        if self._firing:
            return
        if self.armed_at_ms is None or expiration_ms < self.armed_at_ms:
            self._arm(expiration_ms)

    def _arm(self, deadline_ms: int) -> None:
        assert self._loop is not None
        if self._handle is not None:
            self._handle.cancel()
        delay_ms = max(0, deadline_ms - self.timer.now_ms())
        self.armed_at_ms = deadline_ms
        self._handle = self._loop.call_later(delay_ms / 1000.0, self._fire)

    def _rearm(self) -> None:
        self._disarm()
        if not self._running or self.timer.is_shutdown:
            return
        deadline = self.timer.next_expiration_ms()
        if deadline is not None:
            self._arm(deadline)

    def _fire(self) -> None:
        self._handle = None
        self.armed_at_ms = None
        if not self._running:
            return
        self._firing = True
        try:
            self.timer.advance_clock()
        finally:
            self._firing = False
            # If the loop woke us a little early (loop clocks can be coarser than ours), nothing was
            # due; re-arming for the same deadline costs one more short sleep.
            self._rearm()
