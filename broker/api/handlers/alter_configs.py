"""AlterConfigs (api key 33, legacy): replace all dynamic config overrides of topics and brokers.

Versions 0-2.
- v1: same as v0 (throttling behaviour only).
- v2: flexible.

Each resource's overrides become exactly the given map (keys not given are deleted). Processing
is Kafka's KRaft split, both halves here (the controller is embedded):
1. broker-side preprocessing (ConfigAdminManager.preprocess): a resource named twice -> every
   occurrence INVALID_REQUEST "Each resource must appear at most once."; a key twice ->
   INVALID_REQUEST "Error due to duplicate config keys"; a null value -> INVALID_REQUEST "Null value
   not supported for : k"; BROKER resources must be "" or this node's id and the new dynamic
   config must validate (``validate_broker_change``); a TOPIC name must be legal and non-empty
   (ControllerConfigurationValidator); a GROUP name must not be empty (INVALID_REQUEST "Default group
   resources are not allowed.") and the group's resulting configs must pass Kafka's GroupConfig.validate
   against this broker's group.* bounds (``validate_group_change``: INVALID_CONFIG with Kafka's message);
   CLIENT_METRICS goes to the controller as is; any other type -> INVALID_REQUEST "Unknown resource
   type N" (BROKER_LOGGER is incremental-only).
2. the controller (through ``controller_client.alter_configs``): topic existence (UNKNOWN_TOPIC_OR_PARTITION),
   topic config validation (INVALID_CONFIG), and - unless validate_only - one atomic, fsynced
   metadata-log batch; its delta (``changed_topic_configs`` / ``changed_broker_configs``) is what
   makes the replica manager reload the affected logs' LogConfig.

One response per request resource, in request order. Runs on the handler loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.broker.api.handlers.config_resources import (
    BROKER,
    DEFAULT_MESSAGES,
    GROUP,
    TOPIC,
    ResourceError,
    config_access_error,
    parse_broker_id,
)
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.config.broker_config import BrokerConfig, ConfigError
from odradek.broker.metadata.controller_client import (
    AlterConfigsResource,
    AlterConfigsResult,
    invalid_topic_reason,
    is_forwarded,
)
from odradek.broker.metadata.topic_config_view import (
    BrokerConfigLayers,
    config_layers,
    effective_broker_config,
    merged_props,
)
from odradek.controller import group_configs
from odradek.protocol.acl_types import AclOperation
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.broker.metadata.broker_metadata import BrokerMetadata
    from odradek.broker.metadata.controller_client import ControllerClient
    from odradek.broker.security.authz import AuthHelper
    from odradek.protocol.messages import (
        AlterConfigsRequest,
        AlterConfigsResponse,
        AlterConfigsResponseAlterConfigsResourceResponse,
        IncrementalAlterConfigsRequest,
    )

API_KEY = 33
NAME = "AlterConfigs"
VERSIONS = (0, 2)


@dataclass(frozen=True, slots=True)
class Services:
    """What this handler and IncrementalAlterConfigs use of the broker (broker/api/registry.py)."""

    config: BrokerConfig
    metadata: BrokerMetadata
    controller_client: ControllerClient
    authz: AuthHelper


# Types the controller stores.
FORWARDED_TYPES = frozenset({TOPIC, BROKER, 16, 32})
# Kafka's PerBrokerConfigs that exist here: listener configs cannot be set cluster-wide.
PER_BROKER_ONLY = frozenset({"listeners", "advertised.listeners", "listener.security.protocol.map"})

Error = tuple[ErrorCode, "str | None"]


def java_set(names: Sequence[str]) -> str:
    """How Kafka's messages print a Scala Set of names."""
    return "Set(" + ", ".join(names) + ")"


def duplicate_resources(resources: Sequence[Mapping[str, Any]]) -> set[int]:
    """Indexes of resources whose (type, name) appears more than once (all occurrences)."""
    seen: dict[tuple[int, str], list[int]] = {}
    for i, r in enumerate(resources):
        seen.setdefault((r["resource_type"], r["resource_name"]), []).append(i)
    return {i for idxs in seen.values() if len(idxs) > 1 for i in idxs}


def check_topic_name(name: str) -> None:
    if name == "":
        raise ResourceError(ErrorCode.INVALID_REQUEST, "Default topic resources are not allowed.")
    reason = invalid_topic_reason(name)
    if reason is not None:
        raise ResourceError(ErrorCode.INVALID_TOPIC_EXCEPTION, reason)


