"""SCRAM's formulas (RFC 5802 section 3, RFC 7677) and Kafka's two SCRAM mechanisms.

    SaltedPassword  = Hi(password, salt, i)           PBKDF2-HMAC with the mechanism's hash
    ClientKey       = HMAC(SaltedPassword, "Client Key")
    StoredKey       = H(ClientKey)
    ServerKey       = HMAC(SaltedPassword, "Server Key")
    AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
    ClientSignature = HMAC(StoredKey, AuthMessage);  ClientProof = ClientKey XOR ClientSignature
    ServerSignature = HMAC(ServerKey, AuthMessage)

The server keeps (salt, StoredKey, ServerKey, iterations) per user and mechanism (Kafka's
UserScramCredentialRecord); it never sees or stores the password. As Kafka's ScramFormatter, the
password is taken as its UTF-8 bytes (no SASLprep). Pure functions, any thread.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ScramMechanism:
    name: str
    hash_name: str
    # Kafka's admin ScramMechanism type: 1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512 (0 = UNKNOWN).
    type_id: int
    min_iterations: int = 4096


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS_BY_NAME = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
MECHANISMS_BY_TYPE = {m.type_id: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
# Kafka's ScramControlManager.MAX_ITERATIONS.
MAX_ITERATIONS = 16384


@dataclass(frozen=True)
class ScramCredential:
    """What the server stores for one user and mechanism; repr hides the secrets."""

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


def hmac_digest(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, mechanism.hash_name).digest()


def salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)


def client_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return hmac_digest(mechanism, salted, b"Client Key")


def stored_key(mechanism: ScramMechanism, key: bytes) -> bytes:
    return hashlib.new(mechanism.hash_name, key).digest()


def server_key(mechanism: ScramMechanism, salted: bytes) -> bytes:
    return hmac_digest(mechanism, salted, b"Server Key")


def credential_from_salted(mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """What AlterUserScramCredentials' upsertion (salt, salted_password) becomes (Kafka's
    ScramControlManager.finishUpsertion)."""
    return ScramCredential(salt, stored_key(mechanism, client_key(mechanism, salted)),
                           server_key(mechanism, salted), iterations)


def credential_from_password(mechanism: ScramMechanism, password: str, iterations: int = 4096,
                             salt: bytes | None = None) -> ScramCredential:
    salt = os.urandom(32) if salt is None else salt
    return credential_from_salted(mechanism, salt, salted_password(mechanism, password, salt, iterations),
                                  iterations)


def xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))
