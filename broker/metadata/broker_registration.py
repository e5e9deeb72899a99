"""Registering this broker with the controller once its sockets are bound (Kafka's
BrokerLifecycleManager, reduced to the one registration a single node needs).

The advertised endpoint is the first advertised listener; a configured port 0 becomes the port the
socket was bound to, so clients learn a port they can reach.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from odradek.broker.config.broker_config import BrokerConfig
from odradek.broker.metadata.controller_client import ControllerClient


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """Where clients and other brokers reach this broker (one advertised listener)."""

    host: str
    port: int
    listener_name: str
    rack: str | None
    # Every advertised listener: (name, host, port).
    endpoints: tuple[tuple[str, str, int], ...] = ()


def advertised_endpoint(config: BrokerConfig, bound_ports: Mapping[str, int]) -> BrokerEndpoint | None:
    """What this broker registers: its inter-broker listener's endpoint (what other brokers use) and every
    advertised listener's (what Metadata answers, per listener); a port 0 becomes the bound one."""
    listeners = config.advertised_listeners
    if not listeners:
        return None
    endpoints = tuple((lst.name, lst.host, lst.port or bound_ports.get(lst.name, 0)) for lst in listeners)
    inter_broker = config.inter_broker_listener_name
    name, host, port = next((e for e in endpoints if e[0] == inter_broker), endpoints[0])
    return BrokerEndpoint(host, port, name, config.get("broker.rack"), endpoints)


async def register_this_broker(client: ControllerClient, config: BrokerConfig, bound_ports: Mapping[str, int]) -> None:
    """Register this broker's advertised endpoint; nothing when it advertises no listener."""
    endpoint = advertised_endpoint(config, bound_ports)
    if endpoint is None:
        return
    await client.register_broker(config.node_id, endpoint.host, endpoint.port, endpoint.rack,
                                 listener_name=endpoint.listener_name, endpoints=endpoint.endpoints)
