"""The broker's lifecycle with the controller (Kafka's BrokerLifecycleManager): register, heartbeat,
be unfenced, shut down in a controlled way.

- Register with the active controller (any controller forwards there) with a fresh incarnation id and the
  broker's endpoints (gRPC first: an admin client dials a broker's first endpoint; Kafka Metadata and the
  replica fetchers pick a Kafka endpoint by listener name) and the data directory's cluster id. The
  answer's broker epoch (the offset of the registration record) fences older incarnations. A directory
  of another cluster is refused with INCONSISTENT_CLUSTER_ID: the broker stops (exit 2), as Kafka's does.
  Any other refusal, or no controller, is retried every ``RETRY_BACKOFF_S``.
- Heartbeat every ``broker.heartbeat.interval.ms`` with the applied metadata offset (each call bounded by
  twice the interval, at least 1 s, so a hung controller cannot hold the next one past the session).
  STALE_BROKER_EPOCH / BROKER_ID_NOT_REGISTERED: register again (and restart roles from the new
  registration). Caught up and not fenced, once roles started: the broker is *ready* — health SERVING,
  ``unfenced`` logged.
- Controlled shutdown: heartbeats ask ``want_shut_down`` at once and every ``SHUTDOWN_HEARTBEAT_S``
  until the controller says the broker may stop and it leads nothing (its leaderships moved away while
  it kept following), bounded by ``controlled.shutdown.timeout.ms``.

Runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import TYPE_CHECKING

from broker.config import GRPC_LISTENER, BrokerConfig, KafkaListenerSpec
from broker.controller_channel import (
    REREGISTER_CODES,
    RETRY_BACKOFF_S,
    ControllerClient,
    ControllerUnavailableError,
)
from broker.follower.fetcher_driver import FetcherManager
from broker.replica.replica_manager import ReplicaManager
from proto import controller_pb2, controller_pb2_grpc, metadata_pb2
from proto.errors import ErrorCode
from proto.runtime.logfmt import log_event
from proto.runtime.meta_properties import InconsistentClusterIdError
from proto.runtime.serving import Health

if TYPE_CHECKING:
    from broker.metadata_listener import MetadataListener

log = logging.getLogger(__name__)

EXIT_USAGE = 2
EXIT_FAILED = 1
SHUTDOWN_HEARTBEAT_S = 0.05


class BrokerLifecycleManager:
    """See the module docstring. ``broker_epoch`` is -1 until registered."""

    def __init__(
        self,
        config: BrokerConfig,
        controllers: ControllerClient,
        metadata: MetadataListener,
        manager: ReplicaManager,
        fetchers: FetcherManager,
    ) -> None:
        self.config = config
        self.controllers = controllers
        self.metadata = metadata
        self.manager = manager
        self.fetchers = fetchers
        self.broker_epoch = -1
        self.incarnation_id = uuid.uuid4().hex
        self.shutting_down = False
        self.shutdown_complete = asyncio.Event()
        self.heartbeat_now = asyncio.Event()  # cuts the pause between heartbeats short
        self.ready = asyncio.Event()
        self.health: Health | None = None  # set once the gRPC server serves (BrokerNode.bind)
        self._kafka_endpoints: list[tuple[KafkaListenerSpec, int]] = []

    async def register(self, kafka_endpoints: list[tuple[KafkaListenerSpec, int]]) -> None:
        self._kafka_endpoints = kafka_endpoints  # a re-registration announces the same listeners
        host, port = self.config.endpoint  # the advertised listener (default: the listen address)
        # GRPC first: a gRPC caller (the admin client) dials a broker's first endpoint; Kafka Metadata
        # answers and the replica fetchers pick the Kafka endpoint by listener name.
        endpoints = [metadata_pb2.Endpoint(name=GRPC_LISTENER, host=host, port=port)] + [
            metadata_pb2.Endpoint(name=spec.name, host=spec.advertised_host, port=kafka_port)
            for spec, kafka_port in kafka_endpoints
        ]
        request = controller_pb2.RegisterBrokerRequest(
            broker_id=self.config.node_id,
            incarnation_id=self.incarnation_id,
            endpoints=endpoints,
            rack=self.config.rack,
            cluster_id=self.metadata.cluster_id or "",
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

    async def heartbeat_loop(self) -> None:
        interval_s = self.config.settings.broker_heartbeat_interval_ms / 1000
        # A hung controller must not delay the next heartbeat past the session: try the next one soon.
        heartbeat_timeout_s = max(1.0, 2 * interval_s)
        while True:
            request = controller_pb2.BrokerHeartbeatRequest(
                broker_id=self.config.node_id,
                broker_epoch=self.broker_epoch,
                current_metadata_offset=self.metadata.image.offset,
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
                    await self.heartbeat_now.wait()
            self.heartbeat_now.clear()

    async def _handle_heartbeat(self, response: controller_pb2.BrokerHeartbeatResponse) -> None:
        code = response.error.code
        if code in REREGISTER_CODES:
            log_event(log, logging.WARNING, "heartbeat_refused", code=ErrorCode(code).name,
                      action="registering again")  # fmt: skip
            self.metadata.roles_started = False
            await self.register(self._kafka_endpoints)
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
            and self.metadata.roles_started
            and not self.ready.is_set()
        ):
            self.ready.set()
            assert self.health is not None, "heartbeats start after the gRPC server serves"
            await self.health.set_serving(True)
            log_event(log, logging.INFO, "unfenced", metadata_offset=self.metadata.image.offset)

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move our leaderships away; wait (bounded) until it says we may stop."""
        self.shutting_down = True
        self.heartbeat_now.set()  # ask now, not one heartbeat interval later (as Kafka does)
        assert self.health is not None, "a controlled shutdown follows bind"
        await self.health.set_serving(False)
        timeout_s = self.config.settings.controlled_shutdown_timeout_ms / 1000
        try:
            await asyncio.wait_for(self.shutdown_complete.wait(), timeout_s)
        except TimeoutError:
            log_event(log, logging.WARNING, "controlled_shutdown_timed_out", timeout_s=timeout_s)
