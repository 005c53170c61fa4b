"""Offset-range planning: from each partition's (log start offset, high watermark) to Spark tasks.

Pure arithmetic over offsets, no I/O: the driver asks the brokers once for every partition's log
start offset and high watermark (ListOffsets earliest / latest) and, when timestamps are involved,
for the offsets of those times (ListOffsets by timestamp, through the time index), then calls these
functions.

Invariants of every planned ``OffsetRange``:

- ``log_start_offset <= from_offset <= until_offset <= high_watermark`` of the snapshot taken at
  planning. The HW read once at planning is the ceiling of every range, so one query reads one
  consistent snapshot of committed data: a record at or above that HW is never returned, even while
  producers write and leaders change during the job; the same explicit offsets give the same rows.
- An explicit ending offset above the HW is an error (``OffsetOutOfRangeError``), never silently
  clamped: clamping would make the same query return different rows as data arrives.
- A start below the log start offset (the records were deleted) is data loss: an error when
  ``failOnDataLoss`` is true, else a warning and the range starts at the log start offset.
- Splitting (``minPartitions``, ``maxRecordsPerPartition``) is Spark's ``KafkaOffsetRangeCalculator``
  step for step, so a Spark user gets the same number of tasks as with the Kafka source.

Warnings are returned, not logged: the caller (the Data Source on the driver) logs them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from proto import errors
from proto.kafka_types import TopicPartition
from spark.options import (
    EARLIEST_OFFSET,
    LATEST_OFFSET,
    InvalidOptionError,
    OffsetSpec,
    OffsetSpecKind,
    SourceOptions,
    Subscription,
    SubscriptionKind,
    TimestampStrategy,
)

NO_OFFSET_FOR_TIMESTAMP = None  # ListOffsets found no record with timestamp >= the one asked


class DataLossError(errors.exception_class(errors.ErrorCode.OFFSET_OUT_OF_RANGE)):  # type: ignore[misc]
    """Records a query asked for are gone (below the log start offset, or a partition vanished)."""

    def __init__(self, message: str) -> None:
        super().__init__(
            f"{message}. Some data may have been lost because it is no longer available (retention, "
            "deletion). If you want your query to continue, set the source option failOnDataLoss=false."
        )


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition's readable bounds at planning: committed records are [log_start_offset, HW)."""

    log_start_offset: int
    high_watermark: int

    def invariants(self) -> None:
        assert 0 <= self.log_start_offset <= self.high_watermark, (
            f"log_start_offset {self.log_start_offset} > high_watermark {self.high_watermark}"
        )


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records [from_offset, until_offset) of one partition: one Spark task's share."""

    topic_partition: TopicPartition
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset

    def invariants(self) -> None:
        assert 0 <= self.from_offset <= self.until_offset, f"bad range {self}"


@dataclass(frozen=True)
class Plan:
    ranges: tuple[OffsetRange, ...]
    warnings: tuple[str, ...] = field(default=())


def resolve_partitions(
    subscription: Subscription, partition_counts: Mapping[str, int], *, streaming: bool
) -> list[TopicPartition]:
    """The partitions a subscription reads, given every topic's partition count from Metadata.

    A named topic or assigned partition that does not exist is an error in a batch query (it would
    silently read nothing); a streaming query waits for it to appear.
    """
    if subscription.kind is SubscriptionKind.SUBSCRIBE_PATTERN:
        topics = [t for t in partition_counts if subscription.matches(t)]
        return [TopicPartition(t, p) for t in sorted(topics) for p in range(partition_counts[t])]
    if subscription.kind is SubscriptionKind.SUBSCRIBE:
        missing = [t for t in subscription.topics if t not in partition_counts]
        if missing and not streaming:
            raise errors.exception_class(errors.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)(
                f"option 'subscribe': topic(s) {', '.join(missing)} do not exist"
            )
        return [TopicPartition(t, p) for t in subscription.topics for p in range(partition_counts.get(t, 0))]
    missing_tps = [tp for tp in subscription.assigned if tp.partition >= partition_counts.get(tp.topic, 0)]
    if missing_tps and not streaming:
        raise errors.exception_class(errors.ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)(
            f"option 'assign': partition(s) {', '.join(map(str, missing_tps))} do not exist"
        )
    return [tp for tp in subscription.assigned if tp not in missing_tps]


