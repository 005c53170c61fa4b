"""Kafka's ``GroupMetadataManager`` as a sans-I/O core: the groups of the ``__consumer_offsets``
partitions this broker leads, their loading and unloading, what is stored in the log, and the cleanup
of expired offsets. The group protocol itself is ``broker.group.coordinator.GroupCoordinator``, which
holds one of these (``group_manager``) and validates requests before calling it, as Kafka's
``GroupCoordinator`` holds its ``GroupMetadataManager``.

- ``begin_loading`` / ``replay`` / ``complete_loading`` (this broker became leader of a partition:
  its log is replayed in order into a staging map of that partition, apart from ``groups``; as in
  Kafka's ``doLoadGroupsAndOffsets`` the loaded groups join ``groups`` only in ``complete_loading``,
  so until then timers, requests (COORDINATOR_LOAD_IN_PROGRESS), ListGroups and DescribeGroups do not
  see them) and ``remove_groups_for_partition`` (leadership moved: the partition's groups, loaded or
  still loading, are forgotten and handed back, so that the coordinator answers their parked
  requests);
- appends: ``append_for_group`` returns an ``Append`` in the ``Effects``; the driver appends it with
  acks=all and reports back with ``complete_append``, which runs the continuation given with it
  (``store_group`` after a rebalance, ``store_offsets`` after a commit, tombstones after a delete);
- reads: ``get_offsets`` (OffsetFetch), committed offsets for the lag gauges;
- offset expiration (``cleanup_expired_offsets``, KIP-211, Kafka's ``cleanupGroupMetadata``): every
  ``offsets.retention.check.interval.ms`` (``offsets_check_deadline_ms``, run by the coordinator's
  ``tick``) the offsets past ``offsets.retention.minutes`` are removed and tombstoned (rules:
  ``expired_offsets``); ``cleanup_deleted_topics`` removes the offsets of deleted topics at once. An
  Empty group left without offsets is removed (a GroupMetadata tombstone). Times are wall-clock
  milliseconds: they are stored in the records (commit and state timestamps) and compared after a
  restart or a coordinator move, as in Kafka.

No I/O, no clock, no threads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from broker.group.metadata import (
    CONSUMER_PROTOCOL_TYPE,
    NO_GENERATION,
    GroupMetadata,
    GroupMetadataRecord,
    GroupState,
    MemberMetadata,
    OffsetAndMetadata,
    OffsetCommitRecord,
    OffsetsRecord,
    partition_for,
)
from broker.group.requests import FetchedOffset, GroupResponse, OffsetCommitRequest, OffsetCommitResponse
from proto.errors import OK, ApiError, ErrorCode
from proto.kafka_types import NO_OFFSET

E = ErrorCode
S = GroupState
# How an append error becomes a coordinator error (Kafka's GroupMetadataManager.storeGroup/storeOffsets).
APPEND_ERRORS = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.INVALID_FETCH_SIZE: E.UNKNOWN_SERVER_ERROR,
}
OFFSET_APPEND_ERRORS = {
    **APPEND_ERRORS,
    E.REQUEST_TIMED_OUT: E.REQUEST_TIMED_OUT,
    E.MESSAGE_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.RECORD_LIST_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.INVALID_FETCH_SIZE: E.INVALID_COMMIT_OFFSET_SIZE,
}


OFFSETS_RETENTION_MS = 7 * 24 * 3600 * 1000  # offsets.retention.minutes: Kafka's default, 7 days
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000  # offsets.retention.check.interval.ms: Kafka's, 10 min


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's broker settings ``group.*``, ``offset.metadata.max.bytes`` and ``offsets.retention.*``."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    new_member_join_timeout_ms: int = 300_000
    max_size: int = 2**31 - 1
    offset_metadata_max_bytes: int = 4_096
    offsets_retention_ms: int = OFFSETS_RETENTION_MS
    offsets_retention_check_interval_ms: int = OFFSETS_RETENTION_CHECK_INTERVAL_MS


@dataclass(frozen=True, slots=True)
class Append:
    append_id: int
    partition: int  # of __consumer_offsets
    records: tuple[OffsetsRecord, ...]


@dataclass(slots=True)
class Effects:
    responses: list[tuple[int, GroupResponse]] = field(default_factory=list)
    appends: list[Append] = field(default_factory=list)

    def respond(self, request_id: int, response: GroupResponse) -> None:
        self.responses.append((request_id, response))


AppendDone = Callable[[ApiError, int, Effects], None]


def expired_offsets(group: GroupMetadata, now_ms: int, retention_ms: int) -> list[tuple[str, int]]:
    """The partitions whose offsets expire at ``now_ms`` (Kafka's ``GroupMetadata.removeExpiredOffsets``,
    KIP-211), never one with a commit in flight:

    - a group with a protocol type (it had members) that is Empty: all of them, once it has been
      Empty for ``retention_ms`` (its state timestamp; a group loaded without one, 0, counts from
      each commit, as Kafka does for records without it);
    - a group without a protocol type (only standalone commits, generation -1): each offset
      ``retention_ms`` after its commit;
    - a Stable consumer group whose members' subscriptions decode (KIP-496): the offsets of topics
      none of them subscribes to, each ``retention_ms`` after its commit;
    - any other group with members: none.
    """
    if group.is_state(S.STABLE) and group.protocol_type == CONSUMER_PROTOCOL_TYPE:
        subscribed = group.known_subscribed_topics()
        if subscribed is None:
            return []
        return [
            tp
            for tp, value in group.offsets.items()
            if tp[0] not in subscribed
            and tp not in group.pending_commits
            and now_ms - value.commit_timestamp_ms >= retention_ms
        ]
    if group.protocol_type is not None and not group.is_state(S.EMPTY):
        return []

    def base_ms(value: OffsetAndMetadata) -> int:
        if group.protocol_type is not None and group.state_timestamp_ms > 0:
            return group.state_timestamp_ms
        return value.commit_timestamp_ms

    return [
        tp
        for tp, value in group.offsets.items()
        if tp not in group.pending_commits and now_ms - base_ms(value) >= retention_ms
    ]


def _ignore_outcome(result: ApiError, now_ms: int, fx: Effects) -> None:
    """Tombstones of expired offsets answer nobody (Kafka logs and goes on)."""


class GroupMetadataManager:
    """The groups of the offsets partitions led here, and their records (see the module docstring)."""

    def __init__(self, config: GroupConfig) -> None:
        self.config = config
        self.partition_count: int | None = None
        self.groups: dict[str, GroupMetadata] = {}
        self.loaded: set[int] = set()
        self.loading: set[int] = set()
        # The groups replayed so far per partition still loading; invisible until complete_loading.
        self._loading_groups: dict[int, dict[str, GroupMetadata]] = {}
        self._appends: dict[int, AppendDone] = {}
        self._next_append_id = 0
        self.offsets_check_deadline_ms: int | None = None  # set when the first partition is loaded

    # ---- partitions: load / unload ---------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        assert self.partition_count is not None, "the offsets topic's partition count is not known yet"
        return partition_for(group_id, self.partition_count)

    def begin_loading(self, partition: int, partition_count: int) -> None:
        """This broker became leader of ``partition`` (not loaded or loading now): requests wait until
        ``complete_loading``."""
        assert partition not in self.loaded | self.loading, f"partition {partition} is loaded already"
        self.partition_count = partition_count
        self.loading.add(partition)
        self._loading_groups[partition] = {}

    def replay(self, partition: int, record: OffsetsRecord) -> None:
        """Apply one record of the partition's log, in log order (a null value is a tombstone), to
        the partition's staging map (``groups`` is untouched until ``complete_loading``)."""
        assert partition in self.loading, f"replay into partition {partition} that is not loading"
        assert self.partition_of(record.group) == partition, (
            f"group {record.group!r} belongs to offsets partition {self.partition_of(record.group)}, "
            f"not {partition}"
        )
        staged = self._loading_groups[partition]
        group = staged.get(record.group)
        if group is None:
            group = staged[record.group] = GroupMetadata(record.group)
        if isinstance(record, OffsetCommitRecord):
            if record.value is None:
                group.offsets.pop((record.topic, record.partition), None)
            else:
                group.offsets[(record.topic, record.partition)] = record.value
            return
        fresh = GroupMetadata(record.group, offsets=group.offsets)
        value = record.value
        if value is not None:
            fresh.generation_id, fresh.protocol_type = value.generation, value.protocol_type or None
            fresh.protocol_name, fresh.state_timestamp_ms = (
                value.protocol or None,
                value.current_state_timestamp_ms,
            )
            for m in value.members:
                member = MemberMetadata(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    value.protocol_type,
                    ((value.protocol, m.subscription),),
                    m.assignment,
                )
                fresh.add(member)
            fresh.leader_id = value.leader if value.leader in fresh.members else fresh.leader_id
            fresh.state = S.STABLE if fresh.members else S.EMPTY
        staged[record.group] = fresh

    def complete_loading(self, partition: int, now_ms: int) -> None:
        """The staged groups join ``groups``: those with members are Stable (their members get a
        fresh session from ``now_ms``), others Empty; groups with only tombstones left are dropped."""
        assert partition in self.loading, f"partition {partition} is not loading"
        self.loading.discard(partition)
        self.loaded.add(partition)
        for group_id, group in self._loading_groups.pop(partition).items():
            if not group.members and not group.offsets and group.protocol_type is None:
                continue  # only tombstones were left
            assert group_id not in self.groups, f"group {group_id!r} exists while its partition loads"
            group.state = S.STABLE if group.members else S.EMPTY
            for member in group.members.values():
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            self.groups[group_id] = group
        if self.offsets_check_deadline_ms is None:
            self.offsets_check_deadline_ms = now_ms + self.config.offsets_retention_check_interval_ms
        self.invariants()

    def remove_groups_for_partition(self, partition: int) -> list[GroupMetadata]:
        """Leadership moved away: forget the partition's groups (a load in progress is discarded) and
        return those that were loaded, now Dead, for the coordinator to answer their parked requests."""
        self.loaded.discard(partition)
        self.loading.discard(partition)
        self._loading_groups.pop(partition, None)
        removed = [g for group_id, g in self.groups.items() if self.partition_of(group_id) == partition]
        for group in removed:
            group.state = S.DEAD
            del self.groups[group.group_id]
        return removed

    # ---- appends ----------------------------------------------------------------------------------

    def append_for_group(
        self, group_id: str, records: tuple[OffsetsRecord, ...], fx: Effects, done: AppendDone
    ) -> None:
        self._next_append_id += 1
        self._appends[self._next_append_id] = done
        fx.appends.append(Append(self._next_append_id, self.partition_of(group_id), records))

    def complete_append(self, append_id: int, outcome: ApiError, now_ms: int) -> Effects:
        """The driver's answer to ``Append`` (``OK`` once the HW passed it)."""
        fx = Effects()
        done = self._appends.pop(append_id)
        done(OK if outcome.ok else outcome, now_ms, fx)
        self.invariants()
        return fx

    def store_group(
        self, group: GroupMetadata, assignment: dict[str, bytes], fx: Effects, done: AppendDone
    ) -> None:
        record = GroupMetadataRecord(group.group_id, group.snapshot(assignment))
        self.append_for_group(group.group_id, (record,), fx, done)

    def store_offsets(
        self, group: GroupMetadata, rid: int, req: OffsetCommitRequest, timestamp_ms: int, fx: Effects
    ) -> None:
        results: dict[tuple[str, int], ApiError] = {}
        offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        limit = self.config.offset_metadata_max_bytes
        for p in req.partitions:
            if len(p.committed_metadata.encode()) > limit:
                results[(p.topic, p.partition)] = ApiError(
                    E.OFFSET_METADATA_TOO_LARGE,
                    f"{p.topic}-{p.partition}: metadata is longer than offset.metadata.max.bytes {limit}",
                )
            else:
                offsets[(p.topic, p.partition)] = OffsetAndMetadata(
                    p.committed_offset, p.committed_leader_epoch, p.committed_metadata, timestamp_ms
                )
        if not offsets:
            fx.respond(rid, OffsetCommitResponse(OK, results))
            return
        records = tuple(OffsetCommitRecord(group.group_id, t, p, value) for (t, p), value in offsets.items())
        group.pending_commits.update(offsets.keys())

        def done(result: ApiError, now_ms: int, fx: Effects) -> None:
            group.pending_commits.subtract(offsets.keys())
            group.pending_commits = +group.pending_commits  # drop the zero counts
            if result.code == E.NONE and self.groups.get(group.group_id) is group:
                group.offsets.update(offsets)
            code = E(OFFSET_APPEND_ERRORS.get(E(result.code), E(result.code)))
            outcome = (
                OK if code == E.NONE else ApiError(code, f"storing the offsets failed: {result.message}")
            )
            fx.respond(rid, OffsetCommitResponse(OK, {**results, **dict.fromkeys(offsets, outcome)}))

        self.append_for_group(group.group_id, records, fx, done)

    def get_offsets(
        self, group_id: str, partitions: tuple[tuple[str, int], ...] | None
    ) -> dict[tuple[str, int], FetchedOffset]:
        """The committed offsets of ``partitions`` (None: every committed one) of a group coordinated
        here; a partition without one gets ``FetchedOffset()`` (offset -1)."""
        group = self.groups.get(group_id)
        committed = group.offsets if group is not None else {}
        result = {}
        for tp in sorted(committed) if partitions is None else partitions:
            value = committed.get(tp)
            if value is None:
                result[tp] = FetchedOffset()
            else:
                result[tp] = FetchedOffset(value.offset, value.leader_epoch, value.metadata)
        return result

    # ---- offset expiration (KIP-211) and deleted topics ----------------------------------------------

    def cleanup_expired_offsets(self, now_ms: int) -> Effects:
        """Remove and tombstone the offsets past ``offsets.retention.minutes`` (module docstring)."""
        fx = Effects()
        retention_ms = self.config.offsets_retention_ms
        for group in list(self.groups.values()):
            self._remove_offsets(group, expired_offsets(group, now_ms, retention_ms), now_ms, fx)
        self.offsets_check_deadline_ms = now_ms + self.config.offsets_retention_check_interval_ms
        self.invariants()
        return fx

    def cleanup_deleted_topics(self, topics: frozenset[str], now_ms: int) -> Effects:
        """The topics are gone from the metadata: their committed offsets go too, in every group
        (Kafka's ``onPartitionsDeleted``), except commits still being appended."""
        fx = Effects()
        for group in list(self.groups.values()):
            gone = [tp for tp in group.offsets if tp[0] in topics and tp not in group.pending_commits]
            self._remove_offsets(group, gone, now_ms, fx)
        self.invariants()
        return fx

    def _remove_offsets(
        self, group: GroupMetadata, partitions: list[tuple[str, int]], now_ms: int, fx: Effects
    ) -> None:
        """Forget ``partitions``' offsets and tombstone them; an Empty group left with no offsets (no
        commit in flight, no member about to join) is removed with a GroupMetadata tombstone
        (``cleanupGroupMetadata``).
        Tombstones are appended like any record; a failed append is not retried (Kafka neither):
        the offsets reappear only if the partition is loaded again, and expire again."""
        for tp in partitions:
            del group.offsets[tp]
        records: list[OffsetsRecord] = [
            OffsetCommitRecord(group.group_id, t, p, None) for t, p in sorted(partitions)
        ]
        # (a member between its two JoinGroups, KIP-394, is pending in an Empty group: keep it)
        if group.is_state(S.EMPTY) and not (group.offsets or group.pending_commits or group.pending_members):
            group.transition_to(S.DEAD, now_ms)
            del self.groups[group.group_id]
            records.append(GroupMetadataRecord(group.group_id, None))
        if records:
            self.append_for_group(group.group_id, tuple(records), fx, _ignore_outcome)

    # ---- lag (metrics) --------------------------------------------------------------------------------

    def committed_offsets(self) -> dict[str, dict[tuple[str, int], int]]:
        """Every coordinated group's committed offsets, for lag gauges."""
        return {
            group_id: {tp: value.offset for tp, value in group.offsets.items() if value.offset != NO_OFFSET}
            for group_id, group in self.groups.items()
        }

    def invariants(self) -> None:
        parked: list[int] = []
        for group_id, group in self.groups.items():
            group.invariants()
            assert self.partition_of(group_id) in self.loaded, (
                f"group {group_id} lives in partition {self.partition_of(group_id)}, not loaded here"
            )
            assert group.generation_id >= 0 or group.generation_id == NO_GENERATION
            for m in group.members.values():
                parked.extend(r for r in (m.awaiting_join, m.awaiting_sync) if r is not None)
        assert len(parked) == len(set(parked)), f"a request is parked twice: {sorted(parked)}"
        assert set(self._loading_groups) == self.loading, (
            f"staging maps {sorted(self._loading_groups)} != loading partitions {sorted(self.loading)}"
        )
