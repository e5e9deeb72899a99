"""DeleteAcls (api key 31): remove the ACLs matching filters through the controller
(``kafka-acls --remove``).

Versions 1-3 (v0, LITERAL filters only, retired by Kafka 4.0, KIP-896: the connection closes).
- v1: pattern_type_filter (KIP-290).
- v2: flexible.
- v3: same as v2.

ALTER on the cluster, else every filter answers CLUSTER_AUTHORIZATION_FAILED; no authorizer: every
filter answers SECURITY_DISABLED. A filter with a code 0 (UNKNOWN) closes the connection (Kafka fails
the request's parsing); another unknown code answers INVALID_REQUEST for that filter. Per filter the
ACLs it removed (controller/acls.py); a broker that is not the controller forwards.
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
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import DeleteAclsRequest, DeleteAclsResponse

API_KEY = 31
NAME = "DeleteAcls"
VERSIONS = (1, 3)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    controller_client: ControllerClient
    authz: AuthHelper


log = logging.getLogger(__name__)


async def handle(services: Services, request: ApiRequest[DeleteAclsRequest]) -> DeleteAclsResponse | CloseConnection:
    filters = [acl_wire.filter_from_wire(f) for f in request.body["filters"]]
    if any(acl_wire.has_unknown_code(f, acl_wire.FILTER_CODES) for f in request.body["filters"]):
        log.warning("closing %s: DeleteAcls filters contain UNKNOWN elements", request.peer)
        return CLOSE_CONNECTION
    if not services.authz.cluster_allowed(request, AclOperation.ALTER):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if services.authz.authorizer is None:
        return _all(len(filters), ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    try:
        results = await services.controller_client.delete_acls(filters)
    except KafkaApiError as exc:
        return _all(len(filters), exc.code, exc.message)
    return {"throttle_time_ms": 0, "filter_results": [
        {"error_code": r.error_code, "error_message": r.error_message,
         "matching_acls": [acl_wire.matching_acl_of(acl) for acl in r.deleted]} for r in results]}


def _all(n: int, code: int, message: str | None) -> DeleteAclsResponse:
    return {"throttle_time_ms": 0,
            "filter_results": [{"error_code": code, "error_message": message, "matching_acls": []}] * n}


def error_response(request: ApiRequest[DeleteAclsRequest], code: int) -> DeleteAclsResponse:
    return _all(len(request.body.get("filters") or ()), code, None)
