"""Quota entities: what AlterClientQuotas / DescribeClientQuotas accept and Kafka's precedence.

An entity is a set of (type, name) pairs, type one of ``user``, ``client-id``, ``ip``; a name of
None is that type's default (``<default>`` in kafka-configs). Represented here as a sorted tuple of
pairs (``Entity``) so it can key dicts and cross the metadata log unchanged.

Rules (Kafka's ClientQuotaControlManager and ClientQuotaImage.describe, same messages):
1. Alter: an empty entity, a repeated type, an unknown type, an empty name, or a combination other
   than user, client-id, user+client-id, ip is INVALID_REQUEST; keys are checked against the
   entity's kind (user/client: producer_byte_rate, consumer_byte_rate, request_percentage,
   controller_mutation_rate; ip: connection_creation_rate) and integer keys must hold whole numbers.
2. Describe filters: components match exactly (a name), the default (null) or any name
   ("specified"); ``strict`` asks for entities with exactly the filtered types.
3. Precedence for a connection of user U and client id C (ClientQuotaManager's
   DefaultQuotaCallback): /users/U/clients/C, /users/U/clients/<default>, /users/U,
   /users/<default>/clients/C, /users/<default>/clients/<default>, /users/<default>, /clients/C,
   /clients/<default>. The level that matched also decides who shares the measured rate: a
   user-level quota is shared by all that user's client ids (metric tags user=U, client-id="").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from odradek.controller.client_quotas import (
    CLIENT_ID,
    ENTITY_TYPES,
    IP,
    USER,
    Entity,
    QuotaRequestError,
    make_entity,
)

if TYPE_CHECKING:
    from odradek.protocol.messages import ComponentData

__all__ = ["CLIENT_ID", "IP", "USER", "Entity", "QuotaRequestError", "make_entity", "matches", "parse_filter",
           "resolve"]

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_SPECIFIED = 2


def parse_filter(components: list[ComponentData]) -> tuple[dict[str, str | None], set[str]]:
    """Rule 2: (exact matches incl. defaults, types matched by any name); raises QuotaRequestError
    (UNSUPPORTED_VERSION, 35, for an unknown type or match type, as Kafka)."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for c in components:
        etype, match_type, match = c["entity_type"], c["match_type"], c["match"]
        if not etype:
            raise QuotaRequestError("Invalid empty entity type.")
        if etype in exact or etype in typed:
            raise QuotaRequestError(f"Entity type {etype} cannot appear more than once in the filter.")
        if etype not in ENTITY_TYPES:
            raise QuotaRequestError(f"Unsupported entity type {etype}", code=35)
        if match_type == MATCH_EXACT:
            if match is None:
                raise QuotaRequestError("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[etype] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise QuotaRequestError("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[etype] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise QuotaRequestError("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            typed.add(etype)
        else:
            raise QuotaRequestError(f"Unknown match type {match_type}", code=35)
    named = set(exact) | typed
    if IP in named and (USER in named or CLIENT_ID in named):
        raise QuotaRequestError("Invalid entity filter component combination. IP filter component should not "
                                "be used with user or clientId filter component.")
    return exact, typed


def matches(entity: Entity, exact: Mapping[str, str | None], typed: set[str], strict: bool) -> bool:
    as_map = dict(entity)
    if strict and len(as_map) != len(exact) + len(typed):
        return False
    for etype, name in exact.items():
        if etype not in as_map or as_map[etype] != name:
            return False
    return all(etype in as_map for etype in typed)


# ---------------------------------------------------------------------------------------------------
# Precedence (rule 3)

_DEFAULT = None


def _user_client(u: str | None, c: str | None) -> Entity:
    return ((CLIENT_ID, c), (USER, u))


def resolve(quotas: Mapping[Entity, float], user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
    """The quota that applies to (user, client_id) and the metric tags (user, client-id) whose
    connections share its measured rate; None when no level applies."""
    order: tuple[tuple[Entity, tuple[str, str]], ...] = (
        (_user_client(user, client_id), (user, client_id)),
        (_user_client(user, _DEFAULT), (user, client_id)),
        (((USER, user),), (user, "")),
        (_user_client(_DEFAULT, client_id), (user, client_id)),
        (_user_client(_DEFAULT, _DEFAULT), (user, client_id)),
        (((USER, _DEFAULT),), (user, "")),
        (((CLIENT_ID, client_id),), ("", client_id)),
        (((CLIENT_ID, _DEFAULT),), ("", client_id)),
    )
    for entity, tags in order:
        bound = quotas.get(entity)
        if bound is not None:
            return tags, bound
    return None
