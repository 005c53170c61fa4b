"""Leader election and ISR changes for one partition: a pure ``PartitionChangeRecord`` builder.

Kafka's ``PartitionChangeBuilder``. Given a partition, the brokers that are usable (unfenced and not
in controlled shutdown), an optional target ISR and the kind of election, it computes the record
that moves the partition there — or ``None`` when nothing changes. Replay applies the epoch rules
(``metadata.image.changed_partition``): every leader change bumps the leader epoch, every change
bumps the partition epoch.

Election rules:
- CLEAN: keep the current leader while it is usable and stays in the ISR; otherwise the first
  replica *in assignment order* that is in the ISR and usable. With none, the partition goes
  offline (leader ``NO_LEADER``) unless unclean election is allowed for the topic.
- UNCLEAN (allowed by ``unclean.leader.election.enable`` or requested by ElectLeaders): when no
  ISR member is usable, the first usable replica in assignment order leads, and the ISR becomes
  just that replica (data the old ISR held beyond its log may be lost).
- PREFERRED: the first replica of the assignment leads if it is usable and in the ISR; otherwise
  the CLEAN rule applies (the caller reports ``PREFERRED_LEADER_NOT_AVAILABLE``).

The ISR never becomes empty: removing the last member keeps it (Kafka's rule), so that when that
broker returns it can lead again without losing committed data.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from metadata.image import PartitionRegistration
from metadata.records import PartitionChangeRecord
from proto.kafka_types import NO_LEADER


class Election(enum.IntEnum):
    PREFERRED = 0  # Kafka's ElectionType numbers
    UNCLEAN = 1
    CLEAN = 2


def isr_without(isr: tuple[int, ...], broker_id: int) -> tuple[int, ...]:
    """The ISR with ``broker_id`` removed, except that the last member stays."""
    if broker_id not in isr or len(isr) == 1:
        return isr
    return tuple(r for r in isr if r != broker_id)


def elect_leader(
    p: PartitionRegistration,
    isr: tuple[int, ...],
    is_usable: Callable[[int], bool],
    election: Election,
    unclean_allowed: bool,
) -> tuple[int, bool]:
    """``(leader, unclean)``: the leader the rules pick, and whether it was an unclean choice."""
    if election == Election.PREFERRED and p.preferred_leader in isr and is_usable(p.preferred_leader):
        return p.preferred_leader, False
    if p.leader != NO_LEADER and p.leader in isr and is_usable(p.leader):
        return p.leader, False
    for replica in p.replicas:
        if replica in isr and is_usable(replica):
            return replica, False
    if unclean_allowed or election == Election.UNCLEAN:
        for replica in p.replicas:
            if is_usable(replica):
                return replica, True
    return NO_LEADER, False


def partition_change_builder(
    topic_id: str,
    partition: int,
    p: PartitionRegistration,
    is_usable: Callable[[int], bool],
    *,
    target_isr: tuple[int, ...] | None = None,
    election: Election = Election.CLEAN,
    unclean_allowed: bool = False,
) -> PartitionChangeRecord | None:
    """The record moving ``p`` to ``target_isr`` (default: unchanged) with a leader per the rules."""
    isr = p.isr if target_isr is None else target_isr
    leader, unclean = elect_leader(p, isr, is_usable, election, unclean_allowed)
    if unclean:
        isr = (leader,)
    elif leader == NO_LEADER and not isr:
        isr = p.isr  # never empty the ISR
    if leader == p.leader and isr == p.isr:
        return None
    return PartitionChangeRecord(
        topic_id,
        partition,
        leader=None if leader == p.leader else leader,
        isr=None if isr == p.isr else isr,
    )
