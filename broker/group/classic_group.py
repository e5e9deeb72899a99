"""A classic group: its members, generation and state machine (Kafka's ClassicGroup).

States and the only legal transitions (Kafka's ClassicGroupState)::

    Empty ──join──▶ PreparingRebalance ──join phase done──▶ CompletingRebalance ──leader's sync──▶ Stable
      ▲                 │  ▲                                     │                                  │
      └─ all members ───┘  └──── member joins / leaves / fails ──┴──────────────────────────────────┘
         gone when the join phase ends
    any state ──(group deleted / partition unloaded)──▶ Dead

- Empty: no members (may still hold committed offsets). PreparingRebalance: members are
  (re)joining; the join phase ends when all have, or at the rebalance timeout. CompletingRebalance:
  join responses sent, waiting for the leader's SyncGroup with the assignment. Stable: assignment
  handed out; heartbeats keep members alive. Dead: the group is gone; requests get
  COORDINATOR_NOT_AVAILABLE (the caller retries, finds the group re-created or unknown).
- Each completed join phase bumps ``generation_id``. The protocol is chosen among those every
  member supports, by each member voting for its most preferred candidate; most votes wins (ties:
  the first protocol to receive a vote, deterministic where Kafka's HashMap order is arbitrary).
- The leader is the first member to join; if it does not rejoin in a rebalance, any rejoined
  member takes over.
- Pending members (KIP-394) got MEMBER_ID_REQUIRED and an id but have not joined with it yet; a
  join phase waits for them too.

Owned by the handler loop. The coordinator drives it; this module has no I/O and no timers.
"""

from __future__ import annotations

import enum
import uuid
from typing import TYPE_CHECKING, Any

from odradek.broker.group import consumer_protocol
from odradek.broker.group.member import ClassicGroupMember
from odradek.broker.group.records import OffsetAndMetadata
from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.storage.clock import now_ms

