"""A follower broker's fetch state towards one leader broker (Kafka's replica fetcher, without I/O).

Theory of operation (Kafka's ``AbstractFetcherThread`` with KIP-595's diverging epoch):

One ``ReplicaFetcher`` per (this broker, leader broker). It holds, for every partition this broker
follows on that leader, where the local log ends (``fetch_offset`` = the local log end offset and
``last_fetched_epoch`` = the local log's latest epoch) and the leader epoch it follows. It builds one
Fetch request for all ready partitions at a time (``build_request``); the driver sends it as a Kafka
Fetch and hands the answer to ``handle_response``, which turns each partition's answer into
an action for the driver:

- records: ``AppendRecords`` (append as follower, then ``Partition.on_local_append`` and
  ``Partition.update_follower_high_watermark`` with the leader's HW);
- a diverging epoch: ``TruncateTo`` the offset ``divergence.follower_truncation`` computes from the
  local leader-epoch cache — never the HW (KIP-101) — and fetch again;
- OFFSET_OUT_OF_RANGE below the leader's log start: ``TruncateFullyAndStartAt`` the leader's log start
  (retention deleted what this replica still needs); above the leader's end: ``TruncateTo`` it;
- FENCED_LEADER_EPOCH: the partition is dropped from this fetcher (``Fenced``) until the metadata log
  says who leads now; any other error: the partition backs off ``fetch_backoff_ms``.

A truncation must move the fetch position (offset or last fetched epoch). The leader answers a
diverging epoch at once, without parking the fetch, so a truncation that changes nothing would loop
as fast as the network allows. When the same truncation answer comes back for the same position as
the previous one, the action carries ``repeated`` >= 1 and the partition backs off
``fetch_backoff_ms``; the driver logs the first repeat of such a streak as a warning. Any other
answer, or a new position, ends the streak.

Partitions go into a request in rotation (Kafka's ``updateAndMoveToEnd``): one that got records
moves to the end. The leader gives a batch bigger than the size limits only to the first partition
with data (minOneMessage), so in a fixed order a partition behind a busy one would wait for good.

After applying an action the driver reports the new end of the local log with ``update_position``.
An answer is applied only if the partition's state is still the one the request was built from
(same fetch offset and leader epoch, not removed meanwhile): a late or duplicated response is
ignored, as in Kafka. Only one request is outstanding at a time.

The action types and ``LocalLogView`` are in ``broker.replica.follower_actions`` (the replica manager
applies them; the replica wing does not import this one).

Pure: no clocks or sockets; records are opaque to the fetcher. Not thread-safe: one driver owns it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from broker.replica import divergence
from broker.replica.divergence import EpochEndOffset
from broker.replica.follower_actions import (
    AppendRecords,
    BackedOff,
    Fenced,
    FetchAction,
    LocalLogView,
    TruncateFullyAndStartAt,
    TruncateTo,
)
from proto.errors import ErrorCode
from proto.kafka_types import TopicPartition


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 10 * 1024 * 1024
    partition_max_bytes: int = 1024 * 1024
    fetch_backoff_ms: int = 100


@dataclass(frozen=True, slots=True)
class PartitionFetchState:
    fetch_offset: int
    last_fetched_epoch: int | None
    current_leader_epoch: int
    delayed_until_ms: int = 0


@dataclass(frozen=True, slots=True)
class FetchRequestPartition:
    topic_partition: TopicPartition
    fetch_offset: int
    last_fetched_epoch: int | None
    current_leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequestPlan:
    request_id: int
    leader_id: int
    replica_id: int
    broker_epoch: int
    partitions: tuple[FetchRequestPartition, ...]


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of the leader's answer, decoded from its Fetch response."""

    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    diverging_epoch: EpochEndOffset | None = None
    records: object = b""  # opaque: whole batches from the request's fetch offset
    message: str = ""


