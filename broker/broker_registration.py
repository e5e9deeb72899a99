"""Registering this broker with the controller once its sockets are bound (Kafka's
BrokerLifecycleManager, reduced to the one registration a single node needs).

The advertised endpoint is the first advertised listener; a configured port 0 becomes the port the
socket was bound to, so clients learn a port they can reach.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker.config import BrokerConfig
from broker.controller_client import ControllerClient


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """Where clients and other brokers reach this broker (one advertised listener)."""

    host: str
    port: int
    listener_name: str
    rack: str | None


def advertised_endpoint(config: BrokerConfig, bound_ports: Mapping[str, int]) -> BrokerEndpoint | None:
    """The endpoint this broker registers: the first advertised listener, a port 0 made the bound one."""
    listeners = config.advertised_listeners
    if not listeners:
        return None
    first = listeners[0]
    port = first.port or bound_ports.get(first.name, 0)
    return BrokerEndpoint(first.host, port, first.name, config.get("broker.rack"))


async def register_this_broker(client: ControllerClient, config: BrokerConfig, bound_ports: Mapping[str, int]) -> None:
    """Register this broker's advertised endpoint; nothing when it advertises no listener."""
    endpoint = advertised_endpoint(config, bound_ports)
    if endpoint is None:
        return
    await client.register_broker(config.node_id, endpoint.host, endpoint.port, endpoint.rack,
                                 listener_name=endpoint.listener_name)
