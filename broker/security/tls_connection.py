"""What a TLS listener adds to a connection once its handshake is done: the client's principal.

Kafka's SslPrincipalBuilder (DefaultKafkaPrincipalBuilder for SSL): the peer certificate's subject
DN, in Java's RFC 2253 form (broker/security/rfc2253.py), mapped by ``ssl.principal.mapping.rules``
(broker/security/ssl_principal_mapper.py) to ``User:<name>``; ``User:ANONYMOUS`` when the client
presented no certificate (``ssl.client.auth`` none or requested). A DN no rule maps fails the
authentication: the connection is closed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from odradek.broker.security.principal import ANONYMOUS, USER_TYPE, KafkaPrincipal
from odradek.broker.security.rfc2253 import subject_rfc2253
from odradek.broker.security.ssl_principal_mapper import SslPrincipalMapper

# Longest a TLS handshake may take (ms), whatever connections.max.idle.ms says: a client that
# connects and stalls holds only its own socket, and only this long.
HANDSHAKE_TIMEOUT_CAP_MS = 10_000
# Write buffer high-water mark of a TLS connection: bytes encrypted but not yet taken by the socket
# before the connection stops producing (pause_writing). A plaintext connection uses 0 (see
# broker/network/connection.py); a TLS transport pauses at size >= high, so 0 would pause on every write.
TLS_WRITE_HIGH = 64 * 1024

PrincipalBuilder = Callable[[Any], KafkaPrincipal]


class FailureLog:
    """Failed TLS authentications, logged with the client address but at most ``burst`` lines per
    ``interval`` seconds: thousands of garbage connections must not flood the log (or the disk).
    The lines left out are counted and reported with the next one. Called from every network loop;
    under the GIL a race can only misplace a count, never lose a line it printed."""

    def __init__(self, logger: logging.Logger, burst: int = 10, interval: float = 1.0) -> None:
        self.logger, self.burst, self.interval = logger, burst, interval
        self._window = 0.0
        self._logged = 0
        self._suppressed = 0

    def failed(self, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._window >= self.interval:
            if self._suppressed:
                self.logger.info("%d more failed authentications were not logged (at most %d a second)",
                                 self._suppressed, self.burst)
            self._window, self._logged, self._suppressed = now, 0, 0
        if self._logged < self.burst:
            self._logged += 1
            self.logger.info(msg, *args)
        else:
            self._suppressed += 1


AUTH_FAILURES = FailureLog(logging.getLogger("odradek.broker.security"))


def principal_builder(mapping_rules: str) -> PrincipalBuilder:
    """``f(ssl_object) -> KafkaPrincipal`` for one listener; raises NoMatchingRule (a ValueError)."""
    mapper = SslPrincipalMapper(mapping_rules)

    def build(ssl_object: Any) -> KafkaPrincipal:
        der = ssl_object.getpeercert(binary_form=True)
        if not der:
            return ANONYMOUS
        return KafkaPrincipal(USER_TYPE, mapper.name(subject_rfc2253(der)))

    return build
