"""ControllerService on a controller: what brokers call (see proto/controller.proto).

Registration, heartbeats, AlterPartition and producer-id blocks are decisions of the active
controller (``ActiveController.write``; a standby forwards them). FetchMetadata is served by any
controller from its own committed log: a snapshot first when the caller is behind the retained tail,
then committed entries as they are applied, until the caller cancels.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from metadata import convert
from metadata.controller import QuorumController
from metadata.service import ActiveController, Forwarder, ForwardingServicer
from metadata.state_machine import MetadataStateMachine
from proto import controller_pb2, controller_pb2_grpc

FETCH_MAX_ENTRIES = 1_000
# per response; callers must accept proto.runtime.serving.MAX_MESSAGE_BYTES (snapshots)
FETCH_MAX_BYTES = 1 << 20
FETCH_POLL_S = 1.0


class ControllerServicer(ForwardingServicer, controller_pb2_grpc.ControllerServiceServicer):
    stub_class = controller_pb2_grpc.ControllerServiceStub

    def __init__(
        self, active: ActiveController, forwarder: Forwarder, state_machine: MetadataStateMachine
    ) -> None:
        super().__init__(active, forwarder)
        self.state_machine = state_machine

    @property
    def controller(self) -> QuorumController:
        return self.active.controller

    async def RegisterBroker(self, request, context):
        async def handler():
            req = convert.register_broker_request(request)
            response, offset = await self.active.write(
                lambda now: self.controller.handle_register_broker(req, now)
            )
            if not response.error.ok:
                return controller_pb2.RegisterBrokerResponse(error=convert.error_pb(response.error))
            assert offset is not None, "a registration always writes a record"
            return controller_pb2.RegisterBrokerResponse(broker_epoch=offset)

        return await self._serve(
            "RegisterBroker", request, context, controller_pb2.RegisterBrokerResponse, handler
        )

    async def BrokerHeartbeat(self, request, context):
        async def handler():
            req = convert.heartbeat_request(request)
            r, _ = await self.active.write(lambda now: self.controller.handle_broker_heartbeat(req, now))
            return controller_pb2.BrokerHeartbeatResponse(
                error=convert.error_pb(r.error),
                is_caught_up=r.is_caught_up,
                is_fenced=r.is_fenced,
                should_shut_down=r.should_shut_down,
            )

        return await self._serve(
            "BrokerHeartbeat", request, context, controller_pb2.BrokerHeartbeatResponse, handler
        )

    async def AlterPartition(self, request, context):
        async def handler():
            req = convert.alter_partition_request(request)
            r, _ = await self.active.write(lambda _now: self.controller.handle_alter_partition(req))
            out = controller_pb2.AlterPartitionResponse(error=convert.error_pb(r.error))
            for p in r.partitions:
                out.partitions.add(
                    topic_id=p.topic_id,
                    partition=p.partition,
                    error=convert.error_pb(p.error),
                    leader=p.leader,
                    isr=p.isr,
                    leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch,
                )
            return out

        return await self._serve(
            "AlterPartition", request, context, controller_pb2.AlterPartitionResponse, handler
        )

    async def AllocateProducerIds(self, request, context):
        async def handler():
            r, _ = await self.active.write(
                lambda _now: self.controller.handle_allocate_producer_ids(
                    request.broker_id, request.broker_epoch
                )
            )
            return controller_pb2.AllocateProducerIdsResponse(
                error=convert.error_pb(r.error),
                producer_id_start=r.producer_id_start,
                producer_id_len=r.producer_id_len,
            )

        return await self._serve(
            "AllocateProducerIds", request, context, controller_pb2.AllocateProducerIdsResponse, handler
        )

    async def FetchMetadata(self, request, context) -> AsyncIterator[controller_pb2.FetchMetadataResponse]:
        sm = self.state_machine
        sent = request.from_offset
        while True:
            if not sm.covers(sent):
                snapshot = sm.snapshot()
                sent = sm.offset
                yield controller_pb2.FetchMetadataResponse(snapshot=snapshot)
                continue
            entries = sm.entries_after(sent, FETCH_MAX_ENTRIES, FETCH_MAX_BYTES)
            if entries:
                sent = entries[-1][0]
                yield controller_pb2.FetchMetadataResponse(
                    entries=[controller_pb2.MetadataEntry(offset=o, batch=b) for o, b in entries]
                )
            else:
                await sm.wait_for_entries_after(sent, FETCH_POLL_S)
