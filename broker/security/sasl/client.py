"""SASL's client side, sans-io: the tokens a client sends (the broker's own inter-broker connections,
and the tests' raw-socket clients).

PLAIN: one token ``NUL username NUL password``. SCRAM (RFC 5802): ``ScramClient.first()`` ->
server-first -> ``final(server_first)`` -> server-final -> ``verify(server_final)`` (checks the
server's signature, so a server that does not know the credential is caught too).
"""

from __future__ import annotations

import base64
import hmac
import secrets
from typing import Any

from odradek.broker.security.sasl import scram_formatter as F
from odradek.broker.security.sasl.scram import saslname_from_username


def plain_token(username: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\x00{username}\x00{password}".encode()


class ScramClient:
    def __init__(self, mechanism: str, username: str, password: str, extensions: str = "") -> None:
        self.mech = F.MECHANISMS_BY_NAME[mechanism]
        self.password = password
        self.nonce = secrets.token_urlsafe(18)
        self.first_bare = f"n={saslname_from_username(username)},r={self.nonce}{extensions}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self.first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        fields = dict(item.split("=", 1) for item in text.split(","))
        nonce, salt, iterations = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
        if not nonce.startswith(self.nonce):
            raise ValueError("server nonce does not extend the client nonce")
        salted = F.salted_password(self.mech, self.password, salt, iterations)
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self.first_bare},{text},{without_proof}".encode()
        key = F.client_key(self.mech, salted)
        signature = F.hmac_digest(self.mech, F.stored_key(self.mech, key), auth_message)
        proof = F.xor(key, signature)
        self._server_signature = F.hmac_digest(self.mech, F.server_key(self.mech, salted), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode()
        if not text.startswith("v=") or not hmac.compare_digest(base64.b64decode(text[2:]), self._server_signature):
            raise ValueError("invalid server signature in the SCRAM server-final message")


def scram_upsertion(mechanism: str, username: str, password: str, iterations: int = 4096) -> dict[str, Any]:
    """An AlterUserScramCredentials upsertion for ``password`` (what kafka-configs sends)."""
    mech = F.MECHANISMS_BY_NAME[mechanism]
    salt = secrets.token_bytes(32)
    return {"name": username, "mechanism": mech.type_id, "iterations": iterations, "salt": salt,
            "salted_password": F.salted_password(mech, password, salt, iterations)}
