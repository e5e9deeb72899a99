"""DescribeConfigs (api key 32): effective topic and broker configuration, as Kafka's ConfigHelper.

Versions 1-4 (v0, with is_default per entry, retired by Kafka 4.0, KIP-896: the connection closes).
- v1: include_synonyms; config_source replaces is_default; synonyms per entry (KIP-226).
- v2: same as v1.
- v3: include_documentation; config_type and documentation per entry (KIP-569).
- v4: flexible.

Resources (answered in request order, one result each):
- TOPIC (2): every topic config key (``odradek.broker.metadata.topic_config_view.topic_config_entries``); an illegal
  name gets INVALID_TOPIC_EXCEPTION with Topic.validate's message, an unknown topic
  UNKNOWN_TOPIC_OR_PARTITION with no message, as Kafka.
- BROKER (4): name = this node's id -> every broker key with its effective value, source and
  synonyms; name "" -> the cluster-wide dynamic defaults only. Another id, or a name that is not a
  number, is INVALID_REQUEST with Kafka's message.
- CLIENT_METRICS (16): a client metrics subscription (KIP-714), as Kafka 4.4's ConfigHelper shows it:
  every key (metrics, interval.ms, match) in name order, set (source CLIENT_METRICS_CONFIG, itself
  as its synonym) or at its default (DEFAULT_CONFIG) - a name with no subscription shows the defaults,
  with no error; the error message of a described subscription is "" (Kafka's), an empty name is
  INVALID_REQUEST "Client metrics subscription name must not be empty".
- GROUP (32): a group's configs (KIP-848/932/1071), as Kafka 4.4's ConfigHelper shows them
  (odradek.controller.group_configs.describe): every public key in Kafka's order, set (source GROUP_CONFIG,
  synonyms itself then the broker config it overrides) or the broker's value (its source and synonym);
  a group with no overrides, or that does not exist, shows the defaults with no error; the error
  message of a described group is "" (Kafka's), an empty name is INVALID_REQUEST "Group name must not
  be empty". Needs DESCRIBE_CONFIGS on the group.
- BROKER_LOGGER (8): not implemented; INVALID_REQUEST "Unsupported resource type" per resource.
- Any other type makes the whole request fail: every result INVALID_REQUEST with Kafka's default
  message (ConfigHelper throws before describing anything).

``configuration_keys`` null or empty means all keys; otherwise only those named (unknown names are
simply absent). Nothing here writes: it reads the broker config and the metadata image on the
handler loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.broker.api.handlers.config_resources import (
    BROKER,
    CLIENT_METRICS,
    GROUP,
    KNOWN_TYPES,
    TOPIC,
    ResourceError,
    config_access_error,
    parse_broker_id,
)
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.config.broker_config import ConfigSource
from odradek.broker.metadata.controller_client import invalid_topic_reason
from odradek.broker.metadata.topic_config_view import (
    BrokerConfigLayers,
    ConfigEntry,
    Synonym,
    broker_config_entries,
    config_layers,
    config_synonyms,
    entry_to_wire,
    topic_config_entries,
)
from odradek.controller import client_metrics_configs, group_configs
from odradek.protocol.acl_types import AclOperation
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.config.broker_config import BrokerConfig
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        DescribeConfigsRequest,
        DescribeConfigsResource,
        DescribeConfigsResponse,
        DescribeConfigsResult,
    )

API_KEY = 32
NAME = "DescribeConfigs"
VERSIONS = (1, 4)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler uses of the broker (broker/api/registry.py)."""

    config: BrokerConfig
    metadata: BrokerMetadata
    authz: AuthHelper


# Errors.INVALID_REQUEST.message(): what Kafka writes when the whole request fails.
INVALID_REQUEST_DEFAULT_MESSAGE = (
    "This most likely occurs because of a request being malformed by the client library or the message was "
    "sent to an incompatible broker. See the broker logs for more details."
)


