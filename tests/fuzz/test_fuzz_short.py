"""The CI fuzz run: fixed seed, a bounded number of cases, against a real broker subprocess.

Every served API is cut at every byte (the truncation sweep), then ``RANDOM_CASES`` generated and
mutated requests go out in bursts over 8 connections (see tests/fuzz/harness.py for what is
watched). A failure prints each finding with its (seed, case): replay one with
``python -m tests.fuzz --seed SEED --case N``. The long run is ``make fuzz FUZZ_MINUTES=30``.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.fuzz.harness import Harness
from tests.fuzz.mutate import sweep_indexes

SEED = 2026
RANDOM_CASES = 40_000


def test_fuzz_short(tmp_path: Path) -> None:
    h = Harness(data_dir=tmp_path, conns=8, burst=300)
    started = time.monotonic()
    h.start()
    try:
        h.run(SEED, sweep_indexes(SEED, h.apis))
        h.run(SEED, range(RANDOM_CASES))
    finally:
        h.stop()
    print(f"fuzz: {h.sent} inputs in {time.monotonic() - started:.0f}s, {h.skipped_known} known-finding cases "
          f"skipped, outcomes {h.outcomes}, peak RSS {h.peak_rss_mb:.0f} MB, slowest probe {h.probe_max_s:.2f}s")
    assert not h.findings, "fuzz findings:\n" + "\n".join(f.describe() for f in h.findings)
    # The run must have reached the broker's handlers, not only its decoder.
    assert h.outcomes["answered"] > 2000, h.outcomes
