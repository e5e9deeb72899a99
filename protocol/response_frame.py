"""A response frame as Kafka's wire carries it: INT32 size, the response header, the body.

    Response => Size Header Body
      Size   => INT32: bytes of Header and Body
      Header => correlation_id INT32 [TAG_BUFFER when the header is flexible (v1)]
      Body   => the API's response schema at the request's version (protocol/codec.py)

Header v1 is used when the response schema is flexible at that version, except ApiVersions, whose
response header is always v0 (a client that sent an unsupported version must still parse it).
Record sets encoded as file regions (sendfile) are not copied: the frame comes back as chunks,
bytes and regions in order, and the size prefix counts the regions' bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from odradek.protocol import primitives as P
from odradek.protocol.codec import codec
from odradek.protocol.headers import response_header


def encode_response(
    schema: str, version: int, correlation_id: int, body: Mapping[str, Any], header_flexible: bool
) -> list[Any]:
    """Size-prefixed response frame as chunks: bytes, and file regions where records are sendfile'd."""
    out = bytearray(b"\x00\x00\x00\x00")
    out += response_header(correlation_id, header_flexible)
    regions: list[tuple[int, Any]] = []
    codec(schema, version).encode_into(body, out, regions)
    if not regions:
        P.INT32.pack_into(out, 0, len(out) - 4)
        return [out]
    P.INT32.pack_into(out, 0, len(out) - 4 + sum(region.size for _, region in regions))
    chunks: list[Any] = []
    start = 0
    view = memoryview(out)
    for at, region in regions:
        if at > start:
            chunks.append(view[start:at])
        if region.size:
            chunks.append(region)
        start = at
    if start < len(out):
        chunks.append(view[start:])
    return chunks
