"""``Producer``: send records to partition leaders in batches, with Kafka's delivery semantics.

    with Producer("127.0.0.1:9092", acks="all", linger_ms=5, compression_type="zstd") as producer:
        future = producer.send("orders", b"value", key=b"customer-7")
        print(future.result(timeout=10))          # RecordMetadata(topic, partition, offset, ...)
        producer.flush()

Theory of operation (Kafka's ``KafkaProducer`` + ``Sender``):

- ``send`` runs in the caller's thread: it picks the partition (``StickyPartitioner``: murmur2 of
  the key, Kafka-compatible; sticky without a key), appends the record to that partition's open
  batch in the ``RecordAccumulator`` and returns a ``FutureRecordMetadata``. It blocks only to learn
  an unknown topic's partition count (up to ``max_block_ms``).
- One background **sender thread** owns the network: it asks the accumulator which leaders have
  sendable batches (full, lingered ``linger_ms``, flushing or retry backoff passed), drains them —
  one batch per partition, many partitions per request — into ONE Produce request per leader, encodes
  the batches (``storage.record_batch.build_batch``, compressed with ``compression_type``) and sends
  it asynchronously; while it is in flight the next batches fill. A partition is muted while
  ``max_in_flight_requests_per_connection`` of its batches are in flight (default 1: records of a
  partition land in ``send`` order, even across retries).
- Answers: each partition's batch completes (its records' futures get base offset + index) or fails.
  Retriable errors (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, a lost
  connection, ...) re-queue the batch at the head of its partition after ``retry_backoff_ms``, while
  retries and ``delivery_timeout_ms`` allow; leadership errors use the broker's leader hint (KIP-951)
  or refresh metadata. Other errors fail the records with their ``proto.errors`` exception.
- ``acks=0``: the request is still answered by gRPC, but futures resolve with ``NO_OFFSET``.
- ``flush()`` makes every batch sendable now and waits for the batches that existed when it was
  called; ``close()`` flushes (bounded by ``timeout_s``), stops the sender and closes channels.

Idempotence (KIP-98, ``enable_idempotence=True``, the default as in Kafka 3.x): before its first
batch the sender obtains a producer id and epoch with ``InitProducerId`` from any broker; every batch
carries them and its per-partition base sequence (``pykraft.accumulator``), so a retry whose first
attempt was appended (its answer lost) is answered with the original offsets instead of being
written twice: exactly once per partition, in send order, with up to 5 batches in flight per
partition. It requires ``acks="all"`` and at most 5 in flight: left unset, idempotence is off for another
config (as in Kafka 3.x); set explicitly, a contradictory config is refused with ValueError.
OUT_OF_ORDER_SEQUENCE_NUMBER and UNKNOWN_PRODUCER_ID are retried while an earlier batch of the
partition is unacknowledged (it fills the gap); otherwise OUT_OF_ORDER_SEQUENCE_NUMBER and
INVALID_PRODUCER_EPOCH fail the batch. Without idempotence a retried batch may be written twice
(Kafka's at-least-once).

Epoch bump (Kafka >= 2.5, KIP-360, for a producer without ``transactional.id``): a batch that got a
sequence and then fails for good (``delivery_timeout_ms``, retries exhausted, a non-retriable error)
leaves a hole in its partition's sequences, and every later batch would be refused
OUT_OF_ORDER_SEQUENCE_NUMBER forever. So the accumulator then holds all sending until every
in-flight batch is answered; the sender bumps ``producer_epoch`` by one (locally: the producer id is
ours alone, and the leader accepts a newer epoch that starts at sequence 0) and every partition
restarts at sequence 0, queued retries included. The newer epoch also fences a request of the old
epoch that might still reach a leader late (INVALID_PRODUCER_EPOCH, nothing appended). At epoch
32767 (int16) the producer gets a new producer id with InitProducerId instead. UNKNOWN_PRODUCER_ID
with no earlier batch unacknowledged means the leader has no state for us (it expired after
``producer.id.expiration.ms`` idle, KIP-854) and the batch is not in the log: the same bump, and
the batch is sent again at sequence 0. Caveat (Kafka's too): the records of a batch that failed
with a timeout may still have been written; with more than one batch in flight, a later batch
that was in flight beside it is resent under the new epoch and may then be written twice.

Thread-safety: ``send``, ``flush`` and ``close`` may be called from any thread. Callbacks run on the
sender thread: keep them short.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import grpc

from proto import broker_pb2, errors
from proto.errors import ErrorCode
from pykraft.accumulator import (
    NO_SEQUENCE,
    AccumulatorConfig,
    FailureAction,
    ProducerBatch,
    RecordAccumulator,
)
from pykraft.connection import Connections, fetch_metadata, parse_bootstrap, rpc_error_code
from pykraft.metadata_cache import NO_LEADER, MetadataCache
from pykraft.partitioner import StickyPartitioner
from pykraft.types import NO_OFFSET, NO_TIMESTAMP, RecordMetadata, TopicPartition
from storage.compression import CompressionType
from storage.record_batch import build_batch

log = logging.getLogger(__name__)

ACKS = {"all": -1, "-1": -1, -1: -1, "1": 1, 1: 1, "0": 0, 0: 0}
COMPRESSION = {codec.name.lower(): codec for codec in CompressionType}
MAX_RETRIES = 2_147_483_647
IDLE_WAIT_S = 0.1  # the sender re-checks at least this often (deadlines, metadata, close)
Header = tuple[str, bytes | None]
DeliveryCallback = Callable[[RecordMetadata | None, Exception | None], None]

# Errors that mean "the leader moved": follow the hint or refresh metadata before retrying.
LEADERSHIP_ERRORS = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)
ProducerClosedError = errors.exception_class(ErrorCode.NETWORK_EXCEPTION)
TimedOutError = errors.exception_class(ErrorCode.REQUEST_TIMED_OUT)
UnknownTopicError = errors.exception_class(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
InvalidRecordError = errors.exception_class(ErrorCode.INVALID_RECORD)
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Retried while an earlier batch of the partition is unacknowledged: that batch fills the gap.
SEQUENCE_ERRORS = frozenset({ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID})
INIT_PRODUCER_ID_BACKOFF_MS = 100
MAX_PRODUCER_EPOCH = 32_767  # int16 in the batch header (Kafka's Short.MAX_VALUE)


class _BatchResult:
    """The outcome of one batch, shared by its records' futures (Kafka's ``ProduceRequestResult``)."""

    __slots__ = ("base_offset", "buffered_bytes", "callbacks", "done", "error", "log_append_time_ms", "tp")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.buffered_bytes = 0  # key + value bytes of its records, counted against buffer_memory
        self.done = threading.Event()
        self.base_offset = NO_OFFSET
        self.log_append_time_ms = NO_TIMESTAMP
        self.error: Exception | None = None
        self.callbacks: list[tuple[FutureRecordMetadata, Callable]] = []

    def resolve(self, base_offset: int, log_append_time_ms: int, error: Exception | None) -> list:
        """Record the outcome (under the producer's lock); returns the callbacks to run after it."""
        self.base_offset, self.log_append_time_ms, self.error = base_offset, log_append_time_ms, error
        self.done.set()
        callbacks, self.callbacks = self.callbacks, []
        return callbacks


class FutureRecordMetadata:
    """The delivery of one record: ``result(timeout)`` returns ``RecordMetadata`` or raises the error."""

    __slots__ = ("_batch", "_index", "_key_size", "_lock", "_timestamp_ms", "_value_size")

    def __init__(self, batch: _BatchResult, index: int, timestamp_ms: int, key_size: int, value_size: int,
                 lock: threading.Lock) -> None:  # fmt: skip
        self._batch = batch
        self._index = index
        self._timestamp_ms = timestamp_ms
        self._key_size = key_size
        self._value_size = value_size
        self._lock = lock

    def done(self) -> bool:
        return self._batch.done.is_set()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        if not self._batch.done.wait(timeout):
            raise TimedOutError(f"no answer for a record of {self._batch.tp} within {timeout} s")
        if self._batch.error is not None:
            raise self._batch.error
        return self._metadata()

    def exception(self, timeout: float | None = None) -> Exception | None:
        if not self._batch.done.wait(timeout):
            raise TimedOutError(f"no answer for a record of {self._batch.tp} within {timeout} s")
        return self._batch.error

    def add_done_callback(self, callback: Callable[[FutureRecordMetadata], None]) -> None:
        """Call ``callback(future)`` when delivered or failed (now, if it already is)."""
        with self._lock:
            if not self._batch.done.is_set():
                self._batch.callbacks.append((self, callback))
                return
        self._run_callback(callback)

    def _run_callback(self, callback: Callable[[FutureRecordMetadata], None]) -> None:
        try:
            callback(self)
        except Exception:  # a user's callback must not kill the sender thread
            log.exception("a producer delivery callback raised")

    def _metadata(self) -> RecordMetadata:
        batch = self._batch
        offset = NO_OFFSET if batch.base_offset == NO_OFFSET else batch.base_offset + self._index
        timestamp = (
            self._timestamp_ms if batch.log_append_time_ms == NO_TIMESTAMP else batch.log_append_time_ms
        )
        return RecordMetadata(
            batch.tp.topic, batch.tp.partition, offset, timestamp, self._key_size, self._value_size
        )


@dataclass(frozen=True, slots=True)
class _Response:
    """A Produce answer (or its failure) handed from a gRPC callback thread to the sender."""

    leader_id: int
    batches: tuple[ProducerBatch, ...]
    response: broker_pb2.ProduceResponse | None
    error: grpc.RpcError | None


class Producer:
    """See the module docstring. Kafka's config names, with ``_`` for ``.``."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        acks: str | int = "all",
        linger_ms: int = 5,
        batch_size: int = 16_384,
        compression_type: str = "none",
        retries: int = MAX_RETRIES,
        retry_backoff_ms: int = 100,
        max_in_flight_requests_per_connection: int = 1,
        request_timeout_ms: int = 30_000,
        delivery_timeout_ms: int = 120_000,
        max_request_size: int = 1_048_576,
        max_block_ms: int = 60_000,
        buffer_memory: int = 33_554_432,
        metadata_max_age_ms: int = 300_000,
        enable_idempotence: bool | None = None,
        partitioner: StickyPartitioner | None = None,
        rng: random.Random | None = None,
        test_drop_first_response: bool = False,
    ) -> None:
        if acks not in ACKS:
            raise ValueError(f"acks must be 'all', 1 or 0, got {acks!r}")
        self._idempotence_explicit = enable_idempotence is not None
        if enable_idempotence is None:  # Kafka 3.x: on by default unless the config contradicts it
            enable_idempotence = ACKS[acks] == ACKS["all"] and max_in_flight_requests_per_connection <= 5
        if enable_idempotence and ACKS[acks] != ACKS["all"]:
            raise ValueError(
                f"enable_idempotence=True requires acks='all', got acks={acks!r}: set acks='all' or "
                "enable_idempotence=False"
            )
        self.enable_idempotence = enable_idempotence
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self._init_producer_id_after_ms = 0
        # Test-only fault: the first answer to every Produce request is discarded after it arrived
        # (the broker did append), so every batch is retried (tests/integration/client/test_idempotence.py).
        self._drop_first_response = test_drop_first_response
        if compression_type not in COMPRESSION:
            raise ValueError(
                f"compression_type must be one of {sorted(COMPRESSION)}, got {compression_type!r}"
            )
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self.acks = ACKS[acks]
        self.compression = COMPRESSION[compression_type]
        self.request_timeout_ms = request_timeout_ms
        self.max_block_ms = max_block_ms
        if buffer_memory < max_request_size:
            raise ValueError(
                f"buffer_memory ({buffer_memory}) must be >= max_request_size ({max_request_size})"
            )
        self.buffer_memory = buffer_memory
        self._buffered_bytes = 0
        self._accumulator = RecordAccumulator(
            AccumulatorConfig(
                batch_size=batch_size, linger_ms=linger_ms, max_request_size=max_request_size,
                max_in_flight_per_partition=max_in_flight_requests_per_connection, retries=retries,
                retry_backoff_ms=retry_backoff_ms, delivery_timeout_ms=delivery_timeout_ms,
                idempotent=enable_idempotence,
            )
        )  # fmt: skip
        self._partitioner = partitioner or StickyPartitioner(rng or random.Random())
        self._metadata = MetadataCache(
            retry_backoff_ms=retry_backoff_ms, metadata_max_age_ms=metadata_max_age_ms
        )
        self._connections = Connections()
        self._lock = threading.Lock()  # accumulator, partitioner, metadata cache, results
        self._wakeup = threading.Condition(self._lock)
        self._metadata_ready = threading.Condition(self._lock)
        self._buffer_space = threading.Condition(self._lock)
        self._results: dict[int, _BatchResult] = {}
        self._topic_partitions: dict[str, list[TopicPartition]] = {}  # partition counts as send() saw them
        self._sticky_batches: dict[str, int | None] = {}  # topic -> first batch of its sticky partition
        self._responses: list[_Response] = []
        self._callbacks: list[tuple[FutureRecordMetadata, Callable]] = []  # to run outside the lock
        self._flushers = 0
        self._closing = False
        self._closed = False
        self._sender = threading.Thread(target=self._run, name="pykraft-producer-sender", daemon=True)
        self._sender.start()

    # ---- the application's side -----------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Iterable[Header] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        *,
        on_delivery: DeliveryCallback | None = None,
    ) -> FutureRecordMetadata:
        """Queue a record; the future resolves when the broker acknowledged it (per ``acks``)."""
        if value.__class__ is not bytes and value is not None:  # the per-record path: cheap checks first
            _check_bytes("value", value)
        if key.__class__ is not bytes and key is not None:
            _check_bytes("key", key)
        header_list = _NO_HEADERS if headers is None else _checked_headers(headers)
        now_ms = _now_ms()
        timestamp = time.time_ns() // 1_000_000 if timestamp_ms is None else timestamp_ms
        with self._lock:
            if self._closing:
                raise ProducerClosedError("send() after close(): the producer no longer accepts records")
            size = (0 if key is None else len(key)) + (0 if value is None else len(value))
            if self._buffered_bytes + size > self.buffer_memory:
                self._wait_for_buffer(size)
            partitions = self._topic_partitions.get(topic) or self._learn_topic(topic)
            num_partitions = len(partitions)
            tp = partitions[self._choose_partition(topic, key, partition, num_partitions)]
            result = self._accumulator.append(tp, key, value, header_list, timestamp, now_ms)
            if result.new_batch:
                self._results[result.batch_id] = _BatchResult(tp)
                if key is None and partition is None:
                    self._maybe_switch_sticky(tp, result.batch_id, num_partitions)
                self._wakeup.notify()
            batch_result = self._results[result.batch_id]
            batch_result.buffered_bytes += size
            self._buffered_bytes += size
            future = FutureRecordMetadata(
                batch_result, result.record_index, timestamp,
                0 if key is None else len(key), 0 if value is None else len(value), self._lock,
            )  # fmt: skip
        if on_delivery is not None:
            future.add_done_callback(lambda f: _deliver(f, on_delivery))
        return future

    def _wait_for_buffer(self, size: int) -> None:
        """Block (lock released) while queued records hold ``buffer_memory`` (Kafka's backpressure)."""
        deadline = time.monotonic() + self.max_block_ms / 1000
        self._accumulator.begin_flush()  # free space sooner: stop lingering while someone waits
        self._wakeup.notify()
        try:
            while self._buffered_bytes and self._buffered_bytes + size > self.buffer_memory:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closing:
                    raise TimedOutError(
                        f"buffer.memory={self.buffer_memory} bytes stayed full for max.block.ms="
                        f"{self.max_block_ms}: the brokers are not keeping up (or are unreachable)"
                    )
                self._buffer_space.wait(min(remaining, IDLE_WAIT_S))
        finally:
            if not self._flushers:
                self._accumulator.end_flush()

    def _learn_topic(self, topic: str) -> list[TopicPartition]:
        """The partitions of ``topic`` (waiting for metadata), cached: one object per partition."""
        count = self._wait_for_topic(topic)
        partitions = [TopicPartition(topic, p) for p in range(count)]
        self._topic_partitions[topic] = partitions
        return partitions

    def _maybe_switch_sticky(self, tp: TopicPartition, batch_id: int, num_partitions: int) -> None:
        """KIP-480: a null-key record opened a new batch because the sticky one was sent or full.

        The first batch of a sticky choice is remembered; when a later record has to open another
        one, the partitioner moves on (that record stays in the new batch: one record, not a batch).
        """
        if self._sticky_batches.get(tp.topic) is None:
            self._sticky_batches[tp.topic] = batch_id
            return
        self._sticky_batches[tp.topic] = None
        available = self._metadata.available_partitions(tp.topic)
        self._partitioner.on_new_batch(tp.topic, tp.partition, num_partitions, available)

    def _choose_partition(
        self, topic: str, key: bytes | None, partition: int | None, num_partitions: int
    ) -> int:
        if partition is None:
            return self._partitioner.partition(
                topic, key, num_partitions, self._metadata.available_partitions(topic)
            )
        if not 0 <= partition < num_partitions:
            raise UnknownTopicError(
                f"topic {topic!r} has partitions 0..{num_partitions - 1}, not {partition}"
            )
        return partition

    def _wait_for_topic(self, topic: str) -> int:
        """The partition count of ``topic``, waiting (lock released) for the sender to learn it."""
        count = self._metadata.partition_count(topic)
        if count is not None:
            return count
        if self._metadata.add_topics([topic]):
            self._wakeup.notify()
        deadline = time.monotonic() + self.max_block_ms / 1000
        while (count := self._metadata.partition_count(topic)) is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._closing:
                error = self._metadata.topic_error(topic)
                detail = f": {ErrorCode(error[0]).name} {error[1]}" if error else ""
                raise UnknownTopicError(
                    f"topic {topic!r} not known to the cluster after {self.max_block_ms} ms{detail}; "
                    "create it first (pykraft topics create) or check the bootstrap servers"
                )
            self._metadata_ready.wait(min(remaining, IDLE_WAIT_S))
        return count

    def partitions_for(self, topic: str) -> list[int]:
        with self._lock:
            return list(range(self._wait_for_topic(topic)))

    def flush(self, timeout_s: float | None = None) -> None:
        """Send everything queued now (ignoring linger) and wait for those records' answers."""
        with self._lock:
            pending = list(self._results.values())
            self._flushers += 1
            self._accumulator.begin_flush()
            self._wakeup.notify()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            for result in pending:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not result.done.wait(remaining):
                    raise TimedOutError(f"flush() did not complete within {timeout_s} s")
        finally:
            with self._lock:
                self._flushers -= 1
                if not self._flushers:
                    self._accumulator.end_flush()

    def close(self, timeout_s: float | None = None) -> None:
        """Flush (up to ``timeout_s``), then stop; records still unsent fail with a NetworkException."""
        if self._closed:
            return
        try:
            self.flush(timeout_s)
        except errors.KafkaError as exc:
            log.warning("close(): %s; failing the records still queued", exc)
        with self._lock:
            self._closing = True
            self._wakeup.notify()
        self._sender.join(None if timeout_s is None else max(timeout_s, 1.0))
        self._connections.close()
        self._closed = True

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- the sender thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._run_once():
                pass
        except Exception:  # a bug: fail what is pending rather than hang every future forever
            log.exception("the producer's sender thread failed")
            with self._lock:
                self._closing = True
                self._fail_everything("the producer's sender thread failed; see the log")
            self._run_callbacks()

    def _run_callbacks(self) -> None:
        with self._lock:
            callbacks, self._callbacks = self._callbacks, []
        for future, callback in callbacks:
            future._run_callback(callback)

    def _run_once(self) -> bool:
        with self._lock:
            responses, self._responses = self._responses, []
        for answer in responses:
            self._handle_response(answer)
        self._maybe_refresh_metadata()
        have_producer_id = self._maybe_init_producer_id()
        with self._lock:
            closing = self._closing
            requests: dict[int, list[ProducerBatch]] = {}
            next_check_ms: int | None = _now_ms() + INIT_PRODUCER_ID_BACKOFF_MS
            if closing:
                self._fail_everything("the producer was closed before these records were sent")
            elif have_producer_id:
                requests, next_check_ms = self._drain(_now_ms())
        self._run_callbacks()
        if closing:
            return False
        for leader_id, batches in requests.items():
            self._send_request(leader_id, batches)
        with self._lock:
            if not self._responses and not self._closing:
                wait_s = IDLE_WAIT_S if next_check_ms is None else (next_check_ms - _now_ms()) / 1000
                self._wakeup.wait(min(max(wait_s, 0.0), IDLE_WAIT_S))
        return True

    def _maybe_init_producer_id(self) -> bool:
        """Idempotence: obtain a producer id and epoch (InitProducerId, any broker) before sending."""
        if not self.enable_idempotence or self.producer_id != NO_PRODUCER_ID:
            return True
        now_ms = _now_ms()
        if now_ms < self._init_producer_id_after_ms:
            return False
        self._init_producer_id_after_ms = now_ms + INIT_PRODUCER_ID_BACKOFF_MS
        with self._lock:
            addresses = [*self._metadata.broker_addresses(), *self._bootstrap]
        request = broker_pb2.InitProducerIdRequest()
        for address in dict.fromkeys(addresses):
            try:
                response = self._connections.stub(address).InitProducerId(
                    request, timeout=self.request_timeout_ms / 1000
                )
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED and not self._idempotence_explicit:
                    return self._disable_idempotence(address)
                log.debug("InitProducerId on %s failed: %s", address, exc)
                continue
            except errors.KafkaError as exc:
                log.debug("InitProducerId on %s failed: %s", address, exc)
                continue
            if response.error.code == ErrorCode.NONE:
                self.producer_id, self.producer_epoch = response.producer_id, response.producer_epoch
                log.debug("producer id %d epoch %d", self.producer_id, self.producer_epoch)
                return True
            log.debug("InitProducerId on %s: %s", address, response.error.message)
        return False

    def _disable_idempotence(self, address: str) -> bool:
        """Kafka 3.x: idempotence that was only on by default is dropped for a broker without it."""
        log.warning("broker %s does not implement InitProducerId: idempotence disabled", address)
        with self._lock:
            self.enable_idempotence = False
            self._accumulator.config = dataclasses.replace(self._accumulator.config, idempotent=False)
        return True

    def _drain(self, now_ms: int) -> tuple[dict[int, list[ProducerBatch]], int | None]:
        for batch in self._accumulator.expire(now_ms):
            self._finish(batch, NO_OFFSET, NO_TIMESTAMP, TimedOutError(
                f"{batch.topic_partition}: not sent within delivery.timeout.ms="
                f"{self._accumulator.config.delivery_timeout_ms} (no leader or too slow)"))  # fmt: skip
        if self._accumulator.sequence_reset_due() and not self._bump_producer_epoch():
            return {}, None
        check = self._accumulator.ready(now_ms, self._metadata.leader_of)
        if check.unknown_leader_partitions:
            self._metadata.request_update()
        if not check.ready_leaders:
            return {}, check.next_ready_check_ms
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in self._accumulator.queued_partitions():
            leader = self._metadata.leader_of(tp)
            if leader in check.ready_leaders:
                by_leader.setdefault(leader, []).append(tp)
        return self._accumulator.drain(by_leader, now_ms), check.next_ready_check_ms

    def _bump_producer_epoch(self) -> bool:
        """Restart every partition at sequence 0 under epoch + 1 (see the module docstring); at the
        int16 limit drop the producer id instead (False: InitProducerId first)."""
        self._accumulator.reset_sequences()
        if self.producer_epoch < MAX_PRODUCER_EPOCH:
            self.producer_epoch += 1
            log.info("producer %d: epoch bumped to %d, sequences restart at 0", self.producer_id,
                     self.producer_epoch)  # fmt: skip
            return True
        log.info("producer %d: epoch %d exhausted, getting a new producer id", self.producer_id,
                 self.producer_epoch)  # fmt: skip
        self.producer_id, self.producer_epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        return False

    def _send_request(self, leader_id: int, batches: list[ProducerBatch]) -> None:
        with self._lock:
            address = self._metadata.broker_address(leader_id)
            epochs = {b.topic_partition: self._metadata.leader_epoch(b.topic_partition) for b in batches}
        request = self._produce_request(batches, epochs)
        try:
            if address is None:
                raise ProducerClosedError(f"broker {leader_id} is not in the metadata any more")
            call = self._connections.stub(address).Produce.future(
                request, timeout=self.request_timeout_ms / 1000
            )
        except (errors.KafkaError, grpc.RpcError, ValueError) as exc:
            log.debug("cannot send to broker %s: %s", leader_id, exc)
            self._post(_Response(leader_id, tuple(batches), None, _LocalRpcError(str(exc))))
            return
        call.add_done_callback(lambda done: self._on_done(leader_id, tuple(batches), done))

    def _produce_request(
        self, batches: list[ProducerBatch], epochs: dict[TopicPartition, int | None]
    ) -> broker_pb2.ProduceRequest:
        by_topic: dict[str, list[broker_pb2.PartitionProduceData]] = {}
        for batch in batches:
            tp = batch.topic_partition
            if batch.base_sequence == NO_SEQUENCE:
                records = build_batch(batch.records, compression=self.compression)
            else:
                records = build_batch(
                    batch.records, compression=self.compression, producer_id=self.producer_id,
                    producer_epoch=self.producer_epoch, base_sequence=batch.base_sequence,
                )  # fmt: skip
            data = broker_pb2.PartitionProduceData(partition=tp.partition, records=records)
            if epochs[tp] is not None:
                data.current_leader_epoch = epochs[tp]
            by_topic.setdefault(tp.topic, []).append(data)
        return broker_pb2.ProduceRequest(
            acks=self.acks,
            timeout_ms=self.request_timeout_ms,
            topics=[
                broker_pb2.TopicProduceData(name=name, partitions=parts) for name, parts in by_topic.items()
            ],
        )

    def _on_done(self, leader_id: int, batches: tuple[ProducerBatch, ...], call: grpc.Future) -> None:
        error = call.exception()
        if self._drop_first_response and error is None and all(b.attempts == 1 for b in batches):
            error = _LocalRpcError("test fault: the first answer to this request was dropped")
        self._post(_Response(leader_id, batches, None if error else call.result(), error))

    def _post(self, answer: _Response) -> None:
        with self._lock:
            self._responses.append(answer)
            self._wakeup.notify()

    def _handle_response(self, answer: _Response) -> None:
        now_ms = _now_ms()
        answers: dict[TopicPartition, broker_pb2.PartitionProduceResponse] = {}
        if answer.response is not None:
            for topic in answer.response.topics:
                for p in topic.partitions:
                    answers[TopicPartition(topic.name, p.partition)] = p
        with self._lock:
            for batch in answer.batches:
                tp = batch.topic_partition
                if answer.error is not None:
                    code, message = (
                        rpc_error_code(answer.error),
                        f"Produce to broker {answer.leader_id}: {answer.error}",
                    )
                    self._on_batch_error(batch, code, message, None, now_ms)
                elif self.acks == 0:
                    self._finish(self._accumulator.complete(batch.batch_id), NO_OFFSET, NO_TIMESTAMP, None)
                elif tp not in answers:
                    message = f"broker {answer.leader_id} did not answer for {tp}"
                    self._on_batch_error(batch, ErrorCode.UNKNOWN_SERVER_ERROR, message, None, now_ms)
                elif answers[tp].error.code == ErrorCode.NONE:
                    p = answers[tp]
                    self._finish(
                        self._accumulator.complete(batch.batch_id), p.base_offset, p.log_append_time_ms, None
                    )
                else:
                    p = answers[tp]
                    self._on_batch_error(batch, p.error.code, f"{tp}: {p.error.message}", p, now_ms)
            self._accumulator.invariants()

    def _on_batch_error(
        self, batch: ProducerBatch, code: int, message: str,
        answer: broker_pb2.PartitionProduceResponse | None, now_ms: int,
    ) -> None:  # fmt: skip
        tp = batch.topic_partition
        if code in LEADERSHIP_ERRORS:
            hint = answer.current_leader if answer is not None and answer.HasField("current_leader") else None
            if hint is None or not self._metadata.update_leader(tp, hint.leader_id, hint.leader_epoch):
                self._metadata.request_update()
        retriable = None
        if code in SEQUENCE_ERRORS and self.enable_idempotence:
            retriable = self._sequence_error_retriable(batch, code)
        failure = self._accumulator.fail(batch.batch_id, ErrorCode(code) if code in _CODES else
                                         ErrorCode.UNKNOWN_SERVER_ERROR, message, now_ms,
                                         retriable)  # fmt: skip
        if failure.action is FailureAction.RETRY:
            log.debug("retrying %s after %s", tp, message)
            return
        self._finish(failure.batch, NO_OFFSET, NO_TIMESTAMP, errors.error_for(failure.code, message))

    def _sequence_error_retriable(self, batch: ProducerBatch, code: int) -> bool:
        """Retry when an earlier batch fills the gap or a sequence reset will renumber this batch;
        UNKNOWN_PRODUCER_ID with nothing earlier outstanding: the leader lost our state, reset."""
        if self._accumulator.has_earlier_unacked(batch) or self._accumulator.sequence_reset_pending:
            return True
        if code == ErrorCode.UNKNOWN_PRODUCER_ID:
            self._accumulator.request_sequence_reset()
            return True
        return False

    def _finish(
        self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int, error: Exception | None
    ) -> None:
        result = self._results.pop(batch.batch_id)
        self._release(result)
        self._callbacks.extend(result.resolve(base_offset, log_append_time_ms, error))

    def _release(self, result: _BatchResult) -> None:
        self._buffered_bytes -= result.buffered_bytes
        assert self._buffered_bytes >= 0, f"buffered bytes went negative: {self._buffered_bytes}"
        self._buffer_space.notify_all()

    def _fail_everything(self, message: str) -> None:
        for batch in self._accumulator.abort_all():
            self._finish(batch, NO_OFFSET, NO_TIMESTAMP, ProducerClosedError(message))
        for batch_id in list(self._results):
            result = self._results.pop(batch_id)
            self._release(result)
            self._callbacks.extend(result.resolve(NO_OFFSET, NO_TIMESTAMP, ProducerClosedError(message)))

    def _maybe_refresh_metadata(self) -> None:
        with self._lock:
            now_ms = _now_ms()
            if not self._metadata.topics or not self._metadata.needs_refresh(now_ms):
                return
            self._metadata.on_attempt(now_ms)
            topics = self._metadata.topics
            addresses = [*self._metadata.broker_addresses(), *self._bootstrap]
        try:
            response = fetch_metadata(self._connections, addresses, topics, self.request_timeout_ms / 1000)
        except errors.KafkaError as exc:
            log.debug("metadata refresh failed: %s", exc)
            return
        with self._lock:
            self._metadata.update(response, _now_ms())
            for topic, partitions in list(self._topic_partitions.items()):
                if self._metadata.partition_count(topic) not in (None, len(partitions)):
                    del self._topic_partitions[topic]  # partitions were added: send() learns them again
            self._metadata_ready.notify_all()

    # ---- introspection (tests, benchmarks) ----------------------------------------------------------

    def leader_of(self, tp: TopicPartition) -> int:
        with self._lock:
            return self._metadata.leader_of(tp)


_CODES = frozenset(int(code) for code in ErrorCode)


class _LocalRpcError(grpc.RpcError):
    """A request that could not even be started (no channel): treated as a network failure."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self._message = message

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return self._message


def _deliver(future: FutureRecordMetadata, callback: DeliveryCallback) -> None:
    error = future.exception(0)
    callback(None if error else future.result(0), error)


_NO_HEADERS: tuple[Header, ...] = ()


def _checked_headers(headers: Iterable[Header]) -> tuple[Header, ...]:
    header_list = tuple(headers)
    for header in header_list:
        if not (isinstance(header, tuple) and len(header) == 2 and isinstance(header[0], str)):
            raise InvalidRecordError(f"a header is a (str, bytes | None) pair, got {header!r}")
        _check_bytes(f"header {header[0]!r}", header[1])
    return header_list


def _check_bytes(what: str, data: object) -> None:
    if data is not None and not isinstance(data, bytes | bytearray | memoryview):
        raise InvalidRecordError(
            f"the {what} must be bytes or None, got {type(data).__name__} (encode it first)"
        )


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


__all__ = ["ACKS", "COMPRESSION", "NO_LEADER", "FutureRecordMetadata", "Producer", "RecordMetadata"]
