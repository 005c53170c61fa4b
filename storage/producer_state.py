"""Per-partition producer state for the idempotent producer (KIP-98): sans-I/O.

Each batch an idempotent producer sends carries ``producerId``, ``producerEpoch`` and
``baseSequence`` (the sequence of its first record; the last record's is ``baseSequence +
lastOffsetDelta``, wrapping past ``INT32_MAX`` to 0 as in Kafka). For every producer id seen in a
partition's log we keep its epoch and the metadata of its last ``MAX_BATCHES_PER_PRODUCER`` (5)
batches: ``(first_seq, last_seq, first_offset, last_offset)``. With that the leader decides, for a
batch about to be appended (``check``), before anything is written, by Kafka's rules
(``ProducerAppendInfo.checkProducerEpoch`` and ``checkSequence``, Kafka >= 2.5, KIP-360):

- producer id ``NO_PRODUCER_ID`` (-1): not idempotent, always appended.
- unknown producer (no entry: new, its state expired after ``producer.id.expiration.ms``, or all
  its batches were truncated away): appended whatever its sequence and epoch. Kafka accepts any
  sequence when it knows no epoch for the producer (also after retention or DeleteRecords removed
  its batches), so that an idle producer that comes back after its state expired is not refused;
  the batch starts a new window there. This is safe for pipelined requests because the listener processes one
  connection's requests in arrival order (``broker.kafka.listener``) and a client sends a partition's
  batches on one connection in sequence order: a later batch never reaches the log before an
  earlier one of the same request stream. Kafka no longer answers ``UNKNOWN_PRODUCER_ID`` to a
  Produce (it did before KIP-360, for a first sequence other than 0); neither does pykraft.
- epoch older than the producer's current epoch -> ``INVALID_PRODUCER_EPOCH`` (Kafka >= 2.7 name).
- epoch newer: the batch must start at sequence 0, else ``OUT_OF_ORDER_SEQUENCE_NUMBER``.
- same epoch, ``(first_seq, last_seq)`` equal to one of the 5 retained batches -> a **duplicate**:
  answered with the original's offsets and not appended again (Kafka looks for a duplicate first;
  only a batch of the entry's epoch can be one, so the order of these checks does not matter).
- same epoch, ``first_seq == last_seq + 1`` (mod 2^31) -> in sequence, appended.
- anything else -> ``OUT_OF_ORDER_SEQUENCE_NUMBER`` (a gap, or a batch older than the 5-window).

After an append, leaders and followers alike call ``update`` with the batch and its offsets (this is
how followers, and a restarted broker replaying its log, rebuild the same state, so a retry sent to a
new leader after failover is still recognised as a duplicate).

Expiry (KIP-854, the broker setting ``producer.id.expiration.ms`` in ``broker.config``, passed down
by ``ReplicaManager``, which checks at most ten times per period, on produce):
``remove_expired(now_ms)`` drops a producer only when its **newest** batch was appended at least
``expiration_ms`` ago (``last_update_ms``, the broker's clock at the append, is refreshed by every
batch, including duplicates answered from the window). A live producer keeps refreshing it, and a
retry is only ever sent within the client's ``delivery.timeout.ms`` of the original, which must stay
below ``producer.id.expiration.ms`` (default 1 day vs 2 minutes): so a retry of a batch whose state
is still needed never meets an expired entry.

Invariants (``invariants()``): per producer at most 5 batches, in offset order, each
``last_offset - first_offset == seq distance(first_seq, last_seq)``, consecutive batches in sequence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from proto.errors import ErrorCode
from proto.kafka_types import NO_PRODUCER_ID, NO_SEQUENCE

INT32_MAX = 2**31 - 1
MAX_BATCHES_PER_PRODUCER = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default (1 day)


def next_sequence(sequence: int, increment: int = 1) -> int:
    """``sequence + increment`` wrapping past INT32_MAX to 0 (Kafka's incrementSequence)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    return next_sequence(base_sequence, last_offset_delta)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended batch of a producer: its sequences and where it landed in the log."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """The producer fields of a batch header that is about to be (or was) appended."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int

    @property
    def last_seq(self) -> int:
        return last_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def is_idempotent(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID


@dataclass(frozen=True, slots=True)
class ProducerEntry:
    """What the partition remembers of one producer id."""

    producer_id: int
    producer_epoch: int
    batches: tuple[BatchMetadata, ...]
    last_update_ms: int

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


@dataclass(frozen=True, slots=True)
class Append:
    """``check`` verdict: append the batch."""


@dataclass(frozen=True, slots=True)
class Duplicate:
    """``check`` verdict: the batch was appended before; answer with the original's offsets."""

    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class Reject:
    """``check`` verdict: refuse the batch (nothing is appended)."""

    code: ErrorCode
    message: str


APPEND = Append()
Verdict = Append | Duplicate | Reject


@dataclass
class ProducerStateManager:
    """The producer entries of one partition. Mutated only through ``update``/``remove_expired``/``clear``."""

    expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    producers: dict[int, ProducerEntry] = field(default_factory=dict)

    def check(self, batch: ProducerBatch) -> Verdict:
        """Decide whether ``batch`` may be appended (see the module docstring for the rules)."""
        if not batch.is_idempotent:
            return APPEND
        entry = self.producers.get(batch.producer_id)
        if entry is None:
            # Kafka: no epoch known for this producer (currentEntry.producerEpoch == NO_PRODUCER_EPOCH)
            # -> any sequence is accepted (module docstring).
            return APPEND
        if batch.producer_epoch < entry.producer_epoch:
            return Reject(
                ErrorCode.INVALID_PRODUCER_EPOCH,
                f"producer {batch.producer_id} epoch {batch.producer_epoch} is older than the current "
                f"epoch {entry.producer_epoch}: this producer was fenced by a newer instance",
            )
        if batch.producer_epoch > entry.producer_epoch:
            if batch.base_sequence != 0:
                return Reject(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {batch.producer_id} new epoch {batch.producer_epoch} must start at "
                    f"sequence 0, got {batch.base_sequence}",
                )
            return APPEND
        original = entry.find_duplicate(batch.base_sequence, batch.last_seq)
        if original is not None:
            return Duplicate(original.first_offset, original.last_offset)
        # An entry always holds a batch (``invariants``); were it empty, NO_SEQUENCE + 1 == 0 is expected,
        # as in Kafka's inSequence.
        if batch.base_sequence == next_sequence(entry.last_seq):
            return APPEND
        return Reject(
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"producer {batch.producer_id} epoch {batch.producer_epoch}: expected sequence "
            f"{next_sequence(entry.last_seq)}, got {batch.base_sequence} (a gap, or a batch older "
            f"than the last {MAX_BATCHES_PER_PRODUCER})",
        )

    def check_all(self, batches: Iterable[ProducerBatch]) -> Verdict:
        """Verdict for the batches of one produce request to one partition, all or nothing.

        A duplicate is recognised only as a request of exactly one batch (the client sends one
        batch per partition per request); the rest are checked in order as if each earlier one
        had been appended.
        """
        batches = list(batches)
        if len(batches) == 1:
            return self.check(batches[0])
        scratch = ProducerStateManager(self.expiration_ms, dict(self.producers))
        offset = 0
        for batch in batches:
            verdict = scratch.check(batch)
            if isinstance(verdict, Duplicate):
                return Reject(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {batch.producer_id}: batch {batch.base_sequence}..{batch.last_seq} "
                    "was already appended; send a duplicate batch alone",
                )
            if isinstance(verdict, Reject):
                return verdict
            scratch.update(batch, offset, offset + batch.last_offset_delta, 0)
            offset += batch.last_offset_delta + 1
        return APPEND

    def update(self, batch: ProducerBatch, first_offset: int, last_offset: int, now_ms: int) -> None:
        """Record an appended batch (leader after ``check``, follower append, recovery replay)."""
        if not batch.is_idempotent:
            return
        meta = BatchMetadata(batch.base_sequence, batch.last_seq, first_offset, last_offset)
        entry = self.producers.get(batch.producer_id)
        # A sequence gap can only come from log compaction (storage.cleaner drops a producer's batches
        # but its last): the window restarts there, as dedup is only ever asked about the newest batches.
        if (
            entry is None
            or batch.producer_epoch != entry.producer_epoch
            or batch.base_sequence != next_sequence(entry.last_seq)
        ):
            batches: tuple[BatchMetadata, ...] = (meta,)
        else:
            batches = (*entry.batches, meta)[-MAX_BATCHES_PER_PRODUCER:]
        self.producers[batch.producer_id] = ProducerEntry(
            batch.producer_id, batch.producer_epoch, batches, now_ms
        )

    def touch(self, producer_id: int, now_ms: int) -> None:
        """A duplicate answered from the window still shows the producer alive."""
        entry = self.producers.get(producer_id)
        if entry is not None:
            self.producers[producer_id] = ProducerEntry(
                entry.producer_id, entry.producer_epoch, entry.batches, max(now_ms, entry.last_update_ms)
            )

    def remove_expired(self, now_ms: int) -> list[int]:
        """Drop producers whose newest batch is ``expiration_ms`` old or older; return their ids."""
        expired = [
            pid for pid, e in self.producers.items() if now_ms - e.last_update_ms >= self.expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return expired

    def truncate_from(self, offset: int) -> None:
        """Forget batches at or after ``offset`` (a follower truncating its log)."""
        for pid, entry in list(self.producers.items()):
            kept = tuple(b for b in entry.batches if b.last_offset < offset)
            if not kept:
                del self.producers[pid]
            elif len(kept) != len(entry.batches):
                self.producers[pid] = ProducerEntry(pid, entry.producer_epoch, kept, entry.last_update_ms)

    def clear(self) -> None:
        self.producers.clear()

    def invariants(self) -> None:
        for pid, entry in self.producers.items():
            assert entry.producer_id == pid, f"entry {entry.producer_id} stored under {pid}"
            assert 0 < len(entry.batches) <= MAX_BATCHES_PER_PRODUCER, (
                f"producer {pid} holds {len(entry.batches)} batches"
            )
            for batch in entry.batches:
                span = batch.last_offset - batch.first_offset
                assert last_sequence(batch.first_seq, span) == batch.last_seq, (
                    f"producer {pid}: {batch} offsets and sequences disagree"
                )
            for before, after in zip(entry.batches, entry.batches[1:], strict=False):
                assert before.last_offset < after.first_offset, f"producer {pid}: {before} !< {after}"
                assert after.first_seq == next_sequence(before.last_seq), (
                    f"producer {pid}: {after} does not follow {before}"
                )
