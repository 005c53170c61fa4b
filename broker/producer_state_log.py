"""Glue between a partition's ``storage.log.Log`` and its ``broker.producer_state.ProducerStateManager``.

- ``producer_batches(records)``: the producer fields of each v2 batch in a buffer (headers only).
- ``rebuild(plog, state)``: recovery: load the newest ``<offset>.snapshot`` at or below the log end
  offset (``storage.producer_snapshot``) and replay only the batches after it.
- ``PartitionProducerState``: the state plus its snapshot duties: ``after_append`` updates the
  state with appended batches and writes a snapshot when the append rolled a segment (the snapshot
  is taken before the new segment's batches are applied, so it is exact at the segment's base
  offset); ``truncate`` and ``truncate_fully`` keep state and snapshots in line with the log.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.producer_state import BatchMetadata, ProducerBatch, ProducerEntry, ProducerStateManager
from storage import producer_snapshot
from storage.batch_header import iter_batches
from storage.log import Log

REPLAY_CHUNK_BYTES = 1 << 20


def producer_batches(records: bytes | bytearray | memoryview) -> list[tuple[ProducerBatch, int]]:
    """``(ProducerBatch, base_offset)`` for each batch in ``records`` (headers are not re-validated)."""
    return [
        (ProducerBatch(h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta), h.base_offset)
        for _, h in iter_batches(records, validate=False)
    ]


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


def replay(plog: Log, state: ProducerStateManager, start_offset: int, now_ms: int) -> int:
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


@dataclass
class PartitionProducerState:
    plog: Log
    state: ProducerStateManager

    @classmethod
    def open(cls, plog: Log, expiration_ms: int, now_ms: int) -> PartitionProducerState:
        """Recover: newest snapshot <= log end offset, then replay the batches after it."""
        state = ProducerStateManager(expiration_ms)
        # A snapshot past the log end (recovery truncated an unflushed tail) describes batches that
        # are gone: delete it before the log grows past it again with other batches.
        producer_snapshot.delete_snapshots(plog.directory, above=plog.log_end_offset)
        loaded = producer_snapshot.load_latest(plog.directory, plog.log_end_offset)
        start = 0
        if loaded is not None:
            start, entries = loaded
            from_snapshot(entries, state)
        replay(plog, state, start, now_ms)
        return cls(plog, state)

    def after_append(
        self,
        records: bytes | bytearray | memoryview,
        segment_before: int,
        now_ms: int,
        first_offset: int | None = None,
    ) -> None:
        """Apply appended batches; snapshot first if the append rolled a segment.

        A follower's batches carry their offsets; the leader's request bytes do not (the log patched
        its own copy), so the leader passes ``first_offset`` and the batches are laid out from it.
        """
        rolled_to = self.plog.segment_base_offsets[-1]
        if rolled_to != segment_before:
            producer_snapshot.write_snapshot(self.plog.directory, rolled_to, to_snapshot(self.state))
            producer_snapshot.delete_snapshots(self.plog.directory, below=self.plog.segment_base_offsets[0])
        next_offset = first_offset
        for batch, base_offset in producer_batches(records):
            start = base_offset if next_offset is None else next_offset
            self.state.update(batch, start, start + batch.last_offset_delta, now_ms)
            if next_offset is not None:
                next_offset = start + batch.last_offset_delta + 1

    def truncate(self, now_ms: int) -> None:
        """After the log was truncated to its log end offset: drop newer snapshots and rebuild."""
        end = self.plog.log_end_offset
        producer_snapshot.delete_snapshots(self.plog.directory, above=end)
        rebuilt = PartitionProducerState.open(self.plog, self.state.expiration_ms, now_ms)
        self.state.producers = rebuilt.state.producers

    def truncate_fully(self) -> None:
        producer_snapshot.delete_snapshots(self.plog.directory, above=-1)
        self.state.clear()
