"""The producer's record accumulator (pykraft/accumulator.py): batch.size, linger.ms, drain per leader,
max.in.flight per partition, retries in sequence order, delivery timeout."""

from __future__ import annotations

import random

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from proto.errors import ErrorCode
from pykraft.accumulator import (
    BATCH_HEADER_BYTES,
    NO_LEADER,
    AccumulatorConfig,
    FailureAction,
    MessageTooLargeError,
    RecordAccumulator,
    TopicPartition,
    record_size,
    varint_size,
)
from storage.record_batch import build_batch, decode_records

T0, T1, U0 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)
LEADERS = {T0: 101, T1: 102, U0: 101}


def leader_of(tp: TopicPartition) -> int:
    return LEADERS.get(tp, NO_LEADER)


def by_leader(acc: RecordAccumulator) -> dict[int, list[TopicPartition]]:
    out: dict[int, list[TopicPartition]] = {}
    for tp in acc.queued_partitions():
        out.setdefault(leader_of(tp), []).append(tp)
    return out


def accumulator(**overrides: int) -> RecordAccumulator:
    return RecordAccumulator(AccumulatorConfig(**{"batch_size": 1_000, "linger_ms": 10, **overrides}))


@pytest.mark.parametrize("value", [0, 1, -1, 63, 64, -64, -65, 8191, 8192, 1 << 40, -(1 << 62)])
def test_varint_size_matches_encoder(value: int) -> None:
    from storage.varint import encode_varint

    assert varint_size(value) == len(encode_varint(value))


def test_batch_size_is_exact_for_uncompressed_v2() -> None:
    """The accumulator's size is the encoded size of the batch (ours and kafka-python's), so batch.size
    and max.request.size hold on the wire."""
    rng = random.Random(5)
    acc = RecordAccumulator(AccumulatorConfig(batch_size=1 << 20, linger_ms=0))
    for i in range(200):
        key = None if i % 7 == 0 else rng.randbytes(rng.randint(0, 40))
        value = None if i % 11 == 0 else rng.randbytes(rng.randint(0, 300))
        headers = [("h", rng.randbytes(3)), ("trace-id", None)] if i % 5 == 0 else []
        acc.append(T0, key, value, headers, 1_700_000_000_000 + rng.randint(-5_000, 5_000), 0)
    [batch] = acc.drain({101: [T0]}, 0)[101]
    encoded = build_batch([(r.key, r.value, r.headers, r.timestamp_ms) for r in batch.records])
    assert batch.size_bytes == len(encoded)
    assert [(r.key, r.value) for r in decode_records(encoded)] == [(r.key, r.value) for r in batch.records]
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 21)
    for delta, r in enumerate(batch.records):
        builder.append(delta, r.timestamp_ms, r.key, r.value, [(k, v) for k, v in r.headers])
    assert batch.size_bytes == len(builder.build())


def test_linger_then_ready() -> None:
    """linger.ms: a batch that is not full becomes sendable linger.ms after it was opened."""
    acc = accumulator()
    acc.append(T0, b"k", b"v", (), 0, now_ms=100)
    check = acc.ready(105, leader_of)
    assert check.ready_leaders == frozenset() and check.next_ready_check_ms == 110
    assert acc.drain(by_leader(acc), 105) == {}
    assert acc.ready(110, leader_of).ready_leaders == {101}
    [batch] = acc.drain(by_leader(acc), 110)[101]
    assert len(batch.records) == 1 and batch.attempts == 1


def test_full_batch_is_ready_at_once_and_oversized_record_gets_its_own() -> None:
    """batch.size: a batch closes when the next record would not fit; a bigger record travels alone."""
    acc = accumulator(batch_size=200)
    results = [acc.append(T0, None, b"x" * 50, (), 0, 0) for _ in range(4)]
    assert [r.new_batch for r in results] == [True, False, True, False]  # 61 + 2 x 57 bytes fit in 200
    assert acc.ready(0, leader_of).ready_leaders == {101}  # the first batch is closed: sendable now
    big = acc.append(T0, None, b"y" * 500, (), 0, 0)
    assert big.new_batch and big.record_index == 0
    acc.invariants()


def test_record_larger_than_max_request_size_is_refused() -> None:
    acc = accumulator(max_request_size=1_000)
    with pytest.raises(MessageTooLargeError, match=r"max\.request\.size=1000"):
        acc.append(T0, None, b"z" * 1_000, (), 0, 0)
    assert acc.incomplete_batches == 0


def test_drain_one_batch_per_partition_per_request_within_max_request_size() -> None:
    acc = accumulator(batch_size=300, max_request_size=700, linger_ms=0)
    for tp in (T0, U0):
        for _ in range(6):
            acc.append(tp, None, b"v" * 90, (), 0, 0)
    drained = acc.drain({101: [T0, U0]}, 0)
    assert [b.topic_partition for b in drained[101]] == [T0, U0]  # one each, though more are queued
    assert sum(b.size_bytes for b in drained[101]) <= 700
    acc.invariants()


