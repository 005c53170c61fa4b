"""One log segment (storage/segment.py): appends, offset translation, reads, truncation, recovery."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from storage_log_helpers import make_batch

from storage.batch_header import parse_header
from storage.segment import AppendedBatch, LogSegment

BASE = 100
ONE = len(make_batch(3))


@pytest.fixture(autouse=True)
def fsyncs(monkeypatch) -> list[int]:
    """Logic only here; durability is the crash test's job."""
    calls: list[int] = []
    monkeypatch.setattr(os, "fsync", calls.append)
    return calls


@pytest.fixture
def segment(tmp_path: Path):
    """Segment at base 100 with 6 batches of 3 records (100..117), timestamps 1_000 + 10 i (+2)."""
    segment = LogSegment.create(tmp_path, BASE, index_interval_bytes=ONE, now_ms=0)
    for i in range(6):
        append(segment, BASE + 3 * i, timestamp=1_000 + 10 * i)
    yield segment
    segment.close()


def append(segment: LogSegment, base_offset: int, timestamp: int) -> None:
    buf = bytearray(make_batch(3, timestamp=timestamp))
    struct.pack_into(">q", buf, 0, base_offset)
    segment.append([buf], len(buf), [AppendedBatch(0, len(buf), base_offset + 2, timestamp + 2)])


def test_append_tracks_end_size_and_sparse_index(segment: LogSegment) -> None:
    assert (segment.next_offset, segment.size_bytes) == (118, 6 * ONE)
    assert segment.log_path.name == "00000000000000000100.log"
    # Kafka: an entry once MORE than index.interval.bytes were appended since the last one.
    assert segment.offset_index.keys == [108, 114]
    assert segment.offset_index.values == [2 * ONE, 4 * ONE]
    assert (segment.max_timestamp, segment.offset_of_max_timestamp) == (1_052, 117)
    assert segment.first_batch_timestamp == 1_002
    segment.invariants()


@pytest.mark.parametrize(
    ("offset", "position", "base"),
    [(100, 0, 100), (101, 0, 100), (103, ONE, 103), (117, 5 * ONE, 115), (118, None, None), (50, 0, 100)],
    ids=["base", "mid-first", "second", "last-record", "at-end", "below-base"],
)
def test_translate_offset(segment: LogSegment, offset: int, position, base) -> None:
    """The first batch whose last offset >= target: the one holding it (or the next)."""
    found = segment.translate_offset(offset)
    if position is None:
        assert found is None
    else:
        assert (found[0], found[1].base_offset) == (position, base)


def test_read_slices_file_bytes(segment: LogSegment) -> None:
    data = segment.read(ONE, 3 * ONE)
    assert len(data) == 2 * ONE
    assert [parse_header(data, p).base_offset for p in (0, ONE)] == [103, 106]


@pytest.mark.parametrize(
    ("start", "end", "whole"),
    [
        (0, ONE * 6, ONE * 6),
        (0, ONE * 6 + 99, ONE * 6),
        (0, ONE * 2 + 5, ONE * 2),
        (ONE, ONE * 2 - 1, ONE),
        (ONE, ONE * 5 + 7, ONE * 5),
        (ONE * 3, ONE * 5 - 1, ONE * 4),
    ],
    ids=[
        "everything",
        "past-the-end",
        "cut-after-two",
        "less-than-one",
        "from-second",
        "past-an-index-entry",
    ],
)
def test_whole_batches_end(segment: LogSegment, start: int, end: int, whole: int) -> None:
    """The last batch boundary before ``end``, found through the index plus a short header walk."""
    assert segment.whole_batches_end(start, end) == whole


def test_truncate_to(segment: LogSegment) -> None:
    removed = segment.truncate_to(110)  # inside the batch 109..111: that batch goes too
    assert removed == 3 * ONE
    assert (segment.next_offset, segment.size_bytes, os.path.getsize(segment.log_path)) == (
        109,
        3 * ONE,
        3 * ONE,
    )
    assert segment.offset_index.keys == [108]
    assert segment.time_index.max_timestamp <= 1_022
    assert segment.max_timestamp == 1_022
    assert segment.truncate_to(500) == 0
    segment.invariants()


