"""The leader-epoch cache of one partition replica: leader epoch -> first offset written in that epoch.

KIP-101: a replica that becomes a follower does not truncate to its high watermark; it asks the leader
for the end offset of its latest epoch (OffsetsForLeaderEpoch) and truncates only what diverged. This
cache answers that question on the leader (``end_offset_for``) and is trimmed on the follower when the
log is truncated (``truncate_from_end``) or its start moves (``truncate_from_start``).

Invariants: epochs strictly increase and start offsets strictly increase along the entries.

On disk: ``leader-epoch-checkpoint`` in the partition directory, Kafka's text format (see
``storage.checkpoint``): version 0, the count, then one ``<epoch> <start offset>`` line per entry.
Every change is written atomically before the method returns (changes are rare: once per epoch).

Thread-safety: none; owned by one ``Log``.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass
from pathlib import Path

from proto import errors
from storage.checkpoint import CheckpointFile

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """OffsetsForLeaderEpoch's answer: the largest epoch <= the requested one and where it ends."""

    leader_epoch: int
    end_offset: int

    @property
    def is_undefined(self) -> bool:
        return self.leader_epoch == UNDEFINED_EPOCH and self.end_offset == UNDEFINED_EPOCH_OFFSET


UNDEFINED = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


class LeaderEpochCache:
    """Epoch -> start offset entries, persisted on every change. See the module docstring."""

    def __init__(self, directory: Path) -> None:
        self._file = CheckpointFile(directory / FILE_NAME, width=2)
        loaded = self._file.read() or []
        self._entries = [EpochEntry(epoch, offset) for epoch, offset in loaded]
        if not _strictly_increasing(self._entries) or any(
            e.epoch < 0 or e.start_offset < 0 for e in self._entries
        ):
            raise errors.KafkaStorageError(
                f"corrupt {self._file.path}: entries must be >= 0 and strictly increasing, found {loaded}; "
                "delete the file and the replica refetches epochs from the leader"
            )

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether the cache changed.

        Epochs only rise: an epoch <= the latest changes nothing (truncate first to rewrite history).
        A newer epoch replaces every entry starting at or after ``start_offset`` (Kafka's rule: an
        epoch in which nothing was written leaves no trace).
        """
        assert epoch >= 0 and start_offset >= 0, f"assign(epoch={epoch}, start_offset={start_offset})"
        if self._entries and epoch <= self._entries[-1].epoch:
            return False
        kept = [e for e in self._entries if e.start_offset < start_offset]
        self._entries = [*kept, EpochEntry(epoch, start_offset)]
        self._flush()
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        kept = [e for e in self._entries if e.start_offset < end_offset]
        if len(kept) != len(self._entries):
            self._entries = kept
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly below ``start_offset``; the one covering it now starts there."""
        covering = [e for e in self._entries if e.start_offset <= start_offset]
        if not covering or (len(covering) == 1 and covering[0].start_offset == start_offset):
            return
        later = self._entries[len(covering) :]
        self._entries = [EpochEntry(covering[-1].epoch, start_offset), *later]
        self._flush()

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self._flush()

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch in which ``offset`` was written, or None when the cache does not cover it."""
        index = bisect.bisect_right([e.start_offset for e in self._entries], offset) - 1
        return self._entries[index].epoch if index >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """Kafka's ``LeaderEpochFileCache.endOffsetFor`` (OffsetsForLeaderEpoch).

        - the latest epoch: it ends at the log end offset;
        - an older one: the largest known epoch <= requested, ending where the next epoch starts;
        - below every known epoch: (requested, start offset of the first epoch);
        - above the latest, UNDEFINED_EPOCH requested, or an empty cache: UNDEFINED.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED
        if self._entries[-1].epoch == requested_epoch:
            return EpochEndOffset(requested_epoch, log_end_offset)
        higher = next((e for e in self._entries if e.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED
        floor = [e for e in self._entries if e.epoch <= requested_epoch]
        epoch = floor[-1].epoch if floor else requested_epoch
        return EpochEndOffset(epoch, higher.start_offset)

    def invariants(self) -> None:
        assert _strictly_increasing(self._entries), f"leader-epoch cache not increasing: {self._entries}"

    def _flush(self) -> None:
        self.invariants()
        self._file.write([(e.epoch, e.start_offset) for e in self._entries])


def _strictly_increasing(entries: list[EpochEntry]) -> bool:
    return all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in itertools.pairwise(entries))
