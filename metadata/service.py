"""The controller's gRPC services (AdminService, ControllerService) over the Raft driver.

Write path (``ActiveController.write``): one decision at a time, under a lock —
1. make sure this node is the active controller and has applied everything committed before its
   term: on the first write of a term it commits an empty *barrier* entry and waits for it, then
   starts fresh broker sessions (``QuorumController.activate``);
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
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from metadata import convert
from metadata.api import Code
from metadata.controller import ControllerResult, QuorumController
from metadata.records import encode_batch
from metadata.state_machine import MetadataStateMachine
from proto import admin_pb2, admin_pb2_grpc, common_pb2, controller_pb2, controller_pb2_grpc, errors
from raft.config import QuorumConfig
from raft.driver import NotLeaderError, RaftDriver
from raft.messages import NO_NODE

log = logging.getLogger(__name__)

FORWARDED_HEADER = "x-pykraft-forwarded"
FETCH_MAX_ENTRIES = 1_000
FETCH_POLL_S = 1.0
LEADER_POLL_S = 0.02
LARGE_DECISION_RECORDS = 1_000  # log how long decisions this large take


def now_ms() -> int:
    return int(time.monotonic() * 1000)


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
            self.controller.activate(now_ms())
            self._active_term = term
            log.info("node %d is the active controller in term %d", self.driver.node_id, term)

    async def write(self, generate: Callable[[int], ControllerResult[Any]]) -> tuple[Any, int | None]:
        """``(response, offset)``: offset of the committed entry, None when there were no records."""
        async with self._lock:
            await self._ensure_active()
            started = time.perf_counter()
            result = generate(now_ms())
            if not result.records:
                return result.response, None
            try:
                data = encode_batch(result.records)
                generated = time.perf_counter()
                self.state_machine.expect(data, result.records)
                offset = await self.driver.propose(data)
            except BaseException:
                self._active_term = None  # outcome unknown: barrier again before the next decision
                raise
            if len(result.records) >= LARGE_DECISION_RECORDS:
                log.info(
                    "decision of %d records (%d bytes) at offset %d: generated in %.0f ms, committed and "
                    "replayed in %.0f ms",
                    len(result.records), len(data), offset, (generated - started) * 1000,
                    (time.perf_counter() - generated) * 1000,
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


def _error(code: int, message: str) -> common_pb2.Error:
    return common_pb2.Error(code=int(code), message=message)


class _Base:
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
                return response_class(error=_error(Code.NOT_CONTROLLER, exc.message))
            return await self._forward(name, request, response_class)
        except errors.KafkaError as exc:
            return response_class(error=_error(exc.code, exc.message))

    async def _forward(self, name: str, request: Any, response_class: Any) -> Any:
        leader = await self.forwarder.leader()
        me = self.active.driver.node_id
        if leader == NO_NODE:
            return response_class(
                error=_error(Code.NOT_CONTROLLER, f"controller {me} knows no active controller yet")
            )
        if leader == me:
            return response_class(
                error=_error(Code.NOT_CONTROLLER, f"controller {me} is becoming active; retry")
            )
        stub = self.stub_class(self.forwarder.channel(leader))
        try:
            return await getattr(stub, name)(
                request, metadata=((FORWARDED_HEADER, str(me)),), timeout=self.forwarder.call_timeout_s
            )
        except grpc.aio.AioRpcError as exc:
            message = f"forwarding {name} to controller {leader} failed: {exc.code().name} {exc.details()}"
            return response_class(error=_error(Code.NOT_CONTROLLER, message))


class AdminServicer(_Base, admin_pb2_grpc.AdminServiceServicer):
    stub_class = admin_pb2_grpc.AdminServiceStub

    def __init__(self, active: ActiveController, forwarder: Forwarder, voters: QuorumConfig) -> None:
        super().__init__(active, forwarder)
        self.voters = voters

    @property
    def controller(self) -> QuorumController:
        return self.active.controller

    async def CreateTopics(self, request, context):
        async def handler():
            topics = convert.new_topics(request)
            results, _ = await self.active.write(
                lambda _now: self.controller.handle_create_topics(topics, request.validate_only)
            )
            out = admin_pb2.CreateTopicsResponse()
            for r in results:
                out.topics.add(
                    name=r.name,
                    topic_id=r.topic_id,
                    error=convert.error_pb(r.error),
                    num_partitions=r.num_partitions,
                    replication_factor=r.replication_factor,
                    configs=r.configs,
                )
            return out

        return await self._serve("CreateTopics", request, context, admin_pb2.CreateTopicsResponse, handler)

    async def DeleteTopics(self, request, context):
        async def handler():
            results, _ = await self.active.write(
                lambda _now: self.controller.handle_delete_topics(list(request.names))
            )
            out = admin_pb2.DeleteTopicsResponse()
            for r in results:
                out.topics.add(name=r.name, topic_id=r.topic_id, error=convert.error_pb(r.error))
            return out

        return await self._serve("DeleteTopics", request, context, admin_pb2.DeleteTopicsResponse, handler)

    async def CreatePartitions(self, request, context):
        async def handler():
            items = convert.new_partitions(request)
            results, _ = await self.active.write(
                lambda _now: self.controller.handle_create_partitions(items, request.validate_only)
            )
            out = admin_pb2.CreatePartitionsResponse()
            for r in results:
                out.topics.add(name=r.name, error=convert.error_pb(r.error))
            return out

        return await self._serve(
            "CreatePartitions", request, context, admin_pb2.CreatePartitionsResponse, handler
        )

    async def ListTopics(self, request, context):
        async def handler():
            await self.active.read()
            return convert.list_topics(self.controller.image)

        return await self._serve("ListTopics", request, context, admin_pb2.ListTopicsResponse, handler)

    async def DescribeTopics(self, request, context):
        async def handler():
            await self.active.read()
            return convert.describe_topics(self.controller.image, list(request.names))

        return await self._serve(
            "DescribeTopics", request, context, admin_pb2.DescribeTopicsResponse, handler
        )

    async def DescribeCluster(self, request, context):
        async def handler():
            await self.active.read()
            out = convert.describe_cluster(self.controller.image)
            out.controller_id = self.active.driver.node_id
            for v in self.voters.voters:
                out.controllers.add(node_id=v.node_id, host=v.host, port=v.port)
            return out

        return await self._serve(
            "DescribeCluster", request, context, admin_pb2.DescribeClusterResponse, handler
        )

    async def DescribeConfigs(self, request, context):
        async def handler():
            await self.active.read()
            return convert.describe_configs(self.controller.image, request)

        return await self._serve(
            "DescribeConfigs", request, context, admin_pb2.DescribeConfigsResponse, handler
        )

    async def AlterConfigs(self, request, context):
        async def handler():
            resources = convert.alter_configs_resources(request)
            if isinstance(resources, str):
                return admin_pb2.AlterConfigsResponse(error=_error(Code.INVALID_REQUEST, resources))
            results, _ = await self.active.write(
                lambda _now: self.controller.handle_incremental_alter_configs(
                    resources, request.validate_only
                )
            )
            out = admin_pb2.AlterConfigsResponse()
            for r in results:
                out.results.add(
                    resource_type=int(r.resource_type),
                    resource_name=r.resource_name,
                    error=convert.error_pb(r.error),
                )
            return out

        return await self._serve("AlterConfigs", request, context, admin_pb2.AlterConfigsResponse, handler)

    async def ElectLeaders(self, request, context):
        async def handler():
            election = convert.elect_leaders_request(request)
            results, _ = await self.active.write(lambda _now: self.controller.handle_elect_leaders(election))
            out = admin_pb2.ElectLeadersResponse()
            for r in results:
                out.results.add(
                    topic=r.topic, partition=r.partition, error=convert.error_pb(r.error), leader=r.leader
                )
            return out

        return await self._serve("ElectLeaders", request, context, admin_pb2.ElectLeadersResponse, handler)

    async def DescribeQuorum(self, request, context):
        async def handler():
            await self.active.read()
            core = self.active.driver.core
            leo = core.last_index
            out = admin_pb2.DescribeQuorumResponse(
                leader_id=core.id, leader_epoch=core.term, high_watermark=core.commit_index
            )
            for v in self.voters.voters:
                if v.node_id == core.id:
                    out.voters.add(node_id=v.node_id, log_end_offset=leo, lag=0, status="Leader")
                else:
                    progress = core.progress.get(v.node_id)
                    match = progress.match_index if progress is not None else 0
                    out.voters.add(
                        node_id=v.node_id, log_end_offset=match, lag=leo - match, status="Follower"
                    )
            return out

        return await self._serve(
            "DescribeQuorum", request, context, admin_pb2.DescribeQuorumResponse, handler
        )


class ControllerServicer(_Base, controller_pb2_grpc.ControllerServiceServicer):
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
            entries = sm.entries_after(sent, FETCH_MAX_ENTRIES)
            if entries:
                sent = entries[-1][0]
                yield controller_pb2.FetchMetadataResponse(
                    entries=[controller_pb2.MetadataEntry(offset=o, batch=b) for o, b in entries]
                )
            else:
                await sm.wait_for_entries_after(sent, FETCH_POLL_S)


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
            log.warning("fencing check failed: %s", exc)
            continue
        if fenced:
            log.info(
                "fenced brokers %s: no heartbeat within %d ms",
                fenced,
                controller.config.broker_session_timeout_ms,
            )
