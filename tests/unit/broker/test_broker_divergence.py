"""Leader-epoch arithmetic (broker/replica/divergence.py): KIP-101, KIP-279, KIP-595 as Kafka implements
them."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.replica import divergence as d
from broker.replica.divergence import UNDEFINED, EpochEndOffset, EpochEntry, TruncationState
from storage.epoch_cache import LeaderEpochCache


def cache(*pairs: tuple[int, int]) -> tuple[EpochEntry, ...]:
    return tuple(EpochEntry(epoch, start) for epoch, start in pairs)


# Leader cache: epoch 1 at 0, epoch 3 at 5, epoch 4 at 9; LEO 12.
LEADER = cache((1, 0), (3, 5), (4, 9))


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (4, EpochEndOffset(4, 12)),  # the latest epoch ends at the LEO
        (3, EpochEndOffset(3, 9)),  # a known epoch ends where the next starts
        (1, EpochEndOffset(1, 5)),
        (2, EpochEndOffset(1, 5)),  # never written: the largest epoch below, ending where 3 starts
        (0, EpochEndOffset(0, 0)),  # older than any: the first start offset, named as requested
        (5, UNDEFINED),  # newer than any
        (d.UNDEFINED_EPOCH, UNDEFINED),
    ],
    ids=["latest", "known", "first", "gap", "older-than-all", "newer-than-all", "undefined"],
)
def test_end_offset_for_epoch(requested: int, expected: EpochEndOffset) -> None:
    """Kafka's LeaderEpochFileCache.endOffsetFor (KIP-279: the answer names the epoch it describes)."""
    assert d.end_offset_for_epoch(LEADER, requested, 12) == expected


def test_end_offset_for_epoch_empty_cache() -> None:
    assert d.end_offset_for_epoch((), 3, 7) == UNDEFINED


@pytest.mark.parametrize(
    ("fetch_offset", "last_fetched_epoch", "expected"),
    [
        (12, 4, None),  # caught up in the latest epoch
        (10, 4, None),
        (9, 3, None),  # exactly at the end of epoch 3: no divergence, continue with epoch 4
        (7, 3, None),
        (11, 3, EpochEndOffset(3, 9)),  # wrote past where the leader ended epoch 3
        (7, 2, EpochEndOffset(1, 5)),  # the leader never had epoch 2
        (0, None, None),  # an empty follower log carries no epoch
        (3, 0, EpochEndOffset(0, 0)),  # epoch 0 is older than the leader's first epoch, which starts at 0
    ],
    ids=[
        "latest",
        "inside-latest",
        "epoch-end",
        "inside-epoch",
        "past-epoch-end",
        "unknown-epoch",
        "empty",
        "old",
    ],
)
def test_diverging_epoch(
    fetch_offset: int, last_fetched_epoch: int | None, expected: EpochEndOffset | None
) -> None:
    """KIP-595: the leader answers a diverging epoch when its end of last_fetched_epoch is smaller."""
    assert d.diverging_epoch(LEADER, 12, fetch_offset, last_fetched_epoch) == expected


@pytest.mark.parametrize(
    ("follower", "leo", "hw", "leader_end", "expected"),
    [
        # KIP-101 scenario 2: follower wrote offset 1 in epoch 1; the leader ended epoch 1 at 1.
        (cache((1, 0)), 2, 1, EpochEndOffset(1, 1), TruncationState(1, True)),
        # Follower knows the epoch and ended it later than the leader: truncate to the leader's end.
        (cache((1, 0), (2, 4)), 7, 3, EpochEndOffset(1, 5), TruncationState(4, True)),
        # Follower ended the epoch earlier than the leader: its own end (nothing of that epoch lost).
        (cache((1, 0), (2, 3)), 6, 2, EpochEndOffset(1, 5), TruncationState(3, True)),
        # The leader names epoch 3, which the follower never saw: step back to the end of epoch 2.
        (cache((1, 0), (2, 4), (5, 8)), 10, 4, EpochEndOffset(3, 9), TruncationState(8, False)),
        # The leader's epoch is older than all the follower has: truncate to its first start.
        (cache((2, 0)), 3, 0, EpochEndOffset(1, 5), TruncationState(0, True)),
        # Empty follower cache: only the leader's end is known.
        ((), 6, 0, EpochEndOffset(1, 4), TruncationState(4, True)),
        # Never above the follower's own LEO.
        (cache((1, 0)), 3, 1, EpochEndOffset(1, 8), TruncationState(3, True)),
        # A leader that knows no such epoch: Kafka's legacy fallback to the HW.
        (cache((1, 0)), 5, 2, UNDEFINED, TruncationState(2, True)),
    ],
    ids=[
        "kip101-diverged",
        "leader-ended-first",
        "follower-ended-first",
        "unknown-epoch-step",
        "older-than-follower",
        "empty-follower",
        "capped-at-leo",
        "undefined-fallback",
    ],
)
def test_follower_truncation(
    follower: tuple[EpochEntry, ...], leo: int, hw: int, leader_end: EpochEndOffset, expected: TruncationState
) -> None:
    """A follower truncates by leader epoch (KIP-101), never to its HW while the leader knows the epoch."""
    assert d.follower_truncation(follower, leo, hw, leader_end) == expected


