"""The v2 RecordBatch codec: field-by-field tables, and every malformed input is a CorruptRecordError."""

from __future__ import annotations

import struct

import crc32c
import pytest

from proto.kafka_types import NO_TIMESTAMP
from storage import batch_header as bh
from storage.compression import CompressionType, compress
from storage.record_batch import (
    DecodedBatch,
    InvalidRecordError,
    Record,
    TimestampType,
    build_batch,
    decode_batch,
    decode_columns,
    decode_records,
    iter_batches,
    iter_records,
)
from storage.varint import decode_varint, encode_varint

CODECS = [pytest.param(codec, id=codec.name.lower()) for codec in CompressionType]
TS = 1_700_000_000_000


def reseal(buf: bytearray) -> bytes:
    """Recompute batchLength and CRC after a mutation, so the record-level checks are what fails."""
    struct.pack_into(">i", buf, bh.LENGTH_POS, len(buf) - bh.LOG_OVERHEAD)
    struct.pack_into(">I", buf, bh.CRC_POS, crc32c.crc32c(memoryview(buf)[bh.ATTRIBUTES_POS :]))
    return bytes(buf)


def raw_batch(region: bytes, count: int, attributes: int = 0) -> bytes:
    """A batch with a valid header and CRC around an arbitrary records region."""
    header = bytearray(build_batch([(None, b"x", (), TS)]))[: bh.HEADER_SIZE]
    struct.pack_into(">h", header, bh.ATTRIBUTES_POS, attributes)
    struct.pack_into(">i", header, 57, count)
    return reseal(header + region)


def record_bytes(body: bytes) -> bytes:
    """One record: its length varint, then ``body`` (attributes onwards)."""
    return encode_varint(len(body)) + body


# ----------------------------------------------------------------------------------------------
# Round trips


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_shape(codec: CompressionType) -> None:
    """Null keys, null values, empty bytes, headers with null values, out-of-order timestamps."""
    records = [
        (None, None, (), TS),
        (b"", b"", (), TS - 5),
        (b"k", b"v" * 300, (("h1", b"a"), ("h2", None), ("", b"")), TS + 70_000),
        (b"\x00\xff", None, (("ключ", b"\x00"),), TS + 1),
    ]
    batch = decode_batch(build_batch(records, compression=codec, base_offset=77))
    assert batch.records == tuple(
        Record(77 + i, ts, k, v, tuple(h)) for i, (k, v, h, ts) in enumerate(records)
    )
    assert batch.header.compression_type == codec
    assert (batch.header.base_timestamp, batch.header.max_timestamp) == (TS, TS + 70_000)


@pytest.mark.parametrize(
    ("kwargs", "check"),
    [
        pytest.param(
            {}, lambda h: (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, -1, -1), id="no-pid"
        ),
        pytest.param(
            {"producer_id": 9, "producer_epoch": 1, "base_sequence": 5},
            lambda h: (h.producer_id, h.producer_epoch, h.base_sequence) == (9, 1, 5),
            id="idempotent",
        ),
        pytest.param(
            {"producer_id": 9, "transactional": True}, lambda h: h.is_transactional, id="transactional"
        ),
        pytest.param({"control": True}, lambda h: h.is_control and not h.is_transactional, id="control"),
        pytest.param(
            {"timestamp_type": TimestampType.LOG_APPEND_TIME}, lambda h: h.timestamp_type == 1, id="lat"
        ),
        pytest.param({"partition_leader_epoch": 12}, lambda h: h.partition_leader_epoch == 12, id="epoch"),
        pytest.param({"base_offset": 1 << 40}, lambda h: h.last_offset == (1 << 40) + 2, id="base-offset"),
    ],
)
def test_header_fields(kwargs: dict, check) -> None:
    """Attributes bits 3-5 and the KIP-98 producer fields land where Kafka puts them."""
    buf = build_batch([(None, b"a", (), TS), (None, b"b", (), TS), (None, b"c", (), TS)], **kwargs)
    header = bh.validate_batch(buf)
    assert check(header), header
    assert header.records_count == 3 and header.last_offset_delta == 2
    assert header.size_in_bytes == len(buf)


def test_log_append_time_gives_every_record_max_timestamp() -> None:
    """Kafka: with LOG_APPEND_TIME a record's timestamp is the batch's maxTimestamp."""
    buf = build_batch(
        [(None, b"a", (), TS), (None, b"b", (), TS + 9)], timestamp_type=TimestampType.LOG_APPEND_TIME
    )
    assert [r.timestamp for r in decode_batch(buf).records] == [TS + 9, TS + 9]
    assert decode_columns(buf)["timestamp"] == [TS + 9, TS + 9]


