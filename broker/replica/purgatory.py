"""Delayed operations, parked until what they watch moves or their deadline passes (Kafka's
``DelayedOperation`` and ``DelayedOperationPurgatory``).

Theory of operation. A ``DelayedOperation`` is a request that cannot be answered yet: an acks=all
produce waiting for the HW (``broker.replica.delayed_produce``), a long-poll fetch waiting for data
(``broker.replica.delayed_fetch``). It says which *keys* (partitions) it watches, decides for itself whether
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
completed operation is parked. Not thread-safe: one driver (the broker's event loop) owns it.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

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