def test_max_in_flight_mutes_the_partition_until_completed() -> None:
    """max.in.flight per partition = 1: the next batch waits until the previous one is answered."""
    acc = accumulator(linger_ms=0, batch_size=100)
    for _ in range(3):
        acc.append(T0, None, b"v" * 60, (), 0, 0)
    [first] = acc.drain(by_leader(acc), 0)[101]
    assert acc.ready(0, leader_of).ready_leaders == frozenset()
    assert acc.drain(by_leader(acc), 0) == {}
    acc.complete(first.batch_id)
    [second] = acc.drain(by_leader(acc), 0)[101]
    assert second.sequence == first.sequence + 1


def test_two_in_flight() -> None:
    acc = accumulator(linger_ms=0, batch_size=100, max_in_flight_per_partition=2)
    for _ in range(3):
        acc.append(T0, None, b"v" * 60, (), 0, 0)
    first = acc.drain(by_leader(acc), 0)[101]
    second = acc.drain(by_leader(acc), 0)[101]
    assert acc.drain(by_leader(acc), 0) == {}
    assert [b.sequence for b in first + second] == [0, 1]
    acc.invariants()


def test_retriable_failure_requeues_in_sequence_order_after_backoff() -> None:
    """A retriable error (NOT_LEADER_OR_FOLLOWER) re-queues the batch ahead of later batches of its
    partition, sendable after retry.backoff.ms; ordering is preserved."""
    acc = accumulator(linger_ms=0, batch_size=100, retry_backoff_ms=50)
    for _ in range(2):
        acc.append(T0, None, b"v" * 60, (), 0, 0)
    [first] = acc.drain(by_leader(acc), 0)[101]
    failure = acc.fail(first.batch_id, ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved", now_ms=10)
    assert failure.action is FailureAction.RETRY
    check = acc.ready(20, leader_of)
    assert check.ready_leaders == frozenset() and check.next_ready_check_ms == 60
    [again] = acc.drain(by_leader(acc), 60)[101]
    assert again.batch_id == first.batch_id and again.attempts == 2
    acc.complete(again.batch_id)
    [second] = acc.drain(by_leader(acc), 60)[101]
    assert second.sequence == 1
    acc.invariants()


@pytest.mark.parametrize(
    ("code", "retries", "now_ms", "action"),
    [
        (ErrorCode.NOT_ENOUGH_REPLICAS, 5, 10, FailureAction.RETRY),
        (ErrorCode.REQUEST_TIMED_OUT, 5, 10, FailureAction.RETRY),
        (ErrorCode.MESSAGE_TOO_LARGE, 5, 10, FailureAction.FAIL),
        (ErrorCode.CORRUPT_MESSAGE, 0, 10, FailureAction.FAIL),
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, 5, 200_000, FailureAction.FAIL),
    ],
    ids=["retriable", "timed-out-retriable", "not-retriable", "no-retries-left", "past-delivery-timeout"],
)
def test_failure_action(code: ErrorCode, retries: int, now_ms: int, action: FailureAction) -> None:
    acc = accumulator(linger_ms=0, retries=retries)
    acc.append(T0, None, b"v", (), 0, 0)
    [batch] = acc.drain(by_leader(acc), 0)[101]
    assert acc.fail(batch.batch_id, code, "why", now_ms).action is action


def test_unknown_leader_reported_and_delivery_timeout() -> None:
    acc = accumulator(linger_ms=0, delivery_timeout_ms=1_000)
    orphan = TopicPartition("nobody", 0)
    acc.append(orphan, None, b"v", (), 0, 0)
    check = acc.ready(0, leader_of)
    assert check.unknown_leader_partitions == {orphan} and check.ready_leaders == frozenset()
    assert acc.expire(999) == []
    [expired] = acc.expire(1_000)
    assert expired.topic_partition == orphan and acc.incomplete_batches == 0


def test_flush_ignores_linger() -> None:
    acc = accumulator(linger_ms=10_000)
    acc.append(T1, None, b"v", (), 0, 0)
    assert acc.ready(1, leader_of).ready_leaders == frozenset()
    acc.begin_flush()
    assert acc.ready(1, leader_of).ready_leaders == {102}
    acc.end_flush()


@pytest.mark.parametrize("seed", range(8), ids=lambda s: f"seed{s}")
def test_ordering_preserved_across_random_retriable_failures(seed: int) -> None:
    """With max.in.flight=1 each partition's log gets every record exactly once, in send order, whatever
    retriable errors (before append) the leader answers."""
    rng = random.Random(seed)
    acc = accumulator(linger_ms=2, batch_size=120, retry_backoff_ms=3)
    logs: dict[TopicPartition, list[bytes]] = {T0: [], T1: [], U0: []}
    sent: dict[TopicPartition, list[bytes]] = {tp: [] for tp in logs}
    in_flight: list = []
    now = 0
    for step in range(400):
        now += 1
        if step < 300 and rng.random() < 0.6:
            tp = rng.choice(list(logs))
            value = f"{tp.topic}{tp.partition}-{step}".encode()
            acc.append(tp, None, value, (), now, now)
            sent[tp].append(value)
        if acc.ready(now, leader_of).ready_leaders:
            for batches in acc.drain(by_leader(acc), now).values():
                in_flight.extend(batches)
        rng.shuffle(in_flight)  # answers from different leaders arrive in any order
        while in_flight and rng.random() < 0.5:
            batch = in_flight.pop()
            if rng.random() < 0.3:
                acc.fail(batch.batch_id, ErrorCode.NOT_LEADER_OR_FOLLOWER, "leader moved", now)
            else:
                logs[batch.topic_partition].extend(r.value for r in batch.records)
                acc.complete(batch.batch_id)
        acc.invariants()
    while acc.incomplete_batches:
        now += 10
        acc.begin_flush()
        for batches in acc.drain(by_leader(acc), now).values():
            in_flight.extend(batches)
        for batch in in_flight:
            logs[batch.topic_partition].extend(r.value for r in batch.records)
            acc.complete(batch.batch_id)
        in_flight.clear()
    assert logs == sent
    assert BATCH_HEADER_BYTES == 61


