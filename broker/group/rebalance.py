"""The rebalance of a group in Kafka's classic protocol (Kafka's ``GroupCoordinator`` from
``prepareRebalance`` to ``propagateAssignment``, with its ``DelayedJoin`` and heartbeat expiry), as
functions over a ``GroupMetadataManager``'s groups: the state machine that JoinGroup
(``broker.group.join_group``), SyncGroup, Heartbeat and LeaveGroup (``broker.group.membership``) and
the coordinator's ``tick`` drive.

Theory of operation
-------------------
A group moves Empty/Stable/CompletingRebalance -> PreparingRebalance -> CompletingRebalance ->
Stable (``GroupMetadata.transition_to`` checks each step):

- ``prepare_rebalance`` (``maybe_prepare_rebalance`` where the state allows one) starts the join
  phase: a CompletingRebalance group's parked SyncGroups answer REBALANCE_IN_PROGRESS; the phase ends
  when every known member has rejoined (``try_complete_join``, Kafka's ``DelayedJoin.tryComplete``)
  or at its deadline: the rebalance timeout, or for an Empty group ``group.initial.rebalance.delay.ms``,
  extended while new members keep arriving, up to the rebalance timeout (``_expire_join``);
- ``_complete_join`` ends it: the dynamic members that did not rejoin are dropped (static ones are
  waited for again), the leader is kept if it rejoined or else taken from the joined members, the
  next generation starts with the protocol chosen by vote, and every parked JoinGroup is answered (the
  leader with the members' metadata). A group left without members becomes Empty and is stored;
- the sync phase: the members must send SyncGroup before the rebalance timeout (``_expire_sync``
  removes those that did not and rebalances again); once the leader's assignment is stored
  (``broker.group.membership``), ``set_and_propagate_assignment`` answers the parked SyncGroups and
  the group is Stable; a failure answers them with ``reset_and_propagate_assignment_error``;
- a member that leaves or whose session expires is removed (``remove_member_and_update_group``): its
  parked requests answer UNKNOWN_MEMBER_ID and the group rebalances (or, mid-join, may complete it);
- timers: ``group_deadlines_ms`` lists when ``tick_groups`` must run (pending members, sessions, the
  join and sync phases). A member parked in JoinGroup or SyncGroup needs no heartbeat, except a new
  one (``group.new.member.join.timeout``).

No I/O, no clock, no threads.
"""

from __future__ import annotations

from broker.group.metadata import CAN_REBALANCE, GroupMetadata, GroupState, MemberMetadata
from broker.group.metadata_manager import Effects, GroupMetadataManager
from broker.group.requests import JoinGroupMember, JoinGroupResponse, SyncGroupResponse
from proto.errors import OK, ApiError, ErrorCode

E = ErrorCode
S = GroupState


def join_error(code: ErrorCode, message: str, member_id: str = "") -> JoinGroupResponse:
    return JoinGroupResponse(ApiError(code, message), member_id=member_id)


def sync_error(code: ErrorCode, message: str) -> SyncGroupResponse:
    return SyncGroupResponse(ApiError(code, message))