def test_translate_offset_at_the_tail_after_truncation_and_a_gap(segment: LogSegment) -> None:
    """Reads at the tail start at the last appended batch (no header walk from the sparse index) and
    find the same batch as the walk: after a truncation, and past an offset gap (a compacted leader's
    batches, accepted by a follower)."""
    segment.truncate_to(110)  # keeps 100..108
    append(segment, 109, timestamp=2_000)
    append(segment, 120, timestamp=2_010)  # 112..119 compacted away on the leader
    starts = {100: 0, 103: ONE, 106: 2 * ONE, 109: 3 * ONE, 120: 4 * ONE}
    for offset in range(100, 124):
        found = segment.translate_offset(offset)
        holder = max((b for b in starts if b <= offset), default=100)
        if offset > 111 and holder == 109:
            holder = 120  # inside the gap: the next batch
        expected = None if offset >= 123 else (starts[holder], holder)
        assert (None if found is None else (found[0], found[1].base_offset)) == expected, offset
    segment.invariants()


def test_batches_reaching_a_timestamp(segment: LogSegment) -> None:
    """Candidates for ListOffsets: batches at/after the start offset whose max timestamp reaches it."""
    segment.on_become_inactive()
    bases = [header.base_offset for _, header in segment.batches_reaching(1_013, start_offset=0)]
    assert bases == [106, 109, 112, 115]
    assert [h.base_offset for _, h in segment.batches_reaching(1_000, start_offset=108)][:1] == [106]
    assert list(segment.batches_reaching(2_000, start_offset=0)) == []


def test_reopen_loads_indexes_and_finds_the_end(segment: LogSegment, tmp_path: Path) -> None:
    segment.on_become_inactive()
    segment.flush()
    again = LogSegment.open(tmp_path, BASE, index_interval_bytes=ONE, now_ms=0)
    assert again.load_indexes()
    state = (again.next_offset, again.size_bytes, again.max_timestamp, again.first_batch_timestamp)
    assert state == (118, 6 * ONE, 1_052, 1_002)
    append(again, 118, timestamp=2_000)
    assert again.offset_index.keys[-1] == 120
    again.close()


def test_recover_rebuilds_indexes_and_reports_epochs(segment: LogSegment) -> None:
    keys, positions = list(segment.offset_index.keys), list(segment.offset_index.values)
    with open(segment.log_path, "ab") as file:
        file.write(make_batch(3)[:20])
    result = segment.recover()
    assert result.truncated_bytes == 20
    assert result.epoch_starts == ((0, 100),)
    assert (segment.offset_index.keys, segment.offset_index.values) == (keys, positions)
    assert segment.next_offset == 118


@pytest.mark.parametrize(
    ("damage", "valid_batches"),
    [
        pytest.param(
            lambda d: d[: ONE * 3] + struct.pack(">q", 50) + d[ONE * 3 + 8 :], 3, id="offset-goes-back"
        ),
        pytest.param(lambda d: d[: ONE * 2] + b"\x00" * 12 + d[ONE * 2 + 12 :], 2, id="zero-length"),
    ],
)
def test_recover_stops_at_first_invalid_batch(segment: LogSegment, damage, valid_batches: int) -> None:
    segment.log_path.write_bytes(damage(segment.log_path.read_bytes()))
    segment.recover()
    assert (segment.size_bytes, segment.next_offset) == (valid_batches * ONE, BASE + 3 * valid_batches)


def test_recover_keeps_batches_larger_than_any_topic_limit(segment: LogSegment) -> None:
    """Recovery has no size limit of its own: a batch is valid when it is whole and its CRC matches."""
    with open(segment.log_path, "ab") as file:
        file.write(make_batch(1, value_size=2_000_000, base_offset=118))
    result = segment.recover()
    assert (result.truncated_bytes, segment.next_offset) == (0, 119)