@pytest.mark.parametrize(
    ("before", "epoch", "start", "after"),
    [
        ((), 1, 0, cache((1, 0))),
        (cache((1, 0)), 1, 5, cache((1, 0))),  # a repeat of the latest epoch changes nothing
        (cache((1, 0)), 2, 5, cache((1, 0), (2, 5))),
        (cache((1, 0), (2, 5)), 3, 5, cache((1, 0), (3, 5))),  # epoch 2 wrote nothing: replaced
        (cache((1, 0), (2, 5)), 3, 3, cache((1, 0), (3, 3))),  # a start below the latest drops it
        (cache((1, 0), (2, 5)), 1, 7, cache((1, 0), (2, 5))),  # epochs only rise: truncate first
    ],
    ids=["first", "repeat", "next", "same-start", "earlier-start", "older-epoch"],
)
def test_assign(
    before: tuple[EpochEntry, ...], epoch: int, start: int, after: tuple[EpochEntry, ...]
) -> None:
    """Kafka's assign: the cache stays strictly increasing in epoch and start offset."""
    result = d.assign(before, epoch, start)
    assert result == after
    d.check_entries(result)


@pytest.mark.parametrize(
    ("end_offset", "after"),
    [(12, LEADER), (9, cache((1, 0), (3, 5))), (6, cache((1, 0), (3, 5))), (5, cache((1, 0))), (0, ())],
    ids=["none", "at-epoch-start", "inside", "at-second-start", "all"],
)
def test_truncate_from_end(end_offset: int, after: tuple[EpochEntry, ...]) -> None:
    assert d.truncate_from_end(LEADER, end_offset) == after


@pytest.mark.parametrize(
    ("start_offset", "after"),
    [(0, LEADER), (3, cache((1, 3), (3, 5), (4, 9))), (5, cache((3, 5), (4, 9))), (10, cache((4, 10)))],
    ids=["none", "inside-first", "at-second", "inside-last"],
)
def test_truncate_from_start(start_offset: int, after: tuple[EpochEntry, ...]) -> None:
    assert d.truncate_from_start(LEADER, start_offset) == after


def test_check_entries_rejects_non_monotonic() -> None:
    with pytest.raises(AssertionError, match="epochs must increase"):
        d.check_entries(cache((2, 0), (1, 5)))
    with pytest.raises(AssertionError, match="start offsets must increase"):
        d.check_entries(cache((1, 5), (2, 5)))


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 8), st.integers(0, 40)),
        st.tuples(st.just("truncate_from_end"), st.integers(0, 40)),
        st.tuples(st.just("truncate_from_start"), st.integers(0, 40)),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(
    operations=OPERATIONS,
    requests=st.lists(st.integers(-1, 9), min_size=1, max_size=5),
    leo=st.integers(40, 50),
)
def test_pure_cache_rules_equal_the_storage_cache(
    operations: list[tuple], requests: list[int], leo: int
) -> None:
    """The simulator's pure cache (broker.replica.divergence) behaves exactly like storage's on-disk
    LeaderEpochCache: same entries after any history, same end_offset_for answers."""
    with tempfile.TemporaryDirectory() as tmp:
        disk = LeaderEpochCache(Path(tmp))
        pure: tuple[EpochEntry, ...] = ()
        for operation, *args in operations:
            getattr(disk, operation)(*args)
            pure = getattr(d, operation)(pure, *args)
            assert pure == disk.entries, (operation, args)
        for epoch in requests:
            assert d.end_offset_for_epoch(pure, epoch, leo) == disk.end_offset_for(epoch, leo), epoch
