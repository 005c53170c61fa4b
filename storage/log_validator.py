"""Validating appended batches and assigning their offsets, Kafka's ``LogValidator``.

A produce (or a follower fetch) hands the log a buffer of whole v2 batches. Before anything is written,
every batch must pass: header and CRC-32C (``batch_header.validate_batch``), size <= max.message.bytes,
recordsCount == lastOffsetDelta + 1. The first failure raises a Kafka error naming the batch and the
rule; the log then writes nothing (all or nothing).

On the leader the batches of a client (``AppendOrigin.CLIENT``) must not be control batches (only the
broker writes transaction markers) and a batch with a producer id must carry a base sequence >= 0
(INVALID_RECORD, Kafka's ``validateBatch``); the broker's own coordinators (``AppendOrigin.COORDINATOR``)
skip those two. A batch that counts no records is INVALID_RECORD even when its header says
lastOffsetDelta -1 — the CRC holds, so it is a producer's mistake, not corruption.

On the leader (a client's batches) the records are checked too, as Kafka's LogValidator does
(``record_batch.check_batch_records``): a compressed region must decompress with its codec, and the
records must match the header (recordsCount records, each within its length, offset deltas 0..n-1, no
bytes left over) — else CORRUPT_MESSAGE and nothing is appended. A CRC only proves that the bytes
arrived as the producer sent them; without this check a batch marked zstd whose payload is not zstd
was appended, and every consumer then failed at its offset. Uncompressed batches are checked as well
(Kafka iterates their records too): the walk skips keys and values by length without copying them,
and records of one shape (a producer's usual batch) are proved well formed with strided slices
instead (``storage.uniform_records``, same verdicts; the costs are in bench/RESULTS.md,
``storage_bench --validation-only``). A follower does not re-check: it
stores what its leader accepted (and a compacted leader's batches have offset gaps).

Offsets on the leader: batch i gets ``baseOffset = LEO + records before it`` and the leader's epoch.
Both fields are outside the CRC (bytes 0-7 and 12-15), so each batch becomes *pieces to write*: a new
16-byte prefix (baseOffset, batchLength, partitionLeaderEpoch) and a memoryview of bytes 16..end of the
caller's buffer — the records are never copied. Only LogAppendTime changes bytes inside the CRC
(attributes and maxTimestamp); that topic setting copies the buffer and recomputes each CRC.

A follower keeps the leader's offsets, which must not overlap its log end offset. A compacted leader
(``storage.cleaner``) sends batches with gaps before them and fewer records than offsets, so a
replicated batch may start past the LEO and hold at most lastOffsetDelta + 1 records (Kafka checks the
exact count only for clients' batches).

Thread-safety: pure functions over caller-owned buffers; nothing here touches a file.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import crc32c

from proto import errors
from proto.kafka_types import NO_PRODUCER_ID
from storage.batch_header import (
    _HEADER,
    ATTRIBUTES_POS,
    CRC_POS,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    CorruptRecordError,
    patch_offset_and_epoch,
    validate_batch,
)
from storage.config import LogConfig
from storage.record_batch import check_batch_records
from storage.segment import AppendedBatch

_MAX_TIMESTAMP_POS = 35
_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch: bytes 0-15
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")


class AppendOrigin(enum.Enum):
    """Who appends on the leader (Kafka's ``AppendOrigin``): a client gets every check; the broker's own
    coordinators may write what clients may not (control batches; internal topics, see
    ``broker.replica.replica_manager``)."""

    CLIENT = "client"
    COORDINATOR = "coordinator"


# proto.errors makes its exception classes at import time: a type checker sees them as values only
class UnexpectedAppendOffsetError(errors.InvalidRecordError):  # type: ignore[valid-type,misc]
    """A follower append whose offsets do not continue the log (a replication bug, not bad user data)."""


@dataclass(frozen=True, slots=True)
class ValidBatches:
    """A buffer whose batches all passed validation, with each batch's position and header."""

    data: memoryview
    headers: list[tuple[int, BatchHeader]]
    num_records: int


def validate_batches(
    batches: bytes | bytearray | memoryview,
    config: LogConfig,
    name: str,
    replicated: bool = False,
    origin: AppendOrigin = AppendOrigin.CLIENT,
) -> ValidBatches:
    """Check every batch before anything is written; raise the first problem as a Kafka error.
    ``replicated``: batches from the leader (compacted ones may hold fewer records than offsets);
    ``origin``: who appends on the leader."""
    data = memoryview(batches).cast("B")
    size = len(data)
    if not size:
        raise errors.CorruptMessageError(f"{name}: an append needs at least one batch")
    # A follower copies what the leader accepted: size limits are the leader's to enforce (Kafka's
    # appendAsFollower ignores the record size). Checking them here would stop replication for good
    # after max.message.bytes or segment.bytes is lowered on a topic that holds larger batches.
    if size > config.segment_bytes and not replicated:
        raise errors.RecordListTooLargeError(
            f"{name}: {size} bytes of batches exceed segment.bytes={config.segment_bytes}"
        )
    headers = []
    position = records = 0
    try:
        while position < size:
            header = validate_batch(data, position)  # also checks the batch lies inside ``data``
            _check_batch(position, header, config, replicated)
            if origin is AppendOrigin.CLIENT and not replicated:
                _check_client_batch(position, header)
            if not replicated:  # the leader's check; a follower keeps what the leader accepted
                check_batch_records(data, position, header)
            headers.append((position, header))
            records += header.records_count
            position += header.batch_length + LOG_OVERHEAD
    except CorruptRecordError as exc:
        if not replicated:
            _refuse_if_empty(data, position, name)
        raise errors.CorruptMessageError(f"{name}: batch {len(headers)} is corrupt: {exc.reason}") from None
    return ValidBatches(data, headers, records)


def _refuse_if_empty(data: memoryview, position: int, name: str) -> None:
    """INVALID_RECORD for an intact batch (magic 2, CRC holds) that counts no records: the header
    parser calls lastOffsetDelta -1 corrupt, but Kafka answers a producer's empty batch INVALID_RECORD.
    Runs only once a batch was already refused, so it costs nothing on the hot path."""
    if len(data) - position < HEADER_SIZE:
        return
    header = BatchHeader(*_HEADER.unpack_from(data, position))
    end = position + header.size_in_bytes
    if header.magic != MAGIC_V2 or header.batch_length < MIN_BATCH_LENGTH or end > len(data):
        return
    if header.records_count > 0 and header.last_offset_delta >= 0:
        return
    if crc32c.crc32c(data[position + ATTRIBUTES_POS : end]) != header.crc:
        return
    raise errors.InvalidRecordError(
        f"{name}: batch at byte {position} holds no records (recordsCount {header.records_count}, "
        f"lastOffsetDelta {header.last_offset_delta}); a batch needs at least one record"
    )


def _check_client_batch(position: int, header: BatchHeader) -> None:
    """Kafka's ``validateBatch`` for ``AppendOrigin.CLIENT``."""
    if header.is_control:
        raise errors.InvalidRecordError(
            f"batch at byte {position}: Clients are not allowed to write control records"
        )
    if header.producer_id > NO_PRODUCER_ID and header.base_sequence < 0:
        raise errors.InvalidRecordError(
            f"batch at byte {position}: invalid sequence number {header.base_sequence} in a batch with "
            f"producerId {header.producer_id}; an idempotent producer numbers its batches from 0"
        )


def _check_batch(position: int, header: BatchHeader, config: LogConfig, replicated: bool) -> None:
    if header.size_in_bytes > config.max_message_bytes and not replicated:
        raise errors.MessageTooLargeError(
            f"batch at byte {position} is {header.size_in_bytes} bytes, over max.message.bytes="
            f"{config.max_message_bytes}; send smaller batches or raise the topic's setting"
        )
    if replicated and header.records_count <= header.last_offset_delta + 1:
        return
    if header.records_count <= 0:
        raise errors.InvalidRecordError(
            f"batch at byte {position} holds no records (recordsCount {header.records_count}); a batch "
            "needs at least one record"
        )
    if header.records_count != header.last_offset_delta + 1:
        raise errors.InvalidRecordError(
            f"batch at byte {position} has recordsCount {header.records_count} but lastOffsetDelta "
            f"{header.last_offset_delta}; they must agree (count = lastOffsetDelta + 1)"
        )


def assign_offsets(
    valid: ValidBatches, first_offset: int, leader_epoch: int
) -> tuple[list[bytes | memoryview], list[AppendedBatch]]:
    """Leader offsets from ``first_offset``: per batch a patched prefix plus the untouched rest."""
    offset = first_offset
    pieces: list[bytes | memoryview] = []
    appended = []
    for position, header in valid.headers:
        pieces.append(_PREFIX.pack(offset, header.batch_length, leader_epoch))
        pieces.append(valid.data[position + _PREFIX.size : position + header.size_in_bytes])
        last_offset = offset + header.last_offset_delta
        appended.append(AppendedBatch(position, header.size_in_bytes, last_offset, header.max_timestamp))
        offset = last_offset + 1
    return pieces, appended


def assign_offsets_with_log_append_time(
    valid: ValidBatches, first_offset: int, leader_epoch: int, now_ms: int
) -> tuple[list[bytearray], list[AppendedBatch]]:
    """Leader offsets plus LogAppendTime: copy, stamp maxTimestamp and the type bit, recompute CRCs."""
    buffer = bytearray(valid.data)
    offset = first_offset
    appended = []
    for position, header in valid.headers:
        patch_offset_and_epoch(buffer, position, offset, leader_epoch)
        _stamp_log_append_time(buffer, position, header, now_ms)
        last_offset = offset + header.last_offset_delta
        appended.append(AppendedBatch(position, header.size_in_bytes, last_offset, now_ms))
        offset = last_offset + 1
    return [buffer], appended


def _stamp_log_append_time(buffer: bytearray, position: int, header: BatchHeader, now_ms: int) -> None:
    _I16.pack_into(buffer, position + ATTRIBUTES_POS, header.attributes | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buffer, position + _MAX_TIMESTAMP_POS, now_ms)
    end = position + header.size_in_bytes
    _U32.pack_into(
        buffer, position + CRC_POS, crc32c.crc32c(memoryview(buffer)[position + ATTRIBUTES_POS : end])
    )


def follower_batches(valid: ValidBatches, log_end_offset: int, name: str) -> list[AppendedBatch]:
    """The leader's offsets, checked not to overlap ``log_end_offset`` or each other (a gap is a
    compacted range of the leader's log)."""
    expected = log_end_offset
    appended = []
    for position, header in valid.headers:
        if header.base_offset < expected:
            raise UnexpectedAppendOffsetError(
                f"{name}: follower batch starts at offset {header.base_offset}, below {expected} "
                f"(log end offset {log_end_offset}); truncate or refetch from the LEO"
            )
        appended.append(
            AppendedBatch(position, header.size_in_bytes, header.last_offset, header.max_timestamp)
        )
        expected = header.next_offset
    return appended
