"""Offset-range planning: the HW read once at planning is every range's ceiling; Spark's split rules.

Splitting is checked against Spark's own KafkaOffsetRangeCalculatorSuite cases; rate limiting
against KafkaMicroBatchStream.rateLimit; data loss against failOnDataLoss's documented meaning.
"""

from __future__ import annotations

import pytest

from proto import errors
from proto.kafka_types import TopicPartition
from spark.options import InvalidOptionError, parse_options
from spark.planning import (
    DataLossError,
    OffsetRange,
    PartitionOffsets,
    offsets_from_json,
    offsets_to_json,
    plan_batch,
    plan_stream,
    rate_limit,
    resolve_partitions,
    split_ranges,
    timestamps_to_look_up,
)

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))
U0 = TopicPartition("u", 0)


def r(tp: TopicPartition, start: int, end: int) -> OffsetRange:
    return OffsetRange(tp, start, end)


def options(**extra: str):
    return parse_options({"bootstrap.servers": "h:1", "subscribe": "t", **extra}, streaming=False)


SPLITS = [
    # (ranges, minPartitions, maxRecordsPerPartition, expected) — KafkaOffsetRangeCalculatorSuite
    ([r(T0, 1, 5)], None, None, [r(T0, 1, 5)]),
    ([r(T0, 1, 5), r(T1, 3, 3)], None, None, [r(T0, 1, 5)]),
    ([r(T0, 1, 5)], 1, None, [r(T0, 1, 5)]),
    ([r(T0, 1, 5), r(T1, 1, 5)], 2, None, [r(T0, 1, 5), r(T1, 1, 5)]),
    ([r(T0, 1, 5)], 3, None, [r(T0, 1, 2), r(T0, 2, 3), r(T0, 3, 5)]),
    ([r(T0, 1, 5), r(T1, 1, 3)], 3, None, [r(T0, 1, 3), r(T0, 3, 5), r(T1, 1, 3)]),
    (
        [r(T0, 1, 5), r(T1, 1, 10), r(T2, 1, 1)],
        3,
        None,
        [r(T0, 1, 5), r(T1, 1, 5), r(T1, 5, 10)],
    ),
    (
        [r(T0, 1, 10000), r(T1, 1, 100), r(T2, 1, 2)],
        4,
        None,
        [r(T0, 1, 5000), r(T0, 5000, 10000), r(T1, 1, 100), r(T2, 1, 2)],
    ),
    ([r(T0, 1, 5)], None, 2, [r(T0, 1, 3), r(T0, 3, 5)]),
    ([r(T0, 1, 6)], None, 2, [r(T0, 1, 2), r(T0, 2, 4), r(T0, 4, 6)]),
    ([r(T0, 1, 5), r(T1, 1, 2)], None, 10, [r(T0, 1, 5), r(T1, 1, 2)]),
    ([r(T0, 1, 101)], 4, 50, [r(T0, 1, 26), r(T0, 26, 51), r(T0, 51, 76), r(T0, 76, 101)]),
    ([r(T0, 0, 0)], 4, None, []),
]


@pytest.mark.parametrize(
    ("ranges", "min_partitions", "max_records", "expected"),
    SPLITS,
    ids=[
        "no-options",
        "empty-range-dropped",
        "min1",
        "enough-partitions",
        "min3-one-range",
        "min3-proportional",
        "min3-empty-and-small",
        "small-ranges-not-split",
        "maxRecords2",
        "maxRecords-remainder-last",
        "maxRecords-above-size",
        "maxRecords-then-min",
        "all-empty",
    ],
)
def test_split_ranges_like_kafka_offset_range_calculator(
    ranges, min_partitions, max_records, expected
) -> None:
    """Spark's KafkaOffsetRangeCalculator: empty ranges dropped; large ranges split proportionally."""
    assert split_ranges(ranges, min_partitions, max_records) == expected


