"""The leader-epoch cache (storage/epoch_cache.py): Kafka's LeaderEpochFileCache rules, KIP-101."""

from __future__ import annotations

from pathlib import Path

import pytest

from proto import errors
from storage.epoch_cache import FILE_NAME, UNDEFINED, EpochEndOffset, EpochEntry, LeaderEpochCache


def cache_with(tmp_path: Path, entries: list[tuple[int, int]]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path)
    for epoch, start_offset in entries:
        cache.assign(epoch, start_offset)
    return cache


def as_pairs(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries]


ASSIGNS = [
    # existing entries, assign(epoch, offset) -> changed, entries after
    pytest.param([], (0, 0), True, [(0, 0)], id="first"),
    pytest.param([(1, 0)], (2, 10), True, [(1, 0), (2, 10)], id="newer-epoch"),
    pytest.param([(1, 0)], (1, 10), False, [(1, 0)], id="same-epoch-later-offset"),
    pytest.param([(1, 0), (3, 10)], (2, 20), False, [(1, 0), (3, 10)], id="older-epoch-ignored"),
    pytest.param([(1, 0), (2, 10)], (4, 10), True, [(1, 0), (4, 10)], id="empty-epoch-replaced"),
    pytest.param([(1, 0), (2, 10)], (4, 5), True, [(1, 0), (4, 5)], id="earlier-offset-replaces-later"),
]


@pytest.mark.parametrize(("existing", "assign", "changed", "after"), ASSIGNS)
def test_assign(tmp_path: Path, existing, assign, changed, after) -> None:
    """Epochs only rise; an epoch in which nothing was written is replaced by the next one."""
    cache = cache_with(tmp_path, existing)
    assert cache.assign(*assign) is changed
    assert as_pairs(cache) == after
    assert as_pairs(LeaderEpochCache(tmp_path)) == after, "every change is on disk"


TRUNCATE_FROM_END = [
    pytest.param(25, [(1, 0), (2, 10), (4, 20)], id="past-everything"),
    pytest.param(20, [(1, 0), (2, 10)], id="at-an-epoch-start"),
    pytest.param(15, [(1, 0), (2, 10)], id="inside-an-epoch"),
    pytest.param(0, [], id="everything"),
]


@pytest.mark.parametrize(("end_offset", "after"), TRUNCATE_FROM_END)
def test_truncate_from_end(tmp_path: Path, end_offset: int, after) -> None:
    """Log truncated at end_offset: epochs starting at or after it are forgotten."""
    cache = cache_with(tmp_path, [(1, 0), (2, 10), (4, 20)])
    cache.truncate_from_end(end_offset)
    assert as_pairs(cache) == after
    assert as_pairs(LeaderEpochCache(tmp_path)) == after


TRUNCATE_FROM_START = [
    pytest.param(0, [(1, 0), (2, 10), (4, 20)], id="at-start"),
    pytest.param(5, [(1, 5), (2, 10), (4, 20)], id="inside-first"),
    pytest.param(10, [(2, 10), (4, 20)], id="at-second"),
    pytest.param(25, [(4, 25)], id="inside-last"),
]


@pytest.mark.parametrize(("start_offset", "after"), TRUNCATE_FROM_START)
def test_truncate_from_start(tmp_path: Path, start_offset: int, after) -> None:
    """Log start moved: entries wholly below it go, the covering epoch now starts at the log start."""
    cache = cache_with(tmp_path, [(1, 0), (2, 10), (4, 20)])
    cache.truncate_from_start(start_offset)
    assert as_pairs(cache) == after
    assert as_pairs(LeaderEpochCache(tmp_path)) == after


END_OFFSETS = [
    # requested epoch -> (epoch, end offset), with entries (1,0) (2,10) (4,20) and LEO 30
    pytest.param(4, EpochEndOffset(4, 30), id="latest-ends-at-leo"),
    pytest.param(2, EpochEndOffset(2, 20), id="known-ends-at-next-start"),
    pytest.param(3, EpochEndOffset(2, 20), id="unknown-between-gives-floor"),
    pytest.param(1, EpochEndOffset(1, 10), id="first"),
    pytest.param(0, EpochEndOffset(0, 0), id="below-every-epoch"),
    pytest.param(5, UNDEFINED, id="above-latest"),
    pytest.param(-1, UNDEFINED, id="undefined-requested"),
]


@pytest.mark.parametrize(("requested", "expected"), END_OFFSETS)
def test_end_offset_for(tmp_path: Path, requested: int, expected: EpochEndOffset) -> None:
    """OffsetsForLeaderEpoch (Kafka endOffsetFor): largest epoch <= requested, ends where the next starts."""
    cache = cache_with(tmp_path, [(1, 0), (2, 10), (4, 20)])
    assert cache.end_offset_for(requested, log_end_offset=30) == expected


def test_end_offset_for_empty_cache(tmp_path: Path) -> None:
    assert LeaderEpochCache(tmp_path).end_offset_for(3, 100).is_undefined


@pytest.mark.parametrize(("offset", "epoch"), [(0, 1), (9, 1), (10, 2), (25, 4), (-1, None)])
def test_epoch_for_offset(tmp_path: Path, offset: int, epoch) -> None:
    assert cache_with(tmp_path, [(1, 0), (2, 10), (4, 20)]).epoch_for_offset(offset) == epoch


def test_file_is_kafkas_text_format(tmp_path: Path) -> None:
    """leader-epoch-checkpoint: version 0, the count, one "<epoch> <start offset>" line per entry."""
    cache_with(tmp_path, [(1, 0), (4, 20)])
    assert (tmp_path / FILE_NAME).read_text() == "0\n2\n1 0\n4 20\n"
    cache = LeaderEpochCache(tmp_path)
    cache.clear()
    assert (tmp_path / FILE_NAME).read_text() == "0\n0\n"
    assert cache.entries == ()
    assert EpochEntry(1, 0) == EpochEntry(1, 0)


@pytest.mark.parametrize(
    "content",
    [b"0\n1\n1\n", b"0\n2\n1 0\n1 5\n", b"0\n1\n-3 0\n", b"0\n1\n1 x\n", b"\xff\xfe"],
    ids=["one-field", "same-epoch-twice", "negative", "not-int", "not-utf8"],
)
def test_corrupt_file_is_a_storage_error(tmp_path: Path, content: bytes) -> None:
    (tmp_path / FILE_NAME).write_bytes(content)
    with pytest.raises(errors.KafkaStorageError, match=FILE_NAME):
        LeaderEpochCache(tmp_path)
