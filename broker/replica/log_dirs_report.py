"""DescribeLogDirs' answer: each log dir with the partitions it holds (Kafka's ReplicaManager.describeLogDirs).

Each dir: error_code (KAFKA_STORAGE_ERROR for an offline dir, listed with no partitions, as Kafka
does), log_dir (absolute), total_bytes and usable_bytes (statvfs; -1 when unknown or offline),
is_cordoned (v5, always false) and topics, each partition with partition_size, offset_lag and
is_future_key (a future log: a move between log dirs under way).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.replica.partition import Partition
    from odradek.protocol.messages import DescribeLogDirsPartition, DescribeLogDirsResult
    from odradek.storage.log_manager import LogManager

TopicPartition = tuple[str, int]


def describe_log_dirs(log_manager: LogManager, partitions: Mapping[TopicPartition, Partition],
                      wanted: dict[str, set[int]] | None) -> list[DescribeLogDirsResult]:
    """Blocking (statvfs and segment sizes; the IO pool runs it): each log dir with the
    partitions it holds, as DescribeLogDirs answers. ``wanted`` None means every partition.

    ``offset_lag`` is Kafka's getLogEndOffsetLag: for a current log how far its log end is
    behind the partition's high watermark, max(HW - LEO, 0) - 0 for a leader and for a follower
    alike, since neither's HW passes its own log end; for a future log (a move between log dirs
    under way, ``is_future_key``) how far it is behind the current log's end; -1 for a log whose
    partition is not (yet) served here. An offline dir is listed with KAFKA_STORAGE_ERROR and
    no partitions, as Kafka does.
    """
    lm = log_manager
    by_dir: dict[Path, list[tuple[TopicPartition, Any]]] = {d: [] for d in lm.log_dirs}
    for tp, lg in lm.all_logs().items():
        d = lm.log_dir_of(*tp)
        if d is not None:
            by_dir.setdefault(d, []).append((tp, lg))
    futures = lm.future_logs()
    for tp, (d, lg) in futures.items():
        by_dir.setdefault(d, []).append((tp, lg))
    results: list[DescribeLogDirsResult] = []
    offline = lm.offline_dirs
    for log_dir, logs in sorted(by_dir.items()):
        path = str(os.path.abspath(log_dir))
        if log_dir in offline:
            results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": path, "topics": [],
                            "total_bytes": -1, "usable_bytes": -1, "is_cordoned": False})
            continue
        topics: dict[str, list[DescribeLogDirsPartition]] = {}
        for (topic, index), lg in sorted(logs, key=lambda item: item[0]):
            if wanted is not None and index not in wanted.get(topic, ()):
                continue
            part = partitions.get((topic, index))
            is_future = (topic, index) in futures and futures[(topic, index)][1] is lg
            if part is None:
                lag = -1
            elif is_future:
                lag = part.log_end_offset - lg.log_end_offset
            else:
                lag = max(0, part.high_watermark - lg.log_end_offset)
            topics.setdefault(topic, []).append(
                {"partition_index": index, "partition_size": lg.size_in_bytes, "offset_lag": lag,
                 "is_future_key": is_future})
        try:
            st = os.statvfs(log_dir)
            total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError:
            total = usable = -1
        results.append({
            "error_code": ErrorCode.NONE,
            "log_dir": path,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
            "total_bytes": total,
            "usable_bytes": usable,
            "is_cordoned": False,  # v5 (KIP-1066): Odradek does not cordon log dirs
        })
    return results
