"""Filter pushdown: which Spark filters we take, how they combine, and how they cut the ranges.

Rule: a filter we accept is applied exactly (Spark will not evaluate it again); anything we cannot
apply exactly is handed back to Spark.
"""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
)

from proto.kafka_types import TopicPartition
from spark.options import parse_options
from spark.planning import OffsetRange, Plan
from spark.pushdown import PushedFilters, accept, narrow

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))
U0 = TopicPartition("u", 0)
UTC_2023 = dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)  # 1_700_000_000_000 ms


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ([EqualTo(("partition",), 1)], PushedFilters(partitions=frozenset({1}))),
        ([In(("partition",), (0, 2)), EqualTo(("partition",), 2)], PushedFilters(partitions=frozenset({2}))),
        ([In(("topic",), ("t", "u"))], PushedFilters(topics=frozenset({"t", "u"}))),
        (
            [GreaterThan(("offset",), 5), LessThanOrEqual(("offset",), 9)],
            PushedFilters(offset_from=6, offset_until=10),
        ),
        (
            [GreaterThanOrEqual(("offset",), 5), LessThan(("offset",), 9)],
            PushedFilters(offset_from=5, offset_until=9),
        ),
        (
            [EqualTo(("offset",), 7), GreaterThan(("offset",), 3)],
            PushedFilters(offset_from=7, offset_until=8),
        ),
        ([GreaterThanOrEqual(("timestamp",), UTC_2023)], PushedFilters(min_timestamp_ms=1_700_000_000_000)),
        (
            [GreaterThanOrEqual(("timestamp",), UTC_2023 + dt.timedelta(microseconds=1))],
            PushedFilters(min_timestamp_ms=1_700_000_000_001),
        ),
        (
            [
                GreaterThanOrEqual(
                    ("timestamp",),
                    dt.datetime(2023, 11, 15, 0, 13, 20, tzinfo=dt.timezone(dt.timedelta(hours=2))),
                )
            ],
            PushedFilters(min_timestamp_ms=1_700_000_000_000),
        ),
    ],
    ids=[
        "partition-eq",
        "partition-in-and-eq",
        "topic-in",
        "offset-gt-le",
        "offset-ge-lt",
        "offset-eq",
        "timestamp-ge",
        "timestamp-microseconds-round-up",
        "timestamp-other-zone",
    ],
)
def test_accepted_filters(filters, expected) -> None:
    pushed, rejected = accept(filters)
    assert rejected == []
    assert pushed == expected


@pytest.mark.parametrize(
    "spark_filter",
    [
        IsNotNull(("value",)),
        EqualTo(("key",), b"x"),
        In(("offset",), (1, 5)),
        LessThan(("timestamp",), UTC_2023),
        GreaterThan(("timestamp",), UTC_2023),
        Not(EqualTo(("partition",), 1)),
        EqualTo(("partition",), "1"),
        EqualTo(("offset",), True),
        GreaterThan(("partition",), 1),
    ],
    ids=[
        "isnotnull",
        "key",
        "offset-in",
        "ts-lt",
        "ts-gt",
        "not",
        "partition-str",
        "offset-bool",
        "partition-gt",
    ],
)
def test_rejected_filters_go_back_to_spark(spark_filter) -> None:
    pushed, rejected = accept([spark_filter, EqualTo(("partition",), 0)])
    assert rejected == [spark_filter]
    assert pushed == PushedFilters(partitions=frozenset({0}))


OPTIONS = parse_options({"bootstrap.servers": "h:1", "subscribe": "t,u"}, streaming=False)
PLAN = Plan((OffsetRange(T0, 0, 100), OffsetRange(T1, 10, 50), OffsetRange(U0, 0, 5)), ("w",))


@pytest.mark.parametrize(
    ("pushed", "times", "expected"),
    [
        (PushedFilters(), {}, list(PLAN.ranges)),
        (PushedFilters(topics=frozenset({"u"})), {}, [OffsetRange(U0, 0, 5)]),
        (PushedFilters(partitions=frozenset({1})), {}, [OffsetRange(T1, 10, 50)]),
        (
            PushedFilters(offset_from=20, offset_until=60),
            {},
            [OffsetRange(T0, 20, 60), OffsetRange(T1, 20, 50)],
        ),
        (
            PushedFilters(min_timestamp_ms=5),
            {T0: 70, T1: None, U0: 0},
            [OffsetRange(T0, 70, 100), OffsetRange(U0, 0, 5)],
        ),
    ],
    ids=["nothing", "topic", "partition", "offsets", "timestamp-via-time-index"],
)
def test_narrow(pushed, times, expected) -> None:
    """Ranges are cut to the pushed bounds; a partition with no record at/after the time is dropped."""
    narrowed = narrow(PLAN, pushed, times, OPTIONS)
    assert list(narrowed.ranges) == expected
    assert narrowed.warnings == ("w",)


def test_narrow_splits_after_cutting() -> None:
    """minPartitions applies to the narrowed ranges, as if the query had asked for them."""
    options = parse_options(
        {"bootstrap.servers": "h:1", "subscribe": "t", "minPartitions": "2"}, streaming=False
    )
    narrowed = narrow(PLAN, PushedFilters(topics=frozenset({"t"}), partitions=frozenset({0})), {}, options)
    assert list(narrowed.ranges) == [OffsetRange(T0, 0, 50), OffsetRange(T0, 50, 100)]


def test_keeps() -> None:
    pushed = PushedFilters(topics=frozenset({"t"}), partitions=frozenset({0, 2}))
    assert [pushed.keeps(tp) for tp in (T0, T1, T2, U0)] == [True, False, True, False]
