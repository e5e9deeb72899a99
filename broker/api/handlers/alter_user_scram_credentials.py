"""AlterUserScramCredentials (api key 51): create, replace or delete users' SCRAM credentials (KIP-554).

Version 0 (flexible). The client sends the salt and the salted password (never the password);
the controller validates and turns each upsertion into a UserScramCredentialRecord
(controller/scram_credentials.py), so every broker's metadata image gets it. A broker that is not
the controller forwards (``odradek.broker.metadata.controller_client``). Per-user results carry Kafka's errors.
Used by ``kafka-configs --alter --add-config 'SCRAM-SHA-512=[password=...]' --entity-type users``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.metadata.controller_client import ScramUpsertion
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse

API_KEY = 51
NAME = "AlterUserScramCredentials"
VERSIONS = (0, 0)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    controller_client: ControllerClient
    authz: AuthHelper


async def handle(services: Services, request: ApiRequest[AlterUserScramCredentialsRequest]) -> AlterUserScramCredentialsResponse:
    # Kafka (ControllerApis): ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every user.
    if not services.authz.cluster_allowed(request, authz.ALTER):
        raise KafkaApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    body = request.body
    deletions = [(d["name"], d["mechanism"]) for d in body["deletions"]]
    upsertions = [ScramUpsertion(u["name"], u["mechanism"], u["iterations"], bytes(u["salt"]),
                                 bytes(u["salted_password"])) for u in body["upsertions"]]
    results = await services.controller_client.alter_user_scram_credentials(deletions, upsertions)
    return {"throttle_time_ms": 0, "results": [
        {"user": r.user, "error_code": r.error_code, "error_message": r.error_message} for r in results]}


def loggable(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body with salts and salted passwords emptied, for the request log (Kafka's RequestChannel
    redacts them the same way: a salted password is enough to log in)."""
    return {**body, "upsertions": [{**u, "salt": b"", "salted_password": b""} for u in body.get("upsertions", [])]}


def error_response(request: ApiRequest[AlterUserScramCredentialsRequest], code: int) -> AlterUserScramCredentialsResponse:
    body = request.body
    users = dict.fromkeys([d["name"] for d in body.get("deletions", [])]
                          + [u["name"] for u in body.get("upsertions", [])])
    return {"throttle_time_ms": 0,
            "results": [{"user": u, "error_code": code, "error_message": None} for u in users]}
