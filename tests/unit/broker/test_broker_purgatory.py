"""Delayed produce and fetch (broker/purgatory.py), driven through real Partition checks where they apply."""

from __future__ import annotations

import pytest

from broker.partition import Partition, ProduceCheck
from broker.purgatory import (
    CompletedFetch,
    FetchCompletion,
    FetchPurgatory,
    FetchReadiness,
    ProduceOutcome,
    ProducePurgatory,
    ProduceWait,
    TopicPartition,
)
from proto.errors import ErrorCode

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
LEADER, F1 = 1, 2


def leader_partition(tp: TopicPartition) -> Partition:
    p = Partition(tp.topic, tp.partition, LEADER, replica_lag_time_max_ms=1_000, min_insync_replicas=2)
    p.become_leader(5, 1, (LEADER, F1), (LEADER, F1), 10, 0, 0)
    return p


@pytest.fixture
def partitions() -> dict[TopicPartition, Partition]:
    return {T0: leader_partition(T0), T1: leader_partition(T1)}


def produce_check(partitions: dict[TopicPartition, Partition]):
    def check(tp: TopicPartition, required_offset: int, leader_epoch: int) -> ProduceCheck:
        return partitions[tp].check_enough_replicas_reach_offset(required_offset, leader_epoch)

    return check


def follower_fetched(p: Partition, offset: int, now_ms: int = 1) -> None:
    p.update_follower_fetch_state(F1, offset, p.log_end_offset, now_ms)
    p.maybe_increment_high_watermark()


def test_produce_completes_when_every_partition_hw_passes(partitions) -> None:
    """acks=all is answered when the HW passes the batch, on every partition of the request."""
    purgatory = ProducePurgatory()
    check = produce_check(partitions)
    waits = {T0: ProduceWait(10, 5), T1: ProduceWait(8, 5)}
    assert purgatory.try_complete_else_watch(1, 500, waits, check) is None
    follower_fetched(partitions[T0], 10)
    assert purgatory.check_and_complete(T0, check) == []  # T1 still waits
    purgatory.invariants()
    follower_fetched(partitions[T1], 7)
    assert purgatory.check_and_complete(T1, check) == []  # HW 7 < 8
    follower_fetched(partitions[T1], 9)
    [done] = purgatory.check_and_complete(T1, check)
    assert done.operation_id == 1
    assert {tp: o.code for tp, o in done.outcomes.items()} == {T0: ErrorCode.NONE, T1: ErrorCode.NONE}
    assert len(purgatory) == 0 and purgatory.next_deadline_ms() is None
    purgatory.invariants()


def test_produce_already_satisfied_completes_at_once(partitions) -> None:
    follower_fetched(partitions[T0], 10)
    purgatory = ProducePurgatory()
    done = purgatory.try_complete_else_watch(
        1,
        500,
        {T0: ProduceWait(10, 5)},
        produce_check(partitions),
        {T1: ProduceOutcome(ErrorCode.CORRUPT_MESSAGE)},
    )
    assert done is not None
    assert {tp: o.code for tp, o in done.outcomes.items()} == {
        T0: ErrorCode.NONE,
        T1: ErrorCode.CORRUPT_MESSAGE,
    }
    assert len(purgatory) == 0


def test_produce_times_out_with_request_timed_out(partitions) -> None:
    """A produce still waiting at its deadline gets REQUEST_TIMED_OUT for the waiting partitions only."""
    purgatory = ProducePurgatory()
    check = produce_check(partitions)
    purgatory.try_complete_else_watch(1, 500, {T0: ProduceWait(10, 5), T1: ProduceWait(10, 5)}, check)
    purgatory.try_complete_else_watch(2, 900, {T0: ProduceWait(10, 5)}, check)
    follower_fetched(partitions[T1], 10)
    assert purgatory.check_and_complete(T1, check) == []
    assert purgatory.next_deadline_ms() == 500
    assert purgatory.expire(499) == []
    [done] = purgatory.expire(500)
    assert done.operation_id == 1
    assert done.outcomes[T0].code == ErrorCode.REQUEST_TIMED_OUT and "before the request timeout" in (
        done.outcomes[T0].message
    )
    assert done.outcomes[T1].code == ErrorCode.NONE
    assert purgatory.next_deadline_ms() == 900
    purgatory.invariants()


