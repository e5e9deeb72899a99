"""``replication-offset-checkpoint``: each log dir's high watermarks, as Kafka keeps them.

Kafka's ReplicaManager writes, every ``replica.high.watermark.checkpoint.interval.ms`` and at
shutdown, one checkpoint file per log dir with the HW of each partition in it (version 0,
``<topic> <partition> <offset>`` entries, odradek.storage.checkpoint_file), and a partition made at
start-up takes its HW from there (capped at its log end) instead of trusting its log end: the
records a leader had not yet replicated stay invisible to consumers after a restart, and a
follower restarting without a leader epoch answer truncates to a HW that was really committed.

Blocking file I/O: the IO pool runs these. Writes go through one :class:`HighWatermarkWriter`
per broker, which serializes them (Kafka's CheckpointFile writes under a lock): every write of a
dir's file goes through the same ``.tmp`` name, so two writes at once (the periodic one still
running in one pool thread when shutdown writes the last one in another) made one ``rename`` fail
with ENOENT, which took the log dir offline and made a clean shutdown exit 1.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from odradek.storage.checkpoint_file import CheckpointFormatError, read_checkpoint, write_checkpoint

log = logging.getLogger(__name__)

HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"

TopicPartition = tuple[str, int]


def read_high_watermarks(log_dirs: Iterable[Path]) -> dict[TopicPartition, int]:
    """The checkpointed HW of every partition in ``log_dirs``; a malformed file counts as none."""
    out: dict[TopicPartition, int] = {}
    for log_dir in log_dirs:
        path = Path(log_dir) / HIGH_WATERMARK_CHECKPOINT
        try:
            entries = read_checkpoint(path, 3)
        except (CheckpointFormatError, OSError, ValueError) as exc:
            log.warning("ignoring %s: %s", path, exc)
            continue
        for topic, partition, offset in entries:
            out[(topic, int(partition))] = int(offset)
    return out


def write_high_watermarks(by_dir: Mapping[Path, list[tuple[str, int, int]]],
                          on_failure: Callable[[Path, OSError], None]) -> None:
    """Write each dir's (topic, partition, HW) entries; ``on_failure(dir, error)`` for a dir that
    could not be written (Kafka takes the dir offline)."""
    for log_dir, entries in by_dir.items():
        try:
            write_checkpoint(Path(log_dir) / HIGH_WATERMARK_CHECKPOINT, sorted(entries))
        except OSError as exc:
            on_failure(log_dir, exc)


class HighWatermarkWriter:
    """Writes snapshots of the HWs one at a time, never one older than a snapshot already written.

    :meth:`write_later` is called where the HWs are read (the loop) and numbers the snapshot then;
    the job it returns runs in a pool thread. Pool threads may run the jobs out of the order their
    snapshots were taken, and an older snapshot is then skipped rather than written over a newer one.
    """

    def __init__(self, on_failure: Callable[[Path, OSError], None]) -> None:
        self._on_failure = on_failure
        self._lock = threading.Lock()
        self._sequence = itertools.count(1)
        self._written = 0

    def write_later(self, by_dir: Mapping[Path, list[tuple[str, int, int]]]) -> Callable[[], bool]:
        """A job that writes ``by_dir`` unless a snapshot taken after it was written first; the job
        returns True if it wrote."""
        sequence = next(self._sequence)

        def write() -> bool:
            with self._lock:
                if sequence <= self._written:
                    return False
                write_high_watermarks(by_dir, self._on_failure)
                self._written = sequence
                return True

        return write
