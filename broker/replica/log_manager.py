"""The log manager: the partition logs of one broker under its data directory (Kafka's ``LogManager``).

Concept. Every hosted partition has one ``storage.log.Log`` in ``<data_dir>/<topic>-<partition>``
(the Log owns its idempotent-producer state, ``Log.producer_state``). The log manager owns their
lifecycle and everything that concerns all logs alike; the replica manager
(``broker.replica.replica_manager``) decides *when* a log is opened or removed (metadata: a replica
assigned here, moved away, a topic deleted or re-created) and never touches a directory itself.

- Lifecycle: ``get_or_create_log(tp)`` opens (recovering after an unclean stop) or creates the
  log; ``remove_log(tp, delete)`` closes it and, for a replica gone from this broker, deletes its
  directory (Kafka's ``StopReplica(delete=true)``); ``close()`` closes all.
- Per-topic configs: a topic's value is its override in the metadata image, else the cluster
  default (a dynamic broker config), else the broker's static default (``topic_defaults``);
  ``log_config(topic)`` builds the ``LogConfig`` from them, ``min_insync_replicas(topic)`` the one
  non-log setting the partition needs.
- Periodic duties, each called by the broker's timers: ``write_checkpoints`` (HW, log start offset,
  recovery point, on the caller's thread: the simulation's timer; the broker writes them in a
  worker thread instead, ``broker.replica.checkpoint_writer``), ``maybe_flush`` (flush.ms),
  ``delete_old_segments`` (retention) and ``maybe_expire_producers`` (KIP-854, at most ten times per
  expiration period).

Time comes from the injected ``clock_ms`` (wall-clock milliseconds: segment.ms, retention.ms,
flush.ms and producer expiry are wall-clock rules, persisted in files); the simulation passes its
virtual clock so that a seed replays exactly.

Invariant: every log's directory is ``data_dir / f"{topic}-{partition}"``.
Thread-safety: none; the broker's event loop owns it (the log cleaner's worker thread only cleans
segment copies, see ``broker.replica.log_cleaner``; the checkpoint writer's only writes snapshots taken on the
loop, see ``storage.log_checkpoints``). ``remove_log`` closes a log before renaming its directory:
the close waits for a checkpoint write in flight and stops any later one, so none lands in a
re-created topic's directory of the same name.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

from metadata.image import MetadataImage
from proto import errors
from proto.kafka_types import TopicPartition
from proto.runtime.logfmt import log_event
from storage.config import LogConfig
from storage.log import Log
from storage.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS

log = logging.getLogger(__name__)

UNLIMITED_FROM = 2**62  # Kafka's Long.MAX_VALUE defaults of flush.* mean "never" (None in LogConfig)
LOG_CONFIG_KEYS = tuple(f.replace("_", ".") for f in LogConfig.__dataclass_fields__)
MIN_INSYNC_REPLICAS = "min.insync.replicas"


class LogManager:
    """The logs of the partitions hosted under ``data_dir`` (see the module docstring)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        topic_defaults: dict[str, str],
        clock_ms: Callable[[], int],
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.topic_defaults = dict(topic_defaults)
        self.clock_ms = clock_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.image = MetadataImage()  # the topic overrides and cluster defaults of the configs
        self.logs: dict[TopicPartition, Log] = {}
        self._next_producer_expiry_ms = 0
        self._deletions = 0  # renamed-for-deletion directories so far (their names must not clash)

    # ---- lifecycle ---------------------------------------------------------------------------

    def get_or_create_log(self, tp: TopicPartition) -> Log:
        """The log of ``tp``, opened (recovered) or created on first use."""
        plog = self.logs.get(tp)
        if plog is None:
            plog = Log(
                self.data_dir / f"{tp[0]}-{tp[1]}", self.log_config(tp[0]), self.clock_ms,
                self.producer_id_expiration_ms,
            )  # fmt: skip
            self.logs[tp] = plog
        return plog

    def remove_log(self, tp: TopicPartition, delete: bool) -> None:
        """Close the log of ``tp``; ``delete``: remove its directory too (the replica left this broker)."""
        plog = self.logs.pop(tp, None)
        if plog is None:
            return
        plog.close()
        if delete:
            self._delete_directory(plog.directory)

    def _delete_directory(self, directory: Path) -> None:
        """Rename first (Kafka's ``<dir>.<id>-delete``), then remove: a topic re-created under the same
        name gets a fresh directory even when the removal fails, never the old records."""
        self._deletions += 1
        doomed = directory.with_name(f"{directory.name}.{self._deletions}-delete")
        while doomed.exists():
            self._deletions += 1
            doomed = directory.with_name(f"{directory.name}.{self._deletions}-delete")
        try:
            directory.rename(doomed)
            shutil.rmtree(doomed)
        except FileNotFoundError:
            return
        except OSError as exc:
            log_event(log, logging.ERROR, "log_delete_failed", exc_info=exc, directory=str(directory),
                      renamed=str(doomed))  # fmt: skip

    def close(self) -> None:
        for plog in self.logs.values():
            plog.close()
        self.logs.clear()

    # ---- per-topic configs ----------------------------------------------------------------------

    def update_image(self, image: MetadataImage) -> None:
        self.image = image

    def topic_config(self, topic: str, name: str) -> str | None:
        """The topic's override, else the cluster default, else the broker's static default."""
        overrides = self.image.topic_overrides(topic)
        if name in overrides:
            return overrides[name]
        return self.image.cluster_defaults().get(name, self.topic_defaults.get(name))

    def min_insync_replicas(self, topic: str) -> int:
        value = self.topic_config(topic, MIN_INSYNC_REPLICAS)
        try:
            return max(1, int(value)) if value is not None else 1
        except ValueError:
            log_event(log, logging.WARNING, "bad_topic_config", topic=topic, config="min.insync.replicas",
                      value=value, reason="not an integer; using 1")  # fmt: skip
            return 1

    def log_config(self, topic: str) -> LogConfig:
        properties: dict[str, object] = {}
        for key in LOG_CONFIG_KEYS:
            value = self.topic_config(topic, key)
            if value is None:
                continue
            if key.startswith("flush.") and value.strip().isdigit() and int(value) >= UNLIMITED_FROM:
                continue
            properties[key] = value
        try:
            return LogConfig.from_properties(properties)
        except errors.KafkaError as exc:
            log_event(log, logging.WARNING, "bad_topic_config", topic=topic,
                      reason=f"{exc}; using the defaults")  # fmt: skip
            return LogConfig()

    # ---- periodic duties ------------------------------------------------------------------------

    def write_checkpoints(self) -> None:
        """HW, log start offset and recovery point of every log (the checkpoint timer)."""
        for plog in self.logs.values():
            plog.write_checkpoints()

    def maybe_flush(self) -> None:
        """fsync the logs whose flush.ms elapsed (durability otherwise comes from replication)."""
        for plog in self.logs.values():
            plog.maybe_flush()

    def delete_old_segments(self) -> dict[TopicPartition, int]:
        """Retention (retention.ms / retention.bytes, whole segments below the HW): the number of
        segments deleted per log that lost some (its log start offset moved)."""
        deleted: dict[TopicPartition, int] = {}
        for tp, plog in self.logs.items():
            count = plog.delete_old_segments()
            if count:
                deleted[tp] = count
                log_event(log, logging.INFO, "retention_deleted", topic=tp[0], partition=tp[1],
                          segments=count, log_start_offset=plog.log_start_offset)  # fmt: skip
        return deleted

    def maybe_expire_producers(self) -> None:
        """Drop idle producers (KIP-854) at most ten times per expiration period."""
        now_ms = self.clock_ms()
        if now_ms < self._next_producer_expiry_ms:
            return
        self._next_producer_expiry_ms = now_ms + max(1, self.producer_id_expiration_ms // 10)
        for tp, plog in self.logs.items():
            expired = plog.producer_state.remove_expired(now_ms)
            if expired:
                log_event(log, logging.INFO, "producers_expired", topic=tp[0], partition=tp[1],
                          producer_ids=expired)  # fmt: skip
