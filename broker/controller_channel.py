"""The broker's channel to the active controller (Kafka's NodeToControllerChannelManager, with the
AlterPartitionManager and the forwarding of admin calls on top of it).

- ``ControllerClient``: one gRPC channel per controller address; a call tries the current controller and,
  on a transport error or NOT_CONTROLLER, rotates to the next one, once round the quorum, then raises
  ``ControllerUnavailableError`` naming what each address answered. Callers that must get through
  (registration, heartbeats, AlterPartition) retry after ``RETRY_BACKOFF_S``.
- ``AlterPartitionSender``: sends a ``Partition`` core's ISR proposal as AlterPartition and hands the
  controller's answer back to the replica manager; it retries while the proposal is still the pending one
  (a newer leader epoch or a committed change makes it moot), and a broker epoch the controller no longer
  knows (STALE_BROKER_EPOCH, BROKER_ID_NOT_REGISTERED) ends it at once.
- ``AdminForwarder``: the AdminService on a broker's gRPC listener; every call goes to a controller, which
  forwards it to the active one (``forward_admin``), so an admin client needs one address of any node.
  gRPC on a broker carries only this (and health/reflection): the data plane is the Kafka listener.

Everything here runs on the broker's event loop; nothing is shared with other threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import grpc

from broker.metrics import BrokerMetrics
from broker.replica.partition import AlterPartitionProposal
from broker.replica.replica_manager import ReplicaManager
from proto import admin_pb2, admin_pb2_grpc, common_pb2, controller_pb2, controller_pb2_grpc
from proto.clock import monotonic_ms
from proto.errors import ErrorCode
from proto.kafka_types import TopicPartition
from proto.runtime.logfmt import log_event
from proto.runtime.serving import GRPC_OPTIONS

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1
CONTROLLER_CALL_TIMEOUT_S = 5.0
ADMIN_CALL_TIMEOUT_S = 30.0
# Answers that mean the controller no longer knows this broker incarnation: register again.
REREGISTER_CODES = (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED)


class ControllerUnavailableError(Exception):
    """No controller answered (all unreachable, or none knows an active controller)."""


class ControllerClient:
    """Calls any controller; on a transport error or NOT_CONTROLLER it tries the next one."""

    def __init__(self, addresses: tuple[str, ...]) -> None:
        self.addresses = addresses
        self._current = 0
        self._channels: dict[str, grpc.aio.Channel] = {}

    def channel(self, address: str | None = None) -> grpc.aio.Channel:
        address = address or self.addresses[self._current]
        if address not in self._channels:
            self._channels[address] = grpc.aio.insecure_channel(address, options=GRPC_OPTIONS)
        return self._channels[address]

    def rotate(self) -> None:
        self._current = (self._current + 1) % len(self.addresses)

    async def call(
        self, stub_class: Any, method: str, request: Any, timeout_s: float = CONTROLLER_CALL_TIMEOUT_S
    ):
        """One try per controller; the first answer that is not NOT_CONTROLLER wins."""
        problems = []
        for _ in range(len(self.addresses)):
            address = self.addresses[self._current]
            try:
                response = await getattr(stub_class(self.channel(address)), method)(
                    request, timeout=timeout_s
                )
            except grpc.aio.AioRpcError as exc:
                problems.append(f"{address}: {exc.code().name}")
                self.rotate()
                continue
            error = getattr(response, "error", None)
            if error is not None and error.code == ErrorCode.NOT_CONTROLLER:
                problems.append(f"{address}: NOT_CONTROLLER {error.message}")
                self.rotate()
                continue
            return response
        raise ControllerUnavailableError(f"{method}: no controller answered ({'; '.join(problems)})")

    async def forward_admin(self, method: str, request: Any) -> Any:
        """An AdminService call, answered by the active controller; NOT_CONTROLLER when none answers."""
        try:
            return await self.call(admin_pb2_grpc.AdminServiceStub, method, request, ADMIN_CALL_TIMEOUT_S)
        except ControllerUnavailableError as exc:
            response_class = getattr(admin_pb2, method + "Response")
            return response_class(error=common_pb2.Error(code=ErrorCode.NOT_CONTROLLER, message=str(exc)))

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()


class AlterPartitionSender:
    """Sends ISR proposals to the active controller and reports the answers (see the module docstring)."""

    def __init__(
        self,
        node_id: int,
        controllers: ControllerClient,
        manager: ReplicaManager,
        metrics: BrokerMetrics,
        broker_epoch: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.controllers = controllers
        self.manager = manager
        self.metrics = metrics
        self.broker_epoch = broker_epoch

    def send(self, topic_id: str, proposal: AlterPartitionProposal) -> None:
        """The replica manager's ``send_alter_partition``: a task per proposal, on the running loop."""
        task = asyncio.ensure_future(self._alter_partition(topic_id, proposal))
        task.add_done_callback(log_failure)

    async def _alter_partition(self, topic_id: str, proposal: AlterPartitionProposal) -> None:
        tp = TopicPartition(proposal.topic, proposal.partition)
        item = controller_pb2.AlterPartitionRequest.PartitionState(
            topic_id=topic_id, partition=proposal.partition, leader_epoch=proposal.leader_epoch,
            partition_epoch=proposal.partition_epoch,
            new_isr_with_epochs=[
                controller_pb2.AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=e)
                for b, e in proposal.new_isr_with_epochs
            ],
        )  # fmt: skip
        while self.manager.pending_proposal(tp) == proposal:
            request = controller_pb2.AlterPartitionRequest(
                broker_id=self.node_id, broker_epoch=self.broker_epoch(), partitions=[item]
            )
            try:
                response = await self.controllers.call(
                    controller_pb2_grpc.ControllerServiceStub, "AlterPartition", request
                )
            except ControllerUnavailableError as exc:
                log_event(log, logging.INFO, "alter_partition_retry", topic=tp[0], partition=tp[1],
                          reason=exc)  # fmt: skip
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            if response.error.code != ErrorCode.NONE:
                log_event(log, logging.INFO, "alter_partition_error", topic=tp[0], partition=tp[1],
                          code=ErrorCode(response.error.code).name,
                          message=response.error.message)  # fmt: skip
                if response.error.code in REREGISTER_CODES:
                    self.manager.handle_alter_partition_response(
                        proposal, ErrorCode(response.error.code), now_ms=monotonic_ms()
                    )
                    return
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            self._answered(tp, proposal, response.partitions[0])
            return

    def _answered(
        self, tp: TopicPartition, proposal: AlterPartitionProposal,
        result: controller_pb2.AlterPartitionResponse.PartitionResult,
    ) -> None:  # fmt: skip
        code = ErrorCode(result.error.code)
        if code != ErrorCode.NONE:
            log_event(log, logging.INFO, "alter_partition_refused", topic=tp[0], partition=tp[1],
                      code=code.name, message=result.error.message)  # fmt: skip
        else:
            log_event(log, logging.INFO, "isr_changed", topic=tp[0], partition=tp[1],
                      isr=list(result.isr), leader_epoch=result.leader_epoch,
                      partition_epoch=result.partition_epoch)  # fmt: skip
        self.manager.handle_alter_partition_response(
            proposal, code, result.leader_epoch, result.partition_epoch, tuple(result.isr),
            now_ms=monotonic_ms(),
        )
        self.metrics.observe_isr(self.manager.partitions.values())


class AdminForwarder(admin_pb2_grpc.AdminServiceServicer):
    """Each method of ``admin_pb2_grpc.AdminServiceServicer`` forwarded unchanged; the controller's answer,
    or its gRPC error, is the caller's."""

    def __init__(self, call: Callable[[str, Any], Any]) -> None:
        self._call = call


def _forwarding(method: str):
    async def forward(self: AdminForwarder, request, context: grpc.aio.ServicerContext):
        return await self._call(method, request)

    forward.__name__ = method
    return forward


for _method in admin_pb2_grpc.AdminServiceServicer.__dict__:
    if not _method.startswith("_"):
        setattr(AdminForwarder, _method, _forwarding(_method))


def log_failure(task: asyncio.Future) -> None:
    """A done callback for fire-and-forget tasks: an exception is logged, not lost."""
    if not task.cancelled() and task.exception() is not None:
        name = task.get_name() if isinstance(task, asyncio.Task) else repr(task)
        log_event(log, logging.ERROR, "background_task_failed", exc_info=task.exception(), task=name)
