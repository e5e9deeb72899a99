"""SaslHandshake (api key 17): which SASL mechanism the client will authenticate with.

Versions 0-1, as Kafka 4.4. v0: the SASL tokens that follow are bare size-prefixed frames, without
Kafka headers (clients before KIP-152, Kafka 0.10.0-1.0); v1: they go in SaslAuthenticate requests.
Today's clients all send v1. On SASL listeners the connection's authenticator
(broker/security/sasl/authenticator.py) answers it before authentication and for KIP-368
re-authentication; this handler only sees what reaches the handlers: a handshake on a connection
that needs none (a PLAINTEXT listener, or one already authenticated without a session lifetime),
which Kafka's KafkaApis answers with ILLEGAL_SASL_STATE and the enabled list empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.protocol.messages import SaslHandshakeRequest, SaslHandshakeResponse

API_KEY = 17
NAME = "SaslHandshake"
VERSIONS = (0, 1)


def handle(request: ApiRequest[SaslHandshakeRequest]) -> SaslHandshakeResponse:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}


def error_response(request: ApiRequest[SaslHandshakeRequest], code: int) -> SaslHandshakeResponse:
    return {"error_code": code, "mechanisms": []}
