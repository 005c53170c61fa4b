"""The data broker process: ``pykraft broker --node-id 101 --listen H:P --controllers H:P,... --data-dir D``.

This module only wires the broker's wings together (Kafka's BrokerServer) and starts and stops them in
order; what each part does is in its own module (docs/architecture.md, "Layout"):
``broker.lifecycle`` (register, heartbeat, controlled shutdown), ``broker.controller_channel`` (calls to
the active controller: AlterPartition, forwarded admin calls), ``broker.metadata_listener`` (follow and
replay the metadata log, publish it to the replica manager), the wings ``broker.replica``,
``broker.follower``, ``broker.group``, ``broker.txn`` and the Kafka front ``broker.kafka``.

Startup, in order:
1. serve AdminService (forwarded to the controllers, ``broker.controller_channel.AdminForwarder``) and
   health (NOT_SERVING until ready) on the gRPC ``--listen``, and the Kafka protocol — the whole data
   plane — on every Kafka listener (clients, and the other brokers' replica fetchers: replication is a
   Kafka Fetch, ``broker.kafka.handlers.replica_fetch``);
2. register with the active controller (``broker.lifecycle``), getting a broker epoch; a data directory
   of another cluster (``proto.runtime.meta_properties``) is refused and the broker exits 2;
3. follow the committed metadata log as an observer (``broker.metadata_listener``); role changes start
   once the image includes this broker's own registration;
4. heartbeat every ``broker.heartbeat.interval.ms``; the controller unfences the broker once it has
   caught up; health turns SERVING then.

Timers: the ISR check every ``replica.lag.time.max.ms / 2``, HW checkpoints every
``replica.high.watermark.checkpoint.interval.ms`` (written in a worker thread:
``broker.replica.checkpoint_writer``), retention every ``log.retention.check.interval.ms``,
compaction every ``log.cleaner.backoff.ms`` (``broker.replica.log_cleaner``),
flush.ms checks every ``log.flush.scheduler.interval.ms``, and one wake-up at the earliest purgatory
deadline. ISR proposals go to the controller as AlterPartition (``broker.controller_channel``).

SIGTERM / SIGINT: controlled shutdown (``broker.lifecycle``), then — in this order — the Kafka
listeners close, the background loops stop, the coordinators and fetchers stop, logs are checkpointed
and closed, and the process exits 0. Restarting on the same data directory recovers the logs
(``storage.log``) and rejoins: the leader's diverging epoch decides any truncation.

The process writes its ready file (``proto.runtime.ready_file``: its listeners' ports and metrics URL)
with state ``listening`` as soon as it serves, and ``ready`` once it is registered; its log carries no
handshake lines. ``--listen HOST:0`` lets the kernel pick the port; the broker then registers the port
it got. A bad flag, or a port another process serves, exits 2 with one line on stderr naming it
(``proto.runtime.listeners``).
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
from collections.abc import Callable
from typing import Any

import grpc

from broker.config import GRPC_LISTENER, BrokerConfig, BrokerConfigError, KafkaListenerSpec, config_from
from broker.controller_channel import AdminForwarder, AlterPartitionSender, ControllerClient
from broker.follower.fetcher import FetcherConfig
from broker.follower.fetcher_driver import FetcherManager
from broker.group.driver import GroupDriver, group_config_from
from broker.group.lag import RemoteHighWatermarks
from broker.group.offsets_topic import OffsetsTopic
from broker.kafka.handlers.context import BrokerServices
from broker.kafka.handlers.processor import RequestProcessor, build_handlers
from broker.kafka.listener import KafkaListener, ListenerSettings
from broker.lifecycle import EXIT_FAILED, EXIT_USAGE, BrokerLifecycleManager
from broker.metadata_listener import MetadataListener
from broker.metrics import BrokerMetrics
from broker.replica.checkpoint_writer import CheckpointWriter
from broker.replica.log_cleaner import LogCleanerDriver
from broker.replica.partition import AlterPartitionProposal
from broker.replica.replica_manager import ReplicaManager
from broker.txn.producer_ids import ProducerIdManager, controller_block_allocator
from proto import admin_pb2_grpc
from proto.clock import monotonic_ms, wall_clock_ms
from proto.runtime import ready_file
from proto.runtime.listeners import (
    SERVER_OPTIONS,
    ListenerError,
    add_grpc_listener,
    check_bindable,
    listener_error,
)
from proto.runtime.logfmt import configure_logging, log_event
from proto.runtime.meta_properties import InconsistentClusterIdError, MetaPropertiesError
from proto.runtime.metrics import MetricsEndpoint, serve_metrics
from proto.runtime.serving import add_standard_services, start_shutdown_watchdog
from proto.runtime.settings import check_data_dir

log = logging.getLogger(__name__)

SERVICE_NAMES = [
    "pykraft.admin.AdminService",
]
LISTEN_SETTING = "--listen"
EVENT_LOOP_ENV = "PYKRAFT_EVENT_LOOP"
STOP_DEADLINE_S = 15.0  # after the controlled shutdown's own timeout (start_shutdown_watchdog)


class BrokerFailedError(Exception):
    """A background loop of the broker raised: the process stops with EXIT_FAILED."""


class BrokerNode:
    """A running broker (see the module docstring)."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        settings = config.settings
        self.controllers = ControllerClient(config.controllers)
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
            lambda name: self.metadata.image.topic_ids.get(name, ""),
            settings.request_timeout_ms,
        )
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.manager = ReplicaManager(
            config.node_id,
            config.data_dir,
            replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
            topic_defaults=dict(settings.topic_defaults),
            fetchers=self.fetchers,
            send_alter_partition=self._send_alter_partition,
            on_deadline=self._wake_at,
            clock_ms=wall_clock_ms,
            producer_id_expiration_ms=settings.producer_id_expiration_ms,
        )
        self.fetchers.manager = self.manager
        self.checkpoints = CheckpointWriter(lambda: self.manager.log_manager.logs)
        self.metrics = BrokerMetrics(self.manager)
        self.metadata = MetadataListener(
            config.node_id, config.data_dir, self.controllers, self.manager, self.metrics,
            broker_epoch=lambda: self.lifecycle.broker_epoch,
        )  # fmt: skip
        self.lifecycle = BrokerLifecycleManager(
            config, self.controllers, self.metadata, self.manager, self.fetchers
        )
        self.alter_partitions = AlterPartitionSender(
            config.node_id, self.controllers, self.manager, self.metrics, lambda: self.lifecycle.broker_epoch
        )
        self.groups = GroupDriver(
            self.manager, group_config_from(settings), monotonic_ms, settings.offsets_commit_timeout_ms
        )
        self.group_lag = RemoteHighWatermarks(self.manager, self.groups.core, self.kafka_address_of)
        self.metrics.register_group_lag(self.groups.core, lambda: self.group_lag.high_watermarks)
        self.metrics_endpoint: MetricsEndpoint | None = None
        self.producer_ids = ProducerIdManager(
            controller_block_allocator(
                self.controllers.call, config.node_id, lambda: self.lifecycle.broker_epoch
            )
        )
        # The Kafka protocol (broker.kafka.listener, broker.kafka.handlers): one listener per Kafka listener
        # name.
        self.services = BrokerServices(
            config.node_id, self.manager, monotonic_ms, settings.request_timeout_ms, self.producer_ids,
            groups=self.groups, forward_admin=self.controllers.forward_admin,
            sendfile=settings.sendfile_enable,
            refusal_log_interval_ms=settings.refused_requests_log_interval_ms,
            offsets_topic=OffsetsTopic(
                self.groups, self.controllers.forward_admin, settings.offsets_topic_num_partitions,
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

    # ---- addresses ------------------------------------------------------------------------------

    def kafka_address_of(self, broker_id: int) -> tuple[str, int] | None:
        """A broker's Kafka endpoint for replication: the one named like this broker's first Kafka
        listener (Kafka's inter-broker listener), else its first Kafka endpoint."""
        broker = self.metadata.image.brokers.get(broker_id)
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
        forwarder = AdminForwarder(self.controllers.forward_admin)
        admin_pb2_grpc.add_AdminServiceServicer_to_server(forwarder, self.server)
        self.health = add_standard_services(self.server, SERVICE_NAMES)
        self.lifecycle.health = self.health
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
        await self.lifecycle.register(self.kafka_endpoints())
        self.group_lag.start()
        settings = self.config.settings
        self._tasks = [
            asyncio.create_task(self.metadata.follow(), name="metadata"),
            asyncio.create_task(self.lifecycle.heartbeat_loop(), name="heartbeat"),
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
            self.log_cleaner = LogCleanerDriver(
                lambda: self.manager.log_manager.logs, settings.log_cleaner_backoff_ms
            )
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

    # ---- ISR changes ----------------------------------------------------------------------------

    def _send_alter_partition(self, topic_id: str, proposal: AlterPartitionProposal) -> None:
        # the sender is built after the replica manager, which takes this callback
        self.alter_partitions.send(topic_id, proposal)

    def _shrink_isr(self) -> None:
        self.manager.maybe_shrink_isr(monotonic_ms())

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
    await node.lifecycle.controlled_shutdown()
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
