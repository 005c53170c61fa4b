"""The partition log over time: roll, retention, log start offset, truncation, flush policy, config.

Rules are Kafka's (UnifiedLog, LocalLog, LogConfig); each test names the one it checks.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
import pytest
from storage_log_helpers import FakeClock, batch_offsets, filled, follower_batch, log_factory, make_batch

from proto import errors
from storage.config import LogConfig
from storage.epoch_cache import EpochEntry

ONE = len(make_batch(3))


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


def without_timestamps(batch: bytes) -> bytes:
    """The batch with base and max timestamp -1 (no record time), CRC recomputed."""
    buf = bytearray(batch)
    struct.pack_into(">qq", buf, 27, -1, -1)
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    return bytes(buf)


def log_files(log) -> list[str]:
    return sorted(p.name for p in log.directory.iterdir() if p.suffix in (".log", ".index", ".timeindex"))


# -------------------------------------------------------------------------------------------- roll


def test_roll_by_segment_bytes(open_log) -> None:
    """segment.bytes: a new segment starts when the next append would not fit."""
    log = filled(open_log, batches=7, config=LogConfig(segment_bytes=ONE * 3))
    assert log.segment_base_offsets == (0, 9, 18)
    assert log_files(log)[:3] == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
    ]
    assert all(s.size_bytes <= ONE * 3 for s in log._segments)
    assert batch_offsets(log.read(0, 1 << 20)) == [(0, 2), (3, 5), (6, 8)]
    log.invariants()


def test_roll_by_segment_ms_uses_record_time(open_log) -> None:
    """segment.ms, KAFKA-4099: the time waited is the new batch's timestamp minus the segment's first."""
    log = open_log(LogConfig(segment_ms=100))
    log.append_as_leader(make_batch(3, timestamp=1_000), 0)  # max timestamp 1_002
    log.append_as_leader(make_batch(3, timestamp=1_100), 0)  # max 1_102: waited exactly 100
    assert log.segment_base_offsets == (0,)
    log.append_as_leader(make_batch(3, timestamp=1_101), 0)  # max 1_103: waited 101
    assert log.segment_base_offsets == (0, 6)


def test_roll_by_segment_ms_uses_wall_clock_without_record_time(open_log, clock: FakeClock) -> None:
    """segment.ms without record timestamps: time since the segment was created, from the clock."""
    log = open_log(LogConfig(segment_ms=100))
    log.append_as_leader(without_timestamps(make_batch(3)), 0)
    clock.now_ms += 100
    log.append_as_leader(without_timestamps(make_batch(3)), 0)
    assert log.segment_base_offsets == (0,)
    clock.now_ms += 1
    log.append_as_leader(without_timestamps(make_batch(3)), 0)
    assert log.segment_base_offsets == (0, 6)


def test_explicit_roll_of_empty_segment_is_a_noop(open_log) -> None:
    log = open_log()
    log.roll()
    assert log.segment_base_offsets == (0,)


# --------------------------------------------------------------------------------------- retention


def retention_log(open_log, clock: FakeClock, config: LogConfig, hw: int | None = None):
    """Five segments of two batches; batch i has max timestamp 1_002 + 10 i; segment j 1_012 + 20 j."""
    log = open_log(config)
    for i in range(10):
        log.append_as_leader(make_batch(3, timestamp=1_000 + 10 * i), i // 4)
    log.update_high_watermark(log.log_end_offset if hw is None else hw)
    clock.now_ms = 1_100
    return log


RETENTION = [
    # config, hw -> segment bases left, log start offset
    pytest.param({"retention_ms": None}, None, (0, 6, 12, 18, 24), 0, id="keep-forever"),
    pytest.param({"retention_ms": 1_000}, None, (0, 6, 12, 18, 24), 0, id="nothing-old-enough"),
    pytest.param({"retention_ms": 75}, None, (6, 12, 18, 24), 6, id="time-one-segment"),
    pytest.param({"retention_ms": 55}, None, (12, 18, 24), 12, id="time-two-segments"),
    pytest.param({"retention_ms": 55}, 11, (6, 12, 18, 24), 6, id="time-stops-at-hw"),
    pytest.param({"retention_ms": 0}, None, (30,), 30, id="time-everything-rolls-active"),
    pytest.param({"retention_bytes": ONE * 6}, None, (12, 18, 24), 12, id="size-exact"),
    pytest.param({"retention_bytes": ONE * 5}, None, (12, 18, 24), 12, id="size-never-below-retention"),
    pytest.param({"retention_bytes": ONE * 4}, None, (18, 24), 18, id="size-more"),
    pytest.param({"retention_bytes": 0}, 0, (0, 6, 12, 18, 24), 0, id="size-nothing-below-hw"),
]


@pytest.mark.parametrize(("settings", "hw", "left", "log_start"), RETENTION)
def test_retention_deletes_whole_segments_below_hw(open_log, clock, settings, hw, left, log_start) -> None:
    """retention.ms / retention.bytes: delete whole oldest segments, only below the HW; move log start."""
    config = LogConfig(segment_bytes=ONE * 2, **settings)
    log = retention_log(open_log, clock, config, hw)
    deleted = log.delete_old_segments()
    assert (log.segment_base_offsets, log.log_start_offset) == (left, log_start)
    assert deleted == 5 - len(left) + (1 if left == (30,) else 0)
    assert log.log_end_offset == 30
    assert f"{left[0]:020d}.log" == log_files(log)[1]
    log.invariants()


def test_retention_trims_epoch_cache_from_start(open_log, clock) -> None:
    """KIP-101: entries wholly below the new log start go; the covering epoch starts at the log start."""
    log = retention_log(open_log, clock, LogConfig(segment_bytes=ONE * 2, retention_ms=35))
    assert log.leader_epoch_cache.entries == (EpochEntry(0, 0), EpochEntry(1, 12), EpochEntry(2, 24))
    log.delete_old_segments()
    assert log.log_start_offset == 18
    assert log.leader_epoch_cache.entries == (EpochEntry(1, 18), EpochEntry(2, 24))


def test_retention_of_segments_without_timestamps_uses_their_creation_time(open_log, clock) -> None:
    """A segment whose batches carry no timestamp (-1) ages from when it was created, not from 1970."""
    log = open_log(LogConfig(segment_bytes=ONE * 2, retention_ms=100))
    for _ in range(4):
        log.append_as_leader(without_timestamps(make_batch(3)), 0)
    log.update_high_watermark(12)
    clock.now_ms += 100
    assert log.delete_old_segments() == 0
    clock.now_ms += 1
    assert log.delete_old_segments() == 2
    assert log.segment_base_offsets == (12,)


LOG_START_MOVES = [
    pytest.param(4, True, 4, (0, 6), id="inside-first-segment"),
    pytest.param(6, True, 6, (6,), id="segment-boundary"),
    pytest.param(9, True, 9, (6,), id="inside-second"),
    pytest.param(0, False, 0, (0, 6), id="not-forward"),
]


@pytest.mark.parametrize(("offset", "moved", "log_start", "left"), LOG_START_MOVES)
def test_maybe_increment_log_start_offset(open_log, offset, moved, log_start, left) -> None:
    """DeleteRecords / follower: log start only moves forward; segments wholly below it go on retention."""
    log = filled(open_log, batches=4, config=LogConfig(segment_bytes=ONE * 2, retention_ms=None))
    assert log.maybe_increment_log_start_offset(offset) is moved
    log.delete_old_segments()
    assert (log.log_start_offset, log.segment_base_offsets) == (log_start, left)


def test_log_start_offset_cannot_pass_hw(open_log) -> None:
    log = filled(open_log)
    log.update_high_watermark(6)
    with pytest.raises(errors.OffsetOutOfRangeError, match="high watermark 6"):
        log.maybe_increment_log_start_offset(7)
    assert log.log_start_offset == 0


def test_log_start_offset_survives_restart(open_log) -> None:
    log = filled(open_log)
    log.maybe_increment_log_start_offset(5)
    log.close()
    assert open_log(path=log.directory).log_start_offset == 5


# -------------------------------------------------------------------------------------- truncation


TRUNCATIONS = [
    # truncate_to(offset) -> changed, LEO after (whole batches only), segments left
    pytest.param(15, False, 15, (0, 6, 12), id="at-leo"),
    pytest.param(99, False, 15, (0, 6, 12), id="past-leo"),
    pytest.param(12, True, 12, (0, 6, 12), id="segment-boundary-keeps-empty-segment"),
    pytest.param(10, True, 9, (0, 6), id="mid-batch-drops-whole-batch"),
    pytest.param(9, True, 9, (0, 6), id="batch-boundary"),
    pytest.param(3, True, 3, (0,), id="first-segment"),
    pytest.param(0, True, 0, (0,), id="everything"),
]


@pytest.mark.parametrize(("offset", "changed", "leo", "left"), TRUNCATIONS)
def test_truncate_to(open_log, offset, changed, leo, left) -> None:
    """Follower truncation: drop every batch holding an offset >= target; HW and epochs follow."""
    log = open_log(LogConfig(segment_bytes=ONE * 2))
    for i in range(5):
        log.append_as_leader(make_batch(3), i)
    log.update_high_watermark(15)
    assert log.truncate_to(offset) is changed
    assert (log.log_end_offset, log.segment_base_offsets) == (leo, left)
    assert log.high_watermark == leo
    assert [e.start_offset for e in log.leader_epoch_cache.entries] == [
        o for o in (0, 3, 6, 9, 12) if o < leo
    ]
    log.invariants()
    info = log.append_as_leader(make_batch(3), 7)
    assert info.first_offset == leo
    assert batch_offsets(log.read(leo, 1 << 20)) == [(leo, leo + 2)]


def test_truncation_trims_epoch_cache_past_leo(open_log) -> None:
    """Kafka's UnifiedLog.truncateTo: with ``offset >= LEO`` no batch goes, but epochs starting at or
    after ``offset`` still do. A replica that led an epoch in which it wrote nothing has that epoch at
    its LEO; as a follower it is told to truncate to the LEO, and must forget the empty epoch, or it
    asks the leader about it forever (issue 14, defect 1)."""
    log = filled(open_log, batches=2)  # offsets 0..5 in epoch 0
    assert log.maybe_assign_epoch_start_offset(5)  # led epoch 5, wrote nothing
    assert log.leader_epoch_cache.entries == (EpochEntry(0, 0), EpochEntry(5, 6))
    assert log.truncate_to(6) is False, "no batch was removed"
    assert log.leader_epoch_cache.entries == (EpochEntry(0, 0),)
    assert (log.log_end_offset, log.latest_epoch) == (6, 0)
    log.invariants()
    log.close()
    assert open_log(path=log.directory).leader_epoch_cache.entries == (EpochEntry(0, 0),), "persisted"


def test_truncate_below_log_start_truncates_fully(open_log) -> None:
    log = filled(open_log)
    log.maybe_increment_log_start_offset(9)
    assert log.truncate_to(4)
    assert (log.log_start_offset, log.log_end_offset, log.segment_base_offsets) == (4, 4, (4,))


def test_truncate_inside_the_batch_holding_the_log_start(open_log) -> None:
    """Cutting the batch that straddles the log start leaves nothing readable: restart empty there."""
    log = filled(open_log)
    log.maybe_increment_log_start_offset(7)
    assert log.truncate_to(8)
    state = (log.log_start_offset, log.log_end_offset, log.segment_base_offsets, log.high_watermark)
    assert state == (7, 7, (7,), 7)
    log.invariants()


def test_truncate_fully_and_start_at(open_log) -> None:
    """A follower far behind its leader's log start: drop everything, restart empty at the offset."""
    log = filled(open_log, config=LogConfig(segment_bytes=ONE * 2))
    log.truncate_fully_and_start_at(100)
    state = (log.log_start_offset, log.high_watermark, log.log_end_offset, log.segment_base_offsets)
    assert state == (100, 100, 100, (100,))
    assert log.leader_epoch_cache.entries == ()
    assert log_files(log) == [f"{100:020d}{suffix}" for suffix in (".index", ".log", ".timeindex")]
    log.append_as_follower(follower_batch(100, 2, epoch=3))
    log.close()
    again = open_log(path=log.directory)
    assert (again.log_start_offset, again.log_end_offset) == (100, 102)
    assert again.leader_epoch_cache.entries == (EpochEntry(3, 100),)


