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

Decoding, after every wanted batch is CRC-checked and decompressed with the existing libraries:

- ``spark._decode`` — the compiled decoder (Cython, built at install time by ``setup.py``): one pass
  in C writes every record's fields straight into the Arrow buffers, headers included. It declines
  anything not plainly valid, and then the Python decoder below runs on the same bytes.
- the Python decoder, which is the reference the compiled one is tested against (property test in
  tests/unit/spark/test_compiled_decode.py): ``spark.fast_decode`` (vectorized with
  ``pyarrow.compute``) for the bulk, ``storage.record_batch.decode_columns`` when that declines
  (headers present, or damaged data, which it reports precisely as ``CorruptRecordError``). It is
  also what runs where the compiled module could not be built (the Docker images have no compiler):
  a worker then logs that once.

Thread-safety: pure functions.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from spark.fast_decode import BatchInfo, Columns, FastPathDeclined, decode_batches, i64
from spark.schema import ARROW_HEADER, ARROW_HEADERS, ARROW_TIMESTAMP, arrow_schema
from storage.batch_header import COMPRESSION_MASK, HEADER_SIZE, parse_header, validate_batch
from storage.compression import CompressionType, decompress
from storage.record_batch import TimestampType, decode_columns

try:  # by name: `from spark import _decode` would blame a circular import when it is missing
    compiled = importlib.import_module("spark._decode")
except ImportError as exc:  # not built: the Docker images install without a compiler (setup.py)
    compiled = None
    logging.getLogger(__name__).warning(
        "the compiled Spark decoder spark._decode is not available (%s); using the pure-Python decoder", exc
    )

US_PER_MS = 1000
OFFSET_COLUMN = 4
TIMESTAMP_COLUMN = 5


@dataclass(frozen=True)
class DecodedRange:
    """The records of a fetch that fall in the range, and where the next fetch starts."""

    batch: pa.RecordBatch | None  # None when no record of the fetch is in range
    next_offset: int


def decode_range(
    data: bytes,
    from_offset: int,
    until_offset: int,
    *,
    topic: str,
    partition: int,
    include_headers: bool,
    min_timestamp_ms: int | None = None,
    use_compiled: bool = True,
) -> DecodedRange:
    """Decode the records of ``data`` inside ``[from_offset, until_offset)`` to one Arrow batch.

    ``min_timestamp_ms`` (a pushed ``timestamp >=`` filter) drops records with an earlier
    timestamp, exactly, since Kafka timestamps need not rise with offsets. ``use_compiled=False``
    runs the Python decoder only (the reference, in tests and benchmarks).
    """
    wanted, next_offset = _scan(data, from_offset, until_offset)
    if not wanted:
        return DecodedRange(None, next_offset)
    batch = None
    if use_compiled and compiled is not None:
        batch = _compiled_to_arrow(data, wanted, topic, partition, include_headers)
    if batch is None:
        batch = _python_to_arrow(data, wanted, topic, partition, include_headers)
    batch = _cut(batch, from_offset, until_offset)
    if min_timestamp_ms is not None:
        cut = pa.scalar(min_timestamp_ms * US_PER_MS, ARROW_TIMESTAMP)
        batch = batch.filter(pc.greater_equal(batch.column(TIMESTAMP_COLUMN), cut))
    return DecodedRange(batch if batch.num_rows else None, next_offset)


def peek_next_offset(data: bytes, from_offset: int, until_offset: int) -> int:
    """Where the fetch after this one starts (a header walk, no decoding)."""
    return _scan(data, from_offset, until_offset)[1]


