"""DeleteTopics (api key 20): delete topics by name (and by id from v6) through the controller.

Versions 1-6 (v0 retired by Kafka 4.0, KIP-896: the connection closes, as in Kafka 4.4).
- v1: throttle_time_ms.
- v4: flexible.
- v5: error_message in the response.
- v6: topics by name or topic id (KIP-516).

Errors: UNKNOWN_TOPIC_OR_PARTITION / UNKNOWN_TOPIC_ID, INVALID_REQUEST when both name and id are
given, TOPIC_DELETION_DISABLED when delete.topic.enable=false (INVALID_REQUEST below v3, which
predates that code — Kafka does the same).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.metadata.controller_client import DeleteTopicResult
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode, KafkaApiError

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import DeletableTopicResult, DeleteTopicsRequest, DeleteTopicsResponse

API_KEY = 20
NAME = "DeleteTopics"
VERSIONS = (1, 6)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    metadata: BrokerMetadata
    controller_client: ControllerClient
    authz: AuthHelper


ZERO_UUID = uuid.UUID(int=0)


def _requested(request: ApiRequest[DeleteTopicsRequest]) -> tuple[list[str], list[uuid.UUID]]:
    body = request.body
    if request.api_version < 6:
        return list(body["topic_names"]), []
    names, ids = [], []
    for t in body["topics"]:
        if t["name"] is not None:
            names.append(t["name"])
        else:
            ids.append(t["topic_id"])
    return names, ids


async def handle(services: Services, request: ApiRequest[DeleteTopicsRequest]) -> DeleteTopicsResponse:
    names, ids = _requested(request)
    client = services.controller_client
    denied: list[DeleteTopicResult] = []
    if services.authz.authorizer is not None and not services.authz.cluster_allowed(request, authz.DELETE):
        names, ids, denied = _authorize(services, request, names, ids)
    try:
        results = denied + (await client.delete_topics(names=names, topic_ids=ids)
                            if names or ids or not denied else [])
    except KafkaApiError as exc:
        code = exc.code
        if code == ErrorCode.TOPIC_DELETION_DISABLED and request.api_version < 3:
            code = ErrorCode.INVALID_REQUEST
        return _all_failed(request, code, exc.message)
    return {
        "throttle_time_ms": 0,
        "responses": [
            {"name": r.name, "topic_id": r.topic_id, "error_code": r.error_code, "error_message": r.error_message}
            for r in results
        ],
    }


# Kafka's message for new ApiError(TOPIC_AUTHORIZATION_FAILED) (the error's default message).
REFUSED = "Topic authorization failed."


def _authorize(services: Services, request: ApiRequest[DeleteTopicsRequest], names: list[str],
               ids: list[uuid.UUID]) -> tuple[list[str], list[uuid.UUID], list[DeleteTopicResult]]:
    """Kafka's ControllerApis.deleteTopics: DELETE on the topic (or the cluster). A topic the principal
    may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED whether or not it exists; a describable one
    that does not exist UNKNOWN_TOPIC_OR_PARTITION (from the controller); an unknown id
    UNKNOWN_TOPIC_ID (from the controller), a known one without DELETE TOPIC_AUTHORIZATION_FAILED."""
    image = services.metadata.image
    denied: list[DeleteTopicResult] = []
    kept_names = []
    for name in names:
        if services.authz.allowed(request, authz.DELETE, authz.TOPIC, name) or (
                name not in image.topics and services.authz.allowed(request, authz.DESCRIBE, authz.TOPIC, name)):
            kept_names.append(name)
        else:
            denied.append(DeleteTopicResult(name, ZERO_UUID, ErrorCode.TOPIC_AUTHORIZATION_FAILED, REFUSED))
    kept_ids = []
    for topic_id in ids:
        topic = image.topics_by_id.get(topic_id)
        if topic is None or services.authz.allowed(request, authz.DELETE, authz.TOPIC, topic.name):
            kept_ids.append(topic_id)
        else:
            # The name only to whom may DESCRIBE it: an id must not reveal it.
            shown = topic.name if services.authz.allowed(request, authz.DESCRIBE, authz.TOPIC, topic.name) else None
            denied.append(DeleteTopicResult(shown, topic_id, ErrorCode.TOPIC_AUTHORIZATION_FAILED, REFUSED))
    return kept_names, kept_ids, denied


def _all_failed(request: ApiRequest[DeleteTopicsRequest], code: int, message: str | None) -> DeleteTopicsResponse:
    names, ids = _requested(request)
    responses: list[DeletableTopicResult] = [{"name": n, "topic_id": ZERO_UUID, "error_code": code, "error_message": message} for n in names]
    responses += [{"name": None, "topic_id": i, "error_code": code, "error_message": message} for i in ids]
    return {"throttle_time_ms": 0, "responses": responses}


def error_response(request: ApiRequest[DeleteTopicsRequest], code: int) -> DeleteTopicsResponse:
    return _all_failed(request, code, None)
