"""Registering this broker with the controller once its sockets are bound (Kafka's
BrokerLifecycleManager, reduced to the one registration a single node needs).

The advertised endpoint is the first advertised listener; a configured port 0 becomes the port the
socket was bound to, so clients learn a port they can reach.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.config import BrokerConfig
from broker.controller_client import ControllerClient


async def register_this_broker(client: ControllerClient, config: BrokerConfig, bound_ports: Mapping[str, int]) -> None:
    """Register this broker's advertised endpoint; nothing when it advertises no listener."""
    listeners = config.advertised_listeners
    if not listeners:
        return
    first = listeners[0]
    port = first.port or bound_ports.get(first.name, 0)
    await client.register_broker(config.node_id, first.host, port, config.get("broker.rack"),
                                 listener_name=first.name)
