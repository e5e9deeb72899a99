"""``ReportedOnce``: the things an error was already logged for.

A condition every retry meets again - a segment file cut under the broker, met by each client that
fetches from it - is logged at error level the first time and quietly after. Bounded: once
``limit`` keys are held, a new key is reported every time rather than remembered, so a flood of
distinct keys cannot grow the set without end.
"""

from __future__ import annotations

from collections.abc import Hashable


class ReportedOnce:
    def __init__(self, limit: int = 10_000) -> None:
        self.limit = limit
        self._seen: set[Hashable] = set()

    def first(self, key: Hashable) -> bool:
        """True the first time ``key`` is reported (and whenever the set is full), else False."""
        if key in self._seen:
            return False
        if len(self._seen) < self.limit:
            self._seen.add(key)
        return True
