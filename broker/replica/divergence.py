"""Leader-epoch arithmetic: where an epoch ends, where logs diverge, where a follower truncates.

Theory of operation (KIP-101, KIP-279, KIP-595, as Kafka implements them):

Every replica keeps a *leader-epoch cache*: one ``EpochEntry(epoch, start_offset)`` per leader epoch
that wrote into its log, with both fields strictly increasing. Epoch ``e`` covers the offsets
``[start of e, start of the next entry)``; the latest epoch runs to the log end offset. A new leader
assigns its epoch at its log end offset before it appends anything; a follower assigns the epoch of
every fetched batch whose ``partitionLeaderEpoch`` is newer than its latest entry, at that batch's
base offset.

A follower fetches with ``fetch_offset`` (its log end offset) and ``last_fetched_epoch`` (its latest
epoch). The leader looks up where *its* log ends ``last_fetched_epoch``
(``end_offset_for_epoch``). If the leader never had that epoch (the answer names a smaller one) or
ended it before ``fetch_offset``, the logs diverge: the leader answers a *diverging epoch* instead of
records (``diverging_epoch``). The follower then truncates (``follower_truncation``) to where both
logs agree on that epoch, and fetches again; if it did not know the epoch the leader named, the
truncation is only a step and the next fetch finds the rest. A follower never truncates to its high
watermark: that is the data-loss bug KIP-101 closed (docs/architecture.md, both scenarios).

Everything here is pure: tuples of frozen entries in, frozen results out, with the entry and answer
types of ``storage.epoch_cache`` (the on-disk cache, whose ``entries`` the replica manager passes in).
``assign``, ``truncate_from_end`` and ``truncate_from_start`` restate that cache's mutations as pure
functions for the simulator's in-memory log; a unit test keeps the two equal on random histories.
Note that a new leader must assign its epoch at its log end offset when it becomes leader (Kafka's
``makeLeader``), not only at its first append, so that followers are compared against it at once.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from storage.epoch_cache import (
    UNDEFINED,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
    EpochEntry,
)

__all__ = [
    "UNDEFINED",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEndOffset",
    "EpochEntry",
    "TruncationState",
    "assign",
    "check_entries",
    "diverging_epoch",
    "end_offset_for_epoch",
    "follower_truncation",
    "latest_epoch",
    "truncate_from_end",
    "truncate_from_start",
]


def _undefined(epoch_end: EpochEndOffset) -> bool:
    return epoch_end.leader_epoch == UNDEFINED_EPOCH or epoch_end.end_offset == UNDEFINED_EPOCH_OFFSET


@dataclass(frozen=True, slots=True)
class TruncationState:
    """Truncate the follower's log to ``offset``; ``completed`` False means fetch again to find more."""

    offset: int
    completed: bool


def check_entries(entries: Sequence[EpochEntry]) -> None:
    """Assert the cache invariant: epochs and start offsets strictly increase."""
    for before, after in itertools.pairwise(entries):
        assert before.epoch < after.epoch, f"epochs must increase: {before} then {after}"
        assert before.start_offset < after.start_offset, f"start offsets must increase: {before} then {after}"


def latest_epoch(entries: Sequence[EpochEntry]) -> int | None:
    """The epoch of the last batch in the log (a follower's ``last_fetched_epoch``), None if empty."""
    return entries[-1].epoch if entries else None


def end_offset_for_epoch(
    entries: Sequence[EpochEntry], requested_epoch: int, log_end_offset: int
) -> EpochEndOffset:
    """Kafka's ``LeaderEpochFileCache.endOffsetFor``: the largest epoch <= ``requested_epoch`` and its end.

    - the latest epoch ends at the log end offset;
    - an epoch between two known ones ends where the next known epoch starts, and the answer names
      the largest known epoch below it (the leader never wrote in ``requested_epoch``);
    - an epoch older than every known one (its records were deleted) ends at the first known start
      offset, named as requested;
    - an epoch newer than every known one, or an empty cache: UNDEFINED.
    """
    if requested_epoch == UNDEFINED_EPOCH or not entries:
        return UNDEFINED
    if requested_epoch == entries[-1].epoch:
        return EpochEndOffset(requested_epoch, log_end_offset)
    epochs = [entry.epoch for entry in entries]
    higher = bisect.bisect_right(epochs, requested_epoch)  # first entry with epoch > requested
    if higher == len(entries):
        return UNDEFINED
    if higher == 0:
        return EpochEndOffset(requested_epoch, entries[0].start_offset)
    return EpochEndOffset(entries[higher - 1].epoch, entries[higher].start_offset)


