"""The follower side of replication: one asyncio task per leader broker, driving ``broker.fetcher``.

``FetcherManager`` implements the replica manager's ``FetcherControl``: ``add_partition(leader_id,
tp, ...)`` moves a partition to the task that fetches from ``leader_id`` (creating it), and
``remove_partition(tp)`` takes it off (a task left with no partitions stops).

Each ``FetcherDriver`` loops (DESIGN.md "Performance shape": ONE outstanding request per leader for
all the partitions followed there, parked on the leader up to ``replica.fetch.max.wait.ms``):

1. ``plan = fetcher.build_request(now)``; with nothing ready, sleep until a partition is added or
   the earliest back-off ends (``next_wake_ms``);
2. send it on the driver's ``ReplicaService.FetchStream`` to the leader (one long-lived bidi stream:
   no per-call set-up on the path of every acks=all produce) and read the answer; a transport
   failure, an ended stream or no answer within ``max_wait_ms + request.timeout.ms`` drops the
   stream (the next request opens a new one, so a late answer is never taken for a later request's)
   and is ``handle_request_failure`` (the partitions back off ``replica.fetch.backoff.ms``);
3. ``actions = fetcher.handle_response(...)`` with the local log's view; the replica manager applies
   each action to the log (append, truncate by epoch), then the fetcher learns the new log end
   (``update_position``). A truncation that made no progress (``TruncateTo.repeated``; the fetcher
   backs the partition off) is logged once per streak: WARN ``divergence_no_progress``.

The leader's address comes from the metadata image (``address_of``). Not thread-safe: everything runs
on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import grpc

from broker.divergence import EpochEndOffset
from broker.fetcher import FetchedPartition, FetcherConfig, FetchRequestPlan, ReplicaFetcher, TruncateTo
from broker.replica_manager import TP, ReplicaManager
from proto import errors, replica_pb2, replica_pb2_grpc
from proto.errors import ErrorCode
from proto.logfmt import log_event
from proto.serving import GRPC_OPTIONS

log = logging.getLogger(__name__)


_BACKGROUND: set[asyncio.Future] = set()  # strong references to fire-and-forget clean-ups


class FetchStreamEndedError(Exception):
    """The leader ended the fetch stream without an answer (e.g. it is shutting down)."""


# What makes one fetch fail (the partitions back off); anything else is a bug and is logged as one.
FETCH_FAILURES = (grpc.aio.AioRpcError, TimeoutError, asyncio.InvalidStateError, FetchStreamEndedError)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def _background(awaitable) -> None:
    task = asyncio.ensure_future(awaitable)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


class FetcherDriver:
    """Fetches every partition this broker follows on ``leader_id`` (see the module docstring)."""

    def __init__(
        self,
        leader_id: int,
        fetcher: ReplicaFetcher,
        manager: ReplicaManager,
        address_of: Callable[[int], str | None],
        topic_id_of: Callable[[str], str],
        request_timeout_ms: int,
    ) -> None:
        self.leader_id = leader_id
        self.fetcher = fetcher
        self.manager = manager
        self.address_of = address_of
        self.topic_id_of = topic_id_of
        self.request_timeout_ms = request_timeout_ms
        self._wake = asyncio.Event()
        self._channel: grpc.aio.Channel | None = None
        self._address: str | None = None
        self._stub_for_address: replica_pb2_grpc.ReplicaServiceStub | None = None
        self._stream: grpc.aio.StreamStreamCall | None = None
        self._task = asyncio.create_task(self._run(), name=f"fetcher-{leader_id}")

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._close_stream()
        if self._channel is not None:
            await self._channel.close()

    def _stub(self) -> replica_pb2_grpc.ReplicaServiceStub | None:
        address = self.address_of(self.leader_id)
        if address is None:
            return None
        if address != self._address:
            self._close_stream()
            if self._channel is not None:
                _background(self._channel.close())
            self._channel = grpc.aio.insecure_channel(address, options=GRPC_OPTIONS)
            self._address = address
            self._stub_for_address = replica_pb2_grpc.ReplicaServiceStub(self._channel)
        return self._stub_for_address

    async def _run(self) -> None:
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug must not silently stop replication: log it and back off
                log.exception("fetcher for leader %d failed; retrying", self.leader_id)
                await asyncio.sleep(self.fetcher.config.fetch_backoff_ms / 1000)

    async def _step(self) -> None:
        plan = self.fetcher.build_request(monotonic_ms())
        if plan is None:
            await self._sleep_until(self.fetcher.next_wake_ms())
            return
        stub = self._stub()
        if stub is None:
            log.info("no address for leader %d yet; backing off", self.leader_id)
            self.fetcher.handle_request_failure(plan.request_id, monotonic_ms())
            return
        try:
            response = await self._exchange(stub, self._request(plan))
        except FETCH_FAILURES as exc:
            log.info("fetch from leader %d failed: %s", self.leader_id, _describe(exc))
            self.fetcher.handle_request_failure(plan.request_id, monotonic_ms())
            return
        answers = self._answers(response)
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
                log.warning(
                    "%s-%d: cannot apply the leader's answer (refetching after a back-off): %s", *tp, exc
                )
            position = self.manager.log_position(tp)
            if position is not None:
                self.fetcher.update_position(tp, *position)
            if failed:
                self.fetcher.back_off(tp, monotonic_ms())
            elif isinstance(action, TruncateTo) and action.repeated == 1:
                self._warn_no_progress(action, position)

    def _warn_no_progress(self, action: TruncateTo, position: tuple[int, int | None] | None) -> None:
        log_end_offset, latest_epoch = position if position is not None else (None, None)
        log_event(
            log, logging.WARNING, "divergence_no_progress",
            topic=action.topic_partition[0], partition=action.topic_partition[1], leader=self.leader_id,
            truncation_offset=action.offset, reason=action.reason, log_end_offset=log_end_offset,
            latest_epoch=latest_epoch, backoff_ms=self.fetcher.config.fetch_backoff_ms,
            hint="the same truncation left the log unchanged; fetching again after each back-off",
        )  # fmt: skip

    async def _exchange(
        self, stub: replica_pb2_grpc.ReplicaServiceStub, request: replica_pb2.ReplicaFetchRequest
    ) -> replica_pb2.ReplicaFetchResponse:
        """Write ``request`` on the stream to the leader (opened on first use) and read its answer."""
        timeout_s = (self.fetcher.config.max_wait_ms + self.request_timeout_ms) / 1000
        if self._stream is None:
            self._stream = stub.FetchStream()
        stream = self._stream
        try:
            async with asyncio.timeout(timeout_s):
                await stream.write(request)
                response = await stream.read()
        except BaseException:  # failed, timed out or cancelled: the stream's state is unknown
            self._close_stream()
            raise
        if response is grpc.aio.EOF:
            self._close_stream()
            raise FetchStreamEndedError(f"leader {self.leader_id} ended the fetch stream")
        return response

    def _close_stream(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None

    async def _sleep_until(self, wake_ms: int | None) -> None:
        self._wake.clear()
        timeout = None if wake_ms is None else max(0.0, (wake_ms - monotonic_ms()) / 1000)
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel (stop()) that races
        # a wake-up, and the loop would then never end (CPython gh-86296; raft/driver.py "Stopping").
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()

    def _request(self, plan: FetchRequestPlan) -> replica_pb2.ReplicaFetchRequest:
        config = self.fetcher.config
        request = replica_pb2.ReplicaFetchRequest(
            replica_id=plan.replica_id,
            broker_epoch=plan.broker_epoch,
            max_wait_ms=config.max_wait_ms,
            min_bytes=config.min_bytes,
            max_bytes=config.max_bytes,
        )
        topics: dict[str, replica_pb2.ReplicaFetchTopic] = {}
        for part in plan.partitions:
            name, index = part.topic_partition
            topic = topics.get(name)
            if topic is None:
                topic = topics[name] = request.topics.add(name=name, topic_id=self.topic_id_of(name))
            entry = topic.partitions.add(
                partition=index,
                current_leader_epoch=part.current_leader_epoch,
                fetch_offset=part.fetch_offset,
                partition_max_bytes=config.partition_max_bytes,
            )
            if part.last_fetched_epoch is not None:
                entry.last_fetched_epoch = part.last_fetched_epoch
        return request

    @staticmethod
    def _answers(response: replica_pb2.ReplicaFetchResponse) -> dict[TP, FetchedPartition]:
        answers = {}
        for topic in response.topics:
            for p in topic.partitions:
                diverging = None
                if p.HasField("diverging_epoch"):
                    diverging = EpochEndOffset(p.diverging_epoch.epoch, p.diverging_epoch.end_offset)
                answers[(topic.name, p.partition)] = FetchedPartition(
                    ErrorCode(p.error.code), p.high_watermark, p.log_start_offset, p.log_end_offset,
                    diverging, p.records, p.error.message,
                )  # fmt: skip
        return answers


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name} {exc.details()}"
    if isinstance(exc, TimeoutError):
        return "no answer before the request timeout"
    return str(exc) or type(exc).__name__


class FetcherManager:
    """One ``FetcherDriver`` per leader broker (the replica manager's ``FetcherControl``)."""

    def __init__(
        self,
        broker_id: int,
        config: FetcherConfig,
        address_of: Callable[[int], str | None],
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
        self._leader_of: dict[TP, int] = {}

    def set_broker_epoch(self, broker_epoch: int) -> None:
        self.broker_epoch = broker_epoch
        for driver in self.drivers.values():
            driver.fetcher.broker_epoch = broker_epoch

    def add_partition(
        self, leader_id: int, tp: TP, fetch_offset: int, last_fetched_epoch: int | None, leader_epoch: int
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

    def remove_partition(self, tp: TP) -> None:
        leader_id = self._leader_of.pop(tp, None)
        driver = None if leader_id is None else self.drivers.get(leader_id)
        if driver is None:  # not followed, or its driver stopped after the fetcher dropped it (Fenced)
            return
        driver.fetcher.remove_partition(tp)
        if not driver.fetcher.partitions():
            del self.drivers[leader_id]
            _background(driver.stop())

    def followed(self) -> dict[TP, int]:
        """Partition -> the leader it is fetched from."""
        return dict(self._leader_of)

    async def stop(self) -> None:
        drivers, self.drivers = list(self.drivers.values()), {}
        self._leader_of.clear()
        for driver in drivers:
            await driver.stop()