def test_build_accepts_any_iterable_of_records() -> None:
    records = [(None, b"a", (), TS), (b"k", b"b", (), TS + 1)]
    assert build_batch(iter(records)) == build_batch(records) == build_batch(tuple(records))


def test_empty_batch() -> None:
    """A batch may hold no records (Kafka keeps such batches after compaction): NO_TIMESTAMP, count 0."""
    batch = decode_batch(build_batch([]))
    assert batch.records == ()
    assert (batch.header.base_timestamp, batch.header.max_timestamp) == (NO_TIMESTAMP, NO_TIMESTAMP)


def test_many_batches_every_api_agrees() -> None:
    """iter_records, decode_records, iter_batches and decode_columns see the same records in order."""
    buf = b"".join(
        build_batch([(b"k", b"v%d" % i, (), TS + i) for i in range(n)], compression=codec, base_offset=10 * n)
        for n, codec in [(3, 0), (1, 1), (4, 3), (2, 4)]
    )
    records = list(iter_records(buf))
    assert [r.offset for r in records] == [30, 31, 32, 10, 40, 41, 42, 43, 20, 21]
    assert decode_records(bytearray(buf)) == records
    assert [r for b in iter_batches(memoryview(buf)) for r in b.records] == records
    columns = decode_columns(buf)
    assert list(columns) == ["offset", "timestamp", "key", "value", "headers"]
    assert list(zip(*columns.values(), strict=True)) == [tuple(r) for r in records]
    assert all(type(r.value) is bytes for r in decode_records(bytearray(buf)))


def test_control_batches_are_skipped_unless_asked_for() -> None:
    """Kafka's consumer never returns control records (transaction markers); decode_batch shows all."""
    marker = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", (), TS)], base_offset=1,
                         producer_id=5, transactional=True, control=True)  # fmt: skip
    data = build_batch([(None, b"a", (), TS)], producer_id=5, transactional=True)
    buf = data + marker + build_batch([(None, b"b", (), TS)], base_offset=2)
    assert [r.offset for r in iter_records(buf)] == [0, 2]
    assert [r.offset for r in decode_records(buf)] == [0, 2]
    assert decode_columns(buf)["offset"] == [0, 2]
    assert [r.offset for r in iter_records(buf, include_control=True)] == [0, 1, 2]
    assert decode_columns(buf, include_control=True)["key"] == [None, b"\x00\x00\x00\x01", None]
    assert decode_batch(marker).header.is_control and len(decode_batch(marker).records) == 1
    with pytest.raises(bh.CorruptRecordError, match="CRC mismatch"):
        list(iter_records(data + marker[:-1] + b"\xff"))


def test_decode_batch_at_position_ignores_what_follows() -> None:
    first = build_batch([(None, b"one", (), TS)])
    second = build_batch([(None, b"two", (), TS)], base_offset=1)
    batch = decode_batch(bytearray(first + second + b"garbage"), len(first))
    assert isinstance(batch, DecodedBatch)
    assert [r.value for r in batch.records] == [b"two"]


def test_large_values_and_many_records_use_long_varints() -> None:
    """Lengths, offset deltas and timestamp deltas past the 2-byte varint fast path decode too."""
    records = [(b"k" * 20_000, b"v" * 70_000, (), TS + i * 10**9) for i in range(3)]
    records += [(None, b"", (), TS - 10**12)] * 20_000
    decoded = decode_batch(build_batch(records)).records
    assert [len(r.value) for r in decoded[:3]] == [70_000] * 3
    assert [r.timestamp for r in decoded[:3]] == [TS, TS + 10**9, TS + 2 * 10**9]
    assert decoded[-1] == Record(20_002, TS - 10**12, None, b"", ())


# ----------------------------------------------------------------------------------------------
# Varints


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (63, b"\x7e"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (8191, b"\xfe\x7f"),
        (-8193, b"\x81\x80\x01"),
        ((1 << 31) - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(1 << 31), b"\xff\xff\xff\xff\x0f"),
        ((1 << 63) - 1, b"\xfe" + b"\xff" * 8 + b"\x01"),
        (-(1 << 63), b"\xff" * 9 + b"\x01"),
    ],
    ids=str,
)
def test_zigzag_varint_table(value: int, encoded: bytes) -> None:
    """Kafka's ByteUtils.writeVarlong: zigzag, then 7 bits per byte, low group first."""
    assert encode_varint(value) == encoded
    assert decode_varint(encoded + b"\x99", 0) == (value, len(encoded))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(b"\x80", "truncated", id="truncated"),
        pytest.param(b"\xff" * 11, "longer than 10 bytes", id="overlong"),
        pytest.param(b"\xff" * 9 + b"\x7f", "does not fit 64 bits", id="over-64-bits"),
    ],
)
def test_bad_varints(data: bytes, reason: str) -> None:
    with pytest.raises(bh.CorruptRecordError, match=reason):
        decode_varint(data, 0)


