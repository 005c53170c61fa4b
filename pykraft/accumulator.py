"""The producer's record accumulator: per-partition batches, linger, drain per leader, retries in order.

Theory of operation (Kafka's ``RecordAccumulator`` and ``Sender``, without I/O or clocks):

- ``append`` adds a record to the open batch of its partition; a batch is closed when the next record
  would push its encoded size past ``batch_size`` (a record bigger than that gets a batch of its own,
  up to ``max_request_size``). Sizes are exact for an uncompressed Kafka v2 RecordBatch (61-byte header,
  varint records), so a request never exceeds ``max_request_size`` before compression.
- ``ready(now_ms, leader_of)`` names the leader brokers with a sendable batch: the head batch of a
  partition is sendable when it is full (or followed by another), when it lingered ``linger_ms``, when a
  flush is in progress, or when the partition is being retried and its backoff passed. Partitions with
  no known leader are reported so the driver refreshes metadata; ``next_ready_check_ms`` says when to
  look again.
- ``drain(leader_partitions, now_ms)`` takes, per ready leader, at most one batch per partition (the head,
  oldest first) until ``max_request_size``, and counts it in flight. A partition with
  ``max_in_flight_per_partition`` batches in flight sends nothing more (it is *muted*).
- ``complete(batch_id)`` after success; ``fail(batch_id, code, now_ms)`` after an error: a retriable code
  with retries left re-queues the batch at the head of its partition in sequence order, sendable
  after ``retry_backoff_ms``; otherwise the batch is done and its records fail.
- ``expire(now_ms)``: queued batches older than ``delivery_timeout_ms`` fail (REQUEST_TIMED_OUT).

Ordering: batches of a partition are created with increasing ``sequence`` and always sent head first.
With ``max_in_flight_per_partition = 1`` (the default, DESIGN.md's "one request in flight per
partition") records are appended in send order even across retries. With more in flight a retried
batch is re-queued ahead of every later batch of its partition, but a later batch that the broker
already accepted stays ahead of it (Kafka without idempotence behaves the same).

Idempotence (KIP-98, ``idempotent=True``): a batch gets its ``base_sequence`` when it is first
drained (it is closed then, so its record count is final): the partition's record sequence so far,
wrapping past INT32_MAX to 0 like Kafka; a retry keeps it, so the leader recognises a duplicate.
Batches are drained in sequence order and re-queued in sequence order, so up to 5 in flight per
partition keep their order across retries: a batch answered OUT_OF_ORDER_SEQUENCE_NUMBER while an
earlier batch of its partition is still unacknowledged is retried (``has_earlier_unacked``).

A sequenced batch that fails for good (retries exhausted, ``delivery_timeout_ms``, a non-retriable
error) leaves a hole in its partition's sequences that nothing will fill: every later batch would get
OUT_OF_ORDER_SEQUENCE_NUMBER. So it requests a **sequence reset** (also requested by the producer when
a leader lost its state, UNKNOWN_PRODUCER_ID): nothing more is drained until every in-flight batch is
answered (``sequence_reset_due``), then ``reset_sequences`` restarts every partition at sequence 0 and
clears the base sequence of every queued batch (retries included), which get fresh ones when drained;
the producer sends them under a bumped producer epoch (Kafka's KIP-360 epoch bump).

Pure: time comes in as ``now_ms``; nothing is encoded here (the driver builds the v2 batch from
``ProducerBatch.records``). Not thread-safe: the producer serializes calls.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from proto import errors
from proto.errors import ErrorCode

BATCH_HEADER_BYTES = 61
NO_LEADER = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1
MAX_IN_FLIGHT_IDEMPOTENT = 5  # Kafka: enable.idempotence requires max.in.flight <= 5
Header = tuple[str, bytes | None]

MessageTooLargeError = errors.exception_class(ErrorCode.MESSAGE_TOO_LARGE)


def varint_size(value: int) -> int:
    """Bytes of the zigzag varint of ``value`` (Kafka's ``ByteUtils.sizeOfVarlong``)."""
    if -64 <= value < 64:  # the common cases first: this runs several times per record
        return 1
    if -8192 <= value < 8192:
        return 2
    raw = (value << 1) ^ (value >> 63)
    return (raw.bit_length() + 6) // 7


def record_size(
    offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None, headers: Sequence[Header]
) -> int:
    """Exact encoded size of one v2 record, its length varint included."""
    body = 1 + varint_size(timestamp_delta) + varint_size(offset_delta)
    body += 1 if key is None else varint_size(len(key)) + len(key)  # null: the varint of -1
    body += 1 if value is None else varint_size(len(value)) + len(value)
    body += varint_size(len(headers))
    for header_key, header_value in headers:
        encoded_key = header_key.encode()
        body += varint_size(len(encoded_key)) + len(encoded_key)
        body += 1 if header_value is None else varint_size(len(header_value)) + len(header_value)
    return varint_size(body) + body


def _payload_bytes(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    """A lower bound of a record's encoded size: its key, value and header bytes."""
    size = (0 if key is None else len(key)) + (0 if value is None else len(value))
    for header_key, header_value in headers:
        size += len(header_key) + (0 if header_value is None else len(header_value))
    return size


# Record framing beyond the payload: attributes, 2 deltas, lengths, header count (<= 5 varints of
# <= 10 bytes each) plus, per header, two length varints.
_MAX_RECORD_FRAMING = 1 + 5 * 10
_MAX_HEADER_FRAMING = 2 * 5


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int


class PendingRecord(NamedTuple):
    """One record waiting in a batch (a NamedTuple: cheap to build on the per-record path)."""

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class AccumulatorConfig:
    batch_size: int = 16_384
    linger_ms: int = 5
    max_request_size: int = 1_048_576
    max_in_flight_per_partition: int = 1
    retries: int = 2_147_483_647
    retry_backoff_ms: int = 100
    delivery_timeout_ms: int = 120_000
    idempotent: bool = False

    def __post_init__(self) -> None:
        if self.idempotent and self.max_in_flight_per_partition > MAX_IN_FLIGHT_IDEMPOTENT:
            raise ValueError(
                f"max.in.flight.requests.per.connection={self.max_in_flight_per_partition} is above "
                f"{MAX_IN_FLIGHT_IDEMPOTENT}, the most enable.idempotence allows; lower it or disable it"
            )
        for name in ("batch_size", "max_request_size", "max_in_flight_per_partition", "delivery_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name.replace('_', '.')} must be > 0, got {getattr(self, name)}")
        for name in ("linger_ms", "retries", "retry_backoff_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name.replace('_', '.')} must be >= 0, got {getattr(self, name)}")


@dataclass
class ProducerBatch:
    """Records for one partition, sent and acknowledged together. Owned by the accumulator."""

    batch_id: int
    topic_partition: TopicPartition
    sequence: int  # per partition, increasing in creation order
    created_ms: int
    records: list[PendingRecord] = field(default_factory=list)
    size_bytes: int = BATCH_HEADER_BYTES
    closed: bool = False
    attempts: int = 0
    base_sequence: int = NO_SEQUENCE  # idempotence: set when first drained, kept across retries
    retry_after_ms: int = 0

    def try_append(self, record: PendingRecord, batch_size: int) -> bool:
        base_timestamp = self.records[0].timestamp_ms if self.records else record.timestamp_ms
        size = record_size(
            len(self.records), record.timestamp_ms - base_timestamp, record.key, record.value, record.headers
        )
        if self.closed or (self.records and self.size_bytes + size > batch_size):
            return False
        self.records.append(record)
        self.size_bytes += size
        return True


@dataclass(frozen=True, slots=True)
class AppendResult:
    batch_id: int
    record_index: int  # the record's position in its batch (its offset delta)
    new_batch: bool  # a batch was opened for it (a sticky partitioner moves on)


@dataclass(frozen=True, slots=True)
class ReadyCheck:
    ready_leaders: frozenset[int]
    next_ready_check_ms: int | None  # when something may become sendable without new input
    unknown_leader_partitions: frozenset[TopicPartition]


class FailureAction(enum.Enum):
    RETRY = "retry"  # re-queued; it will be drained again after the backoff
    FAIL = "fail"  # done: fail every record of the batch with the error


@dataclass(frozen=True, slots=True)
class Failure:
    action: FailureAction
    batch: ProducerBatch
    code: ErrorCode
    message: str


class RecordAccumulator:
    """See the module docstring."""

    def __init__(self, config: AccumulatorConfig) -> None:
        self.config = config
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._in_flight: dict[int, ProducerBatch] = {}
        self._in_flight_count: dict[TopicPartition, int] = {}
        self._next_sequence: dict[TopicPartition, int] = {}
        self._next_record_sequence: dict[TopicPartition, int] = {}
        self._batch_ids = itertools.count(1)
        self._flushing = False
        self._sequence_reset_pending = False

    # ---- appending ------------------------------------------------------------------------------

    def append(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[Header],
        timestamp_ms: int,
        now_ms: int,
    ) -> AppendResult:
        record = PendingRecord(key, value, tuple(headers), timestamp_ms)
        self._check_record_size(record)
        queue = self._queues.setdefault(tp, deque())
        tail = queue[-1] if queue else None
        if tail is not None and tail.try_append(record, self.config.batch_size):
            return AppendResult(tail.batch_id, len(tail.records) - 1, new_batch=False)
        if tail is not None:
            tail.closed = True
        batch = ProducerBatch(next(self._batch_ids), tp, self._take_sequence(tp), now_ms)
        appended = batch.try_append(record, self.config.batch_size)
        assert appended, f"a new batch refused its first record {record}"
        queue.append(batch)
        return AppendResult(batch.batch_id, 0, new_batch=True)

    def _check_record_size(self, record: PendingRecord) -> None:
        # The exact size is computed only near the limit: this runs once per record.
        bound = _payload_bytes(record.key, record.value, record.headers) + BATCH_HEADER_BYTES
        bound += _MAX_RECORD_FRAMING + _MAX_HEADER_FRAMING * len(record.headers)
        if bound <= self.config.max_request_size:
            return
        alone = BATCH_HEADER_BYTES + record_size(0, 0, record.key, record.value, record.headers)
        if alone > self.config.max_request_size:
            raise MessageTooLargeError(
                f"a record of {alone} bytes (with the batch header) exceeds max.request.size="
                f"{self.config.max_request_size}; raise it or send a smaller record"
            )

    def _take_sequence(self, tp: TopicPartition) -> int:
        sequence = self._next_sequence.get(tp, 0)
        self._next_sequence[tp] = sequence + 1
        return sequence

    # ---- ready and drain ------------------------------------------------------------------------

    def ready(self, now_ms: int, leader_of: Callable[[TopicPartition], int]) -> ReadyCheck:
        ready_leaders: set[int] = set()
        unknown: set[TopicPartition] = set()
        next_check: int | None = None
        if self._sequence_reset_pending:  # hold everything until the reset (see the module docstring)
            return ReadyCheck(frozenset(), None, frozenset())
        for tp, queue in self._queues.items():
            if not queue:
                continue
            leader = leader_of(tp)
            if leader == NO_LEADER:
                unknown.add(tp)
                continue
            if self._muted(tp):
                continue
            sendable_at = self._sendable_at(queue)
            if sendable_at <= now_ms:
                ready_leaders.add(leader)
            else:
                next_check = sendable_at if next_check is None else min(next_check, sendable_at)
        return ReadyCheck(frozenset(ready_leaders), next_check, frozenset(unknown))

    def _muted(self, tp: TopicPartition) -> bool:
        return self._in_flight_count.get(tp, 0) >= self.config.max_in_flight_per_partition

    def _sendable_at(self, queue: deque[ProducerBatch]) -> int:
        head = queue[0]
        if head.attempts > 0:
            return head.retry_after_ms
        if self._flushing or head.closed or len(queue) > 1 or head.size_bytes >= self.config.batch_size:
            return 0
        return head.created_ms + self.config.linger_ms

    def drain(
        self, leader_partitions: Mapping[int, Sequence[TopicPartition]], now_ms: int
    ) -> dict[int, list[ProducerBatch]]:
        """For each ready leader, the batches of one request: one per partition, head first."""
        drained: dict[int, list[ProducerBatch]] = {}
        if self._sequence_reset_pending:
            return drained
        for leader, partitions in leader_partitions.items():
            batches = self._drain_leader(partitions, now_ms)
            if batches:
                drained[leader] = batches
        return drained

    def _drain_leader(self, partitions: Sequence[TopicPartition], now_ms: int) -> list[ProducerBatch]:
        batches: list[ProducerBatch] = []
        size = 0
        for tp in sorted(partitions, key=self._oldest_head):
            queue = self._queues.get(tp)
            if not queue or self._muted(tp) or self._sendable_at(queue) > now_ms:
                continue
            head = queue[0]
            if batches and size + head.size_bytes > self.config.max_request_size:
                break
            queue.popleft()
            head.closed = True
            if self.config.idempotent and head.base_sequence == NO_SEQUENCE:
                head.base_sequence = self._take_record_sequence(tp, len(head.records))
            head.attempts += 1
            size += head.size_bytes
            self._in_flight[head.batch_id] = head
            self._in_flight_count[tp] = self._in_flight_count.get(tp, 0) + 1
            batches.append(head)
        return batches

    def _take_record_sequence(self, tp: TopicPartition, count: int) -> int:
        base = self._next_record_sequence.get(tp, 0)
        following = base + count
        self._next_record_sequence[tp] = following - INT32_MAX - 1 if following > INT32_MAX else following
        return base

    def has_earlier_unacked(self, batch: ProducerBatch) -> bool:
        """Is a batch of the same partition created before ``batch`` still queued or in flight?"""
        tp = batch.topic_partition
        return any(b.sequence < batch.sequence for b in self._queues.get(tp, ())) or any(
            b.topic_partition == tp and b.sequence < batch.sequence for b in self._in_flight.values()
        )

    # ---- sequence reset (idempotence) -------------------------------------------------------------

    @property
    def sequence_reset_pending(self) -> bool:
        return self._sequence_reset_pending

    def request_sequence_reset(self) -> None:
        """Hold every partition until in-flight batches are answered, then ``reset_sequences``."""
        if self.config.idempotent:
            self._sequence_reset_pending = True

    def sequence_reset_due(self) -> bool:
        """A reset was requested and nothing is in flight any more: bump the epoch and reset now."""
        return self._sequence_reset_pending and not self._in_flight

    def reset_sequences(self) -> None:
        """Every partition restarts at sequence 0; queued batches get fresh base sequences when drained."""
        assert self.sequence_reset_due(), f"sequence reset with {len(self._in_flight)} batches in flight"
        self._next_record_sequence.clear()
        for queue in self._queues.values():
            for batch in queue:
                batch.base_sequence = NO_SEQUENCE
        self._sequence_reset_pending = False

    def _oldest_head(self, tp: TopicPartition) -> tuple[int, str, int]:
        queue = self._queues.get(tp)
        return (queue[0].created_ms if queue else 1 << 62, tp.topic, tp.partition)

    # ---- outcomes --------------------------------------------------------------------------------

    def complete(self, batch_id: int) -> ProducerBatch:
        """The batch was acknowledged: its records' futures succeed."""
        return self._land(batch_id)

    def fail(
        self, batch_id: int, code: ErrorCode, message: str, now_ms: int, retriable: bool | None = None
    ) -> Failure:
        """The batch failed: retry (re-queued in sequence order, after backoff) or fail its records.

        ``retriable`` overrides the code's own retriability (the producer retries OUT_OF_ORDER_SEQUENCE
        behind an earlier unacknowledged batch)."""
        batch = self._land(batch_id)
        timed_out = now_ms - batch.created_ms >= self.config.delivery_timeout_ms
        if retriable is None:
            retriable = errors.is_retriable(code)
        if retriable and batch.attempts <= self.config.retries and not timed_out:
            batch.retry_after_ms = now_ms + self.config.retry_backoff_ms
            self._requeue(batch)
            return Failure(FailureAction.RETRY, batch, code, message)
        self._maybe_reset_after(batch)
        return Failure(FailureAction.FAIL, batch, code, message)

    def _maybe_reset_after(self, failed: ProducerBatch) -> None:
        """A batch that was given a sequence fails for good: its partition's sequences have a hole."""
        if failed.base_sequence != NO_SEQUENCE:
            self.request_sequence_reset()

    def _land(self, batch_id: int) -> ProducerBatch:
        batch = self._in_flight.pop(batch_id, None)
        assert batch is not None, f"batch {batch_id} is not in flight"
        tp = batch.topic_partition
        self._in_flight_count[tp] -= 1
        if not self._in_flight_count[tp]:
            del self._in_flight_count[tp]
        return batch

    def _requeue(self, batch: ProducerBatch) -> None:
        queue = self._queues.setdefault(batch.topic_partition, deque())
        position = 0
        while position < len(queue) and queue[position].sequence < batch.sequence:
            position += 1
        queue.insert(position, batch)

    def expire(self, now_ms: int) -> list[ProducerBatch]:
        """Queued batches past delivery.timeout.ms (their records fail with REQUEST_TIMED_OUT)."""
        expired = []
        for queue in self._queues.values():
            while queue and now_ms - queue[0].created_ms >= self.config.delivery_timeout_ms:
                expired.append(queue.popleft())
                self._maybe_reset_after(expired[-1])
        return expired

    def abort_all(self) -> list[ProducerBatch]:
        """Close without waiting: every queued batch is returned to fail its records."""
        aborted = [batch for queue in self._queues.values() for batch in queue]
        self._queues.clear()
        return aborted

    # ---- flush and introspection -------------------------------------------------------------------

    def begin_flush(self) -> None:
        """Make every batch sendable now, ignoring linger (``Producer.flush``)."""
        self._flushing = True

    def end_flush(self) -> None:
        self._flushing = False

    @property
    def incomplete_batches(self) -> int:
        return sum(len(queue) for queue in self._queues.values()) + len(self._in_flight)

    def queued_partitions(self) -> list[TopicPartition]:
        return [tp for tp, queue in self._queues.items() if queue]

    def invariants(self) -> None:
        for tp, queue in self._queues.items():
            sequences = [batch.sequence for batch in queue]
            assert sequences == sorted(sequences), f"{tp}: queued out of sequence order {sequences}"
            for batch in queue:
                assert batch.records, f"{tp}: empty batch {batch.batch_id} queued"
                assert batch.batch_id not in self._in_flight, f"batch {batch.batch_id} queued and in flight"
        for tp, count in self._in_flight_count.items():
            assert 0 < count <= self.config.max_in_flight_per_partition, f"{tp}: {count} batches in flight"
        if self.config.idempotent:
            for tp, queue in self._queues.items():
                sequenced = [batch.base_sequence != NO_SEQUENCE for batch in queue]
                assert sequenced == sorted(sequenced, reverse=True), (
                    f"{tp}: a batch without a base sequence is queued ahead of one with a sequence"
                )
