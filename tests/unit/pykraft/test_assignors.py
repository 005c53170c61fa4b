"""Partition assignors (pykraft.assignors): Kafka's RangeAssignor, RoundRobinAssignor and
CooperativeStickyAssignor (KIP-429), as tables with ids and as properties over random groups.

Rules: range divides each topic's partitions in contiguous ranges over the sorted members, the first
``n % m`` getting one more; roundrobin deals all sorted topic-partitions over the sorted members;
cooperative-sticky is balanced (no partition could move from A to a subscribed B while
|A| > |B| + 1), sticky (a member keeps what it owns up to its share) and incremental (a partition
changing owner is revoked first: nobody gets it in this generation, the old owner gets NEED_REJOIN).
Static members (group.instance.id) sort first, by instance id.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pykraft.assignors import (
    COOPERATIVE_STICKY,
    NEED_REJOIN,
    Assignment,
    Subscription,
    assign,
    cooperative_sticky_assign,
    current_owners,
    member_order,
    sticky_assign,
)
from pykraft.types import TopicPartition


def tps(spec: str) -> tuple[TopicPartition, ...]:
    """Parse "t0 t1 u2" into (t-0, t-1, u-2)."""
    return tuple(TopicPartition(item[0], int(item[1:])) for item in spec.split())


def plain(result: dict[str, Assignment]) -> dict[str, str]:
    return {m: " ".join(f"{tp.topic}{tp.partition}" for tp in a.partitions) for m, a in result.items()}


@pytest.mark.parametrize(
    ("counts", "subs", "expected"),
    [
        ({"t": 6}, {"a": "t", "b": "t", "c": "t"}, {"a": "t0 t1", "b": "t2 t3", "c": "t4 t5"}),
        ({"t": 7}, {"c": "t", "a": "t", "b": "t"}, {"a": "t0 t1 t2", "b": "t3 t4", "c": "t5 t6"}),
        ({"t": 2}, {"a": "t", "b": "t", "c": "t"}, {"a": "t0", "b": "t1", "c": ""}),
        # Kafka's javadoc example: each topic alone; the first member takes the extra of both.
        ({"t": 3, "u": 3}, {"a": "t u", "b": "t u"}, {"a": "t0 t1 u0 u1", "b": "t2 u2"}),
        ({"t": 2, "u": 2}, {"a": "t", "b": "t u"}, {"a": "t0", "b": "t1 u0 u1"}),
        ({}, {"a": "t"}, {"a": ""}),
    ],
    ids=["even", "uneven-sorted", "more-members", "two-topics", "mixed-subscriptions", "unknown-topic"],
)
def test_range(counts, subs, expected) -> None:
    """RangeAssignor: per topic, contiguous ranges over the sorted members."""
    result = assign("range", counts, {m: Subscription(tuple(t.split())) for m, t in subs.items()})
    assert plain(result) == expected


@pytest.mark.parametrize(
    ("counts", "subs", "expected"),
    [
        ({"t": 3, "u": 3}, {"a": "t u", "b": "t u"}, {"a": "t0 t2 u1", "b": "t1 u0 u2"}),
        # Kafka's javadoc example: C0 [t0], C1 [t0 t1], C2 [t0 t1 t2] over t0:1, t1:2, t2:3 partitions.
        (
            {"t": 1, "u": 2, "v": 3},
            {"a": "t", "b": "t u", "c": "t u v"},
            {"a": "t0", "b": "u0", "c": "u1 v0 v1 v2"},
        ),
        ({"t": 5}, {"b": "t", "a": "t"}, {"a": "t0 t2 t4", "b": "t1 t3"}),
    ],
    ids=["two-topics", "javadoc-unequal", "sorted-members"],
)
def test_roundrobin(counts, subs, expected) -> None:
    """RoundRobinAssignor: all sorted topic-partitions dealt over the sorted members, skipping the
    members not subscribed to a partition's topic."""
    result = assign("roundrobin", counts, {m: Subscription(tuple(t.split())) for m, t in subs.items()})
    assert plain(result) == expected


def test_static_members_sort_first_by_instance_id() -> None:
    """KIP-345: a static member's place (and so its range) follows its group.instance.id, not the
    member id it got on this incarnation."""
    subs = {
        "zzz-new-id": Subscription(("t",), group_instance_id="i-1"),
        "aaa": Subscription(("t",), group_instance_id="i-2"),
        "dynamic": Subscription(("t",)),
    }
    assert member_order(subs) == ["zzz-new-id", "aaa", "dynamic"]
    assert plain(assign("range", {"t": 3}, subs)) == {"zzz-new-id": "t0", "aaa": "t1", "dynamic": "t2"}


