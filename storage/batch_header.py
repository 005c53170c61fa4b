"""The fixed 61-byte header of a Kafka v2 RecordBatch: parse, validate, patch — without decoding records.

This is all the broker touches on the hot path (docs/architecture.md: "never re-encoded").
The full record codec lives in ``storage.record_batch``.

Bytes on the wire and on disk, big-endian::

    offset size field
    0      8    baseOffset            int64   written by the leader on append (outside the CRC)
    8      4    batchLength           int32   bytes after this field: total size = batchLength + 12
    12     4    partitionLeaderEpoch  int32   written by the leader on append (outside the CRC)
    16     1    magic                 int8    always 2
    17     4    crc                   uint32  CRC-32C of bytes [21, end)
    21     2    attributes            int16   bits 0-2 codec, 3 timestamp type, 4 transactional, 5 control
    23     4    lastOffsetDelta       int32
    27     8    baseTimestamp         int64
    35     8    maxTimestamp          int64
    43     8    producerId            int64
    51     2    producerEpoch         int16
    53     4    baseSequence          int32
    57     4    recordsCount          int32
    61     ...  records (possibly compressed)

Thread-safety: pure functions over immutable or caller-owned buffers.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c

from proto import errors

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
MAGIC_V2 = 2
BASE_OFFSET_POS = 0
LENGTH_POS = 8
LEADER_EPOCH_POS = 12
MAGIC_POS = 16
CRC_POS = 17
ATTRIBUTES_POS = 21
# The smallest batchLength a valid header can carry: the header minus the 12 overhead bytes.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
# Hard ceiling on one batch, independent of max.message.bytes, so a corrupt length never makes
# us allocate or wait for gigabytes.
MAX_BATCH_SIZE = 256 * 1024 * 1024

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")


# proto.errors makes its exception classes at import time: a type checker sees them as values only
class CorruptRecordError(errors.CorruptMessageError):  # type: ignore[valid-type,misc]
    """Bytes that are not a valid v2 RecordBatch (Kafka's CORRUPT_MESSAGE, code 2).

    ``reason`` says what is wrong, for a person; ``code`` is the Kafka error code to answer with.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class BatchHeader(NamedTuple):
    """The header fields in wire order (a NamedTuple: built straight from ``struct.unpack``, cheaply)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression_type(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``; checks sizes and magic, not the CRC (see ``validate_batch``)."""
    available = len(buf) - pos
    if available < HEADER_SIZE:
        raise CorruptRecordError(f"truncated batch header: {available} bytes, need {HEADER_SIZE}")
    header = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC_V2:
        raise CorruptRecordError(f"unsupported magic {header.magic} at position {pos}; only v2 batches")
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"batchLength {header.batch_length} is below the minimum {MIN_BATCH_LENGTH}")
    if header.size_in_bytes > MAX_BATCH_SIZE:
        raise CorruptRecordError(f"batch of {header.size_in_bytes} bytes exceeds the {MAX_BATCH_SIZE} limit")
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptRecordError(
            f"negative lastOffsetDelta {header.last_offset_delta} or recordsCount {header.records_count}"
        )
    return header


def validate_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos`` and check that the whole batch is present and its CRC matches."""
    header = parse_header(buf, pos)
    end = pos + header.size_in_bytes
    if end > len(buf):
        raise CorruptRecordError(
            f"truncated batch: header says {header.size_in_bytes} bytes, {len(buf) - pos} present"
        )
    actual = crc32c.crc32c(memoryview(buf)[pos + ATTRIBUTES_POS : end])
    if actual != header.crc:
        raise CorruptRecordError(f"CRC mismatch: stored {header.crc:#010x}, computed {actual:#010x}")
    return header


def iter_batches(buf: bytes | bytearray | memoryview, validate: bool = True):
    """Yield ``(position, header)`` for each batch in ``buf``, which must hold whole batches only."""
    pos = 0
    size = len(buf)
    check = validate_batch if validate else parse_header
    while pos < size:
        header = check(buf, pos)
        if pos + header.size_in_bytes > size:
            raise CorruptRecordError(f"truncated batch at position {pos}")
        yield pos, header
        pos += header.size_in_bytes


def patch_offset_and_epoch(buf: bytearray, pos: int, base_offset: int, partition_leader_epoch: int) -> None:
    """Write baseOffset and partitionLeaderEpoch in place; both lie outside the CRC."""
    _I64.pack_into(buf, pos + BASE_OFFSET_POS, base_offset)
    _I32.pack_into(buf, pos + LEADER_EPOCH_POS, partition_leader_epoch)
