"""replica.socket.receive.buffer.bytes: the follower's fetch connection to the leader gets it as
SO_RCVBUF, set before connecting (Kafka's selector does the same, so the TCP window scale agreed in
the handshake can use it). A real leader (broker 1, its embedded controller) and a real follower
replica manager (node 2) in this process, talking over a real socket."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from odradek.broker.config.broker_config import load_config
from odradek.broker.metadata.broker_metadata import BrokerMetadata
from odradek.broker.network.inter_broker_client import NodeClient
from odradek.broker.replica.replica_manager import ReplicaManager
from odradek.broker.runtime.timing_wheel import Timer
from odradek.broker.server import Broker
from odradek.controller import CreatableTopic
from odradek.controller.requests import ReplicaAssignment

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the expected SO_RCVBUF is Linux's (socket(7): "
                                                                 "the kernel doubles the value set)")

TOPIC, TP = "buffered", ("buffered", 0)
FAST = ["replica.fetch.backoff.ms=50", "replica.fetch.wait.max.ms=200", "odradek.metrics.port=-1"]
ASKED = 150_000  # under net.core.rmem_max's default (212992), so the kernel does not cap it


def receive_buffer(client: NodeClient) -> int | None:
    writer = client._writer
    if writer is None or writer.is_closing():
        return None
    sock = writer.get_extra_info("socket")
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)


async def test_the_follower_fetch_socket_has_the_configured_receive_buffer(tmp_path: Path) -> None:
    config1 = load_config(None, [f"log.dirs={tmp_path / 'logs1'}", "node.id=1", "listeners=PLAINTEXT://127.0.0.1:0",
                                 *FAST], environ={})
    broker1 = Broker(config1)
    await broker1.start()
    controller = broker1.embedded_controller.controller  # type: ignore[union-attr]
    await controller.register_broker(2, "127.0.0.1", 9)
    config2 = load_config(None, [f"log.dirs={tmp_path / 'logs2'}", "node.id=2", *FAST,
                                 f"replica.socket.receive.buffer.bytes={ASKED}"], environ={})
    metadata2 = BrokerMetadata(tmp_path / "meta2")
    remove_publisher = controller.add_publisher(metadata2)
    pool = ThreadPoolExecutor(max_workers=2)
    timer2 = Timer()
    rm2 = ReplicaManager(config2, metadata2, timer2, pool, lambda reason: None, lambda: False)
    await rm2.start()
    try:
        (result,) = await controller.create_topics([CreatableTopic(TOPIC, assignments=[ReplicaAssignment(0, (1, 2))])])
        assert result.error_code == 0, result
        deadline = time.monotonic() + 10
        fetchers = rm2.replica_fetchers.fetchers
        # Wait for the follower's fetcher to have connected to the leader (it fetches at once).
        while not any(receive_buffer(f.client) for f in fetchers.values()):
            assert time.monotonic() < deadline, "the follower never connected to the leader"
            await asyncio.sleep(0.01)
        (fetcher,) = fetchers.values()
        assert rm2.replica_fetchers.fetching(TP) is not None
        assert receive_buffer(fetcher.client) == 2 * ASKED
    finally:
        remove_publisher()
        await rm2.shutdown()
        timer2.shutdown()
        pool.shutdown(wait=True)
        await broker1.shutdown()


async def test_minus_one_leaves_the_os_default(tmp_path: Path) -> None:
    # The same listener, two clients: -1 must give exactly what a socket left alone gets.
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    plain = socket.create_connection(("127.0.0.1", port))
    client = NodeClient("127.0.0.1", port, "t", timeout_s=5, receive_buffer_bytes=-1)
    try:
        await client._connect()
        assert receive_buffer(client) == plain.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    finally:
        plain.close()
        await client.close()
        server.close()
        await server.wait_closed()
