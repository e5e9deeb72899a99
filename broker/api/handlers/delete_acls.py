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
from typing import Any

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.security import acl_wire, authz
from odradek.protocol.acl_types import AclOperation
from odradek.protocol.errors import ErrorCode, KafkaApiError

API_KEY = 31
NAME = "DeleteAcls"
VERSIONS = (1, 3)

log = logging.getLogger(__name__)


async def handle(request: ApiRequest) -> dict | None:
    filters = [acl_wire.filter_from_wire(f) for f in request.body["filters"]]
    if any(acl_wire.has_unknown_code(f, acl_wire.FILTER_CODES) for f in request.body["filters"]):
        log.warning("closing %s: DeleteAcls filters contain UNKNOWN elements", request.conn.peer)
        request.conn.close_threadsafe()
        return None
    if not authz.cluster_allowed(request, AclOperation.ALTER):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if request.broker.authorizer is None:
        return _all(len(filters), ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")
    try:
        results = await request.broker.controller_client.delete_acls(filters)
    except KafkaApiError as exc:
        return _all(len(filters), exc.code, exc.message)
    return {"throttle_time_ms": 0, "filter_results": [
        {"error_code": r.error_code, "error_message": r.error_message,
         "matching_acls": [acl_wire.matching_acl_of(acl) for acl in r.deleted]} for r in results]}


def _all(n: int, code: int, message: str | None) -> dict[str, Any]:
    return {"throttle_time_ms": 0,
            "filter_results": [{"error_code": code, "error_message": message, "matching_acls": []}] * n}


def error_response(request: ApiRequest, code: int) -> dict:
    return _all(len(request.body.get("filters") or ()), code, None)
