"""AlterPartition (api key 56): a partition leader asks the controller to change its ISR.

Versions 2-3 (topics by id, KIP-516; v3 sends the new ISR with each member's broker epoch, KIP-903:
the controller refuses a member whose epoch is not its registration's with INELIGIBLE_REPLICA). Each partition goes through ``controller_client.alter_partition``
(the controller checks leader and partition epochs and answers the state it committed, Kafka's
codes: FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, NOT_LEADER_OR_FOLLOWER, INELIGIBLE_REPLICA...).
A broker that is not the controller forwards (``odradek.broker.metadata.controller_client``).

Leaders send it to the controller to shrink or expand an ISR (broker/replica), forwarded to the
controller's node on the inter-broker listener: it is served there only and never advertised
(``INTER_BROKER_ONLY``), as Kafka 4.4 serves it on controller listeners only, which clients are not
given; on another listener the request closes the connection. Tested on the wire in
tests/integration/test_alter_partition_wire.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        AlterPartitionRequest,
        AlterPartitionRequestPartitionData,
        AlterPartitionResponse,
        AlterPartitionResponsePartitionData,
        AlterPartitionResponseTopicData,
    )

API_KEY = 56
NAME = "AlterPartition"
VERSIONS = (2, 3)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    controller_client: ControllerClient
    authz: AuthHelper


INTER_BROKER_ONLY = True


def _new_isr(p: AlterPartitionRequestPartitionData, version: int) -> tuple[list[int], dict[int, int]]:
    """The proposed ISR and, from v3, the broker epoch given for each member."""
    if version >= 3:
        members = p["new_isr_with_epochs"]
        return [b["broker_id"] for b in members], {b["broker_id"]: b["broker_epoch"] for b in members}
    return list(p["new_isr"]), {}


async def handle(services: Services, request: ApiRequest[AlterPartitionRequest]) -> AlterPartitionResponse:
    if not services.authz.cluster_allowed(request, authz.CLUSTER_ACTION):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    body = request.body
    client = services.controller_client
    topics: list[AlterPartitionResponseTopicData] = []
    for t in body["topics"]:
        partitions: list[AlterPartitionResponsePartitionData] = []
        for p in t["partitions"]:
            isr, epochs = _new_isr(p, request.api_version)
            r = await client.alter_partition(t["topic_id"], p["partition_index"], body["broker_id"],
                                             p["leader_epoch"], p["partition_epoch"], isr, epochs)
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


def error_response(request: ApiRequest[AlterPartitionRequest], code: int) -> AlterPartitionResponse:
    return {"throttle_time_ms": 0, "error_code": code, "topics": []}
