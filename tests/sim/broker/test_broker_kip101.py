"""Both KIP-101 scenarios of DESIGN.md, step by step, through the broker's Partition and divergence cores.

The checker (tests/sim/broker/model.py) runs after every step: nothing below any replica's HW ever
changes, every committed-ISR member holds the committed prefix, every acknowledged record stays.
"""

from __future__ import annotations

import pytest

from broker.divergence import EpochEntry
from broker.partition import ACKS_LEADER, Role
from proto.errors import ErrorCode
from tests.sim.broker.model import Cluster, Record, heal

pytestmark = pytest.mark.sim

A, B = 1, 2


def step(c: Cluster, result: object = None) -> object:
    c.checker.check()
    return result


def values(c: Cluster, broker_id: int) -> list[str]:
    return [r.value for r in c.brokers[broker_id].log.records]


def lost_committed_record_setup(truncate_to_high_watermark: bool) -> Cluster:
    """A and B hold offsets 0 and 1; A's HW is 2, B's is 1 (the answer that would tell it was lost)."""
    c = Cluster(replicas=(A, B), truncate_to_high_watermark=truncate_to_high_watermark)
    step(c, c.produce(A, ACKS_LEADER))
    assert step(c, c.fetch(B)) == "ok"
    step(c, c.produce(A, ACKS_LEADER))
    assert step(c, c.fetch(B)) == "ok"
    assert step(c, c.fetch(B, lose_response=True)) == "lost"
    assert c.brokers[A].partition.high_watermark == 2
    assert c.brokers[B].partition.high_watermark == 1
    assert values(c, A) == values(c, B) == ["v0", "v1"]
    c.checkpoint(B)
    return c


def test_scenario_1_lost_committed_record_is_kept() -> None:
    """KIP-101 scenario 1: B restarts with HW 1 < LEO 2 and does NOT truncate to its HW (it truncates only
    by leader epoch). A dies, B leads epoch 2 and still has offset 1; A returns and finds no divergence."""
    c = lost_committed_record_setup(truncate_to_high_watermark=False)
    step(c, c.bounce(B))
    assert values(c, B) == ["v0", "v1"]
    step(c, c.crash((A,)))
    assert c.controller.state.leader_id == B and c.controller.state.leader_epoch == 1
    step(c, c.sync_metadata(B))
    assert c.brokers[B].partition.role is Role.LEADER
    assert c.brokers[B].log.epochs == (EpochEntry(0, 0), EpochEntry(1, 2))
    step(c, c.restart(A))
    assert step(c, c.fetch(A)) == "ok"  # fetch offset 2, last epoch 0: B ended epoch 0 at 2
    heal(c)
    assert values(c, A) == values(c, B) == ["v0", "v1"]
    assert c.checker.committed == [Record(0, "v0"), Record(0, "v1")]


def test_scenario_1_truncating_to_the_high_watermark_loses_it() -> None:
    """The pre-KIP-101 rule (truncate to HW on restart) loses committed offset 1, and the checker says so:
    this is the failure the leader-epoch rule prevents."""
    c = lost_committed_record_setup(truncate_to_high_watermark=True)
    c.bounce(B)
    assert values(c, B) == ["v0"]
    c.crash((A,))
    with pytest.raises(AssertionError, match="lacks committed data"):
        c.checker.check()


def test_scenario_2_diverged_logs_are_reconciled() -> None:
    """KIP-101 scenario 2: A and B crash together; B (lacking A's uncommitted offset 1) comes back first,
    leads and writes a different record at offset 1. A returns, learns the diverging epoch and truncates
    exactly the divergent offset, so both hold the same record at every offset below the HW."""
    c = Cluster(replicas=(A, B))
    step(c, c.produce(A, ACKS_LEADER))
    step(c, c.fetch(B))
    step(c, c.fetch(B))
    assert c.brokers[A].partition.high_watermark == c.brokers[B].partition.high_watermark == 1
    step(c, c.produce(A, ACKS_LEADER))  # offset 1 in epoch 0, never fetched by B
    c.checkpoint(A)
    step(c, c.crash((A, B)))
    assert c.controller.state.leader_id == -1, c.controller.state
    step(c, c.restart(B))
    state = c.controller.state
    assert state.leader_id == B
    assert step(c, c.produce(B, ACKS_LEADER)) == ErrorCode.NONE
    assert values(c, B) == ["v0", "v2"]
    step(c, c.restart(A))
    assert values(c, A) == ["v0", "v1"]
    assert step(c, c.fetch(A)) == "truncated"  # diverging epoch (0, 1): A ends epoch 0 at 2
    assert values(c, A) == ["v0"]
    assert step(c, c.fetch(A)) == "ok"
    heal(c)
    assert values(c, A) == values(c, B) == ["v0", "v2"]
    assert [r.epoch for r in c.brokers[A].log.records] == [0, state.leader_epoch]
