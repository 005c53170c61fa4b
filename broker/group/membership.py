"""The requests of a group's current members in Kafka's classic protocol: SyncGroup, Heartbeat and
LeaveGroup (Kafka's ``GroupCoordinator.handleSyncGroup`` / ``handleHeartbeat`` / ``handleLeaveGroup``),
and the fencing checks they share with OffsetCommit (``member_problem``), as functions over a
``GroupMetadataManager``. ``broker.group.coordinator.GroupCoordinator`` calls them.

Theory of operation
-------------------
Every request passes ``validate_group_status`` and then ``member_problem``: the group exists and is
not being removed, a static member is not fenced by a newer instance (FENCED_INSTANCE_ID), the member
is in the group (UNKNOWN_MEMBER_ID) and of the current generation (ILLEGAL_GENERATION).

- SyncGroup: in an Empty group or during the join phase the member must rejoin. In a Stable group it
  gets its assignment at once (it lost the first answer). In CompletingRebalance it is parked until the
  leader's SyncGroup: the leader's assignment (members it left out get an empty one) is stored in
  ``__consumer_offsets`` first (``store_group``), and only when that append completed for this same
  generation does ``broker.group.rebalance`` hand every parked member its share and make the group
  Stable; a failed append answers them with the error and starts a new rebalance.
- Heartbeat: renews the member's session; during the join phase it answers REBALANCE_IN_PROGRESS so the
  member rejoins.
- LeaveGroup: each listed member (by member id, or by ``group.instance.id`` for a static member,
  KIP-345) leaves, with an error of its own per member; a pending member (KIP-394) just leaves the
  pending set; a member's removal rebalances the group (``remove_member_and_update_group``).

No I/O, no clock, no threads.
"""

from __future__ import annotations

from broker.group.admin import validate_group_status
from broker.group.metadata import GroupMetadata, GroupState
from broker.group.metadata_manager import APPEND_ERRORS, Effects, GroupMetadataManager
from broker.group.rebalance import (
    maybe_prepare_rebalance,
    remove_member_and_update_group,
    reset_and_propagate_assignment_error,
    set_and_propagate_assignment,
    sync_error,
    try_complete_join,
)
from broker.group.requests import (
    HeartbeatRequest,
    HeartbeatResponse,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from proto.errors import OK, ApiError, ErrorCode

E = ErrorCode
S = GroupState


def handle_sync_group(
    manager: GroupMetadataManager, request_id: int, req: SyncGroupRequest, now_ms: int
) -> Effects:
    fx = Effects()
    group = manager.groups.get(req.group_id)
    problem = validate_group_status(manager, req.group_id) or member_problem(
        group, req.member_id, req.group_instance_id, req.generation_id
    )
    if problem is None and group is not None:
        if req.protocol_type and req.protocol_type != group.protocol_type:
            problem = ApiError(
                E.INCONSISTENT_GROUP_PROTOCOL,
                f"protocol type {req.protocol_type!r} is not the group's {group.protocol_type!r}",
            )
        elif req.protocol_name and req.protocol_name != group.protocol_name:
            problem = ApiError(
                E.INCONSISTENT_GROUP_PROTOCOL,
                f"protocol {req.protocol_name!r} is not the group's {group.protocol_name!r}",
            )
        elif group.is_state(S.EMPTY):
            problem = ApiError(E.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} is Empty; rejoin")
        elif group.is_state(S.PREPARING_REBALANCE):
            problem = ApiError(E.REBALANCE_IN_PROGRESS, f"group {req.group_id!r} is rebalancing; rejoin")
    if problem is not None or group is None:
        fx.respond(request_id, SyncGroupResponse(problem or OK))
        return fx
    member = group.members[req.member_id]
    _synced(group, req.member_id)
    if group.is_state(S.STABLE):
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        fx.respond(
            request_id,
            SyncGroupResponse(OK, group.protocol_type or "", group.protocol_name or "", member.assignment),
        )
        return fx
    if member.awaiting_sync is not None:
        fx.respond(
            member.awaiting_sync, sync_error(E.REBALANCE_IN_PROGRESS, "superseded by a later SyncGroup")
        )
    member.awaiting_sync = request_id
    if group.leader_id == req.member_id:
        _store_assignment(manager, group, dict(req.assignments), fx)
    manager.invariants()
    return fx


def _synced(group: GroupMetadata, member_id: str) -> None:
    group.pending_sync_members.discard(member_id)
    if not group.pending_sync_members:
        group.sync_deadline_ms = None


def _store_assignment(
    manager: GroupMetadataManager, group: GroupMetadata, given: dict[str, bytes], fx: Effects
) -> None:
    """The leader's assignment (missing members get an empty one) is stored, then propagated."""
    assignment = {member_id: given.get(member_id, b"") for member_id in group.members}
    generation = group.generation_id

    def done(result: ApiError, now_ms: int, fx: Effects) -> None:
        if manager.groups.get(group.group_id) is not group:
            return
        if not group.is_state(S.COMPLETING_REBALANCE) or group.generation_id != generation:
            return  # another rebalance started meanwhile: its own rules answer the members
        if result.code != E.NONE:
            code = E(APPEND_ERRORS.get(E(result.code), E(result.code)))
            reset_and_propagate_assignment_error(
                group, ApiError(code, f"storing the assignment failed: {result.message}"), now_ms, fx
            )
            maybe_prepare_rebalance(manager, group, now_ms, fx)
        else:
            set_and_propagate_assignment(group, assignment, now_ms, fx)
            group.transition_to(S.STABLE, now_ms)

    manager.store_group(group, assignment, fx, done)


def member_problem(
    group: GroupMetadata | None, member_id: str, instance_id: str | None, generation_id: int
) -> ApiError | None:
    """The fencing checks shared by SyncGroup, Heartbeat and OffsetCommit."""
    if group is None:
        return ApiError(E.UNKNOWN_MEMBER_ID, f"member {member_id!r}: the group does not exist; rejoin")
    if group.is_state(S.DEAD):
        return ApiError(E.COORDINATOR_NOT_AVAILABLE, f"group {group.group_id!r} is being removed; retry")
    if group.is_static_member_fenced(instance_id, member_id):
        return ApiError(
            E.FENCED_INSTANCE_ID, f"group.instance.id {instance_id!r} belongs to another member now"
        )
    if member_id not in group.members:
        return ApiError(
            E.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group.group_id!r}; rejoin"
        )
    if generation_id != group.generation_id:
        return ApiError(
            E.ILLEGAL_GENERATION,
            f"generation {generation_id} is not the group's current {group.generation_id}; rejoin",
        )
    return None


