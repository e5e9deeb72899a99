"""This broker's own SASL login when it connects to another broker's SASL inter-broker listener.

Kafka's inter-broker client authenticates with ``sasl.mechanism.inter.broker.protocol`` and the
username/password of that mechanism's JAAS entry on the inter-broker listener
(settings.inter_broker_sasl). ``login`` runs the exchange on a fresh connection before any other
request: SaslHandshake v1, then SaslAuthenticate v1 tokens (PLAIN: one; SCRAM: two, the server's
signature verified). A refusal raises ``ConnectionError`` with Kafka's message (never the password).

``configure`` is called once at start-up; every ``NodeClient`` (forwarding to the controller,
replica fetchers, transaction markers) reads ``current()`` when it opens a connection.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from odradek.broker.security.sasl.client import ScramClient, plain_token
from odradek.broker.security.sasl.plain import PLAIN
from odradek.broker.security.sasl.settings import InterBrokerSasl
from odradek.protocol.codec import codec, is_flexible
from odradek.protocol.headers import encode_request_header

_SIZE = struct.Struct(">i")
_current: InterBrokerSasl | None = None


def configure(sasl: InterBrokerSasl | None) -> None:
    global _current
    _current = sasl


def current() -> InterBrokerSasl | None:
    return _current


async def _call(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api: str, api_key: int, version: int,
                body: dict[str, Any], correlation_id: int, client_id: str) -> dict[str, Any]:
    out = bytearray(4)
    encode_request_header(out, api_key, version, correlation_id, client_id, is_flexible(api + "Request", version))
    codec(api + "Request", version).encode_into(body, out)
    _SIZE.pack_into(out, 0, len(out) - 4)
    writer.write(out)
    await writer.drain()
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    if not 4 <= size <= 1 << 20:
        raise ConnectionError(f"{api} response of {size} bytes")
    frame = await reader.readexactly(size)
    pos = 5 if is_flexible(api + "Response", version) else 4
    response, _ = codec(api + "Response", version).decode(memoryview(frame), pos)
    return response


async def login(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sasl: InterBrokerSasl,
                client_id: str) -> None:
    """Authenticate this connection; ConnectionError if refused."""
    hs = await _call(reader, writer, "SaslHandshake", 17, 1, {"mechanism": sasl.mechanism}, 0x7FFF0001, client_id)
    if hs["error_code"]:
        raise ConnectionError(f"SASL handshake for {sasl.mechanism} refused (error {hs['error_code']}, enabled: "
                              f"{', '.join(hs['mechanisms'])})")

    async def token(data: bytes, n: int) -> bytes:
        resp = await _call(reader, writer, "SaslAuthenticate", 36, 1, {"auth_bytes": data}, 0x7FFF0001 + n,
                           client_id)
        if resp["error_code"]:
            raise ConnectionError(f"SASL authentication as {sasl.username} failed: {resp['error_message']}")
        return bytes(resp["auth_bytes"])

    if sasl.mechanism == PLAIN:
        await token(plain_token(sasl.username, sasl.password), 1)
        return
    client = ScramClient(sasl.mechanism, sasl.username, sasl.password)
    server_first = await token(client.first(), 1)
    try:
        client.verify(await token(client.final(server_first), 2))
    except ValueError as exc:
        raise ConnectionError(f"SCRAM server of {sasl.mechanism} failed verification: {exc}") from None
