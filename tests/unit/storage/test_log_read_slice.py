"""File slices of the partition log (``Log.read_slice``, storage/file_slice.py): Kafka's
``FileRecords.slice`` — the same batches ``Log.read`` returns, as (segment file, position, size),
kept valid while retention deletes or the log rolls the segment under it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from storage_log_helpers import FakeClock, batch_offsets, filled, log_factory, make_batch

from proto import errors
from storage.config import LogConfig
from storage.file_slice import FileSlice, SliceTruncatedError


@pytest.fixture(autouse=True)
def no_fsync(monkeypatch) -> None:
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_log(tmp_path: Path, clock: FakeClock):
    yield from log_factory(tmp_path, clock)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


READS = [
    # start, max_bytes, max_offset, min_one_batch: the same cases as Log.read's, boundaries included
    pytest.param(0, 1 << 20, None, True, id="everything"),
    pytest.param(4, 1 << 20, None, True, id="mid-batch-start"),
    pytest.param(0, 1 << 20, 9, True, id="stops-at-hw"),
    pytest.param(0, 1 << 20, 8, True, id="hw-mid-batch-excludes-it"),
    pytest.param(0, 1, None, True, id="at-least-one-batch"),
    pytest.param(0, 1, None, False, id="no-min-one-batch-gives-nothing"),
    pytest.param(3, 0, None, True, id="zero-max-bytes-still-one"),
    pytest.param(0, 100, None, True, id="max-bytes-cuts-at-batch-boundary"),
    pytest.param(15, 1 << 20, None, True, id="at-leo"),
    pytest.param(9, 1 << 20, 9, True, id="at-hw"),
    pytest.param(9, 1 << 20, 4, True, id="max-offset-below-start"),
]


@pytest.mark.parametrize(("start", "max_bytes", "max_offset", "min_one_batch"), READS)
def test_slice_holds_exactly_the_bytes_read_returns(open_log, start, max_bytes, max_offset, min_one_batch):
    """Same whole-batch, HW (max_offset), max_bytes and min-one-batch rules as Log.read; nothing is b""."""
    log = filled(open_log)
    expected = log.read(start, max_bytes, max_offset, min_one_batch=min_one_batch)
    got = log.read_slice(start, max_bytes, max_offset, min_one_batch=min_one_batch)
    if not expected:
        assert got == b""
        return
    assert isinstance(got, FileSlice)
    assert len(got) == got.size == len(expected)
    assert got.read() == expected
    got.close()


def test_slice_position_and_size_within_the_segment(open_log) -> None:
    one = len(make_batch(3))
    log = filled(open_log, batches=20)
    piece = log.read_slice(6, int(one * 2.5))
    assert isinstance(piece, FileSlice)
    assert (piece.position, piece.size) == (2 * one, 2 * one)  # batches 6..8 and 9..11, whole
    assert batch_offsets(piece.read()) == [(6, 8), (9, 11)]
    piece.close()


def test_slice_stays_inside_one_segment(open_log) -> None:
    one = len(make_batch(3))
    log = filled(open_log, batches=10, config=LogConfig(segment_bytes=one * 4))
    assert len(log.segment_base_offsets) >= 3
    piece = log.read_slice(0, 1 << 20)
    assert isinstance(piece, FileSlice)
    assert batch_offsets(piece.read()) == [(0, 2), (3, 5), (6, 8), (9, 11)]
    piece.close()


def test_slice_out_of_range_is_offset_out_of_range(open_log) -> None:
    log = filled(open_log)
    with pytest.raises(errors.OffsetOutOfRangeError, match=r"\[0, 15\]"):
        log.read_slice(16, 100)


def test_slice_survives_retention_deleting_its_segment(open_log, clock) -> None:
    """Retention unlinks and closes the segment; a slice taken before still reads its bytes (it shares
    the segment's descriptor, which stays open while the slice holds it, so the inode lives on), and
    closing the slice closes the descriptor. Taking a slice opens no descriptor."""
    one = len(make_batch(3))
    log = filled(open_log, batches=10, config=LogConfig(segment_bytes=one * 4, retention_ms=1))
    first_segment = Path(log.active_segment.log_path).with_name(f"{0:020d}.log")
    expected = log.read(0, 1 << 20)
    before = open_fds()
    piece = log.read_slice(0, 1 << 20)
    assert open_fds() == before
    clock.now_ms += 10_000_000
    fd = piece.fileno()
    assert log.delete_old_segments() >= 1
    assert not first_segment.exists()
    assert log.log_start_offset > 0
    assert os.fstat(fd).st_nlink == 0, "the slice holds the unlinked segment's descriptor open"
    assert piece.read() == expected
    piece.close()
    assert piece.closed
    with pytest.raises(OSError):
        os.fstat(fd)


def test_slice_survives_a_roll(open_log) -> None:
    log = filled(open_log, batches=4)
    piece = log.read_slice(0, 1 << 20)
    expected = log.read(0, 1 << 20)
    log.roll()
    log.append_as_leader(make_batch(3), 0)
    assert piece.read() == expected
    piece.close()


def test_an_unsent_slice_releases_its_descriptor_when_dropped(open_log) -> None:
    """A slice dropped unsent (a parked fetch read again) lets go of a deleted segment's descriptor."""
    one = len(make_batch(3))
    log = filled(open_log, batches=10, config=LogConfig(segment_bytes=one * 4))
    piece = log.read_slice(0, 1 << 20)
    fd = piece.fileno()
    log.maybe_increment_log_start_offset(log.segment_base_offsets[1])
    assert log.delete_old_segments() == 1
    assert os.fstat(fd).st_nlink == 0  # held by the slice
    del piece
    with pytest.raises(OSError):
        os.fstat(fd)


def test_many_slices_of_one_segment_share_its_descriptor(open_log) -> None:
    log = filled(open_log, batches=20)
    before = open_fds()
    pieces = [log.read_slice(offset, 100) for offset in range(0, 60, 3)]
    assert open_fds() == before
    assert len({p.fileno() for p in pieces}) == 1


def test_a_slice_truncated_under_it_refuses_to_read_short(open_log) -> None:
    """A follower truncation shortens the file: the slice never hands out fewer bytes than its size
    (the response's length prefix announced them)."""
    log = filled(open_log, batches=5)
    piece = log.read_slice(0, 1 << 20)
    log.truncate_to(6)
    with pytest.raises(SliceTruncatedError, match=r"truncated while the fetch answer was in flight"):
        piece.read()
    piece.close()
