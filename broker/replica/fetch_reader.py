"""Serving Fetch: reading the hosted logs for consumers and followers, and parking long polls.

Kafka's ``ReplicaManager.fetchMessages`` / ``readFromLog`` with its ``DelayedFetch`` wiring, cut out of
``broker.replica.replica_manager.ReplicaManager``, which owns a ``FetchReader`` and whose
``fetch_for_consumer`` and ``fetch_for_follower`` call it.
The reader holds no state of its own: it reads the manager's partitions, logs and topic ids (the same
dicts, shared, never copied) and parks fetches in the manager's two fetch purgatories; what it asks of
the manager (is the partition hosted, who leads it, the image's broker registration, the HW moved,
send an ISR proposal, a wake-up at a deadline) comes in as callables at construction. Synchronous and
single-threaded, on the broker's event loop like the manager.

Theory of operation
-------------------
A fetch is read once at once (``read()``); it is answered now when it has ``min_bytes``, when some
partition must answer at once (an error or a diverging epoch: ``FetchResult.answers_now``) or when no
wait is allowed (``max_wait_ms <= 0``). Otherwise a ``broker.replica.delayed.DelayedFetch`` parks it in
its purgatory, keyed by partition, with a readiness check that estimates the bytes readable without
touching the files (``broker.replica.fetch_budget.available_bytes``); when it completes (woken or expired)
every partition is read again and answered: records are read at answer time, never held while parked.
A partition no longer led here completes a parked fetch at once. The size limits of one answer across
its partitions are a ``broker.replica.fetch_budget.FetchBudget`` per read.

Consumer fetch: ``partition.handle_consumer_fetch(fetch_offset, current_leader_epoch,
last_fetched_epoch, log.leader_epoch_cache.entries)`` decides (leadership, epochs, out of range,
diverging epoch); the read is ``[fetch_offset, HW)`` (``max_offset``), so nothing above the HW is
returned; the ``consumer_fetches`` purgatory is woken when the HW moves. Below Fetch v10 zstd batches
are refused after the read (KIP-110, ``broker.replica.codec_rules.without_zstd``).

Follower fetch (a Kafka Fetch with a replica id, on the leader): a ``broker_epoch`` older than the
image's registration of ``replica_id`` is STALE_BROKER_EPOCH for every partition, checked at every
read, parked or not (KIP-903). A topic id other than the hosted one is INCONSISTENT_TOPIC_ID (KIP-516).
Per partition ``partition.handle_follower_fetch(replica_id, fetch_offset, last_fetched_epoch,
current_leader_epoch, log.leader_epoch_cache.entries, now_ms, broker_epoch)`` records the follower's
LEO; if the HW advanced the manager persists it and wakes its purgatories; an ISR expansion proposal
goes out as AlterPartition. With an error or a diverging epoch it answers without records; otherwise
it reads up to the LEO. The ``follower_fetches`` purgatory is woken by a leader append.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypedDict

from broker.replica.codec_rules import without_zstd
from broker.replica.delayed import DelayedFetch, DelayedOperationPurgatory, FetchReadiness
from broker.replica.fetch_budget import FetchBudget, available_bytes
from broker.replica.partition import (
    AlterPartitionProposal,
    ConsumerFetchResult,
    FollowerFetchResult,
    Partition,
    Role,
)
from broker.replica.replica_requests import FetchCallback, FetchRequestPartition, FetchResult
from metadata.image import BrokerRegistration
from proto.errors import ApiError, ErrorCode
from proto.kafka_types import NO_EPOCH, TopicPartition
from storage.log import Log


class FetchReader:
    """Answers consumer and follower fetches over the replica manager's partitions (module docstring)."""

    def __init__(
        self,
        *,
        partitions: Mapping[TopicPartition, Partition],
        logs: Mapping[TopicPartition, Log],
        topic_ids: dict[str, str],
        follower_fetches: DelayedOperationPurgatory[TopicPartition],
        consumer_fetches: DelayedOperationPurgatory[TopicPartition],
        check_hosted: Callable[[TopicPartition], ApiError | None],
        leader_of: Callable[[TopicPartition], tuple[int, int]],
        registered_broker: Callable[[int], BrokerRegistration | None],
        high_watermark_moved: Callable[[TopicPartition], None],
        send_alter_partition: Callable[[str, AlterPartitionProposal], None],
        on_deadline: Callable[[int], None],
    ) -> None:
        # The manager's own dicts (mutated in place there, never replaced): a read sees every change.
        self.partitions = partitions
        self.logs = logs
        self.topic_ids = topic_ids
        self.follower_fetches = follower_fetches
        self.consumer_fetches = consumer_fetches
        self._check_hosted = check_hosted
        self._leader_of = leader_of
        self._registered_broker = registered_broker
        self._high_watermark_moved = high_watermark_moved
        self.send_alter_partition = send_alter_partition
        self.on_deadline = on_deadline

    # ---- consumer fetch -------------------------------------------------------------------------

    def fetch_for_consumer(
        self,
        items: list[FetchRequestPartition],
        max_bytes: int,
        min_bytes: int,
        max_wait_ms: int,
        now_ms: int,
        callback: FetchCallback,
        *,
        zstd_allowed: bool = True,
        file_slices: bool = False,
    ) -> None:
        """Read ``[fetch_offset, HW)`` per partition; park until ``min_bytes`` or ``max_wait_ms``.
        ``zstd_allowed`` is False for a Fetch below v10 (KIP-110). ``file_slices``: records as
        ``FileSlice``s (for sendfile), except below v10 where the zstd check reads them."""

        def read() -> dict[TopicPartition, FetchResult]:
            budget = FetchBudget(max_bytes, file_slices and zstd_allowed)
            results = {item.tp: self._consumer_read(item, budget) for item in items}
            if not zstd_allowed:
                results = {tp: without_zstd(tp, r) for tp, r in results.items()}
            return results

        self._fetch(items, min_bytes, max_wait_ms, now_ms, callback, read, self.consumer_fetches,
                    self._consumer_readiness)  # fmt: skip

    def _consumer_read(self, item: FetchRequestPartition, budget: FetchBudget) -> FetchResult:
        tp = item.tp
        error = self._check_hosted(tp)
        if error is not None:
            return FetchResult(error.code, error.message, leader_id=self._leader_of(tp)[0])
        partition, plog = self.partitions[tp], self.logs[tp]
        result = partition.handle_consumer_fetch(
            item.fetch_offset, item.current_leader_epoch, item.last_fetched_epoch,
            plog.leader_epoch_cache.entries,
        )  # fmt: skip
        return _answer(result, plog, item, budget, result.max_offset, {
            "high_watermark": result.high_watermark, "log_start_offset": result.log_start_offset,
            "log_end_offset": partition.log_end_offset, "leader_id": partition.leader_id,
            "leader_epoch": partition.leader_epoch,
        })  # fmt: skip

    # ---- follower fetch, on the leader -----------------------------------------------------------

    def fetch_for_follower(
        self,
        replica_id: int,
        broker_epoch: int,
        items: list[FetchRequestPartition],
        max_bytes: int,
        min_bytes: int,
        max_wait_ms: int,
        now_ms: int,
        callback: FetchCallback,
        clock_ms: Callable[[], int],
        *,
        file_slices: bool = False,
    ) -> None:
        """Record each follower's LEO (HW and ISR follow), answer records up to the LEO or a diverging
        epoch; park until some partition has ``min_bytes`` or ``max_wait_ms`` passed. ``file_slices``:
        records as ``FileSlice``s (a Kafka-protocol answer sends them with sendfile).

        The broker epoch is checked at every read, parked or not: a fetch parked before the image
        showed the follower's new incarnation must not record the old incarnation's LEO (KIP-903)."""

        def read() -> dict[TopicPartition, FetchResult]:
            budget = FetchBudget(max_bytes, file_slices)
            now = clock_ms()
            stale = self._stale_broker_epoch(replica_id, broker_epoch)
            if stale is not None:
                return {item.tp: FetchResult(stale.code, stale.message) for item in items}
            return {
                item.tp: self._follower_read(replica_id, broker_epoch, item, budget, now) for item in items
            }

        self._fetch(items, min_bytes, max_wait_ms, now_ms, callback, read, self.follower_fetches,
                    self._follower_readiness)  # fmt: skip

    def _stale_broker_epoch(self, replica_id: int, broker_epoch: int) -> ApiError | None:
        broker = self._registered_broker(replica_id)
        # NO_EPOCH: a Fetch below v15 carries no broker epoch (KIP-903), so there is nothing to check
        if broker is not None and broker_epoch != NO_EPOCH and broker_epoch < broker.broker_epoch:
            return ApiError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"broker {replica_id} fetched with broker epoch {broker_epoch}, older than the registered "
                f"{broker.broker_epoch}: a previous incarnation is still running",
            )
        return None

    def _follower_read(
        self,
        replica_id: int,
        broker_epoch: int,
        item: FetchRequestPartition,
        budget: FetchBudget,
        now_ms: int,
    ) -> FetchResult:
        tp = item.tp
        error = self._check_hosted(tp)
        if error is not None:
            return FetchResult(error.code, error.message, leader_id=self._leader_of(tp)[0])
        if item.topic_id and item.topic_id != self.topic_ids.get(tp[0]):
            # KIP-516: a follower still replicating a deleted incarnation of a re-created topic must not
            # count toward the new one's HW (its LEO is of another log); it backs off until its
            # metadata catches up, then truncates to the new incarnation.
            return FetchResult(
                ErrorCode.INCONSISTENT_TOPIC_ID,
                f"{tp[0]}: the follower fetched topic id {item.topic_id}, this leader hosts "
                f"{self.topic_ids.get(tp[0])}; the topic was re-created (retry after a metadata update)",
                leader_id=self._leader_of(tp)[0],
            )
        partition, plog = self.partitions[tp], self.logs[tp]
        result = partition.handle_follower_fetch(
            replica_id, item.fetch_offset, item.last_fetched_epoch,
            item.current_leader_epoch if item.current_leader_epoch is not None else partition.leader_epoch,
            plog.leader_epoch_cache.entries, now_ms, broker_epoch,
        )  # fmt: skip
        if result.high_watermark_advanced_from is not None:
            self._high_watermark_moved(tp)
        if result.isr_proposal is not None:
            self.send_alter_partition(self.topic_ids[tp[0]], result.isr_proposal)
        return _answer(result, plog, item, budget, None, {
            "high_watermark": partition.high_watermark, "log_start_offset": result.log_start_offset,
            "log_end_offset": result.log_end_offset, "leader_id": partition.leader_id,
            "leader_epoch": partition.leader_epoch,
        })  # fmt: skip

    # ---- readiness of a parked fetch (``DelayedFetch``'s check, per partition) ----------------------

    def _consumer_readiness(self, tp: TopicPartition, fetch_offset: int) -> FetchReadiness:
        partition = self.partitions.get(tp)
        if partition is None or partition.role is not Role.LEADER:
            return FetchReadiness(0, complete_now=True)
        return FetchReadiness(available_bytes(fetch_offset, partition.high_watermark))

    def _follower_readiness(self, tp: TopicPartition, fetch_offset: int) -> FetchReadiness:
        partition = self.partitions.get(tp)
        if partition is None or partition.role is not Role.LEADER:
            return FetchReadiness(0, complete_now=True)
        return FetchReadiness(available_bytes(fetch_offset, partition.log_end_offset))

    # ---- both: answer now or park ----------------------------------------------------------------

    def _fetch(
        self,
        items: list[FetchRequestPartition],
        min_bytes: int,
        max_wait_ms: int,
        now_ms: int,
        callback: FetchCallback,
        read: Callable[[], dict[TopicPartition, FetchResult]],
        purgatory: DelayedOperationPurgatory[TopicPartition],
        readiness: Callable[[TopicPartition, int], FetchReadiness],
    ) -> None:
        """Answer now when ``min_bytes`` are there, a partition must answer at once, or no wait is
        allowed; else park in ``purgatory`` and read again when it completes (woken or expired)."""
        results = read()
        size = sum(len(r.records) for r in results.values())
        if max_wait_ms <= 0 or size >= min_bytes or any(r.answers_now for r in results.values()):
            callback(results)
            return
        offsets = {item.tp: item.fetch_offset for item in items}
        operation = DelayedFetch(
            now_ms + max_wait_ms, min_bytes, offsets, readiness,
            lambda: callback(read()),
        )  # fmt: skip
        if not purgatory.try_complete_else_watch(operation):
            self.on_deadline(now_ms + max_wait_ms)


class _PartitionState(TypedDict):
    """The fields of a partition's fetch answer that do not depend on what it reads."""

    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    leader_id: int
    leader_epoch: int


def _answer(
    result: ConsumerFetchResult | FollowerFetchResult,
    plog: Log,
    item: FetchRequestPartition,
    budget: FetchBudget,
    max_offset: int | None,
    base: _PartitionState,
) -> FetchResult:
    """One partition's answer once the partition decided: its error, its diverging epoch, or the
    records from ``fetch_offset`` (below ``max_offset``: a consumer's HW) within the budget."""
    if result.error is not None:
        return FetchResult(result.error.code, result.error.message, **base)
    if result.diverging_epoch is not None:
        return FetchResult(ErrorCode.NONE, diverging_epoch=result.diverging_epoch, **base)
    records = budget.read(plog, item.fetch_offset, item.max_bytes, max_offset=max_offset)
    return FetchResult(ErrorCode.NONE, records=records, **base)
