"""Both KIP-101 scenarios (architecture.md), scripted on the production code: the real ReplicaManager, Log
files, fetcher and QuorumController of the broker simulation (tests/sim/broker/cluster.py), with its
checker after every event (no committed record lost or changed, acknowledged writes kept, HW
monotonic within an epoch) and convergence at the end. Brokers 1, 2, 3 = A, B, C; C is down for the
scenario so that A and B are the ISR, as in the KIP.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.replica.partition import ACKS_ALL, ACKS_LEADER, Partition, Role
from broker.replica.replica_manager import ReplicaManager
from proto.kafka_types import NO_LEADER
from tests.sim.broker.checker import SimViolation, log_entries
from tests.sim.broker.cluster import PARTITION, Sim, SimOptions

pytestmark = pytest.mark.sim

A, B, C = 1, 2, 3


@pytest.fixture
def sim() -> Iterator[Sim]:
    options = SimOptions(loss=0.0, max_delay_ms=1, min_insync_replicas=2, segment_bytes=65_536)
    sim = Sim(0, options)
    with sim.disk:
        try:
            sim.begin_scripted()
            sim.brokers[C].crash(power_loss=False)
            sim.run_until_true(lambda: isr(sim) == (A, B), 3_000)
            yield sim
        finally:
            sim.close()


def isr(sim: Sim) -> tuple[int, ...]:
    reg = sim.controller.partition()
    return () if reg is None else tuple(sorted(reg.isr))


def partition(sim: Sim, broker_id: int) -> Partition:
    return sim.brokers[broker_id].manager.partitions[PARTITION]


def values(sim: Sim, broker_id: int) -> list[int]:
    return [value_id for value_id, _ in log_entries(sim.brokers[broker_id].manager.logs[PARTITION])]


def leads(sim: Sim, broker_id: int) -> bool:
    hosted = sim.brokers[broker_id].manager.partitions.get(PARTITION)
    return sim.controller.leader() == broker_id and hosted is not None and hosted.role is Role.LEADER


def converge(sim: Sim) -> None:
    sim.brokers[C].start()
    sim.healing = True
    sim.run_until_true(
        lambda: isr(sim) == (A, B, C) and len({tuple(values(sim, b)) for b in (A, B, C)}) == 1, 10_000
    )
    sim.run_until_true(
        lambda: all(partition(sim, b).high_watermark == len(values(sim, b)) for b in (A, B, C)), 5_000
    )
    sim.checker.check_converged()


def test_scenario_1_a_restarted_follower_keeps_what_lies_above_its_high_watermark(sim: Sim) -> None:
    """KIP-101 scenario 1: A and B hold offsets 0 and 1; A's HW is 2, B's still 1 (the fetch that
    would tell it is parked on A). B restarts: it does NOT truncate to its HW. A dies, B leads and
    still has offset 1 — acknowledged with acks=all, committed — and A finds no divergence later."""
    first, second = sim.produce(A, ACKS_ALL), sim.produce(A, ACKS_ALL)
    sim.run_until_true(lambda: partition(sim, A).high_watermark == 2, 2_000)
    assert partition(sim, B).high_watermark < 2 and values(sim, B) == [first, second]
    assert sim.checker.acked == {0: first, 1: second}
    sim.brokers[B].crash(power_loss=False)
    sim.brokers[B].start()
    sim.run_until_true(lambda: PARTITION in sim.brokers[B].manager.logs, 1_000)
    assert values(sim, B) == [first, second], "B truncated to its HW on restart (pre-KIP-101)"
    assert partition(sim, B).high_watermark < 2
    sim.run_until_true(lambda: isr(sim) == (A, B), 3_000)  # B back in the ISR
    sim.brokers[A].crash(power_loss=False)
    sim.run_until_true(lambda: leads(sim, B), 3_000)
    assert values(sim, B) == [first, second]
    sim.brokers[A].start()
    converge(sim)
    assert values(sim, A) == values(sim, B) == [first, second]


def test_scenario_2_a_diverged_log_is_truncated_by_leader_epoch(sim: Sim) -> None:
    """KIP-101 scenario 2: A and B crash; B, which lacks A's uncommitted offset 1, comes back first,
    leads and writes a different record at offset 1. A returns, learns the diverging epoch and
    truncates exactly offset 1, so both hold the same record at every offset below the HW."""
    committed = sim.produce(A, ACKS_ALL)
    sim.run_until_true(lambda: sim.checker.acked == {0: committed}, 2_000)
    sim.cut.add(frozenset((A, B)))  # B stops fetching: A's next record stays uncommitted
    uncommitted = sim.produce(A, ACKS_LEADER)
    sim.run_until_true(lambda: values(sim, A) == [committed, uncommitted], 1_000)
    sim.brokers[A].crash(power_loss=False)
    sim.run_until_true(lambda: isr(sim) == (B,), 3_000)  # A fenced first: B is the ISR's last member
    sim.brokers[B].crash(power_loss=False)
    sim.run_until_true(lambda: sim.controller.leader() == NO_LEADER, 3_000)
    sim.cut.clear()
    sim.brokers[B].start()
    sim.run_until_true(lambda: leads(sim, B), 3_000)
    replacement = sim.produce(B, ACKS_LEADER)
    sim.run_until_true(lambda: values(sim, B) == [committed, replacement], 1_000)
    sim.brokers[A].start()
    sim.run_until_true(lambda: PARTITION in sim.brokers[A].manager.logs, 1_000)
    assert values(sim, A) == [committed, uncommitted]  # the process crash kept it
    converge(sim)
    assert values(sim, A) == values(sim, B) == [committed, replacement]
    epochs = [epoch for _, epoch in log_entries(sim.brokers[A].manager.logs[PARTITION])]
    assert epochs[0] < epochs[1], epochs
    assert "b1 truncated to 1" in "\n".join(sim.trace)


def test_scenario_1_fails_under_the_pre_kip101_rule(sim: Sim, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: a follower that truncates to its HW when it (re)starts following — the rule KIP-101
    replaced — drops committed offset 1, and the checker says so."""
    become_follower = ReplicaManager._become_follower

    def truncating_to_high_watermark(self, tp, partition, plog, reg) -> None:
        plog.truncate_to(plog.high_watermark)
        become_follower(self, tp, partition, plog, reg)

    monkeypatch.setattr(ReplicaManager, "_become_follower", truncating_to_high_watermark)
    with pytest.raises(SimViolation, match=r"b2 lost committed v\d+@\d+ .* without a power loss"):
        test_scenario_1_a_restarted_follower_keeps_what_lies_above_its_high_watermark(sim)
