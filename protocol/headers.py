"""Request and response headers (RequestHeader.json / ResponseHeader.json).

Request header, after the 4-byte frame size::

    v0: api_key int16, api_version int16, correlation_id int32
    v1: v0 + client_id (int16-length string, nullable)
    v2: v1 + tagged fields            (used by flexible request versions)

``client_id`` keeps the old int16 length even in v2: a broker must be able to read the header
of any ApiVersions request, whatever its version, before it knows what the client speaks.

Response header::

    v0: correlation_id int32
    v1: v0 + tagged fields            (flexible response versions)

Exception: ApiVersions responses always use header v0, so a client that sent a version the
broker does not know can still read the answer (KIP-511).
"""

from __future__ import annotations

from typing import NamedTuple

from protocol import primitives as P
from protocol.primitives import DecodeError

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # Where the body starts in the frame.
    body_offset: int


_FIXED = P.INT16.size * 2 + P.INT32.size


def peek_api(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a request frame."""
    if len(frame) < _FIXED:
        raise DecodeError("request shorter than its header")
    api_key, api_version = P.INT16.unpack_from(frame, 0)[0], P.INT16.unpack_from(frame, 2)[0]
    return api_key, api_version, P.INT32.unpack_from(frame, 4)[0]


def decode_request_header(frame: memoryview, flexible: bool, header_v0: bool = False) -> RequestHeader:
    """Decode the header; ``flexible`` selects v2 (tagged fields follow the client id)."""
    api_key, api_version, correlation_id = peek_api(frame)
    if header_v0:
        return RequestHeader(api_key, api_version, correlation_id, None, _FIXED)
    client_id, pos = P.read_string(frame, _FIXED)
    if flexible:
        pos = P.skip_tagged_fields(frame, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def encode_request_header(
    out: bytearray, api_key: int, api_version: int, correlation_id: int, client_id: str | None, flexible: bool
) -> None:
    """Used by tests and tools that speak to the broker as a client."""
    out += P.INT16.pack(api_key)
    out += P.INT16.pack(api_version)
    out += P.INT32.pack(correlation_id)
    P.write_string(out, client_id)
    if flexible:
        out.append(0)


def response_header(correlation_id: int, flexible: bool) -> bytes:
    if flexible:
        return P.INT32.pack(correlation_id) + b"\x00"
    return P.INT32.pack(correlation_id)
