"""The group requests outside the rebalance protocol, as functions over a ``GroupMetadataManager``:
OffsetFetch, ListGroups, DescribeGroups, DeleteGroups and OffsetDelete (KIP-496), and Kafka's
``validateGroupStatus`` that every group request passes first (is the group's offsets partition led
and loaded here). ``broker.group.coordinator.GroupCoordinator`` answers these requests by calling
them with its ``group_manager``; the rebalance protocol is ``broker.group.join_group`` (JoinGroup),
``broker.group.membership`` (SyncGroup, Heartbeat, LeaveGroup, the member checks OffsetCommit shares)
and ``broker.group.rebalance`` (the group's state machine and timers).

No I/O, no clock, no threads.
"""

from __future__ import annotations

from broker.group.metadata import (
    CONSUMER_PROTOCOL_TYPE,
    GroupMetadataRecord,
    GroupState,
    OffsetCommitRecord,
    OffsetsRecord,
)
from broker.group.metadata_manager import APPEND_ERRORS, Effects, GroupMetadataManager
from broker.group.requests import (
    DeletableGroupResult,
    DeleteGroupsResponse,
    DescribedGroup,
    DescribedGroupMember,
    ListedGroup,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from proto.errors import OK, ApiError, ErrorCode

E = ErrorCode
S = GroupState


def validate_group_status(manager: GroupMetadataManager, group_id: str) -> ApiError | None:
    """Kafka's ``validateGroupStatus``: the group's offsets partition is led and loaded here."""
    if not group_id:
        return ApiError(E.INVALID_GROUP_ID, "the group id must not be empty")
    if manager.partition_count is None:
        return ApiError(E.NOT_COORDINATOR, f"group {group_id!r}: this broker leads no offsets partition")
    partition = manager.partition_of(group_id)
    if partition in manager.loading:
        return ApiError(
            E.COORDINATOR_LOAD_IN_PROGRESS,
            f"group {group_id!r}: offsets partition {partition} is loading; retry",
        )
    if partition not in manager.loaded:
        return ApiError(
            E.NOT_COORDINATOR,
            f"group {group_id!r} (offsets partition {partition}) is "
            "coordinated by another broker; find the coordinator again",
        )
    return None


def handle_delete_groups(
    manager: GroupMetadataManager, request_id: int, group_ids: tuple[str, ...], now_ms: int
) -> Effects:
    """Empty groups become Dead and are forgotten; tombstones for the group and its offsets are
    written, and the answer waits for them."""
    fx = Effects()
    results: dict[str, ApiError] = {}
    waiting: set[str] = set()

    def finish(group_id: str, outcome: ApiError, fx: Effects) -> None:
        results[group_id] = outcome
        waiting.discard(group_id)
        if not waiting and len(results) == len(group_ids):
            fx.respond(
                request_id,
                DeleteGroupsResponse(tuple(DeletableGroupResult(g, results[g]) for g in group_ids)),
            )

    for group_id in dict.fromkeys(group_ids):
        outcome = validate_group_status(manager, group_id)
        group = manager.groups.get(group_id)
        if outcome is None and (group is None or group.is_state(S.DEAD)):
            outcome = ApiError(E.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        elif outcome is None and group is not None and not group.is_state(S.EMPTY):
            outcome = ApiError(
                E.NON_EMPTY_GROUP,
                f"group {group_id!r} has {len(group.members)} members "
                f"({group.state.value}); stop its consumers first",
            )
        if outcome is not None or group is None:
            results[group_id] = outcome or OK
            continue
        waiting.add(group_id)
        group.transition_to(S.DEAD, now_ms)
        del manager.groups[group_id]
        tombstones: tuple[OffsetsRecord, ...] = (
            *(OffsetCommitRecord(group_id, t, p, None) for t, p in sorted(group.offsets)),
            GroupMetadataRecord(group_id, None),
        )

        def done(result: ApiError, now: int, fx: Effects, group_id: str = group_id) -> None:
            code = E(APPEND_ERRORS.get(E(result.code), E(result.code)))
            finish(group_id, OK if code == E.NONE else ApiError(code, result.message), fx)

        manager.append_for_group(group_id, tombstones, fx, done)
    if not waiting:
        fx.respond(
            request_id,
            DeleteGroupsResponse(
                tuple(DeletableGroupResult(g, results[g]) for g in dict.fromkeys(group_ids))
            ),
        )
    manager.invariants()
    return fx


def handle_offset_delete(
    manager: GroupMetadataManager,
    request_id: int,
    group_id: str,
    partitions: tuple[tuple[str, int], ...],
    now_ms: int,
) -> Effects:
    """OffsetDelete (KIP-496): the committed offsets of ``partitions`` are removed (tombstones,
    answered once written), except those of topics a member of a non-empty consumer group is
    subscribed to (GROUP_SUBSCRIBED_TO_TOPIC). A non-empty group of another protocol type is
    NON_EMPTY_GROUP as a whole."""
    fx = Effects()
    problem = validate_group_status(manager, group_id)
    group = manager.groups.get(group_id)
    if problem is None and (group is None or group.is_state(S.DEAD)):
        problem = ApiError(E.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
    subscribed: frozenset[str] = frozenset()
    if problem is None and group is not None and not group.is_state(S.EMPTY):
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            problem = ApiError(
                E.NON_EMPTY_GROUP,
                f"group {group_id!r} has {len(group.members)} members of protocol type "
                f"{group.protocol_type!r}; stop them first",
            )
        else:
            subscribed = group.subscribed_topics()
    if problem is not None or group is None:
        fx.respond(request_id, OffsetDeleteResponse(problem or OK, {}))
        return fx
    results: dict[tuple[str, int], ApiError] = {}
    for tp in dict.fromkeys(partitions):
        if tp[0] in subscribed:
            results[tp] = ApiError(
                E.GROUP_SUBSCRIBED_TO_TOPIC,
                f"a member of group {group_id!r} is subscribed to topic {tp[0]!r}; unsubscribe first",
            )
        else:
            results[tp] = OK
    deleted = [tp for tp, outcome in results.items() if outcome is OK and tp in group.offsets]
    if not deleted:
        fx.respond(request_id, OffsetDeleteResponse(OK, results))
        return fx
    tombstones = tuple(OffsetCommitRecord(group_id, t, p, None) for t, p in deleted)

    def done(result: ApiError, now: int, fx: Effects) -> None:
        code = E(APPEND_ERRORS.get(E(result.code), E(result.code)))
        if code == E.NONE and manager.groups.get(group_id) is group:
            for tp in deleted:
                group.offsets.pop(tp, None)
        outcome = OK if code == E.NONE else ApiError(code, f"writing the tombstones failed: {result.message}")
        fx.respond(request_id, OffsetDeleteResponse(OK, {**results, **dict.fromkeys(deleted, outcome)}))

    manager.append_for_group(group_id, tombstones, fx, done)
    return fx


# ---- reads: OffsetFetch, ListGroups, DescribeGroups -------------------------------------------------


def handle_offset_fetch(manager: GroupMetadataManager, req: OffsetFetchRequest) -> OffsetFetchResponse:
    problem = validate_group_status(manager, req.group_id)
    if problem is not None:
        return OffsetFetchResponse(problem, {})
    return OffsetFetchResponse(OK, manager.get_offsets(req.group_id, req.partitions))


def handle_list_groups(manager: GroupMetadataManager, states_filter: tuple[str, ...]) -> list[ListedGroup]:
    listed = []
    # only loaded partitions' groups are in ``groups`` (invariants)
    for group_id, group in sorted(manager.groups.items()):
        if states_filter and group.state.value not in states_filter:
            continue
        listed.append(ListedGroup(group_id, group.protocol_type or "", group.state.value))
    return listed


def handle_describe_group(manager: GroupMetadataManager, group_id: str) -> DescribedGroup:
    problem = validate_group_status(manager, group_id)
    if problem is not None:
        return DescribedGroup(problem, group_id)
    group = manager.groups.get(group_id)
    if group is None:
        return DescribedGroup(OK, group_id, S.DEAD.value)
    stable = group.is_state(S.STABLE)  # Kafka shows metadata and assignments only when Stable
    members = tuple(
        DescribedGroupMember(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.metadata_for(group.protocol_name) if stable and group.protocol_name else b"",
            m.assignment if stable else b"",
        )
        for m in group.members.values()
    )
    return DescribedGroup(
        OK,
        group_id,
        group.state.value,
        group.protocol_type or "",
        (group.protocol_name or "") if stable else "",
        group.generation_id,
        members,
    )
