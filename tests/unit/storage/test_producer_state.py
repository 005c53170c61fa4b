"""storage.producer_state: the leader's dedup rules (KIP-98) and expiry (KIP-854), as tables."""

from __future__ import annotations

import pytest

from proto.errors import ErrorCode
from storage.producer_state import (
    APPEND,
    INT32_MAX,
    BatchMetadata,
    Duplicate,
    ProducerBatch,
    ProducerStateManager,
    Reject,
    next_sequence,
)

PID = 7


def b(seq: int, count: int = 1, epoch: int = 0, pid: int = PID) -> ProducerBatch:
    return ProducerBatch(pid, epoch, seq, count - 1)


def state_with(*batches: ProducerBatch, now_ms: int = 0) -> ProducerStateManager:
    state = ProducerStateManager(expiration_ms=1000)
    offset = 0
    for batch in batches:
        state.update(batch, offset, offset + batch.last_offset_delta, now_ms)
        offset += batch.last_offset_delta + 1
    state.invariants()
    return state


HISTORY = (b(0, 2), b(2, 3), b(5, 1))  # offsets 0-1, 2-4, 5


@pytest.mark.parametrize(
    ("history", "incoming", "expected"),
    [
        ((), b(0), APPEND),
        # Kafka (>= 2.5, KIP-360) accepts any first sequence from a producer it knows no epoch of (its
        # state expired, or it is new): this used to be UNKNOWN_PRODUCER_ID while gRPC could reorder
        # requests; one connection's requests now reach the log in order (broker.kafka.listener).
        ((), b(42), APPEND),
        ((), b(42, epoch=3), APPEND),
        (HISTORY, b(6), APPEND),
        (HISTORY, b(0, 2), Duplicate(0, 1)),
        (HISTORY, b(2, 3), Duplicate(2, 4)),
        (HISTORY, b(5, 1), Duplicate(5, 5)),
        (HISTORY, b(7), Reject(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "")),
        (HISTORY, b(3, 2), Reject(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "")),
        ((b(0, epoch=1),), b(1, epoch=0), Reject(ErrorCode.INVALID_PRODUCER_EPOCH, "")),
        (HISTORY, b(0, epoch=1), APPEND),
        (HISTORY, b(6, epoch=1), Reject(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "")),
        (HISTORY, b(0, pid=PID + 1), APPEND),
        (HISTORY, ProducerBatch(-1, -1, -1, 0), APPEND),
        ((b(INT32_MAX - 1, 2),), b(0), APPEND),
        ((b(INT32_MAX - 1, 2),), b(1), Reject(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "")),
    ],
    ids=[
        "new-producer-seq0",
        "new-producer-not-seq0",
        "new-producer-not-seq0-not-epoch0",
        "in-sequence",
        "duplicate-first",
        "duplicate-middle",
        "duplicate-last",
        "gap",
        "overlap-not-equal",
        "old-epoch",
        "new-epoch-seq0",
        "new-epoch-not-seq0",
        "other-producer",
        "not-idempotent",
        "wrap-to-zero",
        "wrap-gap",
    ],
)
def test_check(history, incoming, expected):
    """Kafka's ProducerAppendInfo: duplicate -> original offsets; gap -> OUT_OF_ORDER; old epoch ->
    INVALID_PRODUCER_EPOCH; a new epoch of a known producer must start at 0; an unknown producer may
    start anywhere; sequences wrap at INT32_MAX."""
    verdict = state_with(*history).check(incoming)
    if isinstance(expected, Reject):
        assert isinstance(verdict, Reject) and verdict.code == expected.code, verdict
        assert verdict.message
    else:
        assert verdict == expected


@pytest.mark.parametrize(
    ("seq", "inc", "out"),
    [(0, 1, 1), (INT32_MAX, 1, 0), (INT32_MAX - 1, 3, 1)],
    ids=["plain", "wrap", "wrap-3"],
)
def test_next_sequence_wraps(seq, inc, out):
    """Kafka's incrementSequence: past INT32_MAX the sequence continues at 0."""
    assert next_sequence(seq, inc) == out


def test_window_keeps_last_five_batches():
    """Only the last 5 batches are duplicates; an older retry is out of order, never re-appended."""
    state = state_with(*(b(i) for i in range(7)))
    assert len(state.producers[PID].batches) == 5
    assert state.check(b(2)) == Duplicate(2, 2)
    assert isinstance(state.check(b(1)), Reject)


def test_new_epoch_resets_window():
    """A batch of a new epoch replaces the window: the old epoch is now fenced."""
    state = state_with(b(0), b(1), b(0, epoch=1))
    assert state.producers[PID].producer_epoch == 1
    assert state.check(b(1, epoch=1)) == APPEND
    assert state.check(b(2, epoch=0)).code == ErrorCode.INVALID_PRODUCER_EPOCH


@pytest.mark.parametrize(("idle_ms", "expired"), [(999, False), (1000, True)], ids=["young", "old"])
def test_expiry_only_after_idle_period(idle_ms, expired):
    """KIP-854: a producer expires only when its newest batch is expiration_ms old."""
    state = state_with(b(0), now_ms=0)
    assert state.remove_expired(idle_ms) == ([PID] if expired else [])


def test_duplicate_keeps_producer_alive():
    """A retry answered from the window refreshes last_update_ms: a live producer never expires."""
    state = state_with(b(0), now_ms=0)
    state.touch(PID, 900)
    assert state.remove_expired(1500) == []
    assert state.check(b(0)) == Duplicate(0, 0)


def test_idle_producer_comes_back_after_its_state_expired():
    """KIP-854 + Kafka's checkSequence: an idle producer whose state expired sends its next batch at the
    same epoch with sequence N > 0: it is appended (not refused), starts a new window, and a retry of
    it is then a duplicate answered with the original offsets."""
    state = state_with(*HISTORY, now_ms=0)  # epoch 0, sequences 0-5 at offsets 0-5
    assert state.remove_expired(1000) == [PID]
    comeback = b(6, 3)  # the producer's next sequence, as it would send it
    assert state.check(comeback) == APPEND
    state.update(comeback, 6, 8, 1001)
    state.invariants()
    assert state.producers[PID].batches == (BatchMetadata(6, 8, 6, 8),)
    assert state.check(comeback) == Duplicate(6, 8)
    assert state.check(b(9, epoch=0)) == APPEND
    assert state.check(b(10)).code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert state.check(b(3, epoch=1)).code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # known again


def test_check_all_multi_batch_all_or_nothing():
    """Several batches in one request are checked in order; a gap in any rejects them all."""
    state = state_with(b(0))
    assert state.check_all([b(1), b(2)]) == APPEND
    assert isinstance(state.check_all([b(1), b(3)]), Reject)
    assert len(state.producers[PID].batches) == 1


def test_truncate_from_forgets_newer_batches():
    """A follower truncating its log forgets the truncated batches (the retry is appended again)."""
    state = state_with(*HISTORY)
    state.truncate_from(2)
    assert state.check(b(2, 3)) == APPEND
    state.invariants()