# ------------------------------------------------------------------------------------------- flush


def test_by_default_appends_are_not_fsynced(open_log, fsyncs: list[int]) -> None:
    """Like Kafka, durability comes from replication: no flush.messages / flush.ms, no fsync."""
    log = filled(open_log)
    assert log.recovery_point == 0
    assert log.active_segment._fd not in fsyncs, "only the epoch checkpoint may have been synced"
    log.flush()
    assert log.recovery_point == 15
    assert log.active_segment._fd in fsyncs


def test_flush_messages(open_log) -> None:
    """flush.messages=N: fsync once N records are unflushed."""
    log = open_log(LogConfig(flush_messages=5))
    log.append_as_leader(make_batch(3), 0)
    assert log.recovery_point == 0
    log.append_as_leader(make_batch(3), 0)
    assert log.recovery_point == 6
    log.append_as_leader(make_batch(3), 0)
    assert log.recovery_point == 6


def test_flush_ms(open_log, clock: FakeClock) -> None:
    """flush.ms: fsync when that long has passed since the last flush (on append or on the timer)."""
    log = open_log(LogConfig(flush_ms=50))
    log.append_as_leader(make_batch(3), 0)
    assert not log.maybe_flush()
    clock.now_ms += 50
    assert log.maybe_flush()
    assert log.recovery_point == 3
    clock.now_ms += 50
    log.append_as_leader(make_batch(3), 0)
    assert log.recovery_point == 6