# ----------------------------------------------------------------------------------------------
# Malformed batches: one named error with a reason

GOOD = build_batch([(b"k", b"value", (("h", b"v"),), TS), (None, b"x", (), TS + 1)])


def _mutated(mutate) -> bytes:
    buf = bytearray(GOOD)
    mutate(buf)
    return bytes(buf)


def _set(fmt: str, pos: int, value: int):
    return lambda buf: struct.pack_into(fmt, buf, pos, value)


OK_BODY = b"\x00\x00\x00" + encode_varint(1) + b"k" + encode_varint(1) + b"v" + b"\x00"
BIG_BODY = b"\x00\x00\x00" + encode_varint(1) + b"k" + encode_varint(20) + b"v" * 20 + b"\x00"

CORRUPT = [
    pytest.param(GOOD[:-1], "truncated batch", id="truncated-tail"),
    pytest.param(GOOD[:40], "truncated batch header", id="truncated-header"),
    pytest.param(_mutated(_set(">b", bh.MAGIC_POS, 1)), "unsupported magic 1", id="magic-1"),
    pytest.param(_mutated(lambda b: b.__setitem__(-1, b[-1] ^ 1)), "CRC mismatch", id="crc-records"),
    pytest.param(_mutated(_set(">q", 27, 5)), "CRC mismatch", id="crc-header-field"),
    pytest.param(_mutated(_set(">i", bh.LENGTH_POS, -5)), "below the minimum", id="negative-batch-length"),
    pytest.param(_mutated(_set(">i", bh.LENGTH_POS, 1 << 30)), "exceeds", id="oversize-batch-length"),
    pytest.param(
        _mutated(_set(">i", bh.LENGTH_POS, len(GOOD))), "truncated batch", id="batch-length-past-end"
    ),
    pytest.param(raw_batch(record_bytes(OK_BODY), 2), "cannot fit", id="count-too-high-for-bytes"),
    pytest.param(raw_batch(record_bytes(BIG_BODY) * 2, 3), "record 2 is truncated", id="count-one-too-high"),
    pytest.param(
        raw_batch(record_bytes(OK_BODY) * 2, 1), "bytes left after the 1 records", id="count-too-low"
    ),
    pytest.param(raw_batch(record_bytes(OK_BODY), -1), "negative", id="count-negative"),
    pytest.param(raw_batch(record_bytes(OK_BODY), 1 << 30), "cannot fit", id="count-huge"),
    pytest.param(
        raw_batch(encode_varint(len(OK_BODY) + 1) + OK_BODY, 1), "does not fit", id="length-past-end"
    ),
    pytest.param(raw_batch(encode_varint(len(OK_BODY) - 1) + OK_BODY, 1), "fields end at", id="length-short"),
    pytest.param(raw_batch(encode_varint(-3) + OK_BODY, 1), "does not fit", id="length-negative"),
    pytest.param(raw_batch(encode_varint(3) + b"\x00\x00\x00", 1), "cannot fit", id="length-below-minimum"),
    pytest.param(
        raw_batch(record_bytes(b"\x00\x00\x00" + encode_varint(-2) + b"\x01\x00"), 1),
        "key length -2",
        id="key-neg",
    ),
    pytest.param(
        raw_batch(record_bytes(b"\x00\x00\x00\x01" + encode_varint(-7) + b"\x00"), 1),
        "value length -7",
        id="val-neg",
    ),
    pytest.param(
        raw_batch(record_bytes(b"\x00\x00\x00\x01" + encode_varint(40) + b"abc\x00"), 1),
        "record 0 is truncated",
        id="val-over",
    ),
    pytest.param(
        raw_batch(record_bytes(b"\x00\x00\x00\x01\x01" + encode_varint(-1) + b"\x00\x00"), 1),
        "header count -1",
        id="header-count-negative",
    ),
    pytest.param(
        raw_batch(record_bytes(b"\x00\x00\x00\x01\x01" + encode_varint(1 << 30) + b"\x00\x00"), 1),
        "header count",
        id="header-count-huge",
    ),
    pytest.param(
        raw_batch(record_bytes(b"\x00\x00\x00\x01\x01\x02" + encode_varint(-1) + b"\x01"), 1),
        "header key length -1",
        id="header-key-null",
    ),
    pytest.param(
        raw_batch(record_bytes(b"\x00\x00\x00\x01\x01\x02\x00" + encode_varint(9) + b"ab"), 1),
        "header value length 9",
        id="header-value-over",
    ),
    pytest.param(
        raw_batch(record_bytes(b"\x00" + b"\xff" * 11 + b"\x00\x01\x01\x00"), 1), "longer than", id="overlong"
    ),
    pytest.param(
        raw_batch(record_bytes(b"\x00\x00\x00\x01\x01\x80"), 1), "truncated", id="varint-cut-at-end"
    ),
    pytest.param(
        raw_batch(record_bytes(OK_BODY), 1, attributes=5), "unknown compression codec 5", id="codec-5"
    ),
    pytest.param(
        raw_batch(record_bytes(OK_BODY), 1, attributes=7), "unknown compression codec 7", id="codec-7"
    ),
]
CORRUPT += [
    pytest.param(
        raw_batch(b"\x1f\x8b" + b"\x00" * 30, 1, attributes=codec),
        codec.name.lower(),
        id=f"{codec.name}-junk",
    )
    for codec in list(CompressionType)[1:]
]
CORRUPT += [
    pytest.param(
        raw_batch(compress(codec, record_bytes(OK_BODY) * 50)[:-3], 50, attributes=codec),
        codec.name.lower(),
        id=f"{codec.name}-truncated",
    )
    for codec in list(CompressionType)[1:]
]
CORRUPT += [
    pytest.param(
        raw_batch(compress(codec, record_bytes(BIG_BODY) * 2), 3, attributes=codec),
        "record 2 is truncated",
        id=f"{codec.name}-count-disagrees",
    )
    for codec in list(CompressionType)[1:]
]


