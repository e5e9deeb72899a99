"""A TCP proxy in front of one Kafka broker that records the (api key, version) of every request a client
sends through it: what a client actually used against that broker, whatever the broker logs.

The Kafka protocol over TCP, as far as this proxy reads it (Kafka's RequestHeader.json and
ResponseHeader.json; protocol/headers.py)::

    frame    = size int32 (big-endian, the bytes that follow) + payload
    request  = api_key int16, api_version int16, correlation_id int32, ...   (bodies are not decoded)
    response = correlation_id int32, [tagged fields if the request's version is flexible], body

Requests are relayed unchanged, each frame's first 4 bytes recorded. A client talks to the broker it
bootstrapped from only until it reads the broker's address from an answer; it then connects there, past
the proxy. So the answers that carry broker addresses are decoded and every address in them replaced
by the proxy's own (a client then sends everything here):

    Metadata (3)         brokers[].host/port
    FindCoordinator (10) host/port (v0-3), coordinators[].host/port (v4+)
    DescribeCluster (60) brokers[].host/port

Every other answer is relayed unchanged. That makes it a proxy for a single-broker cluster (every node
is this one). Not rewritten: the node endpoints Produce v10+ and Fetch v16+ answers carry with
NOT_LEADER_OR_FOLLOWER (KIP-951); a test makes its topics led before it produces (real_kafka.wait_until_led).

``RecordingProxy(host, port).start()``; ``pairs`` is what was recorded so far; ``errors`` lists the answers
it could not rewrite (a test asserts there are none). One proxy per (client, broker): its record is that
client's use of that broker.
"""

from __future__ import annotations

import struct
import threading

from odradek.protocol import primitives as P
from odradek.protocol.codec import codec, is_flexible
from tests.support.tcp_proxy import Relay, TcpProxy

_SIZE = struct.Struct(">i")
_REQUEST_START = struct.Struct(">hhi")

METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 3, 10, 60
_REWRITTEN = {METADATA: "MetadataResponse", FIND_COORDINATOR: "FindCoordinatorResponse",
              DESCRIBE_CLUSTER: "DescribeClusterResponse"}


def _frames(buffer: bytearray) -> list[bytes]:
    """The complete frames at the start of ``buffer`` (payloads, without their size), removed from it."""
    frames: list[bytes] = []
    pos = 0
    while len(buffer) - pos >= 4:
        (size,) = _SIZE.unpack_from(buffer, pos)
        if len(buffer) - pos - 4 < size:
            break
        frames.append(bytes(buffer[pos + 4: pos + 4 + size]))
        pos += 4 + size
    del buffer[:pos]
    return frames


class RecordingProxy(TcpProxy):
    # A client's connection may stay idle for longer than any timeout we could pick (a consumer between
    # heartbeats, an admin client between calls): never close it for that.
    upstream_timeout = None

    def __init__(self, target_host: str, target_port: int) -> None:
        super().__init__(target_host, target_port)
        self._record_lock = threading.Lock()
        self._pairs: set[tuple[int, int]] = set()
        self.errors: list[str] = []

    @property
    def pairs(self) -> set[tuple[int, int]]:
        with self._record_lock:
            return set(self._pairs)

    def _record(self, api_key: int, version: int) -> None:
        with self._record_lock:
            self._pairs.add((api_key, version))

    def _error(self, what: str) -> None:
        with self._record_lock:
            self.errors.append(what)

    def _relays(self) -> tuple[Relay | None, Relay | None]:
        return _Connection(self).relays()

    def rewrite(self, api_key: int, version: int, payload: bytes) -> bytes:
        """An answer to ``api_key`` v``version`` with every broker address in it this proxy's."""
        name = _REWRITTEN[api_key]
        start = P.skip_tagged_fields(payload, 4) if is_flexible(name, version) else 4
        c = codec(name, version)
        body, end = c.decode(payload, start)
        if end != len(payload):
            raise ValueError(f"{len(payload) - end} bytes after the body")
        host, port = "127.0.0.1", self.port
        if api_key == FIND_COORDINATOR and version < 4:
            nodes = [body] if body["port"] > 0 else []
        elif api_key == FIND_COORDINATOR:
            nodes = [n for n in body["coordinators"] if n["port"] > 0]
        else:
            nodes = body["brokers"]
        for node in nodes:
            node["host"], node["port"] = host, port
        return payload[:start] + c.encode(body)


class _Connection:
    """One relayed connection: its requests' frames read as they pass, its answers to the rewritten APIs
    (matched by correlation id) rewritten, the rest relayed as framed."""

    def __init__(self, proxy: RecordingProxy) -> None:
        self.proxy = proxy
        self._requests = bytearray()
        self._responses = bytearray()
        self._lock = threading.Lock()  # the two directions' threads share _pending
        self._pending: dict[int, tuple[int, int]] = {}

    def relays(self) -> tuple[Relay, Relay]:
        return self._to_server, self._to_client

    def _to_server(self, data: bytes) -> bytes:
        self._requests += data
        for frame in _frames(self._requests):
            if len(frame) < _REQUEST_START.size:
                self.proxy._error(f"a request frame of {len(frame)} bytes")
                continue
            api_key, version, correlation_id = _REQUEST_START.unpack_from(frame)
            self.proxy._record(api_key, version)
            if api_key in _REWRITTEN:
                with self._lock:
                    self._pending[correlation_id] = (api_key, version)
        # Requests go on unchanged and at once (registered above before they are sent).
        return data

    def _to_client(self, data: bytes) -> bytes:
        self._responses += data
        out = bytearray()
        for frame in _frames(self._responses):
            (correlation_id,) = struct.unpack_from(">i", frame) if len(frame) >= 4 else (None,)
            with self._lock:
                request = self._pending.pop(correlation_id, None) if correlation_id is not None else None
            if request is not None:
                try:
                    frame = self.proxy.rewrite(*request, frame)
                except Exception as exc:  # reported through errors: the test fails naming it
                    self.proxy._error(f"api {request[0]} v{request[1]}: {exc!r}")
            out += _SIZE.pack(len(frame)) + frame
        return bytes(out)
