"""Kafka's sampled ``Rate`` (org.apache.kafka.common.metrics.stats.Rate over SampledTotal) and the
throttle time of a quota violation (QuotaUtils.throttleTime / boundedThrottleTime).

The rate keeps ``samples`` (``quota.window.num``, 11) buckets of ``window_ms``
(``quota.window.size.seconds``, 1 s):
1. ``record(value, now)`` adds to the current bucket; a bucket whose window has passed is recycled
   as the new current one (Kafka's SampledStat.advance).
2. Before measuring, buckets older than ``samples * window_ms`` are reset (purgeObsoleteSamples).
3. The rate is the sum of the buckets divided by the window the sum covers: from the oldest
   bucket's start to now, but never less than ``samples - 1`` full windows (Rate.windowSize), so a
   client that just started is measured as if it had been quiet before, not at its burst rate.
4. A violation (rate above the quota) costs ``(rate - quota) / quota * window`` ms: the delay that,
   with nothing else recorded, brings the rate over the longer window back to the quota
   (X = (O - T) / T * W). Request-time and connection quotas bound it by one window
   (boundedThrottleTime), byte quotas do not.

Not thread-safe: each rate is used on one loop (the handler loop for client quotas, the handler
loop's acceptor for connection rates).
"""

from __future__ import annotations


class Rate:
    __slots__ = ("samples", "window_ms", "_values", "_starts", "_current")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = max(samples, 2)  # Kafka's MetricConfig needs two samples for a rate
        self.window_ms = window_ms
        self._values: list[float] = []
        self._starts: list[float] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        if not self._values:
            self._values.append(0.0)
            self._starts.append(now_ms)
            self._current = 0
        elif now_ms - self._starts[self._current] >= self.window_ms:
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._values):
                self._values.append(0.0)
                self._starts.append(now_ms)
            else:
                self._values[self._current] = 0.0
                self._starts[self._current] = now_ms
        self._values[self._current] += value

    def _purge(self, now_ms: float) -> None:
        expire = self.samples * self.window_ms
        starts = self._starts
        for i, start in enumerate(starts):
            if now_ms - start >= expire:
                self._values[i] = 0.0
                starts[i] = now_ms

    def window_size_ms(self, now_ms: float) -> float:
        """Rate.windowSize: the span the measured total covers (after purging)."""
        self._purge(now_ms)
        oldest = min(self._starts) if self._starts else now_ms
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return elapsed

    def measure(self, now_ms: float) -> float:
        """Units per second."""
        window = self.window_size_ms(now_ms)
        return sum(self._values) / (window / 1000.0)


def throttle_time_ms(rate: Rate, bound: float, now_ms: float, max_ms: float | None = None) -> int:
    """0 while ``rate`` is within ``bound`` (Quota.acceptable: value <= bound), else Kafka's delay."""
    value = rate.measure(now_ms)
    if value <= bound:
        return 0
    if bound <= 0:  # a zero quota: Kafka's division gives infinity; hold the longest we measure
        return int(max_ms if max_ms is not None else rate.samples * rate.window_ms)
    throttle = (value - bound) / bound * rate.window_size_ms(now_ms)
    if max_ms is not None:
        throttle = min(throttle, max_ms)
    return int(round(throttle))
