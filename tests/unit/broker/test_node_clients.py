"""``NodeClients``: one inter-broker client per node, kept while the node's address stays, replaced
(and the old one closed) when it moves. Real sockets: listeners that accept and never answer."""

from __future__ import annotations

import asyncio
import time

import pytest

from odradek.broker.network.inter_broker_client import NodeClients, NodeUnavailableError

API_VERSIONS = 18


async def silent_listener() -> tuple[asyncio.Server, int]:
    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # never answers; returns when the client closes
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_a_node_keeps_its_client_until_its_address_changes() -> None:
    old_server, old_port = await silent_listener()
    new_server, new_port = await silent_listener()
    clients = NodeClients("test-node-clients")
    try:
        first = clients.get(1, "127.0.0.1", old_port)
        assert clients.get(1, "127.0.0.1", old_port) is first
        assert clients.get(2, "127.0.0.1", old_port) is not first  # one client per node
        waiting = asyncio.ensure_future(first.request(API_VERSIONS, 3, {"client_software_name": "t",
                                                                       "client_software_version": "1"}, 30))
        await asyncio.sleep(0.2)  # connected, the request sent, no answer
        assert not waiting.done()
        started = time.monotonic()
        moved = clients.get(1, "127.0.0.1", new_port)
        assert moved is not first and (moved.host, moved.port) == ("127.0.0.1", new_port)
        # The old client is closed: its waiting request fails now, not at its 30 s timeout.
        with pytest.raises(NodeUnavailableError):
            await asyncio.wait_for(waiting, 5)
        assert time.monotonic() - started < 5
    finally:
        await clients.close()
        old_server.close()
        new_server.close()
