"""java.util.Random and Collections.shuffle, draw for draw, for the replica placer.

Kafka's controller places replicas with a ``java.util.Random`` (StripedReplicaPlacer's starting
offsets and its shuffles). Drawing the same numbers in the same order as Kafka means that, given the
same seed and the same brokers, controller/placement.py returns exactly the placements Kafka's own
class returns, which is how its tests check it (tests/unit/controller/test_placement_kafka.py runs
Kafka 4.4's class beside it).

The generator is the one java.util.Random's documentation specifies: a 48-bit linear congruential
generator, ``seed = (seed * 0x5DEECE66D + 0xB) mod 2**48``, ``next(bits)`` the top ``bits`` of the new
seed; ``new Random(s)`` starts from ``(s ^ 0x5DEECE66D) mod 2**48``. ``nextInt(bound)`` takes
``next(31)``: for a power of two its top bits (``bound * r >> 31``), otherwise ``r % bound``, drawing
again while ``r - r % bound + bound - 1`` overflows a Java int (so every value is equally likely).
``Collections.shuffle(list, rnd)`` on an ArrayList swaps element ``i - 1`` with ``nextInt(i)`` for ``i``
from the size down to 2.

Not thread-safe: one owner (the controller, under its write lock).
"""

from __future__ import annotations

import secrets
from typing import Any

_MULTIPLIER = 0x5DEECE66D
_ADDEND = 0xB
_MASK = (1 << 48) - 1
_INT_MAX = (1 << 31) - 1


class JavaRandom:
    """A java.util.Random: ``JavaRandom(s)`` draws what ``new Random(s)`` draws."""

    __slots__ = ("_seed",)

    def __init__(self, seed: int) -> None:
        self._seed = (seed ^ _MULTIPLIER) & _MASK

    @classmethod
    def unseeded(cls) -> JavaRandom:
        """Like ``new Random()``: a seed nobody can predict (Kafka's controller makes its placer's
        Random so)."""
        return cls(secrets.randbits(64))

    def _next(self, bits: int) -> int:
        self._seed = (self._seed * _MULTIPLIER + _ADDEND) & _MASK
        return self._seed >> (48 - bits)  # bits <= 31 here: never negative as a Java int

    def next_int(self, bound: int) -> int:
        """``nextInt(bound)``: uniform in [0, bound)."""
        if bound <= 0:
            raise ValueError("bound must be positive")
        r = self._next(31)
        m = bound - 1
        if bound & m == 0:
            return (bound * r) >> 31
        u = r
        r = u % bound
        while u - r + m > _INT_MAX:  # Java's `u - r + m < 0`: the int overflowed
            u = self._next(31)
            r = u % bound
        return r

    def shuffle(self, items: list[Any]) -> None:
        """``Collections.shuffle(items, this)`` for a random-access list, in place."""
        for i in range(len(items), 1, -1):
            j = self.next_int(i)
            items[i - 1], items[j] = items[j], items[i - 1]