def timestamps_to_look_up(
    spec: OffsetSpec, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """The (partition -> timestamp ms) ListOffsets lookups a timestamp spec needs; {} for the others."""
    if spec.kind is OffsetSpecKind.TIMESTAMP:
        return dict.fromkeys(partitions, spec.timestamp_ms)
    if spec.kind is OffsetSpecKind.TIMESTAMPS:
        return spec.as_dict()
    return {}


def plan_batch(
    options: SourceOptions,
    partitions: Sequence[TopicPartition],
    offsets: Mapping[TopicPartition, PartitionOffsets],
    start_times: Mapping[TopicPartition, int | None] | None = None,
    end_times: Mapping[TopicPartition, int | None] | None = None,
    *,
    split: bool = True,
) -> Plan:
    """Resolve startingOffsets/endingOffsets against the snapshot, check them, split the ranges.

    ``split=False`` leaves splitting to the caller (filter pushdown narrows the ranges first).
    """
    starts = resolve_offsets(options.starting, partitions, offsets, start_times or {}, options, is_start=True)
    ends = resolve_offsets(options.ending, partitions, offsets, end_times or {}, options, is_start=False)
    ranges: list[OffsetRange] = []
    warnings: list[str] = []
    for tp in partitions:
        bounds = offsets[tp]
        bounds.invariants()
        start, end = starts[tp], ends[tp]
        if end > bounds.high_watermark:
            raise errors.exception_class(errors.ErrorCode.OFFSET_OUT_OF_RANGE)(
                f"option '{options.ending.option}': ending offset {end} of {tp} is above its high "
                f"watermark {bounds.high_watermark}; only committed records can be read"
            )
        if start > end:
            raise InvalidOptionError(
                options.starting.option or "startingOffsets",
                f"starting offset {start} of {tp} is after its ending offset {end}",
            )
        start, warning = check_data_loss(tp, start, bounds.log_start_offset, options.fail_on_data_loss)
        warnings.extend(warning)
        ranges.append(OffsetRange(tp, start, max(start, end)))
    if split:
        ranges = split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    return Plan(tuple(ranges), tuple(warnings))


def resolve_offsets(
    spec: OffsetSpec,
    partitions: Sequence[TopicPartition],
    offsets: Mapping[TopicPartition, PartitionOffsets],
    times: Mapping[TopicPartition, int | None],
    options: SourceOptions,
    *,
    is_start: bool,
) -> dict[TopicPartition, int]:
    """Turn a spec into one offset per partition (Spark's KafkaOffsetReader rules)."""
    if spec.kind is OffsetSpecKind.EARLIEST:
        return {tp: offsets[tp].log_start_offset for tp in partitions}
    if spec.kind is OffsetSpecKind.LATEST:
        return {tp: offsets[tp].high_watermark for tp in partitions}
    if spec.kind is OffsetSpecKind.OFFSETS:
        given = spec.as_dict()
        _check_covers(spec, given, partitions)
        return {tp: _sentinel(given[tp], offsets[tp]) for tp in partitions}
    if spec.kind is OffsetSpecKind.TIMESTAMPS:
        _check_covers(spec, spec.as_dict(), partitions)
    return {tp: _offset_of_time(spec, tp, times.get(tp), offsets[tp], options, is_start) for tp in partitions}


def _sentinel(offset: int, bounds: PartitionOffsets) -> int:
    if offset == EARLIEST_OFFSET:
        return bounds.log_start_offset
    if offset == LATEST_OFFSET:
        return bounds.high_watermark
    return offset


def _check_covers(
    spec: OffsetSpec, given: Mapping[TopicPartition, int], partitions: Sequence[TopicPartition]
) -> None:
    """Spark: specific offsets must name exactly the partitions the query reads."""
    missing = sorted(set(partitions) - set(given))
    extra = sorted(set(given) - set(partitions))
    if missing or extra:
        detail = "; ".join(
            part
            for part in (
                f"missing {', '.join(map(str, missing))}" if missing else "",
                f"not subscribed {', '.join(map(str, extra))}" if extra else "",
            )
            if part
        )
        raise InvalidOptionError(spec.option, f"must give a value for every subscribed partition: {detail}")


def _offset_of_time(
    spec: OffsetSpec,
    tp: TopicPartition,
    found: int | None,
    bounds: PartitionOffsets,
    options: SourceOptions,
    is_start: bool,
) -> int:
    """The first offset whose timestamp >= the time; none found -> latest (or an error, per strategy)."""
    if found is not NO_OFFSET_FOR_TIMESTAMP:
        return min(max(found, bounds.log_start_offset), bounds.high_watermark)
    if is_start and options.timestamp_strategy is TimestampStrategy.ERROR:
        raise InvalidOptionError(
            spec.option,
            f"no record of {tp} has a timestamp at or after the one given; set "
            "startingOffsetsByTimestampStrategy=latest to start at the latest offset instead",
        )
    return bounds.high_watermark


def check_data_loss(
    tp: TopicPartition, start: int, log_start_offset: int, fail_on_data_loss: bool
) -> tuple[int, list[str]]:
    """A start below the log start offset: error, or (failOnDataLoss=false) a warning and a skip."""
    if start >= log_start_offset:
        return start, []
    message = f"{tp}: offsets [{start}, {log_start_offset}) are below the log start offset {log_start_offset}"
    if fail_on_data_loss:
        raise DataLossError(message)
    return log_start_offset, [f"{message}; skipping them (failOnDataLoss=false)"]


# --- KafkaOffsetRangeCalculator -------------------------------------------------------------------


def split_ranges(
    ranges: Sequence[OffsetRange], min_partitions: int | None, max_records_per_partition: int | None
) -> list[OffsetRange]:
    """Spark's ``KafkaOffsetRangeCalculator.getRanges``: drop empty ranges, then split large ones."""
    non_empty = [r for r in ranges if r.size > 0]
    if max_records_per_partition is None and (min_partitions is None or len(non_empty) >= min_partitions):
        return non_empty
    divided = non_empty
    if max_records_per_partition is not None:
        divided = [
            piece for r in non_empty for piece in _divide(r, math.ceil(r.size / max_records_per_partition))
        ]
    if min_partitions is None or min_partitions <= len(divided):
        return divided
    total = sum(r.size for r in divided)
    unsplit = [r for r in divided if _part_count(r.size, total, min_partitions) == 1]
    unsplit_tps = {r.topic_partition for r in unsplit}
    split_total = total - sum(r.size for r in unsplit)
    split_min_partitions = max(min_partitions - len(unsplit), 1)
    result: list[OffsetRange] = []
    for r in divided:
        parts = (
            1 if r.topic_partition in unsplit_tps else _part_count(r.size, split_total, split_min_partitions)
        )
        result.extend(_divide(r, parts))
    return result


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Java's Math.round rounds half up; Python's round() rounds half to even.
    return max(math.floor(size / total * min_parts + 0.5), 1)


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """Even pieces by integer division; the last piece takes the rounding remainder."""
    pieces: list[OffsetRange] = []
    remaining, start = r.size, r.from_offset
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, r.until_offset)
        if end > start:
            pieces.append(OffsetRange(r.topic_partition, start, end))
        start = end
    return pieces


