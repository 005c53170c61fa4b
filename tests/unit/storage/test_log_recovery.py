"""Opening a partition directory: clean restart, recovery of a torn or corrupt tail, index rebuilds.

Kafka's LogLoader rules: after an unclean stop every segment past the recovery point is scanned and
cut at the first bad batch; after a clean stop only index files are checked; the marker never
outlives the open.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from storage_log_helpers import FakeClock, batch_offsets, log_factory, make_batch

from proto import errors
from storage.config import LogConfig
from storage.epoch_cache import FILE_NAME as EPOCH_FILE
from storage.epoch_cache import EpochEntry
from storage.log_loader import CLEAN_SHUTDOWN_FILE, HIGH_WATERMARK_FILE, RECOVERY_POINT_FILE

ONE = len(make_batch(3))
CONFIG = LogConfig(segment_bytes=ONE * 4, index_interval_bytes=ONE)


@pytest.fixture(autouse=True)
def fsyncs(monkeypatch) -> list[int]:
    """Unit tests check logic; durability is the crash test's job (real fsync there). Record the calls."""
    calls: list[int] = []
    monkeypatch.setattr(os, "fsync", calls.append)
    return calls


@pytest.fixture
def open_log(tmp_path: Path):
    yield from log_factory(tmp_path, FakeClock())


def written(open_log, batches: int = 10, close: bool = True, flush: bool = False):
    """Three segments (4 + 4 + 2 batches of 3 records), epochs 0 then 1 from batch 6."""
    log = open_log(CONFIG)
    for i in range(batches):
        log.append_as_leader(make_batch(3, timestamp=1_000 + i), 0 if i < 6 else 1)
    log.update_high_watermark(log.log_end_offset)
    if flush:
        log.flush()
    if close:
        log.close()
    else:
        for segment in log._segments:  # the process dies: files stay as the page cache has them
            segment.close()
    return log.directory


def segment_path(directory: Path, base_offset: int, suffix: str = ".log") -> Path:
    return directory / f"{base_offset:020d}{suffix}"


def test_clean_restart_skips_recovery(open_log) -> None:
    """A clean-shutdown marker means every segment and index was flushed: nothing is scanned."""
    directory = written(open_log)
    assert (directory / CLEAN_SHUTDOWN_FILE).exists()
    log = open_log(CONFIG, directory)
    assert log.load_result.had_clean_shutdown and log.load_result.recovered_segments == 0
    assert not (directory / CLEAN_SHUTDOWN_FILE).exists(), "the marker must not outlive the open"
    assert (log.log_end_offset, log.high_watermark, log.recovery_point) == (30, 30, 30)
    assert batch_offsets(log.read(0, 1 << 20)) == [(i, i + 2) for i in range(0, 12, 3)]
    assert log.leader_epoch_cache.entries == (EpochEntry(0, 0), EpochEntry(1, 18))
    log.invariants()


def test_unclean_restart_scans_from_recovery_point(open_log) -> None:
    """No marker: the segments holding offsets >= the recovery point are scanned (here: all of them)."""
    directory = written(open_log, close=False)
    log = open_log(CONFIG, directory)
    assert not log.load_result.had_clean_shutdown
    assert (log.load_result.recovered_segments, log.load_result.truncated_bytes) == (3, 0)
    assert log.log_end_offset == 30
    assert log.high_watermark == 0, "the HW checkpoint was never written"
    log.invariants()


def test_unclean_restart_after_flush_scans_only_the_tail(open_log) -> None:
    directory = written(open_log, close=False, flush=True)
    log = open_log(CONFIG, directory)
    assert log.load_result.recovered_segments == 1
    assert log.log_end_offset == 30


TAILS = [
    # how the active segment (offsets 24..29, two batches) is damaged -> LEO after recovery
    pytest.param(lambda data: data[:-1], 27, id="torn-last-batch"),
    pytest.param(lambda data: data[: ONE + 30], 27, id="torn-inside-header"),
    pytest.param(lambda data: data + b"\x00" * 100, 30, id="zero-filled-tail"),
    pytest.param(lambda data: data + make_batch(3)[:50], 30, id="half-written-next-batch"),
    pytest.param(lambda data: data[:-5] + b"XXXXX", 27, id="corrupt-crc-last"),
    pytest.param(lambda data: data[:70] + b"\xff" + data[71:], 24, id="corrupt-crc-first"),
    pytest.param(lambda data: data[:16] + b"\x07" + data[17:], 24, id="bad-magic"),
    pytest.param(lambda data: b"", 24, id="empty-file"),
]