def check_broker_name(name: str, node_id: int) -> None:
    if name == "":
        return
    got = parse_broker_id(name, "Node id must be an integer, but it is: ")
    if got != node_id:
        raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {node_id}, but received {name}")


def validate_broker_change(config: BrokerConfig, layers: BrokerConfigLayers, props: Mapping[str, str],
                           per_broker: bool) -> None:
    """Kafka's DynamicBrokerConfig.validate: ``props`` would become the whole dynamic layer.

    Raises ResourceError(INVALID_REQUEST, ...) like Kafka (KAFKA-13609: not INVALID_CONFIG).
    Unknown keys are allowed (custom configs), as in Kafka.
    """
    defs = config.definitions
    static_only = [k for k in props if k in defs and not defs[k].dynamic]
    if static_only:
        raise ResourceError(ErrorCode.INVALID_REQUEST,
                             f"Cannot update these configs dynamically: {java_set(static_only)}")
    for key, raw in props.items():
        d = defs.get(key)
        if d is not None:
            try:
                d.parse(raw)
            except ConfigError as e:
                raise ResourceError(ErrorCode.INVALID_REQUEST, str(e)) from None
    if not per_broker:
        listener_keys = [k for k in props if k in PER_BROKER_ONLY]
        if listener_keys:
            raise ResourceError(ErrorCode.INVALID_REQUEST, "Cannot update these configs at default cluster "
                                 f"level, broker id must be specified: {java_set(listener_keys)}")
    if per_broker:
        candidate = BrokerConfigLayers(dict(props), layers.dynamic_default, layers.static, layers.defaults)
    else:
        candidate = BrokerConfigLayers(layers.dynamic_broker, dict(props), layers.static, layers.defaults)
    try:
        new = BrokerConfig.from_props(merged_props(config, candidate))
        new.log_config()
    except ConfigError as e:
        raise ResourceError(ErrorCode.INVALID_REQUEST, str(e)) from None
    old = effective_broker_config(config, layers)
    if [str(x) for x in new.advertised_listeners] != [str(x) for x in old.advertised_listeners]:
        raise ResourceError(ErrorCode.INVALID_REQUEST,
                             "Advertised listeners cannot be altered when using a Raft-based metadata quorum.")
    if [str(x) for x in new.listeners] != [str(x) for x in old.listeners]:
        # Kafka can add listeners at runtime; Odradek cannot yet, so it refuses rather than ignore.
        raise ResourceError(ErrorCode.INVALID_REQUEST, "Listeners cannot be altered at runtime by this broker; "
                             "change them in server.properties and restart.")


def check_group_name(name: str) -> None:
    if name == "":
        raise ResourceError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")


def validate_group_change(config: BrokerConfig, props: Mapping[str, str]) -> None:
    """Kafka's GroupConfig.validate of a group's configs after the change, against this broker's bounds."""
    try:
        group_configs.validate(props, config.__getitem__)
    except group_configs.GroupConfigError as e:
        raise ResourceError(e.code, str(e)) from None


class ResourceRules:
    """What differs between AlterConfigs and IncrementalAlterConfigs in the shared resource loop."""

    def check_entries(self, entries: Sequence[Mapping[str, Any]]) -> None:
        """Per-entry checks that come before the resource name checks (Kafka's order)."""
        raise NotImplementedError

    def payload(self, rtype: int, name: str, entries: Sequence[Mapping[str, Any]], config: BrokerConfig,
                layers: BrokerConfigLayers, image: Any) -> Any:
        """The configs to forward to the controller; validates broker changes; may raise ResourceError."""
        raise NotImplementedError