# ------------------------------------------------------------------------------------------ config


CONFIGS = [
    pytest.param({"segment.bytes": "1024"}, {"segment_bytes": 1024}, id="string-int"),
    pytest.param(
        {"retention.ms": -1, "retention.bytes": "-1"}, {"retention_ms": None}, id="minus-one-unlimited"
    ),
    pytest.param({"flush.messages": 1}, {"flush_messages": 1}, id="flush"),
    pytest.param(
        {"message.timestamp.type": "LogAppendTime"}, {"message_timestamp_type": "LogAppendTime"}, id="ts"
    ),
]


@pytest.mark.parametrize(("properties", "expected"), CONFIGS)
def test_config_from_kafka_names(properties, expected) -> None:
    config = LogConfig.from_properties(properties)
    for name, value in expected.items():
        assert getattr(config, name) == value
    assert LogConfig.from_properties(config.to_properties()) == config


BAD_CONFIGS = [
    pytest.param({"segment.byte": 1}, "unknown log config 'segment.byte'", id="unknown-name"),
    pytest.param({"segment.bytes": "lots"}, "segment.bytes='lots' is not an integer", id="not-int"),
    pytest.param({"segment.bytes": 2**31}, "segment.bytes=2147483648", id="segment-too-big"),
    pytest.param({"segment.bytes": 1}, "segment.bytes=1", id="segment-too-small"),
    pytest.param({"retention.ms": -2}, "retention.ms=-2", id="negative-retention"),
    pytest.param({"flush.messages": 0}, "flush.messages=0", id="flush-zero"),
    pytest.param({"max.message.bytes": 10}, "max.message.bytes=10", id="max-message-too-small"),
    pytest.param({"message.timestamp.type": "Wall"}, "message.timestamp.type='Wall'", id="timestamp-type"),
    pytest.param({"segment.ms": 0}, "segment.ms=0", id="segment-ms-zero"),
]


@pytest.mark.parametrize(("properties", "words"), BAD_CONFIGS)
def test_bad_config_is_invalid_config(properties, words) -> None:
    """INVALID_CONFIG names the setting and the bad value."""
    with pytest.raises(errors.InvalidConfigError) as raised:
        LogConfig.from_properties(properties)
    assert words in str(raised.value)
