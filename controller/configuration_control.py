"""Config overrides of topics, brokers, client metrics subscriptions and groups (Kafka's
ConfigurationControlManager).

Like odradek.controller.replication_control, it reads the controller's image and returns per-item results
and ConfigRecords (a null value deletes the key); the controller commits them. A resource that fails
(unknown topic or broker, a bad operation, an invalid merged config) raises
:class:`~odradek.controller.requests.ItemError` and gets its own result; the others go on.

AlterConfigs (legacy) replaces a resource's overrides by exactly the given map: keys it leaves
out are deleted. IncrementalAlterConfigs applies SET, DELETE, APPEND and SUBTRACT per key (the last
two only to LIST-typed topic configs, from the current value or the default). The merged topic
config is validated as a whole (odradek.controller.topic_configs), a client metrics one by
odradek.controller.client_metrics_configs; group configs are validated against the broker-level bounds
by the broker that takes the request (odradek.controller.group_configs needs the broker config, which the
controller does not hold), here only the name. Broker records are written even when unchanged, as Kafka does
(KAFKA-14136: they trigger a reload).
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek.controller import client_metrics_configs, metadata_format
from odradek.controller.image import MetadataImage
from odradek.controller.records import ConfigRecord, ConfigResourceType, MetadataRecord
from odradek.controller.requests import (
    AlterableConfig,
    AlterConfigOp,
    AlterConfigsResource,
    AlterConfigsResult,
    ItemError,
)
from odradek.controller.topic_configs import (
    TopicConfigError,
    is_list_config,
    list_default,
    validate_topic_configs,
)
from odradek.protocol.errors import ErrorCode, KafkaApiError


class ConfigurationControl:
    """Config decisions over ``image`` (the controller's, read only)."""

    def __init__(self, image: MetadataImage) -> None:
        self._image = image

    def describe_topic_configs(self, name: str) -> dict[str, str]:
        """The topic's config overrides (a copy)."""
        topic = self._image.topics.get(name)
        if topic is None:
            raise KafkaApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        return dict(topic.configs)

    def describe_broker_configs(self, name: str) -> dict[str, str]:
        """Dynamic broker config overrides for broker ``name`` ("" = cluster-wide default)."""
        return dict(self._image.broker_configs.get(name, {}))

    def alter_configs(self, resources: Sequence[AlterConfigsResource], *, incremental: bool
                      ) -> tuple[list[AlterConfigsResult], list[MetadataRecord]]:
        """One result per distinct resource, in request order; a resource named twice is refused."""
        counts: dict[tuple[int, str], int] = {}
        for r in resources:
            key = (r.resource_type, r.resource_name)
            counts[key] = counts.get(key, 0) + 1
        results: list[AlterConfigsResult] = []
        records: list[MetadataRecord] = []
        seen: set[tuple[int, str]] = set()
        for r in resources:
            key = (r.resource_type, r.resource_name)
            if key in seen:
                continue
            seen.add(key)
            if counts[key] > 1:
                results.append(AlterConfigsResult(*key, ErrorCode.INVALID_REQUEST,
                                                  "Each resource must appear at most once."))
                continue
            try:
                if incremental:
                    records.extend(self._incremental_config_records(r))
                else:
                    records.extend(self._legacy_config_records(r))
            except ItemError as e:
                results.append(AlterConfigsResult(*key, e.code, e.message))
                continue
            results.append(AlterConfigsResult(*key))
        return results, records

    def _current_configs(self, resource_type: int, name: str) -> dict[str, str]:
        if resource_type == ConfigResourceType.TOPIC:
            topic = self._image.topics.get(name)
            if topic is None:
                raise ItemError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
            return topic.configs
        if resource_type == ConfigResourceType.BROKER:
            if name != "":
                try:
                    node_id = int(name)
                except ValueError:
                    raise ItemError(ErrorCode.INVALID_REQUEST, f"Invalid broker name {name}") from None
                if node_id not in self._image.brokers:
                    raise ItemError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"No node with id {node_id} found.")
            return self._image.broker_configs.get(name, {})
        if resource_type == ConfigResourceType.CLIENT_METRICS:
            if self._image.metadata_format < metadata_format.CLIENT_METRICS_CONFIGS:
                # A 0.1.0 broker could not read the records (it refuses a resource type it does not know).
                raise ItemError(ErrorCode.UNSUPPORTED_VERSION,
                                "Client metrics subscriptions need every broker to run Odradek 0.2.0 or newer "
                                f"({metadata_format.FEATURE} level {metadata_format.CLIENT_METRICS_CONFIGS}); "
                                f"the metadata is at level {self._image.metadata_format}.")
            return self._image.client_metrics.get(name, {})
        if resource_type == ConfigResourceType.GROUP:
            if self._image.metadata_format < metadata_format.GROUP_CONFIGS:
                raise ItemError(ErrorCode.UNSUPPORTED_VERSION,
                                "Group configs need every broker to run Odradek 0.2.0 or newer "
                                f"({metadata_format.FEATURE} level {metadata_format.GROUP_CONFIGS}); "
                                f"the metadata is at level {self._image.metadata_format}.")
            if name == "":
                raise ItemError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
            return self._image.group_configs.get(name, {})
        raise ItemError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {resource_type}")

    def _incremental_config_records(self, resource: AlterConfigsResource) -> list[MetadataRecord]:
        ops = resource.configs
        if isinstance(ops, dict):
            raise ItemError(ErrorCode.INVALID_REQUEST, "IncrementalAlterConfigs needs per-key operations")
        names = [op.name for op in ops]
        if len(set(names)) != len(names):
            raise ItemError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
        current = self._current_configs(resource.resource_type, resource.resource_name)
        new_values: dict[str, str | None] = {}
        for op in ops:
            new_values[op.name] = self._apply_op(resource.resource_type, op, current.get(op.name))
        return self._config_records(resource, current, new_values)

    def _apply_op(self, resource_type: int, op: AlterableConfig, current: str | None) -> str | None:
        try:
            kind = AlterConfigOp(op.op)
        except ValueError:
            raise ItemError(ErrorCode.INVALID_REQUEST, f"Unknown operations type {op.op}") from None
        if kind != AlterConfigOp.DELETE and op.value is None:
            raise ItemError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {op.name}")
        if kind == AlterConfigOp.SET:
            return op.value
        if kind == AlterConfigOp.DELETE:
            return None
        if resource_type != ConfigResourceType.TOPIC or not is_list_config(op.name):
            raise ItemError(ErrorCode.INVALID_CONFIG,
                            f"Can't {kind.name} to key {op.name} because its type is not LIST.")
        base = current if current is not None else list_default(op.name)
        parts = [p for p in (base or "").split(",") if p]
        assert op.value is not None
        for item in op.value.split(","):
            if kind == AlterConfigOp.APPEND:
                if item not in parts:
                    parts.append(item)
            elif item in parts:
                parts.remove(item)
        return ",".join(parts)

    def _legacy_config_records(self, resource: AlterConfigsResource) -> list[MetadataRecord]:
        new_configs = resource.configs
        if not isinstance(new_configs, dict):
            raise ItemError(ErrorCode.INVALID_REQUEST, "AlterConfigs needs a map of config values")
        current = self._current_configs(resource.resource_type, resource.resource_name)
        null_keys = [k for k, v in new_configs.items() if v is None]
        if null_keys:
            raise ItemError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(null_keys)}")
        new_values: dict[str, str | None] = dict(new_configs)
        for key in current:
            if key not in new_configs:
                new_values[key] = None  # legacy AlterConfigs replaces the whole set
        return self._config_records(resource, current, new_values)

    def _config_records(
        self, resource: AlterConfigsResource, current: dict[str, str], new_values: dict[str, str | None]
    ) -> list[MetadataRecord]:
        merged = dict(current)
        records: list[MetadataRecord] = []
        for key, value in new_values.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
            # Kafka writes broker records even when unchanged, to trigger reloads (KAFKA-14136).
            if current.get(key) != value or resource.resource_type == ConfigResourceType.BROKER:
                records.append(ConfigRecord(resource.resource_type, resource.resource_name, key, value))
        if resource.resource_type == ConfigResourceType.TOPIC:
            try:
                validate_topic_configs(merged)
            except TopicConfigError as e:
                raise ItemError(ErrorCode.INVALID_CONFIG, str(e)) from None
        if resource.resource_type == ConfigResourceType.CLIENT_METRICS:
            try:
                client_metrics_configs.validate(resource.resource_name, merged)
            except client_metrics_configs.ClientMetricsConfigError as e:
                raise ItemError(e.code, str(e)) from None
        # TODO(broker configs): validate dynamic broker configs once broker/config/broker_config.py defines them.
        return records
