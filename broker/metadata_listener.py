"""The broker's metadata listener and publisher (Kafka's BrokerMetadataListener and
BrokerMetadataPublisher): follow the committed metadata log, replay it into the broker's
``MetadataImage``, and publish each change to the wings.

Following: a ``FetchMetadata`` stream from any controller (a snapshot, then entries, from the image's
offset), as an observer; a stream that ends or fails rotates to the next controller after
``RETRY_BACKOFF_S``. Replay: ``MetadataImage.apply_batch`` per committed entry, in log order (entries at
or below the image's offset are skipped, so a resumed stream is idempotent). A record that does not
replay or decode is fatal: the broker must not serve an image it can no longer update
(``metadata_replay_failed``, exit 1).

Publishing (``publish``): role changes start only once the image includes this broker's own
registration (its offset reaches the broker epoch), so an old incarnation's leaderships in the log's
history never come back to life; until then the replica manager only gets the image for Metadata
answers. From then on every applied batch goes to ``ReplicaManager.apply_image`` (become leader /
follower / stop replica), with ``config_changed`` when a ConfigRecord or snapshot came (or on the first
publication after (re)registering: ``roles_started`` is cleared by the lifecycle manager then).
The first metadata with a cluster id writes it to the data directory's ``meta.properties``.

Runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable

import grpc

from broker.controller_channel import RETRY_BACKOFF_S, ControllerClient
from broker.lifecycle import EXIT_FAILED, EXIT_USAGE
from broker.metrics import BrokerMetrics
from broker.replica.replica_manager import ReplicaManager
from metadata.image import MetadataImage, MetadataReplayError
from metadata.records import ConfigRecord, CorruptMetadataError, decode_batch
from proto import controller_pb2, controller_pb2_grpc
from proto.clock import monotonic_ms
from proto.runtime.logfmt import log_event
from proto.runtime.meta_properties import (
    InconsistentClusterIdError,
    MetaPropertiesError,
    read_cluster_id,
    record_cluster_id,
)

log = logging.getLogger(__name__)


class MetadataListener:
    """See the module docstring. ``image`` is the broker's current metadata image."""

    def __init__(
        self,
        node_id: int,
        data_dir,
        controllers: ControllerClient,
        manager: ReplicaManager,
        metrics: BrokerMetrics,
        broker_epoch: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.controllers = controllers
        self.manager = manager
        self.metrics = metrics
        self.broker_epoch = broker_epoch
        self.image = MetadataImage()
        self.cluster_id = read_cluster_id(data_dir)  # meta.properties; None: a new directory
        self.roles_started = False

    async def follow(self) -> None:
        """Forever: stream the committed metadata log from a controller and apply it."""
        stub_class = controller_pb2_grpc.ControllerServiceStub
        while True:
            request = controller_pb2.FetchMetadataRequest(
                from_offset=self.image.offset, broker_id=self.node_id
            )
            try:
                async for response in stub_class(self.controllers.channel()).FetchMetadata(request):
                    self.apply(response)
            except grpc.aio.AioRpcError as exc:
                log_event(log, logging.INFO, "metadata_stream_ended", code=exc.code().name)
            self.controllers.rotate()
            await asyncio.sleep(RETRY_BACKOFF_S)

    def apply(self, response: controller_pb2.FetchMetadataResponse) -> None:
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
        self.publish(config_changed)

    def _record_cluster_id(self, cluster_id: str) -> None:
        """The first metadata with a cluster id: this data directory now belongs to that cluster."""
        try:
            record_cluster_id(self.data_dir, self.node_id, cluster_id)
        except (InconsistentClusterIdError, MetaPropertiesError, OSError) as exc:
            log_event(log, logging.CRITICAL, "cluster_id_not_recorded", reason=exc, action="stopping")
            print(f"pykraft broker: error: {exc}", file=sys.stderr, flush=True)
            sys.exit(EXIT_USAGE)
        self.cluster_id = cluster_id

    def publish(self, config_changed: bool) -> None:
        broker_epoch = self.broker_epoch()
        if broker_epoch < 0 or self.image.offset < broker_epoch:
            self.manager.image = self.image  # Metadata answers; roles wait for our own registration
            return
        self.manager.apply_image(self.image, monotonic_ms(), config_changed or not self.roles_started)
        self.roles_started = True
        self.metrics.observe_isr(self.manager.partitions.values())