def join_result(
    group: GroupMetadata, member: MemberMetadata, with_members: bool, skip_assignment: bool = False
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


def maybe_prepare_rebalance(
    manager: GroupMetadataManager, group: GroupMetadata, now_ms: int, fx: Effects
) -> None:
    if group.state in CAN_REBALANCE:
        prepare_rebalance(manager, group, now_ms, fx)


def prepare_rebalance(manager: GroupMetadataManager, group: GroupMetadata, now_ms: int, fx: Effects) -> None:
    if group.is_state(S.COMPLETING_REBALANCE):
        reset_and_propagate_assignment_error(
            group,
            ApiError(E.REBALANCE_IN_PROGRESS, f"group {group.group_id!r} is rebalancing; rejoin"),
            now_ms,
            fx,
        )
    group.sync_deadline_ms = None
    group.pending_sync_members.clear()
    if group.is_state(S.EMPTY):
        delay = manager.config.initial_rebalance_delay_ms  # group.initial.rebalance.delay.ms
        group.initial_delay = True
        group.initial_delay_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
        group.join_deadline_ms = now_ms + delay
    else:
        group.initial_delay = False
        group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
    group.transition_to(S.PREPARING_REBALANCE, now_ms)
    try_complete_join(manager, group, now_ms, fx)


def try_complete_join(manager: GroupMetadataManager, group: GroupMetadata, now_ms: int, fx: Effects) -> None:
    """Kafka's DelayedJoin.tryComplete (an initial delay only ends by time)."""
    if group.is_state(S.PREPARING_REBALANCE) and not group.initial_delay and group.has_all_members_joined():
        _complete_join(manager, group, now_ms, fx)


def _expire_join(manager: GroupMetadataManager, group: GroupMetadata, now_ms: int, fx: Effects) -> None:
    if group.initial_delay and group.new_member_added and group.initial_delay_remaining_ms > 0:
        delay = min(manager.config.initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
        group.new_member_added = False
        group.initial_delay_remaining_ms -= delay
        group.join_deadline_ms = now_ms + delay
        return
    _complete_join(manager, group, now_ms, fx)


def _complete_join(manager: GroupMetadataManager, group: GroupMetadata, now_ms: int, fx: Effects) -> None:
    """End of the join phase: drop dynamic members that did not rejoin, start a generation."""
    for member in group.not_yet_rejoined():
        if member.group_instance_id is None:
            group.remove(member.member_id)
    group.join_deadline_ms, group.initial_delay, group.new_member_added = None, False, False
    if group.members and not _maybe_elect_new_joined_leader(group):
        # Only static members that did not rejoin are left: wait for them (or their sessions) again.
        group.join_deadline_ms = now_ms + group.rebalance_timeout_ms()
        return
    _init_next_generation(group, now_ms)
    if group.is_state(S.EMPTY):
        manager.store_group(group, {}, fx, lambda result, now, fx: None)
        return
    for member in group.members.values():
        if member.awaiting_join is not None:
            fx.respond(
                member.awaiting_join,
                join_result(group, member, with_members=group.leader_id == member.member_id),
            )
            member.awaiting_join = None
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        member.is_new = False
    group.pending_sync_members = set(group.members)
    group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()


def _maybe_elect_new_joined_leader(group: GroupMetadata) -> bool:
    leader = group.members.get(group.leader_id or "")
    if leader is not None and leader.awaiting_join is not None:
        return True
    joined = next((m for m in group.members.values() if m.awaiting_join is not None), None)
    if joined is None:
        return False
    group.leader_id = joined.member_id
    return True


def _init_next_generation(group: GroupMetadata, now_ms: int) -> None:
    group.generation_id += 1
    if group.members:
        group.protocol_name = group.select_protocol()
        group.transition_to(S.COMPLETING_REBALANCE, now_ms)
    else:
        group.protocol_name = None
        group.transition_to(S.EMPTY, now_ms)


def reset_and_propagate_assignment_error(
    group: GroupMetadata, problem: ApiError, now_ms: int, fx: Effects
) -> None:
    for member in group.members.values():
        member.assignment = b""
        if member.awaiting_sync is not None:
            fx.respond(member.awaiting_sync, SyncGroupResponse(problem))
            member.awaiting_sync = None
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms


def set_and_propagate_assignment(
    group: GroupMetadata, assignment: dict[str, bytes], now_ms: int, fx: Effects
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


def remove_member_and_update_group(
    manager: GroupMetadataManager, group: GroupMetadata, member: MemberMetadata, now_ms: int, fx: Effects
) -> None:
    gone = f"member {member.member_id!r} left or was removed from group {group.group_id!r}; rejoin"
    if member.awaiting_join is not None:
        fx.respond(member.awaiting_join, join_error(E.UNKNOWN_MEMBER_ID, gone, member.member_id))
    if member.awaiting_sync is not None:
        fx.respond(member.awaiting_sync, sync_error(E.UNKNOWN_MEMBER_ID, gone))
    group.remove(member.member_id)
    if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
        maybe_prepare_rebalance(manager, group, now_ms, fx)
    elif group.is_state(S.PREPARING_REBALANCE):
        try_complete_join(manager, group, now_ms, fx)


def _member_deadline(member: MemberMetadata) -> int | None:
    """Members parked in a JoinGroup/SyncGroup satisfy their heartbeats, except new members (they
    expire after ``group.new.member.join.timeout``)."""
    if not member.is_new and (member.awaiting_join is not None or member.awaiting_sync is not None):
        return None
    return member.heartbeat_deadline_ms


def group_deadlines_ms(manager: GroupMetadataManager) -> list[int]:
    """The groups' deadlines for ``tick_groups``: pending members, member sessions, join and sync phases."""
    deadlines: list[int] = []
    for group in manager.groups.values():
        deadlines.extend(group.pending_members.values())
        deadlines.extend(d for d in map(_member_deadline, group.members.values()) if d is not None)
        if group.join_deadline_ms is not None and group.is_state(S.PREPARING_REBALANCE):
            deadlines.append(group.join_deadline_ms)
        if group.sync_deadline_ms is not None:
            deadlines.append(group.sync_deadline_ms)
    return deadlines


def tick_groups(manager: GroupMetadataManager, now_ms: int) -> Effects:
    """Expire the pending members, member sessions, join and sync phases whose deadline passed."""
    fx = Effects()
    for group in list(manager.groups.values()):
        for member_id, pending_deadline in list(group.pending_members.items()):
            if pending_deadline <= now_ms:
                del group.pending_members[member_id]
                if group.is_state(S.PREPARING_REBALANCE):
                    try_complete_join(manager, group, now_ms, fx)
        for member in list(group.members.values()):
            deadline = _member_deadline(member)
            if deadline is not None and deadline <= now_ms and member.member_id in group.members:
                remove_member_and_update_group(manager, group, member, now_ms, fx)
        deadline = group.join_deadline_ms
        if group.is_state(S.PREPARING_REBALANCE) and deadline is not None and deadline <= now_ms:
            _expire_join(manager, group, now_ms, fx)
        if group.sync_deadline_ms is not None and group.sync_deadline_ms <= now_ms:
            _expire_sync(manager, group, now_ms, fx)
    manager.invariants()
    return fx


def _expire_sync(manager: GroupMetadataManager, group: GroupMetadata, now_ms: int, fx: Effects) -> None:
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
    prepare_rebalance(manager, group, now_ms, fx)
