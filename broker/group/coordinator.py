"""The group coordinator: Kafka's classic consumer-group protocol as a sans-I/O core.

Theory of operation
-------------------
A broker coordinates the groups whose ``__consumer_offsets`` partition (``partition_for``) it leads.
The driver (``broker.group.driver``) feeds this object decoded requests, each with a request id and
``now_ms`` (a monotonic clock), and carries out the ``Effects`` it returns, in order:

- ``appends``: records for ``__consumer_offsets`` partitions. The driver appends each with acks=all
  and reports the outcome with ``complete_append(append_id, code, message, now_ms)``; OffsetCommit,
  the leader's SyncGroup, a static member's takeover and DeleteGroups are answered only then.
- ``responses``: ``(request_id, response)`` pairs to send. A JoinGroup or SyncGroup may be answered
  much later (when the rebalance completes), from the effects of another call or of ``tick``.
- ``next_deadline_ms()`` is when ``tick(now_ms)`` must run next: member session expiry, the end of
  the join phase (rebalance timeout, or ``group.initial.rebalance.delay.ms`` for a new group), the
  end of the sync phase, pending-member expiry, the next offset-expiration check.

``now_ms`` is the wall clock (Kafka's coordinator uses it too): the group's state timestamp and the
commit timestamps are stored in ``__consumer_offsets`` and offset expiration compares them with
``now_ms`` after a restart or on another broker.

The rules are Kafka's ``GroupCoordinator`` (pre-KIP-848): ``MEMBER_ID_REQUIRED`` hands a new dynamic
member its id (KIP-394); the first member to join leads; a rebalance waits for every known member
up to the rebalance timeout, then drops the dynamic members that did not rejoin; the protocol is
chosen by vote among those all members support; generations fence stale members; the leader's
SyncGroup is stored in the log before anyone gets an assignment; static members (KIP-345) keep their
place across restarts and a restart with an unchanged subscription causes no rebalance (KIP-814:
a static leader gets ``skip_assignment``).

The coordinator is composed, as Kafka's ``GroupCoordinator`` is: it holds a ``GroupMetadataManager``
(``group_manager``, ``broker.group.metadata_manager``) that owns the groups of the offsets partitions
led here, their loading, their records and the cleanup of expired offsets. The coordinator validates
each request (``broker.group.admin.validate_group_status``: is the group's offsets partition led and
loaded here), runs the protocol on the manager's groups and asks the manager to store what must be
stored. The requests outside the rebalance protocol (OffsetFetch, ListGroups, DescribeGroups,
DeleteGroups, OffsetDelete) are functions over the manager in ``broker.group.admin``; the coordinator
passes them on. Leadership of an
offsets partition reaches it as ``on_election`` (the manager then loads the partition: the driver
replays the log into ``replay`` and ends with ``complete_loading``) and
``on_resignation`` (the manager forgets the partition's groups; their parked requests answer
NOT_COORDINATOR).

No I/O, no clock, no threads; member ids come from the injected ``random.Random``.
"""

from __future__ import annotations

import random
import uuid

from broker.group import admin
from broker.group.admin import validate_group_status
from broker.group.metadata import (
    CAN_REBALANCE,
    GroupMetadata,
    GroupState,
    MemberMetadata,
    OffsetsRecord,
)
from broker.group.metadata_manager import APPEND_ERRORS, Append, Effects, GroupConfig, GroupMetadataManager
from broker.group.requests import (
    OK,
    DescribedGroup,
    GroupError,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    error,
)
from proto.errors import ErrorCode

E = ErrorCode
S = GroupState
__all__ = ["Append", "Effects", "GroupConfig", "GroupCoordinator"]


def join_error(code: ErrorCode, message: str, member_id: str = "") -> JoinGroupResponse:
    return JoinGroupResponse(error(code, message), member_id=member_id)


def sync_error(code: ErrorCode, message: str) -> SyncGroupResponse:
    return SyncGroupResponse(error(code, message))


