"""Replica placement for new partitions: spread replicas and leaders evenly, across racks.

Kafka's striped assignment (``StripedReplicaPlacer`` / ``AdminUtils.assignReplicasToBrokers``):

1. order the usable brokers so that racks alternate (``r1:b1, r2:b3, r3:b5, r1:b2, ...``); with no
   racks this is simply the brokers in id order;
2. partition ``p``'s first replica (its preferred leader) is broker ``(start + p) mod n`` of that
   list, so leaders go round-robin; ``start`` is random per topic (from the injected ``rng``) so
   that many small topics do not all lead on the first broker;
3. the followers walk the list from the leader with a *shift* that grows every ``n`` partitions,
   so that the followers of one broker's partitions do not all land on the same next broker;
4. while some rack holds none of the partition's replicas, a follower comes from a rack not yet
   used (so a partition spans ``min(rf, racks)`` racks).

Pure: the same brokers, counts and rng state give the same assignment.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PlacementBroker:
    broker_id: int
    rack: str  # "" = no rack


def rack_alternated(brokers: Sequence[PlacementBroker]) -> list[PlacementBroker]:
    """Brokers ordered so that consecutive ones sit in different racks when possible."""
    by_rack: dict[str, list[PlacementBroker]] = {}
    for b in sorted(brokers, key=lambda b: b.broker_id):
        by_rack.setdefault(b.rack, []).append(b)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    out: list[PlacementBroker] = []
    for i in range(max((len(q) for q in queues), default=0)):
        out.extend(q[i] for q in queues if i < len(q))
    return out


def place_partitions(
    brokers: Sequence[PlacementBroker],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random,
    first_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists (preferred leader first) for ``num_partitions`` partitions.

    The caller has checked ``1 <= replication_factor <= len(brokers)``.
    """
    n = len(brokers)
    assert 1 <= replication_factor <= n, f"replication factor {replication_factor} with {n} brokers"
    ordered = rack_alternated(brokers)
    racks_total = len({b.rack for b in ordered})
    start = rng.randrange(n)
    start_shift = rng.randrange(n - 1) if n > 1 else 0
    out = []
    for p in range(first_partition, first_partition + num_partitions):
        leader_index = (start + p) % n
        shift = (start_shift + p // n) % (n - 1) if n > 1 else 0
        walk = [ordered[(leader_index + 1 + (shift + i) % (n - 1)) % n] for i in range(n - 1)]
        out.append(_pick(ordered[leader_index], walk, replication_factor, racks_total))
    return out


def _pick(leader: PlacementBroker, walk: list[PlacementBroker], rf: int, racks_total: int) -> tuple[int, ...]:
    chosen = [leader]
    racks = {leader.rack}
    rest = list(walk)
    while len(chosen) < rf:
        fresh = next((b for b in rest if b.rack not in racks), None) if len(racks) < racks_total else None
        pick = fresh if fresh is not None else rest[0]
        rest.remove(pick)
        chosen.append(pick)
        racks.add(pick.rack)
    return tuple(b.broker_id for b in chosen)
