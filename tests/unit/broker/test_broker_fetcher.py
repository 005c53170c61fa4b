"""The follower's fetch state towards one leader (broker/follower/fetcher.py): requests, actions, stale
answers."""

from __future__ import annotations

import pytest

from broker.follower.fetcher import FetchedPartition, FetcherConfig, FetchRequestPartition, ReplicaFetcher
from broker.replica.divergence import EpochEndOffset, EpochEntry
from broker.replica.follower_actions import (
    AppendRecords,
    BackedOff,
    Fenced,
    LocalLogView,
    TruncateFullyAndStartAt,
    TruncateTo,
)
from proto.errors import ErrorCode

TP, TP2 = ("t", 0), ("t", 1)
BACKOFF_MS = 100
LOCAL = LocalLogView((EpochEntry(1, 0), EpochEntry(2, 4)), log_end_offset=7, high_watermark=3)


def fetcher() -> ReplicaFetcher:
    f = ReplicaFetcher(
        leader_id=1, replica_id=2, broker_epoch=40, config=FetcherConfig(fetch_backoff_ms=BACKOFF_MS)
    )
    f.add_partition(TP, 7, 2, 3)
    return f


def ok(**fields) -> FetchedPartition:
    return FetchedPartition(**{"error": ErrorCode.NONE, "high_watermark": 9, "log_start_offset": 0,
                               "log_end_offset": 12, **fields})  # fmt: skip


def test_request_carries_position_epochs_and_broker_epoch() -> None:
    """Follower fetch: fetch offset = local LEO, last fetched epoch, current leader epoch, broker epoch."""
    f = fetcher()
    plan = f.build_request(0)
    assert plan is not None
    assert (plan.leader_id, plan.replica_id, plan.broker_epoch) == (1, 2, 40)
    assert plan.partitions == (FetchRequestPartition(TP, 7, 2, 3),)
    assert f.build_request(0) is None  # one request outstanding at a time


@pytest.mark.parametrize(
    ("fetched", "expected"),
    [
        (ok(records=b"batches"), AppendRecords(TP, b"batches", 9, 0)),
        # KIP-101/KIP-595: truncate by epoch (leader ended epoch 2 at 5), not to the HW (3)
        (ok(diverging_epoch=EpochEndOffset(2, 5)), TruncateTo(TP, 5, "diverging epoch 2 ends at 5")),
        # the leader names epoch 1, which ends at 4 locally too: truncate to 4
        (ok(diverging_epoch=EpochEndOffset(1, 6)), TruncateTo(TP, 4, "diverging epoch 1 ends at 6")),
        (
            FetchedPartition(ErrorCode.OFFSET_OUT_OF_RANGE, 20, 10, 30),
            TruncateFullyAndStartAt(TP, 10),
        ),
        (
            FetchedPartition(ErrorCode.OFFSET_OUT_OF_RANGE, 5, 0, 6),
            TruncateTo(TP, 6, "fetch offset beyond the leader's log end offset"),
        ),
        (FetchedPartition(ErrorCode.FENCED_LEADER_EPOCH, 0, 0, 0, message="m"), Fenced(TP, "m")),
        (
            FetchedPartition(ErrorCode.UNKNOWN_LEADER_EPOCH, 0, 0, 0, message="m"),
            BackedOff(TP, ErrorCode.UNKNOWN_LEADER_EPOCH, "m"),
        ),
        (
            FetchedPartition(ErrorCode.NOT_LEADER_OR_FOLLOWER, 0, 0, 0),
            BackedOff(TP, ErrorCode.NOT_LEADER_OR_FOLLOWER, ""),
        ),
    ],
    ids=[
        "records",
        "diverged",
        "diverged-older-epoch",
        "below-log-start",
        "beyond-leo",
        "fenced",
        "unknown-epoch",
        "not-leader",
    ],
)
def test_response_actions(fetched: FetchedPartition, expected) -> None:
    f = fetcher()
    plan = f.build_request(0)
    assert plan is not None
    assert f.handle_response(plan.request_id, {TP: fetched}, lambda tp: LOCAL, 0) == [expected]
    f.invariants()


