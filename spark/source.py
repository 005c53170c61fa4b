"""The PySpark Data Source ``"pykraft"``: batch and streaming reads of committed partition data.

Usage (one call registers the format; the session variable keeps its usual name)::

    from spark import register_spark_source   # the top-level package ``spark``, not a session
    register_spark_source(spark)              # ``spark`` here is the usual SparkSession variable
    df = (spark.read.format("pykraft")
          .option("bootstrap.servers", "127.0.0.1:9092").option("subscribe", "events").load())

Where each piece runs:

- ``DataSource.schema()`` (at ``load()``): parses every option; a bad one fails here with
  ``InvalidOptionError`` naming it, before any job.
- ``reader().partitions()`` (driver, once per DataFrame): Metadata, then ListOffsets earliest and
  latest for every partition — the HW read here is the ceiling of the query — then the pure planner
  (``spark.planning``) turns options and pushed filters into offset ranges, one per Spark task.
- ``read(partition)`` (workers): each task fetches its range over the Kafka protocol from the
  partition leader (or the preferred read replica the leader names, ``spark.client``), decodes the
  batches (every codec) and yields ``pyarrow.RecordBatch`` es (``spark.reader``).
- Streaming: offsets ``{topic: {"partition": offset}}``; ``latestOffset`` is each partition's HW
  (never below the start, so a new leader whose HW briefly lags never looks like data loss), cut by
  ``maxOffsetsPerTrigger`` as Spark's Kafka source does; partitions that appear are read from their
  earliest offset; ``Trigger.AvailableNow`` stops at the HW seen when the query started.

Filter pushdown (Spark >= 4.1 with ``spark.sql.python.filterPushdown.enabled=true``): ``topic``
and ``partition`` ``=`` / ``IN``, ``offset`` ``= < <= > >=`` and ``timestamp >=`` narrow the planned
ranges (``timestamp`` through ListOffsets-by-time, the time index, plus an exact per-record filter
on the workers, since Kafka timestamps need not rise with offsets). Everything else stays with
Spark. PySpark refuses a reader that defines ``pushFilters`` while that setting is off, so there
are two DataSource classes and ``register_spark_source`` picks the one that matches the session.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from proto.kafka_types import TopicPartition
from spark import pushdown
from spark.client import BrokerClient, KafkaBrokerClient
from spark.options import (
    EARLIEST_OFFSET,
    LATEST_OFFSET,
    SourceOptions,
    SubscriptionKind,
    parse_options,
)
from spark.planning import (
    OffsetRange,
    PartitionOffsets,
    Plan,
    offsets_from_json,
    offsets_to_json,
    plan_batch,
    plan_stream,
    rate_limit,
    resolve_offsets,
    resolve_partitions,
    split_ranges,
    timestamps_to_look_up,
)
from spark.reader import ReadSettings, read_range
from spark.schema import kafka_schema

try:  # Spark >= 4.2
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older PySpark: no read limits, no availableNow
    ReadAllAvailable = ReadLimit = ReadMaxRows = None  # type: ignore[assignment,misc]
    SupportsTriggerAvailableNow = object  # type: ignore[assignment,misc]

FORMAT_NAME = "pykraft"
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
_log = logging.getLogger(__name__)


def make_client(options: SourceOptions) -> BrokerClient:
    return KafkaBrokerClient(
        options.bootstrap_servers,
        num_retries=options.fetch_offset_num_retries,
        retry_interval_ms=options.fetch_offset_retry_interval_ms,
    )


def snapshot(
    client: BrokerClient, partitions: Sequence[TopicPartition]
) -> dict[TopicPartition, PartitionOffsets]:
    """Each partition's (log start offset, HW), read once: the planning snapshot."""
    earliest = client.list_offsets(dict.fromkeys(partitions, EARLIEST_OFFSET))
    latest = client.list_offsets(dict.fromkeys(partitions, LATEST_OFFSET))
    return {tp: PartitionOffsets(earliest[tp] or 0, latest[tp] or 0) for tp in partitions}


def _current_partitions(
    client: BrokerClient, options: SourceOptions, *, streaming: bool
) -> list[TopicPartition]:
    sub = options.subscription
    topics = None
    if sub.kind is not SubscriptionKind.SUBSCRIBE_PATTERN:
        topics = sorted(set(sub.topics) | {tp.topic for tp in sub.assigned})
    return resolve_partitions(sub, client.partition_counts(topics), streaming=streaming)


def _log_warnings(plan: Plan) -> None:
    for warning in plan.warnings:
        _log.warning("pykraft source: %s", warning)


def _read(
    options: SourceOptions, partition: InputPartition, min_timestamp_ms: int | None
) -> Iterator[pa.RecordBatch]:
    offset_range: OffsetRange | None = partition.value
    if offset_range is None:  # PySpark reads one InputPartition(None) when partitions() is empty
        return
    settings = ReadSettings(
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
        min_timestamp_ms=min_timestamp_ms,
    )
    client = make_client(options)
    try:
        yield from read_range(client, offset_range, settings)
    finally:
        client.close()


# --- batch ----------------------------------------------------------------------------------------


