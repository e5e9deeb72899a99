"""Requests one broker sends another over the Kafka protocol: forwarding to the controller, replica fetch.

Wire format (Kafka's): each request is ``int32 size`` + request header (v1, or v2 with an empty
tagged-field section for flexible versions) + the body encoded by ``odradek.protocol.codec``; each response
is ``int32 size`` + ``int32 correlation id`` (+ one empty tagged-field byte for flexible versions,
except ApiVersions) + the body. Requests are pipelined on one connection and matched to responses by
correlation id, as Kafka's NetworkClient does; a broker answers a connection's requests in order.

``NodeClient`` keeps one connection to one node (host, port), opened on the first request and
again after a failure; ``NodeClients`` keeps one per broker node for a component that talks to
several (made anew, the old one closed, when a node's address changes). A request fails with ``NodeUnavailableError`` when the node cannot be
reached, the connection breaks while it waits, or no answer comes within ``timeout_s``; the caller
decides whether to retry (the controller may have moved, a leader may be gone). Response bodies are
plain dicts; a ``records`` field is a memoryview into the response frame.

Ownership: the event loop that calls ``request`` (the broker's handler loop). Over TLS when the
inter-broker listener is SSL (``tls``, default: the broker's, odradek.broker.security.tls.inter_broker_tls).
``receive_buffer_bytes`` (the replica fetcher's ``replica.socket.receive.buffer.bytes``) sets the
socket's SO_RCVBUF before it connects, as Kafka's selector does: the TCP window scale is agreed in
the handshake, so a buffer enlarged afterwards could not use a window past 64 KiB. -1 or None
leave the OS default.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections.abc import Mapping
from typing import Any

from odradek.broker.security.sasl import inter_broker as inter_broker_sasl
from odradek.broker.security.tls import ClientTls, inter_broker_tls
from odradek.protocol.codec import codec, is_flexible
from odradek.protocol.headers import API_VERSIONS_KEY, encode_request_header
from odradek.protocol.schema_data import MESSAGES

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_API_NAMES: dict[int, str] = {}


def api_name(api_key: int) -> str:
    """Kafka's API name for ``api_key`` ("Fetch" for 1)."""
    if not _API_NAMES:
        for name, spec in MESSAGES.items():
            if spec["type"] == "request":
                _API_NAMES[spec["api_key"]] = name[: -len("Request")]
    return _API_NAMES[api_key]


class NodeUnavailableError(ConnectionError):
    """The node could not be reached, the connection broke, or it did not answer in time."""


async def _connect_with_receive_buffer(host: str, port: int, receive_buffer_bytes: int) -> socket.socket:
    """A TCP socket connected to ``host:port`` whose SO_RCVBUF was set before the handshake; each
    resolved address is tried in turn (the error of the last one is raised)."""
    loop = asyncio.get_running_loop()
    last_error: OSError = OSError(f"{host}:{port} resolved to no address")
    for family, type_, proto, _, address in await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            last_error = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise last_error


