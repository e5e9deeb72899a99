"""What a SASL mechanism's server side is to the authenticator, and how it fails.

``SaslServer.evaluate(token)`` returns the challenge to send back (b"" for none) or raises:
- :class:`SaslAuthenticationError`: the message goes to the client as is (Kafka's
  SaslAuthenticationException; the mechanism chose a message that leaks nothing);
- :class:`SaslError`: the client gets Kafka's generic "Authentication failed during authentication
  due to invalid credentials with SASL mechanism X" (Kafka's SaslException: the detail may say
  whether a user exists, so it is only logged at DEBUG).
"""

from __future__ import annotations

from typing import Protocol


class SaslError(Exception):
    """A failed exchange whose detail must not reach the client."""


class SaslAuthenticationError(Exception):
    """A failed exchange whose message is sent to the client."""


class SaslServer(Protocol):
    mechanism: str

    def evaluate(self, token: bytes) -> bytes: ...

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str:
        """The authenticated user name (valid once ``complete``)."""
        ...
