"""The asyncio driver of the sans-I/O ``broker.group.coordinator.GroupCoordinator`` on a data broker;
the Kafka group APIs (``broker.kafka.handlers.groups``) call it.

The driver (``GroupDriver``) does the coordinator's I/O on the broker's event loop:

- requests get a request id and a future; the core's ``Effects`` answer them, now or later (a parked
  JoinGroup/SyncGroup), and list records to append to ``__consumer_offsets``;
- each ``Append`` becomes one RecordBatch appended with acks=all through the ``ReplicaManager``
  (``offsets.commit.timeout.ms``); its outcome goes back with ``complete_append``;
- one timer at the core's ``next_deadline_ms`` runs ``tick`` (sessions, join/sync phases, offset
  expiration); the core's clock is the wall clock (``now_ms``: its timestamps are stored in the log),
  the replica manager's the monotonic one (``replica_clock_ms``). A handler calls the core with
  ``driver.now_ms()``, never the monotonic clock: the core's deadlines and stored timestamps are
  wall-clock (there is deliberately no ``clock_ms`` attribute, the name it had before);
- ``ReplicaManager.image_listeners``: a topic that leaves the metadata (deleted, or re-created under
  a new id) takes its committed offsets with it (``handle_deleted_topics``);
- ``ReplicaManager.role_listeners``: becoming leader of an ``__consumer_offsets`` partition starts a
  load task (the partition's log from its start to its end, replayed in chunks, yielding to the loop
  between them; requests meanwhile answer COORDINATOR_LOAD_IN_PROGRESS); losing it unloads. A load
  that is overtaken by another role change stops without effect (a token per partition).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

from broker.group.coordinator import Append, Effects, GroupConfig, GroupCoordinator
from broker.group.metadata import OFFSETS_TOPIC
from broker.group.record_serde import CorruptOffsetsRecordError, decode_batches, decode_record, encode_batch
from broker.replica.partition import ACKS_ALL
from broker.replica.replica_manager import ProduceRequestPartition, ProduceResult, ReplicaManager
from metadata.image import MetadataImage
from proto.clock import wall_clock_ms
from proto.errors import ApiError, ErrorCode
from proto.kafka_types import TopicPartition
from proto.runtime.logfmt import log_event
from storage.log_validator import AppendOrigin

log = logging.getLogger(__name__)

LOAD_CHUNK_BYTES = 1 << 20
LOAD_RETRY_S = 1.0


class GroupDriver:
    """Runs the group coordinator core on the broker's event loop (module docstring)."""

    def __init__(
        self,
        manager: ReplicaManager,
        config: GroupConfig,
        clock_ms: Callable[[], int],
        commit_timeout_ms: int,
        rng: random.Random | None = None,
        now_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.manager = manager
        self.core = GroupCoordinator(config, rng or random.Random())
        self.replica_clock_ms = clock_ms  # monotonic: the replica manager's, never the core's
        self.now_ms = now_ms  # wall clock: the core's
        self.commit_timeout_ms = commit_timeout_ms
        self._futures: dict[int, asyncio.Future] = {}
        self._next_request_id = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_ms: int | None = None
        self._load_tokens: dict[int, object] = {}
        self._tasks: set[asyncio.Task] = set()
        self._topic_ids: dict[str, str] = dict(manager.image.topic_ids)  # the topics seen so far
        manager.role_listeners.append(self.on_role)
        manager.image_listeners.append(self.on_image)

    # ---- requests ---------------------------------------------------------------------------------

    async def call(self, handle: Callable[[int], Effects]) -> Any:
        """Run ``handle(request_id)`` on the core and wait for the answer to that request."""
        self._next_request_id += 1
        request_id = self._next_request_id
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._futures[request_id] = future
        try:
            self.dispatch(handle(request_id))
            return await future
        finally:
            self._futures.pop(request_id, None)

    def dispatch(self, fx: Effects) -> None:
        for request_id, response in fx.responses:
            future = self._futures.pop(request_id, None)
            if future is not None and not future.done():
                future.set_result(response)
        for append in fx.appends:
            self._append(append)
        self._reschedule()

    def _append(self, append: Append) -> None:
        tp = TopicPartition(OFFSETS_TOPIC, append.partition)
        try:
            batch = encode_batch(append.records, self.now_ms())
        except Exception as exc:  # a record the codec refuses: fail the request, keep the broker
            log_event(log, logging.ERROR, "offsets_encode_failed", exc_info=exc, partition=append.partition)
            self.dispatch(
                self.core.complete_append(
                    append.append_id, ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)), self.now_ms()
                )
            )
            return

        def done(results: dict[TopicPartition, ProduceResult]) -> None:
            result = results[tp]
            self.dispatch(
                self.core.complete_append(
                    append.append_id, ApiError(result.code, result.message), self.now_ms()
                )
            )

        self.manager.produce(
            ACKS_ALL,
            self.commit_timeout_ms,
            [ProduceRequestPartition(tp, batch, None)],
            self.replica_clock_ms(),
            done,
            origin=AppendOrigin.COORDINATOR,  # an internal topic: clients may not append to it
        )

    # ---- timer ------------------------------------------------------------------------------------

    def _reschedule(self) -> None:
        deadline = self.core.next_deadline_ms()
        if deadline == self._timer_ms:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_ms = None, None
        if deadline is None:
            return
        delay_s = max(0.0, (deadline - self.now_ms()) / 1000)
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._on_timer)
        self._timer_ms = deadline

    def _on_timer(self) -> None:
        self._timer, self._timer_ms = None, None
        self.dispatch(self.core.tick(self.now_ms()))

    # ---- deleted topics ---------------------------------------------------------------------------

    def on_image(self, image: MetadataImage) -> None:
        """A topic seen before that is gone now, or has a new id (deleted and re-created), is deleted:
        its offsets go. A topic this broker never saw is left alone: its image may lag the one of
        the coordinator that accepted the commit."""
        ids = image.topic_ids
        gone = frozenset(name for name, topic_id in self._topic_ids.items() if ids.get(name) != topic_id)
        self._topic_ids = dict(ids)
        if gone:
            log_event(log, logging.INFO, "offsets_of_deleted_topics_removed", topics=sorted(gone))
            self.dispatch(self.core.handle_deleted_topics(gone, self.now_ms()))

    # ---- leadership of __consumer_offsets partitions ----------------------------------------------

    def partition_count(self) -> int | None:
        topic = self.manager.image.topic_by_name(OFFSETS_TOPIC)
        return None if topic is None else len(topic.partitions)

    def on_role(self, tp: tuple[str, int], is_leader: bool, leader_epoch: int) -> None:
        if tp[0] != OFFSETS_TOPIC:
            return
        partition = tp[1]
        count = self.partition_count()
        if is_leader and count is not None:
            token = object()
            self._load_tokens[partition] = token
            self.dispatch(self.core.on_election(partition, count))
            task = asyncio.get_running_loop().create_task(self._load(partition, token, leader_epoch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif self.core.is_partition_owned(partition) or self.core.is_loading(partition):
            self._load_tokens.pop(partition, None)
            self.dispatch(self.core.on_resignation(partition))
            log_event(log, logging.INFO, "groups_unloaded", topic=OFFSETS_TOPIC, partition=partition)

    async def _load(self, partition: int, token: object, leader_epoch: int) -> None:
        """Replay the partition's log into the core; an I/O failure is logged and the load retried
        (requests keep answering COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        while self._load_tokens.get(partition) is token:
            try:
                loaded = await self._replay_log(partition, token)
            except Exception as exc:
                log_event(log, logging.ERROR, "groups_load_failed", exc_info=exc, topic=OFFSETS_TOPIC,
                          partition=partition, retry_s=LOAD_RETRY_S)  # fmt: skip
                await asyncio.sleep(LOAD_RETRY_S)
                count = self.partition_count()
                if self._load_tokens.get(partition) is token and count is not None:
                    self.dispatch(self.core.on_election(partition, count))  # start over from a clean slate
                continue
            if loaded is None:  # superseded by a newer role change
                return
            self.core.complete_loading(partition, self.now_ms())
            self._reschedule()
            log_event(log, logging.INFO, "groups_loaded", topic=OFFSETS_TOPIC, partition=partition,
                      records=loaded[0], end_offset=loaded[1], leader_epoch=leader_epoch)  # fmt: skip
            return

    async def _replay_log(self, partition: int, token: object) -> tuple[int, int] | None:
        """(records replayed, end offset), a chunk per loop iteration; None when superseded."""
        plog = self.manager.logs.get(TopicPartition(OFFSETS_TOPIC, partition))
        offset, end = (plog.log_start_offset, plog.log_end_offset) if plog is not None else (0, 0)
        records = 0
        while True:
            await asyncio.sleep(0)  # let requests and replication run between chunks
            if (
                self._load_tokens.get(partition) is not token
                or self.manager.logs.get(TopicPartition(OFFSETS_TOPIC, partition)) is not plog
            ):
                return None
            if plog is None or offset >= end:
                return records, end
            data = plog.read(max(offset, plog.log_start_offset), LOAD_CHUNK_BYTES, max_offset=end)
            if not data:
                return records, end
            for next_offset, key, value in decode_batches(data):
                offset = next_offset
                if key is None and value is None:
                    continue
                try:
                    self.core.replay(partition, decode_record(key, value))
                    records += 1
                except CorruptOffsetsRecordError as exc:  # Kafka fails the load; we report and go on
                    log_event(log, logging.ERROR, "offsets_record_skipped", topic=OFFSETS_TOPIC,
                              partition=partition, before_offset=next_offset, reason=exc)  # fmt: skip

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()


def group_config_from(settings: Any) -> GroupConfig:
    """The core's settings from ``broker.config.BrokerSettings`` (Kafka's ``group.*`` names)."""
    return GroupConfig(
        min_session_timeout_ms=settings.group_min_session_timeout_ms,
        max_session_timeout_ms=settings.group_max_session_timeout_ms,
        initial_rebalance_delay_ms=settings.group_initial_rebalance_delay_ms,
        max_size=settings.group_max_size,
        offset_metadata_max_bytes=settings.offset_metadata_max_bytes,
        offsets_retention_ms=settings.offsets_retention_minutes * 60_000,
        offsets_retention_check_interval_ms=settings.offsets_retention_check_interval_ms,
    )