class NodeClient:
    """One pipelined connection to the broker at ``host:port``."""

    def __init__(self, host: str, port: int, client_id: str, timeout_s: float = 30.0,
                 max_frame_bytes: int = 256 * 1024 * 1024, tls: ClientTls | None = None,
                 receive_buffer_bytes: int | None = None) -> None:
        self.host = host
        self.tls = tls
        self.receive_buffer_bytes = receive_buffer_bytes
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._max_frame_bytes = max_frame_bytes
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        self._next_correlation_id = 0
        # correlation id -> (future, response name, version)
        self._pending: dict[int, tuple[asyncio.Future[dict[str, Any]], str, int]] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"NodeClient({self.host}:{self.port})"

    async def request(self, api_key: int, version: int, body: Mapping[str, Any],
                      timeout_s: float | None = None) -> Any:
        """Send one request and return the decoded response body (Any: the caller names its type,
        ``response: FetchResponse = await client.request(FETCH, ...)``)."""
        if self._closed:
            raise NodeUnavailableError(f"client for {self.host}:{self.port} is closed")
        writer = await self._connect()
        name = api_name(api_key)
        self._next_correlation_id = (self._next_correlation_id + 1) & 0x7FFFFFFF
        correlation_id = self._next_correlation_id
        out = bytearray(4)
        encode_request_header(out, api_key, version, correlation_id, self.client_id,
                              is_flexible(name + "Request", version))
        codec(name + "Request", version).encode_into(body, out)
        _SIZE.pack_into(out, 0, len(out) - 4)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (future, name + "Response", version)
        try:
            writer.write(out)
            await writer.drain()
            return await asyncio.wait_for(future, self.timeout_s if timeout_s is None else timeout_s)
        except (TimeoutError, OSError) as exc:
            self._fail_connection(exc)
            raise NodeUnavailableError(f"{api_name(api_key)} to {self.host}:{self.port} failed: "
                                       f"{str(exc) or type(exc).__name__}") from exc
        finally:
            self._pending.pop(correlation_id, None)

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._connecting:
            if self._writer is not None and not self._writer.is_closing():
                return self._writer
            try:
                reader, writer = await asyncio.wait_for(self._open(), self.timeout_s)
            except (TimeoutError, OSError) as exc:
                raise NodeUnavailableError(f"cannot connect to {self.host}:{self.port}: "
                                           f"{str(exc) or type(exc).__name__}") from exc
            sasl = inter_broker_sasl.current()
            if sasl is not None:  # the inter-broker listener is SASL: log in before anything else
                try:
                    await asyncio.wait_for(inter_broker_sasl.login(reader, writer, sasl, self.client_id),
                                           self.timeout_s)
                except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
                    writer.close()
                    raise NodeUnavailableError(f"SASL login to {self.host}:{self.port} failed: "
                                               f"{str(exc) or type(exc).__name__}") from exc
            self._writer = writer
            self._reader_task = asyncio.get_running_loop().create_task(self._read_responses(reader, writer))
            return writer

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        # TLS when the inter-broker listener is SSL/SASL_SSL (broker/security/tls.py): the broker's
        # truststore verifies the other broker, its host name is checked unless
        # ssl.endpoint.identification.algorithm is empty.
        tls = self.tls if self.tls is not None else inter_broker_tls()
        tls_args: dict[str, Any] = {}
        if tls is not None:
            tls_args = {"ssl": tls.context, "server_hostname": self.host if tls.verify_hostname else ""}
        if self.receive_buffer_bytes is None or self.receive_buffer_bytes == -1:
            return await asyncio.open_connection(self.host, self.port, **tls_args)
        sock = await _connect_with_receive_buffer(self.host, self.port, self.receive_buffer_bytes)
        try:
            return await asyncio.open_connection(sock=sock, **tls_args)
        except BaseException:
            sock.close()
            raise

    async def _read_responses(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                if not 4 <= size <= self._max_frame_bytes:
                    raise ConnectionError(f"response frame of {size} bytes from {self.host}:{self.port}")
                frame = await reader.readexactly(size)
                (correlation_id,) = _SIZE.unpack_from(frame, 0)
                waiting = self._pending.pop(correlation_id, None)
                if waiting is None:
                    continue  # its requester timed out and gave up
                future, name, version = waiting
                pos = 4
                if is_flexible(name, version) and not name.startswith("ApiVersions"):
                    pos += 1  # response header v1: empty tagged fields
                try:
                    body, _ = codec(name, version).decode(memoryview(frame), pos)
                except Exception as exc:  # a malformed answer fails that request, not the connection
                    if not future.done():
                        future.set_exception(NodeUnavailableError(f"bad {name} from {self.host}:{self.port}: {exc}"))
                    continue
                if not future.done():
                    future.set_result(body)
        except (OSError, asyncio.IncompleteReadError, ConnectionError) as exc:
            self._fail_connection(exc, writer)
        except asyncio.CancelledError:
            pass

    def _fail_connection(self, exc: BaseException, writer: asyncio.StreamWriter | None = None) -> None:
        """Close the connection and fail every request waiting on it."""
        current = self._writer
        if writer is not None and writer is not current:
            return  # an older connection, already replaced
        self._writer = None
        if current is not None:
            current.close()
        task, self._reader_task = self._reader_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        for future, _, _ in list(self._pending.values()):
            if not future.done():
                future.set_exception(NodeUnavailableError(f"connection to {self.host}:{self.port} lost "
                                                          f"({str(exc) or type(exc).__name__})"))
        self._pending.clear()

    async def close(self) -> None:
        self._closed = True
        writer = self._writer
        self._fail_connection(ConnectionError("client closed"))
        if writer is not None:
            with contextlib.suppress(Exception):
                await writer.wait_closed()


class NodeClients:
    """One ``NodeClient`` per broker node id, all with the same client id. The caller looks the
    node's address up (in its metadata image); a node whose address changed gets a new client and
    the old one is closed (its waiting requests fail with NodeUnavailableError, as on a lost
    connection)."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self._clients: dict[int, NodeClient] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def get(self, node: int, host: str, port: int) -> NodeClient:
        client = self._clients.get(node)
        if client is not None and (client.host, client.port) == (host, port):
            return client
        if client is not None:
            task = asyncio.get_running_loop().create_task(client.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        client = self._clients[node] = NodeClient(host, port, self.client_id)
        return client

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()


__all__ = ["API_VERSIONS_KEY", "NodeClient", "NodeClients", "NodeUnavailableError", "api_name"]
