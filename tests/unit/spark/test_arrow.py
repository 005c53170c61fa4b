"""Fetched batches -> Arrow: the schema Spark demands, every codec, headers, and the range cut.

Rules under test: a yielded RecordBatch matches ``to_arrow_schema(schema, timezone="UTC")``
exactly (PySpark refuses anything else); records before the range start (inside the first batch)
are skipped; a record at offset >= the range end is never emitted even when its batch extends past
it; control batches are skipped; a trailing partial batch is left for the next fetch.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from pyspark.sql.pandas.types import to_arrow_schema

from spark.arrow import decode_range
from spark.schema import arrow_schema, kafka_schema
from storage.batch_header import CorruptRecordError, patch_offset_and_epoch
from storage.compression import CompressionType
from storage.record_batch import TimestampType, build_batch

BASE_TS = 1_700_000_000_000


def batch_at(base_offset: int, records, **kwargs) -> bytes:
    data = bytearray(build_batch(records, **kwargs))
    patch_offset_and_epoch(data, 0, base_offset, 0)
    return bytes(data)


def sample(n: int, start: int = 0):
    return [
        (
            None if i % 5 == 0 else f"key-{i}".encode(),
            None if i % 7 == 0 else (f"value-{i}-" * 10).encode(),
            [("a", f"{i}".encode()), ("b", None)] if i % 2 else [],
            BASE_TS + i,
        )
        for i in range(start, start + n)
    ]


def decode(data: bytes, start: int, end: int, headers: bool = True, **kwargs):
    return decode_range(data, start, end, topic="t", partition=3, include_headers=headers, **kwargs)


@pytest.mark.parametrize("include_headers", [False, True], ids=["no-headers", "headers"])
def test_arrow_schema_is_exactly_what_spark_expects(include_headers: bool) -> None:
    """PySpark compares a yielded batch's schema with to_arrow_schema(schema) for equality."""
    expected = to_arrow_schema(kafka_schema(include_headers), timezone="UTC")
    assert arrow_schema(include_headers) == expected
    assert all(field.nullable for field in expected)


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
def test_every_codec_round_trips(codec: CompressionType) -> None:
    """Every Kafka codec decodes to the same rows, keys/values/headers byte for byte."""
    recs = sample(50)
    result = decode(batch_at(100, recs, compression=codec), 100, 150)
    assert result.next_offset == 150
    assert result.batch.schema == arrow_schema(True)
    rows = result.batch.to_pylist()
    assert [r["offset"] for r in rows] == list(range(100, 150))
    for row, (key, value, headers, ts) in zip(rows, recs, strict=True):
        assert (row["key"], row["value"]) == (key, value)
        assert row["headers"] == [{"key": k, "value": v} for k, v in headers]
        assert row["timestamp"] == dt.datetime.fromtimestamp(ts / 1000, tz=dt.UTC)
        assert (row["topic"], row["partition"], row["timestampType"]) == ("t", 3, 0)


def test_kafka_python_built_batches_decode() -> None:
    """Batches written by another Kafka client (kafka-python's builder, gzip) read the same."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=1, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    for i in range(20):
        builder.append(i, timestamp=BASE_TS + i, key=b"k%d" % i, value=b"v" * 50, headers=[("h", b"x")])
    data = bytearray(builder.build())
    patch_offset_and_epoch(data, 0, 40, 0)
    rows = decode(bytes(data), 45, 60).batch.to_pylist()
    assert [r["offset"] for r in rows] == list(range(45, 60))
    assert rows[0]["key"] == b"k5" and rows[0]["headers"] == [{"key": "h", "value": b"x"}]


def test_range_cut_on_both_sides() -> None:
    """Skip records before the start inside the first batch; never emit at or past the end."""
    data = batch_at(0, sample(10)) + batch_at(10, sample(10, 10)) + batch_at(20, sample(10, 20))
    result = decode(data, 5, 23)
    assert result.batch.column("offset").to_pylist() == list(range(5, 23))
    assert result.next_offset == 30  # the last whole batch seen; the caller stops at 23 anyway


def test_batches_wholly_past_the_end_are_not_scanned() -> None:
    data = batch_at(0, sample(10)) + batch_at(10, sample(10))
    result = decode(data, 0, 10)
    assert result.batch.num_rows == 10 and result.next_offset == 10


def test_log_append_time_and_control_batches() -> None:
    """LogAppendTime records take the batch's max timestamp (type 1); control batches are skipped."""
    data = (
        batch_at(0, sample(3), timestamp_type=TimestampType.LOG_APPEND_TIME)
        + batch_at(3, [(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", (), BASE_TS)], control=True)
        + batch_at(4, sample(2))
    )
    result = decode(data, 0, 6)
    table = result.batch.to_pydict()
    assert table["offset"] == [0, 1, 2, 4, 5]
    assert table["timestampType"] == [1, 1, 1, 0, 0]
    max_ts = dt.datetime.fromtimestamp((BASE_TS + 2) / 1000, tz=dt.UTC)
    assert table["timestamp"][:3] == [max_ts] * 3
    assert result.next_offset == 6


def test_only_a_control_batch_moves_the_position() -> None:
    data = batch_at(7, [(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", (), BASE_TS)], control=True)
    result = decode(data, 7, 100)
    assert result.batch is None and result.next_offset == 8


def test_trailing_partial_batch_is_left_for_the_next_fetch() -> None:
    whole, partial = batch_at(0, sample(5)), batch_at(5, sample(5))
    result = decode(whole + partial[: len(partial) // 2], 0, 10)
    assert result.batch.num_rows == 5 and result.next_offset == 5


def test_min_timestamp_filter_is_exact_when_timestamps_go_back() -> None:
    """A pushed ``timestamp >= t`` drops exactly the earlier records, wherever they are."""
    recs = [(None, b"v", (), BASE_TS + ts) for ts in (5, 1, 9, 3, 7)]
    result = decode(batch_at(0, recs), 0, 5, min_timestamp_ms=BASE_TS + 5)
    assert result.batch.column("offset").to_pylist() == [0, 2, 4]
    none_left = decode(batch_at(0, recs), 0, 5, min_timestamp_ms=BASE_TS + 10)
    assert none_left.batch is None and none_left.next_offset == 5


def test_empty_fetch_keeps_position() -> None:
    result = decode(b"", 42, 50)
    assert result.batch is None and result.next_offset == 42


def test_corrupt_batch_is_an_error() -> None:
    """A bad CRC surfaces as CorruptRecordError, never as wrong rows."""
    data = bytearray(batch_at(0, sample(5)))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode(bytes(data), 0, 5)


def test_without_headers_column_and_arrow_types() -> None:
    result = decode(batch_at(0, sample(4)), 0, 4, headers=False)
    assert result.batch.schema == arrow_schema(False)
    assert result.batch.column("partition").type == pa.int32()
    assert result.batch.column("timestamp").type == pa.timestamp("us", tz="UTC")