def test_unknown_assignor_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown partition assignor 'sticky'"):
        assign("sticky", {"t": 1}, {"a": Subscription(("t",))})


@pytest.mark.parametrize(
    ("subs", "expected", "rejoin"),
    [
        (  # a new member c: a and b each give up one partition; nobody gets them yet
            {"a": ("t0 t1 t2", 1), "b": ("t3 t4 t5", 1), "c": ("", -1)},
            {"a": "t0 t1", "b": "t3 t4", "c": ""},
            {"a", "b"},
        ),
        (  # the follow-up rebalance: the revoked partitions are unowned and go to c
            {"a": ("t0 t1", 2), "b": ("t3 t4", 2), "c": ("", 2)},
            {"a": "t0 t1", "b": "t3 t4", "c": "t2 t5"},
            set(),
        ),
        (  # c left: its partitions are unowned and go straight to the others, no revocation
            {"a": ("t0 t1", 3), "b": ("t2 t3", 3)},
            {"a": "t0 t1 t4", "b": "t2 t3 t5"},
            set(),
        ),
        (  # balanced already: nothing moves
            {"a": ("t1 t5", 4), "b": ("t0 t3", 4), "c": ("t2 t4", 4)},
            {"a": "t1 t5", "b": "t0 t3", "c": "t2 t4"},
            set(),
        ),
        (  # a stale claim (older generation) loses to the newer owner
            {"a": ("t0 t1 t2", 1), "b": ("t2 t3 t4 t5", 2)},
            {"a": "t0 t1", "b": "t2 t3 t4"},
            {"b"},
        ),
        (  # a claim made twice in the same generation belongs to nobody
            {"a": ("t0 t1 t2", 3), "b": ("t2 t3 t4 t5", 3)},
            {"a": "t0 t1 t2", "b": "t3 t4 t5"},
            set(),
        ),
    ],
    ids=["member-joins", "follow-up", "member-leaves", "stable", "stale-claim", "double-claim"],
)
def test_cooperative_sticky_table(subs, expected, rejoin) -> None:
    """KIP-429: members keep what they own; a moving partition is revoked first (NEED_REJOIN)."""
    subscriptions = {
        m: Subscription(("t",), tps(owned) if owned else (), generation)
        for m, (owned, generation) in subs.items()
    }
    result = assign(COOPERATIVE_STICKY, {"t": 6}, subscriptions)
    assert plain(result) == expected
    assert {m for m, a in result.items() if a.error == NEED_REJOIN} == rejoin


def test_cooperative_sticky_drops_unsubscribed_owned_partitions() -> None:
    """A member that unsubscribed from a topic does not keep its partitions: they are unowned and go
    straight to b; balancing then moves u1 from b to a, so b revokes it first."""
    subs = {
        "a": Subscription(("u",), tps("t0 t1 u0"), 5),
        "b": Subscription(("t", "u"), tps("u1"), 5),
    }
    result = assign(COOPERATIVE_STICKY, {"t": 2, "u": 2}, subs)
    assert plain(result) == {"a": "u0", "b": "t0 t1"}
    assert (result["a"].error, result["b"].error) == (0, NEED_REJOIN)


# ---- properties ---------------------------------------------------------------------------------------

TOPICS = ("t", "u", "v")


@st.composite
def groups(draw):
    """Random groups: topics with 0..12 partitions, 1..7 members with random subscriptions, and a
    random previous assignment (each partition owned by at most one member that subscribes to it)."""
    counts = {t: draw(st.integers(0, 12)) for t in TOPICS}
    n_members = draw(st.integers(1, 7))
    subs_topics = {
        f"m{i}": tuple(sorted(draw(st.sets(st.sampled_from(TOPICS), min_size=1)))) for i in range(n_members)
    }
    owned: dict[str, list[TopicPartition]] = {m: [] for m in subs_topics}
    for topic, count in counts.items():
        for p in range(count):
            candidates = [m for m, ts in subs_topics.items() if topic in ts]
            choice = draw(st.sampled_from([None, *candidates]))
            if choice is not None:
                owned[choice].append(TopicPartition(topic, p))
    return counts, {m: Subscription(subs_topics[m], tuple(owned[m]), 1) for m in subs_topics}


def all_partitions(counts, subs) -> set[TopicPartition]:
    wanted = {t for s in subs.values() for t in s.topics}
    return {TopicPartition(t, p) for t in wanted for p in range(counts.get(t, 0))}


