"""The acceptor and the network loops (Kafka's SocketServer: Acceptor + Processors).

Shape, following the design card:

    acceptor (handler loop) ──round robin──▶ network loop 1..N (threads, own event loops)
                                               │ frames requests (broker/connection.py)
                                               ▼
                                   request channel (bounded, broker/request_channel.py)
                                               ▼
                                   handler loop: dispatcher + all broker state

With ``num.network.threads`` = 1 the single network loop is the handler loop itself: no thread
hop at all. Python's GIL means extra network threads mostly add hand-off cost; docs/reactor.md
has the measurements that chose Odradek's default (see there before changing it).

Idle connections (no bytes received and no response pending for ``connections.max.idle.ms``)
are closed by a sweeper on each network loop, as Kafka's Selector does.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.connection import Connection
from broker.request_channel import RequestChannel

log = logging.getLogger(__name__)


@dataclass
class Endpoint:
    name: str
    host: str
    port: int


def new_event_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class NetworkLoop:
    """One network loop: its connections and their idle sweeper."""

    def __init__(self, loop: asyncio.AbstractEventLoop, idle_ms: int, own_thread: bool) -> None:
        self.loop = loop
        self.idle_ms = idle_ms
        self.own_thread = own_thread
        self.connections: set[Connection] = set()
        self.thread: threading.Thread | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    def track(self, conn: Connection) -> None:
        self.connections.add(conn)
        conn.on_close = self.connections.discard

    def start_sweeper(self) -> None:
        interval = max(0.05, min(self.idle_ms / 4000.0, 30.0))

        def sweep() -> None:
            cutoff = time.monotonic() - self.idle_ms / 1000.0
            for conn in list(self.connections):
                if conn.last_active < cutoff and not conn.slots:
                    log.info("closing idle connection %s (connections.max.idle.ms=%d)", conn.peer, self.idle_ms)
                    conn.close()
            self._sweeper = self.loop.call_later(interval, sweep)

        self._sweeper = self.loop.call_later(interval, sweep)

    def stop_sweeper(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()


class SocketServer:
    def __init__(
        self,
        handler_loop: asyncio.AbstractEventLoop,
        channel: RequestChannel,
        endpoints: list[Endpoint],
        *,
        num_network_threads: int,
        max_request_size: int,
        idle_ms: int,
        loop_kind: str = "uvloop",
        backlog: int = 50,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
    ) -> None:
        self.handler_loop = handler_loop
        self.channel = channel
        self.endpoints = endpoints
        self.max_request_size = max_request_size
        self.backlog = backlog
        # socket.send/receive.buffer.bytes: -1 keeps the OS default (and its autotuning).
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.loop_kind = loop_kind
        self.listen_sockets: list[socket.socket] = []
        self.bound_ports: dict[str, int] = {}
        if num_network_threads <= 1:
            self.network_loops = [NetworkLoop(handler_loop, idle_ms, own_thread=False)]
        else:
            self.network_loops = [
                NetworkLoop(new_event_loop(loop_kind), idle_ms, own_thread=True) for _ in range(num_network_threads)
            ]
        self._next_loop = itertools.cycle(self.network_loops)
        self.accepting = False

    def _factory(self, net: NetworkLoop, listener: str) -> Callable[[], Connection]:
        def make() -> Connection:
            conn = Connection(self.channel, self.max_request_size, listener)
            net.track(conn)
            return conn

        return make

    async def start(self) -> None:
        """Bind and listen on every endpoint, then accept. ``bind`` and ``start_accepting`` apart
        let the broker register the bound ports before any client request is read."""
        self.bind()
        await self.start_accepting()

    def bind(self) -> None:
        """Bind and listen. The kernel queues connections in the backlog, but none is accepted
        (so no request is read) until ``start_accepting``."""
        for ep in self.endpoints:
            sock = self._listen(ep)
            self.listen_sockets.append(sock)
            self.bound_ports[ep.name] = sock.getsockname()[1]

    async def start_accepting(self) -> None:
        for net in self.network_loops:
            if net.own_thread:
                net.thread = threading.Thread(target=self._run_loop, args=(net,), name="odradek-network", daemon=True)
                net.thread.start()
            else:
                net.start_sweeper()
        for ep, sock in zip(self.endpoints, self.listen_sockets, strict=True):
            self.handler_loop.add_reader(sock.fileno(), self._accept, sock, ep.name)
        self.accepting = True

    def _listen(self, ep: Endpoint) -> socket.socket:
        host = ep.host or None
        infos = socket.getaddrinfo(host, ep.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, addr = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6 and not ep.host:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(addr)
        sock.listen(self.backlog)
        sock.setblocking(False)
        return sock

    def _run_loop(self, net: NetworkLoop) -> None:
        asyncio.set_event_loop(net.loop)
        net.start_sweeper()
        net.loop.run_forever()

    def _accept(self, sock: socket.socket, listener: str) -> None:
        # Accept a burst: one readiness event may stand for many queued connections. Sockets for
        # threaded network loops are handed over once per loop per burst: a cross-thread wake-up
        # per connection made accepting slower than a client can connect, so a burst of connects
        # overflowed Kafka's default backlog of 50 and the kernel dropped SYNs (1 s retries).
        handoff: dict[int, tuple[NetworkLoop, list[socket.socket]]] = {}
        try:
            for _ in range(256):
                try:
                    client, _addr = sock.accept()
                except (BlockingIOError, InterruptedError):
                    return
                except OSError as exc:
                    # EMFILE and friends: log and keep serving the connections we have.
                    log.warning("accept failed: %s", exc)
                    return
                client.setblocking(False)
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self.send_buffer_bytes > 0:
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
                if self.receive_buffer_bytes > 0:
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
                net = next(self._next_loop)
                if net.own_thread:
                    handoff.setdefault(id(net), (net, []))[1].append(client)
                else:
                    self._adopt(net, [client], listener)
        finally:
            for net, clients in handoff.values():
                net.loop.call_soon_threadsafe(self._adopt, net, clients, listener)

    def _adopt(self, net: NetworkLoop, clients: list[socket.socket], listener: str) -> None:
        """Start a Connection for each accepted socket, on ``net``'s own loop."""
        for client in clients:
            task = net.loop.create_task(net.loop.connect_accepted_socket(self._factory(net, listener), client))
            task.add_done_callback(_log_accept_failure)

    def stop_accepting(self) -> None:
        for sock in self.listen_sockets:
            if self.accepting:
                self.handler_loop.remove_reader(sock.fileno())
            sock.close()
        self.accepting = False
        self.listen_sockets.clear()

    def connections(self) -> list[Connection]:
        return [c for net in self.network_loops for c in list(net.connections)]

    async def drain(self, timeout: float) -> None:
        """Wait until no connection has a request without its response, or the timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(c.slots or c.out_queue for c in self.connections()):
                return
            await asyncio.sleep(0.01)

    async def close_all(self) -> None:
        for net in self.network_loops:
            for conn in list(net.connections):
                if net.own_thread:
                    net.loop.call_soon_threadsafe(conn.close)
                else:
                    conn.close()
            if net.own_thread:
                net.loop.call_soon_threadsafe(net.stop_sweeper)
                net.loop.call_soon_threadsafe(net.loop.stop)
            else:
                net.stop_sweeper()
        for net in self.network_loops:
            if net.thread is not None:
                await asyncio.get_running_loop().run_in_executor(None, net.thread.join, 5)


def _log_accept_failure(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("setting up an accepted connection failed: %s", task.exception())