class PykraftBatchReader(DataSourceReader):
    """Plans once (``partitions``) and reads ranges (``read``). No filter pushdown."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.pushed = pushdown.PushedFilters()

    def partitions(self) -> list[InputPartition]:
        client = make_client(self.options)
        try:
            plan = self._plan(client)
        finally:
            client.close()
        _log_warnings(plan)
        return [InputPartition(r) for r in plan.ranges]

    def _plan(self, client: BrokerClient) -> Plan:
        options = self.options
        partitions = [
            tp for tp in _current_partitions(client, options, streaming=False) if self.pushed.keeps(tp)
        ]
        offsets = snapshot(client, partitions)
        start_times = _look_up_times(client, timestamps_to_look_up(options.starting, partitions))
        end_times = _look_up_times(client, timestamps_to_look_up(options.ending, partitions))
        plan = plan_batch(options, partitions, offsets, start_times, end_times, split=False)
        times = {}
        if self.pushed.min_timestamp_ms is not None:
            times = _look_up_times(client, dict.fromkeys(partitions, self.pushed.min_timestamp_ms))
        return pushdown.narrow(plan, self.pushed, times, options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition, self.pushed.min_timestamp_ms)


class PykraftPushdownBatchReader(PykraftBatchReader):
    """The batch reader with ``pushFilters`` (only valid when filter pushdown is enabled)."""

    def pushFilters(self, filters: list[Any]) -> Iterator[Any]:
        self.pushed, rejected = pushdown.accept(filters)
        return iter(rejected)


def _look_up_times(
    client: BrokerClient, times: dict[TopicPartition, int]
) -> dict[TopicPartition, int | None]:
    return client.list_offsets(times) if times else {}


# --- streaming ------------------------------------------------------------------------------------


class PykraftStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over offsets ``{topic: {"partition": offset}}`` (see the module docstring)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._available_now: dict[TopicPartition, int] | None = None

    def _with_client(self, fn):
        client = make_client(self.options)
        try:
            return fn(client)
        finally:
            client.close()

    def initialOffset(self) -> dict:
        return self._with_client(self._initial_offset)

    def _initial_offset(self, client: BrokerClient) -> dict:
        partitions = _current_partitions(client, self.options, streaming=True)
        offsets = snapshot(client, partitions)
        times = _look_up_times(client, timestamps_to_look_up(self.options.starting, partitions))
        start = resolve_offsets(
            self.options.starting, partitions, offsets, times, self.options, is_start=True
        )
        return offsets_to_json(start)

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_offsets_per_trigger is None or ReadMaxRows is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def latestOffset(self, start: dict, limit: Any = None) -> dict:
        return self._with_client(lambda client: self._latest_offset(client, start, limit))

    def _latest_offset(self, client: BrokerClient, start: dict, limit: Any) -> dict:
        begin = offsets_from_json(start)
        partitions = _current_partitions(client, self.options, streaming=True)
        offsets = snapshot(client, partitions)
        # A partition seen for the first time starts at its log start offset (Spark: earliest).
        begin = {tp: begin.get(tp, offsets[tp].log_start_offset) for tp in partitions} | begin
        latest = {tp: max(offsets[tp].high_watermark, begin[tp]) for tp in partitions}
        if self._available_now is not None:
            latest = {tp: min(end, self._available_now.get(tp, begin[tp])) for tp, end in latest.items()}
            latest = {tp: max(end, begin[tp]) for tp, end in latest.items()}
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            latest = rate_limit(limit.max_rows, begin, latest)
        return offsets_to_json(latest)

    def prepareForTriggerAvailableNow(self) -> None:
        def target(client: BrokerClient) -> dict[TopicPartition, int]:
            partitions = _current_partitions(client, self.options, streaming=True)
            return {tp: o.high_watermark for tp, o in snapshot(client, partitions).items()}

        self._available_now = self._with_client(target)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, until = offsets_from_json(start), offsets_from_json(end)
        new = [tp for tp in until if tp not in begin]
        # Known partitions start where the last batch ended (deletions are caught at fetch time);
        # new ones at their log start offset.
        log_starts = dict(begin)
        if new:
            log_starts |= {
                tp: o.log_start_offset for tp, o in self._with_client(lambda c: snapshot(c, new)).items()
            }
        plan = plan_stream(begin, until, log_starts, self.options.fail_on_data_loss)
        _log_warnings(plan)
        ranges = split_ranges(
            plan.ranges, self.options.min_partitions, self.options.max_records_per_partition
        )
        return [InputPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition, None)

    def commit(self, end: dict) -> None:
        """Nothing to do: as with Spark's Kafka source, the checkpoint is the only record of progress."""


# --- the DataSource and its registration ----------------------------------------------------------


class PykraftDataSource(DataSource):
    """``spark.read.format("pykraft")``: Spark's Kafka source contract over pykraft brokers."""

    batch_reader_class: type[PykraftBatchReader] = PykraftBatchReader

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return kafka_schema(parse_options(self.options, streaming=None).include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return self.batch_reader_class(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return PykraftStreamReader(parse_options(self.options, streaming=True))


class PykraftPushdownDataSource(PykraftDataSource):
    """The same source with filter pushdown, for sessions with ``spark.sql.python.filterPushdown.enabled``."""

    batch_reader_class = PykraftPushdownBatchReader


def register_spark_source(spark: Any, *, filter_pushdown: bool | None = None) -> None:
    """Register format ``"pykraft"`` with ``spark`` (a SparkSession). Call once per session.

    ``filter_pushdown``: None follows the session's ``spark.sql.python.filterPushdown.enabled``;
    True also turns that setting on; False registers the source without pushdown.
    """
    if filter_pushdown is None:
        filter_pushdown = str(spark.conf.get(PUSHDOWN_CONF, "false")).lower() == "true"
    elif filter_pushdown:
        spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(PykraftPushdownDataSource if filter_pushdown else PykraftDataSource)
