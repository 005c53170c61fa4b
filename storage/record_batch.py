"""Kafka's v2 RecordBatch: build one from records, decode one (or a buffer of many) back to records.

A batch is the 61-byte header of ``storage.batch_header`` followed by the *records region*, which is
compressed as a whole when attributes bits 0-2 name a codec (``storage.compression``). Inside the
(decompressed) region every record is, with zigzag varints (``storage.varint``)::

    length          varint   bytes of the record after this field
    attributes      int8     unused by Kafka, always 0
    timestampDelta  varlong  timestamp - batch baseTimestamp
    offsetDelta     varint   offset - batch baseOffset
    keyLength       varint   -1 = null key
    key             bytes
    valueLength     varint   -1 = null value
    value           bytes
    headerCount     varint
    headers         headerCount x (keyLength varint, key utf-8 (never null),
                                   valueLength varint (-1 = null), value bytes)

With LOG_APPEND_TIME (attributes bit 3) every record's timestamp is the batch's maxTimestamp, as
Kafka reads it. Control batches (bit 5: transaction markers) are CRC-checked but skipped by the
multi-batch readers unless ``include_control=True``, as Kafka's consumer skips them. The CRC-32C
covers attributes..end, so baseOffset and partitionLeaderEpoch can be patched later without
re-encoding (``batch_header.patch_offset_and_epoch``).

Invariants of decoding: every byte of the region belongs to exactly ``recordsCount`` records, each
record consumes exactly its ``length``; anything else — and any bad CRC, magic, length, codec or
varint — raises ``CorruptRecordError`` with the reason. Decoding never loops more than the input
allows, so a hostile buffer cannot hang it.

Speed: decoding is the per-record work of every consumer and Spark worker, so the inner loop
(``_decode_region``) is one function over a ``bytes`` object with the varints inlined for the
1- and 2-byte cases (looked up in tables rather than computed), appending one plain tuple per
record. ``decode_columns`` transposes those tuples with ``itemgetter`` maps (for Arrow arrays);
``Record`` objects are made from them by ``map`` at C speed, which is why ``Record`` is a
``NamedTuple`` (immutable, like a frozen dataclass, but built without Python ``__init__`` code per
record). Encoding joins precomputed varint bytes (``varint.SMALL_VARINTS``) once per batch.

Thread-safety: pure functions; the returned bytes and tuples are immutable.
"""

from __future__ import annotations

import enum
import functools
import operator
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import crc32c

from proto import errors
from proto.kafka_types import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP
from storage.batch_header import (
    ATTRIBUTES_POS,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_POS,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    CorruptRecordError,
    validate_batch,
)
from storage.compression import CompressionType, compress, decompress
from storage.uniform_records import MIN_RECORD_BODY_BYTES, NULL_LENGTH, prove_uniform
from storage.varint import (
    INT64_MAX,
    SMALL_VARINT_LIMIT,
    SMALL_VARINTS,
    encode_varint,
    read_unsigned,
    unzigzag,
)

MIN_RECORD_BYTES = MIN_RECORD_BODY_BYTES + 1  # with the length varint
COLUMNS = ("offset", "timestamp", "key", "value", "headers")  # decode_columns' keys, Record's fields

InvalidRecordError = errors.exception_class(errors.ErrorCode.INVALID_RECORD)

