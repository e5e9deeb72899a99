"""The acceptor and the network loops (Kafka's SocketServer: Acceptor + Processors).

Shape, following the design card:

    acceptor (handler loop) ──round robin──▶ network loop 1..N (threads, own event loops)
                                               │ frames requests (broker/network/connection.py)
                                               ▼
                                   request channel (bounded, broker/network/request_channel.py)
                                               ▼
                                   handler loop: dispatcher + all broker state

With ``num.network.threads`` = 1 the single network loop is the handler loop itself: no thread
hop at all. Python's GIL means extra network threads mostly add hand-off cost; docs/reactor.md
has the measurements that chose Odradek's default (see there before changing it).

SSL listeners (``Endpoint.tls``) hand uvloop the listener's SSLContext: the Connection exists for
the client only once the handshake is done, which must happen within ``connections.max.idle.ms``
(capped at 10 s); a failed or timed-out handshake releases the socket and its connection slot and
is logged as Kafka logs it ("Failed authentication with <ip> (SSL handshake failed)").

Idle connections (no bytes received and no response pending for ``connections.max.idle.ms``)
are closed by a sweeper on each network loop, as Kafka's Selector does.

Accepting (on the handler loop) applies the connection limits (broker/network/connection_quotas.py) and
pauses a listener for three reasons, each with its own guaranteed resumption:
- ``max.connections`` reached: the accepted socket is held and the listener's reader removed until
  a connection closes (``ConnectionQuotas.dec`` wakes ``_retry_held`` under the quota lock);
- ``max.connection.creation.rate`` (broker-wide or the listener's) exceeded (KIP-612): the accepted
  socket is held and the listener's reader removed for the throttle time, then the socket is
  admitted (broker/network/connection_rates.py); a socket over its address's connection_creation_rate
  is instead closed after its throttle time, unread;
- accept failing for lack of resources (EMFILE, ENFILE, ENOBUFS, ENOMEM): the listener's reader is
  removed for ``ACCEPT_BACKOFF_SECONDS`` and re-added by a timer, and failures are logged at most
  once a second with their count. Without the pause a level-triggered reader re-enters ``accept``
  at once: ~60,000 failing calls (and log lines) a second while the process is out of fds.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.broker.network.connection import Connection
from odradek.broker.network.connection_quotas import Admit, ConnectionQuotas, normalize_ip
from odradek.broker.network.connection_rates import ConnectionRates
from odradek.broker.network.request_channel import RequestChannel
from odradek.broker.security.sasl.authenticator import SaslAuthenticator
from odradek.broker.security.tls import ListenerTls
from odradek.broker.security.tls_connection import AUTH_FAILURES, HANDSHAKE_TIMEOUT_CAP_MS, principal_builder

log = logging.getLogger(__name__)

INT_MAX = 2**31 - 1
# How long a listener stops accepting after accept failed for lack of resources (fds, buffers).
ACCEPT_BACKOFF_SECONDS = 0.1
# At most one log line per this many seconds about failing accepts.
ACCEPT_FAILURE_LOG_INTERVAL = 1.0
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class ListenerBindError(OSError):
    """A listener could not be bound or listen (address in use, not this machine's, a privileged
    port, an unresolvable host). Its text is Kafka's "Socket server failed to bind to host:port:
    reason." with the listener's name, so the one start-up line says which address and why."""


