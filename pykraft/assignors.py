"""Partition assignors: Kafka's ``range``, ``roundrobin`` and ``cooperative-sticky``, as pure functions.

The group leader runs one of them on the client (the coordinator never reads the consumer
protocol) over every member's ``Subscription`` and the partition count of each subscribed topic,
and sends each member its ``Assignment`` in SyncGroup.

- **range** (Kafka's ``RangeAssignor``): per topic, the members subscribed to it in member order
  share the partitions in contiguous ranges; the first ``n % m`` members get one extra.
- **roundrobin** (``RoundRobinAssignor``): every subscribed topic-partition, sorted by topic then
  partition, dealt out to the members in member order, skipping a member not subscribed to the
  partition's topic.
- **cooperative-sticky** (``CooperativeStickyAssignor``, KIP-429): *balanced* — no partition could
  move from a member A to a member B subscribed to its topic while ``|A| > |B| + 1`` — and *sticky* —
  a member keeps the partitions it owns up to its share. *Incremental*: a partition whose owner
  changes is only revoked in this generation (left out of every assignment); the old owner's
  assignment carries ``NEED_REJOIN`` so that it rejoins after revoking, and the new owner gets the
  partition in that follow-up rebalance.

Member order is Kafka's ``MemberInfo`` order: static members (with a ``group.instance.id``) first,
sorted by instance id, then dynamic members sorted by member id — so a restarted static member
takes the same place and gets the same partitions.

Ownership (``owned_partitions`` with the generation they were assigned in): a partition claimed by
members of different generations belongs to the newest; claimed twice in the same generation, to
nobody (both claims are dropped, as Kafka does). Owned partitions of topics a member no longer
subscribes to, or that no longer exist, are not kept.

Pure: no I/O, no clock, deterministic for a given input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pykraft.types import TopicPartition

NO_GENERATION = -1
ASSIGNMENT_ERROR_NONE = 0
NEED_REJOIN = 1  # Kafka's AssignmentError.NEED_REJOIN

RANGE = "range"
ROUNDROBIN = "roundrobin"
COOPERATIVE_STICKY = "cooperative-sticky"


@dataclass(frozen=True, slots=True)
class Subscription:
    """What a member sent in JoinGroup: its topics and, for cooperative rebalancing, what it owns."""

    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = NO_GENERATION
    group_instance_id: str | None = None
    user_data: bytes = b""


@dataclass(frozen=True, slots=True)
class Assignment:
    partitions: tuple[TopicPartition, ...]
    error: int = ASSIGNMENT_ERROR_NONE
    user_data: bytes = b""


Assignor = Callable[[Mapping[str, int], Mapping[str, Subscription]], dict[str, Assignment]]


def tp_key(tp: TopicPartition) -> tuple[str, int]:
    return tp.topic, tp.partition


def member_order(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Kafka's ``MemberInfo`` order: static members by instance id first, then member ids."""

    def key(member_id: str) -> tuple[int, str, str]:
        instance_id = subscriptions[member_id].group_instance_id
        return (0, instance_id, member_id) if instance_id is not None else (1, member_id, "")

    return sorted(subscriptions, key=key)


def _partitions(partitions_per_topic: Mapping[str, int], topic: str) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(partitions_per_topic.get(topic, 0))]


def _finish(members: list[str], assigned: dict[str, list[TopicPartition]]) -> dict[str, Assignment]:
    return {m: Assignment(tuple(sorted(assigned.get(m, []), key=tp_key))) for m in members}


# ---- range ------------------------------------------------------------------------------------------


