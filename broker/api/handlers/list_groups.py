"""ListGroups (api key 16): the groups this broker coordinates.

Versions 0-5.
- v1: throttle_time_ms.
- v2: same as v1.
- v3: flexible.
- v4: states_filter and group_state (KIP-518).
- v5: types_filter and group_type (KIP-848): "classic" or "consumer" (ConsumerGroupHeartbeat groups).

While a __consumer_offsets partition is loading the error is COORDINATOR_LOAD_IN_PROGRESS, with
the groups of the loaded partitions (as Kafka).
"""

from __future__ import annotations

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.group.coordinator import coordinator_of
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode

API_KEY = 16
NAME = "ListGroups"
VERSIONS = (0, 5)


def handle(request: ApiRequest) -> dict:
    body = request.body
    coordinator = coordinator_of(request)
    if coordinator is None:
        return error_response(request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    version = request.api_version
    states = set(body["states_filter"] or ()) if version >= 4 else None
    types = set(body["types_filter"] or ()) if version >= 5 else None
    error, groups = coordinator.list_groups(states or None, types or None)
    # Kafka: every group with DESCRIBE on the cluster, else those the principal may DESCRIBE.
    if request.broker.authorizer is not None and not authz.cluster_allowed(request, authz.DESCRIBE):
        groups = authz.filter_allowed(request, authz.DESCRIBE, authz.GROUP, groups, lambda g: g["group_id"])
    return {"throttle_time_ms": 0, "error_code": error, "groups": groups}


def error_response(request: ApiRequest, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "groups": []}
