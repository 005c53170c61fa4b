"""A consumer group's in-memory state (Kafka's ``GroupMetadata`` / ``MemberMetadata``), the records of
``__consumer_offsets`` as plain dataclasses, and the group -> partition rule.

Group states and their legal previous states (Kafka's ``GroupMetadata.validPreviousStates``)::

    Empty               <- PreparingRebalance                 (everyone left / expired)
    PreparingRebalance  <- Empty, Stable, CompletingRebalance (a join, a leave, an expiry)
    CompletingRebalance <- PreparingRebalance                 (every member joined: a new generation)
    Stable              <- CompletingRebalance                (the leader's assignment is stored)
    Dead                <- any                                (deleted, or unloaded on leadership loss)

Invariants (``GroupMetadata.invariants``): the leader is a member (or there is none and the group has
no members); every static member maps to a member with that instance id; a group in Empty has no
members; ``generation_id`` only rises.

The coordinator (``broker.group.coordinator`` and the protocol modules it calls: ``join_group``,
``membership``, ``rebalance``, ``admin``) owns every mutation; this module only holds data and small
pure helpers. No I/O, no clock: deadlines are plain ``*_ms`` numbers set by the coordinator.
"""

from __future__ import annotations

import enum
import struct
from collections import Counter
from dataclasses import dataclass, field

from proto.kafka_types import NO_EPOCH