def test_record_exactly_at_max_request_size_is_accepted() -> None:
    """The size check is exact at the boundary (the fast bound only decides far from it)."""
    value = b"z" * 900
    exact = BATCH_HEADER_BYTES + record_size(0, 0, None, value, ())
    acc = accumulator(max_request_size=exact)
    acc.append(T0, None, value, (), 0, 0)
    with pytest.raises(MessageTooLargeError):
        accumulator(max_request_size=exact - 1).append(T0, None, value, (), 0, 0)


def test_sequence_reset_waits_for_in_flight_then_renumbers_from_zero() -> None:
    """Idempotence (KIP-360): a sequenced batch failing for good requests a reset; nothing is drained
    until every in-flight batch is answered; then every partition restarts at sequence 0 and queued
    retries lose their old base sequence."""
    acc = accumulator(linger_ms=0, batch_size=100, max_in_flight_per_partition=5, idempotent=True)
    for tp in (T0, T0, T0, T1):
        acc.append(tp, None, b"v" * 60, (), 0, 0)
    first = acc.drain(by_leader(acc), 0)
    a, b = first[101][0], first[102][0]
    [c] = acc.drain(by_leader(acc), 0)[101]
    assert (a.base_sequence, c.base_sequence, b.base_sequence) == (0, 1, 0)
    assert acc.fail(a.batch_id, ErrorCode.MESSAGE_TOO_LARGE, "too big", 1).action is FailureAction.FAIL
    assert acc.sequence_reset_pending and not acc.sequence_reset_due()
    assert acc.ready(1, leader_of).ready_leaders == frozenset() and acc.drain(by_leader(acc), 1) == {}
    acc.fail(c.batch_id, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "gap", 1, retriable=True)
    acc.complete(b.batch_id)
    assert acc.sequence_reset_due()
    acc.reset_sequences()
    acc.invariants()
    assert not acc.sequence_reset_pending and c.base_sequence == -1
    drained = acc.drain(by_leader(acc), 200)[101]
    assert [(x.batch_id, x.base_sequence) for x in drained] == [(c.batch_id, 0)]
    acc.complete(c.batch_id)
    [d] = acc.drain(by_leader(acc), 200)[101]
    assert d.base_sequence == 1


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
def test_only_a_sequenced_batch_failing_requests_a_reset(idempotent: bool) -> None:
    """A batch never drained has no sequence: its expiry leaves no hole. A sent one that expires in
    the retry queue does (only when idempotent)."""
    acc = accumulator(linger_ms=0, delivery_timeout_ms=1_000, retry_backoff_ms=5_000, idempotent=idempotent)
    leaderless = TopicPartition("nobody", 0)
    acc.append(leaderless, None, b"v", (), 0, 0)
    assert [b.topic_partition for b in acc.expire(1_000)] == [leaderless]
    assert not acc.sequence_reset_pending
    acc.append(T0, None, b"v", (), 1_000, 1_000)
    [sent] = acc.drain(by_leader(acc), 1_000)[101]
    failure = acc.fail(sent.batch_id, ErrorCode.NOT_ENOUGH_REPLICAS, "retry", 1_001)
    assert failure.action is FailureAction.RETRY
    assert not acc.sequence_reset_pending
    assert acc.expire(2_000) == [sent]
    assert acc.sequence_reset_pending is idempotent


def test_base_sequence_wraps_past_int32_max_like_kafka() -> None:
    """KIP-98: sequences are int32 and wrap to 0 (Kafka's incrementSequence); the batch after one
    ending at INT32_MAX starts at 0. (2^31 records are not sent: the counter is set near the end.)"""
    acc = accumulator(linger_ms=0, batch_size=150, idempotent=True)
    acc._next_record_sequence[T0] = 2**31 - 2
    for _ in range(4):  # two records per batch
        acc.append(T0, None, b"v" * 30, (), 0, 0)
    [first] = acc.drain(by_leader(acc), 0)[101]
    acc.complete(first.batch_id)
    [second] = acc.drain(by_leader(acc), 0)[101]
    assert (first.base_sequence, len(first.records), second.base_sequence) == (2**31 - 2, 2, 0)
