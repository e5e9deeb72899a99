"""Config requests on one resource, as the tests send them over the wire: IncrementalAlterConfigs v1
(``alter_configs``: the answer's error code and message) and DescribeConfigs with synonyms and
documentation (``describe_configs``: the whole answer); ``set_group_configs`` sets a group's own
configs (a GROUP resource, KIP-848 / KIP-932 / KIP-1071) and requires success (error 0, no message).
"""

from __future__ import annotations

from typing import Any

from tests.support.wire import WireClient

DESCRIBE_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 44
GROUP = 32  # ConfigResource.Type.GROUP
SET = 0  # AlterConfigOp.OpType.SET


def alter_configs(c: WireClient, resource_type: int, name: str, ops: list[tuple[str, int, str | None]],
                  validate_only: bool = False) -> tuple[int, str | None]:
    """``ops``: (config name, operation, value) each."""
    r = c.request(INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": validate_only, "resources": [
        {"resource_type": resource_type, "resource_name": name,
         "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in ops]}]})["responses"][0]
    return r["error_code"], r["error_message"]


def describe_configs(c: WireClient, resource_type: int, name: str, version: int = 4,
                     keys: list[str] | None = None) -> dict[str, Any]:
    return c.request(DESCRIBE_CONFIGS, version, {"resources": [{"resource_type": resource_type, "resource_name": name,
                                                                "configuration_keys": keys}],
                                                 "include_synonyms": True, "include_documentation": True})


def set_group_configs(c: WireClient, group: str, configs: dict[str, str]) -> None:
    assert alter_configs(c, GROUP, group, [(k, SET, v) for k, v in configs.items()]) == (0, None)