@pytest.mark.parametrize(("damage", "leo"), TAILS)
def test_torn_or_corrupt_tail_is_truncated_at_last_valid_batch(open_log, damage, leo: int) -> None:
    """Recovery keeps the longest valid prefix, rebuilds the indexes and appends continue after it."""
    directory = written(open_log, close=False)
    path = segment_path(directory, 24)
    original = path.read_bytes()
    path.write_bytes(damage(original))
    log = open_log(CONFIG, directory)
    assert log.log_end_offset == leo
    assert log.load_result.truncated_bytes == len(damage(original)) - (leo - 24) // 3 * ONE
    assert path.stat().st_size == (leo - 24) // 3 * ONE
    assert log.append_as_leader(make_batch(3), 1).first_offset == leo
    assert batch_offsets(log.read(leo, 1 << 20)) == [(leo, leo + 2)]
    log.invariants()


def test_corruption_in_an_older_segment_drops_everything_after_it(open_log) -> None:
    """A bad batch in a scanned, non-last segment: cut there and delete the later segments."""
    directory = written(open_log, close=False)
    path = segment_path(directory, 12)
    data = bytearray(path.read_bytes())
    data[ONE + 70] ^= 0xFF  # the second batch of segment 12 (offsets 15..17)
    path.write_bytes(bytes(data))
    log = open_log(CONFIG, directory)
    assert (log.log_end_offset, log.segment_base_offsets) == (15, (0, 12))
    assert not segment_path(directory, 24).exists()
    assert log.leader_epoch_cache.entries == (EpochEntry(0, 0),)
    log.invariants()


INDEX_DAMAGE = [
    pytest.param(lambda path: path.unlink(), id="missing"),
    pytest.param(lambda path: path.write_bytes(b"\x01\x02\x03"), id="partial-entry"),
    pytest.param(lambda path: path.write_bytes(path.read_bytes()[::-1]), id="garbage-order"),
    pytest.param(lambda path: path.write_bytes(b"\x00\x00\x00\x05\x7f\x00\x00\x00"), id="position-past-end"),
]


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize("damage", INDEX_DAMAGE)
def test_bad_index_is_rebuilt_even_after_clean_shutdown(open_log, damage, suffix: str) -> None:
    """A missing or insane index file is rebuilt from its segment; it then equals the original."""
    directory = written(open_log)
    path = segment_path(directory, 0, suffix)
    original = path.read_bytes()
    assert original, "the test needs a non-empty index"
    damage(path)
    log = open_log(CONFIG, directory)
    assert log.load_result.recovered_segments == 1
    assert batch_offsets(log.read(7, ONE)) == [(6, 8)]
    log.close()
    assert path.read_bytes() == original


def test_orphan_index_files_are_removed(open_log) -> None:
    directory = written(open_log)
    orphan = segment_path(directory, 999, ".index")
    orphan.write_bytes(b"")
    open_log(CONFIG, directory)
    assert not orphan.exists()


def test_epoch_cache_is_rebuilt_from_scanned_batches(open_log) -> None:
    """Recovery re-learns leader epochs from the partitionLeaderEpoch of scanned batches."""
    directory = written(open_log, close=False)
    (directory / EPOCH_FILE).unlink()
    log = open_log(CONFIG, directory)
    assert log.leader_epoch_cache.entries == (EpochEntry(0, 0), EpochEntry(1, 18))


def test_epoch_cache_entries_past_the_recovered_end_are_dropped(open_log) -> None:
    directory = written(open_log, close=False)
    segment_path(directory, 12).write_bytes(segment_path(directory, 12).read_bytes()[: ONE * 2 + 10])
    log = open_log(CONFIG, directory)
    assert log.log_end_offset == 18
    assert log.leader_epoch_cache.entries == (EpochEntry(0, 0),)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        pytest.param(HIGH_WATERMARK_FILE, b"0\n1\nabc\n", id="hw-not-int"),
        pytest.param(RECOVERY_POINT_FILE, b"7\n1\n5\n", id="recovery-bad-version"),
        pytest.param(EPOCH_FILE, b"0\n2\n3 10\n2 20\n", id="epochs-decreasing"),
        pytest.param(EPOCH_FILE, b"0\n3\n1 0\n", id="epochs-count-mismatch"),
    ],
)
def test_corrupt_checkpoint_is_a_storage_error(open_log, name: str, content: bytes) -> None:
    """A checkpoint that cannot be parsed is KAFKA_STORAGE_ERROR naming the file, never a traceback."""
    directory = written(open_log)
    (directory / name).write_bytes(content)
    with pytest.raises(errors.KafkaStorageError, match=name):
        open_log(CONFIG, directory)


def test_hw_checkpoint_past_leo_is_capped(open_log) -> None:
    """architecture.md: HW comes from its checkpoint, capped at the recovered LEO."""
    directory = written(open_log)
    segment_path(directory, 24).write_bytes(segment_path(directory, 24).read_bytes()[:-1])
    (directory / CLEAN_SHUTDOWN_FILE).unlink()
    log = open_log(CONFIG, directory)
    assert (log.log_end_offset, log.high_watermark) == (27, 27)


