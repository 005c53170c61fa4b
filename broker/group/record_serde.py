"""The records of ``__consumer_offsets`` in Kafka's own format, so that Kafka's tools read the topic
(``kafka-console-consumer --formatter ...OffsetsMessageFormatter``, ``kafka-dump-log --offsets-decoder``):
the coordinator's record dataclasses <-> (key, value) pairs, and a partition's log -> records.

Schemas: apache/kafka ``group-coordinator/src/main/resources/common/message/`` (``OffsetCommitKey``,
``OffsetCommitValue``, ``GroupMetadataKey``, ``GroupMetadataValue``). Every key and value starts with
an int16 version; big-endian; a string is an int16 length (-1 = null) and UTF-8, bytes an int32
length, an array an int32 count. Flexible versions (value v4) use compact forms (unsigned varint
length + 1, 0 = null) and end each struct with a tagged-field section, which is skipped.

Key, version 0 or 1 (an offset commit; Kafka writes 1)::

    version int16 | group string | topic string | partition int32

Key, version 2 (group metadata)::

    version int16 | group string

OffsetCommitValue (written: v3; read: v0-v4)::

    version int16 | offset int64 | leader_epoch int32 (v3+) | metadata string
    | commit_timestamp int64 | expire_timestamp int64 (v1 only)

GroupMetadataValue (written: v3; read: v0-v4)::

    version int16 | protocol_type string | generation int32 | protocol nullable string
    | leader nullable string | current_state_timestamp int64 (v2+, -1 = unknown)
    | members [member_id string | group_instance_id nullable string (v3+) | client_id string
               | client_host string | rebalance_timeout int32 (v1+) | session_timeout int32
               | subscription bytes | assignment bytes]

A null value is a tombstone. Equal keys are equal bytes (compaction keeps the last record per key).
A key or value that does not decode, or a key of a record type other than these (the KIP-848
consumer-group records, 3 and up), is reported (``CorruptOffsetsRecordError``), never skipped
silently. Records written by pykraft before this format (a protobuf ``RecordKey``) are not read:
their keys are reported as corrupt.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from broker.group.metadata import (
    GroupMetadataRecord,
    GroupSnapshot,
    MemberSnapshot,
    OffsetAndMetadata,
    OffsetCommitRecord,
    OffsetsRecord,
)
from proto.kafka import codec
from proto.kafka.codec import KafkaDecodeError
from proto.kafka_types import NO_EPOCH, NO_TIMESTAMP
from storage.record_batch import build_batch, iter_batches

OFFSET_COMMIT_KEY_VERSION = 1  # versions 0 and 1 are both OffsetCommitKey
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
FLEXIBLE_VALUE_VERSION = 4
_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class CorruptOffsetsRecordError(ValueError):
    """A ``__consumer_offsets`` record that is not an offset commit or group metadata record."""


# ---- encoding ------------------------------------------------------------------------------------


def encode_record(record: OffsetsRecord) -> tuple[bytes, bytes | None]:
    key = bytearray()
    if isinstance(record, OffsetCommitRecord):
        key += _I16.pack(OFFSET_COMMIT_KEY_VERSION)
        codec.write_string(key, record.group)
        codec.write_string(key, record.topic)
        key += _I32.pack(record.partition)
        return bytes(key), None if record.value is None else _offset_value(record.value)
    key += _I16.pack(GROUP_METADATA_KEY_VERSION)
    codec.write_string(key, record.group)
    return bytes(key), None if record.value is None else _group_value(record.value)


def _offset_value(value: OffsetAndMetadata) -> bytes:
    out = bytearray(_I16.pack(OFFSET_COMMIT_VALUE_VERSION))
    out += _I64.pack(value.offset)
    out += _I32.pack(value.leader_epoch)
    codec.write_string(out, value.metadata)
    out += _I64.pack(value.commit_timestamp_ms)
    return bytes(out)


def _group_value(snapshot: GroupSnapshot) -> bytes:
    out = bytearray(_I16.pack(GROUP_METADATA_VALUE_VERSION))
    codec.write_string(out, snapshot.protocol_type)
    out += _I32.pack(snapshot.generation)
    codec.write_nullable_string(out, snapshot.protocol or None)  # Kafka: null before a protocol is chosen
    codec.write_nullable_string(out, snapshot.leader or None)
    out += _I64.pack(snapshot.current_state_timestamp_ms or NO_TIMESTAMP)
    out += _I32.pack(len(snapshot.members))
    for m in snapshot.members:
        codec.write_string(out, m.member_id)
        codec.write_nullable_string(out, m.group_instance_id)
        codec.write_string(out, m.client_id)
        codec.write_string(out, m.client_host)
        out += _I32.pack(m.rebalance_timeout_ms)
        out += _I32.pack(m.session_timeout_ms)
        codec.write_bytes(out, m.subscription)
        codec.write_bytes(out, m.assignment)
    return bytes(out)


def encode_batch(records: tuple[OffsetsRecord, ...], timestamp_ms: int) -> bytes:
    """One uncompressed v2 batch holding ``records`` (appended atomically by the leader)."""
    return build_batch([(*encode_record(r), (), timestamp_ms) for r in records])


# ---- decoding ------------------------------------------------------------------------------------


class _Reader:
    """Sequential reads over one key or value; ``flexible`` picks the compact forms."""

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.buf, self.pos, self.end, self.flexible = memoryview(data), 0, len(data), flexible

    def fixed(self, s: struct.Struct) -> int:
        if self.pos + s.size > self.end:
            raise KafkaDecodeError(f"{s.size}-byte integer at position {self.pos} runs past the end")
        (value,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return value

    def nullable_string(self) -> str | None:
        read = codec.read_nullable_compact_string if self.flexible else codec.read_nullable_string
        value, self.pos = read(self.buf, self.pos, self.end)
        return value

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise KafkaDecodeError(f"a non-nullable string before position {self.pos} is null")
        return value

    def bytes_(self) -> bytes:
        read = codec.read_compact_bytes if self.flexible else codec.read_bytes
        value, self.pos = read(self.buf, self.pos, self.end)
        return value

    def count(self) -> int:
        read = codec.read_compact_count if self.flexible else codec.read_count
        n, self.pos = read(self.buf, self.pos, self.end, 1)
        if n < 0:
            raise KafkaDecodeError(f"a non-nullable array before position {self.pos} is null")
        return n

    def tagged_fields(self) -> None:
        if self.flexible:
            self.pos = codec.skip_tagged_fields(self.buf, self.pos, self.end)


def decode_record(key: bytes | None, value: bytes | None) -> OffsetsRecord:
    try:
        k = _Reader(key or b"")
        version = k.fixed(_I16)
        if version in (0, 1):
            group, topic, partition = k.string(), k.string(), k.fixed(_I32)
            committed = None if value is None else _decode_offset_value(value)
            return OffsetCommitRecord(group, topic, partition, committed)
        if version == GROUP_METADATA_KEY_VERSION:
            group = k.string()
            return GroupMetadataRecord(group, None if value is None else _decode_group_value(value))
    except (KafkaDecodeError, IndexError, struct.error) as exc:
        raise CorruptOffsetsRecordError(f"record key {key!r}: {exc}") from exc
    raise CorruptOffsetsRecordError(
        f"record key {key!r}: record type {version} is neither an offset commit (0, 1) nor group metadata (2)"
    )


def _value_reader(value: bytes, what: str) -> tuple[_Reader, int]:
    version = _Reader(value).fixed(_I16)
    if not 0 <= version <= FLEXIBLE_VALUE_VERSION:
        raise KafkaDecodeError(f"{what} version {version} is not one of 0-{FLEXIBLE_VALUE_VERSION}")
    reader = _Reader(value, flexible=version >= FLEXIBLE_VALUE_VERSION)
    reader.pos = _I16.size
    return reader, version


def _decode_offset_value(value: bytes) -> OffsetAndMetadata:
    r, version = _value_reader(value, "OffsetCommitValue")
    offset = r.fixed(_I64)
    leader_epoch = r.fixed(_I32) if version >= 3 else NO_EPOCH
    metadata, commit_timestamp_ms = r.string(), r.fixed(_I64)
    if version == 1:
        r.fixed(_I64)  # expire_timestamp (Kafka < 2.1): retention now counts from the commit
    r.tagged_fields()
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_timestamp_ms)


def _decode_group_value(value: bytes) -> GroupSnapshot:
    r, version = _value_reader(value, "GroupMetadataValue")
    protocol_type, generation = r.string(), r.fixed(_I32)
    protocol, leader = r.nullable_string() or "", r.nullable_string() or ""
    state_timestamp_ms = max(r.fixed(_I64), 0) if version >= 2 else 0
    members = []
    for _ in range(r.count()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id, client_host = r.string(), r.string()
        rebalance_timeout_ms = r.fixed(_I32) if version >= 1 else None
        session_timeout_ms = r.fixed(_I32)
        if rebalance_timeout_ms is None:  # v0 had one timeout for both (Kafka's rule)
            rebalance_timeout_ms = session_timeout_ms
        subscription, assignment = r.bytes_(), r.bytes_()
        r.tagged_fields()
        members.append(MemberSnapshot(member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                                      session_timeout_ms, subscription, assignment))  # fmt: skip
    r.tagged_fields()
    return GroupSnapshot(protocol_type, generation, protocol, leader, state_timestamp_ms, tuple(members))


def decode_batches(data: bytes) -> Iterator[tuple[int, bytes | None, bytes | None]]:
    """(next offset after the batch, key, value) for each record of ``data`` (decode each with
    ``decode_record``); a batch without records yields (next offset, None, None) so that a reader
    still moves on."""
    for batch in iter_batches(data):
        next_offset = batch.header.next_offset
        if batch.header.is_control or not batch.records:
            yield next_offset, None, None
            continue
        for record in batch.records:
            yield next_offset, record.key, record.value
