"""The partition log: appends, reads, offsets by timestamp, leader epochs (storage/log.py).

Rules under test are Kafka's (UnifiedLog / LocalLog); each test names the one it checks.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
import pytest
from storage_log_helpers import FakeClock, batch_offsets, filled, follower_batch, log_factory, make_batch

from proto import errors
from proto.kafka_types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from proto.topic_configs import LOG_APPEND_TIME
from storage.batch_header import parse_header, validate_batch
from storage.config import LogConfig
from storage.epoch_cache import UNDEFINED, EpochEndOffset
from storage.log import TimestampAndOffset, UnexpectedAppendOffsetError


@pytest.fixture(autouse=True)
def fsyncs(monkeypatch) -> list[int]:
    """Unit tests check logic; durability is the crash test's job (real fsync there). Record the calls."""
    calls: list[int] = []
    monkeypatch.setattr(os, "fsync", calls.append)
    return calls


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_log(tmp_path: Path, clock: FakeClock):
    yield from log_factory(tmp_path, clock)


# ------------------------------------------------------------------------------------------ append


def test_leader_append_assigns_offsets_and_epoch_without_reencoding(open_log) -> None:
    """Kafka: the leader writes baseOffset and partitionLeaderEpoch (outside the CRC) and nothing else."""
    log = open_log()
    first = log.append_as_leader(make_batch(3), leader_epoch=4)
    second = log.append_as_leader(make_batch(2) + make_batch(5), leader_epoch=4)
    assert (first.first_offset, first.last_offset, first.num_records) == (0, 2, 3)
    assert (second.first_offset, second.last_offset, second.num_batches) == (3, 9, 2)
    assert log.log_end_offset == 10
    data = log.read(0, 1 << 20)
    assert batch_offsets(data) == [(0, 2), (3, 4), (5, 9)]
    positions = [0, len(make_batch(3)), len(make_batch(3)) + len(make_batch(2))]
    assert [parse_header(data, pos).partition_leader_epoch for pos in positions] == [4, 4, 4]
    original = make_batch(3)
    assert data[16 : len(original)] == original[16:], "only bytes 0-15 may change"
    log.invariants()


def test_leader_append_returns_timestamps(open_log) -> None:
    log = open_log()
    info = log.append_as_leader(make_batch(3, timestamp=500) + make_batch(2, timestamp=900), 0)
    assert (info.max_timestamp, info.offset_of_max_timestamp, info.log_append_time) == (901, 4, -1)


def test_log_append_time_overwrites_max_timestamp_and_keeps_crc_valid(open_log, clock) -> None:
    """message.timestamp.type=LogAppendTime: the broker stamps maxTimestamp and the type bit, new CRC."""
    log = open_log(LogConfig(message_timestamp_type=LOG_APPEND_TIME))
    clock.now_ms = 77_000
    info = log.append_as_leader(make_batch(3, timestamp=5), 0)
    assert (info.log_append_time, info.max_timestamp) == (77_000, 77_000)
    header = validate_batch(log.read(0, 1 << 20))
    assert (header.max_timestamp, header.timestamp_type) == (77_000, 1)


def corrupt_crc(batch: bytes) -> bytes:
    buf = bytearray(batch)
    buf[-1] ^= 0xFF
    return bytes(buf)


def count_mismatch(batch: bytes) -> bytes:
    buf = bytearray(batch)
    struct.pack_into(">i", buf, 57, 7)  # recordsCount, inside the CRC: recompute it
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


CORRUPT = errors.CorruptMessageError
TWO = make_batch(2)
BAD_APPENDS = [
    pytest.param(b"", CORRUPT, "at least one batch", id="empty"),
    pytest.param(TWO[:40], CORRUPT, "truncated", id="truncated-header"),
    pytest.param(TWO[:-3], CORRUPT, "truncated", id="truncated-records"),
    pytest.param(TWO + corrupt_crc(TWO), CORRUPT, "CRC", id="bad-crc-2nd"),
    pytest.param(TWO[:16] + b"\x01" + TWO[17:], CORRUPT, "magic", id="magic"),
    pytest.param(make_batch(400, value_size=100), errors.MessageTooLargeError, "max.message", id="too-large"),
    pytest.param(count_mismatch(TWO), errors.InvalidRecordError, "recordsCount", id="count-mismatch"),
    pytest.param(b"\x00" * 70, CORRUPT, "magic", id="zeros"),
]


