"""Reading one offset range on a Spark worker: fetch loop, data-loss rules, Arrow batches out.

``read_range`` fetches ``[from_offset, until_offset)`` of one partition from its leader and yields
``pyarrow.RecordBatch`` es in the Kafka source schema, one per fetch. Rules:

- The range end is the snapshot taken at planning: a record at or above it is never yielded, even
  if the leader's HW has moved on (``spark.arrow`` cuts every fetch at ``until_offset``).
- The range is complete: the loop runs until every offset below ``until_offset`` was passed. If a
  new leader's HW has not yet caught up with the range (its HW lags right after a failover) the
  fetch comes back short or OFFSET_OUT_OF_RANGE above the HW, and the loop long-polls again.
- Data loss: when the leader's log start offset has moved past our position (retention between
  planning and reading), ``failOnDataLoss`` decides — ``DataLossError``, or skip to the log start.
- Every wait is bounded: ``kafkaConsumer.pollTimeoutMs`` without progress raises a
  ``RequestTimedOutError`` naming the partition and the offsets.

While a fetch's records are decoded, the next fetch (at the offset after its last whole batch) is
already on its way, on one helper thread: decoding and the network overlap.

Not a sans-I/O core: it drives the client and reads a monotonic clock, both injectable for tests.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from proto import errors
from proto.kafka_types import TopicPartition
from spark.arrow import decode_range, peek_next_offset
from spark.client import REFRESH_ERRORS, BrokerClient, FetchResult
from spark.planning import DataLossError, OffsetRange

_log = logging.getLogger(__name__)
RETRY_ERRORS = REFRESH_ERRORS | {errors.ErrorCode.NETWORK_EXCEPTION}


@dataclass(frozen=True)
class ReadSettings:
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int
    min_timestamp_ms: int | None = None  # a pushed "timestamp >= x" filter


def read_range(
    client: BrokerClient,
    offset_range: OffsetRange,
    settings: ReadSettings,
    *,
    monotonic: Callable[[], float] = time.monotonic,
    warn: Callable[[str], None] = _log.warning,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``offset_range`` as Arrow batches (see the module docstring)."""
    tp = offset_range.topic_partition
    position, until = offset_range.from_offset, offset_range.until_offset
    deadline = monotonic() + settings.poll_timeout_ms / 1000
    fetcher = _Prefetcher(client, tp)
    try:
        while position < until:
            if monotonic() > deadline:
                raise errors.exception_class(errors.ErrorCode.REQUEST_TIMED_OUT)(
                    f"reading {tp} [{offset_range.from_offset}, {until}): no progress at offset {position} "
                    f"for kafkaConsumer.pollTimeoutMs={settings.poll_timeout_ms}"
                )
            result = fetcher.take(position)
            if result.error_code in RETRY_ERRORS:
                continue
            if (
                result.error_code == errors.ErrorCode.OFFSET_OUT_OF_RANGE
                or position < result.log_start_offset
            ):
                if position >= result.log_start_offset:
                    continue  # above this leader's HW for now: it has not caught up with the range yet
                position = _skip_lost(tp, position, min(result.log_start_offset, until), settings, warn)
                deadline = monotonic() + settings.poll_timeout_ms / 1000
                continue
            next_offset = peek_next_offset(result.records, position, until)
            if position < next_offset < until:
                fetcher.request(next_offset)  # the next fetch travels while this one is decoded
            decoded = decode_range(
                result.records,
                position,
                until,
                topic=tp.topic,
                partition=tp.partition,
                include_headers=settings.include_headers,
                min_timestamp_ms=settings.min_timestamp_ms,
            )
            if decoded.next_offset > position:
                position = decoded.next_offset
                deadline = monotonic() + settings.poll_timeout_ms / 1000
            if decoded.batch is not None:
                yield decoded.batch
    finally:
        fetcher.close()


class _Prefetcher:
    """At most one fetch in flight on a helper thread, so the network and the broker work while
    the task decodes the previous answer. The client is used by one thread at a time."""

    def __init__(self, client: BrokerClient, tp: TopicPartition) -> None:
        self._client = client
        self._tp = tp
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pykraft-fetch")
        self._pending: tuple[int, Future[FetchResult]] | None = None

    def request(self, fetch_offset: int) -> None:
        assert self._pending is None, f"a fetch at {self._pending[0]} is still pending"
        self._pending = (fetch_offset, self._pool.submit(self._client.fetch, self._tp, fetch_offset))

    def take(self, fetch_offset: int) -> FetchResult:
        """The answer for ``fetch_offset``: the prefetched one if it is for that offset."""
        if self._pending is None or self._pending[0] != fetch_offset:
            self._drop()
            self.request(fetch_offset)
        assert self._pending is not None
        future = self._pending[1]
        self._pending = None
        return future.result()

    def _drop(self) -> None:
        if self._pending is not None:
            self._pending[1].cancel()
            with contextlib.suppress(Exception):
                self._pending[1].result()
            self._pending = None

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def _skip_lost(tp, position: int, log_start_offset: int, settings: ReadSettings, warn) -> int:
    message = f"{tp}: offsets [{position}, {log_start_offset}) were deleted after planning"
    if settings.fail_on_data_loss:
        raise DataLossError(message)
    warn(f"{message}; skipping them (failOnDataLoss=false)")
    return log_start_offset