Header = tuple[str, bytes | None]
RecordInput = tuple[bytes | None, bytes | None, Sequence[Header], int]  # (key, value, headers, timestamp)


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class Record(NamedTuple):
    """One decoded record; ``offset`` and ``timestamp`` are absolute (base + delta)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """A validated batch: its header (offsets, producer state, attributes) and its records."""

    header: BatchHeader
    records: tuple[Record, ...]


# Builds a Record from a (offset, timestamp, key, value, headers) tuple without Python code.
_make_record = functools.partial(tuple.__new__, Record)
_FIELDS = tuple(operator.itemgetter(index) for index in range(len(COLUMNS)))  # a row's columns
_HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
assert _HEADER_STRUCT.size == HEADER_SIZE, _HEADER_STRUCT.size
_NO_HEADERS: tuple[Header, ...] = ()
_NULL = SMALL_VARINTS[0]  # the varint of -1
_ZERO = SMALL_VARINTS[1]  # the varint of 0 (record attributes and an empty header list)
_AFTER_LENGTH_POS = 12
# The signed values of 1- and 2-byte zigzag varints: ``_ZZ1[first]`` when first < 0x80, else
# ``_ZZ2[first + (second << 7)]`` (first is 0x80 + low 7 bits, so the index is 0x80 + the raw value).
_ZZ1 = tuple(unzigzag(raw) for raw in range(0x80))
_ZZ2 = tuple(unzigzag(index - 0x80) if index >= 0x80 else 0 for index in range(0x80 + (1 << 14)))


# ----------------------------------------------------------------------------------------------
# Encoding


def build_batch(
    records: Iterable[RecordInput],
    *,
    base_offset: int = 0,
    compression: int = CompressionType.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    timestamp_type: int = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """Encode ``records`` — ``(key, value, headers, timestamp_ms)`` each — as one v2 batch.

    Offset deltas are the records' positions (0, 1, ...). The base timestamp is the first record's,
    the max timestamp the largest. A compressed batch is always compressed, even when that does not
    shrink it (Kafka's Java producer does the same). Bad input raises ``InvalidRecordError``.
    """
    if compression not in CompressionType.__members__.values():
        names = [codec.name for codec in CompressionType]
        raise InvalidRecordError(f"compression {compression} is not one of {names}")
    if transactional and producer_id == NO_PRODUCER_ID:
        raise InvalidRecordError("a transactional batch needs a producer id (KIP-98)")
    if not isinstance(records, list | tuple):
        records = list(records)  # one pass for the timestamps, one for the bytes
    try:
        base_timestamp, max_timestamp = _batch_timestamps([record[3] for record in records])
        region = _encode_region(records, base_timestamp)
    except (TypeError, ValueError, AttributeError, IndexError) as exc:
        raise InvalidRecordError(f"cannot encode record: {type(exc).__name__}: {exc}") from exc
    if compression != CompressionType.NONE:
        region = compress(compression, region)
    attributes = (
        compression
        | (TIMESTAMP_TYPE_MASK if timestamp_type == TimestampType.LOG_APPEND_TIME else 0)
        | (TRANSACTIONAL_MASK if transactional else 0)
        | (CONTROL_MASK if control else 0)
    )
    fields = (
        base_offset, HEADER_SIZE - _AFTER_LENGTH_POS + len(region), partition_leader_epoch, MAGIC_V2, 0,
        attributes, max(len(records) - 1, 0), base_timestamp, max_timestamp, producer_id, producer_epoch,
        base_sequence, len(records),
    )  # fmt: skip
    return _pack_batch(fields, region)


def _pack_batch(fields: tuple[int, ...], region: bytes) -> bytes:
    """Header ``fields`` (wire order, CRC 0) + ``region``, with the CRC-32C computed."""
    header = bytearray(HEADER_SIZE)
    try:
        _HEADER_STRUCT.pack_into(header, 0, *fields)
    except struct.error as exc:
        raise InvalidRecordError(f"a batch header field does not fit its type: {exc}") from exc
    crc = crc32c.crc32c(region, value=crc32c.crc32c(memoryview(header)[ATTRIBUTES_POS:]))
    struct.pack_into(">I", header, CRC_POS, crc)
    return b"".join((header, region))


def rebuild_batch(
    header: BatchHeader, records: Sequence[Record], delete_horizon_ms: int | None = None
) -> bytes:
    """Re-encode a batch holding a subset of its records (the log cleaner), changing nothing else.

    Kept from ``header``: baseOffset, partitionLeaderEpoch, codec, timestamp type, transactional and
    control bits, producer id/epoch, baseSequence and lastOffsetDelta (as Kafka's cleaner: the original
    last offset keeps the producer's last sequence); each record keeps its offset and timestamp.
    ``delete_horizon_ms`` marks the batch with a delete horizon (KIP-534: attributes bit 6, the horizon
    stored as baseTimestamp, record timestamps relative to it); None keeps the batch's own. With no
    records the result is an empty, uncompressed batch carrying the same offsets (Kafka's
    ``writeEmptyHeader``: it keeps a producer's last sequence, or a segment's end offset).
    """
    attributes = header.attributes
    if not records:
        attributes &= ~(COMPRESSION_MASK | DELETE_HORIZON_MASK)
        stamp = header.max_timestamp
        return _pack_batch(_retained_fields(header, attributes, 0, stamp, stamp, 0), b"")
    base_timestamp = header.base_timestamp
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
        base_timestamp = delete_horizon_ms
    if attributes & TIMESTAMP_TYPE_MASK:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(record.timestamp for record in records)
    inputs = [(r.key, r.value, r.headers, r.timestamp) for r in records]
    region = _encode_region(inputs, base_timestamp, [r.offset - header.base_offset for r in records])
    codec = attributes & COMPRESSION_MASK
    if codec != CompressionType.NONE:
        region = compress(codec, region)
    fields = _retained_fields(header, attributes, len(region), base_timestamp, max_timestamp, len(records))
    return _pack_batch(fields, region)


def _retained_fields(
    header: BatchHeader,
    attributes: int,
    region_bytes: int,
    base_timestamp: int,
    max_timestamp: int,
    count: int,
) -> tuple[int, ...]:
    return (
        header.base_offset, HEADER_SIZE - _AFTER_LENGTH_POS + region_bytes, header.partition_leader_epoch,
        MAGIC_V2, 0, attributes, header.last_offset_delta, base_timestamp, max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, count,
    )  # fmt: skip


def _batch_timestamps(timestamps: list[int]) -> tuple[int, int]:
    if not timestamps:
        return NO_TIMESTAMP, NO_TIMESTAMP
    for timestamp in (min(timestamps), max(timestamps)):
        if type(timestamp) is not int or not NO_TIMESTAMP <= timestamp <= INT64_MAX:
            raise InvalidRecordError(f"timestamp {timestamp!r} is not an int64 ms value >= {NO_TIMESTAMP}")
    return timestamps[0], max(timestamps)


def _encode_region(
    records: Sequence[RecordInput], base_timestamp: int, offset_deltas: Sequence[int] | None = None
) -> bytes:
    """The uncompressed records region (offset deltas 0, 1, ... unless given). One ``b"".join`` at the
    end; per record only lookups."""
    small = SMALL_VARINTS
    limit = SMALL_VARINT_LIMIT - 1
    parts: list[bytes] = []
    extend = parts.extend
    deltas = range(len(records)) if offset_deltas is None else offset_deltas
    for offset_delta, (record_key, record_value, headers, timestamp) in zip(deltas, records, strict=True):
        delta = timestamp - base_timestamp
        ts_bytes = small[delta + 1] if 0 <= delta < limit else encode_varint(delta)
        off_bytes = small[offset_delta + 1] if offset_delta < limit else encode_varint(offset_delta)
        if record_key is None:
            key, key_bytes = b"", _NULL
        else:
            key = record_key
            size = len(key)
            key_bytes = small[size + 1] if size < limit else encode_varint(size)
        if record_value is None:
            value, value_bytes = b"", _NULL
        else:
            value = record_value
            size = len(value)
            value_bytes = small[size + 1] if size < limit else encode_varint(size)
        headers_bytes = _encode_headers(headers) if headers else _ZERO
        size = (
            1 + len(ts_bytes) + len(off_bytes) + len(key_bytes) + len(key) + len(value_bytes)
            + len(value) + len(headers_bytes)
        )  # fmt: skip
        extend((small[size + 1] if size < limit else encode_varint(size), _ZERO, ts_bytes, off_bytes,
                key_bytes, key, value_bytes, value, headers_bytes))  # fmt: skip
    return b"".join(parts)


def _encode_headers(headers: Sequence[Header]) -> bytes:
    parts = [encode_varint(len(headers))]
    for name, value in headers:
        if type(name) is not str:
            raise TypeError(f"header key {name!r} must be a str (Kafka header keys are utf-8 strings)")
        encoded = name.encode("utf-8")
        parts += (encode_varint(len(encoded)), encoded)
        if value is None:
            parts.append(_NULL)
        else:
            parts += (encode_varint(len(value)), bytes(value))
    return b"".join(parts)


# ----------------------------------------------------------------------------------------------
# Decoding


def decode_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> DecodedBatch:
    """Validate (CRC included) and decode the batch at ``pos``; bytes after it are ignored."""
    header = validate_batch(buf, pos)
    if type(buf) is bytes:
        data = buf
    else:  # records are sliced from a bytes object, so they come out as bytes
        data, pos = bytes(memoryview(buf)[pos : pos + header.size_in_bytes]), 0
    rows: list[tuple] = []
    _decode_batch_into(data, pos, header, rows)
    return DecodedBatch(header, tuple(map(_make_record, rows)))


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[DecodedBatch]:
    """Decode every batch of a buffer holding whole batches back to back (a fetch or a segment)."""
    data = buf if type(buf) is bytes else bytes(buf)
    pos = 0
    while pos < len(data):
        batch = decode_batch(data, pos)
        yield batch
        pos += batch.header.size_in_bytes


def iter_records(buf: bytes | bytearray | memoryview, *, include_control: bool = False) -> Iterator[Record]:
    """Every record of every data batch in ``buf``, in order; raises CorruptRecordError at a bad batch.

    Control batches (transaction markers) are CRC-checked and skipped unless ``include_control``:
    a Kafka consumer never hands their records to the application.
    """
    for rows in _decode_batches(buf, include_control):
        yield from map(_make_record, rows)


def decode_columns(buf: bytes | bytearray | memoryview, *, include_control: bool = False) -> dict[str, list]:
    """All records of all data batches in ``buf`` as columns, for building Arrow arrays without Records.

    Keys (``COLUMNS``): ``offset`` and ``timestamp`` (lists of int), ``key`` and ``value`` (lists
    of bytes or None), ``headers`` (lists of tuples of ``(str, bytes | None)``). Control batches
    are skipped as in ``iter_records``.
    """
    columns: dict[str, list] = {name: [] for name in COLUMNS}
    extends = [(column.extend, field) for column, field in zip(columns.values(), _FIELDS, strict=True)]
    for rows in _decode_batches(buf, include_control):
        for extend, field in extends:
            extend(map(field, rows))
    return columns


def decode_records(buf: bytes | bytearray | memoryview, *, include_control: bool = False) -> list[Record]:
    """Every record of every data batch in ``buf`` as one list (control batches as in ``iter_records``)."""
    records: list[Record] = []
    for rows in _decode_batches(buf, include_control):
        records.extend(map(_make_record, rows))
    return records


def _decode_batches(buf: bytes | bytearray | memoryview, include_control: bool) -> Iterator[list[tuple]]:
    """The rows ``(offset, timestamp, key, value, headers)`` of each batch in ``buf``, batch by batch."""
    data = buf if type(buf) is bytes else bytes(buf)
    pos = 0
    while pos < len(data):
        header = validate_batch(data, pos)
        if include_control or not header.attributes & CONTROL_MASK:
            rows: list[tuple] = []
            _decode_batch_into(data, pos, header, rows)
            yield rows
        pos += header.size_in_bytes


def _decode_batch_into(data: bytes, pos: int, header: BatchHeader, rows: list[tuple]) -> None:
    start = pos + HEADER_SIZE
    end = pos + header.size_in_bytes
    codec = header.attributes & COMPRESSION_MASK
    if codec != CompressionType.NONE:
        data = decompress(codec, memoryview(data)[start:end])
        start, end = 0, len(data)
    count = header.records_count
    if count > (end - start) // MIN_RECORD_BYTES:
        raise CorruptRecordError(
            f"recordsCount {count} cannot fit in {end - start} bytes of records "
            f"(each record takes at least {MIN_RECORD_BYTES})"
        )
    first = len(rows)
    _decode_region(data, start, end, count, header.base_offset, header.base_timestamp, rows)
    if header.attributes & TIMESTAMP_TYPE_MASK:  # LOG_APPEND_TIME: every record has maxTimestamp
        log_append_time = header.max_timestamp
        rows[first:] = [(row[0], log_append_time, *row[2:]) for row in rows[first:]]


def _decode_region(
    data: bytes, pos: int, end: int, count: int, base_offset: int, base_timestamp: int, rows: list
) -> None:
    """Decode ``count`` records from ``data[pos:end]`` onto ``rows`` as tuples. The hot loop."""
    append = rows.append
    zz1, zz2, no_headers, min_body = _ZZ1, _ZZ2, _NO_HEADERS, MIN_RECORD_BODY_BYTES  # locals: faster
    index = 0
    try:
        for index in range(count):  # index names the record in error messages
            # length: varint, inlined for 1 and 2 bytes; the rare longer ones go to read_unsigned
            raw = data[pos]
            if raw < 0x80:
                pos += 1
                record_end = pos + zz1[raw]
            elif (low := data[pos + 1]) < 0x80:
                pos += 2
                record_end = pos + zz2[raw + (low << 7)]
            else:
                raw, pos = read_unsigned(data, pos)
                record_end = pos + ((raw >> 1) ^ -(raw & 1))
            if not pos + min_body <= record_end <= end:
                raise CorruptRecordError(
                    f"record {index} length {(raw >> 1) ^ -(raw & 1)} at byte {pos} does not fit "
                    f"the {end - pos} bytes left (minimum {MIN_RECORD_BODY_BYTES})"
                )
            # attributes (an int8 Kafka leaves at 0) at pos, then timestampDelta
            raw = data[pos + 1]
            if raw < 0x80:
                pos += 2
                timestamp = base_timestamp + zz1[raw]
            elif (low := data[pos + 2]) < 0x80:
                pos += 3
                timestamp = base_timestamp + zz2[raw + (low << 7)]
            else:
                raw, pos = read_unsigned(data, pos + 1)
                timestamp = base_timestamp + ((raw >> 1) ^ -(raw & 1))
            # offsetDelta
            raw = data[pos]
            if raw < 0x80:
                pos += 1
                offset = base_offset + zz1[raw]
            elif (low := data[pos + 1]) < 0x80:
                pos += 2
                offset = base_offset + zz2[raw + (low << 7)]
            else:
                raw, pos = read_unsigned(data, pos)
                offset = base_offset + ((raw >> 1) ^ -(raw & 1))
            # key and value: length -1 means null
            raw = data[pos]
            if raw < 0x80:
                pos += 1
                size = zz1[raw]
            else:
                raw, pos = read_unsigned(data, pos)
                size = (raw >> 1) ^ -(raw & 1)
            if size >= 0:
                key = data[pos : pos + size]
                pos += size
            elif size == NULL_LENGTH:
                key = None
            else:
                raise CorruptRecordError(f"record {index} key length {size} is negative")
            raw = data[pos]
            if raw < 0x80:
                pos += 1
                size = zz1[raw]
            elif (low := data[pos + 1]) < 0x80:
                pos += 2
                size = zz2[raw + (low << 7)]
            else:
                raw, pos = read_unsigned(data, pos)
                size = (raw >> 1) ^ -(raw & 1)
            if size >= 0:
                value = data[pos : pos + size]
                pos += size
            elif size == NULL_LENGTH:
                value = None
            else:
                raise CorruptRecordError(f"record {index} value length {size} is negative")
            # headers: almost always none
            if data[pos] == 0:
                pos += 1
                append((offset, timestamp, key, value, no_headers))
            else:
                headers, pos = _decode_headers(data, pos, record_end, index)
                append((offset, timestamp, key, value, headers))
            if pos != record_end:
                raise CorruptRecordError(
                    f"record {index} declares it ends at byte {record_end} but its fields end at {pos}"
                )
    except IndexError:
        raise CorruptRecordError(f"record {index} is truncated: the records region ends inside it") from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the {count} records the header counts")


def _decode_headers(data: bytes, pos: int, record_end: int, index: int) -> tuple[tuple[Header, ...], int]:
    raw, pos = read_unsigned(data, pos)
    count = (raw >> 1) ^ -(raw & 1)
    if not 0 <= count <= (record_end - pos) // 2:  # each header takes at least 2 bytes
        raise CorruptRecordError(
            f"record {index} header count {count} does not fit its {record_end - pos} bytes"
        )
    decoded: list[Header] = []
    for _ in range(count):
        raw, pos = read_unsigned(data, pos)
        size = (raw >> 1) ^ -(raw & 1)
        if size < 0 or pos + size > record_end:
            raise CorruptRecordError(f"record {index} header key length {size} is negative or overruns it")
        # Kafka's consumer decodes keys as Java's new String(bytes, UTF_8) does: invalid bytes become
        # U+FFFD, never an error (the broker does not check them either).
        name = data[pos : pos + size].decode("utf-8", "replace")
        pos += size
        raw, pos = read_unsigned(data, pos)
        size = (raw >> 1) ^ -(raw & 1)
        if size == NULL_LENGTH:
            decoded.append((name, None))
            continue
        if size < 0 or pos + size > record_end:
            raise CorruptRecordError(f"record {index} header value length {size} is invalid or overruns it")
        decoded.append((name, data[pos : pos + size]))
        pos += size
    return tuple(decoded), pos



# ----------------------------------------------------------------------------------------------
# Checking without decoding (the broker's LogValidator)


def _skip_headers(data: bytes, pos: int, record_end: int, index: int) -> int:
    """The position after the headers at ``pos``, checking only counts and lengths: Kafka's broker
    never decodes header keys, so a key that is not UTF-8 is stored as sent."""
    raw, pos = read_unsigned(data, pos)
    count = (raw >> 1) ^ -(raw & 1)
    if not 0 <= count <= (record_end - pos) // 2:  # each header takes at least 2 bytes
        raise CorruptRecordError(
            f"record {index} header count {count} does not fit its {record_end - pos} bytes"
        )
    for _ in range(count):
        raw, pos = read_unsigned(data, pos)
        size = (raw >> 1) ^ -(raw & 1)
        if size < 0 or pos + size > record_end:
            raise CorruptRecordError(f"record {index} header key length {size} is negative or overruns it")
        raw, pos = read_unsigned(data, pos + size)
        size = (raw >> 1) ^ -(raw & 1)
        if size == NULL_LENGTH:
            continue
        if size < 0 or pos + size > record_end:
            raise CorruptRecordError(f"record {index} header value length {size} is invalid or overruns it")
        pos += size
    return pos


def check_batch_records(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> None:
    """Check that the records of the (already CRC-checked) batch at ``pos`` match its header, as
    Kafka's ``LogValidator`` does on the leader: the region decompresses with the batch's codec
    (bounded), holds exactly ``recordsCount`` records whose lengths and fields fit, and numbers them
    with offset deltas 0, 1, 2, ... (what every producer writes; the broker never re-encodes a batch,
    so it cannot renumber them as Kafka would). Raises ``CorruptRecordError`` naming the problem."""
    start, end = pos + HEADER_SIZE, pos + header.size_in_bytes
    codec = header.attributes & COMPRESSION_MASK
    region = memoryview(buf)[start:end]
    data = decompress(codec, region) if codec != CompressionType.NONE else bytes(region)
    count = header.records_count
    if count > len(data) // MIN_RECORD_BYTES:
        raise CorruptRecordError(
            f"recordsCount {count} cannot fit in {len(data)} bytes of records "
            f"(each record takes at least {MIN_RECORD_BYTES})"
        )
    check_records(data, count)


def check_records(data: bytes, count: int) -> None:
    """Check ``count`` records filling ``data`` (see ``check_batch_records``): records of one shape are
    shown well formed by ``storage.uniform_records`` with strided slices; any other region is walked
    (``_walk_records``), which accepts it or raises ``CorruptRecordError`` naming the problem."""
    if not prove_uniform(data, count):
        _walk_records(data, count)


def _walk_records(data: bytes, count: int) -> None:
    """Walk ``count`` records filling ``data`` without building them (see ``check_batch_records``).

    The same varint inlining as ``_decode_region`` (1- and 2-byte varints from tables, longer ones by
    ``read_unsigned``); keys and values are skipped by length, never sliced."""
    zz1, zz2, min_body, end = _ZZ1, _ZZ2, MIN_RECORD_BODY_BYTES, len(data)
    pos = index = 0
    try:
        for index in range(count):
            raw = data[pos]  # length
            if raw < 0x80:
                pos += 1
                record_end = pos + zz1[raw]
            elif (low := data[pos + 1]) < 0x80:
                pos += 2
                record_end = pos + zz2[raw + (low << 7)]
            else:
                raw, pos = read_unsigned(data, pos)
                record_end = pos + ((raw >> 1) ^ -(raw & 1))
            if not pos + min_body <= record_end <= end:
                raise CorruptRecordError(
                    f"record {index} at byte {pos} ends at {record_end}, outside its region of {end} bytes"
                )
            # attributes at pos, then timestampDelta (any value is valid: only skip it)
            if data[pos + 1] < 0x80:
                pos += 2
            elif data[pos + 2] < 0x80:
                pos += 3
            else:
                pos = read_unsigned(data, pos + 1)[1]
            raw = data[pos]  # offsetDelta
            if raw < 0x80:
                pos += 1
                delta = zz1[raw]
            elif (low := data[pos + 1]) < 0x80:
                pos += 2
                delta = zz2[raw + (low << 7)]
            else:
                raw, pos = read_unsigned(data, pos)
                delta = (raw >> 1) ^ -(raw & 1)
            if delta != index:
                raise CorruptRecordError(
                    f"record {index} has offsetDelta {delta}; a batch numbers its records 0, 1, 2, ..."
                )
            raw = data[pos]  # keyLength, then the key
            if raw < 0x80:
                pos += 1
                size = zz1[raw]
            else:
                raw, pos = read_unsigned(data, pos)
                size = (raw >> 1) ^ -(raw & 1)
            if size >= 0:
                pos += size
            elif size != NULL_LENGTH:
                raise CorruptRecordError(f"record {index} key length {size} is negative")
            raw = data[pos]  # valueLength, then the value
            if raw < 0x80:
                pos += 1
                size = zz1[raw]
            elif (low := data[pos + 1]) < 0x80:
                pos += 2
                size = zz2[raw + (low << 7)]
            else:
                raw, pos = read_unsigned(data, pos)
                size = (raw >> 1) ^ -(raw & 1)
            if size >= 0:
                pos += size
            elif size != NULL_LENGTH:
                raise CorruptRecordError(f"record {index} value length {size} is negative")
            if data[pos] == 0:  # headerCount: no headers, almost always
                pos += 1
            else:
                pos = _skip_headers(data, pos, record_end, index)
            if pos != record_end:
                raise CorruptRecordError(
                    f"record {index} declares it ends at byte {record_end} but its fields end at {pos}"
                )
    except IndexError:
        raise CorruptRecordError(f"record {index} is truncated: the records region ends inside it") from None
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the {count} records the header counts")

__all__ = [
    "NO_TIMESTAMP",
    "CompressionType",
    "DecodedBatch",
    "InvalidRecordError",
    "Record",
    "TimestampType",
    "build_batch",
    "check_batch_records",
    "check_records",
    "decode_batch",
    "decode_columns",
    "decode_records",
    "iter_batches",
    "iter_records",
    "rebuild_batch",
]
