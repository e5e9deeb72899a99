"""DescribeLogDirs (api key 35): each log dir with the partitions it holds and their sizes.

Versions 0-4.
- v1: same as v0.
- v2: flexible.
- v3: top-level error_code.
- v4: total_bytes and usable_bytes of each log dir's file system (KIP-827).

``topics`` null means every partition. Sizes are the real bytes of the partition's segment
files; ``offset_lag`` is the log end offset minus the high watermark (0 on one node). An offline
log dir is listed with KAFKA_STORAGE_ERROR and no partitions, as Kafka does.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from protocol.errors import ErrorCode

API_KEY = 35
NAME = "DescribeLogDirs"
VERSIONS = (0, 4)


def _describe(rm: Any, wanted: dict[str, set[int]] | None) -> list[dict]:
    """Blocking (statvfs and segment sizes): runs on the IO pool."""
    results = []
    offline = rm.log_manager.offline_dirs
    for log_dir, logs in sorted(rm.log_dirs_info().items()):
        path = str(os.path.abspath(log_dir))
        if log_dir in offline:
            results.append({"error_code": ErrorCode.KAFKA_STORAGE_ERROR, "log_dir": path, "topics": [],
                            "total_bytes": -1, "usable_bytes": -1})
            continue
        topics: dict[str, list[dict]] = {}
        for (topic, index), lg in sorted(logs, key=lambda item: item[0]):
            if wanted is not None and index not in wanted.get(topic, ()):
                continue
            part = rm.partitions.get((topic, index))
            lag = max(0, lg.log_end_offset - part.high_watermark) if part is not None else 0
            topics.setdefault(topic, []).append(
                {"partition_index": index, "partition_size": lg.size_in_bytes, "offset_lag": lag,
                 "is_future_key": False})
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
        })
    return results


async def handle(request: Any) -> dict:
    broker = request.broker
    requested = request.body["topics"]
    wanted = None if requested is None else {t["topic"]: set(t["partitions"]) for t in requested}
    loop = asyncio.get_running_loop()
    results = await loop.run_in_executor(broker.io_pool, _describe, broker.replica_manager, wanted)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}


def error_response(request: Any, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "results": []}
