"""Delayed operations, parked until what they watch moves or their deadline passes (Kafka's
``DelayedOperation`` and ``DelayedOperationPurgatory``).

Theory of operation. A ``DelayedOperation`` is a request that cannot be answered yet: an acks=all
produce waiting for the HW (``DelayedProduce``), a long-poll fetch waiting for data
(``DelayedFetch``). It says which *keys* (partitions) it watches, decides for itself whether
it can complete (``try_complete``), and answers in ``on_complete`` — after ``on_expiration`` when its
deadline passed first. The purgatory holds the parked operations by key and by deadline and never
looks at a partition itself:

- ``try_complete_else_watch(operation)``: complete at once if it can, else park it under its keys.
- ``check_and_complete(key)``: something that can complete an operation happened on ``key`` (the HW
  moved, the leader appended, leadership changed): ask each operation watching it.
- ``complete_all(key)``: complete every operation watching ``key`` without asking (a new leader
  answers what was parked on the old role).
- ``expire(now_ms)`` at ``next_deadline_ms()``: the driver keeps one timer there; no polling loop.

Completion happens exactly once per operation: it leaves the purgatory (every key, and the
deadline heap lazily) before its ``on_complete`` runs, and ``on_complete`` of the operations a call
completes run after that call's scan, in watch order, so an answer that re-enters the purgatory
(a completed follower fetch whose read moves the HW and completes a produce in the same call)
sees it consistent.

Invariants (``invariants()``): every parked operation is watched by exactly its ``keys()``, no
completed operation is parked. Not thread-safe: one driver (the broker's event loop) owns the
purgatory and the operations parked in it.

``DelayedProduce`` (Kafka's ``DelayedProduce``): an acks=all produce waits, for each partition it
appended to, until the HW passes its last batch (``ProduceWait.required_offset`` = last offset + 1)
in the leader epoch it appended in. It is answered when every partition is done — NONE,
NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank below min.insync.replicas), or
NOT_LEADER_OR_FOLLOWER (leadership lost): the *check* says which
(``Partition.check_enough_replicas_reach_offset`` through the replica manager) — or at its
deadline, when each partition still waiting gets REQUEST_TIMED_OUT. It watches only the partitions
it still waits on, and a change on one partition checks only that one (``try_complete(key)``);
``try_complete(None)`` checks them all (when it is first parked). Invariants: a partition is either
waiting or has an outcome, never both; it completes with an outcome for every partition.

``DelayedFetch`` (Kafka's ``DelayedFetch``), a long poll: a fetch waits until the partitions it
reads hold at least ``min_bytes`` beyond their fetch offsets (up to the HW for a consumer, the LEO
for a follower), until one of them must answer at once (an error, a leader change, a diverging
epoch: the readiness check says ``complete_now``), or until ``max_wait_ms`` (then it is answered
with what is there, possibly nothing: not an error). Any change on any of its partitions checks all
of them (Kafka's ``DelayedFetch.tryComplete``). On completion the driver reads every partition again
and answers (``on_done``): the records are read at answer time, never kept while parked.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from proto.errors import ApiError, ErrorCode

K = TypeVar("K", bound=Hashable)


class DelayedOperation(ABC, Generic[K]):
    """One parked request: its deadline, the keys it watches, how it completes."""

    def __init__(self, deadline_ms: int) -> None:
        self.deadline_ms = deadline_ms
        self.completed = False

    @abstractmethod
    def keys(self) -> Iterable[K]:
        """The keys whose changes can still complete this operation."""

    @abstractmethod
    def try_complete(self, key: K | None) -> bool:
        """Whether it can be answered now (``key``: what changed; None: check everything)."""

    def on_expiration(self) -> None:
        """The deadline passed before it completed (called just before ``on_complete``)."""

    @abstractmethod
    def on_complete(self) -> None:
        """Answer the request (called exactly once)."""


class DelayedOperationPurgatory(Generic[K]):
    """Parked ``DelayedOperation``s by key and by deadline (see the module docstring)."""

    def __init__(self) -> None:
        self._operations: dict[int, DelayedOperation[K]] = {}
        self._watched: dict[int, set[K]] = {}  # operation id -> keys it is watched under
        self._by_key: dict[K, set[int]] = {}
        self._deadlines: list[tuple[int, int]] = []  # (deadline, operation id), lazily cleaned
        self._next_id = 0

    def __len__(self) -> int:
        return len(self._operations)

    def try_complete_else_watch(self, operation: DelayedOperation[K]) -> bool:
        """Complete ``operation`` now if it can (True), else park it under its keys (False)."""
        if operation.try_complete(None):
            self._finish([operation])
            return True
        self._next_id += 1
        operation_id = self._next_id
        keys = set(operation.keys())  # none: nothing can complete it early, only its deadline (an
        # incremental fetch whose session holds no partition waits max_wait_ms, as before: a follower
        # following nothing from this leader must not spin)
        self._operations[operation_id] = operation
        self._watched[operation_id] = keys
        for key in keys:
            self._by_key.setdefault(key, set()).add(operation_id)
        heapq.heappush(self._deadlines, (operation.deadline_ms, operation_id))
        return False

    def check_and_complete(self, key: K) -> int:
        """``key`` changed: complete the operations watching it that can complete; how many did."""
        done = []
        for operation_id in sorted(self._by_key.get(key, ())):
            operation = self._operations[operation_id]
            if operation.try_complete(key):
                done.append(self._remove(operation_id))
            else:  # an operation may stop watching keys it no longer waits on (a delayed produce)
                self._unwatch(operation_id, self._watched[operation_id] - set(operation.keys()))
        self._finish(done)
        return len(done)

    def complete_all(self, key: K) -> int:
        """Complete every operation watching ``key`` without asking it; how many did."""
        done = [self._remove(operation_id) for operation_id in sorted(self._by_key.get(key, ()))]
        self._finish(done)
        return len(done)

    def expire(self, now_ms: int) -> int:
        """Complete the operations whose deadline is at or before ``now_ms``; how many did."""
        done = []
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, operation_id = heapq.heappop(self._deadlines)
            if operation_id in self._operations:
                done.append(self._remove(operation_id))
        for operation in done:
            operation.on_expiration()
        self._finish(done)
        return len(done)

    def next_deadline_ms(self) -> int | None:
        while self._deadlines and self._deadlines[0][1] not in self._operations:
            heapq.heappop(self._deadlines)
        return self._deadlines[0][0] if self._deadlines else None

    def _remove(self, operation_id: int) -> DelayedOperation[K]:
        self._unwatch(operation_id, set(self._watched.pop(operation_id)))
        return self._operations.pop(operation_id)

    def _unwatch(self, operation_id: int, keys: set[K]) -> None:
        watched = self._watched.get(operation_id)
        for key in keys:
            if watched is not None:
                watched.discard(key)
            ids = self._by_key.get(key)
            if ids is not None:
                ids.discard(operation_id)
                if not ids:
                    del self._by_key[key]

    @staticmethod
    def _finish(done: list[DelayedOperation[K]]) -> None:
        for operation in done:
            assert not operation.completed, f"{operation} completed twice"
            operation.completed = True
        failure: Exception | None = None
        for operation in done:
            try:
                operation.on_complete()
            except Exception as exc:  # e.g. a segment read failed: answer every other one first
                failure = failure or exc
        if failure is not None:
            raise failure  # to the driver's caller, which logs it (request_crashed at ERROR)

    def invariants(self) -> None:
        for operation_id, operation in self._operations.items():
            assert not operation.completed, f"completed operation {operation_id} still parked"
            keys = set(operation.keys())
            assert self._watched[operation_id] == keys, (
                f"operation {operation_id} watched under {self._watched[operation_id]}, waits on {keys}"
            )
            for key in keys:
                assert operation_id in self._by_key.get(key, ()), f"{operation_id} not watching {key}"
        for key, ids in self._by_key.items():
            for operation_id in ids:
                assert key in self._watched.get(operation_id, ()), f"{key} watched by done {operation_id}"


@dataclass(frozen=True, slots=True)
class ProduceWait:
    """One partition of a delayed produce: the HW must reach ``required_offset`` in ``leader_epoch``."""

    required_offset: int
    leader_epoch: int


class ProduceStatus(Protocol):
    """What a produce check answers for one partition: ``broker.replica.partition.ProduceCheck``."""

    @property
    def done(self) -> bool: ...
    @property
    def error(self) -> ApiError: ...


ProduceCheckFn = Callable[[K, int, int], ProduceStatus]  # (tp, required_offset, leader_epoch)


class DelayedProduce(DelayedOperation[K]):
    """An acks=all produce waiting on ``waits``; ``on_done(outcomes)`` answers it."""

    def __init__(
        self,
        deadline_ms: int,
        waits: Mapping[K, ProduceWait],
        check: ProduceCheckFn[K],
        on_done: Callable[[dict[K, ApiError]], None],
        already_done: Mapping[K, ApiError] | None = None,
    ) -> None:
        """``already_done``: partitions answered at append time (errors), so that the answer covers
        the whole request."""
        super().__init__(deadline_ms)
        self.waiting = dict(waits)
        self.outcomes: dict[K, ApiError] = dict(already_done or {})
        self._check = check
        self._on_done = on_done

    def keys(self) -> list[K]:
        return list(self.waiting)

    def try_complete(self, key: K | None) -> bool:
        for tp in list(self.waiting) if key is None else [key]:
            if tp in self.waiting:
                self._check_partition(tp)
        return not self.waiting

    def _check_partition(self, tp: K) -> None:
        wait = self.waiting[tp]
        status = self._check(tp, wait.required_offset, wait.leader_epoch)
        if status.done:
            self.outcomes[tp] = status.error
            del self.waiting[tp]

    def on_expiration(self) -> None:
        for tp, wait in self.waiting.items():
            self.outcomes[tp] = ApiError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"{_name(tp)}: the HW did not reach {wait.required_offset} before the request timeout; "
                "the records were appended on the leader and may still be committed",
            )
        self.waiting.clear()

    def on_complete(self) -> None:
        assert not self.waiting, f"produce completed while waiting on {self.waiting}"
        self._on_done(self.outcomes)


def _name(tp: Hashable) -> str:
    return f"{tp[0]}-{tp[1]}" if isinstance(tp, tuple) else str(tp)


@dataclass(frozen=True, slots=True)
class FetchReadiness:
    """What a fetch check answers for one partition: bytes readable now, or answer immediately."""

    available_bytes: int
    complete_now: bool = False


FetchCheckFn = Callable[[K, int], FetchReadiness]  # (tp, fetch_offset)


class DelayedFetch(DelayedOperation[K]):
    """A fetch of ``fetch_offsets`` waiting for ``min_bytes``; ``on_done()`` reads and answers it."""

    def __init__(
        self,
        deadline_ms: int,
        min_bytes: int,
        fetch_offsets: Mapping[K, int],
        check: FetchCheckFn[K],
        on_done: Callable[[], None],
    ) -> None:
        super().__init__(deadline_ms)
        self.min_bytes = min_bytes
        self.fetch_offsets = dict(fetch_offsets)
        self._check = check
        self._on_done = on_done

    def keys(self) -> list[K]:
        return list(self.fetch_offsets)

    def try_complete(self, key: K | None) -> bool:
        total_bytes = 0
        for tp, fetch_offset in self.fetch_offsets.items():
            readiness = self._check(tp, fetch_offset)
            if readiness.complete_now:  # any partition that must answer now completes the fetch
                return True
            total_bytes += readiness.available_bytes
        return total_bytes >= self.min_bytes

    def on_complete(self) -> None:
        self._on_done()
