"""A log's three offset checkpoints (HW, log start offset, recovery point) and who may write them when.

Why this exists. The broker writes the periodic checkpoints in a worker thread, off its event loop (each
write is two fsyncs, ``storage.checkpoint.write_atomically``, and an fsync on a busy disk can take
hundreds of milliseconds, stalling every request of the broker), while the Log — which is not
thread-safe — keeps writing some of them synchronously on its owner's thread: the log start offset when
it moves, the recovery point after a flush, the lowered HW after a truncation, everything at close.

Two writers, one set of files, so three rules (Kafka runs its checkpoint writes on a scheduler thread
under the log's lock; we have no such lock around the Log, hence these):

1. *The values are taken on the owner's thread.* ``snapshot(values)`` (owner) copies the offsets that
   differ from what the files hold into a ``CheckpointSnapshot``; only ``CheckpointSnapshot.write()``
   runs in the worker, and it reads nothing of the Log.
2. *One writer per file at a time.* Every file write, from either thread, happens under this object's
   lock (both writers use ``<name>.tmp``). A per-log lock rather than routing every write through the
   worker: the Log's synchronous writes must stay synchronous (the simulation drives the Log on one
   thread, and a lowered HW must be on disk before the follower appends past it); the owner waits for
   the lock only when a worker write of the same log is in flight, i.e. at most one write's time,
   where today it always paid every write.
3. *Never a stale value, never a stale directory.* Each request to write a file takes a ticket; a
   snapshot writes a file only if its ticket is still the newest one issued for that file (a newer
   request — e.g. a truncation's lowered HW — carries a newer value, written or about to be). And
   ``close()`` (owner, under the lock, after the Log's final writes — which already supersede every
   snapshot; the mark does not depend on that) marks the checkpoints closed: a snapshot written after
   that writes nothing. The log manager closes a log before renaming its directory for deletion
   (``<dir>.N-delete``), so an in-flight write either finished before the close (into the old
   directory) or writes nothing — it can never land in a new directory of the same name.

Thread-safety: ``write_if_changed``, ``snapshot`` and ``close`` are called by the Log's owner only;
``CheckpointSnapshot.write`` from any one thread at a time (the lock serializes it with the owner).
Reading ``_written`` and ``_tickets`` on the owner's thread without the lock is safe: only the owner
changes ``_tickets``, and a stale ``_written`` only makes a snapshot include a file that then writes
nothing (checked again under the lock).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from storage.log_loader import Checkpoints

NAMES = ("high_watermark", "log_start_offset", "recovery_point")


@dataclass(frozen=True, slots=True)
class CheckpointSnapshot:
    """Offsets of one log taken on its owner's thread, to be written by ``write()`` in any thread."""

    checkpoints: LogCheckpoints
    entries: tuple[tuple[str, int, int], ...]  # (name, offset, ticket)

    def write(self) -> int:
        """Write the entries still current (rule 3); the number of files written. Raises OSError."""
        return self.checkpoints.write_snapshot(self)


class LogCheckpoints(Checkpoints):
    """The three offset checkpoints of a log directory, with the rules of the module docstring."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self._lock = threading.Lock()
        self._written: dict[str, int] = {}  # the offset each file holds, as far as we wrote it
        self._tickets = dict.fromkeys(NAMES, 0)  # the newest write request per file
        self._closed = False

    def write_if_changed(self, name: str, offset: int) -> None:
        """Owner: write ``offset`` now unless the file holds it; supersedes any snapshot in flight."""
        self._tickets[name] += 1
        with self._lock:
            self._write_locked(name, offset)

    def snapshot(self, offsets: dict[str, int]) -> CheckpointSnapshot | None:
        """Owner: the offsets that differ from the files, or None when there is nothing to write."""
        if self._closed:
            return None
        entries = []
        for name, offset in offsets.items():
            if self._written.get(name) != offset:
                self._tickets[name] += 1
                entries.append((name, offset, self._tickets[name]))
        return CheckpointSnapshot(self, tuple(entries)) if entries else None

    def write_snapshot(self, snapshot: CheckpointSnapshot) -> int:
        assert snapshot.checkpoints is self, "a snapshot of another log"
        written = 0
        with self._lock:
            for name, offset, ticket in snapshot.entries:
                if self._closed or ticket != self._tickets[name]:
                    continue  # closed (maybe deleted), or superseded by a newer value
                written += self._write_locked(name, offset)
        return written

    def close(self) -> None:
        """Owner, after the final writes: no snapshot writes anything from now on."""
        with self._lock:
            self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def _write_locked(self, name: str, offset: int) -> int:
        if self._written.get(name) == offset:
            return 0
        getattr(self, name).write(offset)
        self._written[name] = offset
        return 1