@pytest.mark.parametrize(("buf", "reason"), CORRUPT)
def test_corrupt_batches_raise_one_named_error(buf: bytes, reason: str) -> None:
    """Issue 2 §2: bad bytes raise CorruptRecordError carrying the reason, from every decoding API."""
    for decode in (decode_batch, decode_columns, decode_records, lambda b: list(iter_records(b))):
        with pytest.raises(bh.CorruptRecordError, match=reason):
            decode(buf)


def test_empty_buffer_is_no_batch_but_not_a_batch_either() -> None:
    """A buffer of batches may be empty (an empty fetch); a single batch may not."""
    assert decode_columns(b"") == {name: [] for name in ("offset", "timestamp", "key", "value", "headers")}
    assert decode_records(b"") == [] and list(iter_records(b"")) == []
    with pytest.raises(bh.CorruptRecordError, match="truncated batch header"):
        decode_batch(b"")


def test_bad_batch_after_good_ones_fails_at_the_bad_one() -> None:
    """A buffer of batches with one corrupt batch: the iterator yields the good ones first."""
    buf = GOOD + GOOD[:-1]
    seen = []
    with pytest.raises(bh.CorruptRecordError, match="truncated batch"):
        seen.extend(iter_records(buf))
    assert len(seen) == 2


@pytest.mark.parametrize(
    ("records", "kwargs", "reason"),
    [
        pytest.param([("k", b"v", (), TS)], {}, "bytes-like", id="str-key"),
        pytest.param([(None, 5, (), TS)], {}, "int", id="int-value"),
        pytest.param([(None, b"v", ((b"k", b"v"),), TS)], {}, "must be a str", id="bytes-header-key"),
        pytest.param([(None, b"v", (("k", "v"),), TS)], {}, "TypeError", id="str-header-value"),
        pytest.param([(None, b"v", (), -2)], {}, "timestamp -2", id="timestamp-below-no-timestamp"),
        pytest.param([(None, b"v", (), 1 << 63)], {}, "int64", id="timestamp-over-int64"),
        pytest.param([(None, b"v", (), 1.5)], {}, "timestamp 1.5", id="float-timestamp"),
        pytest.param([(None, b"v")], {}, "cannot encode", id="short-tuple"),
        pytest.param([(None, b"v", (), TS)], {"compression": 6}, "compression 6", id="unknown-codec"),
        pytest.param([(None, b"v", (), TS)], {"transactional": True}, "producer id", id="txn-without-pid"),
        pytest.param(
            [(None, b"v", (), TS)], {"producer_epoch": 1 << 20}, "does not fit", id="epoch-over-int16"
        ),
    ],
)
def test_build_rejects_bad_input(records: list, kwargs: dict, reason: str) -> None:
    """Bad input to the builder is Kafka's INVALID_RECORD with a message, never a half-built batch."""
    with pytest.raises(InvalidRecordError, match=reason):
        build_batch(records, **kwargs)
