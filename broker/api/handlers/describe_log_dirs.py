"""DescribeLogDirs (api key 35): each log dir with the partitions it holds and their sizes.

Versions 1-5 (v0 retired by Kafka 4.0, KIP-896: the connection closes, as in Kafka 4.4).
- v1: same as v0.
- v2: flexible.
- v3: top-level error_code.
- v4: total_bytes and usable_bytes of each log dir's file system (KIP-827).
- v5: is_cordoned per log dir (KIP-1066); Odradek does not cordon log dirs (Kafka 4.4's
  ``cordoned.log.dirs`` is not implemented), so every dir answers false, as Kafka's do by default.

``topics`` null means every partition. Sizes are the real bytes of the partition's segment
files; ``offset_lag`` is Kafka's: max(HW - log end, 0), so 0 for every current log (see
ReplicaManager.describe_log_dirs; Kafka reports a real lag only for future logs). An offline
log dir is listed with KAFKA_STORAGE_ERROR and no partitions, as Kafka does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from concurrent.futures import Executor

    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import DescribeLogDirsRequest, DescribeLogDirsResponse

API_KEY = 35
NAME = "DescribeLogDirs"
VERSIONS = (1, 5)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    replica_manager: ReplicaManager
    io_pool: Executor
    authz: AuthHelper


async def handle(services: Services, request: ApiRequest[DescribeLogDirsRequest]) -> DescribeLogDirsResponse:
    if not services.authz.cluster_allowed(request, authz.DESCRIBE):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    requested = request.body["topics"]
    wanted = None if requested is None else {t["topic"]: set(t["partitions"]) for t in requested}
    loop = asyncio.get_running_loop()
    # Blocking (statvfs, segment sizes): the IO pool runs it.
    results = await loop.run_in_executor(services.io_pool, services.replica_manager.describe_log_dirs, wanted)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results": results}


def error_response(request: ApiRequest[DescribeLogDirsRequest], code: int) -> DescribeLogDirsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "results": []}
