"""The generic purgatory and its two operations, delayed produce and delayed fetch
(broker/replica/delayed.py), through real Partition checks where they apply."""

from __future__ import annotations

import pytest

from broker.replica.delayed import (
    DelayedFetch,
    DelayedOperation,
    DelayedOperationPurgatory,
    DelayedProduce,
    FetchReadiness,
    ProduceWait,
)
from broker.replica.partition import Partition, ProduceCheck
from proto.errors import ApiError, ErrorCode

T0, T1 = ("t", 0), ("t", 1)
LEADER, F1 = 1, 2


def leader_partition(tp: tuple[str, int]) -> Partition:
    p = Partition(tp[0], tp[1], LEADER, replica_lag_time_max_ms=1_000, min_insync_replicas=2)
    p.become_leader(5, 1, (LEADER, F1), (LEADER, F1), 10, 0, 0)
    return p


@pytest.fixture
def partitions() -> dict[tuple[str, int], Partition]:
    return {T0: leader_partition(T0), T1: leader_partition(T1)}


class Answers:
    """Records what each operation answered, by name, in answer order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, dict]] = []

    def produce(self, name: str):
        return lambda outcomes: self.log.append((name, {tp: o.code for tp, o in outcomes.items()}))

    def fetch(self, name: str):
        return lambda: self.log.append((name, {}))

    def names(self) -> list[str]:
        return [name for name, _ in self.log]


def delayed_produce(partitions, answers: Answers, name: str, deadline_ms: int, waits, already_done=None):
    def check(tp, required_offset: int, leader_epoch: int) -> ProduceCheck:
        return partitions[tp].check_enough_replicas_reach_offset(required_offset, leader_epoch)

    return DelayedProduce(deadline_ms, waits, check, answers.produce(name), already_done)


def follower_fetched(p: Partition, offset: int, now_ms: int = 1) -> None:
    p.update_follower_fetch_state(F1, offset, p.log_end_offset, now_ms)
    p.maybe_increment_high_watermark(now_ms)


def test_produce_completes_when_every_partition_hw_passes(partitions) -> None:
    """acks=all is answered when the HW passes the batch, on every partition of the request."""
    purgatory, answers = DelayedOperationPurgatory(), Answers()
    op = delayed_produce(partitions, answers, "p", 500, {T0: ProduceWait(10, 5), T1: ProduceWait(8, 5)})
    assert not purgatory.try_complete_else_watch(op)
    follower_fetched(partitions[T0], 10)
    assert purgatory.check_and_complete(T0) == 0  # T1 still waits
    assert op.keys() == [T1], "a done partition is no longer watched"
    purgatory.invariants()
    follower_fetched(partitions[T1], 7)
    assert purgatory.check_and_complete(T1) == 0  # HW 7 < 8
    follower_fetched(partitions[T1], 9)
    assert purgatory.check_and_complete(T1) == 1
    assert answers.log == [("p", {T0: ErrorCode.NONE, T1: ErrorCode.NONE})]
    assert len(purgatory) == 0 and purgatory.next_deadline_ms() is None
    purgatory.invariants()


def test_produce_already_satisfied_completes_at_once(partitions) -> None:
    follower_fetched(partitions[T0], 10)
    purgatory, answers = DelayedOperationPurgatory(), Answers()
    op = delayed_produce(
        partitions,
        answers,
        "p",
        500,
        {T0: ProduceWait(10, 5)},
        {T1: ApiError(ErrorCode.CORRUPT_MESSAGE)},
    )
    assert purgatory.try_complete_else_watch(op)
    assert answers.log == [("p", {T1: ErrorCode.CORRUPT_MESSAGE, T0: ErrorCode.NONE})]
    assert len(purgatory) == 0


def test_produce_times_out_with_request_timed_out(partitions) -> None:
    """A produce still waiting at its deadline gets REQUEST_TIMED_OUT for the waiting partitions only."""
    purgatory, answers = DelayedOperationPurgatory(), Answers()
    first = delayed_produce(partitions, answers, "1", 500, {T0: ProduceWait(10, 5), T1: ProduceWait(10, 5)})
    purgatory.try_complete_else_watch(first)
    purgatory.try_complete_else_watch(
        delayed_produce(partitions, answers, "2", 900, {T0: ProduceWait(10, 5)})
    )
    follower_fetched(partitions[T1], 10)
    assert purgatory.check_and_complete(T1) == 0
    assert purgatory.next_deadline_ms() == 500
    assert purgatory.expire(499) == 0
    assert purgatory.expire(500) == 1
    assert answers.log == [("1", {T1: ErrorCode.NONE, T0: ErrorCode.REQUEST_TIMED_OUT})]
    assert "before the request timeout" in first.outcomes[T0].message
    assert purgatory.next_deadline_ms() == 900
    purgatory.invariants()


def test_produce_fails_on_leadership_loss(partitions) -> None:
    """Leadership lost before the HW passed the batch: NOT_LEADER_OR_FOLLOWER."""
    purgatory, answers = DelayedOperationPurgatory(), Answers()
    purgatory.try_complete_else_watch(
        delayed_produce(partitions, answers, "p", 500, {T0: ProduceWait(10, 5)})
    )
    partitions[T0].become_follower(F1, 6, 2, (F1,), (LEADER, F1), 10, 0)
    assert purgatory.check_and_complete(T0) == 1
    assert answers.log == [("p", {T0: ErrorCode.NOT_LEADER_OR_FOLLOWER})]


def test_produce_after_isr_shrank_below_min(partitions) -> None:
    """HW passed the batch but the ISR shrank below min.insync.replicas before the produce was checked
    again: NOT_ENOUGH_REPLICAS_AFTER_APPEND."""
    purgatory, answers = DelayedOperationPurgatory(), Answers()
    purgatory.try_complete_else_watch(
        delayed_produce(partitions, answers, "p", 500, {T0: ProduceWait(10, 5)})
    )
    p = partitions[T0]
    follower_fetched(p, 10)
    assert p.high_watermark == 10
    p.become_leader(5, 2, (LEADER,), (LEADER, F1), 10, 10, 2)  # the controller shrank the ISR
    assert purgatory.check_and_complete(T0) == 1
    assert answers.log == [("p", {T0: ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND})]


def test_produce_waits_while_isr_below_min(partitions) -> None:
    """KAFKA-15583: with the ISR below min.insync.replicas the HW does not move, so a parked acks=all
    produce is not answered (not even NOT_ENOUGH_REPLICAS_AFTER_APPEND) until it times out or the ISR
    grows back."""
    purgatory, answers = DelayedOperationPurgatory(), Answers()
    purgatory.try_complete_else_watch(
        delayed_produce(partitions, answers, "p", 500, {T0: ProduceWait(10, 5)})
    )
    p = partitions[T0]
    p.become_leader(5, 2, (LEADER,), (LEADER, F1), 10, 0, 0)  # the controller shrank the ISR
    assert p.maybe_increment_high_watermark(1) is None and p.high_watermark == 0
    assert purgatory.check_and_complete(T0) == 0
    assert purgatory.expire(500) == 1
    assert answers.log == [("p", {T0: ErrorCode.REQUEST_TIMED_OUT})]


class Readable:
    """A fake log view: readable bytes per partition beyond the fetch offset."""

    def __init__(self) -> None:
        self.bytes: dict[tuple[str, int], int] = {T0: 0, T1: 0}
        self.changed: set[tuple[str, int]] = set()

    def __call__(self, tp: tuple[str, int], fetch_offset: int) -> FetchReadiness:
        return FetchReadiness(self.bytes[tp], complete_now=tp in self.changed)


@pytest.mark.parametrize(
    ("t0", "t1", "changed", "completes"),
    [
        (0, 0, set(), False),
        (60, 0, set(), False),
        (60, 40, set(), True),
        (0, 0, {T1}, True),
    ],
    ids=["nothing", "not-enough", "enough-across-partitions", "partition-changed"],
)
def test_fetch_readiness(t0: int, t1: int, changed: set, completes: bool) -> None:
    """A fetch completes when min_bytes are readable summed over its partitions, or one must answer now."""
    readable = Readable()
    readable.bytes = {T0: t0, T1: t1}
    readable.changed = changed
    answers = Answers()
    op = DelayedFetch(500, 100, {T0: 0, T1: 0}, readable, answers.fetch("f"))
    assert DelayedOperationPurgatory().try_complete_else_watch(op) is completes
    assert answers.names() == (["f"] if completes else [])


def test_fetch_woken_by_hw_move_then_forgotten() -> None:
    purgatory, readable, answers = DelayedOperationPurgatory(), Readable(), Answers()
    assert not purgatory.try_complete_else_watch(
        DelayedFetch(500, 100, {T0: 3, T1: 0}, readable, answers.fetch("7"))
    )
    assert not purgatory.try_complete_else_watch(DelayedFetch(400, 1, {T1: 0}, readable, answers.fetch("8")))
    readable.bytes[T0] = 150
    assert purgatory.check_and_complete(T0) == 1
    assert purgatory.check_and_complete(T0) == 0
    assert answers.names() == ["7"] and len(purgatory) == 1
    purgatory.invariants()


def test_complete_all_answers_every_watcher_without_asking() -> None:
    """A new leadership answers what was parked on the old role, ready or not (complete_all)."""
    purgatory, readable, answers = DelayedOperationPurgatory(), Readable(), Answers()
    purgatory.try_complete_else_watch(DelayedFetch(500, 100, {T0: 0}, readable, answers.fetch("a")))
    purgatory.try_complete_else_watch(DelayedFetch(500, 100, {T0: 0, T1: 0}, readable, answers.fetch("b")))
    purgatory.try_complete_else_watch(DelayedFetch(500, 100, {T1: 0}, readable, answers.fetch("c")))
    assert purgatory.complete_all(T0) == 2
    assert answers.names() == ["a", "b"] and len(purgatory) == 1
    purgatory.invariants()


def test_fetch_expires_at_max_wait() -> None:
    purgatory, readable, answers = DelayedOperationPurgatory(), Readable(), Answers()
    purgatory.try_complete_else_watch(DelayedFetch(500, 100, {T0: 0}, readable, answers.fetch("7")))
    purgatory.try_complete_else_watch(DelayedFetch(300, 100, {T1: 0}, readable, answers.fetch("8")))
    assert purgatory.next_deadline_ms() == 300
    assert purgatory.expire(300) == 1 and answers.names() == ["8"]
    assert purgatory.expire(1_000) == 1 and answers.names() == ["8", "7"]
    assert len(purgatory) == 0 and purgatory.next_deadline_ms() is None
    purgatory.invariants()


class Reentrant(DelayedOperation[str]):
    """Completes when told to; its answer re-enters the purgatory (as a follower fetch's read does)."""

    def __init__(self, name: str, keys: list[str], on_complete) -> None:
        super().__init__(1_000)
        self.name, self._keys, self.ready, self._on_complete = name, keys, False, on_complete

    def keys(self) -> list[str]:
        return self._keys

    def try_complete(self, key: str | None) -> bool:
        return self.ready

    def on_complete(self) -> None:
        self._on_complete(self)


def test_completion_is_exactly_once_even_when_an_answer_re_enters() -> None:
    """Every operation a call completes leaves the purgatory before any answer runs, so an answer that
    checks the same key again (the HW-moving follower fetch completing a produce in the same call)
    never completes an operation twice."""
    purgatory: DelayedOperationPurgatory[str] = DelayedOperationPurgatory()
    answered: list[str] = []

    def answer(op: Reentrant) -> None:
        answered.append(op.name)
        purgatory.check_and_complete("k")  # re-enter: the other completed one must not answer again

    a, b = Reentrant("a", ["k"], answer), Reentrant("b", ["k", "j"], answer)
    purgatory.try_complete_else_watch(a)
    purgatory.try_complete_else_watch(b)
    a.ready = b.ready = True
    assert purgatory.check_and_complete("k") == 2
    assert answered == ["a", "b"] and len(purgatory) == 0
    assert purgatory.check_and_complete("j") == 0
    purgatory.invariants()


def test_an_answer_that_fails_does_not_strand_the_others() -> None:
    """One completed operation whose answer raises (a segment read failing) must not leave the others of
    the same call unanswered: each is answered, then the failure goes up to the driver's caller."""
    purgatory: DelayedOperationPurgatory[str] = DelayedOperationPurgatory()
    answered: list[str] = []

    def answer(op: Reentrant) -> None:
        if op.name == "a":
            raise OSError("read failed")
        answered.append(op.name)

    ops = [Reentrant(name, ["k"], answer) for name in ("a", "b", "c")]
    for op in ops:
        purgatory.try_complete_else_watch(op)
        op.ready = True
    with pytest.raises(OSError, match="read failed"):
        purgatory.check_and_complete("k")
    assert answered == ["b", "c"] and len(purgatory) == 0
    purgatory.invariants()


def test_an_operation_watching_nothing_waits_for_its_deadline() -> None:
    """A follower's incremental fetch whose session holds no partition (it follows nothing from this
    leader any more) is parked until max_wait, not refused and not answered at once (which would make
    the follower spin); it crashed the request handler after the purgatory became generic."""
    purgatory: DelayedOperationPurgatory[str] = DelayedOperationPurgatory()
    answered: list[str] = []
    empty = Reentrant("empty", [], lambda op: answered.append(op.name))
    assert not purgatory.try_complete_else_watch(empty)
    assert purgatory.next_deadline_ms() == 1_000 and purgatory.check_and_complete("k") == 0
    purgatory.invariants()
    assert purgatory.expire(999) == 0 and answered == []
    assert purgatory.expire(1_000) == 1 and answered == ["empty"] and len(purgatory) == 0
    purgatory.invariants()
