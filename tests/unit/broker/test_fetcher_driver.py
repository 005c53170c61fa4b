"""FetcherManager bookkeeping (broker.follower.fetcher_driver): one driver per leader, moved partitions, and a
partition the fetcher dropped by itself (FENCED_LEADER_EPOCH) removed later without error."""

from __future__ import annotations

import asyncio

from broker.follower.fetcher import FetcherConfig
from broker.follower.fetcher_driver import FetcherManager

A, B = ("t", 0), ("t", 1)


def manager() -> FetcherManager:
    fm = FetcherManager(102, FetcherConfig(fetch_backoff_ms=10), lambda _leader: None, lambda _t: "id", 1000)
    fm.manager = object()  # type: ignore[assignment]  # never reached: no leader address, no fetch
    return fm


def test_one_driver_per_leader_and_moves() -> None:
    async def scenario() -> None:
        fm = manager()
        fm.add_partition(101, A, 0, None, 0)
        fm.add_partition(101, B, 0, None, 0)
        assert set(fm.drivers) == {101} and set(fm.drivers[101].fetcher.partitions()) == {A, B}
        fm.add_partition(103, A, 5, 0, 1)  # a new leader for A
        assert set(fm.drivers) == {101, 103} and fm.followed() == {A: 103, B: 101}
        fm.remove_partition(B)  # the last partition on 101: its driver stops
        assert set(fm.drivers) == {103}
        await fm.stop()
        assert fm.drivers == {} and fm.followed() == {}

    asyncio.run(scenario())


def test_partition_dropped_by_the_fetcher_is_removed_without_error() -> None:
    """Regression: FENCED_LEADER_EPOCH makes the fetcher drop a partition; its driver may stop when the
    other partitions leave, and removing the dropped one afterwards must not fail."""

    async def scenario() -> None:
        fm = manager()
        fm.add_partition(101, A, 0, None, 0)
        fm.add_partition(101, B, 0, None, 0)
        fm.drivers[101].fetcher.remove_partition(A)  # what handle_response does on Fenced
        fm.remove_partition(B)
        assert fm.drivers == {}
        fm.remove_partition(A)
        fm.add_partition(101, A, 0, None, 1)
        assert fm.followed() == {A: 101}
        await fm.stop()

    asyncio.run(scenario())
