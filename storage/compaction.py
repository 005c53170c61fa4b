"""Log compaction's decisions, sans I/O: which segments to clean and what each cleaned batch keeps.

Kafka's ``LogCleaner`` rules, for a log whose ``cleanup.policy`` contains ``compact``:

- **Cleanable range.** Only whole inactive segments that end at or below the upper bound (the caller
  passes ``min(high watermark, active segment base)``) and, with ``min.compaction.lag.ms``, whose
  newest record is at least that old. Nothing at or above the bound is read or changed.
- **Dirty ratio.** The cleaner checkpoint (first dirty offset) splits the range into a *clean* part
  (already compacted) and a *dirty* part; a log is cleaned when dirty / (clean + dirty) bytes
  reaches ``min.cleanable.dirty.ratio``, or when tombstones may have passed their delete horizon.
- **Offset map.** The dirty part's records give, per key, the offset of its last record
  (``OffsetMap``). A record is kept when it is the last of its key (``offset >= map[key]``; keys not in
  the map are kept). Records without a key are dropped (Kafka counts them as invalid).
- **Tombstones** (null value, KIP-534): the first cleaning that keeps a batch holding tombstones
  stamps it with a delete horizon ``now + delete.retention.ms`` (attributes bit 6, the horizon stored
  in baseTimestamp); a later cleaning drops its tombstones once ``now >= horizon``. So a consumer
  reading from the start within ``delete.retention.ms`` of a cleaning always sees the delete.
- **Batches** keep their base offset, producer id/epoch, base sequence, partition leader epoch, codec
  and lastOffsetDelta (``record_batch.rebuild_batch``); records keep their offsets. A batch that keeps
  all its records is copied byte for byte. A batch left with no records is dropped, except when the
  caller asks to keep it (the last batch of a producer — its last sequence is producer state — and the
  last batch of a cleaned segment, whose end offset must not move): then an empty batch with the same
  offsets stays. Control batches (transaction markers) are always kept.

Thread-safety: pure functions and one mutable ``OffsetMap`` owned by one cleaning pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from proto import errors
from proto.kafka_types import NO_OFFSET
from storage.batch_header import DELETE_HORIZON_MASK, BatchHeader
from storage.record_batch import decode_batch, rebuild_batch


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What the planning functions need to know about one segment."""

    base_offset: int
    next_offset: int
    size_bytes: int
    max_timestamp_ms: int  # the newest record's timestamp (or the segment's creation time)


def cleanable_count(
    segments: Sequence[SegmentInfo], upper_bound: int, now_ms: int, min_compaction_lag_ms: int
) -> int:
    """How many leading segments may be cleaned: whole segments ending at or below ``upper_bound``
    (the caller excludes the active segment) whose newest record is ``min_compaction_lag_ms`` old."""
    count = 0
    for segment in segments:
        if segment.next_offset > upper_bound or now_ms - segment.max_timestamp_ms < min_compaction_lag_ms:
            break
        count += 1
    return count


def dirty_ratio(segments: Sequence[SegmentInfo], first_dirty_offset: int) -> tuple[float, int]:
    """(dirty bytes / all bytes, dirty bytes) of ``segments``; a segment ending after
    ``first_dirty_offset`` is dirty (cleaning works in whole segments, so the checkpoint is a boundary)."""
    dirty = sum(s.size_bytes for s in segments if s.next_offset > first_dirty_offset)
    total = sum(s.size_bytes for s in segments)
    return (dirty / total if total else 0.0), dirty


