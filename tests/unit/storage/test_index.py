"""Offset and time indexes (storage/index.py): Kafka's entry formats, lookups, truncation, sanity checks."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from proto.kafka_types import NO_TIMESTAMP
from storage.index import OffsetIndex, TimeIndex

BASE = 1_000


def offset_index(tmp_path: Path, entries: list[tuple[int, int]]) -> OffsetIndex:
    index = OffsetIndex(tmp_path / f"{BASE:020d}.index", BASE)
    for offset, position in entries:
        index.append(offset, position)
    return index


def time_index(tmp_path: Path, entries: list[tuple[int, int]]) -> TimeIndex:
    index = TimeIndex(tmp_path / f"{BASE:020d}.timeindex", BASE)
    for timestamp, offset in entries:
        index.maybe_append(timestamp, offset)
    return index


OFFSET_ENTRIES = [(1_009, 400), (1_019, 800), (1_029, 1_200)]


@pytest.mark.parametrize(
    ("offset", "position"),
    [(1_000, 0), (1_008, 0), (1_009, 400), (1_015, 400), (1_019, 800), (1_100, 1_200)],
    ids=["base", "before-first-entry", "exact", "between", "exact-second", "past-last"],
)
def test_offset_lookup_lands_at_or_before_the_batch(tmp_path: Path, offset: int, position: int) -> None:
    """The largest entry whose (batch last) offset <= target; 0 when there is none."""
    assert offset_index(tmp_path, OFFSET_ENTRIES).lookup(offset) == position


def test_offset_index_file_format_and_reload(tmp_path: Path) -> None:
    """8 bytes per entry: relative offset int32, position int32, big-endian."""
    index = offset_index(tmp_path, OFFSET_ENTRIES)
    index.flush(fsync=False)
    assert index.path.read_bytes() == b"".join(struct.pack(">ii", o - BASE, p) for o, p in OFFSET_ENTRIES)
    again = OffsetIndex(index.path, BASE)
    assert again.load(segment_size_bytes=1_300)
    assert (again.keys, again.values) == (index.keys, index.values)


def test_offset_index_truncate_rewrites_the_file(tmp_path: Path) -> None:
    index = offset_index(tmp_path, OFFSET_ENTRIES)
    index.flush(fsync=False)
    index.truncate_to_offset(1_019)
    assert index.keys == [1_009]
    assert len(index.path.read_bytes()) == 8
    index.append(1_015, 500)
    index.flush(fsync=False)
    assert index.path.read_bytes() == struct.pack(">iiii", 9, 400, 15, 500)


BAD_OFFSET_FILES = [
    pytest.param(b"\x00" * 7, 10_000, id="partial-entry"),
    pytest.param(struct.pack(">iiii", 5, 100, 5, 200), 10_000, id="offset-repeats"),
    pytest.param(struct.pack(">iiii", 5, 200, 9, 100), 10_000, id="position-goes-back"),
    pytest.param(struct.pack(">ii", -3, 100), 10_000, id="offset-below-base"),
    pytest.param(struct.pack(">ii", 5, 100), 100, id="position-past-segment"),
]


@pytest.mark.parametrize(("content", "segment_size"), BAD_OFFSET_FILES)
def test_insane_offset_index_is_refused(tmp_path: Path, content: bytes, segment_size: int) -> None:
    """Kafka's sanity check: a bad file is not trusted; the segment rebuilds it."""
    index = OffsetIndex(tmp_path / "x.index", BASE)
    index.path.write_bytes(content)
    assert not index.load(segment_size)
    assert len(index) == 0


def test_missing_index_file_is_refused(tmp_path: Path) -> None:
    assert not OffsetIndex(tmp_path / "missing.index", BASE).load(100)


def test_offset_index_entries_must_increase(tmp_path: Path) -> None:
    index = offset_index(tmp_path, [(1_009, 400)])
    with pytest.raises(AssertionError, match="after"):
        index.append(1_009, 500)


TIME_APPENDS = [
    # entries offered -> entries kept (only a larger timestamp is recorded)
    pytest.param([(5, 1_001), (7, 1_004)], [(5, 1_001), (7, 1_004)], id="rising"),
    pytest.param([(5, 1_001), (5, 1_004), (3, 1_006)], [(5, 1_001)], id="not-larger-skipped"),
    pytest.param([(NO_TIMESTAMP, 1_001)], [], id="no-timestamp-skipped"),
]


@pytest.mark.parametrize(("offered", "kept"), TIME_APPENDS)
def test_time_index_keeps_only_growing_timestamps(tmp_path: Path, offered, kept) -> None:
    index = time_index(tmp_path, offered)
    assert list(zip(index.keys, index.values, strict=True)) == kept


@pytest.mark.parametrize(
    ("timestamp", "offset"),
    [(0, BASE), (100, BASE), (101, 1_010), (150, 1_010), (200, 1_010), (201, 1_020), (10**12, 1_020)],
    ids=["zero", "first-entry", "past-first", "between", "second-entry", "past-second", "far-future"],
)
def test_time_lookup_starts_before_the_first_match(tmp_path: Path, timestamp: int, offset: int) -> None:
    """The offset of the largest entry with a timestamp < target; records from there may match."""
    index = time_index(tmp_path, [(100, 1_010), (200, 1_020)])
    assert index.lookup(timestamp) == offset


def test_time_index_format_truncate_and_max(tmp_path: Path) -> None:
    """12 bytes per entry: timestamp int64, relative offset int32; the last entry is the max."""
    index = time_index(tmp_path, [(100, 1_010), (200, 1_020)])
    assert index.max_timestamp == 200
    index.flush(fsync=False)
    assert index.path.read_bytes() == struct.pack(">qiqi", 100, 10, 200, 20)
    index.truncate_to_offset(1_020)
    assert (index.keys, index.max_timestamp) == ([100], 100)
    again = TimeIndex(index.path, BASE)
    assert again.load(segment_size_bytes=100) and again.keys == [100]


@pytest.mark.parametrize(
    "content",
    [
        struct.pack(">qiqi", 200, 1, 100, 2),
        struct.pack(">qiqi", 100, 5, 200, 2),
        struct.pack(">qi", 1, -1),
        b"\x01",
    ],
    ids=["timestamps-go-back", "offsets-go-back", "offset-below-base", "partial-entry"],
)
def test_insane_time_index_is_refused(tmp_path: Path, content: bytes) -> None:
    index = TimeIndex(tmp_path / "x.timeindex", BASE)
    index.path.write_bytes(content)
    assert not index.load(segment_size_bytes=10_000)