def diverging_epoch(
    entries: Sequence[EpochEntry], log_end_offset: int, fetch_offset: int, last_fetched_epoch: int | None
) -> EpochEndOffset | None:
    """On the leader: the diverging epoch to answer a follower fetch with, or None if the logs agree.

    Kafka's ``Partition.fetchRecords`` (KIP-595): divergence when the leader's end of
    ``last_fetched_epoch`` names a smaller epoch or lies before ``fetch_offset``.
    """
    if last_fetched_epoch is None:
        return None
    epoch_end = end_offset_for_epoch(entries, last_fetched_epoch, log_end_offset)
    if epoch_end.leader_epoch < last_fetched_epoch or epoch_end.end_offset < fetch_offset:
        return epoch_end
    return None


def follower_truncation(
    entries: Sequence[EpochEntry], log_end_offset: int, high_watermark: int, leader_epoch_end: EpochEndOffset
) -> TruncationState:
    """On the follower: where to truncate given the leader's ``EpochEndOffset`` (Kafka's
    ``AbstractFetcherThread.getOffsetTruncationState``).

    - The follower knows the leader's epoch: truncate to the smaller of both ends of it (and never
      above its own log end offset); done.
    - It does not (its largest epoch below is older): truncate to the end of that older epoch and
      fetch again, so the leader can compare against the now-latest epoch.
    - Its cache is empty: only the leader's end offset is known; truncate to it.
    - The leader knows no such epoch (UNDEFINED; a correct leader never answers this to a follower
      that sent an epoch): Kafka's pre-KIP-101 fallback, the high watermark.
    """
    if _undefined(leader_epoch_end):
        return TruncationState(min(high_watermark, log_end_offset), completed=True)
    own = end_offset_for_epoch(entries, leader_epoch_end.leader_epoch, log_end_offset)
    if _undefined(own):
        return TruncationState(min(leader_epoch_end.end_offset, log_end_offset), completed=True)
    if own.leader_epoch != leader_epoch_end.leader_epoch:
        return TruncationState(min(own.end_offset, log_end_offset), completed=False)
    return TruncationState(min(own.end_offset, leader_epoch_end.end_offset, log_end_offset), completed=True)


def assign(entries: Sequence[EpochEntry], epoch: int, start_offset: int) -> tuple[EpochEntry, ...]:
    """The cache after epoch ``epoch`` starts at ``start_offset`` (``LeaderEpochCache.assign``).

    Epochs only rise: an epoch <= the latest changes nothing (truncate first to rewrite history). A
    newer epoch replaces every entry starting at or after ``start_offset``: an epoch in which
    nothing was written leaves no trace.
    """
    assert epoch >= 0 and start_offset >= 0, f"cannot assign epoch {epoch} at offset {start_offset}"
    if entries and epoch <= entries[-1].epoch:
        return tuple(entries)
    kept = tuple(e for e in entries if e.start_offset < start_offset)
    return (*kept, EpochEntry(epoch, start_offset))


def truncate_from_end(entries: Sequence[EpochEntry], end_offset: int) -> tuple[EpochEntry, ...]:
    """The cache after the log is truncated to ``end_offset``: epochs starting there or later go."""
    return tuple(e for e in entries if e.start_offset < end_offset)


def truncate_from_start(entries: Sequence[EpochEntry], start_offset: int) -> tuple[EpochEntry, ...]:
    """The cache after records below ``start_offset`` are deleted: the epoch covering
    ``start_offset`` now starts there; earlier epochs go."""
    covering = [e for e in entries if e.start_offset <= start_offset]
    later = tuple(e for e in entries if e.start_offset > start_offset)
    if not covering:
        return later
    return (EpochEntry(covering[-1].epoch, start_offset), *later)