def handle(services: Services, request: ApiRequest[DescribeConfigsRequest]) -> DescribeConfigsResponse:
    body = request.body
    version = request.api_version
    resources = body["resources"]
    if any(r["resource_type"] not in KNOWN_TYPES for r in resources):
        return _fail_all(resources, ErrorCode.INVALID_REQUEST, INVALID_REQUEST_DEFAULT_MESSAGE)
    include_synonyms = bool(body["include_synonyms"])
    include_docs = bool(body["include_documentation"]) and version >= 3
    layers = config_layers(services.config, services.metadata.image.broker_configs, services.config.node_id)
    results: list[DescribeConfigsResult] = []
    for r in resources:
        rtype, name = r["resource_type"], r["resource_name"]
        denied = config_access_error(services.authz, request, rtype, name, AclOperation.DESCRIBE_CONFIGS)
        if denied is not None:
            results.append({"error_code": denied, "error_message": None, "resource_type": rtype,
                            "resource_name": name, "configs": []})
            continue
        try:
            entries = _describe(services, request, rtype, name, layers)
        except ResourceError as e:
            results.append({"error_code": e.code, "error_message": e.message, "resource_type": rtype,
                            "resource_name": name, "configs": []})
            continue
        keys = r["configuration_keys"]
        if keys:
            wanted = set(keys)
            entries = [e for e in entries if e.name in wanted]
        results.append({
            "error_code": ErrorCode.NONE,
            "error_message": "" if rtype in (CLIENT_METRICS, GROUP) else None,
            "resource_type": rtype,
            "resource_name": name,
            "configs": [entry_to_wire(e, include_synonyms, include_docs) for e in entries],
        })
    return {"throttle_time_ms": 0, "results": results}


def _describe(services: Services, request: ApiRequest[DescribeConfigsRequest], rtype: int, name: str,
              layers: Any) -> list[ConfigEntry]:
    config = services.config
    if rtype == TOPIC:
        reason = invalid_topic_reason(name)
        if reason is not None:
            raise ResourceError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)
        topic = services.metadata.image.topics.get(name)
        if topic is None:
            raise ResourceError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
        return topic_config_entries(config, topic.configs, layers, describe=True)
    if rtype == BROKER:
        if name == "":
            return broker_config_entries(config, layers, per_broker=False)
        node_id = parse_broker_id(name, "Broker id must be an integer, but it is: ")
        if node_id != config.node_id:
            raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {config.node_id} or "
                                 f"empty string, but received {name}")
        return broker_config_entries(config, layers, per_broker=True)
    if rtype == CLIENT_METRICS:
        if name == "":
            raise ResourceError(ErrorCode.INVALID_REQUEST, "Client metrics subscription name must not be empty")
        return _client_metrics_entries(services.metadata.image.client_metrics.get(name, {}))
    if rtype == GROUP:
        if name == "":
            raise ResourceError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        return group_config_entries(services.metadata.image.group_configs.get(name, {}), layers)
    raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {KNOWN_TYPES[rtype]}")


def _client_metrics_entries(props: dict[str, str]) -> list[ConfigEntry]:
    out = []
    for d in client_metrics_configs.describe(props):
        source = ConfigSource(d.source)
        synonyms: list[Synonym] = [(d.name, d.value, source)] if source == ConfigSource.CLIENT_METRICS_CONFIG else []
        type_name = "int" if d.config_type == client_metrics_configs.TYPE_INT else "list"
        out.append(ConfigEntry(d.name, d.value, source, synonyms=synonyms, type_name=type_name, doc=d.documentation))
    return out


def group_config_entries(props: dict[str, str], layers: BrokerConfigLayers) -> list[ConfigEntry]:
    """A group's DescribeConfigs entries: its overrides over the broker's values (the layers)."""

    def broker_entry(name: str) -> list[tuple[str, str, int]]:
        return [(n, v or "", int(s)) for n, v, s in config_synonyms(name, [name], layers)]

    out = []
    for d in group_configs.describe(props, broker_entry):
        synonyms: list[Synonym] = [(n, v, ConfigSource(s)) for n, v, s in d.synonyms]
        out.append(ConfigEntry(d.name, d.value, ConfigSource(d.source), synonyms=synonyms,
                               type_name=group_configs.TYPE_NAMES[d.config_type].lower(), doc=d.documentation))
    return out


def _fail_all(resources: list[DescribeConfigsResource], code: ErrorCode, message: str | None) -> DescribeConfigsResponse:
    return {
        "throttle_time_ms": 0,
        "results": [{"error_code": code, "error_message": message, "resource_type": r["resource_type"],
                     "resource_name": r["resource_name"], "configs": []} for r in resources],
    }


def error_response(request: ApiRequest[DescribeConfigsRequest], code: int) -> DescribeConfigsResponse:
    return _fail_all(request.body["resources"], ErrorCode(code), None)