def _scan(data: bytes, from_offset: int, until_offset: int) -> tuple[list[BatchInfo], int]:
    """Walk batch headers: the data batches that overlap the range, and where to fetch next."""
    wanted: list[BatchInfo] = []
    pos, next_offset = 0, from_offset
    while pos + HEADER_SIZE <= len(data):
        header = parse_header(data, pos)
        end = pos + header.size_in_bytes
        if end > len(data) or header.base_offset >= until_offset:
            break
        if not header.is_control and header.next_offset > from_offset and header.records_count:
            wanted.append(
                BatchInfo(
                    pos=pos,
                    end=end,
                    base_offset=header.base_offset,
                    base_timestamp=header.base_timestamp,
                    max_timestamp=header.max_timestamp,
                    log_append_time=header.timestamp_type == TimestampType.LOG_APPEND_TIME,
                    records_count=header.records_count,
                )
            )
        next_offset = max(next_offset, header.next_offset)
        pos = end
    return wanted, next_offset


def _compiled_to_arrow(
    data: bytes, wanted: list[BatchInfo], topic: str, partition: int, include_headers: bool
) -> pa.RecordBatch | None:
    """The compiled decoder's batch; None when it declines (the Python decoder then decides)."""
    view = memoryview(data)
    regions = []
    for info in wanted:  # CRC and codec first, in order: the same errors as the Python decoder
        codec = validate_batch(data, info.pos).attributes & COMPRESSION_MASK
        region = view[info.pos + HEADER_SIZE : info.end]
        regions.append(region if codec == CompressionType.NONE else decompress(codec, region))
    batches = [
        (b.base_offset, b.base_timestamp, b.max_timestamp, b.log_append_time, b.records_count) for b in wanted
    ]
    try:
        key, value, offset, timestamp, types, headers = compiled.decode_regions(
            regions, batches, include_headers
        )
    except compiled.Declined:
        return None
    n = len(offset)
    arrays = [
        key,
        value,
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        offset,
        timestamp,
        types,
    ]
    if include_headers:
        arrays.append(headers)
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))


def _python_to_arrow(
    data: bytes, wanted: list[BatchInfo], topic: str, partition: int, include_headers: bool
) -> pa.RecordBatch:
    """The Python decoder: vectorized fast path, or the reference decoder when that declines."""
    try:
        batch = _fast_to_arrow(decode_batches(data, wanted, headers_wanted=include_headers), topic, partition)
        if include_headers:  # the fast path runs only when no record has headers
            batch = batch.append_column("headers", _headers_array([()] * batch.num_rows))
    except FastPathDeclined:
        batch = _to_arrow(_reference_columns(data, wanted), topic, partition, include_headers)
    return batch


def _cut(batch: pa.RecordBatch, from_offset: int, until_offset: int) -> pa.RecordBatch:
    """Keep offsets in [from, until): offsets rise, so it is one slice."""
    offsets = batch.column(OFFSET_COLUMN)
    lo = pc.sum(pc.cast(pc.less(offsets, i64(from_offset)), pa.int64())).as_py() or 0
    hi = pc.sum(pc.cast(pc.less(offsets, i64(until_offset)), pa.int64())).as_py() or 0
    return batch if (lo, hi) == (0, batch.num_rows) else batch.slice(lo, hi - lo)


def _fast_to_arrow(columns: Columns, topic: str, partition: int) -> pa.RecordBatch:
    n = len(columns.offset)
    arrays = [
        columns.key,
        columns.value,
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        columns.offset,
        pc.multiply(columns.timestamp_ms, i64(US_PER_MS)).cast(ARROW_TIMESTAMP),
        columns.timestamp_type,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(False))


def _reference_columns(data: bytes, wanted: list[BatchInfo]) -> dict[str, list]:
    """storage.record_batch's decoder, batch by batch: the path for headers and damaged data."""
    columns: dict[str, list] = {"offset": [], "timestamp": [], "key": [], "value": [], "headers": []}
    types: list[int] = []
    for info in wanted:
        decoded = decode_columns(data[info.pos : info.end])
        for name, column in columns.items():
            column.extend(decoded[name])
        types += [int(info.log_append_time)] * len(decoded["offset"])
    columns["timestampType"] = types
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
