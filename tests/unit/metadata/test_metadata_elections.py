"""Election-rule tables for the PartitionChangeBuilder, and the epoch rules of replay."""

from __future__ import annotations

import pytest

from metadata.image import PartitionRegistration, changed_partition
from metadata.partition_change import Election, isr_without, partition_change_builder
from metadata.records import PartitionChangeRecord
from proto.kafka_types import NO_LEADER

# (id, replicas, isr, leader, usable brokers, target isr, election, unclean allowed,
#  expected leader, expected isr)
CASES = [
    (
        "clean-keeps-usable-leader",
        (1, 2, 3),
        (1, 2, 3),
        1,
        {1, 2, 3},
        None,
        Election.CLEAN,
        False,
        1,
        (1, 2, 3),
    ),
    (
        "clean-first-isr-in-assignment-order",
        (3, 1, 2),
        (1, 2, 3),
        3,
        {1, 2},
        (1, 2),
        Election.CLEAN,
        False,
        1,
        (1, 2),
    ),
    ("clean-skips-fenced-isr-member", (1, 2, 3), (1, 2, 3), 1, {3}, (2, 3), Election.CLEAN, False, 3, (2, 3)),
    (
        "clean-no-live-isr-goes-offline",
        (1, 2, 3),
        (1,),
        1,
        {2, 3},
        (1,),
        Election.CLEAN,
        False,
        NO_LEADER,
        (1,),
    ),
    ("unclean-enabled-elects-live-replica", (1, 2, 3), (1,), 1, {2, 3}, (1,), Election.CLEAN, True, 2, (2,)),
    ("unclean-enabled-but-clean-possible", (1, 2, 3), (1, 2), 1, {2, 3}, (2,), Election.CLEAN, True, 2, (2,)),
    ("unclean-enabled-no-live-replica", (1, 2), (1,), 1, set(), (1,), Election.CLEAN, True, NO_LEADER, (1,)),
    ("empty-target-isr-keeps-old", (1, 2), (1,), 1, set(), (), Election.CLEAN, False, NO_LEADER, (1,)),
    ("offline-isr-member-returns", (1, 2), (1,), NO_LEADER, {1}, None, Election.CLEAN, False, 1, (1,)),
    (
        "offline-outsider-returns-clean",
        (1, 2),
        (1,),
        NO_LEADER,
        {2},
        None,
        Election.CLEAN,
        False,
        NO_LEADER,
        (1,),
    ),
    ("unclean-request", (1, 2), (1,), NO_LEADER, {2}, None, Election.UNCLEAN, False, 2, (2,)),
    (
        "preferred-moves-back",
        (1, 2, 3),
        (1, 2, 3),
        2,
        {1, 2, 3},
        None,
        Election.PREFERRED,
        False,
        1,
        (1, 2, 3),
    ),
    (
        "preferred-fenced-keeps",
        (1, 2, 3),
        (1, 2, 3),
        2,
        {2, 3},
        None,
        Election.PREFERRED,
        False,
        2,
        (1, 2, 3),
    ),
    ("preferred-not-in-isr", (1, 2, 3), (2, 3), 2, {1, 2, 3}, None, Election.PREFERRED, False, 2, (2, 3)),
]


@pytest.mark.parametrize(
    ("replicas", "isr", "leader", "usable", "target", "election", "unclean", "want_leader", "want_isr"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_election_rules(
    replicas, isr, leader, usable, target, election, unclean, want_leader, want_isr
) -> None:
    """architecture.md Elections: first live ISR member in assignment order; empty live ISR -> offline unless
    unclean election is enabled (then any live replica, ISR = just it); the ISR never empties."""
    p = PartitionRegistration(replicas, isr, leader, leader_epoch=5, partition_epoch=9)
    record = partition_change_builder(
        "t", 0, p, usable.__contains__, target_isr=target, election=election, unclean_allowed=unclean
    )
    new = p if record is None else changed_partition(p, record)
    assert (new.leader, new.isr) == (want_leader, want_isr)
    if new.leader != NO_LEADER:
        assert new.leader in new.isr


@pytest.mark.parametrize(
    ("leader", "isr", "want_leader_epoch", "want_partition_epoch"),
    [(None, (1, 2), 5, 10), (2, None, 6, 10), (2, (2,), 6, 10), (NO_LEADER, None, 6, 10)],
    ids=["isr-only", "leader-only", "leader-and-isr", "to-offline"],
)
def test_epoch_bumps(leader, isr, want_leader_epoch: int, want_partition_epoch: int) -> None:
    """Every leader change bumps the leader epoch; every ISR or leader change bumps the partition epoch."""
    old = PartitionRegistration((1, 2), (1, 2), 1, leader_epoch=5, partition_epoch=9)
    new = changed_partition(old, PartitionChangeRecord("t", 0, leader=leader, isr=isr))
    assert (new.leader_epoch, new.partition_epoch) == (want_leader_epoch, want_partition_epoch)


def test_no_change_yields_no_record() -> None:
    """A decision that changes nothing writes nothing (and so bumps no epoch)."""
    p = PartitionRegistration((1, 2), (1, 2), 1, 0, 0)
    assert partition_change_builder("t", 0, p, {1, 2}.__contains__) is None


@pytest.mark.parametrize(
    ("isr", "broker", "expected"),
    [((1, 2, 3), 2, (1, 3)), ((1,), 1, (1,)), ((1, 2), 3, (1, 2))],
    ids=["removes", "keeps-last-member", "not-a-member"],
)
def test_isr_without(isr, broker: int, expected) -> None:
    """Kafka never shrinks an ISR to nothing: the last member stays."""
    assert isr_without(isr, broker) == expected
