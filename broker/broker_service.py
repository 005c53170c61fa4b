"""BrokerService on a data broker: Metadata, Produce, Fetch, ListOffsets (proto/broker.proto); and
AdminService calls forwarded to the controllers.

The handlers only convert between protobuf and the replica manager's dataclasses. Every rule lives
in ``broker.replica_manager`` and the cores it drives:

- Produce validates each partition before anything is appended (topic exists, this broker leads,
  the client's leader epoch, acks, ``|ISR| >= min.insync.replicas`` for acks=all, then the log's
  header/CRC/size/codec checks, all or nothing per partition) and answers acks=all when the HW
  passes the batch (the produce purgatory), REQUEST_TIMED_OUT after ``timeout_ms`` (capped by the
  broker's ``request.timeout.ms`` when the client sends none), NOT_LEADER_OR_FOLLOWER if leadership
  is lost meanwhile.
- Fetch reads ``[log start, HW)`` from the leader, long-polls (woken when the HW moves), and answers
  OFFSET_OUT_OF_RANGE only outside ``[log start, LEO]`` (a position between the HW and the LEO gets
  an empty answer), with ``log_start_offset``/``high_watermark`` in the answer.
- ListOffsets: EARLIEST = log start offset, LATEST = HW, TIMESTAMP from the time index.
- InitProducerId hands out a producer id from a block the controller allocated
  (``broker.producer_ids``); the partition leaders deduplicate by it (``broker.producer_state``).
- Metadata comes from the broker's copy of the metadata image (it may lag the controller slightly).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc

from broker.producer_ids import ProducerIdManager, ProducerIdUnavailableError
from broker.replica_manager import (
    FetchRequestPartition,
    ProduceRequestPartition,
    ReplicaManager,
)
from metadata.records import NO_LEADER
from proto import admin_pb2_grpc, broker_pb2, broker_pb2_grpc, common_pb2
from proto.errors import ErrorCode

UNKNOWN_CONTROLLER = -1


def error_pb(code: int, message: str = "") -> common_pb2.Error:
    return common_pb2.Error(code=int(code), message=message)


class BrokerServicer(broker_pb2_grpc.BrokerServiceServicer):
    def __init__(
        self,
        manager: ReplicaManager,
        clock_ms: Callable[[], int],
        request_timeout_ms: int,
        controller_id: Callable[[], int],
        producer_ids: ProducerIdManager | None = None,
    ) -> None:
        self.manager = manager
        self.clock_ms = clock_ms
        self.request_timeout_ms = request_timeout_ms
        self.controller_id = controller_id
        self.producer_ids = producer_ids

    # ---- InitProducerId -------------------------------------------------------------------------

    def _producer_id_manager(self) -> ProducerIdManager:
        if self.producer_ids is None:
            raise ProducerIdUnavailableError("this broker was started without a producer-id source")
        return self.producer_ids

    async def InitProducerId(self, request, context):
        try:
            producer_id, epoch = await self._producer_id_manager().generate()
        except ProducerIdUnavailableError as exc:
            return broker_pb2.InitProducerIdResponse(
                error=error_pb(exc.code, str(exc)), producer_id=-1, producer_epoch=-1
            )
        return broker_pb2.InitProducerIdResponse(
            error=error_pb(0), producer_id=producer_id, producer_epoch=epoch
        )

    # ---- Metadata ---------------------------------------------------------------------------------

    async def Metadata(self, request, context):
        image = self.manager.image
        response = broker_pb2.MetadataResponse(
            controller_id=self.controller_id(), metadata_offset=image.offset
        )
        for broker in image.usable_brokers():
            if broker.endpoints:
                endpoint = broker.endpoints[0]
                response.brokers.add(
                    node_id=broker.broker_id, host=endpoint.host, port=endpoint.port, rack=broker.rack
                )
        names = sorted(image.topic_ids) if request.all_topics or not request.topics else list(request.topics)
        for name in names:
            topic = image.topic_by_name(name)
            if topic is None:
                response.topics.add(
                    name=name,
                    error=error_pb(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"),
                )
                continue
            out = response.topics.add(name=name, topic_id=topic.topic_id)
            for index, p in sorted(topic.partitions.items()):
                offline = [b for b in p.replicas if b not in image.brokers or image.brokers[b].fenced]
                error = error_pb(0)
                if p.leader == NO_LEADER:
                    error = error_pb(ErrorCode.LEADER_NOT_AVAILABLE, f"{name}-{index} has no leader now")
                out.partitions.add(
                    partition=index, error=error, leader_id=p.leader, leader_epoch=p.leader_epoch,
                    replicas=p.replicas, isr=p.isr, offline_replicas=offline,
                )  # fmt: skip
        return response

    # ---- Produce ----------------------------------------------------------------------------------

    async def Produce(self, request, context):
        items = [
            ProduceRequestPartition(
                (topic.name, p.partition),
                p.records,
                p.current_leader_epoch if p.HasField("current_leader_epoch") else None,
            )
            for topic in request.topics
            for p in topic.partitions
        ]
        timeout_ms = request.timeout_ms if request.timeout_ms > 0 else self.request_timeout_ms
        future: asyncio.Future[dict] = asyncio.get_running_loop().create_future()

        def answer(results: dict) -> None:
            if not future.done():
                future.set_result(results)

        self.manager.produce(request.acks, timeout_ms, items, self.clock_ms(), answer)
        results = await future
        response = broker_pb2.ProduceResponse()
        for topic in request.topics:
            out = response.topics.add(name=topic.name)
            for p in topic.partitions:
                r = results[(topic.name, p.partition)]
                entry = out.partitions.add(
                    partition=p.partition, error=error_pb(r.code, r.message), base_offset=r.base_offset,
                    log_append_time_ms=r.log_append_time_ms, log_start_offset=r.log_start_offset,
                )  # fmt: skip
                entry.current_leader.leader_id = r.leader_id
                entry.current_leader.leader_epoch = r.leader_epoch
        return response

    # ---- Fetch ------------------------------------------------------------------------------------

    async def Fetch(self, request, context):
        items = [
            FetchRequestPartition(
                (topic.name, p.partition),
                p.fetch_offset,
                p.partition_max_bytes if p.partition_max_bytes > 0 else (1 << 20),
                p.current_leader_epoch if p.HasField("current_leader_epoch") else None,
                p.last_fetched_epoch if p.HasField("last_fetched_epoch") else None,
            )
            for topic in request.topics
            for p in topic.partitions
        ]
        future: asyncio.Future[dict] = asyncio.get_running_loop().create_future()

        def answer(results: dict) -> None:
            if not future.done():
                future.set_result(results)

        max_wait_ms = min(max(request.max_wait_ms, 0), self.request_timeout_ms)
        self.manager.fetch_for_consumer(
            items, request.max_bytes if request.max_bytes > 0 else (1 << 30), request.min_bytes,
            max_wait_ms, self.clock_ms(), answer,
        )  # fmt: skip
        results = await future
        response = broker_pb2.FetchResponse()
        for topic in request.topics:
            out = response.topics.add(name=topic.name)
            for p in topic.partitions:
                r = results[(topic.name, p.partition)]
                entry = out.partitions.add(
                    partition=p.partition, error=error_pb(r.code, r.message),
                    high_watermark=r.high_watermark, last_stable_offset=r.high_watermark,
                    log_start_offset=r.log_start_offset, records=r.records,
                )  # fmt: skip
                entry.current_leader.leader_id = r.leader_id
                entry.current_leader.leader_epoch = r.leader_epoch
                if r.diverging_epoch is not None:
                    entry.diverging_epoch.epoch = r.diverging_epoch.leader_epoch
                    entry.diverging_epoch.end_offset = r.diverging_epoch.end_offset
        return response

    # ---- ListOffsets ------------------------------------------------------------------------------

    async def ListOffsets(self, request, context):
        response = broker_pb2.ListOffsetsResponse()
        for topic in request.topics:
            out = response.topics.add(name=topic.name)
            for p in topic.partitions:
                spec = broker_pb2.OffsetSpec.Name(p.spec)
                if spec == "MAX_TIMESTAMP":
                    out.partitions.add(
                        partition=p.partition,
                        error=error_pb(ErrorCode.UNSUPPORTED_VERSION, "MAX_TIMESTAMP is not supported"),
                        offset=-1, timestamp_ms=-1, leader_epoch=-1,
                    )  # fmt: skip
                    continue
                r = self.manager.list_offset(
                    (topic.name, p.partition), spec, p.timestamp_ms,
                    p.current_leader_epoch if p.HasField("current_leader_epoch") else None,
                )  # fmt: skip
                out.partitions.add(
                    partition=p.partition, error=error_pb(r.code, r.message), offset=r.offset,
                    timestamp_ms=r.timestamp_ms, leader_epoch=r.leader_epoch,
                )  # fmt: skip
        return response


class AdminForwarder(admin_pb2_grpc.AdminServiceServicer):
    """AdminService on a broker: every call goes to a controller (which forwards to the active one)."""

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
