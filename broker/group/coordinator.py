"""The group coordinator: Kafka's classic consumer-group protocol as a sans-I/O core.

Theory of operation
-------------------
A broker coordinates the groups whose ``__consumer_offsets`` partition (``partition_for``) it leads.
The driver (``broker.group.driver``) feeds this object decoded requests, each with a request id and
``now_ms`` (a monotonic clock), and carries out the ``Effects`` it returns, in order:

- ``appends``: records for ``__consumer_offsets`` partitions. The driver appends each with acks=all
  and reports the outcome with ``complete_append(append_id, outcome, now_ms)``; OffsetCommit,
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
led here, their loading, their records and the cleanup of expired offsets. This class is the entry
point the driver calls; the protocol itself is functions over the manager, one module each:

- ``broker.group.join_group``: JoinGroup (member ids, KIP-394, static members' takeover);
- ``broker.group.membership``: SyncGroup, Heartbeat, LeaveGroup and the member fencing checks;
- ``broker.group.rebalance``: the group's state machine they drive (the join and sync phases, the
  generation, propagating the assignment, member removal) and its timers (``tick``);
- ``broker.group.admin``: the requests outside the rebalance protocol (OffsetFetch, ListGroups,
  DescribeGroups, DeleteGroups, OffsetDelete) and ``validate_group_status`` (is the group's offsets
  partition led and loaded here), which every request passes first.

What stays here: OffsetCommit (the member checks, then the manager stores the offsets), the timers'
composition (group deadlines plus the offset-expiration check), and leadership of an offsets
partition: ``on_election`` (the manager then loads the partition: the driver replays the log into
``replay`` and ends with ``complete_loading``) and ``on_resignation`` (the manager forgets the
partition's groups; their parked requests answer NOT_COORDINATOR).

No I/O, no clock, no threads; member ids come from the injected ``random.Random``.
"""

from __future__ import annotations

import random

from broker.group import admin, join_group, membership, rebalance
from broker.group.admin import validate_group_status
from broker.group.metadata import GroupMetadata, GroupState, OffsetsRecord
from broker.group.metadata_manager import Append, Effects, GroupConfig, GroupMetadataManager
from broker.group.rebalance import join_error, sync_error
from broker.group.requests import (
    DescribedGroup,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
)
from proto.errors import OK, ApiError, ErrorCode

E = ErrorCode
S = GroupState
__all__ = ["Append", "Effects", "GroupConfig", "GroupCoordinator"]


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

    def complete_append(self, append_id: int, outcome: ApiError, now_ms: int) -> Effects:
        """The driver's answer to an ``Append`` (``OK`` once the HW passed it)."""
        return self.group_manager.complete_append(append_id, outcome, now_ms)

    def invariants(self) -> None:
        self.group_manager.invariants()

    # ---- the rebalance protocol (broker.group.join_group, broker.group.membership) ----------------

    def handle_join_group(self, request_id: int, req: JoinGroupRequest, now_ms: int) -> Effects:
        return join_group.handle_join_group(self.group_manager, self.rng, request_id, req, now_ms)

    def handle_sync_group(self, request_id: int, req: SyncGroupRequest, now_ms: int) -> Effects:
        return membership.handle_sync_group(self.group_manager, request_id, req, now_ms)

    def handle_heartbeat(self, req: HeartbeatRequest, now_ms: int) -> tuple[HeartbeatResponse, Effects]:
        return membership.handle_heartbeat(self.group_manager, req, now_ms)

    def handle_leave_group(self, req: LeaveGroupRequest, now_ms: int) -> tuple[LeaveGroupResponse, Effects]:
        return membership.handle_leave_group(self.group_manager, req, now_ms)

    # ---- timers -------------------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        deadlines = rebalance.group_deadlines_ms(self.group_manager)
        check_ms = self.group_manager.offsets_check_deadline_ms
        if check_ms is not None and self.group_manager.groups:  # nothing to expire otherwise
            deadlines.append(check_ms)
        return min(deadlines, default=None)

    def tick(self, now_ms: int) -> Effects:
        """Expire sessions, pending members, join and sync phases whose deadline passed; then, when
        ``offsets.retention.check.interval.ms`` is due, expired offsets (``cleanup_expired_offsets``)."""
        fx = rebalance.tick_groups(self.group_manager, now_ms)
        check_ms = self.group_manager.offsets_check_deadline_ms
        if check_ms is not None and check_ms <= now_ms:
            expired = self.group_manager.cleanup_expired_offsets(now_ms)
            fx.responses.extend(expired.responses)
            fx.appends.extend(expired.appends)
        return fx

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
            problem = ApiError(
                E.ILLEGAL_GENERATION,
                f"group {req.group_id!r} does not exist; generation {req.generation_id} is stale",
            )
        else:
            problem = membership.member_problem(
                group, req.member_id, req.group_instance_id, req.generation_id
            )
            if problem is None and group.is_state(S.COMPLETING_REBALANCE):
                problem = ApiError(
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
