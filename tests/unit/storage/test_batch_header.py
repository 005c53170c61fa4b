"""The v2 batch header: parse, validate (CRC-32C over attributes..end) and patch outside the CRC."""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from storage import batch_header as bh


def kafka_python_batch(n: int = 3) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=1 << 20,
    )
    for i in range(n):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v" * 10, headers=[])
    return bytes(builder.build())


def test_parse_kafka_python_batch() -> None:
    buf = kafka_python_batch(3)
    header = bh.validate_batch(buf)
    assert header.magic == bh.MAGIC_V2
    assert header.size_in_bytes == len(buf)
    assert header.records_count == 3
    assert header.last_offset_delta == 2
    assert header.base_timestamp == 1_700_000_000_000
    assert header.max_timestamp == 1_700_000_000_002
    assert header.compression_type == 0
    assert not header.is_transactional and not header.is_control


def test_patch_keeps_crc_valid() -> None:
    """baseOffset and partitionLeaderEpoch lie outside the CRC, so patching needs no re-encode."""
    buf = bytearray(kafka_python_batch(5))
    bh.patch_offset_and_epoch(buf, 0, base_offset=1234, partition_leader_epoch=7)
    header = bh.validate_batch(buf)
    assert (header.base_offset, header.partition_leader_epoch) == (1234, 7)
    assert (header.last_offset, header.next_offset) == (1238, 1239)


def test_iter_batches_walks_many() -> None:
    one = kafka_python_batch(2)
    positions = [pos for pos, _ in bh.iter_batches(one * 3)]
    assert positions == [0, len(one), 2 * len(one)]


def _corrupt(mutate) -> bytes:
    buf = bytearray(kafka_python_batch(2))
    mutate(buf)
    return bytes(buf)


@pytest.mark.parametrize(
    ("buf", "reason"),
    [
        pytest.param(b"", "truncated batch header", id="empty"),
        pytest.param(kafka_python_batch()[:40], "truncated batch header", id="short-header"),
        pytest.param(kafka_python_batch()[:-1], "truncated batch", id="short-body"),
        pytest.param(_corrupt(lambda b: b.__setitem__(16, 1)), "unsupported magic 1", id="magic-1"),
        pytest.param(_corrupt(lambda b: b.__setitem__(-1, b[-1] ^ 0xFF)), "CRC mismatch", id="bad-crc"),
        pytest.param(_corrupt(lambda b: struct.pack_into(">i", b, 8, -5)), "below the minimum", id="neg-len"),
        pytest.param(_corrupt(lambda b: struct.pack_into(">i", b, 8, 2**30)), "exceeds", id="huge-len"),
        pytest.param(_corrupt(lambda b: struct.pack_into(">i", b, 23, -1)), "negative", id="neg-delta"),
    ],
)
def test_bad_bytes_raise_corrupt_record(buf: bytes, reason: str) -> None:
    with pytest.raises(bh.CorruptRecordError, match=reason):
        bh.validate_batch(buf)


def test_iter_batches_rejects_trailing_garbage() -> None:
    with pytest.raises(bh.CorruptRecordError):
        list(bh.iter_batches(kafka_python_batch() + b"\x00" * 10))
