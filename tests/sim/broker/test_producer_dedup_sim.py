"""Seeded simulation of the leader's dedup state (storage.producer_state) under reordering and retries.

One idempotent producer sends numbered batches to one partition with up to 5 unacknowledged batches
(Kafka's max.in.flight with idempotence). The network delivers requests in random order, drops
requests, drops responses (the batch was appended; the producer retries it) and delivers some
requests twice; sometimes the leader fails over and the new leader rebuilds its state from the
replicated log (as a follower does). Rule under test (KIP-98): the log holds every batch exactly
once, in sequence order, and every acknowledgement names the offsets where the batch really is.
"""

from __future__ import annotations

import random

import pytest

from storage.producer_state import (
    INT32_MAX,
    Append,
    Duplicate,
    ProducerBatch,
    ProducerStateManager,
    Reject,
    next_sequence,
)
from tests.sim.conftest import seed_range

pytestmark = pytest.mark.sim

PID, EPOCH = 9, 0
WINDOW = 5
BATCHES = 60


class Leader:
    def __init__(self) -> None:
        self.log: list[tuple[ProducerBatch, int, int]] = []  # (batch, first offset, last offset)
        self.state = ProducerStateManager()

    def log_end_offset(self) -> int:
        return self.log[-1][2] + 1 if self.log else 0

    def produce(self, batch: ProducerBatch) -> tuple[str, int]:
        verdict = self.state.check(batch)
        if isinstance(verdict, Duplicate):
            return "ok", verdict.first_offset
        if isinstance(verdict, Reject):
            return "rejected", -1
        assert isinstance(verdict, Append)
        first = self.log_end_offset()
        last = first + batch.last_offset_delta
        self.log.append((batch, first, last))
        self.state.update(batch, first, last, 0)
        self.state.invariants()
        return "ok", first

    def fail_over(self) -> None:
        """The new leader's state is what a follower rebuilt from the same replicated batches."""
        self.state = ProducerStateManager()
        for batch, first, last in self.log:
            self.state.update(batch, first, last, 0)


def run(seed: int, start_sequence: int) -> None:
    rng = random.Random(seed)
    sizes = [rng.randint(1, 4) for _ in range(BATCHES)]
    batches, sequence = [], start_sequence
    for size in sizes:
        batches.append(ProducerBatch(PID, EPOCH, sequence, size - 1))
        sequence = next_sequence(sequence, size)
    leader = Leader()
    history = []
    if start_sequence:  # the producer's earlier (acknowledged) batch, just below the wrap
        history = [ProducerBatch(PID, EPOCH, start_sequence - 1, 0)]
        leader.log, leader.state = [(history[0], 0, 0)], ProducerStateManager()
        leader.fail_over()
    acked: dict[int, int] = {}
    in_network: list[int] = []
    steps = 0
    while len(acked) < BATCHES:
        steps += 1
        assert steps < 20_000, f"seed {seed}: no progress, acked {len(acked)}"
        oldest = min(i for i in range(BATCHES) if i not in acked)
        window = [i for i in range(oldest, min(oldest + WINDOW, BATCHES)) if i not in acked]
        if rng.random() < 0.5 or not in_network:
            in_network.append(rng.choice(window))  # send or retry one batch of the window
            continue
        i = in_network.pop(rng.randrange(len(in_network)))  # reordering
        if rng.random() < 0.1:
            continue  # request lost
        if rng.random() < 0.1:
            in_network.append(i)  # delivered twice
        outcome, first_offset = leader.produce(batches[i])
        if rng.random() < 0.02:
            leader.fail_over()
        if outcome == "ok" and rng.random() >= 0.3:  # else: the answer is lost, the producer retries
            assert acked.get(i, first_offset) == first_offset, f"seed {seed}: batch {i} acked at two offsets"
            acked[i] = first_offset
    logged = [b for b, _, _ in leader.log]
    assert logged == history + batches, f"seed {seed}: log is not each batch once in order"
    for i, first_offset in acked.items():
        assert leader.log[len(history) + i][1] == first_offset, (
            f"seed {seed}: batch {i} acked at {first_offset}"
        )


@pytest.mark.parametrize("start_sequence", [0, INT32_MAX - 100], ids=["from-zero", "wrapping"])
def test_exactly_once_in_order_under_reordering_and_retries(request: pytest.FixtureRequest, start_sequence):
    for seed in seed_range(request.config, 40):
        run(seed, start_sequence)
