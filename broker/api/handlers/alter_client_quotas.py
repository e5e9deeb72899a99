"""AlterClientQuotas (api key 49): set or remove quota keys of user / client-id / ip entities
(KIP-546; `kafka-configs --alter --entity-type users|clients|ips`).

Versions 0-1.
- v1: flexible.

The broker forwards the request to the controller (KIP-590, broker/metadata/controller_client.py), which
validates each entity and writes ClientQuotaRecords (controller/client_quotas.py has the rules and
Kafka's messages: INVALID_REQUEST for bad entities, combinations, unknown keys and non-integer
byte rates). An op with ``remove`` deletes its key; ``validate_only`` checks without writing. Every
broker applies the records from its metadata image (broker/quota/client_quotas.py, and the
connection quotas for ip entities). Results come back per entity, in request order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.metadata.controller_client import ClientQuotaAlteration
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        AlterClientQuotasRequest,
        AlterClientQuotasRequestEntryData,
        AlterClientQuotasResponse,
    )

API_KEY = 49
NAME = "AlterClientQuotas"
VERSIONS = (0, 1)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    controller_client: ControllerClient
    authz: AuthHelper


def _pairs(entry: AlterClientQuotasRequestEntryData) -> tuple[tuple[str, str | None], ...]:
    return tuple((e["entity_type"], e["entity_name"]) for e in entry["entity"])


async def handle(services: Services, request: ApiRequest[AlterClientQuotasRequest]) -> AlterClientQuotasResponse:
    # Kafka (ControllerApis): ALTER_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED per entry.
    if not services.authz.cluster_allowed(request, authz.ALTER_CONFIGS):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    body = request.body
    alterations = [
        ClientQuotaAlteration(_pairs(entry), tuple((op["key"], None if op["remove"] else op["value"])
                                                   for op in entry["ops"]))
        for entry in body["entries"]
    ]
    results = await services.controller_client.alter_client_quotas(alterations, body["validate_only"])
    return {
        "throttle_time_ms": 0,
        "entries": [
            {"error_code": r.error_code, "error_message": r.error_message,
             "entity": [{"entity_type": t, "entity_name": n} for t, n in r.entity]}
            for r in results
        ],
    }


def error_response(request: ApiRequest[AlterClientQuotasRequest], code: int) -> AlterClientQuotasResponse:
    return {
        "throttle_time_ms": 0,
        "entries": [{"error_code": code, "error_message": None,
                     "entity": [{"entity_type": e["entity_type"], "entity_name": e["entity_name"]}
                                for e in entry["entity"]]}
                    for entry in request.body["entries"]],
    }