class GroupCoordinator:
    """Kafka's classic group protocol over the groups its ``group_manager`` holds (module docstring)."""

    def __init__(self, config: GroupConfig, rng: random.Random) -> None:
        self.config = config
        self.rng = rng  # member ids
        self.group_manager = GroupMetadataManager(config)

    # ---- leadership of offsets partitions ---------------------------------------------------------

    def on_election(self, partition: int, partition_count: int) -> Effects:
        """This broker became leader of ``partition`` of ``__consumer_offsets``: its groups are loaded
        (from scratch if it was loaded or loading already); requests for them answer
        COORDINATOR_LOAD_IN_PROGRESS until ``complete_loading``."""
        manager = self.group_manager
        held = self.is_partition_owned(partition) or self.is_loading(partition)
        fx = self.on_resignation(partition) if held else Effects()
        manager.begin_loading(partition, partition_count)
        return fx

    def on_resignation(self, partition: int) -> Effects:
        """Leadership of ``partition`` moved away: its groups are forgotten and their parked JoinGroup
        and SyncGroup requests answer NOT_COORDINATOR (Kafka's ``onGroupUnloaded``)."""
        fx = Effects()
        message = f"offsets partition {partition} moved to another broker; find the coordinator again"
        for group in self.group_manager.remove_groups_for_partition(partition):
            for member in group.members.values():
                if member.awaiting_join is not None:
                    fx.respond(member.awaiting_join, join_error(E.NOT_COORDINATOR, message, member.member_id))
                if member.awaiting_sync is not None:
                    fx.respond(member.awaiting_sync, sync_error(E.NOT_COORDINATOR, message))
        return fx

    def is_loading(self, partition: int | None = None) -> bool:
        """Kafka's ``isPartitionLoading`` (``isLoading`` without a partition: is any partition loading)."""
        loading = self.group_manager.loading
        return bool(loading) if partition is None else partition in loading

    def is_partition_owned(self, partition: int) -> bool:
        """Kafka's ``isPartitionOwned``: ``partition`` is led here and its groups are loaded."""
        return partition in self.group_manager.loaded

    def replay(self, partition: int, record: OffsetsRecord) -> None:
        """One record of a loading offsets partition's log, in log order (the driver reads the log)."""
        self.group_manager.replay(partition, record)

    def complete_loading(self, partition: int, now_ms: int) -> None:
        """The driver replayed ``partition``'s log up to its end: its groups start answering."""
        self.group_manager.complete_loading(partition, now_ms)

    def committed_offsets(self) -> dict[str, dict[tuple[str, int], int]]:
        """Every coordinated group's committed offsets, for lag gauges."""
        return self.group_manager.committed_offsets()

    def group_states(self) -> dict[str, GroupState]:
        """Every coordinated group's state, for gauges (a copy: the caller may read from another thread)."""
        return {group_id: group.state for group_id, group in list(self.group_manager.groups.items())}

    def complete_append(self, append_id: int, code: int, message: str, now_ms: int) -> Effects:
        """The driver's answer to an ``Append`` (``code`` NONE once the HW passed it)."""
        return self.group_manager.complete_append(append_id, code, message, now_ms)

    def invariants(self) -> None:
        self.group_manager.invariants()

    # ---- JoinGroup --------------------------------------------------------------------------------

    def handle_join_group(self, request_id: int, req: JoinGroupRequest, now_ms: int) -> Effects:
        fx = Effects()
        problem = self._join_problem(req)
        if problem is not None:
            fx.respond(request_id, JoinGroupResponse(problem, member_id=req.member_id))
            return fx
        group = self.group_manager.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                fx.respond(
                    request_id,
                    join_error(
                        E.UNKNOWN_MEMBER_ID,
                        f"group {req.group_id!r} does not exist; rejoin with an empty member id",
                        req.member_id,
                    ),
                )
                return fx
            group = GroupMetadata(req.group_id, state_timestamp_ms=now_ms)
            self.group_manager.groups[req.group_id] = group
        if not group.supports_protocols(req.protocol_type, req.protocols):
            fx.respond(
                request_id,
                join_error(
                    E.INCONSISTENT_GROUP_PROTOCOL,
                    f"group {req.group_id!r} uses protocol type {group.protocol_type!r} and protocols "
                    f"{sorted(group.candidate_protocols())}; this member offers {req.protocol_type!r} "
                    f"{[name for name, _ in req.protocols]}",
                    req.member_id,
                ),
            )
        elif not req.member_id and len(group.members) >= self.config.max_size:
            fx.respond(
                request_id,
                join_error(
                    E.GROUP_MAX_SIZE_REACHED,
                    f"group {req.group_id!r} has {len(group.members)} members (group.max.size)",
                ),
            )
        elif not req.member_id:
            self._new_member_join(group, request_id, req, now_ms, fx)
        else:
            self._current_member_join(group, request_id, req, now_ms, fx)
        if group.is_state(S.PREPARING_REBALANCE):
            self._try_complete_join(group, now_ms, fx)
        self.invariants()
        return fx

    def _join_problem(self, req: JoinGroupRequest) -> GroupError | None:
        problem = validate_group_status(self.group_manager, req.group_id)
        if problem is not None:
            return problem
        low, high = self.config.min_session_timeout_ms, self.config.max_session_timeout_ms
        if not low <= req.session_timeout_ms <= high:
            return error(
                E.INVALID_SESSION_TIMEOUT,
                f"session.timeout.ms {req.session_timeout_ms} is outside "
                f"the broker's [group.min.session.timeout.ms {low}, group.max.session.timeout.ms {high}]",
            )
        if not req.protocol_type or not req.protocols:
            return error(
                E.INCONSISTENT_GROUP_PROTOCOL, "JoinGroup needs a protocol type and at least one protocol"
            )
        group = self.group_manager.groups.get(req.group_id)
        if group is not None and group.is_state(S.DEAD):
            return error(E.COORDINATOR_NOT_AVAILABLE, f"group {req.group_id!r} is being removed; retry")
        return None

    def _new_member_id(self, client_id: str) -> str:
        return f"{client_id or 'member'}-{uuid.UUID(int=self.rng.getrandbits(128), version=4)}"

    def _new_member_join(
        self, group: GroupMetadata, rid: int, req: JoinGroupRequest, now_ms: int, fx: Effects
    ) -> None:
        member_id = self._new_member_id(req.client_id)
        if req.group_instance_id is None and req.require_known_member_id:
            # KIP-394: the member must come back with this id; it counts as pending until then.
            group.pending_members[member_id] = now_ms + req.session_timeout_ms
            fx.respond(
                rid,
                join_error(
                    E.MEMBER_ID_REQUIRED, "rejoin with the member id given in this response", member_id
                ),
            )
        elif req.group_instance_id is not None and req.group_instance_id in group.static_members:
            self._update_static_member(group, rid, req, member_id, now_ms, fx)
        else:
            self._add_member_and_rebalance(group, rid, req, member_id, now_ms, fx)

    def _current_member_join(
        self, group: GroupMetadata, rid: int, req: JoinGroupRequest, now_ms: int, fx: Effects
    ) -> None:
        member_id, instance_id = req.member_id, req.group_instance_id
        if member_id in group.pending_members and instance_id is None:
            self._add_member_and_rebalance(group, rid, req, member_id, now_ms, fx)
            return
        if group.is_static_member_fenced(instance_id, member_id):
            fx.respond(
                rid,
                join_error(
                    E.FENCED_INSTANCE_ID,
                    f"group.instance.id {instance_id!r} now belongs to "
                    f"member {group.static_members[instance_id]!r}; this instance was replaced",
                    member_id,
                ),
            )
            return
        member = group.members.get(member_id)
        if member is None or (instance_id is not None and instance_id not in group.static_members):
            fx.respond(
                rid,
                join_error(
                    E.UNKNOWN_MEMBER_ID,
                    f"member {member_id!r} is not in group "
                    f"{group.group_id!r}; rejoin with an empty member id",
                    member_id,
                ),
            )
            return
        if group.state in (S.EMPTY, S.DEAD):
            fx.respond(
                rid, join_error(E.UNKNOWN_MEMBER_ID, f"group {group.group_id!r} is {group.state.value}")
            )
        elif group.is_state(S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, rid, req, now_ms, fx)
        elif group.is_state(S.COMPLETING_REBALANCE) and member.matches(req.protocols):
            # It lost the JoinGroup answer: the current generation again.
            fx.respond(rid, self._join_result(group, member, with_members=group.leader_id == member_id))
        elif group.is_state(S.STABLE) and group.leader_id != member_id and member.matches(req.protocols):
            fx.respond(rid, self._join_result(group, member, with_members=False))
        else:  # a changed subscription, or the leader asking for a rebalance (e.g. new partitions)
            self._update_member_and_rebalance(group, member, rid, req, now_ms, fx)

    def _join_result(
        self, group: GroupMetadata, member: MemberMetadata, with_members: bool, skip_assignment: bool = False
    ) -> JoinGroupResponse:
        members = tuple(JoinGroupMember(*m) for m in group.current_member_metadata()) if with_members else ()
        return JoinGroupResponse(
            OK,
            group.generation_id,
            group.protocol_type or "",
            group.protocol_name or "",
            group.leader_id or "",
            skip_assignment,
            member.member_id,
            members,
        )

    def _park_join(self, member: MemberMetadata, rid: int, fx: Effects) -> None:
        if member.awaiting_join is not None:
            fx.respond(
                member.awaiting_join,
                join_error(
                    E.REBALANCE_IN_PROGRESS,
                    "superseded by a later JoinGroup of the same member",
                    member.member_id,
                ),
            )
        member.awaiting_join = rid

    def _add_member_and_rebalance(
        self, group: GroupMetadata, rid: int, req: JoinGroupRequest, member_id: str, now_ms: int, fx: Effects
    ) -> None:
        member = MemberMetadata(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            req.protocol_type,
            req.protocols,
            awaiting_join=rid,
            is_new=True,
            heartbeat_deadline_ms=now_ms + self.config.new_member_join_timeout_ms,
        )
        if group.is_state(S.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True  # a new group's initial delay may be extended
        group.add(member)
        self._maybe_prepare_rebalance(group, now_ms, fx)

    def _update_member_and_rebalance(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        rid: int,
        req: JoinGroupRequest,
        now_ms: int,
        fx: Effects,
    ) -> None:
        member.protocols = req.protocols
        member.rebalance_timeout_ms, member.session_timeout_ms = (
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
        )
        self._park_join(member, rid, fx)
        self._maybe_prepare_rebalance(group, now_ms, fx)

    def _update_static_member(
        self, group: GroupMetadata, rid: int, req: JoinGroupRequest, new_id: str, now_ms: int, fx: Effects
    ) -> None:
        """KIP-345: a restarted static member takes over its old member id's place."""
        instance_id = req.group_instance_id
        assert instance_id is not None
        old_id = group.static_members[instance_id]
        member = group.replace_static_member(instance_id, old_id, new_id)
        fenced = f"group.instance.id {instance_id!r} rejoined as {new_id!r}; this older instance is fenced"
        if member.awaiting_join is not None:
            fx.respond(member.awaiting_join, join_error(E.FENCED_INSTANCE_ID, fenced, old_id))
            member.awaiting_join = None
        if member.awaiting_sync is not None:
            fx.respond(member.awaiting_sync, sync_error(E.FENCED_INSTANCE_ID, fenced))
            member.awaiting_sync = None
        old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        member.protocols = req.protocols
        member.rebalance_timeout_ms, member.session_timeout_ms = (
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
        )
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        member.awaiting_join = rid
        if group.is_state(S.STABLE):
            protocol = group.protocol_name
            assert protocol is not None
            unchanged = group.select_protocol() == protocol and any(
                name == protocol and metadata == member.metadata_for(protocol) for name, metadata in old[0]
            )
            if unchanged:
                self._store_static_takeover(group, member, old_id, old, fx)
            else:
                self._prepare_rebalance(group, now_ms, fx)
        elif group.is_state(S.COMPLETING_REBALANCE):
            # The leader may be assigning to the old id: rebalance so the new id gets its share.
            self._prepare_rebalance(group, now_ms, fx)

    def _store_static_takeover(
        self, group: GroupMetadata, member: MemberMetadata, old_id: str, old: tuple, fx: Effects
    ) -> None:
        new_id, generation = member.member_id, group.generation_id
        assignment = {m.member_id: m.assignment for m in group.members.values()}

        def done(result: GroupError, now_ms: int, fx: Effects) -> None:
            current = self.group_manager.groups.get(group.group_id)
            if current is not group or group.members.get(new_id) is not member:
                return
            rid = member.awaiting_join
            if rid is None:
                return
            if result.code != E.NONE and group.is_state(S.STABLE) and group.generation_id == generation:
                member.awaiting_join = None
                group.replace_static_member(member.group_instance_id or "", new_id, old_id)
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = old
                code = E(APPEND_ERRORS.get(E(result.code), E(result.code)))
                fx.respond(
                    rid, join_error(code, f"storing the static member failed: {result.message}", new_id)
                )
            elif group.is_state(S.STABLE):
                member.awaiting_join = None
                leader = group.leader_id == new_id  # KIP-814: the leader keeps the assignment
                fx.respond(rid, self._join_result(group, member, with_members=leader, skip_assignment=leader))

        self.group_manager.store_group(group, assignment, fx, done)

    # ---- rebalance phases --------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: GroupMetadata, now_ms: int, fx: Effects) -> None:
        if group.state in CAN_REBALANCE:
            self._prepare_rebalance(group, now_ms, fx)

    def _prepare_rebalance(self, group: GroupMetadata, now_ms: int, fx: Effects) -> None:
        if group.is_state(S.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(
                group,
                error(E.REBALANCE_IN_PROGRESS, f"group {group.group_id!r} is rebalancing; rejoin"),
                now_ms,
                fx,
            )
        group.sync_deadline_ms = None
        group.pending_sync_members.clear()
        if group.is_state(S.EMPTY):
            delay = self.config.initial_rebalance_delay_ms  # group.initial.rebalance.delay.ms
            group.initial_delay = True
            group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            group.join_deadline_ms = now_ms + delay
        else:
            group.initial_delay = False
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
        group.transition_to(S.PREPARING_REBALANCE, now_ms)
        self._try_complete_join(group, now_ms, fx)

    def _try_complete_join(self, group: GroupMetadata, now_ms: int, fx: Effects) -> None:
        """Kafka's DelayedJoin.tryComplete (an initial delay only ends by time)."""
        if (
            group.is_state(S.PREPARING_REBALANCE)
            and not group.initial_delay
            and group.has_all_members_joined()
        ):
            self._complete_join(group, now_ms, fx)

    def _expire_join(self, group: GroupMetadata, now_ms: int, fx: Effects) -> None:
        if group.initial_delay and group.new_member_added and group.initial_delay_remaining_ms > 0:
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
            group.new_member_added = False
            group.initial_delay_remaining_ms -= delay
            group.join_deadline_ms = now_ms + delay
            return
        self._complete_join(group, now_ms, fx)

    def _complete_join(self, group: GroupMetadata, now_ms: int, fx: Effects) -> None:
        """End of the join phase: drop dynamic members that did not rejoin, start a generation."""
        for member in group.not_yet_rejoined():
            if member.group_instance_id is None:
                group.remove(member.member_id)
        group.join_deadline_ms, group.initial_delay, group.new_member_added = None, False, False
        if group.members and not self._maybe_elect_new_joined_leader(group):
            # Only static members that did not rejoin are left: wait for them (or their sessions) again.
            group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
            return
        self._init_next_generation(group, now_ms)
        if group.is_state(S.EMPTY):
            self.group_manager.store_group(group, {}, fx, lambda result, now, fx: None)
            return
        for member in group.members.values():
            if member.awaiting_join is not None:
                fx.respond(
                    member.awaiting_join,
                    self._join_result(group, member, with_members=group.leader_id == member.member_id),
                )
                member.awaiting_join = None
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            member.is_new = False
        group.pending_sync_members = set(group.members)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()

    @staticmethod
    def _maybe_elect_new_joined_leader(group: GroupMetadata) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join is not None:
            return True
        joined = next((m for m in group.members.values() if m.awaiting_join is not None), None)
        if joined is None:
            return False
        group.leader_id = joined.member_id
        return True

    @staticmethod
    def _init_next_generation(group: GroupMetadata, now_ms: int) -> None:
        group.generation_id += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            group.transition_to(S.COMPLETING_REBALANCE, now_ms)
        else:
            group.protocol_name = None
            group.transition_to(S.EMPTY, now_ms)

    def _reset_and_propagate_assignment_error(
        self, group: GroupMetadata, problem: GroupError, now_ms: int, fx: Effects
    ) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.awaiting_sync is not None:
                fx.respond(member.awaiting_sync, SyncGroupResponse(problem))
                member.awaiting_sync = None
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms

    def _set_and_propagate_assignment(
        self, group: GroupMetadata, assignment: dict[str, bytes], now_ms: int, fx: Effects
    ) -> None:
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
            if member.awaiting_sync is not None:
                fx.respond(
                    member.awaiting_sync,
                    SyncGroupResponse(
                        OK, group.protocol_type or "", group.protocol_name or "", member.assignment
                    ),
                )
                member.awaiting_sync = None
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms

    # ---- SyncGroup ----------------------------------------------------------------------------------

    def handle_sync_group(self, request_id: int, req: SyncGroupRequest, now_ms: int) -> Effects:
        fx = Effects()
        group = self.group_manager.groups.get(req.group_id)
        problem = validate_group_status(self.group_manager, req.group_id) or self._member_problem(
            group, req.member_id, req.group_instance_id, req.generation_id
        )
        if problem is None and group is not None:
            if req.protocol_type and req.protocol_type != group.protocol_type:
                problem = error(
                    E.INCONSISTENT_GROUP_PROTOCOL,
                    f"protocol type {req.protocol_type!r} is not the group's {group.protocol_type!r}",
                )
            elif req.protocol_name and req.protocol_name != group.protocol_name:
                problem = error(
                    E.INCONSISTENT_GROUP_PROTOCOL,
                    f"protocol {req.protocol_name!r} is not the group's {group.protocol_name!r}",
                )
            elif group.is_state(S.EMPTY):
                problem = error(E.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} is Empty; rejoin")
            elif group.is_state(S.PREPARING_REBALANCE):
                problem = error(E.REBALANCE_IN_PROGRESS, f"group {req.group_id!r} is rebalancing; rejoin")
        if problem is not None or group is None:
            fx.respond(request_id, SyncGroupResponse(problem or OK))
            return fx
        member = group.members[req.member_id]
        self._synced(group, req.member_id)
        if group.is_state(S.STABLE):
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            fx.respond(
                request_id,
                SyncGroupResponse(
                    OK, group.protocol_type or "", group.protocol_name or "", member.assignment
                ),
            )
            return fx
        if member.awaiting_sync is not None:
            fx.respond(
                member.awaiting_sync, sync_error(E.REBALANCE_IN_PROGRESS, "superseded by a later SyncGroup")
            )
        member.awaiting_sync = request_id
        if group.leader_id == req.member_id:
            self._store_assignment(group, dict(req.assignments), fx)
        self.invariants()
        return fx

    @staticmethod
    def _synced(group: GroupMetadata, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            group.sync_deadline_ms = None

    def _store_assignment(self, group: GroupMetadata, given: dict[str, bytes], fx: Effects) -> None:
        """The leader's assignment (missing members get an empty one) is stored, then propagated."""
        assignment = {member_id: given.get(member_id, b"") for member_id in group.members}
        generation = group.generation_id

        def done(result: GroupError, now_ms: int, fx: Effects) -> None:
            if self.group_manager.groups.get(group.group_id) is not group:
                return
            if not group.is_state(S.COMPLETING_REBALANCE) or group.generation_id != generation:
                return  # another rebalance started meanwhile: its own rules answer the members
            if result.code != E.NONE:
                code = E(APPEND_ERRORS.get(E(result.code), E(result.code)))
                self._reset_and_propagate_assignment_error(
                    group, error(code, f"storing the assignment failed: {result.message}"), now_ms, fx
                )
                self._maybe_prepare_rebalance(group, now_ms, fx)
            else:
                self._set_and_propagate_assignment(group, assignment, now_ms, fx)
                group.transition_to(S.STABLE, now_ms)

        self.group_manager.store_group(group, assignment, fx, done)

    def _member_problem(
        self, group: GroupMetadata | None, member_id: str, instance_id: str | None, generation_id: int
    ) -> GroupError | None:
        """The fencing checks shared by SyncGroup, Heartbeat and OffsetCommit."""
        if group is None:
            return error(E.UNKNOWN_MEMBER_ID, f"member {member_id!r}: the group does not exist; rejoin")
        if group.is_state(S.DEAD):
            return error(E.COORDINATOR_NOT_AVAILABLE, f"group {group.group_id!r} is being removed; retry")
        if group.is_static_member_fenced(instance_id, member_id):
            return error(
                E.FENCED_INSTANCE_ID, f"group.instance.id {instance_id!r} belongs to another member now"
            )
        if member_id not in group.members:
            return error(
                E.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group.group_id!r}; rejoin"
            )
        if generation_id != group.generation_id:
            return error(
                E.ILLEGAL_GENERATION,
                f"generation {generation_id} is not the group's current {group.generation_id}; rejoin",
            )
        return None

    # ---- Heartbeat / LeaveGroup ----------------------------------------------------------------------

    def handle_heartbeat(self, req: HeartbeatRequest, now_ms: int) -> tuple[HeartbeatResponse, Effects]:
        fx = Effects()
        group = self.group_manager.groups.get(req.group_id)
        problem = validate_group_status(self.group_manager, req.group_id) or self._member_problem(
            group, req.member_id, req.group_instance_id, req.generation_id
        )
        if problem is not None or group is None:
            return HeartbeatResponse(problem or OK), fx
        if group.is_state(S.EMPTY):
            return HeartbeatResponse(
                error(E.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} is Empty; rejoin")
            ), fx
        member = group.members[req.member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.is_state(S.PREPARING_REBALANCE):
            return HeartbeatResponse(
                error(E.REBALANCE_IN_PROGRESS, f"group {req.group_id!r} is rebalancing; rejoin")
            ), fx
        return HeartbeatResponse(OK), fx

    def handle_leave_group(self, req: LeaveGroupRequest, now_ms: int) -> tuple[LeaveGroupResponse, Effects]:
        fx = Effects()
        problem = validate_group_status(self.group_manager, req.group_id)
        group = self.group_manager.groups.get(req.group_id)
        if problem is None and group is not None and group.is_state(S.DEAD):
            problem = error(E.COORDINATOR_NOT_AVAILABLE, f"group {req.group_id!r} is being removed; retry")
        if problem is not None:
            return LeaveGroupResponse(problem), fx
        results = []
        for leaving in req.members:
            outcome = self._leave_one(group, leaving.member_id, leaving.group_instance_id, now_ms, fx)
            results.append(LeaveGroupMemberResponse(leaving.member_id, leaving.group_instance_id, outcome))
        self.invariants()
        return LeaveGroupResponse(OK, tuple(results)), fx

    def _leave_one(
        self, group: GroupMetadata | None, member_id: str, instance_id: str | None, now_ms: int, fx: Effects
    ) -> GroupError:
        unknown = error(E.UNKNOWN_MEMBER_ID, f"member {member_id or instance_id!r} is not in the group")
        if group is None:
            return unknown
        if not member_id and instance_id is not None:
            member_id = group.static_members.get(instance_id, "")
            if not member_id:
                return unknown
        elif member_id in group.pending_members:
            del group.pending_members[member_id]
            if group.is_state(S.PREPARING_REBALANCE):
                self._try_complete_join(group, now_ms, fx)
            return OK
        elif group.is_static_member_fenced(instance_id, member_id):
            return error(E.FENCED_INSTANCE_ID, f"group.instance.id {instance_id!r} belongs to another member")
        member = group.members.get(member_id)
        if member is None:
            return unknown
        self._remove_member_and_update_group(group, member, now_ms, fx)
        return OK

    def _remove_member_and_update_group(
        self, group: GroupMetadata, member: MemberMetadata, now_ms: int, fx: Effects
    ) -> None:
        gone = f"member {member.member_id!r} left or was removed from group {group.group_id!r}; rejoin"
        if member.awaiting_join is not None:
            fx.respond(member.awaiting_join, join_error(E.UNKNOWN_MEMBER_ID, gone, member.member_id))
        if member.awaiting_sync is not None:
            fx.respond(member.awaiting_sync, sync_error(E.UNKNOWN_MEMBER_ID, gone))
        group.remove(member.member_id)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now_ms, fx)
        elif group.is_state(S.PREPARING_REBALANCE):
            self._try_complete_join(group, now_ms, fx)

    # ---- timers -------------------------------------------------------------------------------------

    @staticmethod
    def _member_deadline(member: MemberMetadata) -> int | None:
        """Members parked in a JoinGroup/SyncGroup satisfy their heartbeats, except new members (they
        expire after ``group.new.member.join.timeout``)."""
        if not member.is_new and (member.awaiting_join is not None or member.awaiting_sync is not None):
            return None
        return member.heartbeat_deadline_ms

    def next_deadline_ms(self) -> int | None:
        deadlines: list[int] = []
        for group in self.group_manager.groups.values():
            deadlines.extend(group.pending_members.values())
            deadlines.extend(d for d in map(self._member_deadline, group.members.values()) if d is not None)
            if group.join_deadline_ms is not None and group.is_state(S.PREPARING_REBALANCE):
                deadlines.append(group.join_deadline_ms)
            if group.sync_deadline_ms is not None:
                deadlines.append(group.sync_deadline_ms)
        check_ms = self.group_manager.offsets_check_deadline_ms
        if check_ms is not None and self.group_manager.groups:  # nothing to expire otherwise
            deadlines.append(check_ms)
        return min(deadlines, default=None)

    def tick(self, now_ms: int) -> Effects:
        """Expire sessions, pending members, join and sync phases whose deadline passed; then, when
        ``offsets.retention.check.interval.ms`` is due, expired offsets (``cleanup_expired_offsets``)."""
        fx = self._tick_groups(now_ms)
        check_ms = self.group_manager.offsets_check_deadline_ms
        if check_ms is not None and check_ms <= now_ms:
            expired = self.group_manager.cleanup_expired_offsets(now_ms)
            fx.responses.extend(expired.responses)
            fx.appends.extend(expired.appends)
        return fx

    def _tick_groups(self, now_ms: int) -> Effects:
        fx = Effects()
        for group in list(self.group_manager.groups.values()):
            for member_id, deadline in list(group.pending_members.items()):
                if deadline <= now_ms:
                    del group.pending_members[member_id]
                    if group.is_state(S.PREPARING_REBALANCE):
                        self._try_complete_join(group, now_ms, fx)
            for member in list(group.members.values()):
                deadline = self._member_deadline(member)
                if deadline is not None and deadline <= now_ms and member.member_id in group.members:
                    self._remove_member_and_update_group(group, member, now_ms, fx)
            deadline = group.join_deadline_ms
            if group.is_state(S.PREPARING_REBALANCE) and deadline is not None and deadline <= now_ms:
                self._expire_join(group, now_ms, fx)
            if group.sync_deadline_ms is not None and group.sync_deadline_ms <= now_ms:
                self._expire_sync(group, now_ms, fx)
        self.invariants()
        return fx

    def _expire_sync(self, group: GroupMetadata, now_ms: int, fx: Effects) -> None:
        """Members that got a JoinGroup answer but never sent SyncGroup within the rebalance timeout."""
        group.sync_deadline_ms = None
        if group.state not in (S.COMPLETING_REBALANCE, S.STABLE):
            return
        for member_id in sorted(group.pending_sync_members):
            member = group.members[member_id]
            if member.awaiting_join is not None:
                fx.respond(
                    member.awaiting_join, join_error(E.UNKNOWN_MEMBER_ID, "no SyncGroup in time", member_id)
                )
            group.remove(member_id)
        self._prepare_rebalance(group, now_ms, fx)

    # ---- offsets ------------------------------------------------------------------------------------

    def handle_offset_commit(
        self, request_id: int, req: OffsetCommitRequest, now_ms: int, commit_timestamp_ms: int
    ) -> Effects:
        fx = Effects()
        problem = validate_group_status(self.group_manager, req.group_id)
        if problem is not None:
            fx.respond(request_id, OffsetCommitResponse(problem, {}))
            return fx
        group = self.group_manager.groups.get(req.group_id)
        standalone = req.generation_id < 0 and not req.member_id
        if group is None and standalone:
            group = GroupMetadata(req.group_id, state_timestamp_ms=now_ms)
            self.group_manager.groups[req.group_id] = group
        if standalone and group is not None and group.is_state(S.EMPTY):
            problem = None
        elif group is None:
            problem = error(
                E.ILLEGAL_GENERATION,
                f"group {req.group_id!r} does not exist; generation {req.generation_id} is stale",
            )
        else:
            problem = self._member_problem(group, req.member_id, req.group_instance_id, req.generation_id)
            if problem is None and group.is_state(S.COMPLETING_REBALANCE):
                problem = error(
                    E.REBALANCE_IN_PROGRESS, "the group is completing a rebalance; commit after SyncGroup"
                )
            elif problem is None:
                member = group.members[req.member_id]
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if problem is not None or group is None:
            results = {(p.topic, p.partition): problem or OK for p in req.partitions}
            fx.respond(request_id, OffsetCommitResponse(OK, results))
            return fx
        self.group_manager.store_offsets(group, request_id, req, commit_timestamp_ms, fx)
        return fx

    # ---- the requests outside the rebalance protocol (broker.group.admin) ---------------------------------

    def handle_delete_groups(self, request_id: int, group_ids: tuple[str, ...], now_ms: int) -> Effects:
        return admin.handle_delete_groups(self.group_manager, request_id, group_ids, now_ms)

    def handle_offset_delete(
        self, request_id: int, group_id: str, partitions: tuple[tuple[str, int], ...], now_ms: int
    ) -> Effects:
        return admin.handle_offset_delete(self.group_manager, request_id, group_id, partitions, now_ms)

    def handle_offset_fetch(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        return admin.handle_offset_fetch(self.group_manager, req)

    def handle_list_groups(self, states_filter: tuple[str, ...]) -> list[ListedGroup]:
        return admin.handle_list_groups(self.group_manager, states_filter)

    def handle_describe_group(self, group_id: str) -> DescribedGroup:
        return admin.handle_describe_group(self.group_manager, group_id)

    # ---- deleted topics ---------------------------------------------------------------------------------

    def handle_deleted_topics(self, topics: frozenset[str], now_ms: int) -> Effects:
        """The topics are gone from the metadata: their committed offsets go too (Kafka's
        ``onPartitionsDeleted``)."""
        return self.group_manager.cleanup_deleted_topics(topics, now_ms)