SNAPSHOT = {T0: PartitionOffsets(10, 100), T1: PartitionOffsets(0, 50)}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({}, [r(T0, 10, 100), r(T1, 0, 50)]),
        ({"startingOffsets": '{"t":{"0":20,"1":-2}}'}, [r(T0, 20, 100), r(T1, 0, 50)]),
        ({"endingOffsets": '{"t":{"0":30,"1":-1}}'}, [r(T0, 10, 30), r(T1, 0, 50)]),
        (
            {"startingOffsets": '{"t":{"0":100,"1":50}}'},
            [],
        ),
        ({"minPartitions": "4"}, [r(T0, 10, 40), r(T0, 40, 70), r(T0, 70, 100), r(T1, 0, 50)]),
        (
            {"startingOffsets": '{"t":{"0":5,"1":0}}', "failOnDataLoss": "false"},
            [r(T0, 10, 100), r(T1, 0, 50)],
        ),
    ],
    ids=["earliest-latest", "explicit-start", "explicit-end", "empty", "min-partitions", "skip-lost"],
)
def test_plan_batch_ranges(extra: dict[str, str], expected: list[OffsetRange]) -> None:
    """Batch: [start, end) per partition, end at most the HW read at planning."""
    plan = plan_batch(options(**extra), [T0, T1], SNAPSHOT)
    assert list(plan.ranges) == expected
    for planned in plan.ranges:
        planned.invariants()
        assert planned.until_offset <= SNAPSHOT[planned.topic_partition].high_watermark


def test_data_loss_warning_when_not_failing() -> None:
    """failOnDataLoss=false: a start below the log start offset is a warning and a skip."""
    plan = plan_batch(
        options(startingOffsets='{"t":{"0":5,"1":0}}', failOnDataLoss="false"), [T0, T1], SNAPSHOT
    )
    assert len(plan.warnings) == 1 and "t-0" in plan.warnings[0] and "[5, 10)" in plan.warnings[0]


BAD_PLANS = [
    ({"startingOffsets": '{"t":{"0":5,"1":0}}'}, DataLossError, "failOnDataLoss=false"),
    ({"endingOffsets": '{"t":{"0":101,"1":-1}}'}, errors.OffsetOutOfRangeError, "high watermark 100"),
    (
        {"startingOffsets": '{"t":{"0":60,"1":0}}', "endingOffsets": '{"t":{"0":50,"1":-1}}'},
        InvalidOptionError,
        "after",
    ),
    ({"startingOffsets": '{"t":{"0":20}}'}, InvalidOptionError, "missing t-1"),
    ({"startingOffsets": '{"t":{"0":20,"1":0,"2":0}}'}, InvalidOptionError, "not subscribed t-2"),
    ({"startingOffsetsByTimestamp": '{"t":{"0":1000}}'}, InvalidOptionError, "missing t-1"),
]


@pytest.mark.parametrize(
    ("extra", "error", "fragment"),
    BAD_PLANS,
    ids=[
        "data-loss",
        "end-above-hw",
        "start-after-end",
        "missing-partition",
        "extra-partition",
        "ts-missing",
    ],
)
def test_plan_batch_errors(extra: dict[str, str], error: type[Exception], fragment: str) -> None:
    """Bad ranges fail at planning with a named error, before any task runs."""
    with pytest.raises(error) as info:
        plan_batch(options(**extra), [T0, T1], SNAPSHOT)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("extra", "start_times", "end_times", "expected"),
    [
        ({"startingTimestamp": "1000"}, {T0: 40, T1: 3}, {}, [r(T0, 40, 100), r(T1, 3, 50)]),
        ({"startingTimestamp": "1000"}, {T0: 5, T1: 70}, {}, [r(T0, 10, 100)]),
        (
            {"startingTimestamp": "1000", "startingOffsetsByTimestampStrategy": "latest"},
            {T0: None, T1: 3},
            {},
            [r(T1, 3, 50)],
        ),
        ({"endingTimestamp": "1000"}, {}, {T0: 20, T1: None}, [r(T0, 10, 20), r(T1, 0, 50)]),
    ],
    ids=["start-by-time", "clamped-to-bounds", "no-match-latest", "end-by-time-no-match-is-latest"],
)
def test_plan_batch_timestamps(extra, start_times, end_times, expected) -> None:
    """Timestamps resolve through ListOffsets-by-time; no match: latest (or an error for a start)."""
    plan = plan_batch(options(**extra), [T0, T1], SNAPSHOT, start_times, end_times)
    assert list(plan.ranges) == expected


def test_start_timestamp_without_match_is_an_error_by_default() -> None:
    """startingOffsetsByTimestampStrategy=error (Spark's default) refuses a timestamp with no match."""
    with pytest.raises(InvalidOptionError, match="startingOffsetsByTimestampStrategy=latest"):
        plan_batch(options(startingTimestamp="1000"), [T0, T1], SNAPSHOT, {T0: None, T1: 1}, {})


