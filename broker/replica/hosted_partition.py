"""One partition this broker holds: its ``storage.log.Log`` and its ``broker.replica.partition.Partition``.

The ``Log`` holds the bytes, the leader epoch cache and the idempotent-producer state; the ``Partition``
decides (HW, ISR, epochs) and keeps a copy of the log's offsets (log end offset, log start offset,
HW) that its decisions read. The ``ReplicaManager`` keeps one ``HostedPartition`` per hosted
partition, and every change of the log's offsets goes through a method here, which tells the other
side: so the copy is synced in exactly one place and ``invariants`` (log offsets == partition
offsets) holds after each of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from broker.replica.partition import Partition
from proto.kafka_types import TopicPartition
from storage.log import Log, LogAppendInfo
from storage.log_validator import ValidBatches

V = TypeVar("V")


class HostedView(Mapping[TopicPartition, V], Generic[V]):
    """A read-only view of one side of the hosted partitions (``ReplicaManager.partitions``: each one's
    ``Partition``, ``ReplicaManager.logs``: each one's ``Log``), for readers outside the manager; the
    manager's one map is ``ReplicaManager.hosted``."""

    __slots__ = ("_hosted", "_side")

    def __init__(self, hosted: dict[TopicPartition, HostedPartition], side: Callable[[HostedPartition], V]):
        self._hosted = hosted
        self._side = side

    def __getitem__(self, tp: TopicPartition) -> V:
        return self._side(self._hosted[tp])

    def __iter__(self) -> Iterator[TopicPartition]:
        return iter(self._hosted)

    def __len__(self) -> int:
        return len(self._hosted)

    def __contains__(self, tp: object) -> bool:
        return tp in self._hosted


class HostedPartition:
    """``tp``'s log and replication state on this broker (see the module docstring)."""

    __slots__ = ("log", "partition", "tp")

    def __init__(self, tp: TopicPartition, log: Log, partition: Partition) -> None:
        self.tp = tp
        self.log = log
        self.partition = partition

    # ---- the HW --------------------------------------------------------------------------------

    def sync_high_watermark(self) -> None:
        """The partition decided the HW (a role change, a fetch, an ISR change): the log records it."""
        self.log.update_high_watermark(self.partition.high_watermark)
        self.invariants()

    # ---- leader ------------------------------------------------------------------------------

    def append_as_leader(self, valid: ValidBatches, now_ms: int) -> tuple[LogAppendInfo, bool]:
        """Append validated batches at the partition's leader epoch; the partition learns the new LEO
        (an ISR of one moves the HW at once). Returns the append's info and whether the HW moved
        (the caller then calls ``sync_high_watermark`` and wakes the purgatories)."""
        info = self.log.append_validated_as_leader(valid, self.partition.leader_epoch)
        moved = self.partition.on_local_append(self.log.log_end_offset, now_ms) is not None
        return info, moved

    def increment_log_start_offset(self, offset: int) -> bool:
        """DeleteRecords or a follower following the leader's log start: move the log start offset to
        ``offset`` if that is forward; the partition learns it. True if it moved."""
        if not self.log.maybe_increment_log_start_offset(offset):
            return False
        self.partition.on_log_start_offset(self.log.log_start_offset)
        return True

    def log_start_offset_moved(self) -> None:
        """Retention deleted segments (``LogManager.delete_old_segments``): the partition learns the
        log's new log start offset."""
        self.partition.on_log_start_offset(self.log.log_start_offset)

    # ---- follower ------------------------------------------------------------------------------

    def append_as_follower(
        self, records: object, leader_high_watermark: int, leader_log_start_offset: int
    ) -> None:
        """Append the leader's batches (if any); the HW is the leader's word, capped by our LEO; the
        log start offset follows the leader's, never past the HW."""
        if records:
            self.log.append_as_follower(records)  # type: ignore[arg-type]
            self.partition.on_local_append(self.log.log_end_offset)  # a follower's HW is the leader's word
        self.partition.update_follower_high_watermark(leader_high_watermark)
        self.log.update_high_watermark(self.partition.high_watermark)
        start = min(leader_log_start_offset, self.partition.high_watermark)
        if start > self.log.log_start_offset:
            self.increment_log_start_offset(start)

    def truncate_to(self, offset: int) -> bool:
        """Truncate the log to ``offset`` (the leader's diverging epoch); the partition learns the new
        LEO (and log start, when the whole log went). True if anything was removed."""
        truncated = self.log.truncate_to(offset)  # the log rebuilds its producer state
        if self.log.log_start_offset != self.partition.log_start_offset:
            self.partition.on_local_truncate_fully(self.log.log_start_offset)
        else:
            self.partition.on_local_truncate(self.log.log_end_offset)
        return truncated

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset`` (behind the leader's log start)."""
        self.log.truncate_fully_and_start_at(offset)
        self.partition.on_local_truncate_fully(offset)

    # ---- checks ------------------------------------------------------------------------------

    def invariants(self) -> None:
        """The partition's copy of the log's offsets is the log's."""
        plog, partition, tp = self.log, self.partition, self.tp
        assert plog.high_watermark == partition.high_watermark, (
            f"{tp}: log HW {plog.high_watermark} != partition HW {partition.high_watermark}"
        )
        assert plog.log_end_offset == partition.log_end_offset, (
            f"{tp}: log LEO {plog.log_end_offset} != partition LEO {partition.log_end_offset}"
        )
