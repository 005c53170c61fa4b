"""Filter pushdown: which Spark filters narrow the planned offset ranges, applied exactly.

Spark (>= 4.1) offers the reader the conjuncts of a query's WHERE clause as ``pyspark.sql.datasource``
``Filter`` objects; the reader returns those it does not take, and Spark evaluates those itself. A
filter we take must be applied *exactly*, because Spark will not look at it again:

=====================================  ==========================================================
filter                                 how it is applied
=====================================  ==========================================================
``topic = 'x'``, ``topic IN (...)``    partitions of other topics are not planned
``partition = n``, ``partition IN``    other partitions are not planned
``offset = / > / >= / < / <=``         every range is cut to the offset interval (ranges are exact)
``timestamp >= t``                     ranges start at ListOffsets-by-time(t) (the time index), and
                                       workers drop records with an earlier timestamp, since
                                       Kafka timestamps need not rise with offsets
=====================================  ==========================================================

Several accepted filters are ANDed (intersected). Anything else — ``IN`` on offsets, ``timestamp <``,
``NOT``, string matches, other columns — is returned to Spark untouched.

Pure: no I/O. The time lookups are done by the caller and passed to ``narrow``.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proto.kafka_types import TopicPartition
from spark.options import SourceOptions
from spark.planning import OffsetRange, Plan, split_ranges

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
US_PER_MS = 1000


@dataclass(frozen=True)
class PushedFilters:
    """The accepted filters, combined. None = no constraint."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    offset_from: int | None = None  # inclusive
    offset_until: int | None = None  # exclusive
    min_timestamp_ms: int | None = None  # inclusive

    def keeps(self, tp: TopicPartition) -> bool:
        return (self.topics is None or tp.topic in self.topics) and (
            self.partitions is None or tp.partition in self.partitions
        )


def accept(filters: Sequence[Any]) -> tuple[PushedFilters, list[Any]]:
    """Split Spark's filters into what we apply (combined) and what Spark must still apply."""
    pushed = PushedFilters()
    rejected: list[Any] = []
    for spark_filter in filters:
        narrowed = _accept_one(pushed, spark_filter)
        if narrowed is None:
            rejected.append(spark_filter)
        else:
            pushed = narrowed
    return pushed, rejected


def _accept_one(pushed: PushedFilters, f: Any) -> PushedFilters | None:
    kind = type(f).__name__
    column = getattr(f, "attribute", ())
    if column == ("topic",) and kind in ("EqualTo", "In"):
        values = _values(f, str)
        return None if values is None else replace(pushed, topics=_intersect(pushed.topics, values))
    if column == ("partition",) and kind in ("EqualTo", "In"):
        values = _values(f, int)
        return None if values is None else replace(pushed, partitions=_intersect(pushed.partitions, values))
    if column == ("offset",) and _is_int(getattr(f, "value", None)):
        return _offset_bound(pushed, kind, f.value)
    if column == ("timestamp",) and kind == "GreaterThanOrEqual" and isinstance(f.value, dt.datetime):
        ms = _ceil_ms(f.value)
        current = pushed.min_timestamp_ms
        return replace(pushed, min_timestamp_ms=ms if current is None else max(current, ms))
    return None


def _values(f: Any, kind: type) -> frozenset | None:
    values = (f.value,) if type(f).__name__ == "EqualTo" else tuple(f.value)
    if not all(isinstance(v, kind) and not isinstance(v, bool) for v in values):
        return None
    return frozenset(values)


def _intersect(current: frozenset | None, values: frozenset) -> frozenset:
    return values if current is None else current & values


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _offset_bound(pushed: PushedFilters, kind: str, value: int) -> PushedFilters | None:
    lower = {"EqualTo": value, "GreaterThan": value + 1, "GreaterThanOrEqual": value}.get(kind)
    upper = {"EqualTo": value + 1, "LessThan": value, "LessThanOrEqual": value + 1}.get(kind)
    if lower is None and upper is None:
        return None
    if lower is not None:
        pushed = replace(
            pushed, offset_from=lower if pushed.offset_from is None else max(pushed.offset_from, lower)
        )
    if upper is not None:
        pushed = replace(
            pushed, offset_until=upper if pushed.offset_until is None else min(pushed.offset_until, upper)
        )
    return pushed


def _ceil_ms(value: dt.datetime) -> int:
    """Records carry ms: ``ts_ms * 1000 >= t_us`` exactly when ``ts_ms >= ceil(t_us / 1000)``.

    PySpark hands a ``timestamp`` literal over as an aware datetime (its variant decoding); a naive
    one (``timestamp_ntz``) is read as UTC.
    """
    aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
    delta = aware - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return math.ceil(micros / US_PER_MS)


def narrow(
    plan: Plan,
    pushed: PushedFilters,
    time_offsets: Mapping[TopicPartition, int | None],
    options: SourceOptions,
) -> Plan:
    """Cut each planned range to the pushed bounds, then split as Spark's Kafka source does."""
    ranges: list[OffsetRange] = []
    for r in plan.ranges:
        if not pushed.keeps(r.topic_partition):
            continue
        start, end = r.from_offset, r.until_offset
        if pushed.offset_from is not None:
            start = max(start, pushed.offset_from)
        if pushed.offset_until is not None:
            end = min(end, pushed.offset_until)
        if r.topic_partition in time_offsets:
            found = time_offsets[r.topic_partition]
            start = end if found is None else max(start, found)
        if end > start:
            ranges.append(OffsetRange(r.topic_partition, start, end))
    split = split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    return Plan(tuple(split), plan.warnings)
