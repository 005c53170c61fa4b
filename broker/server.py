"""The data broker process: ``pykraft broker --node-id 101 --listen H:P --controllers H:P,... --data-dir D``.

Startup, in order:
1. serve AdminService (forwarded to the controllers, ``broker.admin_forwarder``) and health
   (NOT_SERVING until ready) on the gRPC ``--listen``, and the Kafka protocol — the whole data plane —
   on every Kafka listener (clients, and the other brokers' replica fetchers: replication is a Kafka
   Fetch, ``broker.kafka.handlers.replica_fetch``);
2. register with the active controller (any controller forwards there) with a fresh incarnation id,
   getting a broker epoch (the offset of the registration record). The registration carries the
   cluster id of the data directory's ``meta.properties`` (``proto.runtime.meta_properties``; written from the
   first metadata that has one): a directory of another cluster is refused with
   INCONSISTENT_CLUSTER_ID and the broker exits 2, as Kafka's does;
3. follow the committed metadata log as an observer (``FetchMetadata`` from any controller: a snapshot,
   then entries) and apply it to the broker's ``MetadataImage``. Role changes start only once the
   image includes this broker's own registration, so an old incarnation's leaderships in the log's
   history never come back to life; from then on every applied batch goes to
   ``ReplicaManager.apply_image`` (become leader / follower / stop replica);
4. heartbeat every ``broker.heartbeat.interval.ms`` with the applied metadata offset; the controller
   unfences the broker once it has caught up; health turns SERVING then. A heartbeat answered
   STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED makes the broker register again.

Timers: the ISR check every ``replica.lag.time.max.ms / 2``, HW checkpoints every
``replica.high.watermark.checkpoint.interval.ms`` (written in a worker thread:
``broker.replica.checkpoint_writer``), retention every ``log.retention.check.interval.ms``,
compaction every ``log.cleaner.backoff.ms`` (``broker.replica.log_cleaner``),
flush.ms checks every ``log.flush.scheduler.interval.ms``, and one wake-up at the earliest purgatory
deadline.
ISR proposals go to the controller as AlterPartition, retried while they are still pending.

SIGTERM / SIGINT: controlled shutdown — heartbeats ask ``want_shut_down`` until the controller says
the broker leads nothing (its leaderships moved away while it kept following), then fetchers stop,
logs are checkpointed and closed, and the process exits 0. Restarting on the same data directory
recovers the logs (``storage.log``) and rejoins: the leader's diverging epoch decides any truncation.

The process writes its ready file (``proto.runtime.ready_file``: its listeners' ports and metrics URL) with
state ``listening`` as soon as it serves, and ``ready`` once it is registered; its log carries no
handshake lines. ``--listen HOST:0`` lets the kernel pick the port; the broker then registers the port
it got. A bad flag, or a port another process serves, exits 2 with one line on
stderr naming it (``proto.runtime.listeners``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import sys
import uuid
from collections.abc import Callable
from typing import Any

import grpc

from broker.admin_forwarder import AdminForwarder
from broker.config import GRPC_LISTENER, BrokerConfig, BrokerConfigError, KafkaListenerSpec, config_from
from broker.follower.fetcher import FetcherConfig
from broker.follower.fetcher_driver import FetcherManager
from broker.group.driver import GroupDriver, group_config_from
from broker.group.lag import RemoteHighWatermarks
from broker.group.offsets_topic import OffsetsTopic
from broker.kafka.handlers.context import BrokerServices
from broker.kafka.handlers.processor import RequestProcessor, build_handlers
from broker.kafka.listener import KafkaListener, ListenerSettings
from broker.metrics import BrokerMetrics
from broker.replica.checkpoint_writer import CheckpointWriter
from broker.replica.log_cleaner import LogCleanerDriver
from broker.replica.partition import AlterPartitionProposal
from broker.replica.replica_manager import ReplicaManager
from broker.txn.producer_ids import ProducerIdManager, controller_block_allocator
from metadata.image import MetadataImage, MetadataReplayError
from metadata.records import ConfigRecord, CorruptMetadataError, decode_batch
from proto import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    controller_pb2,
    controller_pb2_grpc,
    metadata_pb2,
)
from proto.clock import monotonic_ms, wall_clock_ms
from proto.errors import ErrorCode
from proto.kafka_types import TopicPartition
from proto.runtime import ready_file
from proto.runtime.listeners import (
    SERVER_OPTIONS,
    ListenerError,
    add_grpc_listener,
    check_bindable,
    listener_error,
)
from proto.runtime.logfmt import configure_logging, log_event
from proto.runtime.meta_properties import (
    InconsistentClusterIdError,
    MetaPropertiesError,
    read_cluster_id,
    record_cluster_id,
)
from proto.runtime.metrics import MetricsEndpoint, serve_metrics
from proto.runtime.serving import GRPC_OPTIONS, add_standard_services, start_shutdown_watchdog
from proto.runtime.settings import check_data_dir

log = logging.getLogger(__name__)

EXIT_USAGE = 2
EXIT_FAILED = 1
SERVICE_NAMES = [
    "pykraft.admin.AdminService",
]
LISTEN_SETTING = "--listen"
EVENT_LOOP_ENV = "PYKRAFT_EVENT_LOOP"
RETRY_BACKOFF_S = 0.1
CONTROLLER_CALL_TIMEOUT_S = 5.0
REREGISTER_CODES = (ErrorCode.STALE_BROKER_EPOCH, ErrorCode.BROKER_ID_NOT_REGISTERED)
SHUTDOWN_HEARTBEAT_S = 0.05
STOP_DEADLINE_S = 15.0  # after the controlled shutdown's own timeout (start_shutdown_watchdog)


class BrokerFailedError(Exception):
    """A background loop of the broker raised: the process stops with EXIT_FAILED."""


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

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()


class BrokerNode:
    """A running broker (see the module docstring)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        settings = config.settings
        self.controllers = ControllerClient(config.controllers)
        self.image = MetadataImage()
        self.cluster_id = read_cluster_id(config.data_dir)  # meta.properties; None: a new directory
        self.broker_epoch = -1
        self.incarnation_id = uuid.uuid4().hex
        self.shutting_down = False
        self.shutdown_complete = asyncio.Event()
        self._heartbeat_now = asyncio.Event()  # cuts the pause between heartbeats short
        self.ready = asyncio.Event()
        self.failed = asyncio.Event()  # a background loop raised: the process exits with EXIT_FAILED
        self.fetchers = FetcherManager(
            config.node_id,
            FetcherConfig(
                max_wait_ms=settings.replica_fetch_max_wait_ms,
                min_bytes=settings.replica_fetch_min_bytes,
                max_bytes=settings.replica_fetch_response_max_bytes,
                partition_max_bytes=settings.replica_fetch_max_bytes,
                fetch_backoff_ms=settings.replica_fetch_backoff_ms,
            ),
            self.kafka_address_of,
            lambda name: self.image.topic_ids.get(name, ""),
            settings.request_timeout_ms,
        )
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.manager = ReplicaManager(
            config.node_id,
            config.data_dir,
            replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
            topic_defaults=dict(settings.topic_defaults),
            fetchers=self.fetchers,
            send_alter_partition=self.send_alter_partition,
            on_deadline=self._wake_at,
            clock_ms=wall_clock_ms,
            producer_id_expiration_ms=settings.producer_id_expiration_ms,
        )
        self.fetchers.manager = self.manager
        self.checkpoints = CheckpointWriter(lambda: self.manager.logs)
        self.metrics = BrokerMetrics(self.manager)
        self.groups = GroupDriver(
            self.manager, group_config_from(settings), monotonic_ms, settings.offsets_commit_timeout_ms
        )
        self.group_lag = RemoteHighWatermarks(self.manager, self.groups.core, self.kafka_address_of)
        self.metrics.register_group_lag(self.groups.core, lambda: self.group_lag.high_watermarks)
        self.metrics_endpoint: MetricsEndpoint | None = None
        self.producer_ids = ProducerIdManager(
            controller_block_allocator(self.controllers.call, config.node_id, lambda: self.broker_epoch)
        )
        # The Kafka protocol (broker.kafka.listener, broker.kafka.handlers): one listener per Kafka listener
        # name.
        self.services = BrokerServices(
            config.node_id, self.manager, monotonic_ms, settings.request_timeout_ms, self.producer_ids,
            groups=self.groups, forward_admin=self.forward_admin, sendfile=settings.sendfile_enable,
            refusal_log_interval_ms=settings.refused_requests_log_interval_ms,
            offsets_topic=OffsetsTopic(
                self.groups, self.forward_admin, settings.offsets_topic_num_partitions,
                settings.offsets_topic_replication_factor, settings.offsets_topic_segment_bytes,
            ),
        )  # fmt: skip
        self.handlers = build_handlers(self.services)
        self.kafka_listeners: list[KafkaListener] = []
        self.metrics.kafka.register_listeners(
            lambda: [(k.name, k.open_connections) for k in list(self.kafka_listeners)]
        )
        self.metrics.kafka.register_sendfile(
            lambda: [(k.name, k.sendfile_bytes, k.copied_region_bytes) for k in list(self.kafka_listeners)]
        )
        self._tasks: list[asyncio.Task] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_ms: int | None = None
        self.server: grpc.aio.Server | None = None
        self._roles_started = False

    # ---- addresses ------------------------------------------------------------------------------

    def kafka_address_of(self, broker_id: int) -> tuple[str, int] | None:
        """A broker's Kafka endpoint for replication: the one named like this broker's first Kafka
        listener (Kafka's inter-broker listener), else its first Kafka endpoint."""
        broker = self.image.brokers.get(broker_id)
        if broker is None:
            return None
        kafka = [e for e in broker.endpoints if e.name != GRPC_LISTENER]
        if not kafka:
            return None
        name = self.config.kafka_listeners[0].name if self.config.kafka_listeners else None
        endpoint = next((e for e in kafka if e.name == name), kafka[0])
        return endpoint.host, endpoint.port

    # ---- lifecycle ------------------------------------------------------------------------------

    async def bind(self) -> None:
        """Serve the gRPC services (NOT_SERVING until ready) on ``--listen`` and the metrics endpoint.

        A port in use (or any unusable address) raises ``ListenerError`` with one line naming the
        setting, and nothing keeps running. With port 0 the kernel picks the port, and the broker
        registers that one (unless an advertised listener says otherwise)."""
        self.metrics_endpoint = serve_metrics(self.metrics.registry, self.config.metrics_port,
                                              self.config.metrics_host)
        self.server = grpc.aio.server(options=SERVER_OPTIONS)
        admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminForwarder(self.forward_admin), self.server)
        self.health = add_standard_services(self.server, SERVICE_NAMES)
        await self.health.set_serving(False)
        try:
            port = add_grpc_listener(self.server, LISTEN_SETTING, self.config.listen)
            await self._bind_kafka_listeners()
        except ListenerError:
            await self.server.stop(None)
            self.server = None
            await self._close_kafka_listeners()
            if self.metrics_endpoint is not None:
                self.metrics_endpoint.close()
                self.metrics_endpoint = None
            raise
        self.config = dataclasses.replace(self.config, port=port)
        await self.server.start()

    async def _bind_kafka_listeners(self) -> None:
        settings = self.config.settings
        limits = ListenerSettings(
            settings.socket_request_max_bytes, settings.max_connections, settings.connections_max_idle_ms,
            settings.sendfile_enable,
        )
        for spec in self.config.kafka_listeners:
            address = f"{spec.host}:{spec.port}"
            setting = f"listeners {spec.name}://"
            check_bindable(setting, address)
            processor = RequestProcessor(self.services, self.handlers, self.metrics.kafka, spec.name)
            listener = KafkaListener(spec.name, spec.host, spec.port, processor, self.metrics.kafka, limits)
            try:
                await listener.start()
            except OSError as exc:
                raise listener_error(setting, address, exc) from None
            self.kafka_listeners.append(listener)

    def kafka_endpoints(self) -> list[tuple[KafkaListenerSpec, int]]:
        """Each Kafka listener with the port it registers (its advertised one, else the bound one)."""
        return [
            (spec, spec.advertised_port or listener.port)
            for spec, listener in zip(self.config.kafka_listeners, self.kafka_listeners, strict=True)
        ]

    async def _close_kafka_listeners(self) -> None:
        for listener in self.kafka_listeners:
            await listener.close()

    async def start(self) -> None:
        """Register, then start the metadata follower, heartbeats and timers (after ``bind``)."""
        await self.register()
        self.group_lag.start()
        settings = self.config.settings
        self._tasks = [
            asyncio.create_task(self._follow_metadata(), name="metadata"),
            asyncio.create_task(self._heartbeat_loop(), name="heartbeat"),
            asyncio.create_task(
                self._every(settings.replica_lag_time_max_ms / 2000, self._shrink_isr), name="isr"
            ),
            asyncio.create_task(
                self.checkpoints.run(settings.high_watermark_checkpoint_interval_ms), name="checkpoint"
            ),
            asyncio.create_task(
                self._every(
                    settings.log_retention_check_interval_ms / 1000, self.manager.delete_old_segments
                ),
                name="retention",
            ),
            asyncio.create_task(
                self._every(
                    settings.log_flush_scheduler_interval_ms / 1000, self.manager.log_manager.maybe_flush
                ),
                name="flush",
            ),
            asyncio.create_task(  # KIP-854: idle producers expire also where nobody produces any more
                self._every(  # Kafka checks every producer.id.expiration.check.interval.ms (10 min)
                    min(settings.producer_id_expiration_ms / 10, 600_000) / 1000,
                    self.manager.log_manager.maybe_expire_producers,
                ),
                name="producer-expiry",
            ),
            asyncio.create_task(  # the refused-request lines' summary counts (broker.kafka.handlers.refusals)
                self._every(self.services.refusals.flush_interval_s, self.services.refusals.flush),
                name="refusal-log",
            ),
        ]
        # compaction passes run in a worker thread (broker.replica.log_cleaner)
        if settings.log_cleaner_enable:
            self.log_cleaner = LogCleanerDriver(lambda: self.manager.logs, settings.log_cleaner_backoff_ms)
            self._tasks.append(asyncio.create_task(self.log_cleaner.run(), name="log-cleaner"))
        for task in self._tasks:
            task.add_done_callback(self._on_task_done)

    def _on_task_done(self, task: asyncio.Task) -> None:
        """These loops never end by themselves: one that raised is a bug, and the broker must not go on
        half-alive (e.g. serving a metadata image it no longer updates). Stop loudly instead."""
        if task.cancelled() or task.exception() is None:
            return
        log_event(log, logging.CRITICAL, "task_failed", exc_info=task.exception(), task=task.get_name(),
                  action="stopping")  # fmt: skip
        self.failed.set()

    async def register(self) -> None:
        host, port = self.config.endpoint  # the advertised listener (default: the listen address)
        # GRPC first: a gRPC caller (the admin client) dials a broker's first endpoint; Kafka Metadata
        # answers and the replica fetchers pick the Kafka endpoint by listener name.
        endpoints = [metadata_pb2.Endpoint(name=GRPC_LISTENER, host=host, port=port)] + [
            metadata_pb2.Endpoint(name=spec.name, host=spec.advertised_host, port=kafka_port)
            for spec, kafka_port in self.kafka_endpoints()
        ]
        request = controller_pb2.RegisterBrokerRequest(
            broker_id=self.config.node_id,
            incarnation_id=self.incarnation_id,
            endpoints=endpoints,
            rack=self.config.rack,
            cluster_id=self.cluster_id or "",
        )
        while True:
            try:
                response = await self.controllers.call(
                    controller_pb2_grpc.ControllerServiceStub, "RegisterBroker", request
                )
            except ControllerUnavailableError as exc:
                log_event(log, logging.INFO, "register_retry", reason=exc)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            if response.error.code == ErrorCode.NONE:
                break
            if response.error.code == ErrorCode.INCONSISTENT_CLUSTER_ID:  # Kafka: the broker stops
                raise InconsistentClusterIdError(f"INCONSISTENT_CLUSTER_ID: {response.error.message}")
            log_event(log, logging.WARNING, "register_refused", code=ErrorCode(response.error.code).name,
                      message=response.error.message)  # fmt: skip
            await asyncio.sleep(RETRY_BACKOFF_S)
        self.broker_epoch = response.broker_epoch
        self.fetchers.set_broker_epoch(self.broker_epoch)
        log_event(log, logging.INFO, "registered", broker_epoch=self.broker_epoch,
                  endpoints=[f"{e.name}://{e.host}:{e.port}" for e in endpoints])  # fmt: skip

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move our leaderships away; wait (bounded) until it says we may stop."""
        self.shutting_down = True
        self._heartbeat_now.set()  # ask now, not one heartbeat interval later (as Kafka does)
        await self.health.set_serving(False)
        timeout_s = self.config.settings.controlled_shutdown_timeout_ms / 1000
        try:
            await asyncio.wait_for(self.shutdown_complete.wait(), timeout_s)
        except TimeoutError:
            log_event(log, logging.WARNING, "controlled_shutdown_timed_out", timeout_s=timeout_s)

    async def stop(self) -> None:
        await self._close_kafka_listeners()  # before the logs close: no handler may touch them after
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._timer is not None:
            self._timer.cancel()
        await self.services.offsets_topic.stop()
        await self.groups.stop()
        await self.group_lag.stop()
        await self.fetchers.stop()
        self.checkpoints.stop()  # its last write done, its thread gone: the logs' close writes the final ones
        self.manager.close()
        if self.metrics_endpoint is not None:
            self.metrics_endpoint.close()
        if self.server is not None:
            await self.server.stop(grace=0.5)
        await self.controllers.close()

    # ---- metadata -------------------------------------------------------------------------------

    async def _follow_metadata(self) -> None:
        stub_class = controller_pb2_grpc.ControllerServiceStub
        while True:
            request = controller_pb2.FetchMetadataRequest(
                from_offset=self.image.offset, broker_id=self.config.node_id
            )
            try:
                async for response in stub_class(self.controllers.channel()).FetchMetadata(request):
                    self._apply_metadata(response)
            except grpc.aio.AioRpcError as exc:
                log_event(log, logging.INFO, "metadata_stream_ended", code=exc.code().name)
            self.controllers.rotate()
            await asyncio.sleep(RETRY_BACKOFF_S)

    def _apply_metadata(self, response: controller_pb2.FetchMetadataResponse) -> None:
        config_changed = False
        try:
            if response.snapshot:
                self.image = MetadataImage.from_snapshot(response.snapshot)
                config_changed = True
            for entry in response.entries:
                if entry.offset <= self.image.offset:
                    continue
                records = decode_batch(entry.batch)
                self.image.apply_batch(records, entry.offset)
                config_changed = config_changed or any(isinstance(r, ConfigRecord) for r in records)
        except (MetadataReplayError, CorruptMetadataError) as exc:
            log_event(log, logging.CRITICAL, "metadata_replay_failed", reason=exc, action="stopping")
            sys.exit(EXIT_FAILED)
        if self.image.cluster_id and self.image.cluster_id != self.cluster_id:
            self._record_cluster_id(self.image.cluster_id)
        self._publish(config_changed)

    def _record_cluster_id(self, cluster_id: str) -> None:
        """The first metadata with a cluster id: this data directory now belongs to that cluster."""
        try:
            record_cluster_id(self.config.data_dir, self.config.node_id, cluster_id)
        except (InconsistentClusterIdError, MetaPropertiesError, OSError) as exc:
            log_event(log, logging.CRITICAL, "cluster_id_not_recorded", reason=exc, action="stopping")
            print(f"pykraft broker: error: {exc}", file=sys.stderr, flush=True)
            sys.exit(EXIT_USAGE)
        self.cluster_id = cluster_id

    def _publish(self, config_changed: bool) -> None:
        if self.broker_epoch < 0 or self.image.offset < self.broker_epoch:
            self.manager.image = self.image  # Metadata answers; roles wait for our own registration
            return
        self.manager.apply_image(self.image, monotonic_ms(), config_changed or not self._roles_started)
        self._roles_started = True
        self.metrics.observe_isr(self.manager.partitions.values())

    # ---- heartbeats -----------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        interval_s = self.config.settings.broker_heartbeat_interval_ms / 1000
        # A hung controller must not delay the next heartbeat past the session: try the next one soon.
        heartbeat_timeout_s = max(1.0, 2 * interval_s)
        while True:
            request = controller_pb2.BrokerHeartbeatRequest(
                broker_id=self.config.node_id,
                broker_epoch=self.broker_epoch,
                current_metadata_offset=self.image.offset,
                want_shut_down=self.shutting_down,
            )
            try:
                response = await self.controllers.call(
                    controller_pb2_grpc.ControllerServiceStub, "BrokerHeartbeat", request, heartbeat_timeout_s
                )
            except ControllerUnavailableError as exc:
                log_event(log, logging.INFO, "heartbeat_failed", reason=exc)
                await asyncio.sleep(RETRY_BACKOFF_S)
                continue
            await self._handle_heartbeat(response)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SHUTDOWN_HEARTBEAT_S if self.shutting_down else interval_s):
                    await self._heartbeat_now.wait()
            self._heartbeat_now.clear()

    async def _handle_heartbeat(self, response: controller_pb2.BrokerHeartbeatResponse) -> None:
        code = response.error.code
        if code in REREGISTER_CODES:
            log_event(log, logging.WARNING, "heartbeat_refused", code=ErrorCode(code).name,
                      action="registering again")  # fmt: skip
            self._roles_started = False
            await self.register()
            return
        if code != ErrorCode.NONE:
            log_event(log, logging.INFO, "heartbeat_error", code=ErrorCode(code).name,
                      message=response.error.message)  # fmt: skip
            return
        if self.shutting_down:
            if response.should_shut_down and not self.manager.led_partitions():
                self.shutdown_complete.set()
            return
        if (
            response.is_caught_up
            and not response.is_fenced
            and self._roles_started
            and not self.ready.is_set()
        ):
            self.ready.set()
            await self.health.set_serving(True)
            log_event(log, logging.INFO, "unfenced", metadata_offset=self.image.offset)

    # ---- ISR changes ----------------------------------------------------------------------------

    def _shrink_isr(self) -> None:
        self.manager.maybe_shrink_isr(monotonic_ms())

    def send_alter_partition(self, topic_id: str, proposal: AlterPartitionProposal) -> None:
        task = asyncio.ensure_future(self._alter_partition(topic_id, proposal))
        task.add_done_callback(_log_failure)

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
                broker_id=self.config.node_id, broker_epoch=self.broker_epoch, partitions=[item]
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
            result = response.partitions[0]
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
            return

    # ---- admin forwarding -------------------------------------------------------------------------

    async def forward_admin(self, method: str, request: Any) -> Any:
        try:
            return await self.controllers.call(
                admin_pb2_grpc.AdminServiceStub, method, request, timeout_s=30.0
            )
        except ControllerUnavailableError as exc:
            response_class = getattr(admin_pb2, method + "Response")
            return response_class(error=common_pb2.Error(code=ErrorCode.NOT_CONTROLLER, message=str(exc)))

    # ---- timers -----------------------------------------------------------------------------------

    def _wake_at(self, deadline_ms: int) -> None:
        """Schedule one wake-up at the earliest purgatory deadline (no polling loop)."""
        if self._timer_ms is not None and self._timer_ms <= deadline_ms:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        delay_s = max(0.0, (deadline_ms - monotonic_ms()) / 1000)
        self._timer = loop.call_later(delay_s, self._on_timer)
        self._timer_ms = deadline_ms

    def _on_timer(self) -> None:
        self._timer, self._timer_ms = None, None
        self.manager.expire(monotonic_ms())
        following = self.manager.next_deadline_ms()
        if following is not None:
            self._wake_at(following)

    @staticmethod
    async def _every(interval_s: float, action: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                action()
            except Exception as exc:
                log_event(log, logging.ERROR, "periodic_task_failed", exc_info=exc,
                          task=getattr(action, "__name__", repr(action)))  # fmt: skip


def _log_failure(task: asyncio.Future) -> None:
    if not task.cancelled() and task.exception() is not None:
        name = task.get_name() if isinstance(task, asyncio.Task) else repr(task)
        log_event(log, logging.ERROR, "background_task_failed", exc_info=task.exception(), task=name)


async def serve(config: BrokerConfig) -> None:
    node = BrokerNode(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await node.bind()
    # What a launcher waits for when it asked for port 0 (proto.runtime.ready_file); before registration,
    # which needs the controllers.
    kafka_listeners = {}
    for spec, kafka_port in node.kafka_endpoints():
        kafka_listeners[spec.name] = f"{spec.advertised_host}:{kafka_port}"
        log_event(log, logging.INFO, "kafka_listener", listener=spec.name, advertised_port=kafka_port,
                  bound=f"{spec.host}:{spec.port}", advertised_host=spec.advertised_host)  # fmt: skip
    if node.metrics_endpoint is not None:
        log_event(log, logging.INFO, "metrics_endpoint", url=node.metrics_endpoint.url)
    ready = ready_file.ReadyFile(
        config.node_id, "broker", os.getpid(), ready_file.LISTENING, f"{node.config.host}:{node.config.port}",
        kafka_listeners, node.metrics_endpoint.url if node.metrics_endpoint is not None else None,
    )  # fmt: skip
    ready_file.write(config.data_dir, ready)
    starting = asyncio.create_task(node.start(), name="start")
    stopping = asyncio.create_task(stop.wait(), name="stop-signal")
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():  # SIGTERM before registration finished (e.g. no controller reachable)
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        await node.stop()
        return
    try:
        starting.result()
    except InconsistentClusterIdError:
        await node.stop()
        raise
    ready_file.write(config.data_dir, dataclasses.replace(ready, state=ready_file.READY))
    failing = asyncio.create_task(node.failed.wait(), name="failed")
    await asyncio.wait({stopping, failing}, return_when=asyncio.FIRST_COMPLETED)
    if node.failed.is_set():
        stopping.cancel()
        await node.stop()
        raise BrokerFailedError("a broker task failed (see the log above)")
    failing.cancel()
    log_event(log, logging.INFO, "controlled_shutdown")
    # Every step below is bounded; a stop past this deadline is a bug: exit naming the step, not hang.
    step = ["controlled shutdown"]
    deadline_s = config.settings.controlled_shutdown_timeout_ms / 1000 + STOP_DEADLINE_S
    start_shutdown_watchdog(deadline_s, lambda: step[0])
    await node.controlled_shutdown()
    step[0] = "stop"
    await node.stop()


def event_loop_runner() -> Callable[[Any], Any]:
    """``uvloop.run`` when uvloop is installed (the Kafka listener's per-request overhead is lower on
    it), unless ``PYKRAFT_EVENT_LOOP=asyncio``; else ``asyncio.run``."""
    if os.environ.get(EVENT_LOOP_ENV, "") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run
    return asyncio.run


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from(args)  # node.id may come from the properties file or the environment
        check_data_dir(config.data_dir)
        configure_logging(args.log_level, config.node_id, "broker")
    except (BrokerConfigError, ValueError) as exc:
        print(f"pykraft broker: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        event_loop_runner()(serve(config))
    except (OSError, InconsistentClusterIdError, MetaPropertiesError) as exc:
        print(f"pykraft broker: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokerFailedError as exc:
        print(f"pykraft broker: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return 0