def is_balanced(assigned: dict[str, list[TopicPartition]], subs) -> bool:
    return not any(
        len(assigned[a]) > len(assigned[b]) + 1 and any(tp.topic in subs[b].topics for tp in assigned[a])
        for a in assigned
        for b in assigned
    )


@settings(max_examples=100, deadline=None)
@given(groups(), st.sampled_from(["range", "roundrobin", COOPERATIVE_STICKY]))
def test_every_partition_to_exactly_one_subscribed_member(group, name) -> None:
    """Every assignor: no partition twice, only to subscribed members (assign() asserts both), and
    range/roundrobin/sticky target assign every subscribed partition."""
    counts, subs = group
    result = assign(name, counts, subs)
    got = [tp for a in result.values() for tp in a.partitions]
    assert len(got) == len(set(got))
    if name != COOPERATIVE_STICKY:
        assert set(got) == all_partitions(counts, subs)


@settings(max_examples=100, deadline=None)
@given(groups())
def test_sticky_target_is_complete_and_balanced(group) -> None:
    """The sticky target covers every subscribed partition and is balanced."""
    counts, subs = group
    target = sticky_assign(counts, subs)
    assert {tp for ps in target.values() for tp in ps} == all_partitions(counts, subs)
    assert is_balanced(target, subs), target


@settings(max_examples=100, deadline=None)
@given(groups())
def test_sticky_keeps_owned_partitions_up_to_the_fair_share(group) -> None:
    """Equal subscriptions: every member keeps min(owned, floor(n/m)) of what it owned."""
    counts, subs = group
    topics = subs["m0"].topics
    subs = {m: Subscription(topics, tuple(tp for tp in s.owned_partitions if tp.topic in topics), 1)
            for m, s in subs.items()}  # fmt: skip
    target = sticky_assign(counts, subs)
    n = len(all_partitions(counts, subs))
    floor_share = n // len(subs)
    for member, sub in subs.items():
        kept = set(sub.owned_partitions) & set(target[member])
        assert len(kept) >= min(len(sub.owned_partitions), floor_share), (member, sub, target)


def rebalance_rounds(counts, subs, max_rounds: int) -> tuple[int, dict[str, Assignment]]:
    """Run cooperative rebalances, each member reporting what it got as owned, until no member is
    asked to rejoin; checks that every round only revokes (a partition it hands out was unowned
    or stays with its owner) and flags exactly the members that lost an owned partition."""
    generation = 1
    for rounds in range(1, max_rounds + 1):
        owners = current_owners(counts, subs)
        result = cooperative_sticky_assign(counts, subs)
        for member, a in result.items():
            assert all(owners.get(tp, member) == member for tp in a.partitions), (member, a, owners)
            lost = {tp for tp, o in owners.items() if o == member} - set(a.partitions)
            assert (a.error == NEED_REJOIN) == bool(lost), (member, a, lost)
        generation += 1
        subs = {m: Subscription(s.topics, result[m].partitions, generation) for m, s in subs.items()}
        if all(a.error == 0 for a in result.values()):
            return rounds, result
    raise AssertionError(f"no stable assignment after {max_rounds} rounds: {result}")


@settings(max_examples=100, deadline=None)
@given(groups())
def test_cooperative_rebalance_equal_subscriptions_two_rounds(group) -> None:
    """KIP-429 with equal subscriptions: round 1 only revokes, round 2 (after the revokers rejoin)
    hands out the revoked partitions; the result is complete, balanced and then stable."""
    counts, subs = group
    topics = subs["m0"].topics
    subs = {m: Subscription(topics, tuple(tp for tp in s.owned_partitions if tp.topic in topics), 1)
            for m, s in subs.items()}  # fmt: skip
    _, result = rebalance_rounds(counts, subs, max_rounds=2)
    assigned = {m: list(a.partitions) for m, a in result.items()}
    assert {tp for ps in assigned.values() for tp in ps} == all_partitions(counts, subs)
    assert is_balanced(assigned, subs)
    again = {m: Subscription(topics, result[m].partitions, 9) for m in subs}
    assert cooperative_sticky_assign(counts, again) == result


@settings(max_examples=100, deadline=None)
@given(groups())
def test_cooperative_rebalance_converges(group) -> None:
    """Unequal subscriptions may need a few revoke-then-assign rounds; each round only revokes, and
    the end is complete and balanced."""
    counts, subs = group
    _, result = rebalance_rounds(counts, subs, max_rounds=len(subs) + 2)
    assigned = {m: list(a.partitions) for m, a in result.items()}
    assert {tp for ps in assigned.values() for tp in ps} == all_partitions(counts, subs)
    assert is_balanced(assigned, subs)
