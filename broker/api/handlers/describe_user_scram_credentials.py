"""DescribeUserScramCredentials (api key 50): which SCRAM mechanisms and iterations each user has (KIP-554).

Version 0 (flexible). Answered from this broker's metadata image (Kafka answers from its metadata
cache too). ``users`` null or empty describes every user with a credential; a named user without
one gets RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE (Kafka's messages). Salts and
keys never leave the broker: only mechanism and iterations are described.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        CredentialInfo,
        DescribeUserScramCredentialsRequest,
        DescribeUserScramCredentialsResponse,
        DescribeUserScramCredentialsResult,
    )

API_KEY = 50
NAME = "DescribeUserScramCredentials"
VERSIONS = (0, 0)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    authz: AuthHelper


def handle(services: Services, request: ApiRequest[DescribeUserScramCredentialsRequest]) -> DescribeUserScramCredentialsResponse:
    # Kafka: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED for the request.
    if not services.authz.cluster_allowed(request, authz.DESCRIBE):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    credentials = services.metadata.image.scram_credentials
    by_user: dict[str, list[CredentialInfo]] = {}
    for (name, mechanism), record in sorted(credentials.items()):
        by_user.setdefault(name, []).append({"mechanism": mechanism, "iterations": record.iterations})
    wanted = request.body["users"]
    results: list[DescribeUserScramCredentialsResult] = []
    if not wanted:
        results = [{"user": u, "error_code": ErrorCode.NONE, "error_message": None, "credential_infos": infos}
                   for u, infos in by_user.items()]
    else:
        counts = Counter(u["name"] for u in wanted)
        for name in dict.fromkeys(u["name"] for u in wanted):
            if counts[name] > 1:
                results.append({"user": name, "error_code": ErrorCode.DUPLICATE_RESOURCE,
                                "error_message": "Cannot describe SCRAM credentials for the same user twice in a "
                                                 f"single request: {name}", "credential_infos": []})
            elif name not in by_user:
                results.append({"user": name, "error_code": ErrorCode.RESOURCE_NOT_FOUND,
                                "error_message": f"Attempt to describe a user credential that does not exist: {name}",
                                "credential_infos": []})
            else:
                results.append({"user": name, "error_code": ErrorCode.NONE, "error_message": None,
                                "credential_infos": by_user[name]})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None, "results": results}


def error_response(request: ApiRequest[DescribeUserScramCredentialsRequest], code: int) -> DescribeUserScramCredentialsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "results": []}
