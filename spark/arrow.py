"""Fetched RecordBatch bytes -> one ``pyarrow.RecordBatch`` in the Kafka source schema, on the worker.

A Fetch returns whole v2 batches starting with the one that *contains* the fetch offset, so the
bytes handed here may hold records on both sides of the task's offset range ``[from, until)``:

- records before ``from_offset`` (the head of the first batch) are skipped;
- records at or after ``until_offset`` are never emitted, even when a fetched batch extends past it
  (``until_offset`` is the HW read at planning, or an explicit ending offset: the snapshot);
- control batches (transaction markers) carry no user records: skipped, but the position moves past;
- a trailing partial batch (a fetch cut at its byte limit) is left for the next fetch.

``next_offset`` tells the caller where to fetch next: the next offset after the last whole batch
seen, so offsets missing inside a batch (compaction) never make the reader loop.

Decoding uses ``storage.record_batch.decode_columns`` (CRC-checked, every codec), which hands out
plain column lists that Arrow turns into arrays at C speed; no per-record Python object is made.

Thread-safety: pure functions.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from spark.schema import ARROW_HEADER, ARROW_HEADERS, ARROW_TIMESTAMP, arrow_schema
from storage.batch_header import HEADER_SIZE, parse_header
from storage.record_batch import decode_columns

US_PER_MS = 1000


@dataclass(frozen=True)
class DecodedRange:
    """The records of a fetch that fall in the range, and where the next fetch starts."""

    batch: pa.RecordBatch | None  # None when no record of the fetch is in range
    next_offset: int


@dataclass(frozen=True)
class _Span:
    """A run of adjacent data batches in the fetched bytes: decoded with one call."""

    start: int
    end: int
    timestamp_types: tuple[tuple[int, int], ...]  # (timestampType, records count) per batch


def decode_range(
    data: bytes,
    from_offset: int,
    until_offset: int,
    *,
    topic: str,
    partition: int,
    include_headers: bool,
    min_timestamp_ms: int | None = None,
) -> DecodedRange:
    """Decode the records of ``data`` inside ``[from_offset, until_offset)`` to one Arrow batch.

    ``min_timestamp_ms`` (a pushed ``timestamp >=`` filter) drops records with an earlier
    timestamp, exactly, since Kafka timestamps need not rise with offsets.
    """
    spans, next_offset = _scan(data, from_offset, until_offset)
    columns = _decode_spans(data, spans)
    offsets = columns["offset"]
    lo = bisect.bisect_left(offsets, from_offset)
    hi = bisect.bisect_left(offsets, until_offset)
    if lo >= hi:
        return DecodedRange(None, next_offset)
    if lo > 0 or hi < len(offsets):
        columns = {name: column[lo:hi] for name, column in columns.items()}
    batch = _to_arrow(columns, topic, partition, include_headers)
    if min_timestamp_ms is not None:
        batch = batch.filter(
            pc.greater_equal(batch.column(5), pa.scalar(min_timestamp_ms * US_PER_MS, ARROW_TIMESTAMP))
        )
        if batch.num_rows == 0:
            return DecodedRange(None, next_offset)
    return DecodedRange(batch, next_offset)


def _scan(data: bytes, from_offset: int, until_offset: int) -> tuple[list[_Span], int]:
    """Walk batch headers: group adjacent data batches that overlap the range; find next_offset."""
    spans: list[_Span] = []
    pos, next_offset = 0, from_offset
    run_start, run_types = -1, []
    while pos + HEADER_SIZE <= len(data):
        header = parse_header(data, pos)
        end = pos + header.size_in_bytes
        if end > len(data) or header.base_offset >= until_offset:
            break
        wanted = not header.is_control and header.next_offset > from_offset
        if wanted:
            if run_start < 0:
                run_start = pos
            run_types.append((header.timestamp_type, header.records_count))
        elif run_start >= 0:
            spans.append(_Span(run_start, pos, tuple(run_types)))
            run_start, run_types = -1, []
        next_offset = max(next_offset, header.next_offset)
        pos = end
    if run_start >= 0:
        spans.append(_Span(run_start, pos, tuple(run_types)))
    return spans, next_offset


def _decode_spans(data: bytes, spans: list[_Span]) -> dict[str, list]:
    if len(spans) == 1 and spans[0].start == 0 and spans[0].end == len(data):
        columns = decode_columns(data)  # the common case: no copy of the fetched bytes
    else:
        columns = {"offset": [], "timestamp": [], "key": [], "value": [], "headers": []}
        for span in spans:
            for name, column in decode_columns(data[span.start : span.end]).items():
                columns[name].extend(column)
    columns["timestampType"] = [
        t for span in spans for t, count in span.timestamp_types for _ in range(count)
    ]
    return columns


def _to_arrow(columns: dict[str, list], topic: str, partition: int, include_headers: bool) -> pa.RecordBatch:
    n = len(columns["offset"])
    arrays = [
        pa.array(columns["key"], pa.binary()),
        pa.array(columns["value"], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(columns["offset"], pa.int64()),
        pa.array(columns["timestamp"], pa.int64()).cast(pa.timestamp("ms", tz="UTC")).cast(ARROW_TIMESTAMP),
        pa.array(columns["timestampType"], pa.int32()),
    ]
    if include_headers:
        arrays.append(_headers_array(columns["headers"]))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))


def _headers_array(headers: list[tuple[tuple[str, bytes | None], ...]]) -> pa.Array:
    """list<struct<key, value>> from per-record header tuples, built flat (no per-record dicts)."""
    list_offsets = [0]
    keys: list[str] = []
    values: list[bytes | None] = []
    for record_headers in headers:
        for key, value in record_headers:
            keys.append(key)
            values.append(value)
        list_offsets.append(len(keys))
    structs = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())], fields=list(ARROW_HEADER)
    )
    return pa.ListArray.from_arrays(pa.array(list_offsets, pa.int32()), structs, type=ARROW_HEADERS)