def test_fenced_partition_is_dropped_and_backed_off_partition_waits() -> None:
    f = fetcher()
    f.add_partition(TP2, 0, None, 3)
    plan = f.build_request(0)
    assert plan is not None
    answers = {
        TP: FetchedPartition(ErrorCode.FENCED_LEADER_EPOCH, 0, 0, 0),
        TP2: FetchedPartition(ErrorCode.UNKNOWN_LEADER_EPOCH, 0, 0, 0),
    }
    f.handle_response(plan.request_id, answers, lambda tp: LOCAL, 10)
    assert TP not in f.partitions()
    assert f.build_request(50) is None and f.next_wake_ms() == 10 + BACKOFF_MS
    retry = f.build_request(10 + BACKOFF_MS)
    assert retry is not None and [p.topic_partition for p in retry.partitions] == [TP2]
    assert f.next_wake_ms() is None


def test_stale_and_duplicate_answers_are_ignored() -> None:
    """An answer applies only if the partition still fetches from the same offset in the same epoch."""
    f = fetcher()
    plan = f.build_request(0)
    assert plan is not None
    f.add_partition(TP, 7, 2, 4)  # a new leader epoch arrived meanwhile
    assert f.handle_response(plan.request_id, {TP: ok(records=b"x")}, lambda tp: LOCAL, 0) == []
    plan = f.build_request(0)
    assert plan is not None
    f.update_position(TP, 5, 2)  # truncated meanwhile
    assert f.handle_response(plan.request_id, {TP: ok(records=b"x")}, lambda tp: LOCAL, 0) == []
    plan = f.build_request(0)
    assert plan is not None
    assert len(f.handle_response(plan.request_id, {TP: ok(records=b"x")}, lambda tp: LOCAL, 0)) == 1
    assert f.handle_response(plan.request_id, {TP: ok(records=b"x")}, lambda tp: LOCAL, 0) == []  # duplicate
    f.remove_partition(TP)
    assert f.build_request(0) is None


def test_request_failure_backs_off_every_partition() -> None:
    f = fetcher()
    plan = f.build_request(0)
    assert plan is not None
    f.handle_request_failure(plan.request_id, 5)
    f.handle_request_failure(plan.request_id, 5)  # a second report changes nothing
    assert f.build_request(5 + BACKOFF_MS - 1) is None
    assert f.build_request(5 + BACKOFF_MS) is not None


def test_divergence_without_progress_backs_off() -> None:
    """Issue 14, defect 1: a follower whose divergence handling makes no progress (the same truncation
    answer to the same position, twice in a row) must back off replica.fetch.backoff.ms instead of
    refetching at once — the leader answers a diverging epoch without long-polling, so a hot loop
    burns both brokers. The action says how often in a row it repeated (the driver warns once)."""
    f = fetcher()
    diverged = ok(diverging_epoch=EpochEndOffset(2, 5))
    now = 0
    repeats = []
    for _ in range(3):
        plan = f.build_request(now)
        assert plan is not None, f"partition not ready at {now} ms"
        (action,) = f.handle_response(plan.request_id, {TP: diverged}, lambda tp: LOCAL, now)
        assert isinstance(action, TruncateTo) and action.offset == 5
        repeats.append(action.repeated)
        f.update_position(TP, 7, 2)  # the truncation changed nothing: same position, same epoch
        if action.repeated:
            assert f.build_request(now) is None and f.next_wake_ms() == now + BACKOFF_MS
            now += BACKOFF_MS
    assert repeats == [0, 1, 2]
    plan = f.build_request(now)
    assert plan is not None
    assert f.handle_response(plan.request_id, {TP: ok(records=b"x")}, lambda tp: LOCAL, now)  # progress
    plan = f.build_request(now)
    assert plan is not None, "progress ends the streak: no back-off"
    (action,) = f.handle_response(plan.request_id, {TP: diverged}, lambda tp: LOCAL, now)
    assert action.repeated == 0 and f.build_request(now) is not None


def test_truncation_that_moves_the_position_is_progress() -> None:
    """Truncating in steps (an epoch the follower did not know) changes the position each time: no
    back-off between the steps."""
    f = fetcher()
    for offset, epoch in ((7, 2), (4, 1)):
        f.update_position(TP, offset, epoch)
        plan = f.build_request(0)
        assert plan is not None
        (action,) = f.handle_response(
            plan.request_id, {TP: ok(diverging_epoch=EpochEndOffset(1, 4))}, lambda tp: LOCAL, 0
        )
        assert isinstance(action, TruncateTo) and action.repeated == 0
