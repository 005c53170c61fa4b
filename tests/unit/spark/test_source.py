"""The Data Source's driver-side logic with an in-memory BrokerClient (no SparkSession).

Rules: batch planning reads each partition's HW once and plans below it; pushed filters narrow the
plan; streaming offsets are {topic: {"partition": offset}}, latestOffset is the HW (never below the
start, so a new leader's briefly lower HW is not data loss), cut by maxOffsetsPerTrigger as
Spark's Kafka source does; new partitions start at their log start offset; Trigger.AvailableNow
stops at the HW seen when it was prepared.
"""

from __future__ import annotations

import datetime as dt

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from proto.kafka_types import TopicPartition
from spark import source
from spark.client import FetchResult
from spark.options import EARLIEST_OFFSET, LATEST_OFFSET
from spark.planning import OffsetRange

T0, T1, T2 = (TopicPartition("t", p) for p in range(3))


class MemoryClient:
    """Partition bounds only: (log start offset, HW) per partition; counts ListOffsets calls."""

    def __init__(self, bounds: dict[TopicPartition, tuple[int, int]]) -> None:
        self.bounds = bounds
        self.list_offsets_calls = 0

    def partition_counts(self, topics):
        counts: dict[str, int] = {}
        for tp in self.bounds:
            counts[tp.topic] = max(counts.get(tp.topic, 0), tp.partition + 1)
        return {t: c for t, c in counts.items() if topics is None or t in topics}

    def list_offsets(self, queries):
        self.list_offsets_calls += 1
        answers = {}
        for tp, query in queries.items():
            start, hw = self.bounds[tp]
            if query == EARLIEST_OFFSET:
                answers[tp] = start
            elif query == LATEST_OFFSET:
                answers[tp] = hw
            else:  # timestamps are offset * 10 in this fake
                answers[tp] = max(start, -(-query // 10)) if query // 10 < hw else None
        return answers

    def fetch(self, tp, fetch_offset, max_wait_ms=0):  # pragma: no cover - driver side only
        return FetchResult(b"", 0, 0)

    def close(self) -> None:
        pass


@pytest.fixture
def client(monkeypatch):
    memory = MemoryClient({T0: (0, 100), T1: (10, 40)})
    monkeypatch.setattr(source, "make_client", lambda options: memory)
    return memory


OPTS = {"bootstrap.servers": "h:1", "subscribe": "t"}


def ranges(partitions) -> list[OffsetRange]:
    return [p.value for p in partitions]


def test_batch_plan(client) -> None:
    reader = source.PykraftDataSource(dict(OPTS)).reader(schema=None)
    assert ranges(reader.partitions()) == [OffsetRange(T0, 0, 100), OffsetRange(T1, 10, 40)]
    assert client.list_offsets_calls == 2  # earliest and latest, once each


def test_batch_plan_with_pushed_filters(client) -> None:
    reader = source.PykraftPushdownDataSource(dict(OPTS)).reader(schema=None)
    ts = dt.datetime.fromtimestamp(0.5, tz=dt.UTC)  # 500 ms -> offset 50 in the fake's time index
    rejected = list(reader.pushFilters([EqualTo(("partition",), 0), GreaterThanOrEqual(("timestamp",), ts)]))
    assert rejected == []
    assert ranges(reader.partitions()) == [OffsetRange(T0, 50, 100)]


def test_schema_follows_include_headers() -> None:
    plain = source.PykraftDataSource(dict(OPTS)).schema()
    with_headers = source.PykraftDataSource({**OPTS, "includeHeaders": "true"}).schema()
    assert plain.fieldNames()[-1] == "timestampType" and with_headers.fieldNames()[-1] == "headers"


def stream(extra: dict[str, str] | None = None):
    return source.PykraftDataSource({**OPTS, **(extra or {})}).streamReader(schema=None)


def test_stream_initial_and_latest_offsets(client) -> None:
    reader = stream({"startingOffsets": "earliest"})
    start = reader.initialOffset()
    assert start == {"t": {"0": 0, "1": 10}}
    assert reader.latestOffset(start, ReadAllAvailable()) == {"t": {"0": 100, "1": 40}}
    assert stream().initialOffset() == {"t": {"0": 100, "1": 40}}  # default: latest


def test_stream_rate_limit_and_default_read_limit(client) -> None:
    reader = stream({"startingOffsets": "earliest", "maxOffsetsPerTrigger": "26"})
    assert reader.getDefaultReadLimit() == ReadMaxRows(26)
    end = reader.latestOffset({"t": {"0": 0, "1": 10}}, ReadMaxRows(26))
    assert end == {"t": {"0": 20, "1": 16}}  # 100:30 backlog split of 26
    assert ranges(reader.partitions({"t": {"0": 0, "1": 10}}, end)) == [
        OffsetRange(T0, 0, 20),
        OffsetRange(T1, 10, 16),
    ]


def test_stream_new_partition_starts_at_log_start(client) -> None:
    reader = stream()
    client.bounds[T2] = (5, 9)
    end = reader.latestOffset({"t": {"0": 100, "1": 40}}, ReadAllAvailable())
    assert end == {"t": {"0": 100, "1": 40, "2": 9}}
    assert ranges(reader.partitions({"t": {"0": 100, "1": 40}}, end)) == [OffsetRange(T2, 5, 9)]


def test_stream_lower_high_watermark_is_not_going_back(client) -> None:
    """A new leader's HW may briefly trail what was already read: latest stays at the start."""
    client.bounds[T0] = (0, 90)
    assert stream().latestOffset({"t": {"0": 100, "1": 40}}, ReadAllAvailable()) == {"t": {"0": 100, "1": 40}}


def test_stream_available_now_stops_at_prepared_high_watermark(client) -> None:
    reader = stream({"startingOffsets": "earliest"})
    reader.prepareForTriggerAvailableNow()
    client.bounds[T0] = (0, 150)
    client.bounds[T2] = (0, 5)
    assert reader.latestOffset({"t": {"0": 0, "1": 10}}, ReadAllAvailable()) == {
        "t": {"0": 100, "1": 40, "2": 0}
    }


def test_stream_partitions_empty_when_nothing_new(client) -> None:
    assert stream().partitions({"t": {"0": 100}}, {"t": {"0": 100}}) == []


def test_the_source_depends_on_no_grpc_data_plane() -> None:
    """Issue 16: the Spark source reads over the Kafka protocol only — no grpc, no generated protobuf
    module (the gRPC data plane, proto/broker.proto, is gone; nothing of the rest is the reader's)."""
    import ast
    from pathlib import Path

    package = Path(source.__file__).parent
    offenders = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{alias.name}" for alias in node.names]
            offenders += [
                f"{path.name}: {name}"
                for name in names
                if name.split(".")[0] == "grpc"
                or (name.split(".")[0] == "proto" and "_pb2" in name)
            ]
    assert len(list(package.glob("*.py"))) >= 9, package
    assert offenders == []