def group_segments(segments: Sequence[SegmentInfo], max_bytes: int, max_offset_span: int) -> list[range]:
    """Consecutive runs of segments to merge into one cleaned segment each (Kafka's
    ``groupSegmentsBySize``): their bytes add up to at most ``max_bytes`` (segment.bytes) and their
    offsets span at most ``max_offset_span`` (int32 relative offsets in the indexes)."""
    groups: list[range] = []
    start = 0
    while start < len(segments):
        end, size = start + 1, segments[start].size_bytes
        while (
            end < len(segments)
            and size + segments[end].size_bytes <= max_bytes
            and segments[end].next_offset - 1 - segments[start].base_offset <= max_offset_span
        ):
            size += segments[end].size_bytes
            end += 1
        groups.append(range(start, end))
        start = end
    return groups


@dataclass(slots=True)
class OffsetMap:
    """Key -> offset of the key's last record in the dirty section (Kafka's ``OffsetMap``, exact keys)."""

    offsets: dict[bytes, int] = field(default_factory=dict)
    latest_offset: int = NO_OFFSET

    def add_batch(self, data: bytes, position: int = 0) -> None:
        """Record the keys of the data batch at ``position`` of ``data`` (control batches hold none)."""
        batch = decode_batch(data, position)
        if batch.header.is_control:
            return
        offsets = self.offsets
        for record in batch.records:
            if record.key is not None:
                offsets[record.key] = record.offset
        self.latest_offset = max(self.latest_offset, batch.header.last_offset)

    def __len__(self) -> int:
        return len(self.offsets)


@dataclass(frozen=True, slots=True)
class FilteredBatch:
    """What cleaning did to one batch: the bytes to write (None: drop it) and counts."""

    data: bytes | None
    records_removed: int
    changed: bool
    tombstone_horizon_ms: int | None  # delete horizon of the tombstones it still holds, if any


def filter_batch(
    data: bytes,
    header: BatchHeader,
    offset_map: OffsetMap,
    now_ms: int,
    delete_retention_ms: int,
    keep_empty: bool,
) -> FilteredBatch:
    """Clean one batch (``data`` is exactly its bytes, ``header`` its parsed header); see the module
    docstring for the rules. ``keep_empty``: keep an empty batch rather than dropping it."""
    if header.is_control:
        return FilteredBatch(data, 0, False, None)
    records = decode_batch(data).records
    has_horizon = bool(header.attributes & DELETE_HORIZON_MASK)
    keep_tombstones = not has_horizon or now_ms < header.base_timestamp
    latest = offset_map.offsets
    kept = [
        r
        for r in records
        if r.key is not None
        and r.offset >= latest.get(r.key, NO_OFFSET)
        and (r.value is not None or keep_tombstones)
    ]
    removed = len(records) - len(kept)
    if not kept:
        if not keep_empty:
            return FilteredBatch(None, removed, True, None)
        if header.records_count == 0:
            return FilteredBatch(data, 0, False, None)
        return FilteredBatch(rebuild_batch(header, []), removed, True, None)
    holds_tombstones = any(r.value is None for r in kept)
    stamp = holds_tombstones and not has_horizon
    horizon = now_ms + delete_retention_ms if stamp else (header.base_timestamp if has_horizon else None)
    if not removed and not stamp:
        return FilteredBatch(data, 0, False, horizon if holds_tombstones else None)
    rebuilt = rebuild_batch(header, kept, horizon if stamp else None)
    return FilteredBatch(rebuilt, removed, True, horizon if holds_tombstones else None)


def check_keys(data: bytes | memoryview, headers: Sequence[tuple[int, BatchHeader]], name: str) -> None:
    """A compacted topic refuses records without a key (Kafka's ``LogValidator.validateKey``):
    INVALID_RECORD naming the batch and the record; nothing of the append is written."""
    for index, (position, header) in enumerate(headers):
        if header.is_control:
            continue
        for record in decode_batch(data, position).records:
            if record.key is None:
                raise errors.InvalidRecordError(
                    f"{name}: record at offset delta {record.offset - header.base_offset} of batch {index} "
                    "has no key, and this topic is compacted (cleanup.policy contains 'compact'): "
                    "compaction keeps the last record per key. Give every record a key, or use "
                    "cleanup.policy=delete"
                )
