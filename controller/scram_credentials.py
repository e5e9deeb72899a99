"""AlterUserScramCredentials on the controller: validation and records (Kafka's ScramControlManager).

Input: deletions (name, mechanism) and upsertions (name, mechanism, iterations, salt,
salted_password); mechanism is Kafka's type id (1 = SCRAM-SHA-256, 2 = SCRAM-SHA-512). Rules, with
Kafka's codes and messages:
- a user named twice in one request (deletion or upsertion): DUPLICATE_RESOURCE "A user credential
  cannot be altered twice in the same request";
- an empty name: UNACCEPTABLE_CREDENTIAL "Username must not be empty"; an unknown mechanism:
  UNSUPPORTED_SASL_MECHANISM "Unknown SCRAM mechanism";
- iterations below 4096: UNACCEPTABLE_CREDENTIAL "Too few iterations"; above 16384: "Too many
  iterations";
- deleting a credential that does not exist: RESOURCE_NOT_FOUND "Attempt to delete a user
  credential that does not exist".
An upsertion becomes a UserScramCredentialRecord with StoredKey = H(HMAC(salted, "Client Key")) and
ServerKey = HMAC(salted, "Server Key") (RFC 5802); the salted password itself is not kept.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from odradek.controller.records import (
    MetadataRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from odradek.protocol.errors import ErrorCode

HASHES = {1: "sha256", 2: "sha512"}
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


@dataclass(frozen=True)
class ScramUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes = field(repr=False)
    salted_password: bytes = field(repr=False)


@dataclass(frozen=True)
class ScramAlterResult:
    user: str
    error_code: int = ErrorCode.NONE
    error_message: str | None = None


def _validate(name: str, mechanism: int) -> ScramAlterResult | None:
    if not name:
        return ScramAlterResult(name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if mechanism not in HASHES:
        return ScramAlterResult(name, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return None


def _record(u: ScramUpsertion) -> UserScramCredentialRecord:
    hash_name = HASHES[u.mechanism]
    client_key = hmac.new(u.salted_password, b"Client Key", hash_name).digest()
    server_key = hmac.new(u.salted_password, b"Server Key", hash_name).digest()
    return UserScramCredentialRecord(u.name, u.mechanism, u.salt, hashlib.new(hash_name, client_key).digest(),
                                     server_key, u.iterations)


def alter(existing: Mapping[tuple[str, int], object], deletions: Sequence[tuple[str, int]],
          upsertions: Sequence[ScramUpsertion]) -> tuple[list[MetadataRecord], list[ScramAlterResult]]:
    """The records and per-user results of one AlterUserScramCredentials request."""
    errors: dict[str, ScramAlterResult] = {}
    to_delete: dict[str, tuple[str, int]] = {}
    to_upsert: dict[str, ScramUpsertion] = {}
    duplicate = "A user credential cannot be altered twice in the same request"
    for name, mechanism in deletions:
        if name in errors:
            continue
        if to_delete.pop(name, None) is not None:
            errors[name] = ScramAlterResult(name, ErrorCode.DUPLICATE_RESOURCE, duplicate)
            continue
        error = _validate(name, mechanism)
        if error is None and (name, mechanism) not in existing:
            error = ScramAlterResult(name, ErrorCode.RESOURCE_NOT_FOUND,
                                     "Attempt to delete a user credential that does not exist")
        if error is not None:
            errors[name] = error
        else:
            to_delete[name] = (name, mechanism)
    for u in upsertions:
        if u.name in errors:
            continue
        if to_delete.pop(u.name, None) is not None or to_upsert.pop(u.name, None) is not None:
            errors[u.name] = ScramAlterResult(u.name, ErrorCode.DUPLICATE_RESOURCE, duplicate)
            continue
        error = _validate(u.name, u.mechanism)
        if error is None and u.iterations < MIN_ITERATIONS:
            error = ScramAlterResult(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif error is None and u.iterations > MAX_ITERATIONS:
            error = ScramAlterResult(u.name, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if error is not None:
            errors[u.name] = error
        else:
            to_upsert[u.name] = u
    records: list[MetadataRecord] = []
    results: list[ScramAlterResult] = []
    for name, mechanism in to_delete.values():
        records.append(RemoveUserScramCredentialRecord(name, mechanism))
        results.append(ScramAlterResult(name))
    for u in to_upsert.values():
        records.append(_record(u))
        results.append(ScramAlterResult(u.name))
    results.extend(errors.values())
    return records, results
