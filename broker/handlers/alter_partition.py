"""AlterPartition (api key 56): a partition leader asks the controller to change its ISR.

Versions 2-3 (topics by id, KIP-516; v3 sends the new ISR with broker epochs, KIP-903, which the
controller does not check yet). Each partition goes through ``controller_client.alter_partition``
(the controller checks leader and partition epochs and answers the state it committed, Kafka's
codes: FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, NOT_LEADER_OR_FOLLOWER, INELIGIBLE_REPLICA...).
A broker that is not the controller forwards (``broker.controller_client``).

Not registered in ``broker.handlers.HANDLER_MODULES`` until ``Controller.alter_partition`` (the
replication work) is merged: ApiVersions must not offer an API no controller takes.
"""

from __future__ import annotations

from typing import Any

from broker.request_types import ApiRequest
from protocol.errors import ErrorCode

API_KEY = 56
NAME = "AlterPartition"
VERSIONS = (2, 3)


def _new_isr(p: dict[str, Any], version: int) -> list[int]:
    if version >= 3:
        return [b["broker_id"] for b in p["new_isr_with_epochs"]]
    return list(p["new_isr"])


async def handle(request: ApiRequest) -> dict:
    body = request.body
    client = request.broker.controller_client
    topics = []
    for t in body["topics"]:
        partitions = []
        for p in t["partitions"]:
            r = await client.alter_partition(t["topic_id"], p["partition_index"], body["broker_id"],
                                             p["leader_epoch"], p["partition_epoch"],
                                             _new_isr(p, request.api_version))
            partitions.append({
                "partition_index": p["partition_index"],
                "error_code": r.error_code,
                "leader_id": r.leader_id,
                "leader_epoch": r.leader_epoch,
                "isr": list(r.isr),
                "leader_recovery_state": 0,
                "partition_epoch": r.partition_epoch,
            })
        topics.append({"topic_id": t["topic_id"], "partitions": partitions})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "topics": topics}


def error_response(request: ApiRequest, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "topics": []}