def test_timestamps_to_look_up() -> None:
    assert timestamps_to_look_up(options(startingTimestamp="7").starting, [T0, T1]) == {T0: 7, T1: 7}
    spec = options(startingOffsetsByTimestamp='{"t":{"1":9}}').starting
    assert timestamps_to_look_up(spec, [T1]) == {T1: 9}
    assert timestamps_to_look_up(options().starting, [T0]) == {}


@pytest.mark.parametrize(
    ("raw", "counts", "streaming", "expected"),
    [
        ({"subscribe": "t,u"}, {"t": 2, "u": 1, "v": 1}, False, [T0, T1, U0]),
        ({"subscribePattern": "[tu]"}, {"t": 1, "u": 1, "tt": 1}, False, [T0, U0]),
        ({"assign": '{"t":[1]}'}, {"t": 2}, False, [T1]),
        ({"subscribe": "t,u"}, {"t": 1}, True, [T0]),
        ({"assign": '{"t":[0,2]}'}, {"t": 2}, True, [T0]),
    ],
    ids=[
        "subscribe",
        "pattern",
        "assign",
        "streaming-missing-topic-waits",
        "streaming-missing-partition-waits",
    ],
)
def test_resolve_partitions(raw, counts, streaming, expected) -> None:
    subscription = parse_options({"bootstrap.servers": "h:1", **raw}, streaming=streaming).subscription
    assert resolve_partitions(subscription, counts, streaming=streaming) == expected


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [({"subscribe": "t,nope"}, "nope"), ({"assign": '{"t":[0,5]}'}, "t-5")],
    ids=["unknown-topic", "unknown-partition"],
)
def test_resolve_partitions_batch_refuses_missing(raw, fragment) -> None:
    """A batch query naming a partition that does not exist would silently read nothing: refuse."""
    subscription = parse_options({"bootstrap.servers": "h:1", **raw}, streaming=False).subscription
    with pytest.raises(errors.UnknownTopicOrPartitionError, match=fragment):
        resolve_partitions(subscription, {"t": 2}, streaming=False)


@pytest.mark.parametrize(
    ("limit", "start", "latest", "expected"),
    [
        (10, {T0: 0, T1: 0}, {T0: 10, T1: 10}, {T0: 5, T1: 5}),
        (10, {T0: 0, T1: 0}, {T0: 100, T1: 1}, {T0: 9, T1: 1}),
        (1000, {T0: 0, T1: 5}, {T0: 10, T1: 10}, {T0: 10, T1: 10}),
        (3, {T0: 4, T1: 4}, {T0: 4, T1: 4}, {T0: 4, T1: 4}),
        (2, {T0: 0, T1: 0, T2: 0}, {T0: 10, T1: 10, T2: 10}, {T0: 1, T1: 1, T2: 1}),
    ],
    ids=["even", "proportional", "under-limit", "nothing-new", "small-shares-rounded-up"],
)
def test_rate_limit_like_spark(limit, start, latest, expected) -> None:
    """maxOffsetsPerTrigger: share the limit by backlog; shares below one record round up to one."""
    assert rate_limit(limit, start, latest) == expected


def test_plan_stream_new_partition_starts_at_log_start() -> None:
    """A partition that appears mid-stream is read from its earliest offset (Spark's rule)."""
    plan = plan_stream({T0: 5}, {T0: 9, T1: 4}, {T0: 0, T1: 2}, fail_on_data_loss=True)
    assert list(plan.ranges) == [r(T0, 5, 9), r(T1, 2, 4)]


@pytest.mark.parametrize(
    ("start", "end", "log_start"),
    [({T0: 5, T1: 1}, {T0: 9}, {T0: 0}), ({T0: 5}, {T0: 3}, {T0: 0}), ({T0: 5}, {T0: 9}, {T0: 7})],
    ids=["partition-gone", "offset-went-back", "below-log-start"],
)
def test_plan_stream_data_loss(start, end, log_start) -> None:
    """failOnDataLoss=true: vanished partitions, offsets going back, deleted records are errors."""
    with pytest.raises(DataLossError):
        plan_stream(start, end, log_start, fail_on_data_loss=True)
    plan = plan_stream(start, end, log_start, fail_on_data_loss=False)
    assert plan.warnings
    for planned in plan.ranges:
        planned.invariants()


def test_offsets_json_round_trip() -> None:
    """Checkpointed offsets are {topic: {"partition": offset}}: JSON object keys are strings."""
    offsets = {T0: 3, T1: 4, U0: 0}
    doc = offsets_to_json(offsets)
    assert doc == {"t": {"0": 3, "1": 4}, "u": {"0": 0}}
    assert offsets_from_json(doc) == offsets