def test_reopen_of_empty_directory(open_log, tmp_path: Path) -> None:
    log = open_log(CONFIG, tmp_path / "fresh")
    assert (log.log_start_offset, log.log_end_offset, log.segment_base_offsets) == (0, 0, (0,))
    assert log.read(0, 100) == b""
    log.close()
    assert os.listdir(tmp_path / "fresh")


def test_hole_between_unflushed_segments_drops_the_later_ones(open_log) -> None:
    """A later segment reached the disk but an earlier one's tail did not: keep only the contiguous prefix."""
    directory = written(open_log, close=False)
    segment_path(directory, 12).write_bytes(segment_path(directory, 12).read_bytes()[: ONE * 2])
    log = open_log(CONFIG, directory)
    assert (log.log_end_offset, log.segment_base_offsets) == (18, (0, 12))
    assert not segment_path(directory, 24).exists()
    log.invariants()


def test_hole_in_flushed_segments_is_a_storage_error(open_log) -> None:
    """Below the recovery point the log was fsynced: a hole there is damage, not a crash artefact."""
    directory = written(open_log)
    segment_path(directory, 12).write_bytes(segment_path(directory, 12).read_bytes()[: ONE * 2])
    with pytest.raises(
        errors.KafkaStorageError, match="segment 12 ends at offset 18 but the next segment starts at 24"
    ):
        open_log(CONFIG, directory)


def test_recovery_ignores_max_message_bytes(open_log) -> None:
    """Kafka's LogSegment.recover checks structure only (CRC, offsets, sizes within the segment): a batch
    written under a larger max.message.bytes (or replicated) is valid data after the limit is lowered,
    and an unclean restart must keep it and everything after it (issue 14, defect 2)."""
    big = make_batch(1, value_size=900_000)
    config = LogConfig(segment_bytes=2 * len(big), max_message_bytes=1_000_000)
    log = open_log(config)
    log.append_as_leader(make_batch(3), 0)
    log.append_as_leader(big, 0)
    for i in range(4):  # rolls: the big batches end up in older, unflushed segments
        log.append_as_leader(big if i == 1 else make_batch(3), 0)
    log.update_high_watermark(log.log_end_offset)
    before = (log.log_end_offset, log.segment_base_offsets, batch_offsets(log.read(0, 1 << 24)))
    directory = log.directory
    for segment in log._segments:  # killed: no flush, no clean shutdown marker
        segment.close()
    lowered = LogConfig(segment_bytes=2 * len(big), max_message_bytes=500_000)
    again = open_log(lowered, directory)
    assert not again.load_result.had_clean_shutdown and again.load_result.recovered_segments >= 2
    assert again.load_result.truncated_bytes == 0
    after = (again.log_end_offset, again.segment_base_offsets, batch_offsets(again.read(0, 1 << 24)))
    assert after == before
    again.invariants()


def test_hw_checkpoint_never_exceeds_the_hw_after_a_capped_load(open_log) -> None:
    """Recovery capped the checkpointed HW at a shorter LEO (a power loss took the tail): the
    checkpoint is rewritten at once, so that records appended afterwards — never committed — are
    not taken for committed by the next restart (HW = min(stale checkpoint, new LEO)). Seed 23897 of
    the broker simulation: a replica that lost its log came back with HW 6 over uncommitted records."""
    directory = written(open_log)  # HW 30 checkpointed
    for path in directory.iterdir():  # the power loss: only the (fsynced) HW checkpoint survived
        if path.name != HIGH_WATERMARK_FILE:
            path.unlink()
    log = open_log(CONFIG, directory)
    assert (log.log_end_offset, log.high_watermark) == (0, 0)
    log.append_as_leader(make_batch(3, timestamp=2_000), 2)
    log.append_as_leader(make_batch(3, timestamp=2_001), 2)
    log.update_high_watermark(3)
    for segment in log._segments:  # the process dies before the next checkpoint
        segment.close()
    log = open_log(CONFIG, directory)
    assert log.log_end_offset == 6
    assert log.high_watermark <= 3, f"HW {log.high_watermark} covers records never committed"


def test_hw_checkpoint_never_exceeds_the_hw_after_a_truncation_below_it(open_log) -> None:
    """A follower truncated below its HW (its new leader lacked that history: unclean or amnesic) and
    appended the new leader's records: a crash before the next checkpoint must not bring the old HW
    back over records the new leader had not committed."""
    log = open_log(CONFIG, written(open_log))  # offsets 0-29, HW 30 checkpointed
    directory = log.directory
    assert log.high_watermark == 30
    log.truncate_to(3)
    assert log.high_watermark == 3
    for i in range(3):
        log.append_as_follower(make_batch(3, timestamp=3_000 + i, base_offset=3 + 3 * i))
    for segment in log._segments:  # the process dies before the next checkpoint
        segment.close()
    log = open_log(CONFIG, directory)
    assert log.log_end_offset == 12
    assert log.high_watermark <= 3, f"HW {log.high_watermark} covers records never committed"
