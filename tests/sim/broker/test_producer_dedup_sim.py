"""Seeded simulation of the leader's dedup state (storage.producer_state) under retries and reconnects.

One idempotent producer sends numbered batches to one partition with up to 5 unacknowledged batches
(Kafka's max.in.flight with idempotence). The network is Kafka's: a connection delivers requests in
the order sent and the broker processes one connection's requests in that order (broker.kafka.listener),
answering in order. A connection breaks (a lost link, a request timeout, a leader failover): the
client stops reading it and resends every unacknowledged batch, oldest first, on a new connection,
while requests still queued on the broken one may yet be processed (interleaved with the new ones)
or be dropped; an answer on a broken connection is lost (the batch was appended; the producer
retries it). Sometimes the leader fails over and the new leader rebuilds its state from the
replicated log (as a follower does), and sometimes the producer idles until its state expires
(KIP-854) and carries on at its next sequence, which Kafka accepts from a producer it knows no epoch
of. Rule under test (KIP-98): the log holds every batch exactly once, in sequence order, and every
acknowledgement names the offsets where the batch really is.

Reordering across arbitrary requests is not modelled: Kafka's rule that an unknown producer may
start at any sequence relies on the in-order connection (a batch 1 processed before batch 0 of a new
producer would be appended), as it did when a gRPC data plane ran requests concurrently.
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
        self.now_ms = 0
        self.duplicates = 0

    def log_end_offset(self) -> int:
        return self.log[-1][2] + 1 if self.log else 0

    def produce(self, batch: ProducerBatch) -> tuple[str, int]:
        self.now_ms += 1
        verdict = self.state.check(batch)
        if isinstance(verdict, Duplicate):
            self.state.touch(batch.producer_id, self.now_ms)
            self.duplicates += 1
            return "ok", verdict.first_offset
        if isinstance(verdict, Reject):
            return "rejected", -1
        assert isinstance(verdict, Append)
        first = self.log_end_offset()
        last = first + batch.last_offset_delta
        self.log.append((batch, first, last))
        self.state.update(batch, first, last, self.now_ms)
        self.state.invariants()
        return "ok", first

    def fail_over(self) -> None:
        """The new leader's state is what a follower rebuilt from the same replicated batches."""
        self.state = ProducerStateManager()
        for batch, first, last in self.log:
            self.state.update(batch, first, last, self.now_ms)

    def idle_until_expired(self) -> bool:
        """The producer sends nothing for producer.id.expiration.ms: its state is dropped (KIP-854)."""
        self.now_ms += self.state.expiration_ms
        expired = self.state.remove_expired(self.now_ms)
        assert not self.state.producers, self.state.producers
        return expired == [PID]


class Connection:
    """One client connection: requests in the order sent, answers in the order processed."""

    def __init__(self) -> None:
        self.requests: list[int] = []  # batch indices sent, not yet processed by the broker
        self.answers: list[tuple[int, str, int]] = []  # (batch index, outcome, first offset)


def run(seed: int, start_sequence: int) -> tuple[int, int]:
    """Returns (duplicates answered, expiries) so the caller can check the run exercised both."""
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
    current = Connection()
    broken: list[Connection] = []  # the client stopped reading them; the broker may still process
    next_to_send = 0  # on the current connection; the client sends in sequence order
    ever_sent = 0  # batches [0, ever_sent) were put in a request at least once
    expiries = steps = 0
    while len(acked) < BATCHES:
        steps += 1
        assert steps < 20_000, f"seed {seed}: no progress, acked {len(acked)}"
        oldest = min(i for i in range(BATCHES) if i not in acked)
        broken = [c for c in broken if c.requests]
        roll = rng.random()
        if roll < 0.05 or (next_to_send >= BATCHES and not current.requests and not current.answers):
            # the connection breaks (or the client gave up waiting): resend from the oldest unacked
            broken.append(current)
            current, next_to_send = Connection(), oldest
            if rng.random() < 0.5:  # requests of a broken connection may never reach the broker
                broken.pop()
            continue
        if roll < 0.4 and next_to_send < min(oldest + WINDOW, BATCHES):
            if next_to_send not in acked:
                current.requests.append(next_to_send)
                ever_sent = max(ever_sent, next_to_send + 1)
            next_to_send += 1
            continue
        if roll < 0.7:  # the broker processes the head request of some connection
            pending = [c for c in [current, *broken] if c.requests]
            if not pending:
                continue
            connection = rng.choice(pending)
            if connection is not current and rng.random() < 0.1:
                connection.requests.clear()  # the broker closed it: the rest is never processed
                continue
            i = connection.requests.pop(0)
            outcome, first_offset = leader.produce(batches[i])
            connection.answers.append((i, outcome, first_offset))
            if rng.random() < 0.02:
                leader.fail_over()
                broken.append(current)  # the client reconnects to the new leader
                current, next_to_send = Connection(), oldest
            continue
        if current.answers:  # the client reads the head answer of its connection
            i, outcome, first_offset = current.answers.pop(0)
            if outcome == "ok":
                assert acked.get(i, first_offset) == first_offset, (
                    f"seed {seed}: batch {i} acked at {acked.get(i)} and {first_offset}"
                )
                acked[i] = first_offset
            else:  # refused: retried on a new connection from the oldest unacked batch
                broken.append(current)
                current, next_to_send = Connection(), oldest
            continue
        # Idle only with every batch it ever sent acknowledged: a retry comes within the client's
        # delivery.timeout.ms, far below producer.id.expiration.ms (storage.producer_state).
        in_flight = current.requests or any(c.requests for c in broken)
        if not in_flight and ever_sent == len(acked) < BATCHES and rng.random() < 0.2:
            expiries += leader.idle_until_expired()
    logged = [b for b, _, _ in leader.log]
    assert logged == history + batches, f"seed {seed}: log is not each batch once in order"
    for i, first_offset in acked.items():
        assert leader.log[len(history) + i][1] == first_offset, (
            f"seed {seed}: batch {i} acked at {first_offset}"
        )
    return leader.duplicates, expiries


@pytest.mark.parametrize("start_sequence", [0, INT32_MAX - 100], ids=["from-zero", "wrapping"])
def test_exactly_once_in_order_under_retries_and_reconnects(request: pytest.FixtureRequest, start_sequence):
    totals = [run(seed, start_sequence) for seed in seed_range(request.config, 40)]
    if len(totals) >= 40:  # the default run: the faults that matter happened
        assert sum(d for d, _ in totals) > 0, "no retry was ever answered as a duplicate"
        assert sum(e for _, e in totals) > 0, "no producer state ever expired"
