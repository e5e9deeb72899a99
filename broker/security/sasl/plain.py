"""SASL/PLAIN's server side (RFC 4616), as Kafka's PlainSaslServer and PlainServerCallbackHandler.

The client's single message is ``authzid NUL authcid NUL passwd`` (UTF-8). Users are the
``user_<name>="<password>"`` options of the listener's PlainLoginModule JAAS entry
(``listener.name.<l>.plain.sasl.jaas.config``). Kafka's messages, all sent to the client:
"Invalid SASL/PLAIN response: expected 3 tokens, got N", "Authentication failed: username not
specified" / "password not specified", "Authentication failed: Invalid username or password",
"Authentication failed: Client requested an authorization id that is different from username".
Passwords are compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from odradek.broker.security.sasl.mechanism import SaslAuthenticationError

PLAIN = "PLAIN"
JAAS_USER_PREFIX = "user_"


def plain_users(jaas_options: Mapping[str, str]) -> dict[str, str]:
    """user name -> password from a PlainLoginModule entry's options."""
    return {k[len(JAAS_USER_PREFIX):]: v for k, v in jaas_options.items() if k.startswith(JAAS_USER_PREFIX)}


class PlainSaslServer:
    mechanism = PLAIN

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._authorization_id: str | None = None

    @property
    def complete(self) -> bool:
        return self._authorization_id is not None

    @property
    def authorization_id(self) -> str:
        assert self._authorization_id is not None
        return self._authorization_id

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError("Invalid SASL/PLAIN response: expected 3 tokens, got 1") from None
        tokens = text.split("\x00")
        if len(tokens) != 3:
            raise SaslAuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, username, password = tokens
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        # Compare even for an unknown user, so the time taken does not say whether the user exists.
        matches = hmac.compare_digest((expected or "\x00" + password).encode(), password.encode())
        if expected is None or not matches:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        self._authorization_id = username
        return b""
