"""Request handlers, one module per Kafka API (see registry.py for the module contract)."""

from __future__ import annotations

from broker.handlers.registry import HandlerSpec, build_registry


def all_handlers() -> dict[int, HandlerSpec]:
    """Every implemented API. Adding an API = one module + one line here."""
    from broker.handlers import api_versions, create_partitions, create_topics, delete_topics, metadata

    return build_registry([api_versions, metadata, create_topics, delete_topics, create_partitions])
