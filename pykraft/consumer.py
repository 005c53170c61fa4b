"""``Consumer``: read assigned partitions from their leaders, following leader changes and truncation.

    with Consumer("127.0.0.1:9092", auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("orders", 0)])
        for record in consumer.poll(timeout_ms=1000):
            print(record.offset, record.key, record.value)

Theory of operation (Kafka's ``KafkaConsumer`` + ``Fetcher`` with manual assignment, no group):

- Every assigned partition has a **position** (the next offset to return) and the epoch of the last
  batch returned (``last_fetched_epoch``). A partition without a position gets one from
  ``auto_offset_reset`` via ListOffsets (``earliest`` = log start offset, ``latest`` = HW), or from
  ``seek`` / ``seek_to_beginning`` / ``seek_to_end``.
- ``poll`` keeps at most one Fetch in flight per leader broker, carrying every partition that broker
  leads (long-poll: ``fetch_max_wait_ms``, ``fetch_min_bytes``), and returns up to
  ``max_poll_records`` records; the rest stay buffered for the next poll. Fetches for a partition
  whose position changed (``seek``) while they were in flight are discarded.
- **Leader changes**: NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH use the broker's leader hint
  (KIP-951) or refresh metadata; UNKNOWN_LEADER_EPOCH (the broker is behind us) retries after
  ``retry_backoff_ms``; an unreachable broker triggers a metadata refresh.
- **Truncation** (KIP-320): each fetch carries the partition's current leader epoch (fencing) and
  ``last_fetched_epoch``. When the leader's log ended that epoch before our position it answers with
  a *diverging epoch* ``(epoch, end_offset)``: the records we returned from ``end_offset`` on were
  never committed and are gone. The consumer moves its position back to ``end_offset`` and records
  a ``LogTruncation`` in ``truncations`` (or raises ``LogTruncationError`` when
  ``auto_offset_reset="none"``, Kafka's behaviour without a reset policy).
- **Out of range**: a position below the log start offset is reset per ``auto_offset_reset``. A
  position above the HW but not above the largest HW we have seen for the partition is *not* reset:
  those offsets were committed, so a new leader whose HW still lags will reach them — the consumer
  waits (resetting to ``earliest`` there would re-deliver the whole log).

**Consumer groups** (``group_id``; Kafka's ``ConsumerCoordinator``): ``subscribe`` joins the group
through ``pykraft.group_client`` (state machine in ``pykraft.consumer_coordinator``, assignors in
``pykraft.assignors``) and the group decides the assignment; ``poll`` (re)joins when needed, calls
``on_revoke`` / ``on_assign``, and starts each newly assigned partition at its committed offset
(OffsetFetch) or, with none, per ``auto_offset_reset`` (``"none"`` raises
``NoOffsetForPartitionError``). ``commit`` (sync, or async returning a future) commits the
*consumed* positions — the offset after the last record ``poll`` returned, not what was fetched
ahead — fenced by the generation (``CommitFailedError`` after a rebalance). With
``enable_auto_commit`` every ``poll`` commits asynchronously once ``auto_commit_interval_ms`` has
passed (the positions before that poll's records, Kafka's semantics), and the consumer commits
synchronously before a rebalance revokes partitions and on ``close``. ``close`` leaves the group
(dynamic members only: a static member's partitions wait for it for its session timeout).

Not thread-safe (like Kafka's consumer): use it from one thread. A group consumer runs one
background thread for heartbeats.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import grpc

from proto import broker_pb2, errors
from proto.errors import ErrorCode
from pykraft.connection import Connections, fetch_metadata, parse_bootstrap, rpc_error_code
from pykraft.consumer_coordinator import CommitFailedError, GroupConfig
from pykraft.consumer_group import GroupConsumerMixin
from pykraft.group_client import GroupClient
from pykraft.metadata_cache import NO_EPOCH, NO_LEADER, MetadataCache
from pykraft.types import ConsumerRecord, TimestampType, TopicPartition
from storage.batch_header import TIMESTAMP_TYPE_MASK
from storage.record_batch import iter_batches

log = logging.getLogger(__name__)

RESET_POLICIES = ("earliest", "latest", "none")
LEADERSHIP_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)
OffsetOutOfRangeError = errors.exception_class(ErrorCode.OFFSET_OUT_OF_RANGE)
IllegalStateError = errors.exception_class(ErrorCode.INVALID_REQUEST)
PartitionsCallback = Callable[[list[TopicPartition]], None]


class NoOffsetForPartitionError(OffsetOutOfRangeError):  # type: ignore[misc,valid-type]
    """Kafka's ``NoOffsetForPartitionException``: no position, no committed offset, and
    ``auto_offset_reset="none"``."""

    def __init__(self, partitions: Iterable[TopicPartition]) -> None:
        self.partitions = sorted(partitions, key=lambda tp: (tp.topic, tp.partition))
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in self.partitions)
        super().__init__(
            f"no committed offset and no position for {names}, and auto_offset_reset='none'; "
            "seek() to an offset, or use auto_offset_reset='earliest' or 'latest'"
        )


class LogTruncationError(OffsetOutOfRangeError):  # type: ignore[misc,valid-type]
    """The leader's log diverged below our position (KIP-320) and no reset policy is set."""

    def __init__(self, truncation: LogTruncation) -> None:
        self.truncation = truncation
        super().__init__(
            f"{truncation.topic_partition}: records from offset {truncation.divergent_offset} up to "
            f"{truncation.position} were truncated by the leader (epoch {truncation.diverging_epoch}); "
            "seek() to a valid offset"
        )


