"""Client quotas on the controller: AlterClientQuotas turned into ClientQuotaRecords (Kafka's
ClientQuotaControlManager), with Kafka's validation and messages.

An entity is a set of (type, name) pairs, type ``user``, ``client-id`` or ``ip``; a name of None
is that type's default (``<default>`` in kafka-configs). ``Entity`` is the pairs sorted by type,
so it keys dicts and crosses the metadata log unchanged.

Rules, per entity of a request (each entity succeeds or fails alone; the records of all the
entities that passed form one batch):
1. A key given twice: INVALID_REQUEST "Duplicate quota key K not updating quota for this entity E"
   (Kafka computes this message, then overwrites it with the next one); an entity given twice:
   the first is applied, the result says "Ignoring duplicate entity E" (as Kafka's).
2. The entity: empty, a repeated type, an unknown type or an empty name are INVALID_REQUEST; so is
   any combination other than user, client-id, user+client-id and ip (an ip name must be an
   address or resolvable host).
3. The keys: user/client entities take producer_byte_rate, consumer_byte_rate (whole numbers),
   request_percentage and controller_mutation_rate; ip entities connection_creation_rate (whole);
   anything else is "Invalid configuration key K".
4. ``remove`` deletes a key (a record only if it is set); a value writes a record only if it
   differs from the current one.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from odradek.controller.image import MetadataImage
from odradek.controller.records import ClientQuotaRecord
from odradek.protocol.errors import ErrorCode

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# Kafka's QuotaConfigs: key -> True when the value must be a whole number (LONG / INT keys).
CLIENT_KEYS: Mapping[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}
IP_KEYS: Mapping[str, bool] = {CONNECTION_CREATION_RATE: True}

Entity = tuple[tuple[str, str | None], ...]


class QuotaRequestError(Exception):
    """A refused entity or filter: ``code`` (INVALID_REQUEST unless said) with Kafka's message."""

    def __init__(self, message: str, code: int = ErrorCode.INVALID_REQUEST) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass(frozen=True, slots=True)
class ClientQuotaAlteration:
    """One entry of AlterClientQuotas: the entity as sent, and (key, value or None = remove) ops."""

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[tuple[str, float | None], ...]


@dataclass(frozen=True, slots=True)
class ClientQuotaAlterationResult:
    entity: tuple[tuple[str, str | None], ...]
    error_code: int = ErrorCode.NONE
    error_message: str | None = None


def make_entity(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    return tuple(sorted(pairs, key=lambda p: p[0]))


def entity_str(entity: Iterable[tuple[str, str | None]]) -> str:
    """Kafka's ClientQuotaEntity.toString, for messages."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={n}" for t, n in entity) + "})"


def _valid_ip_entity(name: str | None) -> bool:
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    try:
        socket.getaddrinfo(name, None)
        return True
    except OSError:
        return False


def validate_entity(pairs: Sequence[tuple[str, str | None]]) -> tuple[Entity, Mapping[str, bool]]:
    """Rule 2: the normalized entity and the keys it takes; raises QuotaRequestError."""
    if not pairs:
        raise QuotaRequestError("Invalid empty client quota entity")
    seen: dict[str, str | None] = {}
    for etype, name in pairs:
        if etype in seen:
            raise QuotaRequestError(f"Invalid empty client quota entity, duplicate entity entry {etype}")
        if etype not in ENTITY_TYPES:
            raise QuotaRequestError(f"Unhandled client quota entity type: {etype}")
        seen[etype] = name
        if name is not None and name == "":
            raise QuotaRequestError(f"Empty {etype} not supported")
    has_user, has_client, has_ip = USER in seen, CLIENT_ID in seen, IP in seen
    if has_ip and not has_user and not has_client:
        if not _valid_ip_entity(seen[IP]):
            raise QuotaRequestError(f"{seen[IP]} is not a valid IP or resolvable host.")
        keys = IP_KEYS
    elif not has_ip:
        keys = CLIENT_KEYS
    else:
        raise QuotaRequestError("Invalid empty client quota entity")
    return make_entity(seen.items()), keys


def validate_value(keys: Mapping[str, bool], key: str, value: float) -> None:
    """Rule 3 for one key and value; raises QuotaRequestError."""
    whole = keys.get(key)
    if whole is None:
        raise QuotaRequestError(f"Invalid configuration key {key}")
    if whole:
        epsilon = 1e-6
        if abs(float(int(value + epsilon)) - value) > epsilon:
            raise QuotaRequestError(f"Configuration {key} must be a Long value")


def alter_client_quotas(
    image: MetadataImage, alterations: Sequence[ClientQuotaAlteration]
) -> tuple[list[ClientQuotaRecord], list[ClientQuotaAlterationResult]]:
    """The records and per-entity results of an AlterClientQuotas request (module rules)."""
    records: list[ClientQuotaRecord] = []
    results: dict[Entity, ClientQuotaAlterationResult] = {}
    order: list[Entity] = []
    for alteration in alterations:
        key_of_entry = make_entity(alteration.entity)
        if key_of_entry in results:
            results[key_of_entry] = ClientQuotaAlterationResult(
                alteration.entity, ErrorCode.INVALID_REQUEST,
                f"Ignoring duplicate entity {entity_str(alteration.entity)}")
            continue
        order.append(key_of_entry)
        changes: dict[str, float | None] = {}
        duplicate = None
        for key, value in alteration.ops:
            if key in changes:
                duplicate = key
            changes[key] = value
        if duplicate is not None:
            results[key_of_entry] = ClientQuotaAlterationResult(
                alteration.entity, ErrorCode.INVALID_REQUEST,
                f"Duplicate quota key {duplicate} not updating quota for this entity "
                f"{entity_str(alteration.entity)}")
            continue
        try:
            entity, keys = validate_entity(alteration.entity)
            current = image.client_quotas.get(entity, {})
            new: list[ClientQuotaRecord] = []
            for key, value in changes.items():
                if value is None:
                    if key in current:
                        new.append(ClientQuotaRecord(entity, key, 0.0, remove=True))
                    continue
                validate_value(keys, key, value)
                if current.get(key) != value:
                    new.append(ClientQuotaRecord(entity, key, float(value)))
        except QuotaRequestError as exc:
            results[key_of_entry] = ClientQuotaAlterationResult(alteration.entity, exc.code, exc.message)
            continue
        records.extend(new)
        results[key_of_entry] = ClientQuotaAlterationResult(alteration.entity)
    return records, [results[e] for e in order]