if TYPE_CHECKING:
    import asyncio

    from odradek.protocol.messages import JoinGroupResponse, JoinGroupResponseMember


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class ClassicGroup:
    def __init__(self, group_id: str, partition: int, state: GroupState = GroupState.EMPTY,
                 current_time_ms: int | None = None) -> None:
        self.group_id = group_id
        self.partition = partition  # of __consumer_offsets
        self.state = state
        self.previous_state = state
        self.current_state_timestamp: int | None = now_ms() if current_time_ms is None else current_time_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, ClassicGroupMember] = {}
        self.static_members: dict[str, str] = {}  # group_instance_id -> member_id
        self.pending_join_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_awaiting_join = 0
        self.supported_protocols: dict[str, int] = {}
        self.new_member_added = False
        self.subscribed_topics: set[str] | None = None
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}

    # -- state -------------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, state: GroupState, current_time_ms: int | None = None) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}")
        self.previous_state = self.state
        self.state = state
        self.current_state_timestamp = now_ms() if current_time_ms is None else current_time_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # -- members -----------------------------------------------------------------------------

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def static_member_id(self, instance_id: str) -> str | None:
        return self.static_members.get(instance_id)

    def generate_member_id(self, client_id: str, instance_id: str | None) -> str:
        return f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"

    def add_pending_member(self, member_id: str) -> None:
        self.pending_join_members.add(member_id)

    def add(self, member: ClassicGroupMember, future: asyncio.Future[JoinGroupResponse] | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(f"static member {member.group_instance_id} is already in {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise RuntimeError("the group and member's protocol type must be the same")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        for name in member.protocol_names():
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + 1
        member.awaiting_join = future
        if future is not None:
            self.num_awaiting_join += 1
        self.pending_join_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None:
            for name in member.protocol_names():
                self.supported_protocols[name] = self.supported_protocols.get(name, 0) - 1
            if member.is_awaiting_join:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.discard(member_id)
        self.pending_sync_members.discard(member_id)

    def update_member(self, member: ClassicGroupMember, protocols: list[tuple[str, bytes]],
                      rebalance_timeout_ms: int, session_timeout_ms: int,
                      future: asyncio.Future[JoinGroupResponse] | None) -> None:
        for name in member.protocol_names():
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) - 1
        member.protocols = protocols
        for name in member.protocol_names():
            self.supported_protocols[name] = self.supported_protocols.get(name, 0) + 1
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if future is not None and not member.is_awaiting_join:
            self.num_awaiting_join += 1
        elif future is None and member.is_awaiting_join:
            self.num_awaiting_join -= 1
        member.awaiting_join = future

    def complete_join(self, member: ClassicGroupMember, response: JoinGroupResponse) -> bool:
        if member.is_awaiting_join:
            self.num_awaiting_join -= 1
        return member.complete_join(response)

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> ClassicGroupMember:
        """A static member rejoined with an unknown member id: the old id is fenced, the new one
        takes its place, protocols and assignment (KIP-345)."""
        old = self.members.pop(old_member_id)
        if old.is_awaiting_join:
            self.num_awaiting_join -= 1
        old.complete_join({"error_code": ErrorCode.FENCED_INSTANCE_ID, "member_id": old_member_id,
                           "generation_id": -1, "protocol_type": None, "protocol_name": None,
                           "leader": "", "members": []})
        old.complete_sync({"error_code": ErrorCode.FENCED_INSTANCE_ID, "assignment": b"",
                           "protocol_type": None, "protocol_name": None})
        new = ClassicGroupMember(new_member_id, old.group_instance_id, old.client_id, old.client_host,
                                 old.rebalance_timeout_ms, old.session_timeout_ms, old.protocol_type,
                                 old.protocols, old.assignment)
        self.members[new_member_id] = new
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        return new

    def validate_member(self, member_id: str, instance_id: str | None) -> None:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID as Kafka's validateMember."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                raise KafkaApiError(ErrorCode.UNKNOWN_MEMBER_ID)
            if existing != member_id:
                raise KafkaApiError(ErrorCode.FENCED_INSTANCE_ID)
        if member_id not in self.members:
            raise KafkaApiError(ErrorCode.UNKNOWN_MEMBER_ID)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_join_members

    def not_yet_rejoined_members(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for m in self.members.values():
            if m.is_awaiting_join:
                self.leader_id = m.member_id
                return True
        return False

    # -- protocols ---------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def supports_protocols(self, protocol_type: str, protocol_names: list[str]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocol_names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols.get(name, 0) == n for name in protocol_names)

    def select_protocol(self) -> str:
        if not self.members:
            raise RuntimeError("cannot select a protocol for an empty group")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        return next(name for name, count in votes.items() if count == best)

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != consumer_protocol.PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            got = consumer_protocol.subscribed_topics(m.metadata(self.protocol_name))
            if got is None:
                return None
            topics |= got
        return topics

    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == consumer_protocol.PROTOCOL_TYPE

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.uses_consumer_protocol()

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY)
        self.pending_sync_members.clear()

    # -- views -------------------------------------------------------------------------------

    def current_members_for_join(self) -> list[JoinGroupResponseMember]:
        return [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata(self.protocol_name) or b""} for m in self.members.values()]

    def metadata_value(self, assignment: dict[str, bytes], current_time_ms: int | None = None) -> dict[str, Any]:
        """This group as a GroupMetadataValue (Kafka's newGroupMetadataRecord)."""
        members = []
        for m in self.members.values():
            members.append({
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "rebalance_timeout": m.rebalance_timeout_ms,
                "session_timeout": m.session_timeout_ms,
                "subscription": m.metadata(self.protocol_name) or b"",
                "assignment": assignment.get(m.member_id, b""),
            })
        return {
            "protocol_type": self.protocol_type or "",
            "generation": self.generation_id,
            "protocol": self.protocol_name,
            "leader": self.leader_id,
            "current_state_timestamp": (self.current_state_timestamp if self.current_state_timestamp is not None
                                        else -1),
            "members": members,
        }

    @classmethod
    def from_metadata_value(cls, group_id: str, partition: int, value: dict[str, Any]) -> ClassicGroup:
        """Rebuild a loaded group: Empty without members, else Stable (Kafka's fromRecord)."""
        members = value["members"]
        ts = value.get("current_state_timestamp", -1)
        group = cls(group_id, partition, GroupState.STABLE if members else GroupState.EMPTY,
                    ts if ts is not None and ts >= 0 else None)
        if ts is None or ts < 0:
            group.current_state_timestamp = None
        group.protocol_type = value["protocol_type"] or None
        group.generation_id = value["generation"]
        group.protocol_name = value["protocol"]
        group.leader_id = value["leader"]
        for mv in members:
            rebalance = mv["rebalance_timeout"]
            member = ClassicGroupMember(
                mv["member_id"], mv["group_instance_id"], mv["client_id"], mv["client_host"],
                rebalance if rebalance >= 0 else mv["session_timeout"], mv["session_timeout"],
                value["protocol_type"], [(value["protocol"] or "", bytes(mv["subscription"]))],
                bytes(mv["assignment"]))
            group.members[member.member_id] = member
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
            for name in member.protocol_names():
                group.supported_protocols[name] = group.supported_protocols.get(name, 0) + 1
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members), None)
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    def __repr__(self) -> str:
        return f"ClassicGroup({self.group_id!r}, {self.state.value}, gen={self.generation_id}, members={len(self.members)})"
