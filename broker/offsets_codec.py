"""The records of ``__consumer_offsets`` as bytes (proto/group.proto): the coordinator's record
dataclasses <-> (key, value) pairs, and a partition's log -> records for loading.

Key: a ``RecordKey`` serialized deterministically (so that equal keys are equal bytes and compaction
keeps the last record per key); value: ``OffsetCommitValue`` / ``GroupMetadataValue``, or null for a
tombstone. A record whose key does not parse is reported (``CorruptOffsetsRecordError``), never
skipped silently.
"""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf.message import DecodeError

from broker.group_metadata import (
    GroupMetadataRecord,
    GroupSnapshot,
    MemberSnapshot,
    OffsetAndMetadata,
    OffsetCommitRecord,
    OffsetsRecord,
)
from proto import group_pb2
from storage.record_batch import build_batch, iter_batches


class CorruptOffsetsRecordError(ValueError):
    """A ``__consumer_offsets`` record that is not a RecordKey / value of proto/group.proto."""


def encode_record(record: OffsetsRecord) -> tuple[bytes, bytes | None]:
    key = group_pb2.RecordKey()
    if isinstance(record, OffsetCommitRecord):
        key.offset_commit.group, key.offset_commit.topic = record.group, record.topic
        key.offset_commit.partition = record.partition
        value = record.value
        encoded = (
            None
            if value is None
            else group_pb2.OffsetCommitValue(
                offset=value.offset,
                leader_epoch=value.leader_epoch,
                metadata=value.metadata,
                commit_timestamp_ms=value.commit_timestamp_ms,
            ).SerializeToString()
        )
        return key.SerializeToString(deterministic=True), encoded
    key.group_metadata.group = record.group
    snapshot = record.value
    if snapshot is None:
        return key.SerializeToString(deterministic=True), None
    message = group_pb2.GroupMetadataValue(
        protocol_type=snapshot.protocol_type,
        generation=snapshot.generation,
        protocol=snapshot.protocol,
        leader=snapshot.leader,
        current_state_timestamp_ms=snapshot.current_state_timestamp_ms,
    )
    for m in snapshot.members:
        member = message.members.add(
            member_id=m.member_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            session_timeout_ms=m.session_timeout_ms,
            subscription=m.subscription,
            assignment=m.assignment,
        )
        if m.group_instance_id is not None:
            member.group_instance_id = m.group_instance_id
    return key.SerializeToString(deterministic=True), message.SerializeToString()


def decode_record(key: bytes | None, value: bytes | None) -> OffsetsRecord:
    try:
        parsed = group_pb2.RecordKey.FromString(key or b"")
        kind = parsed.WhichOneof("key")
        if kind == "offset_commit":
            k = parsed.offset_commit
            if value is None:
                return OffsetCommitRecord(k.group, k.topic, k.partition, None)
            v = group_pb2.OffsetCommitValue.FromString(value)
            committed = OffsetAndMetadata(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp_ms)
            return OffsetCommitRecord(k.group, k.topic, k.partition, committed)
        if kind == "group_metadata":
            group = parsed.group_metadata.group
            return GroupMetadataRecord(group, None if value is None else _snapshot(value))
    except DecodeError as exc:
        raise CorruptOffsetsRecordError(f"record key {key!r}: {exc}") from exc
    raise CorruptOffsetsRecordError(f"record key {key!r} is neither an offset commit nor group metadata")


def _snapshot(value: bytes) -> GroupSnapshot:
    v = group_pb2.GroupMetadataValue.FromString(value)
    members = tuple(
        MemberSnapshot(
            m.member_id,
            m.group_instance_id if m.HasField("group_instance_id") else None,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            m.subscription,
            m.assignment,
        )
        for m in v.members
    )
    return GroupSnapshot(
        v.protocol_type, v.generation, v.protocol, v.leader, v.current_state_timestamp_ms, members
    )


def encode_batch(records: tuple[OffsetsRecord, ...], timestamp_ms: int) -> bytes:
    """One uncompressed v2 batch holding ``records`` (appended atomically by the leader)."""
    return build_batch([(*encode_record(r), (), timestamp_ms) for r in records])


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