def range_assign(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> dict[str, Assignment]:
    members = member_order(subscriptions)
    assigned: dict[str, list[TopicPartition]] = {m: [] for m in members}
    topics = sorted({t for s in subscriptions.values() for t in s.topics})
    for topic in topics:
        consumers = [m for m in members if topic in subscriptions[m].topics]
        partitions = _partitions(partitions_per_topic, topic)
        per_consumer, extra = divmod(len(partitions), len(consumers))
        for i, member in enumerate(consumers):
            start = per_consumer * i + min(i, extra)
            length = per_consumer + (1 if i < extra else 0)
            assigned[member] += partitions[start : start + length]
    return _finish(members, assigned)


# ---- roundrobin -------------------------------------------------------------------------------------


def roundrobin_assign(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> dict[str, Assignment]:
    members = member_order(subscriptions)
    assigned: dict[str, list[TopicPartition]] = {m: [] for m in members}
    topics = sorted({t for s in subscriptions.values() for t in s.topics})
    turn = 0
    for topic in topics:
        for tp in _partitions(partitions_per_topic, topic):
            # Kafka's CircularIterator: advance until a member subscribed to the topic comes up.
            while topic not in subscriptions[members[turn % len(members)]].topics:
                turn += 1
            assigned[members[turn % len(members)]].append(tp)
            turn += 1
    return _finish(members, assigned)


# ---- cooperative-sticky -----------------------------------------------------------------------------


def current_owners(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> dict[TopicPartition, str]:
    """Who owns what, by the rules in the module docstring (newest generation wins, ties drop)."""
    best: dict[TopicPartition, tuple[int, str | None]] = {}
    for member, sub in sorted(subscriptions.items()):
        for tp in sub.owned_partitions:
            if tp.topic not in sub.topics or not 0 <= tp.partition < partitions_per_topic.get(tp.topic, 0):
                continue
            previous = best.get(tp)
            if previous is None or sub.generation_id > previous[0]:
                best[tp] = (sub.generation_id, member)
            elif sub.generation_id == previous[0]:
                best[tp] = (sub.generation_id, None)  # claimed twice in one generation: nobody's
    return {tp: owner for tp, (_, owner) in best.items() if owner is not None}


def sticky_assign(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> dict[str, list[TopicPartition]]:
    """The balanced, sticky target assignment (before the cooperative revocation step)."""
    members = member_order(subscriptions)
    owners = current_owners(partitions_per_topic, subscriptions)
    assigned: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for tp, owner in sorted(owners.items(), key=lambda item: tp_key(item[0])):
        assigned[owner].append(tp)
    eligible: dict[str, list[str]] = {}  # topic -> members subscribed to it, in member order
    for member in members:
        for topic in subscriptions[member].topics:
            eligible.setdefault(topic, []).append(member)
    # Unowned partitions, the most constrained (fewest eligible members) first, each to the eligible
    # member with the fewest partitions (ties: member order).
    unowned = [
        tp
        for topic in sorted(eligible)
        for tp in _partitions(partitions_per_topic, topic)
        if tp not in owners
    ]
    unowned.sort(key=lambda tp: (len(eligible[tp.topic]), tp_key(tp)))
    for tp in unowned:
        target = min(eligible[tp.topic], key=lambda m: len(assigned[m]))
        assigned[target].append(tp)
    _balance(members, subscriptions, assigned, owners)
    return assigned


def _balance(
    members: list[str],
    subscriptions: Mapping[str, Subscription],
    assigned: dict[str, list[TopicPartition]],
    owners: Mapping[TopicPartition, str],
) -> None:
    """Move one partition at a time from a fuller member to an emptier one that may take it, while
    some member has 2 more than another that could take one of its partitions. Every move lowers
    the sum of squared counts, so this ends; when it ends the assignment is balanced. Partitions
    given out in this round move before owned ones (moving those costs a revocation)."""
    while True:
        move = _find_move(members, subscriptions, assigned, owners, fresh_only=True)
        move = move or _find_move(members, subscriptions, assigned, owners, fresh_only=False)
        if move is None:
            return
        source, target, tp = move
        assigned[source].remove(tp)
        assigned[target].append(tp)


def _find_move(
    members: list[str],
    subscriptions: Mapping[str, Subscription],
    assigned: dict[str, list[TopicPartition]],
    owners: Mapping[TopicPartition, str],
    *,
    fresh_only: bool,
) -> tuple[str, str, TopicPartition] | None:
    by_load_desc = sorted(members, key=lambda m: -len(assigned[m]))  # stable: member order on ties
    by_load_asc = sorted(members, key=lambda m: len(assigned[m]))
    for source in by_load_desc:
        for target in by_load_asc:
            if len(assigned[source]) <= len(assigned[target]) + 1:
                break
            topics = subscriptions[target].topics
            # Give away the partition the source took last (its newest), keeping older ownership.
            for tp in reversed(assigned[source]):
                if tp.topic in topics and not (fresh_only and owners.get(tp) == source):
                    return source, target, tp
    return None


def cooperative_sticky_assign(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> dict[str, Assignment]:
    """KIP-429: the sticky target, minus every partition changing owner (revoked first)."""
    members = member_order(subscriptions)
    target = sticky_assign(partitions_per_topic, subscriptions)
    owners = current_owners(partitions_per_topic, subscriptions)
    revoking: set[str] = set()
    result: dict[str, Assignment] = {}
    for member in members:
        keep = []
        for tp in target[member]:
            owner = owners.get(tp)
            if owner is not None and owner != member:
                revoking.add(owner)  # the owner loses it now; this member gets it next generation
            else:
                keep.append(tp)
        result[member] = Assignment(tuple(sorted(keep, key=tp_key)))
    for member in revoking:
        result[member] = Assignment(result[member].partitions, NEED_REJOIN)
    return result


ASSIGNORS: dict[str, Assignor] = {
    RANGE: range_assign,
    ROUNDROBIN: roundrobin_assign,
    COOPERATIVE_STICKY: cooperative_sticky_assign,
}
COOPERATIVE_ASSIGNORS = frozenset({COOPERATIVE_STICKY})


def assign(
    name: str, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> dict[str, Assignment]:
    """Run assignor ``name``; every member gets an Assignment, and no partition goes to two members."""
    if name not in ASSIGNORS:
        raise ValueError(f"unknown partition assignor {name!r}; known: {sorted(ASSIGNORS)}")
    result = ASSIGNORS[name](partitions_per_topic, subscriptions)
    seen: dict[TopicPartition, str] = {}
    for member, assignment in result.items():
        for tp in assignment.partitions:
            assert tp not in seen, f"{name}: {tp} assigned to both {seen[tp]} and {member}"
            assert tp.topic in subscriptions[member].topics, f"{name}: {tp} to {member}, not subscribed"
            seen[tp] = member
    assert set(result) == set(subscriptions), f"{name}: members {sorted(result)} != {sorted(subscriptions)}"
    return result
