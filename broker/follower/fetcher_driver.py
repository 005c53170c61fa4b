"""The follower side of replication: one asyncio task per leader broker, driving ``broker.follower.fetcher``.

``FetcherManager`` implements the replica manager's ``FetcherControl``: ``add_partition(leader_id,
tp, ...)`` moves a partition to the task that fetches from ``leader_id`` (creating it), and
``remove_partition(tp)`` takes it off (a task left with no partitions stops).

Each ``FetcherDriver`` loops (docs/architecture.md, "Data paths": ONE connection and ONE outstanding request
per leader for all the partitions followed there, parked on the leader up to
``replica.fetch.max.wait.ms``):

1. ``plan = fetcher.build_request(now)``; with nothing ready, sleep until a partition is added or
   the earliest back-off ends (``next_wake_ms``);
2. send it as a Kafka Fetch (v``FETCH_VERSION``: topic ids, the KIP-903 replica state with this
   broker's epoch, ``last_fetched_epoch`` for the diverging epoch) on the driver's connection to the
   leader's Kafka listener (``broker.follower.kafka_client``), through an incremental fetch session (KIP-227,
   ``proto.kafka.fetch_session``: partitions whose fetch state did not change are not listed, and the
   leader leaves out those with nothing new). A connection failure or no answer within ``max_wait_ms
   + request.timeout.ms`` closes the connection (the next request opens a new one and a new session,
   so a late answer is never taken for a later request's) and is ``handle_request_failure`` (the
   partitions back off ``replica.fetch.backoff.ms``). A session error (the leader evicted the session)
   is no failure: the next request, at once, is a full one;
3. ``actions = fetcher.handle_response(...)`` with the local log's view; the replica manager applies
   each action to the log (append, truncate by epoch), then the fetcher learns the new log end
   (``update_position``) and the loop fetches again at once from it. A truncation that made no
   progress (``TruncateTo.repeated``; the fetcher backs the partition off) is logged once per streak:
   WARN ``divergence_no_progress``.

OFFSET_OUT_OF_RANGE above the leader's log start means the follower's log is longer than the leader's
with no epoch to compare: the driver asks the leader's log end with OffsetForLeaderEpoch (the end of
the current leader epoch, Kafka's ``fetchEpochEndOffsets``) and the fetcher truncates to it.

The leader's address is its endpoint of this broker's Kafka listener name in the metadata image
(``address_of``). Not thread-safe: everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from broker.follower.fetcher import FetchedPartition, FetcherConfig, FetchRequestPlan, ReplicaFetcher
from broker.follower.kafka_client import KafkaConnection, KafkaConnectionError
from broker.replica.divergence import EpochEndOffset
from broker.replica.follower_actions import TruncateTo
from broker.replica.replica_manager import ReplicaManager
from proto import errors
from proto.clock import monotonic_ms
from proto.errors import ErrorCode
from proto.kafka import messages as m
from proto.kafka.codec import KafkaDecodeError
from proto.kafka.fetch_session import FetchSessionHandler, PartitionFetchRequest, SessionRequest
from proto.kafka.topic_ids import uuid_of
from proto.kafka_types import NO_EPOCH, NO_OFFSET, TopicPartition
from proto.runtime import latency_trace
from proto.runtime.logfmt import log_event

log = logging.getLogger(__name__)

FETCH_VERSION = 15  # KIP-903 replica state (broker epoch), topic ids, diverging epoch
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH})

_BACKGROUND: set[asyncio.Future] = set()  # strong references to fire-and-forget clean-ups


class FetchAnswerError(Exception):
    """The leader answered the whole request with an error (other than a fetch session's)."""


# What makes one fetch fail (the partitions back off); anything else is a bug and is logged as one.
FETCH_FAILURES = (KafkaConnectionError, TimeoutError, KafkaDecodeError, FetchAnswerError)


def _background(awaitable) -> None:
    task = asyncio.ensure_future(awaitable)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


def session_partitions(
    plan: FetchRequestPlan, config: FetcherConfig, topic_id_of: Callable[[str], str]
) -> dict[TopicPartition, PartitionFetchRequest]:
    """What ``plan`` asks of each partition, as the fetch session records it."""
    return {
        part.topic_partition: PartitionFetchRequest(
            part.fetch_offset,
            part.current_leader_epoch,
            NO_EPOCH if part.last_fetched_epoch is None else part.last_fetched_epoch,
            config.partition_max_bytes,
            topic_id_of(part.topic_partition[0]),
        )
        for part in plan.partitions
    }


def fetch_request(
    plan: FetchRequestPlan, session: SessionRequest, config: FetcherConfig, topic_id_of: Callable[[str], str]
) -> m.FetchRequest:
    """The Kafka Fetch request for ``plan`` through the fetch session (``session``: what to list and
    what to forget)."""
    topics: dict[str, m.FetchRequestFetchTopic] = {}
    for (name, index), state in session.partitions.items():
        topic = topics.get(name)
        if topic is None:
            topic = topics[name] = m.FetchRequestFetchTopic(topic_id=uuid_of(state.topic_id), partitions=[])
        topic.partitions.append(
            m.FetchRequestFetchPartition(
                partition=index,
                current_leader_epoch=state.current_leader_epoch,
                fetch_offset=state.fetch_offset,
                last_fetched_epoch=state.last_fetched_epoch,
                partition_max_bytes=state.partition_max_bytes,
            )
        )
    # A partition leaves the session under the topic id it was fetched with (Kafka's
    # FetchSessionHandler): a deleted topic's id is no longer in this broker's metadata.
    forgotten: dict[str, list[int]] = {}
    for name, index in session.forgotten:
        topic_id = session.forgotten_topic_ids.get(TopicPartition(name, index)) or topic_id_of(name)
        forgotten.setdefault(topic_id, []).append(index)
    return m.FetchRequest(
        replica_state=m.FetchRequestReplicaState(replica_id=plan.replica_id, replica_epoch=plan.broker_epoch),
        max_wait_ms=config.max_wait_ms, min_bytes=config.min_bytes, max_bytes=config.max_bytes,
        session_id=session.session_id, session_epoch=session.session_epoch, topics=list(topics.values()),
        forgotten_topics_data=[
            m.FetchRequestForgottenTopic(topic_id=uuid_of(topic_id), partitions=indexes)
            for topic_id, indexes in forgotten.items()
        ],
    )  # fmt: skip


def fetch_answers(
    response: m.FetchResponse, followed_topics: set[str], topic_id_of: Callable[[str], str]
) -> dict[TopicPartition, FetchedPartition]:
    """The answers of ``response`` for the topics still followed, by partition (a topic no longer
    followed, or an id this broker does not know yet, is skipped)."""
    names = {uuid_of(topic_id_of(name)): name for name in followed_topics}
    answers = {}
    for topic in response.responses:
        name = names.get(topic.topic_id)
        if name is None:
            continue
        for p in topic.partitions:
            diverging = None
            if p.diverging_epoch.epoch >= 0:
                diverging = EpochEndOffset(p.diverging_epoch.epoch, p.diverging_epoch.end_offset)
            answers[TopicPartition(name, p.partition_index)] = FetchedPartition(
                ErrorCode(p.error_code), p.high_watermark, p.log_start_offset, NO_OFFSET, diverging,
                p.records if p.records is not None else b"",
            )  # fmt: skip
    return answers


class FetcherDriver:
    """Fetches every partition this broker follows on ``leader_id`` (see the module docstring)."""

    def __init__(
        self,
        leader_id: int,
        fetcher: ReplicaFetcher,
        manager: ReplicaManager,
        address_of: Callable[[int], tuple[str, int] | None],
        topic_id_of: Callable[[str], str],
        request_timeout_ms: int,
    ) -> None:
        self.leader_id = leader_id
        self.fetcher = fetcher
        self.manager = manager
        self.address_of = address_of
        self.topic_id_of = topic_id_of
        self.request_timeout_ms = request_timeout_ms
        self.session = FetchSessionHandler()
        self._wake = asyncio.Event()
        self._connection: KafkaConnection | None = None
        self._address: tuple[str, int] | None = None
        self._task = asyncio.create_task(self._run(), name=f"fetcher-{leader_id}")

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        connection, self._connection = self._connection, None
        if connection is not None:
            await connection.close()

    async def _connect(self) -> KafkaConnection | None:
        """The connection to the leader's Kafka listener (a new one when its address changed)."""
        address = self.address_of(self.leader_id)
        if address is None:
            return None
        if address != self._address or self._connection is None or self._connection.closed:
            self._drop_connection()
            self._connection = await KafkaConnection.open(
                *address, f"replica-fetcher-{self.fetcher.replica_id}", self.request_timeout_ms / 1000
            )
            self._address = address
        return self._connection

    def _drop_connection(self) -> None:
        """Close the connection; the next request starts a new one with a full fetch (new session)."""
        connection, self._connection = self._connection, None
        self.session.reset()
        if connection is not None:
            _background(connection.close())

    async def _run(self) -> None:
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug must not silently stop replication: log it and back off
                log_event(log, logging.ERROR, "fetcher_crashed", exc_info=exc, leader=self.leader_id)
                self._drop_connection()
                await asyncio.sleep(self.fetcher.config.fetch_backoff_ms / 1000)

    async def _step(self) -> None:
        plan = self.fetcher.build_request(monotonic_ms())
        if plan is None:
            await self._sleep_until(self.fetcher.next_wake_ms())
            return
        try:
            answers = await self._fetch(plan)
        except FETCH_FAILURES as exc:
            log_event(log, logging.INFO, "fetch_failed", leader=self.leader_id, reason=_describe(exc))
            self._drop_connection()
            self.fetcher.handle_request_failure(plan.request_id, monotonic_ms())
            return
        if answers is None:  # no address yet
            log_event(log, logging.INFO, "leader_address_unknown", leader=self.leader_id)
            self.fetcher.handle_request_failure(plan.request_id, monotonic_ms())
            return
        actions = self.fetcher.handle_response(
            plan.request_id, answers, self.manager.local_view, monotonic_ms()
        )
        for action in actions:
            tp = action.topic_partition
            failed = False
            try:
                self.manager.apply_fetch_action(action)
            except errors.KafkaError as exc:
                failed = True
                log_event(log, logging.WARNING, "fetch_answer_not_applied", topic=tp[0], partition=tp[1],
                          reason=exc)  # fmt: skip
            position = self.manager.log_position(tp)
            if position is not None:
                self.fetcher.update_position(tp, *position)
            if failed:
                self.fetcher.back_off(tp, monotonic_ms())
            elif isinstance(action, TruncateTo) and action.repeated == 1:
                self._warn_no_progress(action, position)
        if latency_trace.ENABLED:
            latency_trace.event("fetch_applied", f"{self.fetcher.replica_id} actions={len(actions)}")

    def _warn_no_progress(self, action: TruncateTo, position: tuple[int, int | None] | None) -> None:
        log_end_offset, latest_epoch = position if position is not None else (None, None)
        log_event(
            log, logging.WARNING, "divergence_no_progress",
            topic=action.topic_partition[0], partition=action.topic_partition[1], leader=self.leader_id,
            truncation_offset=action.offset, reason=action.reason, log_end_offset=log_end_offset,
            latest_epoch=latest_epoch, backoff_ms=self.fetcher.config.fetch_backoff_ms,
            hint="the same truncation left the log unchanged; fetching again after each back-off",
        )  # fmt: skip

    async def _fetch(self, plan: FetchRequestPlan) -> dict[TopicPartition, FetchedPartition] | None:
        """One Fetch round trip for ``plan``: the answers by partition (only those the leader sent),
        or None while the leader has no address. A session error yields no answers: every partition
        is fetched again at once, in a full request."""
        connection = await self._connect()
        if connection is None:
            return None
        session = self.session.build(session_partitions(plan, self.fetcher.config, self.topic_id_of))
        timeout_s = (self.fetcher.config.max_wait_ms + self.request_timeout_ms) / 1000
        request = fetch_request(plan, session, self.fetcher.config, self.topic_id_of)
        response = await connection.request(request, FETCH_VERSION, timeout_s)
        code = ErrorCode(response.error_code)
        if not self.session.handle_response(code, response.session_id):
            if code in SESSION_ERRORS or code == ErrorCode.NONE:
                log_event(log, logging.INFO, "fetch_session_reset", leader=self.leader_id, code=code.name)
                return {}
            raise FetchAnswerError(f"the leader answered {code.name}")
        answers = fetch_answers(response, self._followed_topics(), self.topic_id_of)
        self.session.relist(tp for tp, answer in answers.items() if answer.error != ErrorCode.NONE)
        await self._leader_log_ends(connection, plan, answers, timeout_s)
        return answers

    def _followed_topics(self) -> set[str]:
        return {name for name, _ in self.fetcher.partitions()}

    async def _leader_log_ends(
        self,
        connection: KafkaConnection,
        plan: FetchRequestPlan,
        answers: dict[TopicPartition, FetchedPartition],
        timeout_s: float,
    ) -> None:
        """Fill the leader's log end offset into OFFSET_OUT_OF_RANGE answers above its log start."""
        fetch_offsets = {part.topic_partition: part for part in plan.partitions}
        asked = [
            tp for tp, a in answers.items()
            if a.error == ErrorCode.OFFSET_OUT_OF_RANGE and tp in fetch_offsets
            and fetch_offsets[tp].fetch_offset >= a.log_start_offset
        ]  # fmt: skip
        if not asked:
            return
        topics: dict[str, list[m.OffsetForLeaderEpochRequestOffsetForLeaderPartition]] = {}
        for name, index in asked:
            epoch = fetch_offsets[TopicPartition(name, index)].current_leader_epoch
            topics.setdefault(name, []).append(
                m.OffsetForLeaderEpochRequestOffsetForLeaderPartition(
                    partition=index, current_leader_epoch=epoch, leader_epoch=epoch
                )
            )
        request = m.OffsetForLeaderEpochRequest(
            replica_id=plan.replica_id,
            topics=[
                m.OffsetForLeaderEpochRequestOffsetForLeaderTopic(topic=t, partitions=ps)
                for t, ps in topics.items()
            ],
        )
        response = await connection.request(request, OFFSET_FOR_LEADER_EPOCH_VERSION, timeout_s)
        for topic in response.topics:
            for p in topic.partitions:
                tp = (topic.topic, p.partition)
                if tp in answers and p.error_code == ErrorCode.NONE and p.end_offset >= 0:
                    a = answers[tp]
                    answers[tp] = FetchedPartition(
                        a.error,
                        a.high_watermark,
                        a.log_start_offset,
                        p.end_offset,
                        a.diverging_epoch,
                        a.records,
                    )
                elif tp in answers:  # no usable end: back the partition off like any other error
                    a = answers[tp]
                    answers[tp] = FetchedPartition(
                        ErrorCode(p.error_code or ErrorCode.UNKNOWN_SERVER_ERROR), a.high_watermark,
                        a.log_start_offset, NO_OFFSET, None, b"",
                        "OffsetForLeaderEpoch gave no log end offset",
                    )  # fmt: skip

    async def _sleep_until(self, wake_ms: int | None) -> None:
        self._wake.clear()
        timeout = None if wake_ms is None else max(0.0, (wake_ms - monotonic_ms()) / 1000)
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel (stop()) that races
        # a wake-up, and the loop would then never end (CPython gh-86296; raft/driver.py "Stopping").
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer before the request timeout"
    return str(exc) or type(exc).__name__


class FetcherManager:
    """One ``FetcherDriver`` per leader broker (the replica manager's ``FetcherControl``)."""

    def __init__(
        self,
        broker_id: int,
        config: FetcherConfig,
        address_of: Callable[[int], tuple[str, int] | None],
        topic_id_of: Callable[[str], str],
        request_timeout_ms: int,
    ) -> None:
        self.broker_id = broker_id
        self.broker_epoch = -1
        self.config = config
        self.address_of = address_of
        self.topic_id_of = topic_id_of
        self.request_timeout_ms = request_timeout_ms
        self.manager: ReplicaManager | None = None
        self.drivers: dict[int, FetcherDriver] = {}
        self._leader_of: dict[TopicPartition, int] = {}

    def set_broker_epoch(self, broker_epoch: int) -> None:
        self.broker_epoch = broker_epoch
        for driver in self.drivers.values():
            driver.fetcher.broker_epoch = broker_epoch

    def add_partition(
        self,
        leader_id: int,
        tp: TopicPartition,
        fetch_offset: int,
        last_fetched_epoch: int | None,
        leader_epoch: int,
    ) -> None:
        self.remove_partition(tp)
        assert self.manager is not None, "FetcherManager.manager is set before any partition is added"
        driver = self.drivers.get(leader_id)
        if driver is None:
            fetcher = ReplicaFetcher(leader_id, self.broker_id, self.broker_epoch, self.config)
            driver = FetcherDriver(
                leader_id, fetcher, self.manager, self.address_of, self.topic_id_of, self.request_timeout_ms
            )
            self.drivers[leader_id] = driver
        driver.fetcher.add_partition(tp, fetch_offset, last_fetched_epoch, leader_epoch)
        self._leader_of[tp] = leader_id
        driver.wake()

    def remove_partition(self, tp: TopicPartition) -> None:
        leader_id = self._leader_of.pop(tp, None)
        if leader_id is None:  # not followed
            return
        driver = self.drivers.get(leader_id)
        if driver is None:  # its driver stopped after the fetcher dropped it (Fenced)
            return
        driver.fetcher.remove_partition(tp)
        if not driver.fetcher.partitions():
            del self.drivers[leader_id]
            _background(driver.stop())

    def followed(self) -> dict[TopicPartition, int]:
        """Partition -> the leader it is fetched from."""
        return dict(self._leader_of)

    async def stop(self) -> None:
        drivers, self.drivers = list(self.drivers.values()), {}
        self._leader_of.clear()
        for driver in drivers:
            await driver.stop()