@dataclass
class Endpoint:
    name: str
    host: str
    port: int
    # SSL / SASL_SSL listeners: the server context and the certificate principal mapping.
    tls: ListenerTls | None = None


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

    def track(self, conn: Connection, on_gone: Callable[[], None]) -> None:
        self.connections.add(conn)

        def gone(c: Connection) -> None:
            self.connections.discard(c)
            on_gone()

        conn.on_close = gone

    def start_sweeper(self) -> None:
        interval = max(0.05, min(self.idle_ms / 4000.0, 30.0))

        def sweep() -> None:
            cutoff = time.monotonic() - self.idle_ms / 1000.0
            for conn in list(self.connections):
                # transport None: a TLS handshake still running; its own timeout ends it.
                if conn.last_active < cutoff and not conn.slots and conn.transport is not None:
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
        max_connections: int = INT_MAX,
        max_connections_per_ip: int = INT_MAX,
        max_connections_per_ip_overrides: Mapping[str, int] | None = None,
        sasl_authenticators: Mapping[str, Callable[[], SaslAuthenticator]] | None = None,
        connection_rates: ConnectionRates | None = None,
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
        # Listener name -> a new connection's SASL authenticator (SASL_* listeners only).
        self.sasl_authenticators = dict(sasl_authenticators or {})
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
        self.quotas = ConnectionQuotas(max_connections, max_connections_per_ip,
                                       max_connections_per_ip_overrides or {}, self._slot_freed)
        # KIP-612 connection creation rates (broker/network/connection_rates.py).
        self.rates = connection_rates or ConnectionRates(11, 1)
        # Called on the handler loop after a client connection closed (Kafka's SocketServer
        # connectionDisconnectListeners: the share sessions release a gone member's records).
        self.disconnect_listeners: list[Callable[[], None]] = []
        # Per listener, the accepted socket the acceptor waits with because of a creation rate.
        self._rate_held: dict[str, tuple[socket.socket, str, asyncio.TimerHandle]] = {}
        # Sockets over their address's connection_creation_rate, closed when their timer fires.
        self._delayed_close: dict[socket.socket, asyncio.TimerHandle] = {}
        self._listen_by_name: dict[str, socket.socket] = {}
        # Why each listener is not accepting right now ("max.connections", "connection.rate", "backoff").
        self._pauses: dict[str, set[str]] = {}
        # Per listener, the accepted socket waiting for a max.connections slot, with its address.
        self._held: dict[str, tuple[socket.socket, str]] = {}
        self._accept_failures_unlogged = 0
        self._accept_failing = False
        self._last_failure_log = -ACCEPT_FAILURE_LOG_INTERVAL
        self._backoff_timers: dict[str, asyncio.TimerHandle] = {}
        self._tls = {ep.name: ep.tls for ep in endpoints if ep.tls is not None}
        self._principal_builders = {name: principal_builder(t.mapping_rules) for name, t in self._tls.items()}
        # A TLS client gets this long to finish its handshake (it is not yet a Connection the idle
        # sweeper sees): connections.max.idle.ms, capped so stalled handshakes cannot pile up.
        self.ssl_handshake_timeout = max(0.1, min(idle_ms, HANDSHAKE_TIMEOUT_CAP_MS) / 1000)

    def _factory(self, net: NetworkLoop, listener: str, ip: str, made: list[Connection]) -> Callable[[], Connection]:
        def make() -> Connection:
            conn = Connection(self.channel, self.max_request_size, listener)
            conn.tls_principal = self._principal_builders.get(listener)
            sasl = self.sasl_authenticators.get(listener)
            if sasl is not None:
                conn.sasl = sasl()
                conn.sasl.on_connection(conn)
            net.track(conn, lambda: self._connection_gone(ip))
            made.append(conn)
            return conn

        return make

    def _connection_gone(self, ip: str) -> None:
        # On the connection's network loop (maybe another thread than the handler loop's).
        self.quotas.dec(ip)
        for listener in self.disconnect_listeners:
            try:
                self.handler_loop.call_soon_threadsafe(listener)
            except RuntimeError:
                pass  # the handler loop is closed: shutting down

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
        self.accepting = True
        for ep, sock in zip(self.endpoints, self.listen_sockets, strict=True):
            self._listen_by_name[ep.name] = sock
            self._pauses[ep.name] = set()
            self.handler_loop.add_reader(sock.fileno(), self._accept, sock, ep.name)

    # -- pausing a listener ----------------------------------------------------------------------

    def _pause(self, listener: str, reason: str) -> None:
        reasons = self._pauses.get(listener)
        if reasons is None:
            return
        if not reasons:
            self.handler_loop.remove_reader(self._listen_by_name[listener].fileno())
        reasons.add(reason)

    def _resume(self, listener: str, reason: str) -> None:
        reasons = self._pauses.get(listener)
        if reasons is None or reason not in reasons:
            return
        reasons.discard(reason)
        if not reasons and self.accepting:
            sock = self._listen_by_name[listener]
            self.handler_loop.add_reader(sock.fileno(), self._accept, sock, listener)

    def _listen(self, ep: Endpoint) -> socket.socket:
        host = ep.host or None
        where = f"{ep.host or '0.0.0.0'}:{ep.port} (listener {ep.name})"
        try:
            infos = socket.getaddrinfo(host, ep.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except OSError as exc:  # socket.gaierror: Kafka says "Unresolved address"
            raise ListenerBindError(f"Socket server failed to bind to {where}: {exc.strerror or exc}.") from None
        family, _, _, _, addr = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and not ep.host:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(addr)
            sock.listen(self.backlog)
        except OSError as exc:
            sock.close()
            raise ListenerBindError(f"Socket server failed to bind to {where}: {exc.strerror or exc}.") from None
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
        handoff: dict[int, tuple[NetworkLoop, list[tuple[socket.socket, str]]]] = {}
        try:
            for _ in range(256):
                try:
                    client, addr = sock.accept()
                except (BlockingIOError, InterruptedError):
                    return
                except ConnectionAbortedError:
                    continue  # the client gave up while queued; nothing to do
                except OSError as exc:
                    self._accept_failed(listener, exc)
                    return
                if self._accept_failing:
                    self._accept_recovered()
                ip = normalize_ip(addr[0]) if isinstance(addr, tuple) else str(addr)
                if not self._admit(client, ip, listener, handoff):
                    return
        finally:
            for net, clients in handoff.values():
                net.loop.call_soon_threadsafe(self._adopt, net, clients, listener)

    def _admit(self, client: socket.socket, ip: str, listener: str,
               handoff: dict[int, tuple[NetworkLoop, list[tuple[socket.socket, str]]]] | None,
               admit: Admit | None = None, rate_checked: bool = False) -> bool:
        """Apply the connection limits to an accepted socket; False: stop accepting on ``listener``.
        ``admit`` given: the rates and the counts were already applied (a held socket's retry)."""
        if admit is None:
            if not rate_checked:
                delay = self.rates.record_connection(listener)
                if delay:
                    # KIP-612: Kafka's acceptor waits holding this connection; the rest wait in the
                    # listen backlog. A timer, so every established connection keeps being served.
                    log.debug("max.connection.creation.rate reached on %s: %s waits %d ms", listener, ip, delay)
                    timer = self.handler_loop.call_later(delay / 1000.0, self._rate_wait_over, listener)
                    self._rate_held[listener] = (client, ip, timer)
                    self._pause(listener, "connection.rate")
                    return False
            delay = self.rates.ip_throttle(ip, listener)
            if delay:
                # Kafka's ConnectionThrottledException: closed after the throttle time, unread.
                log.debug("Throttling connection from %s for %d ms (connection_creation_rate)", ip, delay)
                self._delayed_close[client] = self.handler_loop.call_later(delay / 1000.0, self._close_delayed,
                                                                           client)
                return True
            admit = self.quotas.try_inc(ip)
        if admit is Admit.REJECTED:
            log.info("Rejected connection from %s, address already has the configured maximum of %d connections.",
                     ip, self.quotas.limit_for(ip))
            _close_quietly(client)
            return True
        if admit is Admit.BLOCKED:
            # Kafka's acceptor blocks in ConnectionQuotas.inc holding this socket; the rest wait in
            # the listen backlog. The quotas call _slot_freed when a connection closes.
            log.debug("max.connections=%d reached; %s waits for a free slot", self.quotas.max_connections, ip)
            self._held[listener] = (client, ip)
            self._pause(listener, "max.connections")
            return False
        try:
            client.setblocking(False)
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.send_buffer_bytes > 0:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
            if self.receive_buffer_bytes > 0:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
        except OSError as exc:
            # Kafka: "Encountered an error while configuring the connection, closing it."
            log.info("closing %s: configuring the accepted socket failed: %s", ip, exc)
            _close_quietly(client)
            self.quotas.dec(ip)
            return True
        net = next(self._next_loop)
        if net.own_thread and handoff is not None:
            handoff.setdefault(id(net), (net, []))[1].append((client, ip))
        elif net.own_thread:
            net.loop.call_soon_threadsafe(self._adopt, net, [(client, ip)], listener)
        else:
            self._adopt(net, [(client, ip)], listener)
        return True

    def _rate_wait_over(self, listener: str) -> None:
        held = self._rate_held.pop(listener, None)
        if held is None:
            return
        client, ip, _ = held
        if not self.accepting:
            _close_quietly(client)
            return
        self._admit(client, ip, listener, None, rate_checked=True)
        # If it is now held for max.connections, that pause keeps the listener stopped.
        self._resume(listener, "connection.rate")

    def _close_delayed(self, client: socket.socket) -> None:
        self._delayed_close.pop(client, None)
        _close_quietly(client)

    def _slot_freed(self) -> None:
        """Called by the quotas on any thread once a slot frees while the acceptor waits for one."""
        try:
            self.handler_loop.call_soon_threadsafe(self._retry_held)
        except RuntimeError:
            pass  # the handler loop is closed: shutting down

    def _retry_held(self) -> None:
        for listener, (client, ip) in list(self._held.items()):
            if not self.accepting:
                return
            admit = self.quotas.try_inc(ip)
            if admit is Admit.BLOCKED:
                return  # still full; try_inc re-armed the wake-up under the quota lock
            del self._held[listener]
            self._admit(client, ip, listener, None, admit)
            self._resume(listener, "max.connections")

    def _accept_failed(self, listener: str, exc: OSError) -> None:
        # Out of fds or buffers: stop accepting on this listener for a while (the reader is
        # level-triggered, so returning alone would spin), keep serving the connections we have.
        self._accept_failing = True
        self._accept_failures_unlogged += 1
        self._pause(listener, "backoff")
        self._backoff_timers[listener] = self.handler_loop.call_later(ACCEPT_BACKOFF_SECONDS, self._end_backoff, listener)
        now = time.monotonic()
        if now - self._last_failure_log >= ACCEPT_FAILURE_LOG_INTERVAL:
            resource = exc.errno in _RESOURCE_ERRNOS
            log.warning("accept on %s failed %d time(s) since the last report: %s; %s", listener,
                        self._accept_failures_unlogged, exc,
                        f"pausing accepts for {ACCEPT_BACKOFF_SECONDS * 1000:.0f} ms after each failure"
                        + (" (raise the open-files limit, ulimit -n)" if resource else ""))
            self._last_failure_log = now
            self._accept_failures_unlogged = 0

    def _end_backoff(self, listener: str) -> None:
        self._backoff_timers.pop(listener, None)
        self._resume(listener, "backoff")

    def _accept_recovered(self) -> None:
        self._accept_failing = False
        now = time.monotonic()
        if now - self._last_failure_log >= ACCEPT_FAILURE_LOG_INTERVAL:
            log.warning("accepting connections again (%d failed accept(s) since the last report)",
                        self._accept_failures_unlogged)
            self._last_failure_log = now
            self._accept_failures_unlogged = 0

    def _adopt(self, net: NetworkLoop, clients: list[tuple[socket.socket, str]], listener: str) -> None:
        """Start a Connection for each accepted socket, on ``net``'s own loop."""
        tls = self._tls.get(listener)
        for client, ip in clients:
            made: list[Connection] = []
            factory = self._factory(net, listener, ip, made)
            if tls is None:
                coro = net.loop.connect_accepted_socket(factory, client)
            else:
                # The task ends once the TLS handshake is done (or failed, or timed out).
                coro = net.loop.connect_accepted_socket(factory, client, ssl=tls.context,
                                                        ssl_handshake_timeout=self.ssl_handshake_timeout)
            task = net.loop.create_task(coro)
            task.add_done_callback(functools.partial(self._adopted, client=client, ip=ip, net=net, made=made,
                                                     listener=listener))

    def _adopted(self, task: asyncio.Task[Any], client: socket.socket, ip: str, net: NetworkLoop,
                 made: list[Connection], listener: str) -> None:
        if task.cancelled() or task.exception() is not None:
            if any(conn.transport is not None for conn in made):
                return  # connected after all: connection_lost releases the slot
            exc = None if task.cancelled() else task.exception()
            if listener in self._tls:
                # Kafka: "Failed authentication with /ip (SSL handshake failed)". Only this client
                # is affected; its socket and slot are released here.
                AUTH_FAILURES.failed("Failed authentication with %s on %s (SSL handshake failed: %s)", ip, listener,
                                     str(exc) or type(exc).__name__)
            elif exc is not None:
                log.warning("setting up an accepted connection failed: %s", exc)
            for conn in made:  # created for the handshake, never connected: forget it
                conn.closed = True
                net.connections.discard(conn)
            _close_quietly(client)
            self.quotas.dec(ip)

    # -- dynamic limits ----------------------------------------------------------------------------

    def reconfigure_quotas(self, max_connections: int, max_per_ip: int, overrides: Mapping[str, int]) -> None:
        """Apply new max.connections / max.connections.per.ip(.overrides) (handler loop). Connections
        beyond a lowered max.connections are closed, least recently active first (Kafka's processors
        close their lowest-priority channel while ``maxConnectionsExceeded``). Existing connections
        above a lowered per-IP limit stay open, as in Kafka."""
        self.quotas.update(max_connections, max_per_ip, overrides)
        excess = self.quotas.excess()
        if excess:
            victims = sorted(self.connections(), key=lambda c: c.last_active)[:excess]
            log.info("max.connections lowered to %d: closing %d least recently active connection(s)",
                     max_connections, len(victims))
            for conn in victims:
                self.channel.close(conn)

    def stop_accepting(self) -> None:
        for name, sock in self._listen_by_name.items():
            if self.accepting and not self._pauses.get(name):
                self.handler_loop.remove_reader(sock.fileno())
        for sock in self.listen_sockets:
            sock.close()
        self.accepting = False
        self.listen_sockets.clear()
        self._listen_by_name.clear()
        self._pauses.clear()
        for timer in self._backoff_timers.values():
            timer.cancel()
        self._backoff_timers.clear()
        for client, _ip in self._held.values():
            _close_quietly(client)
        self._held.clear()
        for client, _ip, timer in self._rate_held.values():
            timer.cancel()
            _close_quietly(client)
        self._rate_held.clear()
        for client, timer in self._delayed_close.items():
            timer.cancel()
            _close_quietly(client)
        self._delayed_close.clear()

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


def _close_quietly(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
