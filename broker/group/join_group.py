"""JoinGroup, Kafka's ``GroupCoordinator.handleJoinGroup`` (classic protocol, pre-KIP-848), as functions
over a ``GroupMetadataManager``: who may join, which member id a joiner gets, and how a join moves the
group. ``broker.group.coordinator.GroupCoordinator.handle_join_group`` calls ``handle_join_group``.

Theory of operation
-------------------
A JoinGroup first passes ``validate_group_status`` and the request checks (session timeout within the
broker's bounds, a protocol type and protocols, the group not being removed). Then:

- an unknown group is created Empty, for a joiner without a member id (one with an id is told
  UNKNOWN_MEMBER_ID); the group's protocol type and protocols must fit the joiner's
  (INCONSISTENT_GROUP_PROTOCOL), and ``group.max.size`` bounds new members;
- a new member gets its id (``<client.id>-<uuid4>``, from the injected ``random.Random``); a dynamic
  one that asks for it (``require_known_member_id``, KIP-394) gets it with ``MEMBER_ID_REQUIRED`` and
  counts as pending until it rejoins with that id; only then is it added and the group rebalanced;
- a new static member (KIP-345) whose ``group.instance.id`` is known takes over its old member id's
  place (``_update_static_member``): the old instance's parked requests answer FENCED_INSTANCE_ID; in
  a Stable group with an unchanged subscription there is no rebalance: the takeover is stored in the
  log first and the member then gets the current generation (KIP-814: a static leader gets
  ``skip_assignment``), or the old id back if storing failed;
- a known member rejoining: during a rebalance its request is parked (a repeated JoinGroup supersedes
  the earlier one); in CompletingRebalance or Stable with an unchanged subscription it gets the
  current generation again (the leader in Stable asks for a rebalance); otherwise it triggers one.

The rebalance itself (when the join phase ends, the generation, the answers to parked requests) is
``broker.group.rebalance``. The parked JoinGroup is answered from a later call's ``Effects``.

No I/O, no clock, no threads.
"""

from __future__ import annotations

import random
import uuid

from broker.group.admin import validate_group_status
from broker.group.metadata import GroupMetadata, GroupState, MemberMetadata
from broker.group.metadata_manager import APPEND_ERRORS, Effects, GroupMetadataManager
from broker.group.rebalance import (
    join_error,
    join_result,
    maybe_prepare_rebalance,
    prepare_rebalance,
    sync_error,
    try_complete_join,
)
from broker.group.requests import JoinGroupRequest, JoinGroupResponse
from proto.errors import ApiError, ErrorCode

E = ErrorCode
S = GroupState


def handle_join_group(
    manager: GroupMetadataManager, rng: random.Random, request_id: int, req: JoinGroupRequest, now_ms: int
) -> Effects:
    fx = Effects()
    problem = _join_problem(manager, req)
    if problem is not None:
        fx.respond(request_id, JoinGroupResponse(problem, member_id=req.member_id))
        return fx
    group = manager.groups.get(req.group_id)
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
        manager.groups[req.group_id] = group
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
    elif not req.member_id and len(group.members) >= manager.config.max_size:
        fx.respond(
            request_id,
            join_error(
                E.GROUP_MAX_SIZE_REACHED,
                f"group {req.group_id!r} has {len(group.members)} members (group.max.size)",
            ),
        )
    elif not req.member_id:
        _new_member_join(manager, group, request_id, req, rng, now_ms, fx)
    else:
        _current_member_join(manager, group, request_id, req, now_ms, fx)
    if group.is_state(S.PREPARING_REBALANCE):
        try_complete_join(manager, group, now_ms, fx)
    manager.invariants()
    return fx


def _join_problem(manager: GroupMetadataManager, req: JoinGroupRequest) -> ApiError | None:
    problem = validate_group_status(manager, req.group_id)
    if problem is not None:
        return problem
    low, high = manager.config.min_session_timeout_ms, manager.config.max_session_timeout_ms
    if not low <= req.session_timeout_ms <= high:
        return ApiError(
            E.INVALID_SESSION_TIMEOUT,
            f"session.timeout.ms {req.session_timeout_ms} is outside "
            f"the broker's [group.min.session.timeout.ms {low}, group.max.session.timeout.ms {high}]",
        )
    if not req.protocol_type or not req.protocols:
        return ApiError(
            E.INCONSISTENT_GROUP_PROTOCOL, "JoinGroup needs a protocol type and at least one protocol"
        )
    group = manager.groups.get(req.group_id)
    if group is not None and group.is_state(S.DEAD):
        return ApiError(E.COORDINATOR_NOT_AVAILABLE, f"group {req.group_id!r} is being removed; retry")
    return None


