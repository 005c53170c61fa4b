"""The Raft core's in-memory view of its log: a snapshot boundary, the retained entries, and what is durable.

Inside ``raft/`` the Raft paper's words are used (term, index, commit index).

Layout::

    index:  1 .. snapshot.last_index | first_index .. persisted_index | .. last_index
            covered by the snapshot  | durable entries                 | handed to the driver or not yet

* ``first_index == snapshot.last_index + 1``; ``term_at(snapshot.last_index) == snapshot.last_term``.
* Entries are contiguous, their terms never decrease, and ``entries[i].index == first_index + i``.
* ``persisted_index`` is the last index the driver reported durable (``persisted(index, term)``);
  ``snapshot.last_index <= persisted_index <= last_index``.
* ``unsent_from`` is the first index not yet handed to the driver in a ``Ready``; a truncation of
  entries already handed out is remembered in ``pending_truncate_from`` so the store drops them too.

The log is not thread-safe and does no I/O: the core owns it, the driver persists what ``take_unsent``
returns.
"""

from __future__ import annotations

import bisect

from raft.messages import Entry, SnapshotMeta


class RaftLog:
    """Entries after the snapshot, with the bookkeeping that turns appends into ``Ready`` writes."""

    __slots__ = ("_entries", "pending_truncate_from", "persisted_index", "snapshot_meta", "unsent_from")

    def __init__(self, snapshot_meta: SnapshotMeta, entries: list[Entry]) -> None:
        """Recover from the store; entries covered by the snapshot are ignored (stores compact lazily)."""
        retained = [e for e in entries if e.index > snapshot_meta.last_index]
        self.snapshot_meta = snapshot_meta
        self._entries: list[Entry] = retained
        self.persisted_index = self.last_index
        self.unsent_from = self.last_index + 1
        self.pending_truncate_from: int | None = None

    # ---- queries -------------------------------------------------------------------------------

    @property
    def first_index(self) -> int:
        return self.snapshot_meta.last_index + 1

    @property
    def last_index(self) -> int:
        return self._entries[-1].index if self._entries else self.snapshot_meta.last_index

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self.snapshot_meta.last_term

    def term_at(self, index: int) -> int | None:
        """The term of the entry at ``index``; None when compacted away or beyond the end."""
        if index == self.snapshot_meta.last_index:
            return self.snapshot_meta.last_term
        if index < self.first_index or index > self.last_index:
            return None
        return self._entries[index - self.first_index].term

    def entry(self, index: int) -> Entry:
        return self._entries[index - self.first_index]

    def slice(self, lo: int, hi: int, max_count: int, max_bytes: int) -> list[Entry]:
        """Entries ``lo..hi`` inclusive, at most ``max_count`` and about ``max_bytes`` (at least one)."""
        if lo > hi:
            return []
        assert lo >= self.first_index, f"slice from {lo} below first_index {self.first_index}"
        start = lo - self.first_index
        stop = min(hi - self.first_index + 1, start + max_count)
        out = self._entries[start:stop]
        total = 0
        for i, entry in enumerate(out):
            total += len(entry.data)
            if total > max_bytes and i > 0:
                return out[:i]
        return out

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft §5.4.1: a candidate's log is at least as up to date as ours."""
        return last_term > self.last_term or (last_term == self.last_term and last_index >= self.last_index)

    def last_index_of_term(self, term: int) -> int | None:
        """The last index holding ``term`` (terms never decrease, so binary search); None if absent."""
        pos = bisect.bisect_right(self._entries, term, key=lambda e: e.term)
        if pos > 0 and self._entries[pos - 1].term == term:
            return self._entries[pos - 1].index
        if pos == 0 and self.snapshot_meta.last_term == term and self.snapshot_meta.last_index > 0:
            return self.snapshot_meta.last_index
        return None

    def first_index_of_term_before(self, index: int) -> int:
        """The first retained index whose term equals the term at ``index`` (fast back-off hint)."""
        term = self.term_at(index)
        pos = bisect.bisect_left(self._entries, term, key=lambda e: e.term)
        return max(self.first_index + pos, self.first_index)

    # ---- changes -------------------------------------------------------------------------------

    def append(self, entries: list[Entry]) -> None:
        """Append entries that follow ``last_index`` directly."""
        if not entries:
            return
        prev_index, prev_term = self.last_index, self.last_term
        for entry in entries:
            assert entry.index == prev_index + 1 and entry.term >= prev_term, (
                f"entry ({entry.index}, t{entry.term}) cannot follow ({prev_index}, t{prev_term})"
            )
            prev_index, prev_term = entry.index, entry.term
        self._entries.extend(entries)

    def truncate_from(self, index: int) -> None:
        """Drop entries ``index..``; the store must drop them too if they were handed out already."""
        assert index > self.snapshot_meta.last_index, f"truncate at {index} inside the snapshot"
        del self._entries[index - self.first_index :]
        if index < self.unsent_from:
            self.pending_truncate_from = min(self.pending_truncate_from or index, index)
            self.unsent_from = index
        self.persisted_index = min(self.persisted_index, index - 1)

    def take_unsent(self) -> tuple[int | None, list[Entry]]:
        """What the next ``Ready`` must write: (truncate_from, entries)."""
        truncate, self.pending_truncate_from = self.pending_truncate_from, None
        entries = self._entries[self.unsent_from - self.first_index :]
        self.unsent_from = self.last_index + 1
        return truncate, entries

    def mark_persisted(self, index: int, term: int) -> bool:
        """The driver wrote entries up to ``index`` (of ``term``); stale reports (overwritten) are ignored."""
        if index <= self.persisted_index or self.term_at(index) != term or index >= self.unsent_from:
            return False
        self.persisted_index = index
        return True

    def compact(self, meta: SnapshotMeta) -> None:
        """Drop entries covered by a snapshot the state machine took at ``meta.last_index``."""
        assert meta.last_index <= self.persisted_index, (
            f"snapshot at {meta.last_index} beyond persisted {self.persisted_index}"
        )
        assert self.term_at(meta.last_index) == meta.last_term, (
            f"snapshot term {meta.last_term} != log term {self.term_at(meta.last_index)} at {meta.last_index}"
        )
        del self._entries[: meta.last_index - self.first_index + 1]
        self.snapshot_meta = meta

    def restore(self, meta: SnapshotMeta) -> None:
        """Replace the whole log by a snapshot received from the leader; the store drops every entry."""
        self._entries = []
        self.snapshot_meta = meta
        self.pending_truncate_from = 1
        self.unsent_from = meta.last_index + 1
        self.persisted_index = meta.last_index

    def invariants(self) -> None:
        """O(1) checks: ``append`` asserts contiguity and non-decreasing terms entry by entry."""
        first, entries = self.first_index, self._entries
        if entries:
            last = first + len(entries) - 1
            assert entries[0].index == first and entries[-1].index == last, (
                f"entries span {entries[0].index}..{entries[-1].index}, expected {first}..{last}"
            )
            assert entries[0].term >= self.snapshot_meta.last_term, (
                f"first term {entries[0].term} below snapshot term {self.snapshot_meta.last_term}"
            )
        assert self.snapshot_meta.last_index <= self.persisted_index <= self.last_index, (
            f"persisted {self.persisted_index} outside [{self.snapshot_meta.last_index}, {self.last_index}]"
        )
        assert first <= self.unsent_from <= self.last_index + 1, (
            f"unsent_from {self.unsent_from} outside [{first}, {self.last_index + 1}]"
        )
