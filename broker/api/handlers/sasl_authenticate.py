"""SaslAuthenticate (api key 36): one SASL token of the authentication exchange (KIP-152).

Versions 0-2. v1: session_lifetime_ms in the response (KIP-368 re-authentication). v2: flexible.
On SASL listeners the connection's authenticator (broker/security/sasl/authenticator.py) answers
every SaslAuthenticate of the exchange; this handler only sees one that arrives where no exchange
is running (a PLAINTEXT listener, or after authentication completed), which Kafka's KafkaApis
answers with ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.broker.api.request_types import ApiRequest
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.protocol.messages import SaslAuthenticateRequest, SaslAuthenticateResponse

API_KEY = 36
NAME = "SaslAuthenticate"
VERSIONS = (0, 2)


def handle(request: ApiRequest[SaslAuthenticateRequest]) -> SaslAuthenticateResponse:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE,
            "error_message": "SaslAuthenticate request received after successful authentication",
            "auth_bytes": b"", "session_lifetime_ms": 0}


def error_response(request: ApiRequest[SaslAuthenticateRequest], code: int) -> SaslAuthenticateResponse:
    return {"error_code": code, "error_message": None, "auth_bytes": b"", "session_lifetime_ms": 0}
