"""A delayed acks=all produce (Kafka's ``DelayedProduce``), parked in a ``broker.replica.purgatory``.

An acks=all produce waits, for each partition it appended to, until the HW passes its last batch
(``ProduceWait.required_offset`` = last offset + 1) in the leader epoch it appended in. It is
answered when every partition is done — NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank
below min.insync.replicas), or NOT_LEADER_OR_FOLLOWER (leadership lost): the *check* says which
(``Partition.check_enough_replicas_reach_offset`` through the replica manager) — or at its
deadline, when each partition still waiting gets REQUEST_TIMED_OUT.

It watches only the partitions it still waits on, and a change on one partition checks only that
one (``try_complete(key)``); ``try_complete(None)`` checks them all (when it is first parked).
Invariants: a partition is either waiting or has an outcome, never both; it completes with an
outcome for every partition. Not thread-safe (the purgatory's driver owns it).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Protocol

from broker.replica.purgatory import DelayedOperation, K
from proto.errors import ErrorCode


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
    """What a produce check answers for one partition: ``broker.replica.partition.ProduceCheck``."""

    @property
    def done(self) -> bool: ...
    @property
    def code(self) -> ErrorCode: ...
    @property
    def message(self) -> str: ...


ProduceCheckFn = Callable[[K, int, int], ProduceStatus]  # (tp, required_offset, leader_epoch)


class DelayedProduce(DelayedOperation[K]):
    """An acks=all produce waiting on ``waits``; ``on_done(outcomes)`` answers it."""

    def __init__(
        self,
        deadline_ms: int,
        waits: Mapping[K, ProduceWait],
        check: ProduceCheckFn[K],
        on_done: Callable[[dict[K, ProduceOutcome]], None],
        already_done: Mapping[K, ProduceOutcome] | None = None,
    ) -> None:
        """``already_done``: partitions answered at append time (errors), so that the answer covers
        the whole request."""
        super().__init__(deadline_ms)
        self.waiting = dict(waits)
        self.outcomes: dict[K, ProduceOutcome] = dict(already_done or {})
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
            self.outcomes[tp] = ProduceOutcome(status.code, status.message)
            del self.waiting[tp]

    def on_expiration(self) -> None:
        for tp, wait in self.waiting.items():
            self.outcomes[tp] = ProduceOutcome(
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
