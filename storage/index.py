"""The sparse offset index and the time index of one log segment.

Both are sorted arrays of fixed-size big-endian entries, keyed relative to the segment's base offset so
that an offset fits in 4 bytes (Kafka's formats)::

    <base>.index      8 bytes/entry: relativeOffset int32, position int32
                      "the batch whose LAST offset is base+relativeOffset starts at byte `position`"
    <base>.timeindex  12 bytes/entry: timestamp int64, relativeOffset int32
                      "the largest timestamp in the segment up to offset base+relativeOffset"

An offset-index entry is added when at least ``index.interval.bytes`` were appended since the previous
one, so a lookup lands at most one interval before the wanted batch and the caller scans forward over
batch headers. A time-index entry is added at the same moments when the segment's max timestamp grew,
and once more when the segment stops being active, so the last entry holds the segment's max timestamp.

The entries live in memory (lists, bisect for lookups); the file is only written by ``flush()`` (on
roll, flush and close). After an unclean stop the log rebuilds the indexes of every segment past the
recovery point, so a stale index file is never trusted; ``load`` refuses a file whose size or
ordering is wrong (the caller then rebuilds it from the log).

Invariants: keys strictly increase; values never decrease; every value is inside the segment.
Thread-safety: none; owned by one ``LogSegment``.
"""

from __future__ import annotations

import bisect
import itertools
import os
import struct
from pathlib import Path

from proto.kafka_types import NO_TIMESTAMP

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _SortedIndex:
    """Sorted (key, value) pairs with a file mirror; the subclasses say how an entry is encoded."""

    _entry: struct.Struct

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.keys: list[int] = []
        self.values: list[int] = []
        self._entries_on_disk = 0

    def __len__(self) -> int:
        return len(self.keys)

    def _encode(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    def _decode(self, raw: tuple[int, int]) -> tuple[int, int]:
        raise NotImplementedError

    def load(self, segment_size_bytes: int) -> bool:
        """Read the file; False (and empty) when it is missing or fails the sanity check."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        if len(data) % self._entry.size:
            return False
        pairs = [self._decode(raw) for raw in self._entry.iter_unpack(data)]
        self.keys = [key for key, _ in pairs]
        self.values = [value for _, value in pairs]
        if not self._sane(segment_size_bytes):
            self.keys, self.values = [], []
            return False
        self._entries_on_disk = len(pairs)
        return True

    def _sane(self, segment_size_bytes: int) -> bool:
        raise NotImplementedError

    def _append(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)

    def truncate_entries(self, count: int) -> None:
        """Keep the first ``count`` entries."""
        del self.keys[count:]
        del self.values[count:]
        if self._entries_on_disk > count:
            os.truncate(self.path, count * self._entry.size)
            self._entries_on_disk = count

    def mark_unwritten(self) -> None:
        """The file is gone (or was never written): the next flush writes every entry."""
        self._entries_on_disk = 0

    def reset(self) -> None:
        self.keys, self.values = [], []
        self._entries_on_disk = 0
        self.path.write_bytes(b"")

    def flush(self, fsync: bool) -> None:
        """Write the entries not yet in the file; fsync when asked."""
        pending = b"".join(
            self._encode(key, value)
            for key, value in zip(
                self.keys[self._entries_on_disk :], self.values[self._entries_on_disk :], strict=False
            )
        )
        with open(self.path, "r+b" if self.path.exists() else "wb") as file:
            file.seek(self._entries_on_disk * self._entry.size)
            file.write(pending)
            file.truncate()
            file.flush()
            if fsync:
                os.fsync(file.fileno())
        self._entries_on_disk = len(self.keys)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


class OffsetIndex(_SortedIndex):
    """Batch last offset -> file position of the batch (sparse)."""

    _entry = _OFFSET_ENTRY

    def _encode(self, key: int, value: int) -> bytes:
        return _OFFSET_ENTRY.pack(key - self.base_offset, value)

    def _decode(self, raw: tuple[int, int]) -> tuple[int, int]:
        return raw[0] + self.base_offset, raw[1]

    def _sane(self, segment_size_bytes: int) -> bool:
        keys, positions = self.keys, self.values
        return (
            all(a < b for a, b in itertools.pairwise(keys))
            and all(a < b for a, b in itertools.pairwise(positions))
            and (not keys or (keys[0] >= self.base_offset and positions[0] >= 0))
            and (not positions or positions[-1] < segment_size_bytes)
        )

    def append(self, last_offset: int, position: int) -> None:
        assert not self.keys or (last_offset > self.keys[-1] and position > self.values[-1]), (
            f"{self.path.name}: entry ({last_offset}, {position}) after ({self.keys[-1]}, {self.values[-1]})"
        )
        assert last_offset - self.base_offset <= 2**31 - 1, f"offset {last_offset} overflows the index"
        self._append(last_offset, position)

    def lookup(self, offset: int) -> int:
        """A position at or before the batch holding ``offset`` (0 when no entry is <= offset)."""
        index = bisect.bisect_right(self.keys, offset) - 1
        return self.values[index] if index >= 0 else 0

    def truncate_to_offset(self, next_offset: int) -> None:
        """Drop entries for batches at or after ``next_offset`` (the new end of the segment)."""
        self.truncate_entries(bisect.bisect_left(self.keys, next_offset))


class TimeIndex(_SortedIndex):
    """Max timestamp so far -> offset (sparse); the last entry holds the segment's max timestamp."""

    _entry = _TIME_ENTRY

    def _encode(self, key: int, value: int) -> bytes:
        return _TIME_ENTRY.pack(key, value - self.base_offset)

    def _decode(self, raw: tuple[int, int]) -> tuple[int, int]:
        return raw[0], raw[1] + self.base_offset

    def _sane(self, segment_size_bytes: int) -> bool:
        timestamps, offsets = self.keys, self.values
        return (
            all(a < b for a, b in itertools.pairwise(timestamps))
            and all(a <= b for a, b in itertools.pairwise(offsets))
            and (not offsets or offsets[0] >= self.base_offset)
            and (segment_size_bytes > 0 or not offsets)
        )

    @property
    def max_timestamp(self) -> int:
        return self.keys[-1] if self.keys else NO_TIMESTAMP

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add (timestamp, offset) when the timestamp is larger than the last entry's."""
        if self.keys and timestamp <= self.keys[-1]:
            return False
        if timestamp == NO_TIMESTAMP:
            return False
        assert not self.values or offset >= self.values[-1], f"time index offset {offset} went back"
        self._append(timestamp, offset)
        return True

    def lookup(self, timestamp: int) -> int:
        """An offset at or before the first record with a timestamp >= ``timestamp``."""
        index = bisect.bisect_left(self.keys, timestamp) - 1
        return self.values[index] if index >= 0 else self.base_offset

    def truncate_to_offset(self, next_offset: int) -> None:
        """Drop entries pointing at offsets >= ``next_offset``."""
        self.truncate_entries(bisect.bisect_left(self.values, next_offset))
