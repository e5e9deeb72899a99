"""DescribeAcls (api key 29): the ACLs matching a filter (``kafka-acls --list``).

Versions 1-3 (v0, LITERAL filters only, retired by Kafka 4.0, KIP-896: the connection closes).
- v1: pattern_type_filter (KIP-290: ANY, MATCH, LITERAL, PREFIXED).
- v2: flexible.
- v3: same as v2.

Answered from this broker's authorizer, which holds the ACLs of its metadata image (Kafka's broker
answers from its own authorizer too). DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED; no
authorizer: SECURITY_DISABLED. A filter with a code 0 (UNKNOWN) closes the connection (Kafka fails
the request's parsing); another unknown code matches nothing. Matches are grouped by resource pattern.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import CLOSE_CONNECTION, ApiRequest, CloseConnection
from odradek.broker.security import acl_wire
from odradek.protocol.acl_types import AclOperation
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import DescribeAclsRequest, DescribeAclsResponse

API_KEY = 29
NAME = "DescribeAcls"
VERSIONS = (1, 3)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    authz: AuthHelper


log = logging.getLogger(__name__)


def handle(services: Services, request: ApiRequest[DescribeAclsRequest]) -> DescribeAclsResponse | CloseConnection:
    acl_filter = acl_wire.filter_from_wire(request.body)
    if acl_wire.has_unknown_code(request.body, acl_wire.FILTER_CODES):
        log.warning("closing %s: DescribeAcls filter contains UNKNOWN elements", request.peer)
        return CLOSE_CONNECTION
    if not services.authz.cluster_allowed(request, AclOperation.DESCRIBE):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    authorizer = services.authz.authorizer
    if authorizer is None:
        return _error(ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    matching = [acl for acl in authorizer.acls() if acl_filter.matches(acl)]
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "resources": acl_wire.describe_resources(matching)}


def _error(code: int, message: str | None) -> DescribeAclsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "resources": []}


def error_response(request: ApiRequest[DescribeAclsRequest], code: int) -> DescribeAclsResponse:
    return _error(code, None)
