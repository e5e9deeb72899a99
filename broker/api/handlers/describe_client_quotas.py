"""DescribeClientQuotas (api key 48): the quotas stored for the entities a filter matches (KIP-546).

Versions 0-1.
- v1: flexible.

Kafka's ClientQuotaImage.describe, on the broker's metadata image: each filter component names an
entity type (user, client-id, ip) and matches an exact name (match_type 0), the type's default
(1, match null) or any name (2); ``strict`` keeps only entities with exactly the filtered types.
A bad filter answers the whole request with Kafka's error and message (broker/quota/entities.py
``parse_filter``): INVALID_REQUEST for an empty or repeated type, a match string where none belongs
(or none where one does) and ip combined with user or client-id; UNSUPPORTED_VERSION for an unknown
entity or match type. Entities are listed with their type/name pairs (null name = default) and
their quota keys. Read-only, on the handler loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.quota.entities import QuotaRequestError, matches, parse_filter
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        DescribeClientQuotasRequest,
        DescribeClientQuotasResponse,
        DescribeClientQuotasResponseEntryData,
    )

API_KEY = 48
NAME = "DescribeClientQuotas"
VERSIONS = (0, 1)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    authz: AuthHelper


def handle(services: Services, request: ApiRequest[DescribeClientQuotasRequest]) -> DescribeClientQuotasResponse:
    # Kafka: DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
    if not services.authz.cluster_allowed(request, authz.DESCRIBE_CONFIGS):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    body = request.body
    try:
        exact, typed = parse_filter(body["components"])
    except QuotaRequestError as exc:
        return _error(exc.code, exc.message)
    strict = body["strict"]
    entries: list[DescribeClientQuotasResponseEntryData] = [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
         "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
        for entity, values in services.metadata.image.client_quotas.items()
        if matches(entity, exact, typed, strict)
    ]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "entries": entries}


def _error(code: int, message: str | None) -> DescribeClientQuotasResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "entries": None}


def error_response(request: ApiRequest[DescribeClientQuotasRequest], code: int) -> DescribeClientQuotasResponse:
    return _error(code, None)
