"""The replica manager: the broker's partitions — their logs, replication state and delayed operations.

It wires the sans-I/O cores to the partition logs: ``storage.log.Log`` holds the bytes,
``broker.replica.partition.Partition`` decides (HW, ISR, epochs), the purgatories park acks=all produces and
long-poll fetches. It is synchronous and single-threaded: the broker's asyncio loop calls it from the
Kafka request handlers (``broker.kafka.handlers``: the whole data plane), the fetcher tasks
(``broker.follower.fetcher_driver``) and the metadata follower (``broker.server``). What needs the network
goes
out through two callbacks: ``FetcherControl`` (start / stop following a partition on a leader) and
``send_alter_partition(topic_id, proposal)``; parked operations are answered through the callback
given when they were parked; ``on_deadline`` asks the driver for a wake-up at the earliest purgatory
deadline (the only timer: there is no polling loop). Its request and answer values are in
``broker.replica.replica_requests``; serving Fetch (reading for consumers and followers, parking long polls)
in ``broker.replica.fetch_reader.FetchReader``, which it owns and which its ``fetch_for_consumer`` and
``fetch_for_follower`` call; ListOffsets, OffsetsForLeaderEpoch and DescribeProducers in
``broker.replica.offset_lookup.OffsetLookup``, called the same way; a fetch's size accounting in
``broker.replica.fetch_budget``; the KIP-110 codec rules in ``broker.replica.codec_rules``.

The plan below fixes the order of effects; each step names the core call that decides and the
driver call that acts.

Objects (one broker process)
----------------------------
- ``broker.replica.log_manager.LogManager``: the ``storage.log.Log`` of each hosted partition (the bytes and
  the idempotent-producer state), opened at startup (recovery happens there), topic configs,
  checkpoints, flush, retention.
- ``broker.replica.partition.Partition`` per hosted partition (HW, ISR, epochs): the decisions.
- ``broker.follower.fetcher.ReplicaFetcher`` per leader broker this broker follows partitions on.
- Three ``broker.replica.delayed.DelayedOperationPurgatory``s keyed by partition: ``produces``
  (``broker.replica.delayed.DelayedProduce``, acks=all), ``follower_fetches`` and
  ``consumer_fetches`` (``broker.replica.delayed.DelayedFetch``, long polls).
- The ``metadata.image.MetadataImage`` the broker follows as an observer; ``PartitionRegistration``
  gives ``leader``, ``leader_epoch``, ``partition_epoch``, ``isr``, ``replicas``.
Everything above runs on one asyncio loop; the Kafka request handlers and the fetcher tasks only move
bytes.

Metadata delta -> role changes (Kafka's ``ReplicaManager.applyDelta``)
-------------------------------------------------------------------------
``apply_image(image, now_ms)`` runs after every applied metadata batch (the broker starts calling it
once the image includes its own registration). It compares each hosted partition's registration with
the one last applied and acts on the changed ones; with ``reg`` the partition's registration:

- ``reg.leader == this broker``: if this is a new leadership (role or epoch), first
  ``log.maybe_assign_epoch_start_offset(reg.leader_epoch)`` (at its LEO) — a new leader's epoch
  starts at its LEO before any append (Kafka's makeLeader) — then ``partition.become_leader(
  reg.leader_epoch, reg.partition_epoch, reg.isr, reg.replicas, log.log_end_offset,
  log.high_watermark, now_ms, log.log_start_offset)``; remove the partition from its fetcher; then
  ``maybe_increment_high_watermark(now_ms)`` and, if it moved, ``log.update_high_watermark`` and wake both
  purgatories for the partition. A new leadership also answers every delayed operation on the
  partition at once (a fetch parked on the old role must not wait).
- otherwise: ``partition.become_follower(reg.leader, ...)``. If it returns True: complete the
  partition's delayed produces (``produces.check_and_complete(tp)`` now answers
  NOT_LEADER_OR_FOLLOWER), answer its delayed fetches (``complete_all(tp)``), and
  ``fetcher_for(reg.leader).add_partition(tp, log.log_end_offset, log.latest_epoch,
  reg.leader_epoch)``. **No truncation here**: the
  leader's diverging epoch decides it (KIP-101).
- partition removed or moved away: ``partition.stop()``, remove from fetchers, fail its delayed
  operations, close (and for a deleted topic, delete) the log.

Produce (the Kafka Produce handler)
-----------------------------------
Per partition, in order: a client's append to an internal topic -> INVALID_TOPIC_EXCEPTION (only
``AppendOrigin.COORDINATOR``, the group coordinator, writes there); unknown topic ->
UNKNOWN_TOPIC_OR_PARTITION; ``partition.check_append(acks, current_leader_epoch)`` (leadership,
FENCED/UNKNOWN_LEADER_EPOCH, acks, NOT_ENOUGH_REPLICAS with nothing appended); a codec id the log
cannot decode (5-7), or zstd in a Produce below v7 -> UNSUPPORTED_COMPRESSION_TYPE;
``log.validate_as_leader(records, origin)`` (header/CRC/size and LogValidator rules), then the
idempotent-producer state, then ``log.append_validated_as_leader(valid, partition.leader_epoch)`` —
Kafka's order; all or nothing: a KafkaError becomes the partition's error; then
``partition.on_local_append(log.log_end_offset, now_ms)`` (an ISR of one moves the HW at once);
``follower_fetches.check_and_complete(tp)`` (followers long-polling for new data). acks=0/1 answer
now. acks=all: ``produces.try_complete_else_watch(DelayedProduce(now + timeout_ms, {tp:
ProduceWait(last offset + 1, leader_epoch)}, check, answer))`` with ``check =
partition.check_enough_replicas_reach_offset``; ``answer`` calls the handler's callback when the
operation completes or expires.

Follower fetch (a Kafka Fetch with a replica id, on the leader; ``broker.replica.fetch_reader``)
--------------------------------------------------------------------------------------
Refuse a ``broker_epoch`` older than the image's registration of ``replica_id`` (STALE_BROKER_EPOCH),
checked again when a parked fetch completes. The partition records the fetch's broker epoch; it
proposes an ISR expansion only for an eligible follower (``Partition.isr_ineligibility``: per the
image, not fenced, not shutting down, that broker epoch current) and every proposal carries the
members' broker epochs (KIP-903).
Per partition: ``result = partition.handle_follower_fetch(replica_id, fetch_offset,
last_fetched_epoch, current_leader_epoch, log.leader_epoch_cache.entries, now_ms, broker_epoch)``.
With an error or a diverging epoch: answer it, no records. Otherwise: if
``result.high_watermark_advanced_from`` is set, ``log.update_high_watermark(partition.high_watermark)``
and ``check_and_complete`` both purgatories for the partition; if ``result.isr_proposal``, send
AlterPartition (below). Read ``log.read(fetch_offset, partition_max_bytes)`` (up to the LEO). If no
partition has data, park a ``DelayedFetch`` (``min_bytes``, ``max_wait_ms``) in ``follower_fetches``
— a leader append wakes it.

Follower side (the fetcher task per leader broker)
--------------------------------------------------
Loop: ``plan = fetcher.build_request(now_ms)``; send it (one outstanding request per leader);
``actions = fetcher.handle_response(plan.request_id, answers, local_view, now_ms)`` where
``local_view(tp) = LocalLogView(log.leader_epoch_cache.entries, log.log_end_offset,
partition.high_watermark)``; apply each action:
``AppendRecords`` -> ``log.append_as_follower(records)``, ``partition.on_local_append(leo, now_ms)``,
``partition.update_follower_high_watermark(leader_hw)`` and ``log.update_high_watermark``;
``TruncateTo`` -> ``log.truncate_to(offset)``, ``partition.on_local_truncate(log.log_end_offset)``;
``TruncateFullyAndStartAt`` -> ``log.truncate_fully_and_start_at(offset)``,
``partition.on_local_truncate_fully(offset)``;
``Fenced`` / ``BackedOff`` -> nothing (the metadata log or the backoff decides).
Then ``fetcher.update_position(tp, log.log_end_offset, log.latest_epoch)``. A failed call is
``handle_request_failure``; wait until ``next_wake_ms`` when nothing is ready.

ISR maintenance
---------------
A timer every ``replica_lag_time_max_ms / 2`` calls ``partition.maybe_shrink_isr(now_ms)`` on every
leader partition; expansions come from ``handle_follower_fetch``. A proposal goes to the active
controller as AlterPartition (leader id, broker epoch, leader epoch, partition epoch, new ISR); its
answer goes to ``partition.handle_alter_partition_response(proposal, error, leader_epoch,
partition_epoch, isr)``; an old HW returned means the HW moved: update the log and wake purgatories.
Transport errors are retried with backoff; the proposal stays pending meanwhile (no second one).

Consumer fetch (``broker.replica.fetch_reader``) and ListOffsets (``broker.replica.offset_lookup``)
-----------------------------------------------------------------------------------
``partition.handle_consumer_fetch(fetch_offset, current_leader_epoch, last_fetched_epoch,
log.leader_epoch_cache.entries)``; read ``log.read(fetch_offset, partition_max_bytes,
max_offset=result.max_offset)`` so nothing at or above the HW is returned; long-poll as above, woken
when the HW moves. ListOffsets: EARLIEST = ``log.log_start_offset``, LATEST = ``partition.high_watermark``,
TIMESTAMP = ``log.offset_for_timestamp`` limited to offsets below the HW.

Durability and shutdown
-----------------------
Every few seconds (in a worker thread, ``broker.replica.checkpoint_writer``) and at shutdown (``close``, on
the loop): the log's HW, log start and recovery point checkpoints. The
HW read back at startup is capped at the LEO by the log; ``become_leader`` keeps the larger of it and
what the partition knew. Controlled shutdown: ask the controller, wait until no partition is led
here, stop fetchers, close logs.

"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import cast

from broker.replica.codec_rules import check_codecs
from broker.replica.delayed import DelayedOperationPurgatory, DelayedProduce, ProduceWait
from broker.replica.divergence import EpochEndOffset
from broker.replica.fetch_reader import FetchReader
from broker.replica.follower_actions import (
    AppendRecords,
    BackedOff,
    Fenced,
    FetchAction,
    LocalLogView,
    TruncateFullyAndStartAt,
    TruncateTo,
)
from broker.replica.hosted_partition import HostedPartition, HostedView
from broker.replica.log_manager import LogManager
from broker.replica.offset_lookup import OffsetLookup
from broker.replica.partition import ACKS_ALL, AlterPartitionProposal, Partition, ProduceCheck, Role
from broker.replica.replica_requests import (
    FetchCallback,
    FetcherControl,
    FetchRequestPartition,
    ListOffsetResult,
    ProduceCallback,
    ProduceRequestPartition,
    ProduceResult,
)
from metadata.image import BrokerRegistration, MetadataImage, PartitionRegistration
from proto import errors
from proto.errors import ApiError, ErrorCode
from proto.kafka_types import NO_EPOCH, NO_LEADER, NO_OFFSET, NO_TIMESTAMP, TopicPartition
from proto.runtime.logfmt import log_event
from storage.log import Log
from storage.log_validator import AppendOrigin
from storage.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS, Duplicate, ProducerEntry, Reject
from storage.producer_state_log import producer_batch

log = logging.getLogger(__name__)

# Kafka's Topic.isInternal: written by the broker's coordinators only (AppendOrigin.COORDINATOR).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class ReplicaManager:
    """The partitions hosted on broker ``broker_id`` (see the module docstring)."""

    def __init__(
        self,
        broker_id: int,
        data_dir: Path,
        *,
        replica_lag_time_max_ms: int,
        topic_defaults: dict[str, str],
        fetchers: FetcherControl,
        send_alter_partition: Callable[[str, AlterPartitionProposal], None],
        on_deadline: Callable[[int], None],
        clock_ms: Callable[[], int],
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.broker_id = broker_id
        # Wall-clock time for the logs (segment.ms, retention.ms, flush.ms) and producer expiry; the
        # simulation (tests/sim/broker) passes its virtual clock so that a seed replays exactly.
        self.clock_ms = clock_ms
        self.log_manager = LogManager(
            data_dir, topic_defaults=topic_defaults, clock_ms=clock_ms,
            producer_id_expiration_ms=producer_id_expiration_ms,
        )  # fmt: skip
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.fetchers = fetchers
        self.send_alter_partition = send_alter_partition
        self.on_deadline = on_deadline
        self.image = MetadataImage()
        # The one map of the partitions held here: each one's Log and Partition (the log manager opens,
        # closes and checkpoints the same logs). ``partitions`` and ``logs`` are read-only views of it
        # for the readers (fetch, offset lookups, group coordinator, metrics, tests).
        self.hosted: dict[TopicPartition, HostedPartition] = {}
        self.partitions: HostedView[Partition] = HostedView(self.hosted, lambda h: h.partition)
        self.logs: HostedView[Log] = HostedView(self.hosted, lambda h: h.log)
        self.topic_ids: dict[str, str] = {}  # topic name -> id, for the hosted partitions
        self._applied: dict[TopicPartition, PartitionRegistration] = {}
        # Delayed operations by partition (Kafka's three purgatories: produce, and fetch split in two
        # because a follower fetch is woken by the LEO, a consumer fetch by the HW).
        self.produces: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory()
        self.follower_fetches: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory()
        self.consumer_fetches: DelayedOperationPurgatory[TopicPartition] = DelayedOperationPurgatory()
        # Serves Fetch (consumers and followers) over the partitions, logs and fetch purgatories above.
        self.fetch_reader = FetchReader(
            partitions=self.partitions, logs=self.logs, topic_ids=self.topic_ids,
            follower_fetches=self.follower_fetches, consumer_fetches=self.consumer_fetches,
            check_hosted=self._check_hosted, leader_of=self._leader_of,
            registered_broker=self._registered_broker, high_watermark_moved=self._high_watermark_moved,
            send_alter_partition=send_alter_partition, on_deadline=on_deadline,
        )  # fmt: skip
        # ListOffsets, OffsetsForLeaderEpoch and DescribeProducers over the same partitions and logs.
        self.offset_lookup = OffsetLookup(
            partitions=self.partitions, logs=self.logs, check_hosted=self._check_hosted
        )
        # Called with (tp, is_leader, leader_epoch) on every new role of a hosted partition, and
        # (tp, False, NO_EPOCH) when it stops; the group coordinator loads/unloads __consumer_offsets.
        self.role_listeners: list[Callable[[TopicPartition, bool, int], None]] = []
        # Called with the image after every apply_image (the group coordinator drops deleted topics' offsets).
        self.image_listeners: list[Callable[[MetadataImage], None]] = []

    # ---- metadata delta -> role changes --------------------------------------------------------

    def apply_image(self, image: MetadataImage, now_ms: int, config_changed: bool = False) -> None:
        """Bring every hosted partition in line with ``image`` (Kafka's ``ReplicaManager.applyDelta``)."""
        self.image = image
        self.log_manager.update_image(image)
        hosted: dict[TopicPartition, tuple[str, PartitionRegistration]] = {}
        for topic_id, index in image.partitions_hosted_by(self.broker_id):
            topic = image.topics[topic_id]
            # a plain tuple, equal to the TopicPartition (proto.kafka_types); the broker simulation's
            # traces show these keys, so they stay what they were
            hosted[cast(TopicPartition, (topic.name, index))] = (topic_id, topic.partitions[index])
        # Gone, moved away, or re-created under the same name (a new topic id): the local replica is
        # deleted, as Kafka's StopReplica(delete=true) does; a new replica starts from an empty log.
        moved = [tp for tp in self._applied if tp not in hosted or hosted[tp][0] != self.topic_ids.get(tp[0])]
        for tp in moved:
            self._stop_replica(tp, delete=True)
        for tp, (topic_id, reg) in sorted(hosted.items()):
            if self._applied.get(tp) == reg and not config_changed:
                continue
            self.topic_ids[tp[0]] = topic_id
            self._apply_partition(tp, reg, now_ms)
            self._applied[tp] = reg
        for listener in self.image_listeners:
            listener(image)

    def _apply_partition(self, tp: TopicPartition, reg: PartitionRegistration, now_ms: int) -> None:
        hosted = self._open(tp)
        partition, plog = hosted.partition, hosted.log
        partition.min_insync_replicas = self.log_manager.min_insync_replicas(tp[0])
        plog.update_config(self.log_manager.log_config(tp[0]))  # e.g. cleanup.policy altered on a live topic
        if reg.leader == self.broker_id:
            self._become_leader(tp, partition, plog, reg, now_ms)
        else:
            self._become_follower(tp, partition, plog, reg)
        hosted.sync_high_watermark()

    def _become_leader(
        self, tp: TopicPartition, partition: Partition, plog: Log, reg: PartitionRegistration, now_ms: int
    ) -> None:
        if partition.role is not Role.LEADER or reg.leader_epoch > partition.leader_epoch:
            plog.maybe_assign_epoch_start_offset(reg.leader_epoch)  # before any append (makeLeader)
        is_new = partition.become_leader(
            reg.leader_epoch, reg.partition_epoch, reg.isr, reg.replicas,
            plog.log_end_offset, plog.high_watermark, now_ms, plog.log_start_offset,
        )  # fmt: skip
        if is_new:
            self.fetchers.remove_partition(tp)
            log_event(log, logging.INFO, "become_leader", topic=tp[0], partition=tp[1],
                      leader_epoch=reg.leader_epoch, isr=reg.isr)  # fmt: skip
            self._partition_changed(tp)
            self._notify_role(tp, True, reg.leader_epoch)
        if partition.maybe_increment_high_watermark(now_ms) is not None:
            self._high_watermark_moved(tp)

    def _become_follower(
        self, tp: TopicPartition, partition: Partition, plog: Log, reg: PartitionRegistration
    ) -> None:
        is_new = partition.become_follower(
            reg.leader, reg.leader_epoch, reg.partition_epoch, reg.isr, reg.replicas,
            plog.log_end_offset, plog.high_watermark, plog.log_start_offset,
        )  # fmt: skip
        if not is_new:
            return
        log_event(log, logging.INFO, "become_follower", topic=tp[0], partition=tp[1], leader=reg.leader,
                  leader_epoch=reg.leader_epoch)  # fmt: skip
        self._partition_changed(tp)
        self._notify_role(tp, False, reg.leader_epoch)
        self.fetchers.remove_partition(tp)
        if reg.leader != NO_LEADER:  # no truncation here: the leader's diverging epoch decides (KIP-101)
            self.fetchers.add_partition(
                reg.leader, tp, plog.log_end_offset, plog.latest_epoch, reg.leader_epoch
            )

    def _notify_role(self, tp: TopicPartition, is_leader: bool, leader_epoch: int) -> None:
        for listener in self.role_listeners:
            listener(tp, is_leader, leader_epoch)

    def _stop_replica(self, tp: TopicPartition, delete: bool) -> None:
        hosted = self.hosted.pop(tp, None)
        self._applied.pop(tp, None)
        self.fetchers.remove_partition(tp)
        if hosted is not None:
            hosted.partition.stop()
        self._partition_changed(tp)
        self._notify_role(tp, False, NO_EPOCH)
        self.log_manager.remove_log(tp, delete)
        log_event(log, logging.INFO, "replica_stopped", topic=tp[0], partition=tp[1], deleted=delete)

    def _open(self, tp: TopicPartition) -> HostedPartition:
        hosted = self.hosted.get(tp)
        if hosted is None:
            plog = self.log_manager.get_or_create_log(tp)
            partition = Partition(
                tp[0], tp[1], self.broker_id,
                replica_lag_time_max_ms=self.replica_lag_time_max_ms,
                min_insync_replicas=self.log_manager.min_insync_replicas(tp[0]),
                broker_lookup=self._registered_broker,
            )  # fmt: skip
            hosted = self.hosted[tp] = HostedPartition(tp, plog, partition)
        return hosted

    def _registered_broker(self, broker_id: int) -> BrokerRegistration | None:
        """The broker's registration in the current image (ISR eligibility, KIP-903 broker epochs)."""
        return self.image.brokers.get(broker_id)

    # ---- events that complete delayed operations ------------------------------------------------

    def _high_watermark_moved(self, tp: TopicPartition) -> None:
        """The leader's HW moved: persist it in memory, answer acks=all produces and consumer fetches."""
        self.hosted[tp].sync_high_watermark()
        self.produces.check_and_complete(tp)
        self.consumer_fetches.check_and_complete(tp)

    def _partition_changed(self, tp: TopicPartition) -> None:
        """Leadership changed or the replica stopped: every delayed operation on ``tp`` answers now."""
        self.produces.check_and_complete(tp)
        self.consumer_fetches.complete_all(tp)
        self.follower_fetches.complete_all(tp)

    def _produce_check(self, tp: TopicPartition, required_offset: int, leader_epoch: int) -> ProduceCheck:
        partition = self.partitions.get(tp)
        if partition is None:
            message = f"{tp[0]}-{tp[1]}: no longer hosted here"
            return ProduceCheck(True, ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, message))
        return partition.check_enough_replicas_reach_offset(required_offset, leader_epoch)

    def _answer_produce(
        self,
        callback: ProduceCallback,
        results: dict[TopicPartition, ProduceResult],
        outcomes: dict[TopicPartition, ApiError],
    ) -> None:
        """A delayed produce completed: each partition's outcome, with the offsets found at append."""
        for tp, outcome in outcomes.items():
            early = results.get(tp)
            results[tp] = ProduceResult(
                outcome.code, outcome.message,
                early.base_offset if early and outcome.code == ErrorCode.NONE else NO_OFFSET,
                early.log_append_time_ms if early else NO_TIMESTAMP,
                early.log_start_offset if early else NO_OFFSET,
                *self._leader_of(tp),
            )  # fmt: skip
        callback(results)

    def next_deadline_ms(self) -> int | None:
        deadlines = [
            d
            for d in (
                p.next_deadline_ms() for p in (self.produces, self.follower_fetches, self.consumer_fetches)
            )
            if d is not None
        ]
        return min(deadlines) if deadlines else None

    def expire(self, now_ms: int) -> None:
        """Answer the delayed operations whose deadline passed (REQUEST_TIMED_OUT / what is there)."""
        self.produces.expire(now_ms)
        self.follower_fetches.expire(now_ms)
        self.consumer_fetches.expire(now_ms)

    def _leader_of(self, tp: TopicPartition) -> tuple[int, int]:
        partition = self.partitions.get(tp)
        if partition is None:
            return NO_LEADER, NO_EPOCH
        return partition.leader_id, partition.leader_epoch

    # ---- produce ------------------------------------------------------------------------------

    def produce(
        self,
        acks: int,
        timeout_ms: int,
        items: list[ProduceRequestPartition],
        now_ms: int,
        callback: ProduceCallback,
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        zstd_allowed: bool = True,
    ) -> None:
        """Validate and append each partition (all or nothing per partition), then answer ``callback``
        now (acks 0/1, or nothing to wait for) or when the HW passes every appended batch (acks=all).

        ``origin``: only the broker's coordinators (``AppendOrigin.COORDINATOR``) may append to an
        internal topic or write control batches; ``zstd_allowed`` is False for a Produce below v7
        (KIP-110)."""
        results: dict[TopicPartition, ProduceResult] = {}
        waits: dict[TopicPartition, ProduceWait] = {}
        self.log_manager.maybe_expire_producers()
        for item in items:
            result, wait = self._append(item, acks, origin, zstd_allowed, now_ms)
            results[item.tp] = result
            if wait is not None:
                waits[item.tp] = wait
        if acks != ACKS_ALL or not waits:
            callback(results)
            return
        already_done = {tp: ApiError(r.code, r.message) for tp, r in results.items() if r.code != 0}
        operation = DelayedProduce(
            now_ms + timeout_ms, waits, self._produce_check,
            lambda outcomes: self._answer_produce(callback, results, outcomes),
            already_done,
        )  # fmt: skip
        if not self.produces.try_complete_else_watch(operation):
            self.on_deadline(now_ms + timeout_ms)

    def _append(
        self, item: ProduceRequestPartition, acks: int, origin: AppendOrigin, zstd_allowed: bool, now_ms: int
    ) -> tuple[ProduceResult, ProduceWait | None]:
        tp = item.tp
        if origin is AppendOrigin.CLIENT and tp[0] in INTERNAL_TOPICS:  # Kafka checks this first
            return ProduceResult(
                ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {tp[0]}",
                *self._leader_tail(tp),
            ), None  # fmt: skip
        error = self._check_hosted(tp)
        partition = self.partitions.get(tp)
        if error is None and partition is not None:
            error = partition.check_append(acks, item.current_leader_epoch)
        if error is not None or partition is None:
            assert error is not None
            return ProduceResult(error.code, error.message, *self._leader_tail(tp)), None
        hosted = self.hosted[tp]
        plog = hosted.log
        try:
            check_codecs(item.records, tp, zstd_allowed)
            # Kafka's order: the batches' own checks, then the producer state, then the write.
            valid = plog.validate_as_leader(item.records, origin)
            if origin is AppendOrigin.CLIENT and len(valid.headers) != 1:  # Kafka's ProduceRequest rule
                raise errors.InvalidRecordError(
                    f"{tp[0]}-{tp[1]}: a Produce carries exactly one record batch per partition (v3 and "
                    f"above), this one carries {len(valid.headers)}: send them as separate requests"
                )
            batches = [producer_batch(header) for _, header in valid.headers]
            verdict = plog.producer_state.check_all(batches)
            if isinstance(verdict, Duplicate):
                return self._duplicate_result(tp, partition, batches[0].producer_id, verdict)
            if isinstance(verdict, Reject):
                return ProduceResult(verdict.code, verdict.message, *self._leader_tail(tp)), None
            # The log records the batches in its producer state as it appends them.
            info, high_watermark_moved = hosted.append_as_leader(valid, now_ms)
        except errors.KafkaError as exc:
            return ProduceResult(ErrorCode(exc.code), exc.message, *self._leader_tail(tp)), None
        if high_watermark_moved:
            self._high_watermark_moved(tp)
        self.follower_fetches.check_and_complete(tp)
        result = ProduceResult(
            ErrorCode.NONE, "", info.first_offset, info.log_append_time, plog.log_start_offset,
            partition.leader_id, partition.leader_epoch,
        )  # fmt: skip
        return result, ProduceWait(info.last_offset + 1, partition.leader_epoch)

    def _duplicate_result(
        self, tp: TopicPartition, partition: Partition, producer_id: int, verdict: Duplicate
    ) -> tuple[ProduceResult, ProduceWait | None]:
        """A retried batch already in the log: the original's offsets; acks=all waits for its HW."""
        plog = self.logs[tp]
        plog.producer_state.touch(producer_id, self.clock_ms())
        log_event(log, logging.DEBUG, "duplicate_batch", topic=tp[0], partition=tp[1],
                  producer_id=producer_id, offset=verdict.first_offset)  # fmt: skip
        result = ProduceResult(
            ErrorCode.NONE, "", verdict.first_offset, NO_TIMESTAMP, plog.log_start_offset,
            partition.leader_id, partition.leader_epoch,
        )  # fmt: skip
        return result, ProduceWait(verdict.last_offset + 1, partition.leader_epoch)

    def _leader_tail(self, tp: TopicPartition) -> tuple[int, int, int, int, int]:
        """(base offset, log append time, log start offset, leader id, leader epoch) after the message."""
        plog = self.logs.get(tp)
        return (NO_OFFSET, NO_TIMESTAMP, plog.log_start_offset if plog else NO_OFFSET, *self._leader_of(tp))

    def _check_hosted(self, tp: TopicPartition) -> ApiError | None:
        topic = self.image.topic_by_name(tp[0])
        if topic is None or tp[1] not in topic.partitions:
            return ApiError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"{tp[0]}-{tp[1]} does not exist; create the topic first",
            )
        if tp not in self.partitions:
            reg = topic.partitions[tp[1]]
            return ApiError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"{tp[0]}-{tp[1]} is not hosted on broker {self.broker_id} (leader {reg.leader}, "
                f"replicas {list(reg.replicas)}); refresh metadata",
            )
        return None

    # ---- fetch and offset lookups (served by the reader and the lookup) ------------------------------

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
        """A consumer's Fetch: ``FetchReader.fetch_for_consumer``."""
        self.fetch_reader.fetch_for_consumer(
            items, max_bytes, min_bytes, max_wait_ms, now_ms, callback,
            zstd_allowed=zstd_allowed, file_slices=file_slices,
        )  # fmt: skip

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
        """A follower's Fetch, on the leader: ``FetchReader.fetch_for_follower``."""
        self.fetch_reader.fetch_for_follower(
            replica_id, broker_epoch, items, max_bytes, min_bytes, max_wait_ms, now_ms, callback, clock_ms,
            file_slices=file_slices,
        )  # fmt: skip

    def list_offset(
        self, tp: TopicPartition, spec: str, timestamp_ms: int, current_leader_epoch: int | None
    ) -> ListOffsetResult:
        """ListOffsets for one partition: ``OffsetLookup.list_offset``."""
        return self.offset_lookup.list_offset(tp, spec, timestamp_ms, current_leader_epoch)

    def offsets_for_leader_epoch(
        self, tp: TopicPartition, current_leader_epoch: int | None, leader_epoch: int
    ) -> tuple[ApiError | None, EpochEndOffset]:
        """OffsetsForLeaderEpoch for one partition: ``OffsetLookup.offsets_for_leader_epoch``."""
        return self.offset_lookup.offsets_for_leader_epoch(tp, current_leader_epoch, leader_epoch)

    def producer_entries(self, tp: TopicPartition) -> tuple[ApiError | None, list[ProducerEntry]]:
        """DescribeProducers for one partition: ``OffsetLookup.producer_entries``."""
        return self.offset_lookup.producer_entries(tp)

    # ---- DeleteRecords --------------------------------------------------------------------------

    def delete_records(self, tp: TopicPartition, offset: int) -> ListOffsetResult:
        """DeleteRecords on the leader: the log start offset moves to ``offset`` (-1 = the HW), so
        consumers no longer see what lies before it; retention deletes the whole segments below it and
        followers follow the leader's log start offset. Beyond the HW is OFFSET_OUT_OF_RANGE; a
        compacted topic is POLICY_VIOLATION (Kafka's rules). The answer's ``offset`` is the leader's
        new log start offset (Kafka's low watermark also waits for the followers; pykraft answers
        once the leader moved)."""
        error = self._check_hosted(tp)
        partition = self.partitions.get(tp)
        if error is None and partition is not None:
            error = partition.check_leader()
        if error is not None or partition is None:
            assert error is not None
            return ListOffsetResult(error)
        if "compact" in (self.log_manager.topic_config(tp[0], "cleanup.policy") or ""):
            return ListOffsetResult(ApiError(
                ErrorCode.POLICY_VIOLATION,
                f"{tp[0]} has cleanup.policy compact: its records cannot be deleted by offset",
            ))  # fmt: skip
        target = partition.high_watermark if offset == NO_OFFSET else offset
        if not 0 <= target <= partition.high_watermark:
            return ListOffsetResult(ApiError(
                ErrorCode.OFFSET_OUT_OF_RANGE,
                f"{tp[0]}-{tp[1]}: cannot delete records before offset {offset}: it is outside "
                f"[0, high watermark {partition.high_watermark}] (-1 = the high watermark)",
            ))  # fmt: skip
        plog = self.logs[tp]
        if self.hosted[tp].increment_log_start_offset(target):
            log_event(log, logging.INFO, "records_deleted", topic=tp[0], partition=tp[1],
                      log_start_offset=plog.log_start_offset)  # fmt: skip
        return ListOffsetResult(offset=plog.log_start_offset)

    # ---- ISR ----------------------------------------------------------------------------------

    def maybe_shrink_isr(self, now_ms: int) -> None:
        """The ISR timer: propose dropping followers that lag more than replica.lag.time.max.ms."""
        for tp, partition in self.partitions.items():
            proposal = partition.maybe_shrink_isr(now_ms)
            if proposal is not None:
                log_event(log, logging.INFO, "isr_change_proposed", topic=tp[0], partition=tp[1],
                          isr=proposal.new_isr, lagging=partition.out_of_sync_replicas(now_ms))  # fmt: skip
                self.send_alter_partition(self.topic_ids[tp[0]], proposal)

    def pending_proposal(self, tp: TopicPartition) -> AlterPartitionProposal | None:
        partition = self.partitions.get(tp)
        return None if partition is None else partition.pending_isr

    def handle_alter_partition_response(
        self,
        proposal: AlterPartitionProposal,
        code: ErrorCode,
        leader_epoch: int = NO_EPOCH,
        partition_epoch: int = NO_EPOCH,
        isr: Iterable[int] = (),
        *,
        now_ms: int,
    ) -> None:
        """The controller's answer to ``proposal``, at ``now_ms`` (the monotonic clock of the
        partitions' other calls: the HW may wait for a caught-up follower)."""
        tp = cast(TopicPartition, (proposal.topic, proposal.partition))  # a plain tuple, as in apply_image
        partition = self.partitions.get(tp)
        if partition is None:
            return
        old = partition.handle_alter_partition_response(
            proposal, code, leader_epoch, partition_epoch, isr, now_ms=now_ms
        )
        if old is not None:
            self._high_watermark_moved(tp)
        else:
            # A shrink that did not move the HW still decides parked acks=all produces (ISR too small).
            self.produces.check_and_complete(tp)

    # ---- follower side: fetcher actions ----------------------------------------------------------

    def local_view(self, tp: TopicPartition) -> LocalLogView:
        plog, partition = self.logs[tp], self.partitions[tp]
        return LocalLogView(plog.leader_epoch_cache.entries, plog.log_end_offset, partition.high_watermark)

    def log_position(self, tp: TopicPartition) -> tuple[int, int | None] | None:
        """(log end offset, latest epoch) of a hosted partition, for the fetcher's next request."""
        plog = self.logs.get(tp)
        return None if plog is None else (plog.log_end_offset, plog.latest_epoch)

    def apply_fetch_action(self, action: FetchAction) -> None:
        """Apply one answer of the leader to the local log and replication state (a follower)."""
        tp = action.topic_partition
        hosted = self.hosted.get(tp)
        if hosted is None or hosted.partition.role is not Role.FOLLOWER:
            return
        if isinstance(action, AppendRecords):
            hosted.append_as_follower(
                action.records, action.leader_high_watermark, action.leader_log_start_offset
            )
        elif isinstance(action, TruncateTo):
            if hosted.truncate_to(action.offset):
                log_event(log, logging.INFO, "log_truncated", topic=tp[0], partition=tp[1],
                          log_end_offset=hosted.log.log_end_offset, reason=action.reason)  # fmt: skip
        elif isinstance(action, TruncateFullyAndStartAt):
            log_event(log, logging.INFO, "log_restarted", topic=tp[0], partition=tp[1], offset=action.offset,
                      reason="behind the leader's log start")  # fmt: skip
            hosted.truncate_fully_and_start_at(action.offset)
        elif isinstance(action, (Fenced, BackedOff)):
            log_event(log, logging.DEBUG, "fetch_state", topic=tp[0], partition=tp[1], action=action)
        hosted.sync_high_watermark()

    # ---- durability and shutdown -----------------------------------------------------------------

    def led_partitions(self) -> list[TopicPartition]:
        return sorted(tp for tp, p in self.partitions.items() if p.role is Role.LEADER)

    def delete_old_segments(self) -> int:
        """Retention (``LogManager.delete_old_segments``); the partitions learn their new log start
        offsets. Returns the number of segments deleted."""
        deleted = self.log_manager.delete_old_segments()
        for tp in deleted:
            self.hosted[tp].log_start_offset_moved()
        return sum(deleted.values())

    def close(self) -> None:
        for tp in list(self.partitions):
            partition = self.partitions[tp]
            partition.stop()
            self._partition_changed(tp)
        self.expire(2**62)
        self.log_manager.close()
        self.hosted.clear()

    def invariants(self) -> None:
        for purgatory in (self.produces, self.follower_fetches, self.consumer_fetches):
            purgatory.invariants()
        for hosted in self.hosted.values():
            hosted.partition.invariants()
            hosted.invariants()

