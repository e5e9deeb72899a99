"""CreateTopics (api key 19): create topics through the controller, with Kafka's validation.

Versions 2-7 (v0-1 retired by Kafka 4.0, KIP-896: the connection closes, as in Kafka 4.4).
- v2: throttle_time_ms (v1 added validate_only and error_message).
- v4: num_partitions / replication_factor may be -1 for the broker defaults (KIP-464).
- v5: flexible; the response carries num_partitions, replication_factor and every effective
  topic config with its source (KIP-525).
- v6: same as v5.
- v7: topic_id in the response (KIP-516).

Per-topic errors (the controller decides them, messages are Kafka's): INVALID_TOPIC_EXCEPTION,
TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT,
INVALID_CONFIG, INVALID_REQUEST (a name twice in one request). validate_only changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.broker.metadata.controller_client import CreatableTopic, CreateTopicResult, ReplicaAssignment
from odradek.broker.metadata.topic_config_view import topic_config_entries
from odradek.broker.security import authz
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.replica.replica_manager import ReplicaManager
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import CreatableTopicResult, CreateTopicsRequest, CreateTopicsResponse

API_KEY = 19
NAME = "CreateTopics"
VERSIONS = (2, 7)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    config: BrokerConfig
    controller_client: ControllerClient
    replica_manager: ReplicaManager
    authz: AuthHelper


async def handle(services: Services, request: ApiRequest[CreateTopicsRequest]) -> CreateTopicsResponse:
    body = request.body
    version = request.api_version
    topics = []
    for t in body["topics"]:
        num_partitions = t["num_partitions"]
        replication_factor = t["replication_factor"]
        topics.append(
            CreatableTopic(
                name=t["name"],
                num_partitions=num_partitions,
                replication_factor=replication_factor,
                assignments=[ReplicaAssignment(a["partition_index"], tuple(a["broker_ids"])) for a in t["assignments"]],
                configs={c["name"]: c["value"] for c in t["configs"]},
            )
        )
    client = services.controller_client
    # Kafka: CREATE on the cluster, or on each topic (else TOPIC_AUTHORIZATION_FAILED, not created).
    denied: set[int] = set()
    if services.authz.authorizer is not None and not services.authz.cluster_allowed(request, authz.CREATE):
        denied = {i for i, t in enumerate(topics) if not services.authz.allowed(request, authz.CREATE, authz.TOPIC, t.name)}
    allowed = [t for i, t in enumerate(topics) if i not in denied]
    # The controller answers each name once (duplicates: one INVALID_REQUEST), so the refused ones
    # are added by name rather than merged by position.
    results = [CreateTopicResult(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
               for name in dict.fromkeys(topics[i].name for i in sorted(denied))]
    if allowed or not denied:
        results += await client.create_topics(allowed, validate_only=bool(body["validate_only"]))
    # A topic whose logs could not be made here answers their error (KAFKA_STORAGE_ERROR), not
    # success: it exists in the metadata, but nothing can be produced to it.
    log_errors = await services.replica_manager.wait_for_logs(
        r.name for r in results if r.error_code == ErrorCode.NONE)
    config = services.config
    out: list[CreatableTopicResult] = []
    for r in results:
        failed = log_errors.get(r.name)
        entry: CreatableTopicResult = {
            "name": r.name,
            "topic_id": r.topic_id,
            "error_code": r.error_code if failed is None else failed.code,
            "error_message": r.error_message if failed is None else failed.message,
        }
        if version >= 5:
            if entry["error_code"] == ErrorCode.NONE and not services.authz.allowed(
                    request, authz.DESCRIBE_CONFIGS, authz.TOPIC, r.name):
                # Kafka: the configs of a created topic only with DESCRIBE_CONFIGS on it.
                entry["num_partitions"] = r.num_partitions
                entry["replication_factor"] = r.replication_factor
                entry["topic_config_error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                entry["configs"] = []
            elif entry["error_code"] == ErrorCode.NONE:
                entry["num_partitions"] = r.num_partitions
                entry["replication_factor"] = r.replication_factor
                entry["configs"] = [
                    {"name": e.name, "value": e.value, "read_only": e.read_only, "config_source": e.source,
                     "is_sensitive": e.is_sensitive}
                    for e in topic_config_entries(config, r.configs)
                ]
            else:
                entry["configs"] = None
        out.append(entry)
    return {"throttle_time_ms": 0, "topics": out}


def error_response(request: ApiRequest[CreateTopicsRequest], code: int) -> CreateTopicsResponse:
    return {
        "throttle_time_ms": 0,
        "topics": [{"name": t["name"], "error_code": code, "error_message": None, "configs": None}
                   for t in request.body["topics"]],
    }