@pytest.mark.parametrize(("payload", "error", "words"), BAD_APPENDS)
def test_bad_append_is_rejected_whole(open_log, payload: bytes, error: type, words: str) -> None:
    """All or nothing: a request with any bad batch writes nothing and names the problem."""
    log = open_log(LogConfig(max_message_bytes=20_000))
    log.append_as_leader(make_batch(2), 0)
    size_before = log.size_bytes
    with pytest.raises(error, match=words):
        log.append_as_leader(make_batch(1) + payload if payload else payload, 0)
    assert (log.log_end_offset, log.size_bytes) == (2, size_before)
    log.invariants()


def test_append_larger_than_a_segment_is_record_list_too_large(open_log) -> None:
    """Kafka: a request bigger than segment.bytes can never fit: RECORD_LIST_TOO_LARGE."""
    log = open_log(LogConfig(segment_bytes=1000))
    with pytest.raises(errors.RecordListTooLargeError, match=r"segment\.bytes=1000"):
        log.append_as_leader(make_batch(3) * 20, 0)
    assert log.log_end_offset == 0


def test_stale_leader_epoch_is_fenced(open_log) -> None:
    """Epochs only rise: an append in an older epoch than the log holds comes from a zombie leader."""
    log = open_log()
    log.append_as_leader(make_batch(1), 5)
    with pytest.raises(errors.FencedLeaderEpochError, match="epoch 3"):
        log.append_as_leader(make_batch(1), 3)
    assert log.log_end_offset == 1


def test_leader_appends_record_epoch_starts(open_log) -> None:
    """KIP-101: each new leader epoch gets a cache entry at its first offset."""
    log = open_log()
    log.append_as_leader(make_batch(2), 1)
    log.append_as_leader(make_batch(3), 1)
    log.append_as_leader(make_batch(1), 3)
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(1, 0), (3, 5)]
    assert log.end_offset_for_epoch(1) == EpochEndOffset(1, 5)
    assert log.end_offset_for_epoch(2) == EpochEndOffset(1, 5)
    assert log.end_offset_for_epoch(3) == EpochEndOffset(3, 6)
    assert log.end_offset_for_epoch(4) == UNDEFINED


def test_new_leader_assigns_its_epoch_at_the_leo_before_appending(open_log) -> None:
    """Kafka's makeLeader: the epoch starts at the LEO at once, so OffsetsForLeaderEpoch sees it."""
    log = open_log()
    log.append_as_leader(make_batch(3), 1)
    assert log.maybe_assign_epoch_start_offset(2)
    assert not log.maybe_assign_epoch_start_offset(2)
    assert log.end_offset_for_epoch(1) == EpochEndOffset(1, 3)
    log.append_as_leader(make_batch(2), 2)
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(1, 0), (2, 3)]


FOLLOWER_APPENDS = [
    pytest.param([(0, 3, 1), (3, 2, 1), (5, 1, 2)], None, [(1, 0), (2, 5)], id="contiguous"),
    pytest.param([(0, 3, 1), (2, 1, 1)], "starts at offset 2, below 3", [], id="overlap"),
]


@pytest.mark.parametrize(("batches", "error", "epochs"), FOLLOWER_APPENDS)
def test_follower_append_keeps_leader_offsets(open_log, batches, error, epochs) -> None:
    """A follower keeps the leader's offsets and epochs, which must not overlap its LEO (gaps are a
    compacted leader's: tests/unit/storage/test_cleaner.py)."""
    log = open_log()
    payload = b"".join(follower_batch(base, count, epoch) for base, count, epoch in batches)
    if error:
        with pytest.raises(UnexpectedAppendOffsetError, match=error):
            log.append_as_follower(payload)
        assert log.log_end_offset == 0
    else:
        info = log.append_as_follower(payload)
        assert (info.first_offset, info.last_offset) == (0, 5)
        assert batch_offsets(log.read(0, 1 << 20)) == [(0, 2), (3, 4), (5, 5)]
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == epochs