@dataclass(frozen=True, slots=True)
class LogTruncation:
    """Records ``[divergent_offset, position)`` that this consumer returned were truncated away."""

    topic_partition: TopicPartition
    position: int
    divergent_offset: int
    diverging_epoch: int


@dataclass
class _PartitionState:
    position: int | None = None
    last_fetched_epoch: int | None = None
    high_watermark_max: int = 0  # the largest HW a leader reported: offsets below are committed
    high_watermark: int = 0
    log_start_offset: int = 0
    reset_to: str | None = None  # a pending seek_to_beginning/end
    retry_after_ms: int = 0
    awaiting_committed: bool = False  # newly assigned by the group: its committed offset comes first
    consumed_epoch: int | None = None  # leader epoch of the last record poll returned (committed with it)


@dataclass(frozen=True, slots=True)
class _InFlightFetch:
    leader_id: int
    offsets: dict[TopicPartition, int]
    call: grpc.Future


class Consumer(GroupConsumerMixin):
    """See the module docstring. Kafka's config names, with ``_`` for ``.``."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        auto_offset_reset: str = "latest",
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52_428_800,
        max_partition_fetch_bytes: int = 1_048_576,
        max_poll_records: int = 500,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        group_id: str | None = None,
        group_instance_id: str | None = None,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        partition_assignment_strategy: Sequence[str] = ("range", "cooperative-sticky"),
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        client_id: str = "pykraft",
    ) -> None:
        if auto_offset_reset not in RESET_POLICIES:
            raise ValueError(f"auto_offset_reset must be one of {RESET_POLICIES}, got {auto_offset_reset!r}")
        if max_poll_records <= 0:
            raise ValueError(f"max_poll_records must be > 0, got {max_poll_records}")
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self.auto_offset_reset = auto_offset_reset
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._metadata = MetadataCache(
            retry_backoff_ms=retry_backoff_ms, metadata_max_age_ms=metadata_max_age_ms
        )
        self._connections = Connections()
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._buffer: deque[ConsumerRecord] = deque()
        self._in_flight: dict[int, _InFlightFetch] = {}
        self._answered = threading.Event()  # set by a gRPC callback when a fetch completes
        self.truncations: list[LogTruncation] = []
        self._closed = False
        self.group_id = group_id
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self._next_auto_commit_ms = _now_ms() + auto_commit_interval_ms
        self._on_assign: PartitionsCallback | None = None
        self._on_revoke: PartitionsCallback | None = None
        self._group: GroupClient | None = None
        if group_id is not None:
            config = GroupConfig(
                group_id, group_instance_id, session_timeout_ms, heartbeat_interval_ms, max_poll_interval_ms,
                retry_backoff_ms, tuple(partition_assignment_strategy), client_id,
            )  # fmt: skip
            self._group = GroupClient(config, self._connections, self, request_timeout_ms=request_timeout_ms)

    # ---- assignment and positions -------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (replaces the previous assignment; kept positions stay)."""
        if self._group is not None and self._group.core.subscribed:
            raise IllegalStateError(
                "assign() after subscribe(): call unsubscribe() first (they exclude each other)"
            )
        wanted = list(dict.fromkeys(partitions))
        self._states = {tp: self._states.get(tp, _PartitionState()) for tp in wanted}
        self._buffer = deque(r for r in self._buffer if TopicPartition(r.topic, r.partition) in self._states)
        self._metadata.add_topics({tp.topic for tp in wanted})

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    @staticmethod
    def _new_partition_state() -> _PartitionState:
        return _PartitionState()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if offset < 0:
            raise OffsetOutOfRangeError(f"seek({tp}, {offset}): offsets are >= 0")
        state = self._state(tp)
        state.position, state.last_fetched_epoch, state.reset_to = offset, None, None
        state.consumed_epoch = None
        self._drop_buffered(tp)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._states):
            self._state(tp).reset_to = "earliest"
            self._drop_buffered(tp)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._states):
            self._state(tp).reset_to = "latest"
            self._drop_buffered(tp)

    def position(self, tp: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record ``poll`` returns for ``tp`` (looked up if not known yet)."""
        state = self._state(tp)
        deadline = _now_ms() + (self.request_timeout_ms if timeout_ms is None else timeout_ms)
        while state.position is None or state.reset_to is not None:
            self._refresh_metadata()
            self._resolve_positions()
            if state.position is not None and state.reset_to is None:
                break
            if _now_ms() >= deadline:
                raise errors.exception_class(ErrorCode.LEADER_NOT_AVAILABLE)(
                    f"could not look up the position of {tp} (no leader answered ListOffsets)"
                )
            time.sleep(self.retry_backoff_ms / 1000)
        # Fetched but not yet returned records do not count as consumed (Kafka's position()).
        for r in self._buffer:
            if r.partition == tp.partition and r.topic == tp.topic:
                return r.offset
        return state.position

    def high_watermark(self, tp: TopicPartition) -> int:
        """The HW of ``tp`` in the latest fetch answer (0 before the first)."""
        return self._state(tp).high_watermark

    def _state(self, tp: TopicPartition) -> _PartitionState:
        state = self._states.get(tp)
        if state is None:
            raise IllegalStateError(f"{tp} is not assigned to this consumer; call assign() first")
        return state

    def _drop_buffered(self, tp: TopicPartition) -> None:
        if self._buffer:
            self._buffer = deque(
                r for r in self._buffer if (r.topic, r.partition) != (tp.topic, tp.partition)
            )

    # ---- metadata ------------------------------------------------------------------------------------

    def partitions_for(self, topic: str, timeout_ms: int | None = None) -> list[int]:
        """The partition numbers of ``topic``; raises UnknownTopicOrPartitionError if it does not exist."""
        self._metadata.add_topics([topic])
        deadline = _now_ms() + (self.request_timeout_ms if timeout_ms is None else timeout_ms)
        while True:
            self._refresh_metadata(force=True)
            count = self._metadata.partition_count(topic)
            if count is not None:
                return list(range(count))
            if _now_ms() >= deadline:
                error = self._metadata.topic_error(topic)
                raise errors.exception_class(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)(
                    f"topic {topic!r} is not known to the cluster" + (f": {error[1]}" if error else "")
                )
            time.sleep(self.retry_backoff_ms / 1000)

    def _refresh_metadata(self, force: bool = False) -> None:
        now_ms = _now_ms()
        if not force and not self._metadata.needs_refresh(now_ms):
            return
        self._metadata.on_attempt(now_ms)
        addresses = [*self._metadata.broker_addresses(), *self._bootstrap]
        try:
            response = fetch_metadata(
                self._connections, addresses, self._metadata.topics, self.request_timeout_ms / 1000
            )
        except errors.KafkaError as exc:
            log.debug("metadata refresh failed: %s", exc)
            return
        self._metadata.update(response, _now_ms())

    # ---- polling -------------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0) -> list[ConsumerRecord]:
        """Records from each partition's position, up to ``max_poll_records``, within ``timeout_ms``."""
        if self._closed:
            raise IllegalStateError("poll() after close()")
        deadline = _now_ms() + timeout_ms
        while True:
            if self._group is not None:  # inside poll() counts as polling (Kafka's pollHeartbeat per loop)
                with self._group.lock:
                    self._group.core.on_poll(_now_ms())
            if self._group is not None and self._group.core.subscribed and not self._group_poll(deadline):
                return []
            if self._buffer:
                return self._take_buffered()
            self._refresh_metadata()
            self._resolve_positions()
            self._send_fetches(deadline)
            remaining_ms = deadline - _now_ms()
            if self._in_flight:
                self._answered.wait(max(0.0, min(remaining_ms, self.retry_backoff_ms) / 1000))
            elif remaining_ms > 0:
                time.sleep(min(remaining_ms, self.retry_backoff_ms) / 1000)
            self._collect_answers()
            if self._buffer:
                return self._take_buffered()
            if _now_ms() >= deadline:
                return []

    def _take_buffered(self) -> list[ConsumerRecord]:
        count = min(len(self._buffer), self.max_poll_records)
        records = [self._buffer.popleft() for _ in range(count)]
        if self._group is not None:  # commits carry the epoch of the last consumed record (KIP-320)
            seen: set[tuple[str, int]] = set()
            for r in reversed(records):
                if (r.topic, r.partition) not in seen:
                    seen.add((r.topic, r.partition))
                    state = self._states.get(TopicPartition(r.topic, r.partition))
                    if state is not None:
                        state.consumed_epoch = r.leader_epoch if r.leader_epoch != NO_EPOCH else None
        return records

    def _resolve_positions(self) -> None:
        """ListOffsets for partitions without a position (or with a pending seek_to_*)."""
        pending: dict[TopicPartition, str] = {}
        missing: list[TopicPartition] = []
        for tp, state in self._states.items():
            if state.reset_to is not None:
                pending[tp] = state.reset_to
            elif state.position is None and not state.awaiting_committed:
                if self.auto_offset_reset == "none":
                    missing.append(tp)
                pending[tp] = self.auto_offset_reset
        if missing:
            raise NoOffsetForPartitionError(missing)
        if not pending:
            return
        by_leader: dict[str, list[TopicPartition]] = {}
        for tp in pending:
            address = self._metadata.leader_address(tp)
            if address is None:
                self._metadata.request_update()
                continue
            by_leader.setdefault(address, []).append(tp)
        for address, tps in by_leader.items():
            self._list_offsets(address, {tp: pending[tp] for tp in tps})

    def _list_offsets(self, address: str, specs: dict[TopicPartition, str]) -> None:
        by_topic: dict[str, list[broker_pb2.ListOffsetsPartition]] = {}
        for tp, spec in specs.items():
            part = broker_pb2.ListOffsetsPartition(
                partition=tp.partition, spec=broker_pb2.EARLIEST if spec == "earliest" else broker_pb2.LATEST
            )
            epoch = self._metadata.leader_epoch(tp)
            if epoch is not None:
                part.current_leader_epoch = epoch
            by_topic.setdefault(tp.topic, []).append(part)
        request = broker_pb2.ListOffsetsRequest(
            isolation_level=broker_pb2.READ_COMMITTED,
            topics=[broker_pb2.ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )
        try:
            response = self._connections.stub(address).ListOffsets(
                request, timeout=self.request_timeout_ms / 1000
            )
        except grpc.RpcError as exc:
            log.debug("ListOffsets to %s failed: %s", address, exc)
            self._metadata.request_update()
            return
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.name, p.partition)
                state = self._states.get(tp)
                if state is None or tp not in specs:
                    continue
                if p.error.code != ErrorCode.NONE:
                    if not errors.is_retriable(p.error.code):
                        raise errors.error_for(p.error.code, f"ListOffsets {tp}: {p.error.message}")
                    self._metadata.request_update()
                    continue
                state.position, state.last_fetched_epoch, state.reset_to = p.offset, None, None

    def _send_fetches(self, deadline_ms: int) -> None:
        now_ms = _now_ms()
        busy = {tp for fetch in self._in_flight.values() for tp in fetch.offsets}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp, state in self._states.items():
            if (
                state.position is None
                or state.reset_to is not None
                or tp in busy
                or state.retry_after_ms > now_ms
            ):
                continue
            leader = self._metadata.leader_of(tp)
            if leader == NO_LEADER:
                self._metadata.request_update()
                continue
            if leader not in self._in_flight:
                by_leader.setdefault(leader, []).append(tp)
        max_wait_ms = max(0, min(self.fetch_max_wait_ms, deadline_ms - now_ms))
        for leader, tps in by_leader.items():
            self._send_fetch(leader, tps, max_wait_ms)

    def _send_fetch(self, leader: int, tps: list[TopicPartition], max_wait_ms: int) -> None:
        offsets = {tp: self._states[tp].position for tp in tps}
        by_topic: dict[str, list[broker_pb2.FetchPartition]] = {}
        for tp in tps:
            state = self._states[tp]
            part = broker_pb2.FetchPartition(
                partition=tp.partition,
                fetch_offset=state.position,
                partition_max_bytes=self.max_partition_fetch_bytes,
            )
            epoch = self._metadata.leader_epoch(tp)
            if epoch is not None:
                part.current_leader_epoch = epoch
            if state.last_fetched_epoch is not None:
                part.last_fetched_epoch = state.last_fetched_epoch
            by_topic.setdefault(tp.topic, []).append(part)
        request = broker_pb2.FetchRequest(
            max_wait_ms=max_wait_ms,
            min_bytes=self.fetch_min_bytes,
            max_bytes=self.fetch_max_bytes,
            isolation_level=broker_pb2.READ_COMMITTED,
            topics=[broker_pb2.FetchTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
        )
        address = self._metadata.broker_address(leader)
        assert address is not None, f"leader {leader} without an address"
        timeout_s = (self.request_timeout_ms + max_wait_ms) / 1000
        call = self._connections.stub(address).Fetch.future(request, timeout=timeout_s)
        self._in_flight[leader] = _InFlightFetch(leader, offsets, call)
        call.add_done_callback(lambda _call: self._answered.set())

    def _collect_answers(self) -> None:
        self._answered.clear()
        for leader, fetch in list(self._in_flight.items()):
            if not fetch.call.done():
                continue
            del self._in_flight[leader]
            error = fetch.call.exception()
            if error is not None:
                self._on_fetch_failure(fetch, error)
                continue
            for topic in fetch.call.result().topics:
                for data in topic.partitions:
                    tp = TopicPartition(topic.name, data.partition)
                    if tp in fetch.offsets and self._is_current(tp, fetch.offsets[tp]):
                        self._handle_partition(tp, data)

    def _is_current(self, tp: TopicPartition, fetch_offset: int) -> bool:
        state = self._states.get(tp)
        return state is not None and state.reset_to is None and state.position == fetch_offset

    def _on_fetch_failure(self, fetch: _InFlightFetch, error: grpc.RpcError) -> None:
        code = ErrorCode(rpc_error_code(error))
        log.debug("Fetch from broker %s failed (%s): %s", fetch.leader_id, code.name, error)
        self._metadata.request_update()
        retry_at = _now_ms() + self.retry_backoff_ms
        for tp in fetch.offsets:
            if tp in self._states:
                self._states[tp].retry_after_ms = retry_at

    def _handle_partition(self, tp: TopicPartition, data: broker_pb2.PartitionData) -> None:
        state = self._states[tp]
        code = data.error.code
        if code == ErrorCode.NONE and data.HasField("diverging_epoch"):
            self._on_diverging_epoch(tp, state, data.diverging_epoch)
            return
        if code == ErrorCode.NONE:
            self._note_offsets(state, data)
            self._append_records(tp, state, data.records)
            return
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._note_offsets(state, data)
            self._on_out_of_range(tp, state, data)
            return
        if code in LEADERSHIP_ERRORS:
            hint = data.current_leader if data.HasField("current_leader") else None
            if hint is None or not self._metadata.update_leader(tp, hint.leader_id, hint.leader_epoch):
                self._metadata.request_update()
            return
        if errors.is_retriable(code):  # UNKNOWN_LEADER_EPOCH: the broker has not caught up with us yet
            state.retry_after_ms = _now_ms() + self.retry_backoff_ms
            self._metadata.request_update()
            return
        raise errors.error_for(code, f"Fetch {tp} at {state.position}: {data.error.message}")

    @staticmethod
    def _note_offsets(state: _PartitionState, data: broker_pb2.PartitionData) -> None:
        state.high_watermark = data.high_watermark
        state.high_watermark_max = max(state.high_watermark_max, data.high_watermark)
        state.log_start_offset = data.log_start_offset

    def _on_diverging_epoch(
        self, tp: TopicPartition, state: _PartitionState, diverging: broker_pb2.EpochEndOffset
    ) -> None:
        """KIP-320: our last fetched epoch ended at ``end_offset`` in the leader's log."""
        position = state.position
        assert position is not None, f"{tp}: a fetch answer without a position"
        if diverging.end_offset >= position or diverging.end_offset < 0:
            # Nothing of ours was lost, or the leader knows no epoch <= ours (UNDEFINED_EPOCH_OFFSET):
            # fetch again without the check; an out-of-range position is then reset by policy.
            state.last_fetched_epoch = None
            return
        truncation = LogTruncation(tp, position, diverging.end_offset, diverging.epoch)
        log.warning("%s: log truncated from offset %d (our position %d)", tp, diverging.end_offset, position)
        if self.auto_offset_reset == "none":
            raise LogTruncationError(truncation)
        self.truncations.append(truncation)
        state.position = diverging.end_offset
        state.last_fetched_epoch = diverging.epoch if diverging.epoch != NO_EPOCH else None
        state.high_watermark_max = min(state.high_watermark_max, diverging.end_offset)

    def _on_out_of_range(
        self, tp: TopicPartition, state: _PartitionState, data: broker_pb2.PartitionData
    ) -> None:
        position = state.position
        assert position is not None, f"{tp}: a fetch answer without a position"
        if data.log_start_offset <= position <= state.high_watermark_max:
            state.retry_after_ms = _now_ms() + self.retry_backoff_ms  # a new leader's HW is catching up
            return
        if self.auto_offset_reset == "none":
            raise OffsetOutOfRangeError(
                f"{tp}: position {position} is outside [{data.log_start_offset}, {data.high_watermark}]; "
                "seek() to a valid offset"
            )
        state.reset_to = self.auto_offset_reset

    def _append_records(self, tp: TopicPartition, state: _PartitionState, records: bytes) -> None:
        position = state.position
        assert position is not None, f"{tp}: a fetch answer without a position"
        topic, partition = tp.topic, tp.partition
        for batch in iter_batches(records):
            header = batch.header
            last_offset = header.base_offset + header.last_offset_delta
            if last_offset < position:
                continue
            ts_type = (
                TimestampType.LOG_APPEND_TIME
                if header.attributes & TIMESTAMP_TYPE_MASK
                else TimestampType.CREATE_TIME
            )
            epoch = header.partition_leader_epoch
            self._buffer.extend(
                ConsumerRecord(
                    topic, partition, r.offset, r.key, r.value, r.headers, r.timestamp, ts_type, epoch
                )
                for r in batch.records
                if r.offset >= position
            )
            position = last_offset + 1
            state.last_fetched_epoch = epoch if epoch != NO_EPOCH else state.last_fetched_epoch
        state.position = position

    # ---- lifecycle -----------------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        if self._group is not None:
            self._close_group()
        self._closed = True
        for fetch in self._in_flight.values():
            fetch.call.cancel()
        self._in_flight.clear()
        self._connections.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


__all__ = [
    "CommitFailedError",
    "Consumer",
    "ConsumerRecord",
    "LogTruncation",
    "LogTruncationError",
    "NoOffsetForPartitionError",
    "TopicPartition",
]
