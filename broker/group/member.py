"""One member of a classic group (Kafka's ClassicGroupMember).

A member is what one JoinGroup created: its id (``<client_id>-<uuid>``, or
``<group_instance_id>-<uuid>`` for a static member, KIP-345), the protocols it supports in
preference order (name → opaque metadata from the client's assignor), its timeouts and the
assignment the leader gave it. While a JoinGroup or SyncGroup of the member waits for the
rebalance, ``awaiting_join`` / ``awaiting_sync`` hold the asyncio future its handler awaits.

Owned by the handler loop.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from odradek.protocol.messages import JoinGroupResponse, SyncGroupResponse


class ClassicGroupMember:
    __slots__ = (
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "protocol_type",
        "protocols",
        "assignment",
        "awaiting_join",
        "awaiting_sync",
        "is_new",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        assignment: bytes = b"",
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = assignment
        self.awaiting_join: asyncio.Future[JoinGroupResponse] | None = None
        self.awaiting_sync: asyncio.Future[SyncGroupResponse] | None = None
        # A member that joined but has not yet been part of a completed join phase; its session
        # timer is not satisfied by merely waiting in a JoinGroup (Kafka's isNew).
        self.is_new = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def has_satisfied_heartbeat(self) -> bool:
        """On session expiry: a member waiting in a rebalance is alive, unless it is new (Kafka)."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync

    def protocol_names(self) -> list[str]:
        """Each protocol name once, in preference order. A JoinGroup may name one twice; the group
        counts how many members support each name (ClassicGroup.supported_protocols), and a
        duplicate counted twice left no protocol supported by exactly every member: the join
        timer then failed and the member never got its answer (Kafka counts a set, too)."""
        return list(dict.fromkeys(name for name, _ in self.protocols))

    def metadata(self, protocol: str | None) -> bytes | None:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return None

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, same metadata (a rejoin that needs no rebalance)."""
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    def vote(self, candidates: set[str]) -> str:
        """The first of this member's protocols (its preference order) that every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def complete_join(self, response: JoinGroupResponse) -> bool:
        fut = self.awaiting_join
        self.awaiting_join = None
        if fut is None:
            return False
        if not fut.done():
            fut.set_result(response)
        return True

    def complete_sync(self, response: SyncGroupResponse) -> bool:
        fut = self.awaiting_sync
        self.awaiting_sync = None
        if fut is None:
            return False
        if not fut.done():
            fut.set_result(response)
        return True

    def __repr__(self) -> str:
        return f"ClassicGroupMember({self.member_id!r}, instance={self.group_instance_id!r})"
