"""CreatePartitions (api key 37): add partitions to existing topics through the controller.

Versions 0-3.
- v1: same as v0 (throttling behaviour, KIP-219).
- v2: flexible.
- v3: same as v2.

Errors, per topic, with Kafka's messages: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PARTITIONS (the new
count is not larger than the current one), INVALID_REPLICA_ASSIGNMENT, INVALID_REQUEST (a topic
twice). Every requested topic gets a result — an empty results array is a bug other brokers had.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.metadata.controller_client import CreatePartitionsResult, CreatePartitionsTopic
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import CreatePartitionsRequest, CreatePartitionsResponse

API_KEY = 37
NAME = "CreatePartitions"
VERSIONS = (0, 3)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    controller_client: ControllerClient
    replica_manager: ReplicaManager
    authz: AuthHelper


async def handle(services: Services, request: ApiRequest[CreatePartitionsRequest]) -> CreatePartitionsResponse:
    body = request.body
    topics = [
        CreatePartitionsTopic(
            name=t["name"],
            count=t["count"],
            assignments=None if t["assignments"] is None else [list(a["broker_ids"]) for a in t["assignments"]],
        )
        for t in body["topics"]
    ]
    client = services.controller_client
    # Kafka's ControllerApis.createPartitions: ALTER on each topic, else TOPIC_AUTHORIZATION_FAILED.
    denied: set[str] = set()
    if services.authz.authorizer is not None:
        names = {t.name for t in topics}
        denied = names - set(services.authz.filter_allowed(request, authz.ALTER, authz.TOPIC, names))
    allowed = [t for t in topics if t.name not in denied]
    # Added by name: the controller answers duplicates its own way.
    results = [CreatePartitionsResult(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, None)
               for name in dict.fromkeys(t.name for t in topics if t.name in denied)]
    if allowed or not denied:
        results += await client.create_partitions(allowed, validate_only=bool(body["validate_only"]))
    # New partitions whose logs could not be made here answer that error, not success.
    log_errors = await services.replica_manager.wait_for_logs(r.name for r in results if r.error_code == 0)
    return {
        "throttle_time_ms": 0,
        "results": [{"name": r.name, "error_code": r.error_code, "error_message": r.error_message}
                    if (failed := log_errors.get(r.name)) is None else
                    {"name": r.name, "error_code": failed.code, "error_message": failed.message}
                    for r in results],
    }


def error_response(request: ApiRequest[CreatePartitionsRequest], code: int) -> CreatePartitionsResponse:
    return {
        "throttle_time_ms": 0,
        "results": [{"name": t["name"], "error_code": code, "error_message": None} for t in request.body["topics"]],
    }