NO_GENERATION = -1
UNKNOWN_MEMBER_ID = ""
OFFSETS_TOPIC = "__consumer_offsets"
CONSUMER_PROTOCOL_TYPE = "consumer"  # the protocol type of Kafka's consumers (others: "connect", ...)
INT32_MIN = -(2**31)


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.PREPARING_REBALANCE: frozenset({S.EMPTY, S.STABLE, S.COMPLETING_REBALANCE}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.DEAD: frozenset(GroupState),
}
CAN_REBALANCE = frozenset({S.EMPTY, S.STABLE, S.COMPLETING_REBALANCE})


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrap-around): stable across
    processes, unlike Python's ``hash``."""
    data = text.encode("utf-16-be")
    h = 0
    for index in range(0, len(data), 2):
        h = (31 * h + ((data[index] << 8) | data[index + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % groupMetadataTopicPartitionCount``."""
    assert num_partitions > 0, f"num_partitions {num_partitions} must be > 0"
    h = java_string_hash(group_id)
    return (0 if h == INT32_MIN else abs(h)) % num_partitions


# ---- records of __consumer_offsets ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = NO_EPOCH
    metadata: str = ""
    commit_timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class MemberSnapshot:
    """A member as stored in a GroupMetadata record."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """The value of a GroupMetadata record."""

    protocol_type: str
    generation: int
    protocol: str
    leader: str
    current_state_timestamp_ms: int
    members: tuple[MemberSnapshot, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitRecord:
    """Key (group, topic, partition); ``value`` None is a tombstone."""

    group: str
    topic: str
    partition: int
    value: OffsetAndMetadata | None


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    """Key (group); ``value`` None is a tombstone."""

    group: str
    value: GroupSnapshot | None


OffsetsRecord = OffsetCommitRecord | GroupMetadataRecord


def subscription_topics(metadata: bytes) -> list[str] | None:
    """The topics of a ConsumerProtocolSubscription (any version: int16 version, then an int32 count
    of int16-length strings come first); None when the bytes are not one."""
    view, pos = memoryview(metadata), 2
    try:
        (count,) = struct.unpack_from(">i", view, pos)
        pos += 4
        if count < 0 or count > (len(view) - pos) // 2:
            return None
        topics = []
        for _ in range(count):
            (size,) = struct.unpack_from(">h", view, pos)
            pos += 2
            if size < 0 or pos + size > len(view):
                return None
            topics.append(bytes(view[pos : pos + size]).decode())
            pos += size
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


# ---- members and groups --------------------------------------------------------------------------


@dataclass(slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (assignor name, metadata), in preference order
    assignment: bytes = b""
    awaiting_join: int | None = None  # the request id of a parked JoinGroup
    awaiting_sync: int | None = None  # the request id of a parked SyncGroup
    is_new: bool = False  # joined in the current rebalance and never got a JoinGroup answer
    heartbeat_deadline_ms: int = 0

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise AssertionError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise AssertionError(f"member {self.member_id} supports none of {sorted(candidates)}")


@dataclass(slots=True)
class GroupMetadata:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = 0
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> expiry deadline
    static_members: dict[str, str] = field(default_factory=dict)  # group instance id -> member id
    pending_sync_members: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, int], OffsetAndMetadata] = field(default_factory=dict)
    # Offset commits appended but not yet answered, per partition: they never expire meanwhile
    # (Kafka's pendingOffsetCommits), and a group with any is not removed.
    pending_commits: Counter[tuple[str, int]] = field(default_factory=Counter)
    # Rebalance timers: the join phase ends at join_deadline_ms (InitialDelayedJoin for a new group
    # keeps extending it while members arrive); the sync phase at sync_deadline_ms.
    join_deadline_ms: int | None = None
    initial_delay: bool = False  # the join phase is the initial delay of a group coming from Empty
    initial_delay_remaining_ms: int = 0
    new_member_added: bool = False
    sync_deadline_ms: int | None = None

    def is_state(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        assert self.state in VALID_PREVIOUS_STATES[state], (
            f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}"
        )
        self.state = state
        self.state_timestamp_ms = now_ms

    # ---- membership ----------------------------------------------------------------------------

    def add(self, member: MemberMetadata) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        assert self.protocol_type == member.protocol_type, (self.protocol_type, member.protocol_type)
        self.members[member.member_id] = member
        self.pending_members.pop(member.member_id, None)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> MemberMetadata | None:
        member = self.members.pop(member_id, None)
        self.pending_sync_members.discard(member_id)
        instance_id = member.group_instance_id if member is not None else None
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static_member(
        self, instance_id: str, old_member_id: str, new_member_id: str
    ) -> MemberMetadata:
        """A restarted static member takes the old member's place (KIP-345); the old id is gone."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        """KIP-345: the instance id is known but bound to another member id."""
        if instance_id is None or instance_id not in self.static_members:
            return False
        return self.static_members[instance_id] != member_id

    def has_all_members_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join is not None for m in self.members.values())

    def not_yet_rejoined(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ---- protocols -----------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        counts = Counter(name for m in self.members.values() for name, _ in m.protocols)
        return {name for name, count in counts.items() if count == len(self.members)}

    def supports_protocols(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """A joining member fits when the group is empty (any type and protocols) or it shares the
        protocol type and at least one protocol every current member supports."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        names = {name for name, _ in protocols}
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred protocol that every member
        supports; the most votes wins (ties go to the name first in sort order, deterministic)."""
        candidates = self.candidate_protocols()
        assert candidates, f"group {self.group_id}: no protocol common to all members"
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return min(votes, key=lambda name: (-votes[name], name))

    def current_member_metadata(self) -> tuple[tuple[str, str | None, bytes], ...]:
        assert self.protocol_name is not None, f"group {self.group_id}: no protocol chosen"
        return tuple(
            (m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
            for m in self.members.values()
        )

    def subscribed_topics(self) -> frozenset[str]:
        """The topics the members of a consumer group subscribe to, from their metadata for the chosen
        protocol (Kafka's ConsumerProtocolSubscription). Like Kafka, metadata that does not decode
        counts as no subscription."""
        return self.known_subscribed_topics() or frozenset()

    def known_subscribed_topics(self) -> frozenset[str] | None:
        """``subscribed_topics``, or None when they are not known (not a consumer group, no protocol
        chosen, or a member's metadata does not decode): Kafka's ``subscribedTopics`` Option."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            decoded = subscription_topics(member.metadata_for(self.protocol_name))
            if decoded is None:
                return None
            topics.update(decoded)
        return frozenset(topics)

    # ---- records ---------------------------------------------------------------------------------

    def snapshot(self, assignment: dict[str, bytes]) -> GroupSnapshot:
        members = tuple(
            MemberSnapshot(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata_for(self.protocol_name) if self.protocol_name else b"",
                assignment.get(m.member_id, b""),
            )
            for m in self.members.values()
        )
        return GroupSnapshot(
            self.protocol_type or "",
            self.generation_id,
            self.protocol_name or "",
            self.leader_id or "",
            self.state_timestamp_ms,
            members,
        )

    def invariants(self) -> None:
        if self.leader_id is not None:
            assert self.leader_id in self.members, (
                f"group {self.group_id}: leader {self.leader_id} not a member"
            )
        else:
            assert not self.members, f"group {self.group_id}: members {list(self.members)} but no leader"
        for instance_id, member_id in self.static_members.items():
            member = self.members.get(member_id)
            assert member is not None and member.group_instance_id == instance_id, (
                f"group {self.group_id}: static {instance_id} -> {member_id} is not a member with that id"
            )
        if self.state is GroupState.EMPTY:
            assert not self.members, f"group {self.group_id}: Empty with members {list(self.members)}"
        assert self.pending_sync_members <= set(self.members), (
            f"group {self.group_id}: pending sync {self.pending_sync_members} not all members"
        )
