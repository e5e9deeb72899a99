"""IncrementalAlterConfigs (api key 44): per-key SET/DELETE/APPEND/SUBTRACT on topic and broker configs.

Versions 0-1.
- v1: flexible.

Same two halves as ``alter_configs`` (ConfigAdminManager.preprocess on the broker, then the
controller's ConfigurationControlManager), with per-key operations:
- preprocessing: duplicate resources / keys and null values (for anything but DELETE) are
  INVALID_REQUEST with Kafka's messages; an operation id outside 0-3 is INVALID_REQUEST "Unknown
  operations type N"; BROKER resources ("" or this node's id) are checked by applying the
  operations to the stored dynamic config and validating the result (APPEND/SUBTRACT only on
  LIST keys: INVALID_CONFIG "Config value append is not allowed for config key: k"). Broker
  APPEND/SUBTRACT are then sent to the controller as the SET they amount to (the controller
  computes list operations for topic keys only). BROKER_LOGGER (8) is not implemented:
  INVALID_REQUEST "Unknown resource type 8". GROUP resources: SET/DELETE are applied to the group's
  stored configs and the result validated (``validate_group_change``).
- the controller: topic existence, topic config validation (INVALID_CONFIG with the storage
  layer's message; APPEND/SUBTRACT on a non-list topic key is INVALID_CONFIG "Can't APPEND to key k
  because its type is not LIST."), then one atomic metadata-log batch unless validate_only.

A failed resource changes nothing; other resources in the request are unaffected. Runs on the
handler loop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from odradek.broker.api.handlers.alter_configs import (
    ResourceRules,
    Services,
    alter_resources,
    error_answers,
    validate_broker_change,
    validate_group_change,
)
from odradek.broker.api.handlers.config_resources import BROKER, GROUP, ResourceError
from odradek.broker.api.request_types import ApiRequest
from odradek.broker.config.broker_config import ConfigType, format_value
from odradek.broker.metadata.controller_client import AlterableConfig, AlterConfigOp
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.protocol.messages import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

API_KEY = 44
NAME = "IncrementalAlterConfigs"
VERSIONS = (0, 1)


def _broker_ops(config: Any, current: dict[str, str],
               ops: Sequence[Mapping[str, Any]]) -> tuple[dict[str, str], list[AlterableConfig]]:
    """Apply ops to the stored dynamic broker config (ConfigAdminManager.prepareIncrementalConfigs).

    Returns the resulting dynamic config and the ops as the controller should store them.
    """
    props = dict(current)
    out: list[AlterableConfig] = []
    for op in ops:
        name, kind, value = op["name"], AlterConfigOp(op["config_operation"]), op["value"]
        if kind == AlterConfigOp.SET:
            props[name] = value
            out.append(AlterableConfig(name, kind, value))
        elif kind == AlterConfigOp.DELETE:
            props.pop(name, None)
            out.append(AlterableConfig(name, kind, None))
        else:
            d = config.definitions.get(name)
            if d is None:
                raise ResourceError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {name}")
            if d.type is not ConfigType.LIST:
                raise ResourceError(ErrorCode.INVALID_CONFIG, f"Config value {kind.name.lower()} is not allowed "
                                     f"for config key: {name}")
            base = props.get(name)
            if base is None:
                base = format_value(d, d.default) or ""
            parts = [p for p in base.split(",") if p] if kind == AlterConfigOp.APPEND else base.split(",")
            items = value.split(",")
            if kind == AlterConfigOp.APPEND:
                parts += [i for i in items if i not in parts]
            else:
                parts = [p for p in parts if p not in items]
            props[name] = ",".join(parts)
            out.append(AlterableConfig(name, AlterConfigOp.SET, props[name]))
    return props, out


class _IncrementalRules(ResourceRules):
    def check_entries(self, entries: Sequence[Mapping[str, Any]]) -> None:
        nulls = [c["name"] for c in entries if c["config_operation"] != AlterConfigOp.DELETE and c["value"] is None]
        if nulls:
            raise ResourceError(ErrorCode.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))
        for c in entries:
            if c["config_operation"] not in AlterConfigOp._value2member_map_:
                raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {c['config_operation']}")

    def raw_payload(self, entries: Sequence[Mapping[str, Any]]) -> list[AlterableConfig]:
        return [AlterableConfig(c["name"], AlterConfigOp(c["config_operation"]), c["value"]) for c in entries]

    def payload(self, rtype: int, name: str, entries: Sequence[Mapping[str, Any]], config: Any, layers: Any,
                image: Any) -> list[AlterableConfig]:
        if rtype == BROKER:
            new_props, ops = _broker_ops(config, dict(image.broker_configs.get(name, {})), entries)
            validate_broker_change(config, layers, new_props, per_broker=name != "")
            return ops
        if rtype == GROUP and all(c["config_operation"] in (AlterConfigOp.SET, AlterConfigOp.DELETE) for c in entries):
            # APPEND/SUBTRACT go on to the controller, which refuses them on a group key as Kafka does.
            props = dict(image.group_configs.get(name, {}))
            for c in entries:
                if c["config_operation"] == AlterConfigOp.SET:
                    props[c["name"]] = c["value"]
                else:
                    props.pop(c["name"], None)
            validate_group_change(config, props)
        return self.raw_payload(entries)


async def handle(services: Services, request: ApiRequest[IncrementalAlterConfigsRequest]) -> IncrementalAlterConfigsResponse:
    return await alter_resources(services, request, _IncrementalRules(),
                                 services.controller_client.incremental_alter_configs)


def error_response(request: ApiRequest[IncrementalAlterConfigsRequest], code: int) -> IncrementalAlterConfigsResponse:
    return {"throttle_time_ms": 0, "responses": error_answers(request.body["resources"], code)}
