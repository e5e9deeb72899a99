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

import struct
from typing import NamedTuple

from odradek.protocol import primitives as P
from odradek.protocol.primitives import DecodeError

API_VERSIONS_KEY = 18
CONTROLLED_SHUTDOWN_KEY = 7


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    # Where the body starts in the frame.
    body_offset: int


_FIXED_STRUCT = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_FIXED = _FIXED_STRUCT.size
# The fixed part and client_id's length in one unpack: every request's header is read on the
# handler thread, so it is read in as few Python steps as the format allows.
_V1_STRUCT = struct.Struct(">hhih")


def peek_api(frame: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from the first 8 bytes of a request frame."""
    if len(frame) < _FIXED:
        raise DecodeError("request shorter than its header")
    return _FIXED_STRUCT.unpack_from(frame, 0)


def decode_request_header(frame: memoryview, flexible: bool, header_v0: bool = False) -> RequestHeader:
    """Decode the header; ``flexible`` selects v2 (tagged fields follow the client id)."""
    client_id: str | None
    if header_v0 or len(frame) < _V1_STRUCT.size:
        api_key, api_version, correlation_id = peek_api(frame)
        if header_v0:
            return RequestHeader(api_key, api_version, correlation_id, None, _FIXED)
        client_id, pos = P.read_string(frame, _FIXED)  # raises: too short for the client_id's length
    else:
        api_key, api_version, correlation_id, n = _V1_STRUCT.unpack_from(frame, 0)
        pos = _V1_STRUCT.size
        if n >= 0 and pos + n <= len(frame):
            try:
                client_id = str(frame[pos : pos + n], "utf-8")
            except UnicodeDecodeError as exc:
                raise DecodeError(f"string is not UTF-8: {exc}") from None
            pos += n
        else:  # null, or a length the frame does not hold: read_string says which, or raises
            client_id, pos = P.read_string(frame, _FIXED)
    if flexible:
        if pos < len(frame) and frame[pos] == 0:  # no tagged fields: the usual case
            pos += 1
        else:
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
