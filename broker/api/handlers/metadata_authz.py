"""Metadata (api key 3) with an authorizer: Kafka's hiding rules (KafkaApis.handleTopicMetadataRequest).

metadata.py calls this only when ``authorizer.class.name`` is set; the cached, pre-encoded topic
entries stay the path without one.

- All topics requested: only the topics the principal may DESCRIBE are listed.
- Topics named: one without DESCRIBE answers TOPIC_AUTHORIZATION_FAILED (whether or not it exists);
  named by id (v10+), TOPIC_AUTHORIZATION_FAILED with a null name (Kafka: ids are not sensitive,
  names are); an unknown id UNKNOWN_TOPIC_ID.
- Auto-creation of a missing, describable topic needs CREATE on the cluster or on the topic;
  without it the topic answers TOPIC_AUTHORIZATION_FAILED and nothing is created.
- topic_authorized_operations and cluster_authorized_operations (when asked) are the principal's
  (KIP-430).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.metadata.controller_client import invalid_topic_reason
from odradek.broker.security import authz
from odradek.protocol.acl_operations import AUTHORIZED_OPERATIONS_OMITTED
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.api.handlers.metadata import Services
    from odradek.protocol.messages import (
        MetadataRequest,
        MetadataRequestTopic,
        MetadataResponse,
        MetadataResponseTopic,
    )


def handle(services: Services, request: ApiRequest[MetadataRequest], requested: list[MetadataRequestTopic] | None,
           auto_create: bool) -> MetadataResponse | Awaitable[MetadataResponse]:
    """``requested``: the topics asked for (None: all), ``auto_create``: the request and the broker
    allow auto-creation — both as metadata.handle read them."""
    # metadata.py imports this module: its helpers are imported at call time.
    from odradek.broker.api.handlers.metadata import INTERNAL_TOPICS, create_then_answer, topic_metadata
    from odradek.broker.api.handlers.metadata import _error_topic as error_topic
    from odradek.broker.api.handlers.metadata import _response as response

    body = request.body
    image = services.metadata.image
    describable = {name: services.authz.allowed(request, authz.DESCRIBE, authz.TOPIC, name)
                   for name in ((t["name"] for t in requested if t["name"] is not None) if requested is not None
                                else image.topics)}
    to_create: list[str] = []
    denied_create: set[str] = set()
    if requested is not None and auto_create:
        may_create_any = services.authz.cluster_allowed(request, authz.CREATE)
        for t in requested:
            name = t["name"]
            if (name is None or not describable[name] or name in image.topics or invalid_topic_reason(name)
                    or name in INTERNAL_TOPICS or name in to_create):
                continue
            if may_create_any or services.authz.allowed(request, authz.CREATE, authz.TOPIC, name):
                to_create.append(name)
            else:
                denied_create.add(name)

    def answer(request: ApiRequest[MetadataRequest]) -> MetadataResponse:
        img = services.metadata.image
        live = set(img.live_broker_ids())
        include_ops = bool(body["include_topic_authorized_operations"])

        def entry(topic: Any) -> MetadataResponseTopic:
            out = topic_metadata(topic, live, False)
            if include_ops:
                out["topic_authorized_operations"] = services.authz.authorized_operations(
                    request, authz.TOPIC, topic.name, 0)
            return out

        topics: list[MetadataResponseTopic] = []
        if requested is None:
            topics = [entry(t) for name, t in img.topics.items() if describable.get(name)
                      or (name not in describable and services.authz.allowed(request, authz.DESCRIBE, authz.TOPIC, name))]
        else:
            for t in requested:
                name = t["name"]
                if name is None:
                    topic = img.topics_by_id.get(t["topic_id"])
                    if topic is None:
                        topics.append(error_topic(ErrorCode.UNKNOWN_TOPIC_ID, None, t["topic_id"]))
                    elif not services.authz.allowed(request, authz.DESCRIBE, authz.TOPIC, topic.name):
                        # Kafka: topic ids are not sensitive; the name stays hidden.
                        topics.append(error_topic(ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, t["topic_id"]))
                    else:
                        topics.append(entry(topic))
                elif not describable[name] or name in denied_create:
                    topics.append(error_topic(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name))
                elif (topic := img.topics.get(name)) is not None:
                    topics.append(entry(topic))
                elif invalid_topic_reason(name):
                    topics.append(error_topic(ErrorCode.INVALID_TOPIC_EXCEPTION, name))
                else:
                    topics.append(error_topic(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name))
        out = response(services, request, topics)
        if body["include_cluster_authorized_operations"]:
            out["cluster_authorized_operations"] = services.authz.cluster_authorized_operations(request, 0)
        else:
            out["cluster_authorized_operations"] = AUTHORIZED_OPERATIONS_OMITTED
        return out

    if to_create:
        return create_then_answer(services, request, to_create, answer)
    return answer(request)
