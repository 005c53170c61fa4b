"""The offset lookups a leader answers from its log's indexes, without reading records: ListOffsets,
OffsetsForLeaderEpoch and DescribeProducers.

Kafka's ``ReplicaManager.fetchOffset`` / ``Partition.fetchOffsetForTimestamp`` (ListOffsets),
``lastOffsetForLeaderEpoch`` and ``describeProducers``, cut out of
``broker.replica.replica_manager.ReplicaManager``, which owns an ``OffsetLookup`` and whose
``list_offset``, ``offsets_for_leader_epoch`` and ``producer_entries`` call it.
Like ``broker.replica.fetch_reader`` it holds no state of its own: it reads the manager's partitions and logs
(the same dicts, shared) and asks the manager whether a partition is hosted (``check_hosted``, which
reads the current metadata image). It changes nothing. Synchronous, on the broker's event loop.

Theory of operation
-------------------
Every lookup is answered by the partition's leader only (``Partition.check_leader``, for
OffsetsForLeaderEpoch inside ``Partition.handle_offsets_for_leader_epoch``). ListOffsets: EARLIEST =
``log.log_start_offset``, LATEST = ``partition.high_watermark``, TIMESTAMP = ``log.offset_for_timestamp``
and MAX_TIMESTAMP = ``log.max_timestamp_and_offset`` (KIP-734), both limited to offsets below the HW;
each with the leader epoch of the offset found. A new leader whose HW is still below its epoch's start
offset does not know the committed end yet: OFFSET_NOT_AVAILABLE, retriable. OffsetsForLeaderEpoch is
``Partition.handle_offsets_for_leader_epoch`` over the log's leader-epoch cache (KIP-101).
DescribeProducers lists the idempotent producers the log's producer state remembers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from broker.replica.divergence import EpochEndOffset
from broker.replica.partition import Partition
from broker.replica.replica_requests import ListOffsetResult
from proto.errors import ApiError, ErrorCode
from proto.kafka_types import NO_EPOCH, NO_OFFSET, TopicPartition
from storage.log import Log
from storage.producer_state import ProducerEntry


class OffsetLookup:
    """ListOffsets, OffsetsForLeaderEpoch and DescribeProducers on the replica manager's partitions."""

    def __init__(
        self,
        *,
        partitions: Mapping[TopicPartition, Partition],
        logs: Mapping[TopicPartition, Log],
        check_hosted: Callable[[TopicPartition], ApiError | None],
    ) -> None:
        # The manager's own dicts (mutated in place there, never replaced).
        self.partitions = partitions
        self.logs = logs
        self._check_hosted = check_hosted

    def list_offset(
        self, tp: TopicPartition, spec: str, timestamp_ms: int, current_leader_epoch: int | None
    ) -> ListOffsetResult:
        """EARLIEST = log start offset, LATEST = HW, TIMESTAMP = the time index, MAX_TIMESTAMP = the
        batch with the largest timestamp (both below the HW).

        A new leader whose HW is still below its epoch's start offset (its followers have not
        fetched in the new epoch yet) does not know the committed end: LATEST, and a timestamp lookup
        that finds nothing below the HW, answer OFFSET_NOT_AVAILABLE, retriable (Kafka's
        ``Partition.fetchOffsetForTimestamp``) — the old HW would make a consumer skip or re-read."""
        error = self._check_hosted(tp)
        partition = self.partitions.get(tp)
        if error is None and partition is not None:
            error = partition.check_leader(current_leader_epoch)
        if error is not None or partition is None:
            assert error is not None
            return ListOffsetResult(error)
        plog = self.logs[tp]
        if spec == "EARLIEST":
            offset = plog.log_start_offset
            return ListOffsetResult(offset=offset, leader_epoch=self._epoch_at(plog, offset))
        lagging = _high_watermark_lagging(tp, partition)
        if spec == "LATEST":
            if lagging is not None:
                return lagging
            return ListOffsetResult(
                offset=partition.high_watermark, leader_epoch=partition.leader_epoch
            )
        if spec == "MAX_TIMESTAMP":  # KIP-734, limited to the HW like every timestamp lookup
            found = plog.max_timestamp_and_offset()
        elif timestamp_ms < 0:
            message = f"timestamp_ms {timestamp_ms} must be >= 0"
            return ListOffsetResult(ApiError(ErrorCode.INVALID_REQUEST, message))
        else:
            found = plog.offset_for_timestamp(timestamp_ms)
        if found is None or found.offset >= partition.high_watermark:
            # Kafka's answer: offset -1, timestamp -1 — unless the HW is not known yet
            return lagging if lagging is not None else ListOffsetResult()
        return ListOffsetResult(
            offset=found.offset, timestamp_ms=found.timestamp,
            leader_epoch=self._epoch_at(plog, found.offset),
        )  # fmt: skip

    def offsets_for_leader_epoch(
        self, tp: TopicPartition, current_leader_epoch: int | None, leader_epoch: int
    ) -> tuple[ApiError | None, EpochEndOffset]:
        error = self._check_hosted(tp)
        if error is not None:
            return error, EpochEndOffset(NO_EPOCH, NO_OFFSET)
        return self.partitions[tp].handle_offsets_for_leader_epoch(
            current_leader_epoch, leader_epoch, self.logs[tp].leader_epoch_cache.entries
        )

    def producer_entries(self, tp: TopicPartition) -> tuple[ApiError | None, list[ProducerEntry]]:
        """DescribeProducers, on the leader: the idempotent producers the partition remembers."""
        error = self._check_hosted(tp)
        partition = self.partitions.get(tp)
        if error is None and partition is not None:
            error = partition.check_leader()
        if error is not None:
            return error, []
        return None, sorted(self.logs[tp].producer_state.producers.values(), key=lambda e: e.producer_id)

    @staticmethod
    def _epoch_at(plog: Log, offset: int) -> int:
        epoch = plog.leader_epoch_cache.epoch_for_offset(offset)
        return NO_EPOCH if epoch is None else epoch


def _high_watermark_lagging(tp: TopicPartition, partition: Partition) -> ListOffsetResult | None:
    """OFFSET_NOT_AVAILABLE while a new leader's HW is below its epoch's start offset, else None."""
    epoch_start = partition.leader_epoch_start_offset
    if epoch_start <= partition.high_watermark:
        return None
    return ListOffsetResult(ApiError(
        ErrorCode.OFFSET_NOT_AVAILABLE,
        f"{tp[0]}-{tp[1]}: the leader's high watermark {partition.high_watermark} is behind the start "
        f"offset {epoch_start} of its leader epoch {partition.leader_epoch}; retry once the followers "
        "have fetched in the new epoch",
    ))  # fmt: skip
