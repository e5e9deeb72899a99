"""``replication-offset-checkpoint``: each log dir's high watermarks, as Kafka keeps them.

Kafka's ReplicaManager writes, every ``replica.high.watermark.checkpoint.interval.ms`` and at
shutdown, one checkpoint file per log dir with the HW of each partition in it (version 0,
``<topic> <partition> <offset>`` entries, storage.checkpoint_file), and a partition made at
start-up takes its HW from there (capped at its log end) instead of trusting its log end: the
records a leader had not yet replicated stay invisible to consumers after a restart, and a
follower restarting without a leader epoch answer truncates to a HW that was really committed.

Blocking file I/O: the IO pool runs these.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from storage.checkpoint_file import CheckpointFormatError, read_checkpoint, write_checkpoint

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