def handle_heartbeat(
    manager: GroupMetadataManager, req: HeartbeatRequest, now_ms: int
) -> tuple[HeartbeatResponse, Effects]:
    fx = Effects()
    group = manager.groups.get(req.group_id)
    problem = validate_group_status(manager, req.group_id) or member_problem(
        group, req.member_id, req.group_instance_id, req.generation_id
    )
    if problem is not None or group is None:
        return HeartbeatResponse(problem or OK), fx
    if group.is_state(S.EMPTY):
        return HeartbeatResponse(
            ApiError(E.UNKNOWN_MEMBER_ID, f"group {req.group_id!r} is Empty; rejoin")
        ), fx
    member = group.members[req.member_id]
    member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
    if group.is_state(S.PREPARING_REBALANCE):
        return HeartbeatResponse(
            ApiError(E.REBALANCE_IN_PROGRESS, f"group {req.group_id!r} is rebalancing; rejoin")
        ), fx
    return HeartbeatResponse(OK), fx


def handle_leave_group(
    manager: GroupMetadataManager, req: LeaveGroupRequest, now_ms: int
) -> tuple[LeaveGroupResponse, Effects]:
    fx = Effects()
    problem = validate_group_status(manager, req.group_id)
    group = manager.groups.get(req.group_id)
    if problem is None and group is not None and group.is_state(S.DEAD):
        problem = ApiError(E.COORDINATOR_NOT_AVAILABLE, f"group {req.group_id!r} is being removed; retry")
    if problem is not None:
        return LeaveGroupResponse(problem), fx
    results = []
    for leaving in req.members:
        outcome = _leave_one(manager, group, leaving.member_id, leaving.group_instance_id, now_ms, fx)
        results.append(LeaveGroupMemberResponse(leaving.member_id, leaving.group_instance_id, outcome))
    manager.invariants()
    return LeaveGroupResponse(OK, tuple(results)), fx


def _leave_one(
    manager: GroupMetadataManager,
    group: GroupMetadata | None,
    member_id: str,
    instance_id: str | None,
    now_ms: int,
    fx: Effects,
) -> ApiError:
    unknown = ApiError(E.UNKNOWN_MEMBER_ID, f"member {member_id or instance_id!r} is not in the group")
    if group is None:
        return unknown
    if not member_id and instance_id is not None:
        member_id = group.static_members.get(instance_id, "")
        if not member_id:
            return unknown
    elif member_id in group.pending_members:
        del group.pending_members[member_id]
        if group.is_state(S.PREPARING_REBALANCE):
            try_complete_join(manager, group, now_ms, fx)
        return OK
    elif group.is_static_member_fenced(instance_id, member_id):
        return ApiError(E.FENCED_INSTANCE_ID, f"group.instance.id {instance_id!r} belongs to another member")
    member = group.members.get(member_id)
    if member is None:
        return unknown
    remove_member_and_update_group(manager, group, member, now_ms, fx)
    return OK