def _new_member_id(rng: random.Random, client_id: str) -> str:
    return f"{client_id or 'member'}-{uuid.UUID(int=rng.getrandbits(128), version=4)}"


def _new_member_join(
    manager: GroupMetadataManager,
    group: GroupMetadata,
    rid: int,
    req: JoinGroupRequest,
    rng: random.Random,
    now_ms: int,
    fx: Effects,
) -> None:
    member_id = _new_member_id(rng, req.client_id)
    if req.group_instance_id is None and req.require_known_member_id:
        # KIP-394: the member must come back with this id; it counts as pending until then.
        group.pending_members[member_id] = now_ms + req.session_timeout_ms
        fx.respond(
            rid,
            join_error(E.MEMBER_ID_REQUIRED, "rejoin with the member id given in this response", member_id),
        )
    elif req.group_instance_id is not None and req.group_instance_id in group.static_members:
        _update_static_member(manager, group, rid, req, member_id, now_ms, fx)
    else:
        _add_member_and_rebalance(manager, group, rid, req, member_id, now_ms, fx)


def _current_member_join(
    manager: GroupMetadataManager,
    group: GroupMetadata,
    rid: int,
    req: JoinGroupRequest,
    now_ms: int,
    fx: Effects,
) -> None:
    member_id, instance_id = req.member_id, req.group_instance_id
    if member_id in group.pending_members and instance_id is None:
        _add_member_and_rebalance(manager, group, rid, req, member_id, now_ms, fx)
        return
    if instance_id is not None and group.is_static_member_fenced(instance_id, member_id):
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
                f"member {member_id!r} is not in group {group.group_id!r}; rejoin with an empty member id",
                member_id,
            ),
        )
        return
    if group.state in (S.EMPTY, S.DEAD):
        fx.respond(rid, join_error(E.UNKNOWN_MEMBER_ID, f"group {group.group_id!r} is {group.state.value}"))
    elif group.is_state(S.PREPARING_REBALANCE):
        _update_member_and_rebalance(manager, group, member, rid, req, now_ms, fx)
    elif group.is_state(S.COMPLETING_REBALANCE) and member.matches(req.protocols):
        # It lost the JoinGroup answer: the current generation again.
        fx.respond(rid, join_result(group, member, with_members=group.leader_id == member_id))
    elif group.is_state(S.STABLE) and group.leader_id != member_id and member.matches(req.protocols):
        fx.respond(rid, join_result(group, member, with_members=False))
    else:  # a changed subscription, or the leader asking for a rebalance (e.g. new partitions)
        _update_member_and_rebalance(manager, group, member, rid, req, now_ms, fx)


def _park_join(member: MemberMetadata, rid: int, fx: Effects) -> None:
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
    manager: GroupMetadataManager,
    group: GroupMetadata,
    rid: int,
    req: JoinGroupRequest,
    member_id: str,
    now_ms: int,
    fx: Effects,
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
        heartbeat_deadline_ms=now_ms + manager.config.new_member_join_timeout_ms,
    )
    if group.is_state(S.PREPARING_REBALANCE) and group.generation_id == 0:
        group.new_member_added = True  # a new group's initial delay may be extended
    group.add(member)
    maybe_prepare_rebalance(manager, group, now_ms, fx)


def _update_member_and_rebalance(
    manager: GroupMetadataManager,
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
    _park_join(member, rid, fx)
    maybe_prepare_rebalance(manager, group, now_ms, fx)


def _update_static_member(
    manager: GroupMetadataManager,
    group: GroupMetadata,
    rid: int,
    req: JoinGroupRequest,
    new_id: str,
    now_ms: int,
    fx: Effects,
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
            _store_static_takeover(manager, group, member, old_id, old, fx)
        else:
            prepare_rebalance(manager, group, now_ms, fx)
    elif group.is_state(S.COMPLETING_REBALANCE):
        # The leader may be assigning to the old id: rebalance so the new id gets its share.
        prepare_rebalance(manager, group, now_ms, fx)


def _store_static_takeover(
    manager: GroupMetadataManager,
    group: GroupMetadata,
    member: MemberMetadata,
    old_id: str,
    old: tuple,
    fx: Effects,
) -> None:
    new_id, generation = member.member_id, group.generation_id
    assignment = {m.member_id: m.assignment for m in group.members.values()}

    def done(result: ApiError, now_ms: int, fx: Effects) -> None:
        current = manager.groups.get(group.group_id)
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
            fx.respond(rid, join_error(code, f"storing the static member failed: {result.message}", new_id))
        elif group.is_state(S.STABLE):
            member.awaiting_join = None
            leader = group.leader_id == new_id  # KIP-814: the leader keeps the assignment
            fx.respond(rid, join_result(group, member, with_members=leader, skip_assignment=leader))

    manager.store_group(group, assignment, fx, done)