def test_follower_copies_batches_over_the_size_limits_the_leader_accepted(open_log) -> None:
    """Kafka's appendAsFollower ignores the record size: a topic whose max.message.bytes or
    segment.bytes was lowered after larger batches were written must still replicate them (the
    leader checks sizes; a follower refusing would drop out of the ISR for good)."""
    small = LogConfig(max_message_bytes=200, segment_bytes=1024)
    big = follower_batch(0, 40, 1)  # one batch over max.message.bytes
    assert len(big) > small.max_message_bytes
    chunk = b"".join(follower_batch(40 + 40 * i, 40, 1) for i in range(3))  # a fetch over segment.bytes
    assert len(chunk) > small.segment_bytes
    log = open_log(small)
    log.append_as_follower(big)
    log.append_as_follower(chunk)
    assert log.log_end_offset == 160
    read, offset = [], 0
    while offset < log.log_end_offset:  # a read stops at a segment's end
        read += batch_offsets(log.read(offset, 1 << 20))
        offset = read[-1][1] + 1
    assert read == [(0, 39), (40, 79), (80, 119), (120, 159)]
    with pytest.raises(errors.MessageTooLargeError, match=r"max\.message\.bytes=200"):
        log.append_as_leader(make_batch(40), 1)  # a leader still refuses it
    assert log.log_end_offset == 160


# -------------------------------------------------------------------------------------------- read


READS = [
    # start, max_bytes, max_offset -> (base, last) of the batches returned
    pytest.param(0, 1 << 20, None, [(0, 2), (3, 5), (6, 8), (9, 11), (12, 14)], id="everything"),
    pytest.param(4, 1 << 20, None, [(3, 5), (6, 8), (9, 11), (12, 14)], id="mid-batch-start"),
    pytest.param(0, 1 << 20, 9, [(0, 2), (3, 5), (6, 8)], id="stops-at-hw"),
    pytest.param(0, 1 << 20, 8, [(0, 2), (3, 5)], id="hw-mid-batch-excludes-it"),
    pytest.param(0, 1, None, [(0, 2)], id="at-least-one-batch"),
    pytest.param(3, 0, None, [(3, 5)], id="zero-max-bytes-still-one"),
    pytest.param(15, 1 << 20, None, [], id="at-leo"),
    pytest.param(9, 1 << 20, 9, [], id="at-hw"),
    pytest.param(9, 1 << 20, 4, [], id="max-offset-below-start"),
]


@pytest.mark.parametrize(("start", "max_bytes", "max_offset", "expected"), READS)
def test_read_returns_whole_batches(open_log, start, max_bytes, max_offset, expected) -> None:
    """Fetch: raw whole batches from the one holding start, never one holding an offset >= max_offset."""
    log = filled(open_log)
    assert batch_offsets(log.read(start, max_bytes, max_offset)) == expected


def test_read_max_bytes_cuts_at_batch_boundary(open_log) -> None:
    """max_bytes limits whole batches: a partial batch is never returned."""
    log = filled(open_log, batches=20)
    one = len(make_batch(3))
    data = log.read(0, int(one * 3.5))
    assert len(data) == 3 * one
    assert batch_offsets(data) == [(0, 2), (3, 5), (6, 8)]


def test_read_across_segments_and_sparse_index(open_log) -> None:
    """Lookups go through the sparse index and continue into the next segment."""
    one = len(make_batch(3))
    log = filled(open_log, batches=40, config=LogConfig(segment_bytes=one * 7, index_interval_bytes=one * 2))
    assert len(log.segment_base_offsets) == 6
    for start in range(0, 120, 7):
        got = batch_offsets(log.read(start, one))
        assert got == [(start - start % 3, start - start % 3 + 2)], start
    assert log.active_segment.offset_index.keys, "the sparse index must have entries"


@pytest.mark.parametrize("offset", [-1, 16, 1000], ids=["negative", "past-leo", "far-past-leo"])
def test_read_out_of_range(open_log, offset: int) -> None:
    """OFFSET_OUT_OF_RANGE outside [log start, LEO], with the valid range in the message."""
    log = filled(open_log)
    with pytest.raises(errors.OffsetOutOfRangeError, match=r"\[0, 15\]"):
        log.read(offset, 100)