async def alter_resources(services: Services,
                          request: ApiRequest[AlterConfigsRequest] | ApiRequest[IncrementalAlterConfigsRequest],
                          rules: ResourceRules, operation: Any) -> AlterConfigsResponse:
    """The loop both config-altering APIs share: broker-side preprocessing of every resource
    (duplicates, keys, names, types — Kafka's ConfigAdminManager.preprocess), then one controller
    call for the resources that passed, then one answer per request resource in request order."""
    body = request.body
    resources: Sequence[Mapping[str, Any]] = body["resources"]
    config = services.config
    image = services.metadata.image
    errors: dict[int, Error] = {}
    # Another broker's forwarded call (odradek.broker.metadata.forwarding_controller_client) names that broker, not
    # this one: its broker resources are checked and validated here for the broker they name (the
    # same image, the same rules), so the forwarding marker relaxes "this node" and nothing else.
    from_broker = is_forwarded(request.client_id)
    dups = duplicate_resources(resources)
    forwarded: list[tuple[int, AlterConfigsResource]] = []
    for i, r in enumerate(resources):
        if i in dups:
            errors[i] = (ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            continue
        rtype, name = r["resource_type"], r["resource_name"]
        entries = r["configs"]
        try:
            names = [c["name"] for c in entries]
            if len(set(names)) != len(names):
                raise ResourceError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
            rules.check_entries(entries)
            denied = config_access_error(services.authz, request, rtype, name, AclOperation.ALTER_CONFIGS)
            if denied is not None:
                raise ResourceError(denied, DEFAULT_MESSAGES[denied])
            node_id = config.node_id
            if rtype == BROKER:
                if from_broker and name:
                    node_id = parse_broker_id(name, "Node id must be an integer, but it is: ")
                check_broker_name(name, node_id)
            elif rtype == TOPIC:
                check_topic_name(name)
            elif rtype == GROUP:
                check_group_name(name)
            elif rtype not in FORWARDED_TYPES:
                raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {rtype}")
            layers = config_layers(config, image.broker_configs, node_id)
            payload = rules.payload(rtype, name, entries, config, layers, image)
        except ResourceError as e:
            errors[i] = (e.code, e.message)
            continue
        forwarded.append((i, AlterConfigsResource(rtype, name, payload)))
    results = await _call_controller(operation, forwarded, bool(body["validate_only"]))
    return {"throttle_time_ms": 0, "responses": assemble(resources, errors, results)}


class _LegacyRules(ResourceRules):
    def raw_payload(self, entries: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        return {c["name"]: c["value"] for c in entries}

    def check_entries(self, entries: Sequence[Mapping[str, Any]]) -> None:
        nulls = [c["name"] for c in entries if c["value"] is None]
        if nulls:
            raise ResourceError(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))

    def payload(self, rtype: int, name: str, entries: Sequence[Mapping[str, Any]], config: BrokerConfig,
                layers: BrokerConfigLayers, image: Any) -> dict[str, str]:
        new_configs = self.raw_payload(entries)
        if rtype == BROKER:
            validate_broker_change(config, layers, new_configs, per_broker=name != "")
        if rtype == GROUP:
            validate_group_change(config, new_configs)
        return new_configs


async def handle(services: Services, request: ApiRequest[AlterConfigsRequest]) -> AlterConfigsResponse:
    return await alter_resources(services, request, _LegacyRules(), services.controller_client.alter_configs)


async def _call_controller(operation: Any, forwarded: list[tuple[int, AlterConfigsResource]],
                           validate_only: bool) -> dict[tuple[int, str], AlterConfigsResult]:
    if not forwarded:
        return {}
    results = await operation([res for _, res in forwarded], validate_only=validate_only)
    return {(r.resource_type, r.resource_name): r for r in results}


def assemble(resources: Sequence[Mapping[str, Any]], errors: Mapping[int, Error],
             results: Mapping[tuple[int, str], AlterConfigsResult]) -> list[AlterConfigsResponseAlterConfigsResourceResponse]:
    """Kafka's reassembleLegacyResponse/reassembleIncrementalResponse: one answer per request resource."""
    out: list[AlterConfigsResponseAlterConfigsResourceResponse] = []
    for i, r in enumerate(resources):
        key = (r["resource_type"], r["resource_name"])
        if i in errors:
            code, message = errors[i]
        elif key in results:
            code, message = results[key].error_code, results[key].error_message
        else:
            code, message = ErrorCode.UNKNOWN_SERVER_ERROR, None
        out.append({"error_code": code, "error_message": message, "resource_type": key[0], "resource_name": key[1]})
    return out


def error_response(request: ApiRequest[AlterConfigsRequest], code: int) -> AlterConfigsResponse:
    return {"throttle_time_ms": 0, "responses": error_answers(request.body["resources"], code)}


def error_answers(resources: Sequence[Mapping[str, Any]],
                  code: int) -> list[AlterConfigsResponseAlterConfigsResourceResponse]:
    """Every resource answered ``code`` (both config-altering APIs' error_response)."""
    return [{"error_code": code, "error_message": None, "resource_type": r["resource_type"],
             "resource_name": r["resource_name"]} for r in resources]
