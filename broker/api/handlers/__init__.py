"""Request handlers, one module per Kafka API (see registry.py for the module contract)."""

from __future__ import annotations

import importlib

from odradek.broker.api.registry import HandlerSpec, build_registry

# Every implemented API. Adding an API = one module + one line here; ApiVersions advertises
# exactly these, so a line goes in only together with tests that exercise the API.
HANDLER_MODULES = (
    "api_versions",
    "metadata",
    "describe_topic_partitions",
    "create_topics",
    "delete_topics",
    "create_partitions",
    "describe_configs",
    "alter_configs",
    "incremental_alter_configs",
    "list_config_resources",
    "describe_client_quotas",
    "alter_client_quotas",
    "update_features",
    "elect_leaders",
    "alter_partition_reassignments",
    "list_partition_reassignments",
    "alter_partition",
    "describe_cluster",
    "produce",
    "fetch",
    "list_offsets",
    "init_producer_id",
    "add_partitions_to_txn",
    "add_offsets_to_txn",
    "end_txn",
    "write_txn_markers",
    "txn_offset_commit",
    "describe_transactions",
    "list_transactions",
    "describe_producers",
    "offset_for_leader_epoch",
    "delete_records",
    "describe_log_dirs",
    "alter_replica_log_dirs",
    "find_coordinator",
    "join_group",
    "sync_group",
    "heartbeat",
    "leave_group",
    "offset_commit",
    "offset_fetch",
    "describe_groups",
    "list_groups",
    "delete_groups",
    "offset_delete",
    "consumer_group_heartbeat",
    "consumer_group_describe",
    "share_group_heartbeat",
    "share_group_describe",
    "share_fetch",
    "share_acknowledge",
    "describe_share_group_offsets",
    "alter_share_group_offsets",
    "delete_share_group_offsets",
    "streams_group_heartbeat",
    "streams_group_describe",
    "describe_acls",
    "create_acls",
    "delete_acls",
    "sasl_handshake",
    "sasl_authenticate",
    "describe_user_scram_credentials",
    "alter_user_scram_credentials",
    "get_telemetry_subscriptions",
    "push_telemetry",
)


def all_handlers() -> dict[int, HandlerSpec]:
    return build_registry([importlib.import_module(f"odradek.broker.api.handlers.{name}") for name in HANDLER_MODULES])
