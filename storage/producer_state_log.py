"""The producer state of one log kept in line with its batches and snapshots (Kafka's ``UnifiedLog`` and
``ProducerStateManager`` together).

``storage.log.Log`` owns a ``storage.producer_state.ProducerStateManager`` and calls these at the
moments that change it, so that the state always describes exactly the batches in the log:

- ``recover(plog, state, now_ms)`` when the log opens: delete snapshots past the log end (recovery
  truncated an unflushed tail they describe), load the newest ``<offset>.snapshot`` at or below the
  log end offset (``storage.producer_snapshot``) and replay only the batches after it.
- ``apply_appended(state, headers, last_offsets, now_ms)`` after every append, leader or follower
  (offsets come from what the log wrote, not from the request bytes, whose base offsets a leader
  has not assigned); ``snapshot_at_roll(directory, state, base, oldest_base)`` when that append
  rolled a segment — taken *before* the new segment's batches are applied, so it is exact at the
  segment's base offset.
- ``rebuild(plog, state, now_ms)`` after a truncation, ``clear(directory, state)`` after the log
  restarted empty.

Invariant: after each call, ``state`` equals the replay of every batch in
``[log_start_offset, log_end_offset)`` (up to the five-batch window and expiry).
Thread-safety: none; the log's owner calls them.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from proto.kafka_types import NO_PRODUCER_ID
from storage import producer_snapshot
from storage.batch_header import BatchHeader, iter_batches
from storage.producer_state import (
    BatchMetadata,
    ProducerBatch,
    ProducerEntry,
    ProducerStateManager,
)

REPLAY_CHUNK_BYTES = 1 << 20


class ReadableLog(Protocol):
    """What recovery needs of ``storage.log.Log`` (a Protocol: the Log imports this module)."""

    @property
    def directory(self) -> Path: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    def read(self, start_offset: int, max_bytes: int) -> bytes: ...


def producer_batch(header: BatchHeader) -> ProducerBatch:
    return ProducerBatch(
        header.producer_id, header.producer_epoch, header.base_sequence, header.last_offset_delta
    )


def producer_batches(records: bytes | bytearray | memoryview) -> list[tuple[ProducerBatch, int]]:
    """``(ProducerBatch, base_offset)`` for each batch in ``records`` (headers are not re-validated)."""
    return [(producer_batch(h), h.base_offset) for _, h in iter_batches(records, validate=False)]


def to_snapshot(state: ProducerStateManager) -> list[producer_snapshot.SnapshotEntry]:
    return [
        (e.producer_id, e.producer_epoch, e.last_update_ms,
         tuple((b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in e.batches))
        for e in state.producers.values()
    ]  # fmt: skip


def from_snapshot(entries: list[producer_snapshot.SnapshotEntry], state: ProducerStateManager) -> None:
    state.clear()
    for producer_id, epoch, last_update_ms, batches in entries:
        state.producers[producer_id] = ProducerEntry(
            producer_id, epoch, tuple(BatchMetadata(*b) for b in batches), last_update_ms
        )


def replay(plog: ReadableLog, state: ProducerStateManager, start_offset: int, now_ms: int) -> int:
    """Apply every batch in ``[start_offset, log end)``; returns the number of batches replayed."""
    offset, count = max(start_offset, plog.log_start_offset), 0
    while offset < plog.log_end_offset:
        chunk = plog.read(offset, REPLAY_CHUNK_BYTES)
        if not chunk:
            break
        for batch, base_offset in producer_batches(chunk):
            state.update(batch, base_offset, base_offset + batch.last_offset_delta, now_ms)
            offset = base_offset + batch.last_offset_delta + 1
            count += 1
    return count


def recover(plog: ReadableLog, state: ProducerStateManager, now_ms: int) -> None:
    """Newest snapshot <= log end offset, then replay the batches after it."""
    state.clear()
    # A snapshot past the log end (recovery truncated an unflushed tail) describes batches that are
    # gone: delete it before the log grows past it again with other batches.
    producer_snapshot.delete_snapshots(plog.directory, above=plog.log_end_offset)
    loaded = producer_snapshot.load_latest(plog.directory, plog.log_end_offset)
    start = 0
    if loaded is not None:
        start, entries = loaded
        from_snapshot(entries, state)
    replay(plog, state, start, now_ms)


def apply_appended(
    state: ProducerStateManager,
    headers: Iterable[tuple[int, BatchHeader]],
    last_offsets: Iterable[int],
    now_ms: int,
) -> None:
    """Record appended batches: each header with the last offset the log gave its batch."""
    for (_, header), last_offset in zip(headers, last_offsets, strict=True):
        if header.producer_id == NO_PRODUCER_ID:  # not idempotent: nothing to remember (and hot)
            continue
        state.update(producer_batch(header), last_offset - header.last_offset_delta, last_offset, now_ms)


def snapshot_at_roll(
    directory: Path, state: ProducerStateManager, base_offset: int, oldest_base: int
) -> None:
    """A new segment starts at ``base_offset``: snapshot the state there, drop those of deleted segments."""
    producer_snapshot.write_snapshot(directory, base_offset, to_snapshot(state))
    producer_snapshot.delete_snapshots(directory, below=oldest_base)


def rebuild(plog: ReadableLog, state: ProducerStateManager, now_ms: int) -> None:
    """After the log was truncated to its log end offset: drop newer snapshots and rebuild."""
    producer_snapshot.delete_snapshots(plog.directory, above=plog.log_end_offset)
    recover(plog, state, now_ms)


def clear(directory: Path, state: ProducerStateManager) -> None:
    producer_snapshot.delete_snapshots(directory, above=-1)
    state.clear()
