"""The Produce request decoder and response encoder, native (issue 18: the Produce hot path).

Formats: Kafka's ProduceRequest and ProduceResponse, versions 3-13 (v12, KIP-890 part 2, has v11's
format; v13, KIP-516, names topics by topic_id instead of name), as protocol/schema_data.py
describes them (``protocol/_produce_codec.c`` spells them out). Every other message, and these two
when the extension was not built, use the codec odradek.protocol.codec generates from the schema.

Why native: decoding a one-partition Produce request and encoding its answer took ~17 us of
Python per request, about a fifth of the handler thread's work besides the write
(docs/performance.md). The native pair does the same work in one pass each.

Contract (tests/protocol/test_produce_codec.py checks it against the generated codec on generated
and mutated messages): :func:`native_decoder` returns a function with the generated decoder's
signature, ``(memoryview, pos) -> (dict, end)``, giving an equal dict (records as zero-copy
memoryview slices of the frame) or raising DecodeError for the same inputs. :func:`native_encoder`
returns ``(message, out, regions)`` like the generated encoder, appending the same bytes; a message
shape the native encoder does not take (a pre-encoded element, a KIP-951 tagged field to write, a
value out of its field's range) is handed to the generated encoder unchanged.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any

from odradek.protocol.primitives import DecodeError


@functools.lru_cache(maxsize=4096)
def _uuid_from_bytes(raw: bytes) -> uuid.UUID:
    """v13's topic ids decode to uuid.UUID, as the generated decoder's do (handlers look topics up by
    them). A producer names the same few topics in every request: the cache (bounded, whatever ids
    a client sends) makes each one a C-level dict hit instead of UUID's Python constructor."""
    return uuid.UUID(bytes=raw)


_native: Any
try:
    from odradek.protocol import _produce_codec as _native
except ImportError:  # built without a C compiler (setup.py: optional)
    _native = None
else:
    _native.init(DecodeError, _uuid_from_bytes)

NATIVE = _native is not None
VERSIONS = range(3, 14)
FLEXIBLE_FROM = 9
TOPIC_IDS_FROM = 13

Decoder = Callable[[memoryview, int], tuple[dict, int]]
Encoder = Callable[[dict, bytearray, list], None]


def native_decoder(name: str, version: int) -> Decoder | None:
    """The native decoder for ``name`` at ``version``, or None (use the generated one)."""
    if _native is None or name != "ProduceRequest" or version not in VERSIONS:
        return None
    decode = _native.decode_request
    flexible = version >= FLEXIBLE_FROM
    by_id = version >= TOPIC_IDS_FROM

    def decode_produce_request(buf: memoryview, pos: int) -> tuple[dict, int]:
        return decode(buf, pos, flexible, by_id)

    return decode_produce_request


def native_encoder(name: str, version: int, generated: Encoder) -> Encoder | None:
    """The native encoder for ``name`` at ``version``, falling back to ``generated`` for message
    shapes it does not take; None when there is none (use ``generated`` alone)."""
    if _native is None or name != "ProduceResponse" or version not in VERSIONS:
        return None
    encode = _native.encode_response

    def encode_produce_response(message: dict, out: bytearray, regions: list[Any]) -> None:
        if type(message) is not dict or not encode(message, out, version):
            generated(message, out, regions)

    return encode_produce_response