def test_produce_fails_on_leadership_loss(partitions) -> None:
    """Leadership lost before the HW passed the batch: NOT_LEADER_OR_FOLLOWER."""
    purgatory = ProducePurgatory()
    check = produce_check(partitions)
    purgatory.try_complete_else_watch(1, 500, {T0: ProduceWait(10, 5)}, check)
    partitions[T0].become_follower(F1, 6, 2, (F1,), (LEADER, F1), 10, 0)
    [done] = purgatory.check_and_complete(T0, check)
    assert done.outcomes[T0].code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_produce_after_isr_shrank_below_min(partitions) -> None:
    """HW passed the batch but the ISR shrank below min.insync.replicas: NOT_ENOUGH_REPLICAS_AFTER_APPEND."""
    purgatory = ProducePurgatory()
    check = produce_check(partitions)
    purgatory.try_complete_else_watch(1, 500, {T0: ProduceWait(10, 5)}, check)
    p = partitions[T0]
    p.become_leader(5, 2, (LEADER,), (LEADER, F1), 10, 0, 0)  # the controller shrank the ISR
    p.maybe_increment_high_watermark()
    [done] = purgatory.check_and_complete(T0, check)
    assert done.outcomes[T0].code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_produce_operation_ids_are_unique(partitions) -> None:
    purgatory = ProducePurgatory()
    purgatory.try_complete_else_watch(1, 500, {T0: ProduceWait(10, 5)}, produce_check(partitions))
    with pytest.raises(AssertionError, match="already parked"):
        purgatory.try_complete_else_watch(1, 500, {T0: ProduceWait(10, 5)}, produce_check(partitions))


class Readable:
    """A fake log view: readable bytes per partition beyond the fetch offset."""

    def __init__(self) -> None:
        self.bytes: dict[TopicPartition, int] = {T0: 0, T1: 0}
        self.changed: set[TopicPartition] = set()

    def __call__(self, tp: TopicPartition, fetch_offset: int) -> FetchReadiness:
        return FetchReadiness(self.bytes[tp], complete_now=tp in self.changed)


@pytest.mark.parametrize(
    ("t0", "t1", "changed", "expected"),
    [
        (0, 0, set(), None),
        (60, 0, set(), None),
        (60, 40, set(), FetchCompletion.ENOUGH_BYTES),
        (0, 0, {T1}, FetchCompletion.PARTITION_CHANGED),
    ],
    ids=["nothing", "not-enough", "enough-across-partitions", "partition-changed"],
)
def test_fetch_readiness(t0: int, t1: int, changed: set, expected: FetchCompletion | None) -> None:
    """A fetch completes when min_bytes are readable summed over its partitions, or one must answer now."""
    readable = Readable()
    readable.bytes = {T0: t0, T1: t1}
    readable.changed = changed
    done = FetchPurgatory().try_complete_else_watch(7, 500, 100, {T0: 0, T1: 0}, readable)
    assert (done.reason if done else None) == expected


def test_fetch_woken_by_hw_move_then_forgotten() -> None:
    purgatory = FetchPurgatory()
    readable = Readable()
    assert purgatory.try_complete_else_watch(7, 500, 100, {T0: 3, T1: 0}, readable) is None
    assert purgatory.try_complete_else_watch(8, 400, 1, {T1: 0}, readable) is None
    readable.bytes[T0] = 150
    assert purgatory.check_and_complete(T0, readable) == [CompletedFetch(7, FetchCompletion.ENOUGH_BYTES)]
    assert purgatory.check_and_complete(T0, readable) == []
    assert len(purgatory) == 1
    purgatory.invariants()


def test_fetch_expires_at_max_wait() -> None:
    purgatory = FetchPurgatory()
    readable = Readable()
    purgatory.try_complete_else_watch(7, 500, 100, {T0: 0}, readable)
    purgatory.try_complete_else_watch(8, 300, 100, {T1: 0}, readable)
    assert purgatory.next_deadline_ms() == 300
    assert purgatory.expire(300) == [CompletedFetch(8, FetchCompletion.TIMED_OUT)]
    assert purgatory.expire(1_000) == [CompletedFetch(7, FetchCompletion.TIMED_OUT)]
    assert len(purgatory) == 0 and purgatory.next_deadline_ms() is None
    purgatory.invariants()
