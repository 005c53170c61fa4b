"""Interop with kafka-python, the reference v2 codec: its batches decode with ours and ours with it.

Also the helpers other storage tests use. kafka-python looks for the ``python-snappy`` module, which
this project does not install; its snappy code only calls ``snappy.compress`` / ``snappy.decompress``
on raw blocks (it does the xerial framing itself), so cramjam's raw snappy functions stand in.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import cramjam
import kafka.codec
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from storage.batch_header import patch_offset_and_epoch
from storage.record_batch import CompressionType, TimestampType, build_batch, decode_batch


class CramjamSnappy:
    """The two functions of python-snappy that kafka.codec calls."""

    @staticmethod
    def compress(data: bytes) -> bytes:
        return bytes(cramjam.snappy.compress_raw(data))

    @staticmethod
    def decompress(data: bytes) -> bytes:
        return bytes(cramjam.snappy.decompress_raw(data))


@contextlib.contextmanager
def snappy_for_kafka_python() -> Iterator[None]:
    previous = kafka.codec.snappy
    kafka.codec.snappy = CramjamSnappy
    try:
        yield
    finally:
        kafka.codec.snappy = previous


def kafka_python_build(
    records: Sequence[tuple], codec: int, *, transactional: bool = False, producer_id: int = -1,
    producer_epoch: int = -1, base_sequence: int = -1,
) -> bytes:  # fmt: skip
    """A batch built by kafka-python from ``(key, value, headers, timestamp)`` records."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, batch_size=1 << 30,
    )  # fmt: skip
    with snappy_for_kafka_python():
        for offset_delta, (key, value, headers, timestamp) in enumerate(records):
            builder.append(offset_delta, timestamp=timestamp, key=key, value=value, headers=list(headers))
        return bytes(builder.build())


def kafka_python_read(buf: bytes) -> list[tuple]:
    """Every record of a buffer of batches as kafka-python sees it, CRCs checked:
    ``(offset, timestamp, key, value, headers)``."""
    out: list[tuple] = []
    records = MemoryRecords(buf)
    with snappy_for_kafka_python():
        while (batch := records.next_batch()) is not None:
            assert isinstance(batch, DefaultRecordBatch), type(batch)
            assert batch.validate_crc(), "kafka-python rejects the CRC"
            out.extend(
                (r.offset, r.timestamp, r.key, r.value, tuple((k, v) for k, v in r.headers)) for r in batch
            )
    return out


# ----------------------------------------------------------------------------------------------
# Interop tests (issue 2 §2): both directions, every codec, headers, null keys and null values.

CODECS = [pytest.param(codec, id=codec.name.lower()) for codec in CompressionType]


def interop_records(n: int = 200) -> list[tuple]:
    """Compressible records (so kafka-python really compresses) with every nullable shape."""
    records = []
    for i in range(n):
        key = None if i % 3 == 0 else b"key-%d" % (i % 10)
        value = None if i % 5 == 0 else (b"value %d " % i) * (1 + i % 4)
        headers = [("trace", b"t%d" % i), ("empty", b""), ("null", None)] if i % 4 == 0 else []
        records.append((key, value, headers, 1_700_000_000_000 + i * 7 - (i % 3)))
    return records


def expected(records: list[tuple], base_offset: int) -> list[tuple]:
    return [(base_offset + i, ts, k, v, tuple(h)) for i, (k, v, h, ts) in enumerate(records)]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_batches_decode_with_ours(codec: CompressionType) -> None:
    """Issue 2 §2: a batch built by kafka-python decodes with ours to the same records."""
    records = interop_records()
    buf = bytearray(kafka_python_build(records, codec, producer_id=42, producer_epoch=3, base_sequence=9))
    patch_offset_and_epoch(buf, 0, base_offset=1000, partition_leader_epoch=5)
    batch = decode_batch(bytes(buf))
    assert batch.header.compression_type == codec, "kafka-python fell back to an uncompressed batch"
    assert [tuple(r) for r in batch.records] == expected(records, 1000)
    header = batch.header
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 9)
    assert (header.base_offset, header.partition_leader_epoch, header.last_offset_delta) == (1000, 5, 199)


@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_read_back_by_kafka_python(codec: CompressionType) -> None:
    """Issue 2 §2: batches we build are read back identically by kafka-python's parser (CRC checked)."""
    records = interop_records()
    first = build_batch(records[:120], compression=codec, base_offset=0)
    second = build_batch(records[120:], compression=codec, base_offset=120, partition_leader_epoch=2)
    assert kafka_python_read(first + second) == expected(records, 0)


@pytest.mark.parametrize("codec", CODECS)
def test_producer_state_and_flags_read_by_kafka_python(codec: CompressionType) -> None:
    """KIP-98 fields and the transactional bit, as kafka-python's DefaultRecordBatch reads them."""
    buf = build_batch(
        interop_records(10), compression=codec, producer_id=7, producer_epoch=2, base_sequence=100,
        transactional=True,
    )  # fmt: skip
    batch = DefaultRecordBatch(bytearray(buf))
    assert batch.validate_crc()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 2, 100)
    assert batch.is_transactional and not batch.is_control_batch
    assert batch.compression_type == codec
    assert batch.last_offset_delta == 9


@pytest.mark.parametrize(
    "codec",
    # gzip's bytes depend on the writer's level and header fields, so only the others compare bytes
    [c for c in CODECS if c.values[0] != CompressionType.GZIP],
)
def test_byte_identical_to_kafka_python(codec: CompressionType) -> None:
    """Same records, same codec library and settings -> the very same bytes as kafka-python's builder."""
    records = interop_records()
    ours = build_batch(records, compression=codec, partition_leader_epoch=0)  # kafka-python writes epoch 0
    assert ours == kafka_python_build(records, codec)


def test_log_append_time_read_by_kafka_python() -> None:
    """With LOG_APPEND_TIME every record carries the batch's maxTimestamp, in both codecs."""
    records = interop_records(5)
    buf = build_batch(records, timestamp_type=TimestampType.LOG_APPEND_TIME)
    max_timestamp = max(ts for *_, ts in records)
    assert {ts for _, ts, *_ in kafka_python_read(buf)} == {max_timestamp}
    assert {r.timestamp for r in decode_batch(buf).records} == {max_timestamp}
