"""Delayed produce and fetch operations, parked until the partitions they watch move (Kafka's purgatory).

Theory of operation:

- A **delayed produce** (``acks=all``) waits, for each partition it appended to, until the HW passes
  its last batch (``required_offset`` = last offset + 1) in the leader epoch it appended in. It is
  answered when every partition is done: NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND, or
  NOT_LEADER_OR_FOLLOWER when leadership was lost (the check says which); or at its deadline, when
  each partition still waiting gets REQUEST_TIMED_OUT.
- A **delayed fetch** (long poll) waits until the partitions it reads hold at least ``min_bytes``
  beyond their fetch offsets (up to the HW for consumers, the LEO for followers), until one of them
  must answer at once (an error, a leader change, a diverging epoch), or until ``max_wait_ms``.

The purgatory never looks at a partition itself: the driver passes a *check* function (for produce
``Partition.check_enough_replicas_reach_offset``; for fetch, the readable bytes from the log) and calls
``check_and_complete(topic_partition, check)`` whenever something that can complete an operation
happened on that partition — the HW moved, the leader appended (for follower fetches), leadership
changed — and ``expire(now_ms)`` at ``next_deadline_ms()``. There is no polling loop. Each call
returns the operations that completed, exactly once each; the driver answers them.

Invariants: an operation is watched by exactly the partitions it still waits on; a completed
operation is forgotten. Not thread-safe: one driver owns the purgatory.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from proto.errors import ErrorCode


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class ProduceWait:
    """One partition of a delayed produce: the HW must reach ``required_offset`` in ``leader_epoch``."""

    required_offset: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class ProduceOutcome:
    code: ErrorCode
    message: str = ""


class ProduceStatus(Protocol):
    """What a produce check answers for one partition: ``broker.partition.ProduceCheck``."""

    @property
    def done(self) -> bool: ...
    @property
    def code(self) -> ErrorCode: ...
    @property
    def message(self) -> str: ...


ProduceCheckFn = Callable[[TopicPartition, int, int], ProduceStatus]  # (tp, required_offset, leader_epoch)


@dataclass(frozen=True, slots=True)
class CompletedProduce:
    operation_id: int
    outcomes: Mapping[TopicPartition, ProduceOutcome]


class FetchCompletion(enum.Enum):
    ENOUGH_BYTES = "enough_bytes"
    PARTITION_CHANGED = "partition_changed"  # an error, a leader change or a diverging epoch
    TIMED_OUT = "timed_out"  # answered with what is there (possibly nothing): not an error


@dataclass(frozen=True, slots=True)
class FetchReadiness:
    """What a fetch check answers for one partition: bytes readable now, or answer immediately."""

    available_bytes: int
    complete_now: bool = False


FetchCheckFn = Callable[[TopicPartition, int], FetchReadiness]  # (tp, fetch_offset)


@dataclass(frozen=True, slots=True)
class CompletedFetch:
    """The driver now reads every partition of the operation and answers the fetch."""

    operation_id: int
    reason: FetchCompletion


@dataclass
class _DelayedProduce:
    deadline_ms: int
    waiting: dict[TopicPartition, ProduceWait]
    outcomes: dict[TopicPartition, ProduceOutcome] = field(default_factory=dict)


@dataclass
class _DelayedFetch:
    deadline_ms: int
    min_bytes: int
    fetch_offsets: dict[TopicPartition, int]


class _Watchers:
    """Operation ids by watched partition, and a deadline heap with lazy deletion."""

    def __init__(self) -> None:
        self.by_partition: dict[TopicPartition, set[int]] = {}
        self.deadlines: list[tuple[int, int]] = []

    def watch(self, operation_id: int, partitions: Iterable[TopicPartition], deadline_ms: int) -> None:
        for tp in partitions:
            self.by_partition.setdefault(tp, set()).add(operation_id)
        heapq.heappush(self.deadlines, (deadline_ms, operation_id))

    def unwatch(self, operation_id: int, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            ids = self.by_partition.get(tp)
            if ids is not None:
                ids.discard(operation_id)
                if not ids:
                    del self.by_partition[tp]

    def watching(self, tp: TopicPartition) -> list[int]:
        return sorted(self.by_partition.get(tp, ()))

    def due(self, now_ms: int, live: Mapping[int, object]) -> list[int]:
        expired = []
        while self.deadlines and self.deadlines[0][0] <= now_ms:
            _, operation_id = heapq.heappop(self.deadlines)
            if operation_id in live:
                expired.append(operation_id)
        return expired

    def next_deadline_ms(self, live: Mapping[int, object]) -> int | None:
        while self.deadlines and self.deadlines[0][1] not in live:
            heapq.heappop(self.deadlines)
        return self.deadlines[0][0] if self.deadlines else None


class ProducePurgatory:
    """Delayed acks=all produces (see the module docstring)."""

    def __init__(self) -> None:
        self._operations: dict[int, _DelayedProduce] = {}
        self._watchers = _Watchers()

    def __len__(self) -> int:
        return len(self._operations)

    def try_complete_else_watch(
        self,
        operation_id: int,
        deadline_ms: int,
        waits: Mapping[TopicPartition, ProduceWait],
        check: ProduceCheckFn,
        already_done: Mapping[TopicPartition, ProduceOutcome] | None = None,
    ) -> CompletedProduce | None:
        """Complete at once if every partition is done, else park. ``already_done`` holds partitions
        answered at append time (errors), so the answer covers the whole request."""
        assert operation_id not in self._operations, f"produce operation {operation_id} already parked"
        operation = _DelayedProduce(deadline_ms, dict(waits), dict(already_done or {}))
        for tp in list(operation.waiting):
            self._check_partition(operation, tp, check)
        if not operation.waiting:
            return CompletedProduce(operation_id, operation.outcomes)
        self._operations[operation_id] = operation
        self._watchers.watch(operation_id, operation.waiting, deadline_ms)
        return None

    def check_and_complete(self, tp: TopicPartition, check: ProduceCheckFn) -> list[CompletedProduce]:
        """The HW, ISR or leadership of ``tp`` changed: complete what is now done."""
        completed = []
        for operation_id in self._watchers.watching(tp):
            operation = self._operations[operation_id]
            if self._check_partition(operation, tp, check):
                self._watchers.unwatch(operation_id, (tp,))
            if not operation.waiting:
                completed.append(self._complete(operation_id))
        return completed

    def expire(self, now_ms: int) -> list[CompletedProduce]:
        """Operations past their deadline: each partition still waiting gets REQUEST_TIMED_OUT."""
        completed = []
        for operation_id in self._watchers.due(now_ms, self._operations):
            operation = self._operations[operation_id]
            for tp, wait in operation.waiting.items():
                operation.outcomes[tp] = ProduceOutcome(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"{tp}: the HW did not reach {wait.required_offset} before the request timeout; "
                    "the records were appended on the leader and may still be committed",
                )
            self._watchers.unwatch(operation_id, operation.waiting)
            operation.waiting.clear()
            completed.append(self._complete(operation_id))
        return completed

    def next_deadline_ms(self) -> int | None:
        return self._watchers.next_deadline_ms(self._operations)

    @staticmethod
    def _check_partition(operation: _DelayedProduce, tp: TopicPartition, check: ProduceCheckFn) -> bool:
        wait = operation.waiting[tp]
        status = check(tp, wait.required_offset, wait.leader_epoch)
        if not status.done:
            return False
        operation.outcomes[tp] = ProduceOutcome(status.code, status.message)
        del operation.waiting[tp]
        return True

    def _complete(self, operation_id: int) -> CompletedProduce:
        operation = self._operations.pop(operation_id)
        assert not operation.waiting, f"produce {operation_id} completed while waiting on {operation.waiting}"
        return CompletedProduce(operation_id, operation.outcomes)

    def invariants(self) -> None:
        for operation_id, operation in self._operations.items():
            assert operation.waiting, f"produce {operation_id} parked with nothing to wait for"
            for tp in operation.waiting:
                assert operation_id in self._watchers.by_partition.get(tp, ()), (
                    f"{operation_id} not watching {tp}"
                )
        for tp, ids in self._watchers.by_partition.items():
            for operation_id in ids:
                assert tp in self._operations[operation_id].waiting, f"{tp} watched by done {operation_id}"


class FetchPurgatory:
    """Long-poll fetches (see the module docstring)."""

    def __init__(self) -> None:
        self._operations: dict[int, _DelayedFetch] = {}
        self._watchers = _Watchers()

    def __len__(self) -> int:
        return len(self._operations)

    def try_complete_else_watch(
        self,
        operation_id: int,
        deadline_ms: int,
        min_bytes: int,
        fetch_offsets: Mapping[TopicPartition, int],
        check: FetchCheckFn,
    ) -> CompletedFetch | None:
        """Complete at once if ``min_bytes`` are readable (or a partition must answer now), else park."""
        assert operation_id not in self._operations, f"fetch operation {operation_id} already parked"
        operation = _DelayedFetch(deadline_ms, min_bytes, dict(fetch_offsets))
        reason = self._ready(operation, check)
        if reason is not None:
            return CompletedFetch(operation_id, reason)
        self._operations[operation_id] = operation
        self._watchers.watch(operation_id, operation.fetch_offsets, deadline_ms)
        return None

    def check_and_complete(self, tp: TopicPartition, check: FetchCheckFn) -> list[CompletedFetch]:
        """Something readable changed on ``tp`` (HW or LEO moved, leadership changed)."""
        completed = []
        for operation_id in self._watchers.watching(tp):
            reason = self._ready(self._operations[operation_id], check)
            if reason is not None:
                completed.append(self._complete(operation_id, reason))
        return completed

    def expire(self, now_ms: int) -> list[CompletedFetch]:
        """Fetches whose max_wait_ms passed: answered with whatever is readable."""
        return [
            self._complete(operation_id, FetchCompletion.TIMED_OUT)
            for operation_id in self._watchers.due(now_ms, self._operations)
        ]

    def next_deadline_ms(self) -> int | None:
        return self._watchers.next_deadline_ms(self._operations)

    @staticmethod
    def _ready(operation: _DelayedFetch, check: FetchCheckFn) -> FetchCompletion | None:
        # Kafka's DelayedFetch.tryComplete: any partition that must answer now completes the fetch.
        total_bytes = 0
        for tp, fetch_offset in operation.fetch_offsets.items():
            readiness = check(tp, fetch_offset)
            if readiness.complete_now:
                return FetchCompletion.PARTITION_CHANGED
            total_bytes += readiness.available_bytes
        return FetchCompletion.ENOUGH_BYTES if total_bytes >= operation.min_bytes else None

    def _complete(self, operation_id: int, reason: FetchCompletion) -> CompletedFetch:
        operation = self._operations.pop(operation_id)
        self._watchers.unwatch(operation_id, operation.fetch_offsets)
        return CompletedFetch(operation_id, reason)

    def invariants(self) -> None:
        for operation_id, operation in self._operations.items():
            for tp in operation.fetch_offsets:
                assert operation_id in self._watchers.by_partition.get(tp, ()), (
                    f"{operation_id} not watching {tp}"
                )
