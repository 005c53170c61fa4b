"""One log segment: a file of whole v2 RecordBatches plus its offset and time indexes.

Files, named by the segment's base offset (the first offset it may hold), zero-padded to 20 digits::

    00000000000000000000.log        the batches, back to back, exactly as appended (Kafka's bytes)
    00000000000000000000.index      sparse offset index  (see storage.index)
    00000000000000000000.timeindex  time index           (see storage.index)

The segment never decodes records: appends write bytes that the ``Log`` already validated and patched;
reads slice the file with ``os.pread``; lookups parse 61-byte batch headers. ``recover()`` is the only
place that checks CRCs of bytes already on disk: it scans every batch, truncates at the first torn or
corrupt one and rebuilds both indexes.

Invariants: ``size_bytes`` equals the file size; batch offsets strictly increase and lie in
``[base_offset, next_offset)``; index entries point at batch starts inside the file.
Thread-safety: none; owned by one ``Log``.
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from proto import errors
from proto.kafka_types import NO_TIMESTAMP
from storage.batch_header import (
    HEADER_SIZE,
    LENGTH_POS,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    parse_header,
    validate_batch,
)
from storage.file_slice import FileSlice, SharedFile
from storage.index import OffsetIndex, TimeIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
# Relative offsets in the indexes are int32: a segment must roll before its offsets span more.
MAX_RELATIVE_OFFSET = 2**31 - 1

_I32 = struct.Struct(">i")
_IOV_MAX = 1024  # POSIX's minimum IOV_MAX for Linux: buffers per writev call


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class AppendedBatch(NamedTuple):
    """What a segment needs to know about one batch it appends (offsets already assigned).

    A NamedTuple rather than a frozen dataclass: just as immutable, but built in C — one is made per
    appended batch on the hot path, where a frozen dataclass's ``__init__`` costs a few microseconds.
    """

    position_in_buffer: int
    size_bytes: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    truncated_bytes: int
    # (partition leader epoch, base offset) of each batch that starts a new epoch, for the epoch cache.
    epoch_starts: tuple[tuple[int, int], ...]


class LogSegment:
    """A segment file with its indexes. Create with ``LogSegment.create`` or ``LogSegment.open``."""

    def __init__(
        self, directory: Path, base_offset: int, index_interval_bytes: int, created_ms: int, suffix: str = ""
    ) -> None:
        self.base_offset = base_offset
        self.file_suffix = suffix  # "" for a live segment; CLEANED_SUFFIX / SWAP_SUFFIX for the cleaner's
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX + suffix)
        self.offset_index = OffsetIndex(
            directory / segment_file_name(base_offset, INDEX_SUFFIX + suffix), base_offset
        )
        self.time_index = TimeIndex(
            directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX + suffix), base_offset
        )
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.size_bytes = 0
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp: int | None = None
        self._bytes_since_index_entry = 0
        # (first offset, position) of the last batch appended: a read at the tail (a follower or a
        # consumer that has caught up) starts there instead of walking headers from the last sparse
        # index entry (~25 preads per read with 4 KiB index intervals and small batches).
        self._tail_batch: tuple[int, int] | None = None
        # Shared with the FileSlices of fetch answers in flight: closing the segment lets go of it, and
        # the descriptor closes when the last slice does too (storage.file_slice).
        self._file: SharedFile | None = SharedFile(
            os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        )
        self._fd = self._file.fd

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int, suffix: str = ""
    ) -> LogSegment:
        """A new, empty segment (any stale files with its name are emptied)."""
        segment = cls(directory, base_offset, index_interval_bytes, now_ms, suffix)
        os.ftruncate(segment._fd, 0)
        segment.offset_index.reset()
        segment.time_index.reset()
        return segment

    @classmethod
    def open(cls, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int) -> LogSegment:
        """An existing segment; then ``load_indexes()``, or ``recover()`` when that returns False."""
        segment = cls(directory, base_offset, index_interval_bytes, now_ms)
        segment.size_bytes = os.fstat(segment._fd).st_size
        return segment

    def load_indexes(self) -> bool:
        """Load both index files and find the segment's end; False when they must be rebuilt."""
        if not (self.offset_index.load(self.size_bytes) and self.time_index.load(self.size_bytes)):
            return False
        try:
            self._scan_tail_headers()
        except CorruptRecordError:
            return False
        return True

    def _scan_tail_headers(self) -> None:
        """Set next offset, max timestamp and first batch time from the last index entry onwards."""
        if self.time_index.keys:
            self.max_timestamp = self.time_index.keys[-1]
            self.offset_of_max_timestamp = self.time_index.values[-1]
        start = self.offset_index.values[-1] if self.offset_index.values else 0
        for position, header in self._headers_from(start, self.size_bytes):
            self.next_offset = header.next_offset
            self._bytes_since_index_entry = position + header.size_in_bytes - start
            self._track_max_timestamp(header.max_timestamp, header.last_offset)
        if self.size_bytes:
            self.first_batch_timestamp = self._read_header(0).max_timestamp

    # ----------------------------------------------------------------------------------------- writes

    def append(self, pieces: list, size_bytes: int, batches: list[AppendedBatch]) -> None:
        """Append whole batches (validated, offsets assigned), given as buffers to write in order.

        The bytes go first: if the write fails, the file is cut back and nothing in memory changed.
        """
        assert batches[0].last_offset >= self.next_offset, (
            f"segment {self.base_offset}: batch ends at {batches[0].last_offset} below {self.next_offset}"
        )
        try:
            _write_all(self._fd, pieces, size_bytes)
        except OSError as exc:
            os.ftruncate(self._fd, self.size_bytes)
            raise errors.KafkaStorageError(
                f"{self.log_path}: append of {size_bytes} bytes failed: {exc}"
            ) from exc
        position = self.size_bytes
        first_offset = self.next_offset
        for batch in batches:
            self._tail_batch = (first_offset, position)
            first_offset = batch.last_offset + 1
            self._track_max_timestamp(batch.max_timestamp, batch.last_offset)
            if self._bytes_since_index_entry > self.index_interval_bytes:
                self.offset_index.append(batch.last_offset, position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self._bytes_since_index_entry = 0
            position += batch.size_bytes
            self._bytes_since_index_entry += batch.size_bytes
        self.next_offset = batches[-1].last_offset + 1
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = batches[0].max_timestamp
        assert position - self.size_bytes == size_bytes, f"batches add to {position - self.size_bytes} bytes"
        self.size_bytes = position

    def _track_max_timestamp(self, timestamp: int, offset: int) -> None:
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
            self.offset_of_max_timestamp = offset

    @property
    def retention_timestamp_ms(self) -> int:
        """What retention.ms compares: the largest record timestamp, or, in a segment whose batches
        carry none, the time it was created or opened (Kafka uses the file's mtime; this never
        deletes earlier than that would, and keeps time injectable)."""
        return self.max_timestamp if self.max_timestamp != NO_TIMESTAMP else self.created_ms

    def on_become_inactive(self) -> None:
        """Record the final max timestamp in the time index (Kafka does this on roll and close)."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def change_file_suffix(self, suffix: str) -> None:
        """Rename the three files to end in ``suffix`` ("" = the live names; Kafka's
        ``changeFileSuffixes``). The open descriptor keeps working: a rename does not touch it. The index
        files go first, the ``.log`` last: the ``.log`` file's name is what recovery reads. Entries
        not yet flushed stay in memory and go to the new name at the next flush."""
        for index in (self.offset_index, self.time_index):
            target = index.path.with_name(index.path.name.removesuffix(self.file_suffix) + suffix)
            try:
                os.replace(index.path, target)
            except FileNotFoundError:  # never written: the next flush writes every entry
                index.mark_unwritten()
            index.path = target
        target = self.log_path.with_name(self.log_path.name.removesuffix(self.file_suffix) + suffix)
        os.replace(self.log_path, target)
        self.log_path = target
        self.file_suffix = suffix

    def flush_data(self) -> None:
        """fsync the batches only (the indexes can be rebuilt from them)."""
        os.fsync(self._fd)

    def flush(self, fsync: bool = True) -> None:
        """Write the index files; with ``fsync``, make data and indexes durable."""
        if fsync:
            os.fsync(self._fd)
        self.offset_index.flush(fsync)
        self.time_index.flush(fsync)

    def truncate_to(self, offset: int) -> int:
        """Remove every batch that ends at or after ``offset``; returns the bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position, header = found
        removed = self.size_bytes - position
        os.ftruncate(self._fd, position)
        self.size_bytes = position
        self.next_offset = header.base_offset if position else self.base_offset
        self.offset_index.truncate_to_offset(self.next_offset)
        self.time_index.truncate_to_offset(self.next_offset)
        self._reset_tail_state()
        return removed

    def _reset_tail_state(self) -> None:
        self._tail_batch = None
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self._bytes_since_index_entry = 0
        self.first_batch_timestamp = None
        if self.size_bytes:
            self._scan_tail_headers()

    # ------------------------------------------------------------------------------------------ reads

    def fileno(self) -> int:
        """The ``.log`` file's descriptor (the cleaner duplicates it to read the segment in a thread)."""
        return self._fd

    def read(self, start_position: int, end_position: int) -> bytes:
        """The file bytes in ``[start_position, end_position)``."""
        return pread_all(self._fd, end_position - start_position, start_position)

    def slice(self, start_position: int, end_position: int) -> FileSlice:
        """``[start_position, end_position)`` as a ``FileSlice`` (its own descriptor: it outlives a
        deletion or roll of this segment)."""
        assert self._file is not None, f"{self.log_path.name} is closed"
        return FileSlice(self._file, start_position, end_position - start_position, self.log_path.name)

    def _read_header(self, position: int) -> BatchHeader:
        raw = os.pread(self._fd, HEADER_SIZE, position)
        return parse_header(raw)

    def _headers_from(self, position: int, end_position: int):
        while position < end_position:
            header = self._read_header(position)
            if position + header.size_in_bytes > end_position:
                raise CorruptRecordError(
                    f"{self.log_path.name}: batch at {position} runs past {end_position}"
                )
            yield position, header
            position += header.size_in_bytes

    def translate_offset(self, offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= ``offset``, or None."""
        if offset >= self.next_offset:
            return None
        start = self.offset_index.lookup(offset)
        if self._tail_batch is not None and offset >= self._tail_batch[0]:
            start = max(start, self._tail_batch[1])  # no earlier batch holds ``offset``
        for position, header in self._headers_from(start, self.size_bytes):
            if header.last_offset >= offset:
                return position, header
        return None

    def whole_batches_end(self, start_position: int, end_position: int) -> int:
        """The last batch boundary <= ``end_position``, walking from a batch start at ``start_position``.

        Jumps to the last indexed batch start before ``end_position`` first, so the walk over batch
        lengths (4-byte preads) covers at most one index interval.
        """
        if end_position >= self.size_bytes:
            return self.size_bytes
        positions = self.offset_index.values
        index = bisect.bisect_right(positions, end_position) - 1
        cursor = max(positions[index], start_position) if index >= 0 else start_position
        while True:
            raw = os.pread(self._fd, 4, cursor + LENGTH_POS)
            if len(raw) < 4:
                return cursor
            size = _I32.unpack(raw)[0] + LOG_OVERHEAD
            if size < LOG_OVERHEAD or cursor + size > end_position:
                return cursor
            cursor += size

    def batches_reaching(self, timestamp: int, start_offset: int):
        """(position, header) of each batch at/after ``start_offset`` whose max timestamp >= ``timestamp``,
        in offset order, starting near the first candidate through the time and offset indexes."""
        offset = max(self.time_index.lookup(timestamp), start_offset)
        found = self.translate_offset(offset)
        if found is None:
            return
        for position, header in self._headers_from(found[0], self.size_bytes):
            if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
                yield position, header

    # --------------------------------------------------------------------------------------- recovery

    def recover(self) -> RecoveryResult:
        """Validate every batch, truncate at the first bad one, rebuild the indexes.

        Only the structure decides what is corrupt (Kafka's ``LogSegment.recover``): never a topic
        config such as max.message.bytes, which may have been lowered after a batch was written under a
        larger limit (or a batch may have been replicated from a leader with another limit)."""
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset, self.size_bytes = self.base_offset, 0
        self._reset_tail_state()
        valid_end, batches, epoch_starts = self._scan_valid()
        file_size = os.fstat(self._fd).st_size
        if valid_end < file_size:
            os.ftruncate(self._fd, valid_end)
        position = 0
        for batch in batches:
            self._index_recovered(batch, position)
            position += batch.size_bytes
        self.size_bytes = valid_end
        self.on_become_inactive()  # as Kafka: the time index ends with the segment's max timestamp
        return RecoveryResult(file_size - valid_end, tuple(epoch_starts))

    def _index_recovered(self, batch: AppendedBatch, position: int) -> None:
        self._track_max_timestamp(batch.max_timestamp, batch.last_offset)
        if self._bytes_since_index_entry > self.index_interval_bytes:
            self.offset_index.append(batch.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += batch.size_bytes
        self.next_offset = batch.last_offset + 1
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = batch.max_timestamp

    def _scan_valid(self):
        """(end of the valid prefix, its batches, epoch starts): CRC, magic, offset order, and sizes
        within the file (``validate_batch`` refuses a batch whose length runs past the end)."""
        batches: list[AppendedBatch] = []
        epoch_starts: list[tuple[int, int]] = []
        file_size = os.fstat(self._fd).st_size
        if file_size == 0:
            return 0, batches, epoch_starts
        position, next_offset, epoch = 0, self.base_offset, None
        with mmap.mmap(self._fd, file_size, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                while position < file_size:
                    try:
                        header = validate_batch(view, position)
                    except CorruptRecordError:
                        break
                    if header.base_offset < next_offset:
                        break
                    if header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
                        break
                    if header.partition_leader_epoch != epoch:
                        epoch = header.partition_leader_epoch
                        epoch_starts.append((epoch, header.base_offset))
                    batches.append(
                        AppendedBatch(
                            position, header.size_in_bytes, header.last_offset, header.max_timestamp
                        )
                    )
                    next_offset = header.next_offset
                    position += header.size_in_bytes
            finally:
                view.release()
        return position, batches, epoch_starts

    # ------------------------------------------------------------------------------------- lifecycle

    def close(self) -> None:
        self._file = None  # closes the descriptor unless a FileSlice still holds it
        self._fd = -1

    def delete(self) -> None:
        """Close and remove the three files (by name: never call it on a segment whose files were
        replaced by a cleaned one under the same names)."""
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()

    def invariants(self) -> None:
        assert self.base_offset <= self.next_offset, f"segment {self.base_offset}: next {self.next_offset}"
        assert (self.size_bytes == 0) == (self.next_offset == self.base_offset), (
            f"segment {self.base_offset}: size {self.size_bytes} bytes but next offset {self.next_offset}"
        )
        positions = self.offset_index.values
        assert not positions or positions[-1] < self.size_bytes, (
            f"segment {self.base_offset}: index position {positions[-1]} >= size {self.size_bytes}"
        )


def _write_all(fd: int, pieces: list, size_bytes: int) -> None:
    """Write the buffers in order with ``writev``; a short write (rare) finishes with plain writes."""
    if len(pieces) <= _IOV_MAX:
        done = os.writev(fd, pieces)
        if done < size_bytes:
            _write_rest(fd, pieces, done)
        return
    for start in range(0, len(pieces), _IOV_MAX):
        chunk = pieces[start : start + _IOV_MAX]
        _write_all(fd, chunk, sum(len(piece) for piece in chunk))


def _write_rest(fd: int, pieces: list, done: int) -> None:
    rest = memoryview(b"".join(pieces))[done:]
    while rest:
        rest = rest[os.write(fd, rest) :]


def pread_all(fd: int, size: int, position: int) -> bytes:
    data = os.pread(fd, size, position)
    if len(data) == size:
        return data
    parts = [data]
    while size > sum(len(part) for part in parts):
        got = sum(len(part) for part in parts)
        chunk = os.pread(fd, size - got, position + got)
        if not chunk:
            break
        parts.append(chunk)
    return b"".join(parts)