class ReplicaFetcher:
    """Fetch state of the partitions this broker follows on ``leader_id`` (see the module docstring)."""

    def __init__(self, leader_id: int, replica_id: int, broker_epoch: int, config: FetcherConfig) -> None:
        self.leader_id = leader_id
        self.replica_id = replica_id
        self.broker_epoch = broker_epoch
        self.config = config
        self._states: dict[TopicPartition, PartitionFetchState] = {}
        # The last truncation answer per partition: (fetch offset, last fetched epoch, truncation
        # offset, reason) and how many times in a row it repeated (see the module docstring).
        self._truncations: dict[TopicPartition, tuple[tuple[object, ...], int]] = {}
        self._in_flight: FetchRequestPlan | None = None
        self._request_ids = itertools.count(1)

    # ---- partitions -------------------------------------------------------------------------------

    def add_partition(
        self,
        tp: TopicPartition,
        fetch_offset: int,
        last_fetched_epoch: int | None,
        current_leader_epoch: int,
    ) -> None:
        """Start (or restart, for a new leader epoch) fetching ``tp`` from the local log end."""
        self._states[tp] = PartitionFetchState(fetch_offset, last_fetched_epoch, current_leader_epoch)
        self._truncations.pop(tp, None)

    def remove_partition(self, tp: TopicPartition) -> None:
        self._states.pop(tp, None)
        self._truncations.pop(tp, None)

    def partitions(self) -> dict[TopicPartition, PartitionFetchState]:
        return dict(self._states)

    def update_position(self, tp: TopicPartition, log_end_offset: int, latest_epoch: int | None) -> None:
        """The driver appended or truncated: fetch from the new local log end next."""
        state = self._states.get(tp)
        if state is not None:  # built directly: dataclasses.replace costs more on this per-round path
            self._states[tp] = PartitionFetchState(
                log_end_offset, latest_epoch, state.current_leader_epoch, state.delayed_until_ms
            )

    # ---- requests ----------------------------------------------------------------------------------

    def build_request(self, now_ms: int) -> FetchRequestPlan | None:
        """The next Fetch for every ready partition; None while one is outstanding or none is ready."""
        if self._in_flight is not None:
            return None
        ready = tuple(
            FetchRequestPartition(tp, s.fetch_offset, s.last_fetched_epoch, s.current_leader_epoch)
            for tp, s in self._states.items()
            if s.delayed_until_ms <= now_ms
        )
        if not ready:
            return None
        for part in ready:
            state = self._states[part.topic_partition]
            if state.delayed_until_ms:
                self._states[part.topic_partition] = replace(state, delayed_until_ms=0)
        self._in_flight = FetchRequestPlan(
            next(self._request_ids), self.leader_id, self.replica_id, self.broker_epoch, ready
        )
        return self._in_flight

    def next_wake_ms(self) -> int | None:
        """When a backed-off partition becomes ready again (None: nothing is waiting on time)."""
        delays = [s.delayed_until_ms for s in self._states.values() if s.delayed_until_ms > 0]
        return min(delays) if delays else None

    def handle_request_failure(self, request_id: int, now_ms: int) -> None:
        """The request got no answer (network error, timeout): back off every partition in it."""
        plan = self._take_in_flight(request_id)
        if plan is None:
            return
        for part in plan.partitions:
            self._delay(part.topic_partition, now_ms)

    def handle_response(
        self,
        request_id: int,
        responses: Mapping[TopicPartition, FetchedPartition],
        local_view: Callable[[TopicPartition], LocalLogView],
        now_ms: int,
    ) -> list[FetchAction]:
        """Turn the leader's answer into actions; a stale or duplicated answer yields none."""
        plan = self._take_in_flight(request_id)
        if plan is None:
            return []
        actions: list[FetchAction] = []
        for part in plan.partitions:
            tp = part.topic_partition
            state, fetched = self._states.get(tp), responses.get(tp)
            if fetched is None or not self._still_current(state, part):
                continue
            action = self._partition_action(tp, fetched, local_view, now_ms)
            if isinstance(action, AppendRecords) and action.records and tp in self._states:
                self._states[tp] = self._states.pop(tp)  # to the end of the rotation
            if isinstance(action, TruncateTo):
                action = self._note_truncation(part, action, now_ms)
            else:
                self._truncations.pop(tp, None)
            actions.append(action)
        return actions

    def _note_truncation(self, part: FetchRequestPartition, action: TruncateTo, now_ms: int) -> TruncateTo:
        """The same truncation answer to the same position as last time is no progress: back off."""
        tp = part.topic_partition
        key = (part.fetch_offset, part.last_fetched_epoch, action.offset, action.reason)
        previous = self._truncations.get(tp)
        repeated = previous[1] + 1 if previous is not None and previous[0] == key else 0
        self._truncations[tp] = (key, repeated)
        if repeated == 0:
            return action
        self._delay(tp, now_ms)
        return replace(action, repeated=repeated)

    def _take_in_flight(self, request_id: int) -> FetchRequestPlan | None:
        plan = self._in_flight
        if plan is None or plan.request_id != request_id:
            return None
        self._in_flight = None
        return plan

    @staticmethod
    def _still_current(state: PartitionFetchState | None, part: FetchRequestPartition) -> bool:
        return (
            state is not None
            and state.fetch_offset == part.fetch_offset
            and state.current_leader_epoch == part.current_leader_epoch
        )

    def _partition_action(
        self,
        tp: TopicPartition,
        fetched: FetchedPartition,
        local_view: Callable[[TopicPartition], LocalLogView],
        now_ms: int,
    ) -> FetchAction:
        if fetched.error == ErrorCode.NONE and fetched.diverging_epoch is not None:
            local = local_view(tp)
            truncation = divergence.follower_truncation(
                local.epoch_entries, local.log_end_offset, local.high_watermark, fetched.diverging_epoch
            )
            epoch_end = fetched.diverging_epoch
            return TruncateTo(
                tp,
                truncation.offset,
                f"diverging epoch {epoch_end.leader_epoch} ends at {epoch_end.end_offset}",
            )
        if fetched.error == ErrorCode.NONE:
            return AppendRecords(tp, fetched.records, fetched.high_watermark, fetched.log_start_offset)
        if fetched.error == ErrorCode.OFFSET_OUT_OF_RANGE:
            return self._out_of_range(tp, fetched)
        if fetched.error == ErrorCode.FENCED_LEADER_EPOCH:
            self._states.pop(tp, None)
            return Fenced(tp, fetched.message)
        self._delay(tp, now_ms)
        return BackedOff(tp, fetched.error, fetched.message)

    def _out_of_range(self, tp: TopicPartition, fetched: FetchedPartition) -> FetchAction:
        state = self._states[tp]
        if state.fetch_offset < fetched.log_start_offset:
            return TruncateFullyAndStartAt(tp, fetched.log_start_offset)
        # Ahead of the leader's log end with no epoch to compare: keep only what the leader has.
        return TruncateTo(tp, fetched.log_end_offset, "fetch offset beyond the leader's log end offset")

    def back_off(self, tp: TopicPartition, now_ms: int) -> None:
        """The driver could not apply the leader's answer for ``tp`` (e.g. a storage error): fetch it
        again only after ``fetch_backoff_ms`` — the leader would answer the same at once, and a hot
        retry loop burns both brokers' CPU (Kafka's delayPartitions)."""
        self._delay(tp, now_ms)

    def _delay(self, tp: TopicPartition, now_ms: int) -> None:
        state = self._states.get(tp)
        if state is not None:
            self._states[tp] = replace(state, delayed_until_ms=now_ms + self.config.fetch_backoff_ms)

    def invariants(self) -> None:
        for tp, state in self._states.items():
            assert state.fetch_offset >= 0, f"{tp}: fetch offset {state.fetch_offset}"
            assert state.current_leader_epoch >= 0, f"{tp}: leader epoch {state.current_leader_epoch}"
