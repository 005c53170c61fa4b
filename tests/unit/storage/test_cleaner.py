"""Log compaction (storage.compaction, storage.cleaner, Log.plan_cleaning / finish_cleaning).

Kafka's LogCleaner rules: the last record per key survives below the HW, outside the active segment;
offsets never change; tombstones go after delete.retention.ms (KIP-534 delete horizon); a swap is
crash-safe (.cleaned -> .swap -> live names); a compacted topic refuses records without a key.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_log_helpers import FakeClock

from proto import errors
from storage import cleaner, compaction
from storage.batch_header import DELETE_HORIZON_MASK
from storage.checkpoint import CheckpointFile
from storage.compression import CompressionType
from storage.config import LogConfig
from storage.log import Log
from storage.record_batch import build_batch, iter_batches

COMPACT = {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": 0.0, "retention_ms": None}
KEYS = [b"k%d" % i for i in range(5)]
LEFTOVERS = (cleaner.CLEANED_SUFFIX, cleaner.DELETED_SUFFIX, cleaner.COMMIT_FILE, cleaner.STAGED_COMMIT_FILE)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_log(tmp_path: Path, clock: FakeClock):
    logs: list[Log] = []

    def factory(**settings) -> Log:
        log = Log(tmp_path / "topic-0", LogConfig(**{**COMPACT, **settings}), clock)
        logs.append(log)
        return log

    yield factory
    for log in logs:
        for segment in [*log._segments, *log._retired]:
            segment.close()


def keyed(pairs, codec=CompressionType.NONE, producer=(-1, -1, -1), timestamp=1_000) -> bytes:
    pid, epoch, sequence = producer
    records = [(key, value, (), timestamp + i) for i, (key, value) in enumerate(pairs)]
    return build_batch(
        records, compression=codec, producer_id=pid, producer_epoch=epoch, base_sequence=sequence
    )


def value(round_: int, key: bytes) -> bytes:
    return b"%s=%d;" % (key, round_) * 8  # compressible: every codec really compresses


def fill(
    log: Log, rounds: int, codec=CompressionType.NONE, roll_every: int = 1
) -> dict[bytes, tuple[int, bytes]]:
    """``rounds`` batches, each writing every key once; a roll after every ``roll_every`` batches.
    Returns the model: key -> (offset, value) of its last record."""
    model = {}
    for round_ in range(rounds):
        info = log.append_as_leader(keyed([(k, value(round_, k)) for k in KEYS], codec), 0)
        for i, key in enumerate(KEYS):
            model[key] = (info.first_offset + i, value(round_, key))
        if (round_ + 1) % roll_every == 0:
            log.roll()
    log.update_high_watermark(log.log_end_offset)
    return model


def records_of(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every record from the log start to the LEO, as a consumer reads it (next fetch = batch end)."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        if not data:
            break
        for batch in iter_batches(data):
            out += [(r.offset, r.key, r.value) for r in batch.records if r.offset >= offset]
            offset = batch.header.next_offset
    return out


def run_cleaner(log: Log) -> cleaner.CleaningResult | None:
    plan = log.plan_cleaning()
    if plan is None:
        return None
    result = cleaner.clean(plan)
    assert log.finish_cleaning(result)
    cleaner.finalize(log.directory, log.first_dirty_offset)
    log.invariants()
    assert not [p.name for p in log.directory.iterdir() if p.name.endswith(LEFTOVERS)]
    return result


def segment_bytes(log: Log) -> dict[int, bytes]:
    return {s.base_offset: s.read(0, s.size_bytes) for s in log._segments}


@pytest.mark.parametrize("codec", list(CompressionType), ids=[c.name.lower() for c in CompressionType])
def test_last_value_per_key_offsets_unchanged(open_log, codec) -> None:
    """The last record per key survives with its own offset and value; the codec is kept; the active
    segment (here round 5, not rolled) keeps its duplicates."""
    log = open_log()
    model = fill(log, rounds=5, codec=codec)
    active = log.append_as_leader(keyed([(k, b"active") for k in KEYS], codec), 0)
    log.update_high_watermark(log.log_end_offset)
    leo, size_before = log.log_end_offset, log.size_bytes
    result = run_cleaner(log)
    assert result is not None and result.records_removed == 4 * len(KEYS)
    expected = sorted((offset, key, val) for key, (offset, val) in model.items())
    expected += [(active.first_offset + i, key, b"active") for i, key in enumerate(KEYS)]
    assert records_of(log) == expected
    assert log.log_end_offset == leo and log.size_bytes < size_before
    for segment in log._segments:
        for batch in iter_batches(segment.read(0, segment.size_bytes)):
            assert batch.header.compression_type == codec


def test_active_segment_and_offsets_at_or_above_the_bound_are_untouched(open_log) -> None:
    """Only whole inactive segments ending at or below the HW are cleaned (Kafka's cleanable range)."""
    log = open_log()
    fill(log, rounds=6)
    log.append_as_leader(keyed([(k, b"active") for k in KEYS]), 0)
    log.update_high_watermark(log._bases[4] + 2)  # inside segment 4: segments 4, 5 and the active stay
    before = segment_bytes(log)
    run_cleaner(log)
    after = segment_bytes(log)
    kept = [base for base in before if base >= log._bases[-3]]
    assert kept == list(log._bases[-3:])
    for base in kept:
        assert after[base] == before[base], f"segment {base} changed"
    # Below the bound, only the last record per key among segments 0-3 is left.
    assert [key for _, key, _ in records_of(log)][: len(KEYS)] == KEYS
    assert log.first_dirty_offset == log._bases[-3]


def test_nothing_below_the_hw_means_no_plan(open_log) -> None:
    log = open_log()
    fill(log, rounds=3)
    log.update_high_watermark(0)
    assert log.plan_cleaning() is None


def test_tombstones_stay_until_delete_retention_ms_then_go(open_log, clock) -> None:
    """KIP-534: the first pass stamps a delete horizon (now + delete.retention.ms) on the batch; a pass
    after the horizon removes the tombstone; before it, readers from the start still see the delete."""
    log = open_log(delete_retention_ms=1_000)
    fill(log, rounds=2)
    log.append_as_leader(keyed([(KEYS[0], None)]), 0)
    log.roll()
    log.append_as_leader(keyed([(KEYS[1], b"later")]), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    run_cleaner(log)
    remaining = records_of(log)
    assert (10, KEYS[0], None) in remaining and all(
        key != KEYS[0] or val is None for _, key, val in remaining
    )
    batches = [b for segment in log._segments for b in iter_batches(segment.read(0, segment.size_bytes))]
    stamped = [b for b in batches if b.header.base_offset == 10]
    assert stamped[0].header.attributes & DELETE_HORIZON_MASK
    assert stamped[0].header.base_timestamp == clock.now_ms + 1_000
    clock.now_ms += 999
    assert log.plan_cleaning() is None  # nothing dirty, horizon not reached
    clock.now_ms += 1
    run_cleaner(log)
    assert all(key != KEYS[0] for _, key, _ in records_of(log))
    assert log.plan_cleaning() is None


def test_min_cleanable_dirty_ratio(open_log) -> None:
    """A log is cleaned only when dirty bytes / cleanable bytes reach min.cleanable.dirty.ratio."""
    log = open_log(min_cleanable_dirty_ratio=0.6)
    fill(log, rounds=4)
    run_cleaner(log)  # all dirty: ratio 1.0; one batch of 5 records is left
    clean_end = log.first_dirty_offset
    fill(log, rounds=1)  # dirty 1/2 < 0.6
    assert log.plan_cleaning() is None
    fill(log, rounds=1)  # dirty 2/3 >= 0.6
    assert run_cleaner(log) is not None
    assert log.first_dirty_offset == clean_end + 10


def test_min_compaction_lag_ms(open_log, clock) -> None:
    """Segments whose newest record is younger than min.compaction.lag.ms are not cleaned yet."""
    log = open_log(min_compaction_lag_ms=10_000)
    clock.now_ms = 1_000 + 5_000  # records carry timestamps ~1_000
    fill(log, rounds=3)
    assert log.plan_cleaning() is None
    clock.now_ms = 1_000 + 10_010
    assert run_cleaner(log) is not None


def test_keyless_records_are_refused_in_a_compacted_topic(open_log) -> None:
    log = open_log()
    with pytest.raises(errors.InvalidRecordError, match=r"has no key.*cleanup\.policy=delete"):
        log.append_as_leader(keyed([(b"a", b"1"), (None, b"2")]), 0)
    assert log.log_end_offset == 0


def test_keyless_records_are_fine_without_compaction(open_log) -> None:
    log = open_log(cleanup_policy="delete")
    log.append_as_leader(keyed([(None, b"1")]), 0)
    assert log.log_end_offset == 1
    assert log.plan_cleaning() is None


def test_producer_last_batch_kept_empty(open_log) -> None:
    """An idempotent producer's last batch stays (empty) with its base sequence and last offset, so
    producer-state recovery still finds the producer's last sequence (Kafka's RETAIN_EMPTY)."""
    log = open_log()
    log.append_as_leader(keyed([(k, b"p7") for k in KEYS], producer=(7, 0, 0)), 0)
    log.append_as_leader(keyed([(k, b"p7b") for k in KEYS], producer=(7, 0, 5)), 0)
    log.roll()
    log.append_as_leader(keyed([(k, b"p8") for k in KEYS], producer=(8, 0, 0)), 0)
    log.roll()
    log.append_as_leader(keyed([(b"x", b"1")]), 0)
    log.update_high_watermark(log.log_end_offset)
    run_cleaner(log)
    headers = [b.header for s in log._segments for b in iter_batches(s.read(0, s.size_bytes))]
    p7 = [h for h in headers if h.producer_id == 7]
    assert [(h.base_offset, h.last_offset, h.base_sequence, h.records_count) for h in p7] == [(5, 9, 5, 0)]
    assert [r[2] for r in records_of(log)] == [b"p8"] * 5 + [b"1"]


def test_follower_replicates_a_compacted_leader(open_log, tmp_path, clock) -> None:
    """A follower fetching from a compacted leader gets gaps and batches with fewer records than
    offsets; it keeps the leader's offsets (Kafka checks only for overlap)."""
    leader = open_log()
    fill(leader, rounds=4)
    run_cleaner(leader)
    follower = Log(tmp_path / "follower-0", LogConfig(**COMPACT), clock)
    try:
        offset = 0
        while offset < leader.log_end_offset:
            data = leader.read(offset, 200)
            follower.append_as_follower(data)
            offset = follower.log_end_offset
        follower.update_high_watermark(follower.log_end_offset)
        assert records_of(follower) == records_of(leader)
        assert follower.log_end_offset == leader.log_end_offset
    finally:
        follower.close()


def test_compact_only_topic_is_never_trimmed_by_retention(open_log, clock) -> None:
    log = open_log(retention_ms=10, retention_bytes=1)
    fill(log, rounds=3)
    clock.now_ms += 1_000_000
    assert log.delete_old_segments() == 0
    log.config = LogConfig(**{**COMPACT, "cleanup_policy": "compact,delete", "retention_ms": 10})
    assert log.delete_old_segments() == 3


def test_a_pass_whose_segments_changed_is_discarded(open_log, tmp_path) -> None:
    """Truncation while the thread cleaned: the swap does not happen and no cleaned file is left."""
    log = open_log()
    fill(log, rounds=4)
    before = records_of(log)
    plan = log.plan_cleaning()
    assert plan is not None
    result = cleaner.clean(plan)
    log.truncate_to(log._bases[2])
    assert not log.finish_cleaning(result)
    assert not [p for p in (tmp_path / "topic-0").iterdir() if p.name.endswith(cleaner.CLEANED_SUFFIX)]
    assert records_of(log) == before[: len(records_of(log))]
    assert run_cleaner(log) is not None  # the next pass is allowed


def test_readers_of_a_replaced_segment_keep_reading_old_bytes(open_log) -> None:
    """The swap unlinks the old files but keeps their descriptors open until the next pass: a reader
    holding the old segment (and a file position in it) still reads what it located."""
    log = open_log()
    fill(log, rounds=3)
    old = log._segments[0]
    old_bytes = old.read(0, old.size_bytes)
    run_cleaner(log)
    assert log._segments[0] is not old and log._segments[0].base_offset == old.base_offset
    assert not old.log_path.exists()  # unlinked by cleaner.finalize, still open
    assert old.read(0, old.size_bytes) == old_bytes
    assert log._segments[0].read(0, log._segments[0].size_bytes) != old_bytes


# ------------------------------------------------------------------------------ crash-safe swaps


def _crash(log: Log) -> None:
    """Close the files without a clean shutdown (no marker, no checkpoints): a crash."""
    for segment in [*log._segments, *log._retired]:
        segment.close()
    log._closed = True


def _interrupted_pass(log: Log, stop_after: str) -> cleaner.CleaningResult:
    """Run a pass and stop it at ``stop_after``, leaving the files as a crash there would."""
    plan = log.plan_cleaning()
    assert plan is not None
    result = cleaner.clean(plan)
    if stop_after == "cleaned":
        return result
    groups = [group for group in result.groups if group.cleaned is not None]
    ranges = [(g.originals[0].info.base_offset, g.originals[-1].info.next_offset) for g in groups]
    CheckpointFile(log.directory / cleaner.COMMIT_FILE, width=2).write(ranges)  # the commit point
    if stop_after == "marker":
        return result
    group = groups[0]
    assert group.cleaned is not None
    if stop_after == "index-renamed":  # the new index is live, the log still .cleaned
        group.cleaned.offset_index.path.rename(group.originals[0].segment.offset_index.path)
    elif stop_after == "log-renamed-others-not":  # reordered on disk: new log live, old files live
        group.cleaned.log_path.rename(group.originals[0].segment.log_path)
    elif stop_after == "all-renamed":
        for group in groups:
            for planned in group.originals:
                planned.segment.change_file_suffix(cleaner.DELETED_SUFFIX)
            group.cleaned.change_file_suffix("")
    return result


@pytest.mark.parametrize(
    "stop_after", ["cleaned", "marker", "index-renamed", "log-renamed-others-not", "all-renamed"]
)
def test_interrupted_swap_recovery(open_log, tmp_path, stop_after) -> None:
    """A crash before the commit marker leaves the old segments; after it, recovery finishes the swap
    from whatever subset of the renames reached the disk. Either way the log reads as one of the two
    consistent states, with fresh indexes and no leftovers."""
    log = open_log(segment_bytes=1_500)  # several groups of a few segments each
    model = fill(log, rounds=8)
    before = records_of(log)
    leo = log.log_end_offset
    result = _interrupted_pass(log, stop_after)
    assert len(result.groups) > 1
    _crash(log)
    for group in result.groups:
        if group.cleaned is not None:
            group.cleaned.close()
    reopened = open_log(segment_bytes=1_500)
    names = [p.name for p in (tmp_path / "topic-0").iterdir()]
    assert not [n for n in names if n.endswith(LEFTOVERS)], names
    assert reopened.log_end_offset == leo
    reopened.update_high_watermark(leo)
    if stop_after == "cleaned":
        assert records_of(reopened) == before
    else:
        assert records_of(reopened) == sorted((o, k, v) for k, (o, v) in model.items())
    reopened.invariants()


def test_appends_rolls_and_reads_go_on_while_a_pass_runs(open_log) -> None:
    """The pass holds no lock: the log appends, rolls and reads between plan and swap, and the swap
    still applies (the planned segments are still the log's first ones)."""
    log = open_log()
    fill(log, rounds=3)
    plan = log.plan_cleaning()
    assert plan is not None
    new = log.append_as_leader(keyed([(KEYS[0], b"during")]), 0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    during = records_of(log)
    result = cleaner.clean(plan)
    assert records_of(log) == during  # the thread changed nothing the log serves
    assert log.finish_cleaning(result)
    after = records_of(log)
    assert after[-1] == (new.first_offset, KEYS[0], b"during")
    assert len(after) == len(KEYS) + 1
    assert log.plan_cleaning() is not None  # the segment rolled during the pass is dirty


SEGMENTS = [compaction.SegmentInfo(base, base + 10, 100, 1_000 + base) for base in range(0, 50, 10)]


@pytest.mark.parametrize(
    ("upper_bound", "now_ms", "lag_ms", "expected"),
    [
        pytest.param(50, 10_000, 0, 5, id="all-below-the-bound"),
        pytest.param(35, 10_000, 0, 3, id="bound-inside-a-segment"),
        pytest.param(0, 10_000, 0, 0, id="nothing-committed"),
        pytest.param(50, 1_025, 5, 3, id="min-compaction-lag"),
    ],
)
def test_cleanable_count(upper_bound, now_ms, lag_ms, expected) -> None:
    assert compaction.cleanable_count(SEGMENTS, upper_bound, now_ms, lag_ms) == expected


@pytest.mark.parametrize(
    ("first_dirty", "ratio", "dirty"),
    [(0, 1.0, 500), (20, 0.6, 300), (50, 0.0, 0), (25, 0.6, 300)],
    ids=["all-dirty", "two-clean", "all-clean", "checkpoint-inside-a-segment"],
)
def test_dirty_ratio(first_dirty, ratio, dirty) -> None:
    assert compaction.dirty_ratio(SEGMENTS, first_dirty) == (pytest.approx(ratio), dirty)


@pytest.mark.parametrize(
    ("max_bytes", "max_span", "groups"),
    [
        (1_000, 1_000, [range(5)]),
        (250, 1_000, [range(2), range(2, 4), range(4, 5)]),
        (50, 1_000, [range(i, i + 1) for i in range(5)]),  # a segment larger than the limit: alone
        (1_000, 19, [range(2), range(2, 4), range(4, 5)]),
    ],
    ids=["one-group", "by-size", "oversized", "by-offset-span"],
)
def test_group_segments(max_bytes, max_span, groups) -> None:
    assert compaction.group_segments(SEGMENTS, max_bytes, max_span) == groups
