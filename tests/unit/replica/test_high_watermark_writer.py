"""replication-offset-checkpoint writes are serialized and never go back to an older snapshot.

The broker writes the file from IO-pool threads: the periodic write and the one at shutdown could
run at once, and both go through the same ``.tmp`` name, so one rename failed with ENOENT and took
the log dir offline (a controlled shutdown then exited 1 in the fault suite).
"""

from __future__ import annotations

import threading
from pathlib import Path

from odradek.broker.replica.high_watermark_checkpoint import HighWatermarkWriter, read_high_watermarks


def test_concurrent_writes_never_fail_and_the_newest_snapshot_stays(tmp_path: Path) -> None:
    failures: list[tuple[Path, OSError]] = []
    writer = HighWatermarkWriter(lambda d, e: failures.append((d, e)))
    jobs = [writer.write_later({tmp_path: [("t", p, n * 10 + p) for p in range(50)]}) for n in range(400)]
    start = threading.Barrier(8)

    def run(mine: list) -> None:
        start.wait()
        for job in mine:
            job()

    threads = [threading.Thread(target=run, args=(jobs[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    # The last snapshot taken is the one on disk, whichever thread wrote last.
    assert read_high_watermarks([tmp_path]) == {("t", p): 399 * 10 + p for p in range(50)}


def test_an_older_snapshot_is_not_written_over_a_newer_one(tmp_path: Path) -> None:
    writer = HighWatermarkWriter(lambda d, e: None)
    older = writer.write_later({tmp_path: [("t", 0, 10)]})
    newer = writer.write_later({tmp_path: [("t", 0, 20)]})
    assert newer()
    assert not older()
    assert read_high_watermarks([tmp_path]) == {("t", 0): 20}
