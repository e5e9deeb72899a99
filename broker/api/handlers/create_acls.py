"""CreateAcls (api key 30): store ACLs through the controller (``kafka-acls --add``).

Versions 1-3 (v0, LITERAL patterns only, retired by Kafka 4.0, KIP-896: the connection closes).
- v1: resource_pattern_type (KIP-290: PREFIXED).
- v2: flexible.
- v3: same as v2.

Kafka's order (KafkaApis.handleCreateAcls / AclApis): ALTER on the cluster, else every creation
answers CLUSTER_AUTHORIZATION_FAILED; no authorizer configured: every creation answers
SECURITY_DISABLED ("No Authorizer is configured."). A creation with a code 0 (UNKNOWN) fails the
request's parsing in Kafka, which closes the connection; so does Odradek. Another code the enums do
not know reads as UNKNOWN. Per creation the controller answers INVALID_REQUEST for what it refuses
(controller/acls.py). A broker that is not the controller forwards (odradek.broker.metadata.controller_client).
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
    from odradek.protocol.messages import CreateAclsRequest, CreateAclsResponse

API_KEY = 30
NAME = "CreateAcls"
VERSIONS = (1, 3)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    controller_client: ControllerClient
    authz: AuthHelper


log = logging.getLogger(__name__)

NO_AUTHORIZER = "No Authorizer is configured."


async def handle(services: Services, request: ApiRequest[CreateAclsRequest]) -> CreateAclsResponse | CloseConnection:
    creations = request.body["creations"]
    if any(acl_wire.has_unknown_code(c, acl_wire.CREATION_CODES) for c in creations):
        log.warning("closing %s: CreateAcls creations contain unknown elements", request.peer)
        return CLOSE_CONNECTION
    bindings = [acl_wire.binding_from_creation(c) for c in creations]
    if not services.authz.cluster_allowed(request, AclOperation.ALTER):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if services.authz.authorizer is None:
        return _all(len(creations), ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    try:
        results = await services.controller_client.create_acls(bindings)
    except KafkaApiError as exc:
        return _all(len(creations), exc.code, exc.message)
    return {"throttle_time_ms": 0,
            "results": [{"error_code": r.error_code, "error_message": r.error_message} for r in results]}


def _all(n: int, code: int, message: str | None) -> CreateAclsResponse:
    return {"throttle_time_ms": 0, "results": [{"error_code": code, "error_message": message}] * n}


def error_response(request: ApiRequest[CreateAclsRequest], code: int) -> CreateAclsResponse:
    return _all(len(request.body.get("creations") or ()), code, None)
