"""A raw-socket Kafka client for tests: frames requests with our codecs and reads exact responses."""

from __future__ import annotations

import socket
import ssl
import struct
import uuid

from odradek.protocol.codec import codec, is_flexible
from odradek.protocol.headers import encode_request_header

API_NAMES: dict[int, str] = {}


def _api_name(api_key: int) -> str:
    if not API_NAMES:
        from odradek.protocol.schema_data import MESSAGES

        for name, spec in MESSAGES.items():
            if spec["type"] == "request":
                API_NAMES[spec["api_key"]] = name[: -len("Request")]
    return API_NAMES[api_key]


def create_topic(c: WireClient, name: str, partitions: int) -> uuid.UUID:
    """CreateTopics v7 of one topic (replication factor 1); asserts success, returns its topic id."""
    resp = c.request(19, 7, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1}],
                             "timeout_ms": 5000})
    assert resp["topics"][0]["error_code"] == 0, resp
    return resp["topics"][0]["topic_id"]


class WireClient:
    def __init__(self, host: str, port: int, client_id: str | None = "wire-test", timeout: float = 10.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        if ssl_context is not None:  # an SSL listener: handshake first (tests/support/certs.py)
            self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host)
        self.client_id = client_id
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def encode_request(self, api_key: int, version: int, body: dict) -> tuple[int, bytes]:
        self.correlation_id += 1
        name = _api_name(api_key)
        out = bytearray()
        encode_request_header(out, api_key, version, self.correlation_id, self.client_id,
                              is_flexible(name + "Request", version))
        codec(name + "Request", version).encode_into(body, out)
        return self.correlation_id, struct.pack(">i", len(out)) + bytes(out)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("connection closed by broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exact(4))
        return self.recv_exact(size)

    def request(self, api_key: int, version: int, body: dict) -> dict:
        corr, data = self.encode_request(api_key, version, body)
        self.send_raw(data)
        return self.read_response(api_key, version, corr)

    def read_response(self, api_key: int, version: int, corr: int) -> dict:
        return self.decode_response(self.recv_frame(), api_key, version, corr)

    @staticmethod
    def decode_response(frame: bytes, api_key: int, version: int, corr: int) -> dict:
        """A response frame (as ``recv_frame`` returns it) decoded, its correlation id checked."""
        (got,) = struct.unpack_from(">i", frame, 0)
        assert got == corr, f"correlation id {got} != {corr}"
        name = _api_name(api_key) + "Response"
        pos = 4
        if is_flexible(name, version) and api_key != 18:
            pos += 1  # empty tagged fields of response header v1
        body, end = codec(name, version).decode(frame, pos)
        assert end == len(frame), f"{len(frame) - end} trailing bytes in {name} v{version}"
        return body

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):  # over TLS a close may arrive as an alert
            return True
        except TimeoutError:
            return False