def test_read_below_log_start_is_out_of_range(open_log) -> None:
    log = filled(open_log)
    log.maybe_increment_log_start_offset(6)
    with pytest.raises(errors.OffsetOutOfRangeError, match=r"\[6, 15\]"):
        log.read(5, 100)
    assert batch_offsets(log.read(6, 1 << 20))[0] == (6, 8)


def test_read_negative_max_bytes_is_invalid(open_log) -> None:
    with pytest.raises(errors.InvalidRequestError, match="max_bytes"):
        filled(open_log).read(0, -1)


# -------------------------------------------------------------------------------------- timestamps


TIMESTAMPS = [
    # batch i holds offsets 3i..3i+2 with timestamps 1_000 + 10 i + (0, 1, 2)
    pytest.param(0, TimestampAndOffset(1_000, 0), id="before-everything"),
    pytest.param(1_002, TimestampAndOffset(1_002, 2), id="exact-last-record-of-batch"),
    pytest.param(1_003, TimestampAndOffset(1_010, 3), id="between-batches"),
    pytest.param(1_031, TimestampAndOffset(1_031, 10), id="inside-batch"),
    pytest.param(1_042, TimestampAndOffset(1_042, 14), id="last-record"),
    pytest.param(1_043, None, id="after-everything"),
    pytest.param(EARLIEST_TIMESTAMP, TimestampAndOffset(-1, 0), id="earliest"),
    pytest.param(LATEST_TIMESTAMP, TimestampAndOffset(-1, 15), id="latest"),
]


@pytest.mark.parametrize(("timestamp", "expected"), TIMESTAMPS)
def test_offset_for_timestamp(open_log, timestamp: int, expected) -> None:
    """ListOffsets: the earliest record whose timestamp >= the target (indexes, then one batch decoded)."""
    one = len(make_batch(3))
    log = filled(open_log, config=LogConfig(segment_bytes=one * 2, index_interval_bytes=1))
    assert log.offset_for_timestamp(timestamp) == expected


def test_offset_for_timestamp_respects_log_start(open_log) -> None:
    log = filled(open_log)
    log.maybe_increment_log_start_offset(7)
    assert log.offset_for_timestamp(0) == TimestampAndOffset(1_021, 7)


def test_offset_for_bad_timestamp(open_log) -> None:
    with pytest.raises(errors.InvalidRequestError, match="timestamp -5"):
        filled(open_log).offset_for_timestamp(-5)


# ------------------------------------------------------------------------------------ high watermark


def test_high_watermark_is_checkpointed_and_capped_at_leo(open_log, tmp_path: Path) -> None:
    """HW comes back from its checkpoint, capped at the LEO found on disk."""
    log = filled(open_log)
    log.update_high_watermark(9)
    log.write_checkpoints()
    log.close()
    again = open_log(path=log.directory)
    assert again.high_watermark == 9
    again.update_high_watermark(15)
    again.write_checkpoints()
    again.truncate_to(6)
    again.write_checkpoints()
    assert again.high_watermark == 6


@pytest.mark.parametrize("hw", [-1, 16], ids=["below-log-start", "past-leo"])
def test_high_watermark_outside_range_is_a_bug(open_log, hw: int) -> None:
    log = filled(open_log)
    with pytest.raises(AssertionError, match="HW"):
        log.update_high_watermark(hw)


def test_failed_write_is_a_storage_error_and_changes_nothing(open_log, monkeypatch) -> None:
    """A disk error (ENOSPC) is KAFKA_STORAGE_ERROR; the file is cut back and the LEO does not move."""
    import errno

    log = open_log()
    log.append_as_leader(make_batch(3), 0)
    size = log.size_bytes

    def full_disk(fd, pieces):
        os.write(fd, bytes(pieces[0])[:5])  # a torn partial write before the failure
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", full_disk)
    with pytest.raises(errors.KafkaStorageError, match="No space left"):
        log.append_as_leader(make_batch(3), 0)
    monkeypatch.undo()
    assert (log.log_end_offset, log.size_bytes, log.active_segment.log_path.stat().st_size) == (3, size, size)
    assert log.append_as_leader(make_batch(2), 0).first_offset == 3
    assert batch_offsets(log.read(0, 1 << 20)) == [(0, 2), (3, 4)]
