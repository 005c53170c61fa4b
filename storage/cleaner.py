"""The log cleaner's file work: clean a planned range into new segment files, swap them in, recover.

The decisions (cleanable range, offset map, what a batch keeps) are ``storage.compaction``'s; this
module reads and writes files. A cleaning pass has three steps, split by who may run them:

1. ``Log.plan_cleaning`` (the log's owner, on the broker's event loop): picks the segments and takes a
   ``CleaningPlan`` holding a duplicate descriptor of each (inactive segments never change; a
   segment deleted meanwhile stays readable through it).
2. ``clean(plan)`` (a background thread; it touches no ``Log`` state): builds the offset map from the
   dirty segments, then rewrites the planned segments in groups (``compaction.group_segments``), each
   group into one new segment under temporary names, fsynced::

       <base>.log.cleaned  <base>.index.cleaned  <base>.timeindex.cleaned

3. ``Log.finish_cleaning(result)`` (the owner again, briefly): if the planned segments are still the
   log's, ``commit`` swaps every group in — Kafka's ``.swap`` idea with one commit point per pass::

       rename cleaner-swap.staged (the groups' offset ranges, written and fsynced by the thread)
           to cleaner-swap, fsync dir                                                       <- commit
       per group: rename the old segments' files to *.deleted, rename <base>.*.cleaned to <base>.*

   otherwise (truncated, deleted, closed) the cleaned files are discarded. Then ``finalize`` (back in
   the worker thread) fsyncs the directory, writes the cleaner checkpoint, removes the marker and
   unlinks the ``*.deleted`` files.

Recovery (``complete_interrupted_swaps``, run by ``storage.log_loader`` before it lists segments):
without a marker, every ``*.cleaned`` file (and a staged marker) is from a pass that never committed:
deleted. With one,
each listed group is finished whatever subset of its renames reached the disk (see there). A cleaned
segment always ends at the same offset as the segments it replaces (their last batch is kept, empty
if need be), so segments stay contiguous; a pass commits all its groups or none, so a tombstone
dropped in a later group never resurrects a value kept by an earlier, uncommitted one.

Also here: the cleaner checkpoint, one offset per partition directory (``cleaner-offset-checkpoint``,
``storage.checkpoint`` format): the end of the last cleaned range, i.e. the first dirty offset
(Kafka keeps one such file per log directory).

Thread-safety: ``clean`` runs in one background thread per plan and only reads the plan's
descriptors and writes its own ``.cleaned`` files; everything else runs on the log owner's thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from storage import compaction
from storage.batch_header import HEADER_SIZE, BatchHeader, CorruptRecordError, parse_header
from storage.checkpoint import TEMP_SUFFIX, CheckpointFile, OffsetCheckpoint, fsync_dir
from storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_RELATIVE_OFFSET,
    TIME_INDEX_SUFFIX,
    AppendedBatch,
    LogSegment,
    pread_all,
    segment_file_name,
)

CLEANED_SUFFIX = ".cleaned"
DELETED_SUFFIX = ".deleted"
COMMIT_FILE = "cleaner-swap"
STAGED_COMMIT_FILE = "cleaner-swap.staged"  # the marker written ahead by the thread; renamed to commit
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
READ_CHUNK_BYTES = 1 << 20
WRITE_CHUNK_BYTES = 1 << 20
# Soft cap of the offset map (distinct keys): once reached, the pass stops at the end of that segment
# and the rest stays dirty for the next pass (Kafka sizes it with log.cleaner.dedupe.buffer.size).
DEFAULT_MAX_MAP_KEYS = 1_000_000
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
# Files of a pass that never committed, or of a finished one (``*.deleted``): removed at startup.
_LEFTOVER_ENDINGS = (CLEANED_SUFFIX, DELETED_SUFFIX, STAGED_COMMIT_FILE, STAGED_COMMIT_FILE + TEMP_SUFFIX)


@dataclass(slots=True)
class SegmentToClean:
    segment: LogSegment  # the live segment: compared by identity at the swap, never used by the thread
    fd: int  # a duplicate of its descriptor, owned by the plan
    info: compaction.SegmentInfo
    created_ms: int


@dataclass(slots=True)
class CleaningPlan:
    """What one pass cleans: the leading segments of a log, the first dirty offset and the settings."""

    directory: Path
    name: str
    segments: list[SegmentToClean]
    first_dirty_offset: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    index_interval_bytes: int
    max_map_keys: int = DEFAULT_MAX_MAP_KEYS
    truncations: int = 0  # the log's truncation count when planned (a changed one voids the pass)

    def close(self) -> None:
        for planned in self.segments:
            if planned.fd >= 0:
                os.close(planned.fd)
                planned.fd = -1


@dataclass(slots=True)
class CleanedGroup:
    originals: list[SegmentToClean]
    cleaned: LogSegment | None  # None: cleaning changed nothing, the originals stay


@dataclass(slots=True)
class CleaningResult:
    plan: CleaningPlan
    groups: list[CleanedGroup] = field(default_factory=list)
    end_offset: int = 0  # the new cleaner checkpoint: everything below is clean
    tombstone_horizon_ms: int | None = None  # earliest delete horizon of the tombstones still kept
    bytes_before: int = 0
    bytes_after: int = 0
    records_removed: int = 0

    def ranges(self) -> list[tuple[int, int]]:
        """(base offset, end offset) of each group that has a cleaned segment to swap in."""
        return [
            (group.originals[0].info.base_offset, group.originals[-1].info.next_offset)
            for group in self.groups
            if group.cleaned is not None
        ]

    def discard(self) -> None:
        """Delete the cleaned files (and the staged marker) of a pass that will not be swapped in."""
        for group in self.groups:
            if group.cleaned is not None:
                group.cleaned.delete()
                group.cleaned = None
        (self.plan.directory / STAGED_COMMIT_FILE).unlink(missing_ok=True)


# ------------------------------------------------------------------------------------- the thread


def clean(plan: CleaningPlan) -> CleaningResult:
    """Clean ``plan`` into ``.cleaned`` segments (see the module docstring). Runs off the log's thread.
    On any error the files written so far are removed and the error is raised. Closes the plan's
    descriptors."""
    result = CleaningResult(plan)
    try:
        offset_map, count, last_of_producer = _scan(plan)
        segments = plan.segments[:count]
        result.end_offset = segments[-1].info.next_offset
        infos = [planned.info for planned in segments]
        for group in compaction.group_segments(infos, plan.segment_bytes, MAX_RELATIVE_OFFSET):
            originals = segments[group.start : group.stop]
            result.groups.append(CleanedGroup(originals, None))
            result.groups[-1].cleaned = _clean_group(plan, originals, offset_map, last_of_producer, result)
        if result.ranges():  # staged here, fsynced with the .cleaned names; commit only renames it
            CheckpointFile(plan.directory / STAGED_COMMIT_FILE, width=2).write(result.ranges())
    except BaseException:
        result.discard()
        raise
    finally:
        plan.close()
    return result


def _scan(plan: CleaningPlan) -> tuple[compaction.OffsetMap, int, dict[int, int]]:
    """Pass 1: the offset map of the dirty segments (up to the map's cap, in whole segments), how many
    segments this pass cleans, and each producer's last batch (its last offset) among them."""
    offset_map = compaction.OffsetMap()
    last_of_producer: dict[int, int] = {}
    count = 0
    for planned in plan.segments:
        dirty = planned.info.next_offset > plan.first_dirty_offset
        if dirty and len(offset_map) >= plan.max_map_keys:
            break
        for header, data in _file_batches(planned.fd, planned.info.size_bytes):
            if header.producer_id >= 0:
                last_of_producer[header.producer_id] = header.last_offset
            if dirty:
                offset_map.add_batch(data)
        count += 1
    return offset_map, count, last_of_producer


def _clean_group(
    plan: CleaningPlan,
    originals: list[SegmentToClean],
    offset_map: compaction.OffsetMap,
    last_of_producer: dict[int, int],
    result: CleaningResult,
) -> LogSegment | None:
    """Pass 2 for one group: write the kept batches into a ``.cleaned`` segment; None if unchanged."""
    created_ms = max(planned.created_ms for planned in originals)
    base_offset = originals[0].info.base_offset
    group_end = originals[-1].info.next_offset
    cleaned = LogSegment.create(
        plan.directory, base_offset, plan.index_interval_bytes, created_ms, CLEANED_SUFFIX
    )
    writer = _SegmentWriter(cleaned)
    changed = len(originals) > 1
    try:
        for planned in originals:
            result.bytes_before += planned.info.size_bytes
            for header, data in _file_batches(planned.fd, planned.info.size_bytes):
                keep_empty = header.next_offset == group_end or (
                    header.producer_id >= 0 and last_of_producer.get(header.producer_id) == header.last_offset
                )
                filtered = compaction.filter_batch(
                    data, header, offset_map, plan.now_ms, plan.delete_retention_ms, keep_empty
                )
                changed = changed or filtered.changed
                result.records_removed += filtered.records_removed
                horizon = filtered.tombstone_horizon_ms
                if horizon is not None:
                    earliest = result.tombstone_horizon_ms
                    result.tombstone_horizon_ms = horizon if earliest is None else min(earliest, horizon)
                if filtered.data is not None:
                    writer.add(filtered.data)
        writer.finish()
    except BaseException:
        cleaned.delete()
        raise
    assert cleaned.next_offset == group_end, (
        f"{plan.name}: cleaned segment {base_offset} ends at {cleaned.next_offset}, not {group_end}"
    )
    if not changed:
        cleaned.delete()
        result.bytes_after += sum(planned.info.size_bytes for planned in originals)
        return None
    result.bytes_after += cleaned.size_bytes
    return cleaned


class _SegmentWriter:
    """Appends batches to a new segment in chunks of about WRITE_CHUNK_BYTES (one writev each)."""

    def __init__(self, segment: LogSegment) -> None:
        self.segment = segment
        self.pieces: list[bytes] = []
        self.batches: list[AppendedBatch] = []
        self.size = 0

    def add(self, data: bytes) -> None:
        header = parse_header(data)
        self.pieces.append(data)
        self.batches.append(AppendedBatch(self.size, len(data), header.last_offset, header.max_timestamp))
        self.size += len(data)
        if self.size >= WRITE_CHUNK_BYTES:
            self._write()

    def _write(self) -> None:
        if self.pieces:
            self.segment.append(self.pieces, self.size, self.batches)
            self.pieces, self.batches, self.size = [], [], 0

    def finish(self) -> None:
        self._write()
        self.segment.on_become_inactive()
        self.segment.flush(fsync=True)


def _file_batches(fd: int, size_bytes: int) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, bytes) of each batch of a segment file, reading about READ_CHUNK_BYTES at a time."""
    position = 0
    while position < size_bytes:
        chunk = pread_all(fd, min(READ_CHUNK_BYTES, size_bytes - position), position)
        offset = 0
        while len(chunk) - offset >= HEADER_SIZE:
            header = parse_header(chunk, offset)
            end = offset + header.size_in_bytes
            if end > len(chunk):
                if offset == 0:  # a batch larger than the chunk: read it whole
                    chunk = pread_all(fd, header.size_in_bytes, position)
                    if len(chunk) < header.size_in_bytes:
                        raise CorruptRecordError(f"batch at byte {position} runs past the segment's end")
                    yield header, chunk
                    offset = len(chunk)
                break
            yield header, chunk[offset:end]
            offset = end
        if offset == 0:
            raise CorruptRecordError(f"segment bytes at {position} are not a whole batch")
        position += offset


# ---------------------------------------------------------------------------- the swap and recovery


def commit(directory: Path, groups: list[CleanedGroup]) -> None:
    """Swap the cleaned groups in (the log's owner, after checking the plan still holds). The commit
    point is the marker ``cleaner-swap`` listing each group's offset range: ``clean`` wrote and fsynced
    it as ``cleaner-swap.staged``, here it is renamed and the directory fsynced. Then, per group, the
    old segments' files are renamed to ``*.deleted`` and the cleaned files to the live names — renames
    only: ``finalize`` (off the loop) makes them durable, then removes the marker and the replaced
    files. The old segments' descriptors stay open (the caller closes them later)."""
    groups = [group for group in groups if group.cleaned is not None]
    if not groups:
        return
    os.replace(directory / STAGED_COMMIT_FILE, directory / COMMIT_FILE)
    fsync_dir(directory)
    for group in groups:
        cleaned = group.cleaned
        assert cleaned is not None and cleaned.file_suffix == CLEANED_SUFFIX, f"not cleaned: {cleaned}"
        for planned in group.originals:
            planned.segment.change_file_suffix(DELETED_SUFFIX)
        cleaned.change_file_suffix("")


def finalize(directory: Path, first_dirty_offset: int) -> None:
    """After ``commit``, off the log's thread: make the renames durable, write the cleaner checkpoint,
    then drop the marker and the replaced files (their blocks are freed here, not on the event loop)."""
    fsync_dir(directory)
    OffsetCheckpoint(directory / CLEANER_CHECKPOINT_FILE).write(first_dirty_offset)
    (directory / COMMIT_FILE).unlink(missing_ok=True)
    for path in directory.iterdir():
        if path.name.endswith(DELETED_SUFFIX):
            path.unlink(missing_ok=True)
    fsync_dir(directory)


def complete_interrupted_swaps(directory: Path) -> int:
    """Startup: finish a committed pass (the marker lists its groups), drop every other leftover
    (``*.cleaned`` of a pass that never committed, ``*.deleted``); returns the groups completed.

    For each group ``(base, end)`` of the marker, whatever subset of its renames reached the disk:
    the live files of segments with a base in ``(base, end)`` are old ones (delete), ``<base>``'s
    indexes may be old or new (delete: the loader rebuilds them), and if ``<base>.log.cleaned`` is
    still there it replaces ``<base>.log``."""
    marker = CheckpointFile(directory / COMMIT_FILE, width=2)
    ranges = marker.read() or []
    for base_offset, end_offset in ranges:
        for path in directory.iterdir():
            base = _segment_file_base(path.name)
            covered = base is not None and base_offset < base < end_offset
            if covered or (base == base_offset and not path.name.endswith(LOG_SUFFIX)):
                path.unlink()
        cleaned = directory / segment_file_name(base_offset, LOG_SUFFIX + CLEANED_SUFFIX)
        if cleaned.exists():
            os.replace(cleaned, directory / segment_file_name(base_offset, LOG_SUFFIX))
    leftovers = [p for p in directory.iterdir() if p.name.endswith(_LEFTOVER_ENDINGS)]
    for path in leftovers:
        path.unlink()
    if ranges or leftovers:
        fsync_dir(directory)
        marker.path.unlink(missing_ok=True)  # only once the completed renames are durable
        fsync_dir(directory)
    return len(ranges)


def _segment_file_base(name: str) -> int | None:
    """The base offset of a live segment file's name (``<20 digits>.log`` etc.), else None."""
    if name[:20].isdigit() and name[20:] in _SEGMENT_SUFFIXES:
        return int(name[:20])
    return None
