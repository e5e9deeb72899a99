"""Kafka's KafkaPrincipal: the identity a connection acts as.

Kafka names a principal ``Type:Name`` (``User:alice``); every connection has one. A PLAINTEXT
connection is ``User:ANONYMOUS``; an SSL connection takes its name from the client certificate
(``ssl.principal.mapping.rules``), ANONYMOUS without one; a SASL connection takes the authenticated
user's name. ACLs, ``super.users`` and user quotas match on it.
"""

from __future__ import annotations

from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``Type:Name`` as in ``super.users`` and ACL bindings; the name may contain ':'."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"a principal is Type:Name, got {text!r}")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")
