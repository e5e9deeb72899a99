"""Wiring: the SASL authenticator factory of each SASL listener, for the socket server.

SCRAM credentials are read from the broker's current metadata image (the controller writes them as
UserScramCredentialRecords, so every broker of a cluster sees the same users); PLAIN users come
from the listener's JAAS config. Called once at start-up, on the handler loop.
"""

from __future__ import annotations

from collections.abc import Callable

from odradek.broker.security.sasl.authenticator import SaslAuthenticator, authenticator_factory
from odradek.broker.security.sasl.scram_formatter import MECHANISMS_BY_NAME, ScramCredential
from odradek.broker.security.sasl.settings import listener_settings
from odradek.controller.image import MetadataImage


def sasl_authenticators(config: object, image: Callable[[], MetadataImage],
                        max_request_size: int) -> dict[str, Callable[[], SaslAuthenticator]]:
    """Listener name -> a new connection's authenticator, for every SASL listener of ``config``."""

    def lookup(user: str, mechanism: str) -> ScramCredential | None:
        mech = MECHANISMS_BY_NAME.get(mechanism)
        record = None if mech is None else image().scram_credentials.get((user, mech.type_id))
        if record is None:
            return None
        return ScramCredential(record.salt, record.stored_key, record.server_key, record.iterations)

    return {name: authenticator_factory(settings, lookup, max_request_size)
            for name, settings in listener_settings(config).items()}  # type: ignore[arg-type]
