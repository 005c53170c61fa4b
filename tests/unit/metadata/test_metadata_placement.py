"""Replica placement: distinct replicas, leaders spread evenly, racks spanned, deterministic per seed."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from metadata.placement import PlacementBroker, place_partitions, rack_alternated


def brokers(n: int, racks: int = 0) -> list[PlacementBroker]:
    return [PlacementBroker(i, f"r{i % racks}" if racks else "") for i in range(1, n + 1)]


@pytest.mark.parametrize(
    ("n", "partitions", "rf"),
    [(3, 3, 3), (3, 30, 2), (5, 50, 3), (6, 12, 1), (1, 4, 1)],
    ids=["3b-3p-rf3", "3b-30p-rf2", "5b-50p-rf3", "6b-12p-rf1", "1b"],
)
def test_replicas_distinct_and_leaders_even(n: int, partitions: int, rf: int) -> None:
    """Kafka's striped placement: leaders round-robin (counts differ by at most 1), replicas distinct."""
    lists = place_partitions(brokers(n), partitions, rf, random.Random(1))
    assert len(lists) == partitions
    assert all(len(r) == rf and len(set(r)) == rf for r in lists)
    leaders = Counter(r[0] for r in lists)
    assert max(leaders.values()) - min(leaders.get(b.broker_id, 0) for b in brokers(n)) <= 1
    replicas = Counter(b for r in lists for b in r)
    assert max(replicas.values()) - min(replicas.values()) <= max(1, rf)


@pytest.mark.parametrize(("n", "racks", "rf"), [(6, 3, 3), (6, 3, 2), (4, 2, 3), (6, 2, 2)], ids=str)
def test_rack_aware(n: int, racks: int, rf: int) -> None:
    """With racks declared, each partition spans min(rf, racks) racks."""
    bs = brokers(n, racks)
    rack_of = {b.broker_id: b.rack for b in bs}
    for replicas in place_partitions(bs, 24, rf, random.Random(3)):
        assert len({rack_of[r] for r in replicas}) == min(rf, racks), replicas


def test_rack_alternated_order() -> None:
    """Consecutive brokers of the ordered list sit in different racks."""
    order = [b.broker_id for b in rack_alternated(brokers(6, 3))]
    assert order == [3, 1, 2, 6, 4, 5]


def test_deterministic_per_seed() -> None:
    """The same seed gives the same placement (controllers are replayable)."""
    assert place_partitions(brokers(5), 10, 3, random.Random(9)) == place_partitions(
        brokers(5), 10, 3, random.Random(9)
    )
