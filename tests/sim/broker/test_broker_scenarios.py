"""Explicit replication scenarios beyond KIP-101, driven through the broker cores (tests/sim/broker/model.py),
with the checker after every step."""

from __future__ import annotations

import pytest

from broker.replica.partition import ACKS_LEADER
from tests.sim.broker.model import FETCHER_CONFIG, Cluster, heal

pytestmark = pytest.mark.sim

A, B, C = 1, 2, 3


def step(c: Cluster, result: object = None) -> object:
    c.checker.check()
    return result


def test_rejoin_needs_the_new_leaders_epoch_start() -> None:
    """Kafka's isFollowerInSync: a new leader's HW may lag the committed end (here 8 < 9), so a follower
    rejoins the ISR only once its LEO also reaches the leader's start offset of the current epoch;
    otherwise an ISR member could lack a committed record."""
    c = Cluster(replicas=(A, B, C))
    step(c, c.crash((C,)))
    step(c, c.sync_metadata(A))  # the leader learns the ISR without C from the metadata log
    for _ in range(9):
        step(c, c.produce(A, ACKS_LEADER))
    for _ in range(3):
        assert step(c, c.fetch(B)) == "ok"
    assert step(c, c.fetch(B, lose_response=True)) == "lost"
    c.advance(FETCHER_CONFIG.fetch_backoff_ms)
    assert (c.brokers[A].partition.high_watermark, c.brokers[B].partition.high_watermark) == (9, 8)
    step(c, c.restart(C))
    step(c, c.fetch(C))
    step(c, c.fetch(C))
    assert c.brokers[C].log.log_end_offset == 8
    assert c.controller.move_leader(B)
    for broker_id in (A, B, C):
        step(c, c.sync_metadata(broker_id))
    leader = c.brokers[B].partition
    assert (leader.high_watermark, leader.leader_epoch_start_offset) == (8, 9)
    assert step(c, c.fetch(C, lose_response=True)) == "lost"  # C's LEO 8 >= HW 8, but < epoch start 9
    assert c.alter_partition_inflight == [], c.alter_partition_inflight
    c.advance(FETCHER_CONFIG.fetch_backoff_ms)  # a lost answer backs the partition off
    assert step(c, c.fetch(C)) == "ok"
    assert step(c, c.fetch(C)) == "ok"  # LEO 9: now it may rejoin
    assert [p.new_isr for p in c.alter_partition_inflight] == [(A, B, C)]
    step(c, c.deliver_alter_partition())
    assert set(c.controller.state.isr) == {A, B, C}
    heal(c)


def test_stale_follower_is_fenced_then_catches_up() -> None:
    """A follower still on an old leader epoch gets FENCED_LEADER_EPOCH (the epoch check comes before the
    leadership check); after it reads the metadata log it fetches from the new leader normally."""
    c = Cluster(replicas=(A, B, C))
    c.produce(A, ACKS_LEADER)
    assert c.controller.move_leader(B)
    c.sync_metadata(A)
    c.sync_metadata(B)
    # broker 3 still follows A in epoch 0; A checks the epoch first (Kafka's order) and fences it
    assert step(c, c.fetch(C)) == "FENCED_LEADER_EPOCH"
    assert c.brokers[C].log.log_end_offset == 0
    c.sync_metadata(C)
    assert step(c, c.fetch(C)) == "ok"
    heal(c)
