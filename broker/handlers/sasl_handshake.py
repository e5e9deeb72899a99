"""SaslHandshake (api key 17): which SASL mechanism the client will authenticate with.

Version 1 (v0, where raw SASL tokens without Kafka framing follow, is not served; every client we
test sends v1 when it is advertised). On SASL listeners the connection's authenticator
(broker/security/sasl/authenticator.py) answers it before authentication and for KIP-368
re-authentication; this handler only sees what reaches the handlers: a handshake on a connection
that needs none (a PLAINTEXT listener, or one already authenticated without a session lifetime),
which Kafka's KafkaApis answers with ILLEGAL_SASL_STATE and the enabled list empty.
"""

from __future__ import annotations

from broker.request_types import ApiRequest
from protocol.errors import ErrorCode

API_KEY = 17
NAME = "SaslHandshake"
VERSIONS = (1, 1)


def handle(request: ApiRequest) -> dict:
    return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": []}


def error_response(request: ApiRequest, code: int) -> dict:
    return {"error_code": code, "mechanisms": []}
