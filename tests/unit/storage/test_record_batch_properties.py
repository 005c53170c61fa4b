"""Property tests of the v2 codec (issue 2 §2): round trips, and any bytes decode or raise one error.

Example counts stay modest so the file runs in seconds; the mutation strategies reseal the CRC so
that the record-level checks (not just the CRC) meet the damaged bytes.
"""

from __future__ import annotations

import struct

import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_record_batch_interop import kafka_python_read

from proto.kafka_types import NO_PRODUCER_ID
from storage import batch_header as bh
from storage.compression import CompressionType
from storage.record_batch import (
    Record,
    TimestampType,
    build_batch,
    decode_batch,
    decode_columns,
    decode_records,
    iter_records,
)

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

nullable_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=20)), max_size=3).map(tuple)
timestamps = st.integers(min_value=0, max_value=1 << 45)
records = st.lists(st.tuples(nullable_bytes, nullable_bytes, headers, timestamps), max_size=25)
codecs = st.sampled_from(list(CompressionType))


@st.composite
def batch_kwargs(draw: st.DrawFn) -> dict:
    producer_id = draw(st.sampled_from([NO_PRODUCER_ID, 0, 1 << 40]))
    return {
        "base_offset": draw(st.integers(min_value=0, max_value=1 << 62)),
        "compression": draw(codecs),
        "producer_id": producer_id,
        "producer_epoch": draw(st.integers(min_value=-1, max_value=(1 << 15) - 1)),
        "base_sequence": draw(st.integers(min_value=-1, max_value=(1 << 31) - 1)),
        "transactional": producer_id != NO_PRODUCER_ID and draw(st.booleans()),
        "timestamp_type": draw(st.sampled_from(list(TimestampType))),
        "partition_leader_epoch": draw(st.integers(min_value=-1, max_value=1 << 20)),
        "control": draw(st.booleans()),
    }


def expected_records(inputs: list[tuple], base_offset: int, timestamp_type: int) -> tuple[Record, ...]:
    max_timestamp = max((ts for *_, ts in inputs), default=-1)
    return tuple(
        Record(base_offset + i, max_timestamp if timestamp_type else ts, k, v, h)
        for i, (k, v, h, ts) in enumerate(inputs)
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records, batch_kwargs())
def test_round_trip(inputs: list[tuple], kwargs: dict) -> None:
    """Whatever we build decodes to the same records and header fields, by every decoding API."""
    buf = build_batch(inputs, **kwargs)
    batch = decode_batch(buf)
    want = expected_records(inputs, kwargs["base_offset"], kwargs["timestamp_type"])
    assert batch.records == want
    assert (
        decode_records(buf, include_control=True)
        == list(want)
        == list(iter_records(buf, include_control=True))
    )
    columns = decode_columns(buf, include_control=True)
    assert list(zip(*columns.values(), strict=True)) == [tuple(r) for r in want]
    assert decode_records(buf) == ([] if kwargs["control"] else list(want)), "control batches are skipped"
    header = batch.header
    assert header.compression_type == kwargs["compression"]
    assert header.records_count == len(inputs)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        kwargs["producer_id"], kwargs["producer_epoch"], kwargs["base_sequence"],
    )  # fmt: skip
    assert header.is_transactional == kwargs["transactional"]
    assert header.is_control == kwargs["control"]
    assert header.partition_leader_epoch == kwargs["partition_leader_epoch"]


@SLOW
@given(records, codecs, st.integers(min_value=0, max_value=1 << 40))
def test_kafka_python_reads_what_we_build(inputs: list[tuple], codec: int, base_offset: int) -> None:
    """Interop as a property: kafka-python's parser sees the records we encoded."""
    buf = build_batch(inputs, compression=codec, base_offset=base_offset)
    assert kafka_python_read(buf) == [tuple(r) for r in expected_records(inputs, base_offset, 0)]


def _outcome(buf: bytes) -> None:
    """Every decoding API either succeeds or raises CorruptRecordError (anything else fails the test)."""
    for decode in (decode_batch, decode_columns, decode_records, lambda b: list(iter_records(b))):
        try:
            decode(buf)
        except bh.CorruptRecordError as exc:
            assert exc.reason, "a CorruptRecordError must carry a reason"


@FAST
@given(st.binary(max_size=400))
def test_arbitrary_bytes(buf: bytes) -> None:
    _outcome(buf)


@FAST
@given(st.binary(min_size=bh.HEADER_SIZE - 21, max_size=300), st.integers(0, 7), st.integers(-3, 40))
def test_arbitrary_regions_behind_a_valid_header(region: bytes, codec: int, count: int) -> None:
    """Random records regions with a correct CRC, any codec id, any count: parsed or one named error."""
    header = bytearray(build_batch([]))[: bh.HEADER_SIZE]
    struct.pack_into(">h", header, bh.ATTRIBUTES_POS, codec)
    struct.pack_into(">i", header, 57, count)
    _outcome(_reseal(header + region))


def _reseal(buf: bytearray) -> bytes:
    if len(buf) >= bh.HEADER_SIZE:
        struct.pack_into(">i", buf, bh.LENGTH_POS, len(buf) - bh.LOG_OVERHEAD)
        struct.pack_into(">I", buf, bh.CRC_POS, crc32c.crc32c(memoryview(buf)[bh.ATTRIBUTES_POS :]))
    return bytes(buf)


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(min_value=0), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(min_value=0), st.just(0)),
    st.tuples(st.just("insert"), st.integers(min_value=0), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(min_value=0), st.just(0)),
)


@FAST
@given(records, codecs, st.lists(mutation, min_size=1, max_size=4), st.booleans())
def test_mutated_batches(inputs: list[tuple], codec: int, mutations: list[tuple], reseal: bool) -> None:
    """A valid batch damaged by flips, cuts, inserts and deletes (CRC resealed or not)."""
    buf = bytearray(build_batch(inputs, compression=codec))
    for kind, position, byte in mutations:
        where = position % (len(buf) + 1)
        if kind == "flip" and where < len(buf):
            buf[where] ^= byte
        elif kind == "cut":
            del buf[where:]
        elif kind == "insert":
            buf.insert(where, byte)
        elif kind == "delete" and where < len(buf):
            del buf[where]
    _outcome(_reseal(buf) if reseal else bytes(buf))
