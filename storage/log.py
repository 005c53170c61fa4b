"""The partition log: an ordered list of segments in one directory, Kafka's ``UnifiedLog``.

Offsets (Kafka's words)::

    log_start_offset <= high_watermark <= log_end_offset
    [log_start_offset, high_watermark)  committed: what consumers and Spark may read
    [high_watermark, log_end_offset)    appended here, not yet known to be replicated enough
    recovery_point <= log_end_offset    everything below is fsynced (data and indexes)

Appending never decodes records: each v2 batch is validated (header, CRC-32C, size), then written with
a new ``baseOffset`` and ``partitionLeaderEpoch`` — both outside the CRC — and its other bytes as they
are (``storage.log_validator``). An append is all-or-nothing: if any batch is bad, nothing is written.
Reading slices the segment file (``os.pread``) at batch boundaries found through the sparse index.

The files of a partition directory are described in ``storage.log_loader`` (checkpoints, clean shutdown
marker, recovery) and ``storage.segment`` (segments and indexes).

Compaction (``cleanup.policy`` contains ``compact``; ``storage.compaction``, ``storage.cleaner``): a
leader append refuses records without a key; ``plan_cleaning`` picks whole inactive segments below
the HW, a background thread cleans them into new files (``cleaner.clean``), and ``finish_cleaning``
swaps them in — if the planned segments are still there — in one short call (renames behind one
fsynced commit marker). Offsets never change;
a compacted log has gaps, which reads (the first batch ending at or after an offset) and follower
appends (a batch may start past the LEO) accept, as in Kafka. Retention by time and size applies
only when the policy contains ``delete``.

Thread-safety: none. One owner (the broker's partition driver) calls every method; no threads inside
(``cleaner.clean`` runs in another thread on a plan's own descriptors and never touches the Log). The
one exception: a ``CheckpointSnapshot`` from ``checkpoint_snapshot()`` (taken by the owner) may be
written in another thread; ``storage.log_checkpoints`` serializes it with the Log's own checkpoint
writes and drops it once superseded or once the Log is closed.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from proto import errors
from proto.kafka_types import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, NO_TIMESTAMP
from proto.topic_configs import LOG_APPEND_TIME
from storage import cleaner, compaction, log_loader, log_validator, producer_state_log
from storage.batch_header import BatchHeader, CorruptRecordError
from storage.checkpoint import OffsetCheckpoint
from storage.config import LogConfig
from storage.epoch_cache import EpochEndOffset, LeaderEpochCache
from storage.file_slice import FileSlice
from storage.log_checkpoints import CheckpointSnapshot, LogCheckpoints
from storage.log_validator import UnexpectedAppendOffsetError
from storage.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS, ProducerStateManager
from storage.record_batch import decode_batch
from storage.segment import MAX_RELATIVE_OFFSET, AppendedBatch, LogSegment

__all__ = [
    "Log",
    "LogAppendInfo",
    "TimestampAndOffset",
    "UnexpectedAppendOffsetError",
]


class LogAppendInfo(NamedTuple):
    """What an append wrote: offsets, timestamps and sizes (Kafka's ``LogAppendInfo``).

    Immutable; a NamedTuple rather than a frozen dataclass because one is built per append, on the
    hot path, and a NamedTuple is built in C.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # NO_TIMESTAMP unless the topic uses LogAppendTime
    log_start_offset: int
    num_batches: int
    num_records: int
    valid_bytes: int


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int


class Log:
    """One partition's log in ``directory``.

    Opening recovers after an unclean stop (see ``storage.log_loader``). Public methods:

    - ``append_as_leader(batches, leader_epoch) -> LogAppendInfo``: validate, assign offsets from the
      log end offset, stamp the leader epoch, write. Raises CorruptMessageError / InvalidRecordError /
      MessageTooLargeError / RecordListTooLargeError / FencedLeaderEpochError; nothing is written then.
    - ``append_as_follower(batches) -> LogAppendInfo``: keep the leader's offsets and epochs; they must
      continue the log exactly (else UnexpectedAppendOffsetError).
    - ``read(start_offset, max_bytes, max_offset=None) -> bytes``: whole raw batches from the one holding
      ``start_offset``, none holding an offset >= ``max_offset`` (pass the HW), at least one batch even
      when it exceeds ``max_bytes``; b"" at the end. OffsetOutOfRangeError outside
      ``[log_start_offset, log_end_offset]``.
    - ``offset_for_timestamp(timestamp) -> TimestampAndOffset | None`` (also EARLIEST/LATEST_TIMESTAMP).
    - ``end_offset_for_epoch(leader_epoch) -> EpochEndOffset`` (OffsetsForLeaderEpoch);
      ``maybe_assign_epoch_start_offset(leader_epoch) -> bool`` when becoming leader.
    - ``update_config(config)``, ``update_high_watermark(offset)``,
      ``maybe_increment_log_start_offset(offset) -> bool``,
      ``delete_old_segments() -> int`` (retention.ms / retention.bytes / log start offset),
      ``truncate_to(offset) -> bool``, ``truncate_fully_and_start_at(offset)``.
    - ``plan_cleaning(now_ms) -> CleaningPlan | None`` and ``finish_cleaning(result) -> bool``
      (compaction; see the module docstring), ``abort_cleaning(plan)``.
    - ``flush()``, ``maybe_flush()`` (flush.ms), ``write_checkpoints()``, ``close()``, ``invariants()``.
    - ``checkpoint_snapshot() -> CheckpointSnapshot | None``: the checkpoint offsets to write in
      another thread (``snapshot.write()``), instead of ``write_checkpoints()`` here.
    - Properties: ``log_end_offset``, ``log_start_offset``, ``high_watermark``, ``recovery_point``,
      ``size_bytes``, ``segment_base_offsets``, ``leader_epoch_cache``, ``latest_epoch``.

    ``clock_ms`` (injected: the Log never reads the time itself) gives the time for segment.ms,
    retention.ms, flush.ms, LogAppendTime and producer expiry: ``proto.clock.wall_clock_ms`` in the
    broker, a fake or virtual clock in tests and the simulation.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig | None,
        clock_ms: Callable[[], int],
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.directory = Path(directory)
        self.name = self.directory.name  # for messages: Kafka names partition directories <topic>-<n>
        self.config = config or LogConfig()
        self._clock_ms = clock_ms
        self._log_append_time = self.config.message_timestamp_type == LOG_APPEND_TIME
        self._checkpoints = LogCheckpoints(self.directory)
        loaded = log_loader.load_log(self.directory, self.config, self._checkpoints, clock_ms())
        self.load_result = loaded
        self._segments: list[LogSegment] = loaded.segments
        self._bases = [segment.base_offset for segment in self._segments]
        leo = self.log_end_offset
        self._log_start_offset = min(max(loaded.log_start_offset, self._bases[0]), leo)
        self._recovery_point = leo if loaded.had_clean_shutdown else min(loaded.recovery_point, leo)
        hw = loaded.high_watermark if loaded.high_watermark is not None else self._log_start_offset
        self._high_watermark = min(max(hw, self._log_start_offset), leo)
        try:
            self._leader_epoch_cache = self._load_epoch_cache(
                loaded.epoch_starts, loaded.first_recovered_offset
            )
        except errors.KafkaStorageError:
            for segment in self._segments:
                segment.close()
            raise
        self._unflushed_records = 0
        self._last_flush_ms = clock_ms()
        if loaded.high_watermark is not None and loaded.high_watermark > self._high_watermark:
            # Capped at a shorter recovered log (a power loss took its tail): persist the capped HW
            # now, or the records appended before the next checkpoint would come back as committed
            # after another crash (HW = min(stale checkpoint, LEO)).
            self._write_if_changed("high_watermark", self._high_watermark)
        self._closed = False
        # The cleaner checkpoint (cleaner.finalize writes it): the first offset not yet compacted.
        checkpoint = OffsetCheckpoint(self.directory / cleaner.CLEANER_CHECKPOINT_FILE).read()
        self._first_dirty_offset = checkpoint or 0
        # Earliest delete horizon of kept tombstones; unknown after opening (0: check at the next pass).
        self._tombstone_horizon_ms: int | None = 0
        self._cleaning: cleaner.CleaningPlan | None = None
        self._truncations = 0  # a pass planned before a truncation never swaps in
        self._retired: list[LogSegment] = []  # replaced by cleaned segments; closed one pass later
        # The idempotent producers of this log (KIP-98), kept in line with its batches by every
        # append and truncation below (storage.producer_state_log); the replica manager asks it.
        self.producer_state = ProducerStateManager(producer_id_expiration_ms)
        producer_state_log.recover(self, self.producer_state, clock_ms())
        self.invariants()

    def _load_epoch_cache(
        self, epoch_starts: list[tuple[int, int]], first_recovered_offset: int | None = None
    ) -> LeaderEpochCache:
        """The cache file, minus what the recovered batches contradict. The file is fsynced on every
        change, the batches only by a flush: after a power loss the file may hold epochs for offsets
        whose batches were rolled back (e.g. a follower's truncation and the epoch it fetched next),
        so from the first recovered segment on the cache is rebuilt from the batches' epochs."""
        cache = LeaderEpochCache(self.directory)
        end = self.log_end_offset
        cache.truncate_from_end(end if first_recovered_offset is None else min(end, first_recovered_offset))
        for epoch, start_offset in epoch_starts:
            if epoch >= 0:
                cache.assign(epoch, start_offset)
        cache.truncate_from_start(self._log_start_offset)
        return cache

    # ------------------------------------------------------------------------------------- offsets

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._segments)

    @property
    def segment_base_offsets(self) -> tuple[int, ...]:
        return tuple(self._bases)

    @property
    def leader_epoch_cache(self) -> LeaderEpochCache:
        return self._leader_epoch_cache

    @property
    def latest_epoch(self) -> int | None:
        return self._leader_epoch_cache.latest_epoch

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def update_config(self, config: LogConfig) -> None:
        """A topic config changed (AlterConfigs): retention, compaction and new segments follow it."""
        self.config = config
        self._log_append_time = config.message_timestamp_type == LOG_APPEND_TIME

    def update_high_watermark(self, offset: int) -> None:
        """Set the HW (the broker's replication logic decides it); kept in memory until a checkpoint."""
        assert self._log_start_offset <= offset <= self.log_end_offset, (
            f"{self.name}: HW {offset} outside [log start {self._log_start_offset}, "
            f"LEO {self.log_end_offset}]"
        )
        self._high_watermark = offset

    def maybe_assign_epoch_start_offset(self, leader_epoch: int) -> bool:
        """A new leader records its epoch at the LEO when it becomes leader (Kafka's ``makeLeader``),
        before any append, so followers are compared against it at once; True if the cache changed."""
        return self._leader_epoch_cache.assign(leader_epoch, self.log_end_offset)

    def end_offset_for_epoch(self, leader_epoch: int) -> EpochEndOffset:
        """OffsetsForLeaderEpoch: the largest epoch <= ``leader_epoch`` and the offset where it ends."""
        return self._leader_epoch_cache.end_offset_for(leader_epoch, self.log_end_offset)

    # ------------------------------------------------------------------------------------- appends

    def append_as_leader(
        self,
        batches: bytes | bytearray | memoryview,
        leader_epoch: int,
        origin: log_validator.AppendOrigin = log_validator.AppendOrigin.CLIENT,
    ) -> LogAppendInfo:
        """Validate, assign offsets from the LEO and ``leader_epoch``, write. All or nothing.

        The caller's buffer is never modified and its records are never copied (see
        ``storage.log_validator``).
        """
        self._check_leader_epoch(leader_epoch)
        return self.append_validated_as_leader(self.validate_as_leader(batches, origin), leader_epoch)

    def validate_as_leader(
        self,
        batches: bytes | bytearray | memoryview,
        origin: log_validator.AppendOrigin = log_validator.AppendOrigin.CLIENT,
    ) -> log_validator.ValidBatches:
        """The leader's checks of ``append_as_leader`` without writing: the replica manager validates
        first and checks the producer state next, in Kafka's order."""
        valid = log_validator.validate_batches(batches, self.config, self.name, origin=origin)
        if self.config.compact:
            compaction.check_keys(valid.data, valid.headers, self.name)
        return valid

    def _check_leader_epoch(self, leader_epoch: int) -> None:
        assert leader_epoch >= 0, f"leader epoch {leader_epoch} must be >= 0"
        latest = self._leader_epoch_cache.latest_epoch
        if latest is not None and leader_epoch < latest:
            raise errors.FencedLeaderEpochError(
                f"{self.name}: append in leader epoch {leader_epoch}, but the log already has "
                f"epoch {latest}; this leader is stale"
            )

    def append_validated_as_leader(
        self, valid: log_validator.ValidBatches, leader_epoch: int
    ) -> LogAppendInfo:
        """Append batches ``validate_as_leader`` accepted (see ``append_as_leader``)."""
        self._check_leader_epoch(leader_epoch)
        now_ms = self._clock_ms()
        first_offset = self.log_end_offset
        pieces: list[bytearray] | list[bytes | memoryview]
        if self._log_append_time:
            pieces, appended = log_validator.assign_offsets_with_log_append_time(
                valid, first_offset, leader_epoch, now_ms
            )
            log_append_time = now_ms
        else:
            pieces, appended = log_validator.assign_offsets(valid, first_offset, leader_epoch)
            log_append_time = NO_TIMESTAMP
        info = self._append(valid, pieces, appended, first_offset, log_append_time, now_ms)
        self._leader_epoch_cache.assign(leader_epoch, first_offset)
        return info

    def append_as_follower(self, batches: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches fetched from the leader, keeping their offsets and leader epochs (a compacted
        leader's batches may start past the LEO and hold fewer records than offsets)."""
        valid = log_validator.validate_batches(batches, self.config, self.name, replicated=True)
        appended = log_validator.follower_batches(valid, self.log_end_offset, self.name)
        first_offset = valid.headers[0][1].base_offset
        info = self._append(valid, [valid.data], appended, first_offset, NO_TIMESTAMP, self._clock_ms())
        for _, header in valid.headers:
            if header.partition_leader_epoch >= 0:
                self._leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        return info

    def _append(
        self,
        valid: log_validator.ValidBatches,
        pieces: list,
        appended: list[AppendedBatch],
        first_offset: int,
        log_append_time: int,
        now_ms: int,
    ) -> LogAppendInfo:
        best = appended[0] if len(appended) == 1 else max(appended, key=lambda batch: batch.max_timestamp)
        segment_before = self._bases[-1]
        self._maybe_roll(len(valid.data), best.max_timestamp, appended[-1].last_offset, now_ms)
        self.active_segment.append(pieces, len(valid.data), appended)
        if self._bases[-1] != segment_before:  # exact at the new base: before its batches are applied
            producer_state_log.snapshot_at_roll(
                self.directory, self.producer_state, self._bases[-1], self._bases[0]
            )
        producer_state_log.apply_appended(
            self.producer_state, valid.headers, [batch.last_offset for batch in appended], now_ms
        )
        records = valid.num_records
        info = LogAppendInfo(
            first_offset=first_offset,
            last_offset=appended[-1].last_offset,
            max_timestamp=best.max_timestamp,
            offset_of_max_timestamp=best.last_offset,
            log_append_time=log_append_time,
            log_start_offset=self._log_start_offset,
            num_batches=len(appended),
            num_records=records,
            valid_bytes=len(valid.data),
        )
        self._unflushed_records += records
        self._maybe_flush_after_append(now_ms)
        return info

    # -------------------------------------------------------------------------------------- reads

    def read(
        self, start_offset: int, max_bytes: int, max_offset: int | None = None, *, min_one_batch: bool = True
    ) -> bytes:
        """Raw whole batches from the one holding ``start_offset``, stopping before ``max_offset``.

        With ``min_one_batch`` the first batch is returned when one is available, even when bigger
        than ``max_bytes`` (Kafka's minOneMessage, so that a consumer always makes progress); without
        it a first batch bigger than ``max_bytes`` gives nothing (a fetch passes it only until its
        first non-empty partition). One read stays inside one segment, as in Kafka: the caller
        fetches again from the next offset.
        """
        found = self._read_range(start_offset, max_bytes, max_offset, min_one_batch)
        return b"" if found is None else found[0].read(found[1], found[2])

    def read_slice(
        self, start_offset: int, max_bytes: int, max_offset: int | None = None, *, min_one_batch: bool = True
    ) -> FileSlice | bytes:
        """What ``read`` returns, as a ``FileSlice`` of the segment file instead of its bytes (Kafka's
        ``FileRecords.slice``: a Fetch answer sends it with sendfile); ``b""`` when there is nothing."""
        found = self._read_range(start_offset, max_bytes, max_offset, min_one_batch)
        return b"" if found is None else found[0].slice(found[1], found[2])

    def _read_range(
        self, start_offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> tuple[LogSegment, int, int] | None:
        """(segment, start position, end position) of ``read``'s answer; None when empty."""
        self._check_readable(start_offset)
        if max_bytes < 0:
            raise errors.InvalidRequestError(f"max_bytes {max_bytes} must be >= 0")
        end_offset = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        if start_offset >= end_offset:
            return None
        located = self._locate(start_offset)
        if located is None:
            return None
        segment, start_position, first_size = located
        limit = segment.size_bytes
        if end_offset < segment.next_offset:
            translated = segment.translate_offset(end_offset)
            limit = translated[0] if translated is not None else limit
        if limit <= start_position:
            return None
        # Whole batches only, and at least the first one if asked (Kafka's rule: consumers progress).
        want_end = min(start_position + (max(max_bytes, first_size) if min_one_batch else max_bytes), limit)
        end = segment.whole_batches_end(start_position, want_end) if want_end < limit else limit
        return (segment, start_position, end) if end > start_position else None

    def _check_readable(self, offset: int) -> None:
        if not self._log_start_offset <= offset <= self.log_end_offset:
            raise errors.OffsetOutOfRangeError(
                f"{self.name}: offset {offset} is outside the log's range "
                f"[{self._log_start_offset}, {self.log_end_offset}]"
            )

    def _segment_index(self, offset: int) -> int:
        """Index of the segment that holds ``offset`` (the first one for offsets below it)."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def _locate(self, offset: int) -> tuple[LogSegment, int, int] | None:
        """(segment, position, size) of the batch holding ``offset`` or the first one after it."""
        for segment in self._segments[self._segment_index(offset) :]:
            found = segment.translate_offset(offset)
            if found is not None:
                return segment, found[0], found[1].size_in_bytes
        return None

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """ListOffsets: the earliest record at/after the log start with a timestamp >= ``timestamp``.

        The indexes find the first batch whose max timestamp reaches ``timestamp`` with header reads
        only; that one batch is then decoded (a rare request, so per-record work is fine here) to
        find the exact record, as Kafka does. None when no record is that recent.
        EARLIEST_TIMESTAMP gives the log start offset, LATEST_TIMESTAMP the log end offset.
        """
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, self._log_start_offset)
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(NO_TIMESTAMP, self.log_end_offset)
        if timestamp < 0:
            raise errors.InvalidRequestError(
                f"timestamp {timestamp} must be >= 0, EARLIEST ({EARLIEST_TIMESTAMP}) "
                f"or LATEST ({LATEST_TIMESTAMP})"
            )
        for segment in self._segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= self._log_start_offset:
                continue
            for position, header in segment.batches_reaching(timestamp, self._log_start_offset):
                found = self._first_record_reaching(segment, position, header, timestamp)
                if found is not None:
                    return found
        return None

    def max_timestamp_and_offset(self) -> TimestampAndOffset | None:
        """ListOffsets MAX_TIMESTAMP (KIP-734): the largest record timestamp at/after the log start and
        the last offset of the batch carrying it (Kafka's answer before 3.8: batch-level, from the
        segments' running maxima, no record decoding); None when the log holds no record."""
        best: TimestampAndOffset | None = None
        for segment in self._segments:
            below_start = segment.offset_of_max_timestamp < self._log_start_offset
            if segment.max_timestamp == NO_TIMESTAMP or below_start:
                continue
            if best is None or segment.max_timestamp > best.timestamp:
                best = TimestampAndOffset(segment.max_timestamp, segment.offset_of_max_timestamp)
        return best

    def _first_record_reaching(
        self, segment: LogSegment, position: int, header: BatchHeader, timestamp: int
    ) -> TimestampAndOffset | None:
        data = segment.read(position, position + header.size_in_bytes)
        try:
            records = decode_batch(data).records
        except CorruptRecordError as exc:
            raise errors.KafkaStorageError(
                f"{self.name}: batch at offset {header.base_offset} is corrupt on disk: {exc.reason}"
            ) from None
        for record in records:
            if record.timestamp >= timestamp and record.offset >= self._log_start_offset:
                return TimestampAndOffset(record.timestamp, record.offset)
        return None

    # ------------------------------------------------------------------------------ roll and flush

    def _maybe_roll(self, incoming_bytes: int, max_timestamp: int, last_offset: int, now_ms: int) -> None:
        """Kafka's ``shouldRoll``: full, too old (segment.ms), or offsets past the int32 index range."""
        active = self.active_segment
        if active.size_bytes == 0:
            return
        if (
            active.size_bytes + incoming_bytes > self.config.segment_bytes
            or self._time_waited_for_roll_ms(active, max_timestamp, now_ms) > self.config.segment_ms
            or last_offset - active.base_offset > MAX_RELATIVE_OFFSET
        ):
            self.roll(now_ms)

    @staticmethod
    def _time_waited_for_roll_ms(active: LogSegment, max_timestamp: int, now_ms: int) -> int:
        """Record time since the segment's first batch (KAFKA-4099), else wall time since creation."""
        first = active.first_batch_timestamp
        if first is not None and first >= 0:
            return max_timestamp - first
        return now_ms - active.created_ms

    def roll(self, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (no-op when the active one is empty)."""
        active = self.active_segment
        if active.size_bytes == 0:
            return active
        active.on_become_inactive()
        # Index files reach the page cache now; fsync waits for flush() (a crash rescans from the
        # recovery point, so an unsynced inactive segment is recovered like the active one).
        active.flush(fsync=False)
        now_ms = self._clock_ms() if now_ms is None else now_ms
        segment = LogSegment.create(
            self.directory, self.log_end_offset, self.config.index_interval_bytes, now_ms
        )
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        return segment

    def _maybe_flush_after_append(self, now_ms: int) -> None:
        by_count = (
            self.config.flush_messages is not None and self._unflushed_records >= self.config.flush_messages
        )
        if by_count or self._flush_ms_elapsed(now_ms):
            self.flush()

    def _flush_ms_elapsed(self, now_ms: int) -> bool:
        return self.config.flush_ms is not None and now_ms - self._last_flush_ms >= self.config.flush_ms

    def maybe_flush(self) -> bool:
        """Flush when flush.ms has elapsed since the last flush (the broker calls this on a timer)."""
        if self._unflushed_records and self._flush_ms_elapsed(self._clock_ms()):
            self.flush()
            return True
        return False

    def flush(self) -> None:
        """fsync every segment holding offsets at or past the recovery point; advance it to the LEO."""
        leo = self.log_end_offset
        if self._recovery_point < leo:
            first = self._segment_index(self._recovery_point)
            for segment in self._segments[first:-1]:
                segment.flush(fsync=True)
            # The active segment is always rescanned after a crash (it holds the recovery point), so
            # only its data needs the fsync; its indexes are rebuilt.
            self.active_segment.flush_data()
            moved_segment = self._bases[first] != self.active_segment.base_offset
            self._recovery_point = leo
            if moved_segment:
                self._write_if_changed("recovery_point", leo)
        self._unflushed_records = 0
        self._last_flush_ms = self._clock_ms()

    def write_checkpoints(self) -> None:
        """Persist HW, log start offset and recovery point now, on this thread (close, truncation;
        the simulation's checkpoint timer). The broker's timer uses ``checkpoint_snapshot``."""
        self._write_if_changed("high_watermark", self._high_watermark)
        self._write_if_changed("log_start_offset", self._log_start_offset)
        self._write_if_changed("recovery_point", self._recovery_point)

    def checkpoint_snapshot(self) -> CheckpointSnapshot | None:
        """The HW, log start offset and recovery point that differ from their files, taken now, for
        ``snapshot.write()`` in a worker thread (``storage.log_checkpoints``: a later synchronous write
        or ``close()`` supersedes it); None when the files are current or the log is closed."""
        return self._checkpoints.snapshot({
            "high_watermark": self._high_watermark,
            "log_start_offset": self._log_start_offset,
            "recovery_point": self._recovery_point,
        })  # fmt: skip

    def _write_if_changed(self, name: str, offset: int) -> None:
        self._checkpoints.write_if_changed(name, offset)

    # ------------------------------------------------------------------------- retention, truncation

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset forward (DeleteRecords, or a follower following its leader)."""
        if offset > self._high_watermark:
            raise errors.OffsetOutOfRangeError(
                f"{self.name}: cannot move the log start offset to {offset}, past the high "
                f"watermark {self._high_watermark}"
            )
        if offset <= self._log_start_offset:
            return False
        self._set_log_start_offset(offset)
        return True

    def _set_log_start_offset(self, offset: int) -> None:
        self._log_start_offset = offset
        self._leader_epoch_cache.truncate_from_start(offset)
        self._write_if_changed("log_start_offset", offset)

    def delete_old_segments(self) -> int:
        """Delete whole segments below the HW past retention (time, size, log start); count deleted."""
        now_ms = self._clock_ms()
        deleted = self._delete_while(lambda segment, upper: upper <= self._log_start_offset)
        if not self.config.delete:  # cleanup.policy=compact: only the log start offset deletes
            return deleted
        if self.config.retention_ms is not None:
            retention_ms = self.config.retention_ms
            deleted += self._delete_while(
                lambda segment, upper: now_ms - segment.retention_timestamp_ms > retention_ms
            )
        if self.config.retention_bytes is not None:
            excess = [self.size_bytes - self.config.retention_bytes]

            def over_size(segment: LogSegment, upper: int) -> bool:
                if excess[0] - segment.size_bytes < 0:
                    return False
                excess[0] -= segment.size_bytes
                return True

            deleted += self._delete_while(over_size)
        return deleted

    def _delete_while(self, predicate: Callable[[LogSegment, int], bool]) -> int:
        doomed = []
        for index, segment in enumerate(self._segments):
            upper = self._bases[index + 1] if index + 1 < len(self._segments) else self.log_end_offset
            if upper > self._high_watermark or segment.size_bytes == 0 or not predicate(segment, upper):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self.roll()
        for segment in doomed:
            segment.delete()
        del self._segments[: len(doomed)]
        del self._bases[: len(doomed)]
        if self._bases[0] > self._log_start_offset:
            self._set_log_start_offset(self._bases[0])
        return len(doomed)

    def truncate_to(self, offset: int) -> bool:
        """Follower truncation: drop every batch holding an offset >= ``offset``; True if any was.

        The leader-epoch cache loses the epochs starting at or after ``offset`` even when no batch
        goes (``offset >= LEO``), as Kafka's ``UnifiedLog.truncateTo`` does: a replica that led an
        epoch and wrote nothing in it has that epoch at its LEO, and keeping it would make the
        follower send it as its last fetched epoch forever (the leader never had it)."""
        assert offset >= 0, f"truncate_to({offset})"
        if offset >= self.log_end_offset:
            self._leader_epoch_cache.truncate_from_end(offset)
            return False
        if offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        while len(self._segments) > 1 and self._bases[-1] > offset:
            self._segments.pop().delete()
            self._bases.pop()
        self.active_segment.truncate_to(offset)
        # Durable at once: the next flush starts at the segment holding the recovery point, which a
        # roll may already have moved past this one, so a power loss would bring the cut batches
        # back under later, flushed segments (overlapping offsets: the log no longer loads).
        self.active_segment.flush_data()
        leo = self.log_end_offset
        if leo < self._log_start_offset:
            # The removed batch straddled the log start: nothing readable is left below it.
            self.truncate_fully_and_start_at(self._log_start_offset)
            return True
        lowered = self._high_watermark > leo
        self._high_watermark = min(self._high_watermark, leo)
        self._recovery_point = min(self._recovery_point, leo)
        self._first_dirty_offset = min(self._first_dirty_offset, leo)
        self._truncations += 1
        self._leader_epoch_cache.truncate_from_end(leo)
        self._write_if_changed("recovery_point", self._recovery_point)
        if lowered:  # a checkpoint above the HW would cover the next leader's uncommitted records
            self._write_if_changed("high_watermark", self._high_watermark)
        producer_state_log.rebuild(self, self.producer_state, self._clock_ms())
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart empty at ``offset`` (a follower far behind its leader)."""
        assert offset >= 0, f"truncate_fully_and_start_at({offset})"
        for segment in self._segments:
            segment.delete()
        segment = LogSegment.create(
            self.directory, offset, self.config.index_interval_bytes, self._clock_ms()
        )
        self._segments, self._bases = [segment], [offset]
        self._log_start_offset = self._high_watermark = self._recovery_point = offset
        self._first_dirty_offset = min(self._first_dirty_offset, offset)
        self._truncations += 1
        self._leader_epoch_cache.clear()
        producer_state_log.clear(self.directory, self.producer_state)
        self.write_checkpoints()

    # ------------------------------------------------------------------------------------ compaction

    @property
    def first_dirty_offset(self) -> int:
        """The cleaner checkpoint: offsets below it were compacted by the last pass."""
        return self._first_dirty_offset

    def plan_cleaning(
        self, now_ms: int | None = None, max_map_keys: int = cleaner.DEFAULT_MAX_MAP_KEYS
    ) -> cleaner.CleaningPlan | None:
        """A compaction pass to run off this thread (``cleaner.clean``), or None when there is nothing
        worth cleaning: not compacted, a pass already running, no whole inactive segment below the HW
        (and min.compaction.lag.ms old), or a dirty ratio below min.cleanable.dirty.ratio while no
        tombstone's delete horizon has passed. The plan must reach ``finish_cleaning`` or
        ``abort_cleaning``."""
        if not self.config.compact or self._closed or self._cleaning is not None:
            return None
        now_ms = self._clock_ms() if now_ms is None else now_ms
        candidates = self._segments[:-1]  # never the active segment
        infos = [
            compaction.SegmentInfo(s.base_offset, s.next_offset, s.size_bytes, s.retention_timestamp_ms)
            for s in candidates
        ]
        upper_bound = min(self._high_watermark, self.active_segment.base_offset)
        count = compaction.cleanable_count(infos, upper_bound, now_ms, self.config.min_compaction_lag_ms)
        first_dirty = max(self._first_dirty_offset, self._bases[0])
        ratio, dirty_bytes = compaction.dirty_ratio(infos[:count], first_dirty)
        horizon = self._tombstone_horizon_ms
        tombstones_due = count > 0 and horizon is not None and now_ms >= horizon
        if not tombstones_due and (dirty_bytes == 0 or ratio < self.config.min_cleanable_dirty_ratio):
            return None
        plan = cleaner.CleaningPlan(
            self.directory, self.name, [], first_dirty, now_ms, self.config.delete_retention_ms,
            self.config.segment_bytes, self.config.index_interval_bytes, max_map_keys, self._truncations,
        )  # fmt: skip
        try:
            for segment, info in zip(candidates[:count], infos[:count], strict=True):
                plan.segments.append(
                    cleaner.SegmentToClean(segment, os.dup(segment.fileno()), info, segment.created_ms)
                )
        except OSError:  # out of descriptors: no pass this time
            plan.close()
            raise
        self._cleaning = plan
        return plan

    def abort_cleaning(self, plan: cleaner.CleaningPlan) -> None:
        """The pass failed in its thread (which removed its files): allow the next one."""
        plan.close()
        if self._cleaning is plan:
            self._cleaning = None

    def finish_cleaning(self, result: cleaner.CleaningResult) -> bool:
        """Swap the cleaned segments in (``cleaner.commit``: one fsynced commit marker, then renames) if
        the planned segments are still this log's, unchanged; else discard them. True if swapped in:
        the caller then runs ``cleaner.finalize(directory, first_dirty_offset)`` off this thread."""
        assert self._cleaning is result.plan, f"{self.name}: finishing a pass this log did not plan"
        self._cleaning = None
        if self._closed or not self._plan_still_holds(result.plan):
            result.discard()
            return False
        for segment in self._retired:  # replaced one pass ago: nobody reads them any more
            segment.close()
        self._retired = []
        cleaner.commit(self.directory, result.groups)
        for group in result.groups:
            if group.cleaned is None:
                continue
            first = next(i for i, s in enumerate(self._segments) if s is group.originals[0].segment)
            self._segments[first : first + len(group.originals)] = [group.cleaned]
            self._bases[first : first + len(group.originals)] = [group.cleaned.base_offset]
            self._retired.extend(planned.segment for planned in group.originals)
            group.cleaned = None
        self._first_dirty_offset = result.end_offset  # persisted by cleaner.finalize
        self._tombstone_horizon_ms = result.tombstone_horizon_ms
        return True

    def _plan_still_holds(self, plan: cleaner.CleaningPlan) -> bool:
        """The planned segments are the log's leading inactive segments, with the sizes planned, and
        no truncation happened in between (a truncated segment may have grown back to its size)."""
        segments = self._segments[:-1]
        return (
            plan.truncations == self._truncations
            and len(plan.segments) <= len(segments)
            and all(
                planned.segment is segment and segment.size_bytes == planned.info.size_bytes
                for planned, segment in zip(plan.segments, segments, strict=False)
            )
        )

    # ------------------------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Flush everything, write the checkpoints and the clean-shutdown marker, close the files."""
        if self._closed:
            return
        self.active_segment.on_become_inactive()
        # Segments below the recovery point were fsynced (data and indexes) by an earlier flush().
        for segment in self._segments[self._segment_index(self._recovery_point) :]:
            segment.flush(fsync=True)
        self._recovery_point = self.log_end_offset
        self.write_checkpoints()
        self._checkpoints.close()  # a snapshot still in flight in a worker now writes nothing
        log_loader.write_clean_shutdown_marker(self.directory)
        for segment in [*self._segments, *self._retired]:
            segment.close()
        self._retired.clear()
        self._closed = True

    def invariants(self) -> None:
        leo = self.log_end_offset
        assert self._log_start_offset <= self._high_watermark <= leo, (
            f"{self.name}: log start {self._log_start_offset} <= HW {self._high_watermark} "
            f"<= LEO {leo} violated"
        )
        assert self._recovery_point <= leo, f"recovery point {self._recovery_point} > LEO {leo}"
        assert self._bases == sorted(set(self._bases)), f"segment bases not increasing: {self._bases}"
        for segment, upper in zip(self._segments, [*self._bases[1:], None], strict=True):
            segment.invariants()
            assert upper is None or segment.next_offset == upper, (
                f"segment {segment.base_offset} ends at {segment.next_offset}, the next starts at {upper}"
            )
        self._leader_epoch_cache.invariants()
        entries = self._leader_epoch_cache.entries
        assert not entries or entries[-1].start_offset <= leo, f"epoch {entries[-1]} starts past LEO {leo}"