# --- streaming ------------------------------------------------------------------------------------


def rate_limit(
    max_records: int, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Spark's ``KafkaMicroBatchStream.rateLimit``: share ``max_records`` by each partition's backlog.

    ``start`` must hold every partition of ``latest`` (new partitions at their log start offset). A
    partition whose share is below one record still gets one, so small partitions never starve.
    """
    sizes = {tp: end - start[tp] for tp, end in latest.items() if end - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    limited: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        if tp not in sizes:
            limited[tp] = end
            continue
        prorate = max_records * (sizes[tp] / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        limited[tp] = min(end, start[tp] + share)
    return limited


def plan_stream(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    log_start_offsets: Mapping[TopicPartition, int],
    fail_on_data_loss: bool,
) -> Plan:
    """Ranges of one micro-batch. Partitions new since ``start`` begin at their log start offset."""
    ranges: list[OffsetRange] = []
    warnings: list[str] = []
    for tp in sorted(set(start) - set(end)):
        if fail_on_data_loss:
            raise DataLossError(f"{tp} was read before but is gone now")
        warnings.append(f"{tp} is gone; not reading it any more (failOnDataLoss=false)")
    for tp, until in sorted(end.items()):
        begin = start.get(tp, log_start_offsets.get(tp, 0))
        if until < begin:
            if fail_on_data_loss:
                raise DataLossError(f"{tp}: offset went back from {begin} to {until}")
            warnings.append(
                f"{tp}: offset went back from {begin} to {until}; skipping (failOnDataLoss=false)"
            )
            continue
        begin, warning = check_data_loss(tp, begin, log_start_offsets.get(tp, 0), fail_on_data_loss)
        warnings.extend(warning)
        if until > begin:
            ranges.append(OffsetRange(tp, begin, until))
    return Plan(tuple(ranges), tuple(warnings))


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """Checkpoint form ``{topic: {"partition": offset}}`` (JSON object keys are strings)."""
    doc: dict[str, dict[str, int]] = {}
    for tp, offset in sorted(offsets.items()):
        doc.setdefault(tp.topic, {})[str(tp.partition)] = offset
    return doc


def offsets_from_json(doc: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {TopicPartition(t, int(p)): int(o) for t, by_p in doc.items() for p, o in by_p.items()}
