"""The controller's write path over the Raft driver, and forwarding to the active controller.

The services themselves are ``metadata.admin_service`` and ``metadata.controller_service``.

Write path (``ActiveController.write``): one decision at a time, under a lock —
1. make sure this node is the active controller and has applied everything committed before its
   term: on the first write of a term it commits an empty *barrier* entry and waits for it, then
   starts fresh broker sessions (``QuorumController.activate``) and, in a new cluster, commits the
   cluster id (``QuorumController.maybe_write_cluster_id``);
2. let the core generate ``ControllerResult(records, response)`` against the image;
3. propose the records as ONE Raft entry and wait until it is committed and applied (replayed);
4. answer with the response.
A proposal that times out leaves its outcome unknown: the next write commits a new barrier first,
so nothing is generated against an image that might still change underneath.

Reads are answered by the active controller after the same barrier, so a client that was told
"created" sees the topic on its next call, whichever controller it asks.

Forwarding: a controller that is not active forwards a unary call to the active one (found through
Raft's leader id and the voters' addresses), marking it so that it is never forwarded twice; when
no leader is known within ``leader_wait_s`` the answer is NOT_CONTROLLER (clients retry).
FetchMetadata is served by whichever controller is asked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from metadata.controller import ControllerResult, QuorumController
from metadata.records import encode_batch
from metadata.state_machine import MetadataStateMachine
from proto import common_pb2, errors
from proto.clock import monotonic_ms
from proto.errors import ErrorCode as Code
from proto.runtime.logfmt import log_event
from raft.config import QuorumConfig
from raft.driver import NotLeaderError, RaftDriver
from raft.messages import NO_NODE

log = logging.getLogger(__name__)

FORWARDED_HEADER = "x-pykraft-forwarded"
LEADER_POLL_S = 0.02
LARGE_DECISION_RECORDS = 1_000  # log how long decisions this large take


class ActiveController:
    """Serialises decisions on the active controller: barrier, generate, commit, replay, answer."""

    def __init__(
        self, driver: RaftDriver, controller: QuorumController, state_machine: MetadataStateMachine
    ) -> None:
        self.driver = driver
        self.controller = controller
        self.state_machine = state_machine
        self._lock = asyncio.Lock()
        self._active_term: int | None = None

    async def _ensure_active(self) -> None:
        if not self.driver.is_leader:
            self._active_term = None
            raise NotLeaderError(self.driver.node_id, self.driver.leader_id)
        term = self.driver.term
        if self._active_term != term:
            await self.driver.propose(b"")  # barrier: everything committed before is now applied
            self.controller.activate(monotonic_ms())
            await self._maybe_write_cluster_id()
            self._active_term = term
            log_event(log, logging.INFO, "controller_activated", term=term)

    async def _maybe_write_cluster_id(self) -> None:
        """The first active controller of a cluster writes its id, once (Kafka's format step)."""
        result = self.controller.maybe_write_cluster_id()
        if not result.response.ok:
            raise errors.error_for(result.response.code, result.response.message)
        if result.records:
            data = encode_batch(result.records)
            self.state_machine.expect(data, result.records)
            await self.driver.propose(data)  # its cluster_id_written event is logged as it commits

    async def write(self, generate: Callable[[int], ControllerResult[Any]]) -> tuple[Any, int | None]:
        """``(response, offset)``: offset of the committed entry, None when there were no records."""
        async with self._lock:
            await self._ensure_active()
            started = time.perf_counter()
            result = generate(monotonic_ms())
            if not result.records:
                return result.response, None
            try:
                data = encode_batch(result.records)
                generated = time.perf_counter()
                self.state_machine.expect(data, result.records)
                offset = await self.driver.propose(data)
            except BaseException:
                self._active_term = None  # outcome unknown: barrier again before the next decision
                # Not ours any more: an entry with the same bytes that a later leader commits must not be
                # logged here as this controller's events too (that leader logs them).
                self.state_machine.forget_expected()
                raise
            if len(result.records) >= LARGE_DECISION_RECORDS:
                log_event(
                    log, logging.INFO, "large_decision", records=len(result.records), bytes=len(data),
                    offset=offset, generate_ms=round((generated - started) * 1000),
                    commit_ms=round((time.perf_counter() - generated) * 1000),
                )  # fmt: skip
            return result.response, offset

    async def read(self) -> None:
        async with self._lock:
            await self._ensure_active()


class Forwarder:
    """Sends a unary call to the active controller."""

    def __init__(self, driver: RaftDriver, voters: QuorumConfig, leader_wait_s: float, call_timeout_s: float):
        self.driver = driver
        self.voters = voters
        self.leader_wait_s = leader_wait_s
        self.call_timeout_s = call_timeout_s
        self._channels: dict[int, grpc.aio.Channel] = {}

    async def leader(self) -> int:
        # The driver offers no leader-change event: poll Raft's leader id for a bounded time.
        for _ in range(max(1, int(self.leader_wait_s / LEADER_POLL_S))):
            if self.driver.leader_id != NO_NODE:
                break
            await asyncio.sleep(LEADER_POLL_S)
        return self.driver.leader_id

    def channel(self, node_id: int) -> grpc.aio.Channel:
        if node_id not in self._channels:
            self._channels[node_id] = grpc.aio.insecure_channel(self.voters.voter(node_id).address)
        return self._channels[node_id]

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()


def error(code: int, message: str) -> common_pb2.Error:
    return common_pb2.Error(code=int(code), message=message)


class ForwardingServicer:
    """Runs a handler locally on the active controller, else forwards; errors become ``error``."""

    stub_class: Any = None

    def __init__(self, active: ActiveController, forwarder: Forwarder) -> None:
        self.active = active
        self.forwarder = forwarder

    async def _serve(
        self,
        name: str,
        request: Any,
        context: grpc.aio.ServicerContext,
        response_class: Any,
        handler: Callable[[], Awaitable[Any]],
    ) -> Any:
        forwarded = any(k == FORWARDED_HEADER for k, _ in (context.invocation_metadata() or ()))
        try:
            if self.active.driver.is_leader or forwarded:
                return await handler()
            return await self._forward(name, request, response_class)
        except NotLeaderError as exc:
            if forwarded:
                return response_class(error=error(Code.NOT_CONTROLLER, exc.message))
            return await self._forward(name, request, response_class)
        except errors.KafkaError as exc:
            return response_class(error=error(exc.code, exc.message))

    async def _forward(self, name: str, request: Any, response_class: Any) -> Any:
        leader = await self.forwarder.leader()
        me = self.active.driver.node_id
        if leader == NO_NODE:
            return response_class(
                error=error(Code.NOT_CONTROLLER, f"controller {me} knows no active controller yet")
            )
        if leader == me:
            return response_class(
                error=error(Code.NOT_CONTROLLER, f"controller {me} is becoming active; retry")
            )
        stub = self.stub_class(self.forwarder.channel(leader))
        try:
            return await getattr(stub, name)(
                request, metadata=((FORWARDED_HEADER, str(me)),), timeout=self.forwarder.call_timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            message = f"forwarding {name} to controller {leader} failed: {exc.code().name} {exc.details()}"
            return response_class(error=error(Code.NOT_CONTROLLER, message))


async def fence_loop(active: ActiveController, interval_s: float) -> None:
    """On the active controller, fence brokers whose sessions expired (and move their leaderships)."""
    controller = active.controller
    while True:
        await asyncio.sleep(interval_s)
        if not active.driver.is_leader:
            continue
        try:
            fenced, _ = await active.write(controller.maybe_fence_stale_brokers)
        except NotLeaderError:
            continue  # leadership moved between the check and the write; the new leader fences
        except errors.KafkaError as exc:
            log_event(log, logging.WARNING, "fence_check_failed", reason=exc)
            continue
        if fenced:
            log_event(log, logging.WARNING, "broker_session_expired", brokers=fenced,
                      session_timeout_ms=controller.config.broker_session_timeout_ms)  # fmt: skip
