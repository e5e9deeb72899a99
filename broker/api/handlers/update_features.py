"""UpdateFeatures (api key 57): finalize feature levels cluster-wide (KIP-584; `kafka-features
upgrade|downgrade|disable`).

Versions 0-2 (flexible from v0).
- v0: allow_downgrade per feature, which Kafka 4.4's controller ignores: a v0 update is an UPGRADE
  (the upgrade_type field's default), so a lower level is refused.
- v1: upgrade_type (1 UPGRADE, 2 SAFE_DOWNGRADE, 3 UNSAFE_DOWNGRADE) and validate_only (a dry run).
- v2: no per-feature results: the top-level error is the answer (KIP-1022).

The broker forwards the request to the controller (KIP-590, broker/metadata/controller_client.py), which
checks every update with Kafka's rules (controller/feature_updates.py; which features and levels
this release supports: controller/features.py) and writes the new levels in one batch, or none.
Kafka 4.x's answer is one error for the whole request: on success v0-1 also list every requested
feature (a name given twice, twice) with error_code 0 and Kafka's "NONE" message; on failure
INVALID_UPDATE_VERSION with "The update failed for all features since the following feature had an
error: ..." and no per-feature results. ALTER on the cluster is needed (Kafka's ControllerApis),
else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.metadata.controller_client import FeatureUpdate
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        UpdatableFeatureResult,
        UpdateFeaturesRequest,
        UpdateFeaturesResponse,
    )

API_KEY = 57
NAME = "UpdateFeatures"
VERSIONS = (0, 2)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    controller_client: ControllerClient
    authz: AuthHelper


# Errors.NONE.message(): what Kafka's QuorumController puts in each v0-1 result of a success.
NONE_MESSAGE = "NONE"


async def handle(services: Services, request: ApiRequest[UpdateFeaturesRequest]) -> UpdateFeaturesResponse:
    if not services.authz.cluster_allowed(request, authz.ALTER):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    body = request.body
    updates = [FeatureUpdate(u["feature"], u["max_version_level"], u["upgrade_type"])
               for u in body["feature_updates"]]
    result = await services.controller_client.update_features(updates, body["validate_only"])
    results: list[UpdatableFeatureResult] = []
    if result.error_code == ErrorCode.NONE and request.api_version <= 1:
        results = [{"feature": u.feature, "error_code": ErrorCode.NONE, "error_message": NONE_MESSAGE}
                   for u in updates]
    return {"throttle_time_ms": 0, "error_code": result.error_code, "error_message": result.error_message,
            "results": results}


def error_response(request: ApiRequest[UpdateFeaturesRequest], code: int) -> UpdateFeaturesResponse:
    # Kafka's UpdateFeaturesResponse.createWithErrors: no per-feature results for an error.
    return {"throttle_time_ms": 0, "error_code": code, "error_message": None, "results": []}
