"""``ReportedOnce``: an error logged the first time per key; bounded (tests/integration/test_fetch_hardening.py
shows it on a segment file cut under a live broker)."""

from __future__ import annotations

from odradek.broker.runtime.reported_once import ReportedOnce


def test_each_key_is_first_once() -> None:
    seen = ReportedOnce()
    assert [seen.first(k) for k in ("a", "b", "a", "b", "c")] == [True, True, False, False, True]


def test_past_its_limit_new_keys_are_reported_each_time_and_not_held() -> None:
    seen = ReportedOnce(limit=2)
    assert seen.first("a") and seen.first("b")
    assert seen.first("c") and seen.first("c")  # not remembered: the set is full
    assert not seen.first("a")  # still held
