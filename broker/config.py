"""Broker settings, with Kafka's names, and the ``pykraft broker`` command-line flags.

    pykraft broker --node-id 101 --listen 127.0.0.1:9092 --controllers 127.0.0.1:9093,... \\
        --data-dir DIR [--rack R] [--advertised-listener HOST:PORT] [--override KEY=VALUE] ...

The broker listens on ``--listen`` and registers ``advertised.listeners`` (``--advertised-listener``,
default: the listen address) with the controller: that endpoint is what Metadata returns to clients and
what other brokers' replica fetchers dial. A listen address of 0.0.0.0 must be paired with one.

``--override KEY=VALUE`` takes Kafka's broker config names (``BROKER_OVERRIDES``) plus the broker
defaults of topic configs (``min.insync.replicas``, ``max.message.bytes``, ...: used when the topic has
no override). The local launcher passes the same overrides to every process, so keys that belong to
the controllers (``metadata.server.OVERRIDES``, listed in ``CONTROLLER_KEYS``) are accepted and ignored;
any other key is refused with a message naming it (``BrokerConfigError``). The same settings come
from ``--config-file`` and ``PYKRAFT_<NAME>`` environment variables (``proto.settings``: flags >
environment > file > defaults). ``--metrics-port`` serves Prometheus metrics (``proto.metrics``).

This module is light (argparse and dataclasses only) so that ``pykraft --help`` stays fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from proto.settings import (
    ADVERTISED_LISTENERS,
    IDENTITY_FLAGS,
    NON_ROUTABLE_HOSTS,
    SettingsError,
    collect_overrides,
    fill_identity,
    listen_address,
    one_dir,
    parse_listener,
    require,
)

# Kafka config name -> (BrokerSettings field, minimum)
BROKER_OVERRIDES: dict[str, tuple[str, int]] = {
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", 1),
    "broker.heartbeat.interval.ms": ("broker_heartbeat_interval_ms", 1),
    "replica.fetch.max.wait.ms": ("replica_fetch_max_wait_ms", 0),
    "replica.fetch.min.bytes": ("replica_fetch_min_bytes", 1),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", 1),
    "replica.fetch.response.max.bytes": ("replica_fetch_response_max_bytes", 1),
    "replica.fetch.backoff.ms": ("replica_fetch_backoff_ms", 0),
    "request.timeout.ms": ("request_timeout_ms", 1),
    "replica.high.watermark.checkpoint.interval.ms": ("high_watermark_checkpoint_interval_ms", 1),
    "controlled.shutdown.timeout.ms": ("controlled_shutdown_timeout_ms", 1),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", 1),
    "log.flush.scheduler.interval.ms": ("log_flush_scheduler_interval_ms", 1),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", 1),  # the compaction timer (storage.cleaner)
    # Consumer groups (broker.group_service): Kafka's names; -1 replication factor = min(3, live brokers).
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", 1),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", 1),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", 0),
    "group.max.size": ("group_max_size", 1),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", 1),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", -1),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", 14),
    "offsets.commit.timeout.ms": ("offsets_commit_timeout_ms", 1),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", 0),
    # KIP-854: idle producers' dedup state is dropped after this long (broker.producer_state).
    "producer.id.expiration.ms": ("producer_id_expiration_ms", 1),
}
# Boolean broker settings: Kafka config name -> BrokerSettings field.
BROKER_FLAGS: dict[str, str] = {"log.cleaner.enable": "log_cleaner_enable"}
# Broker-wide defaults of topic configs (a topic's own setting wins).
TOPIC_DEFAULT_KEYS = frozenset(
    {
        "min.insync.replicas",
        "max.message.bytes",
        "segment.bytes",
        "segment.ms",
        "retention.ms",
        "retention.bytes",
        "flush.messages",
        "flush.ms",
        "message.timestamp.type",
        "index.interval.bytes",
        "cleanup.policy",
        "delete.retention.ms",
        "min.cleanable.dirty.ratio",
        "min.compaction.lag.ms",
    }
)
# Settings of the controller processes (metadata.server.OVERRIDES), passed to every node by the
# launcher: ignored here. Kept as names so that this module needs no import of the controller.
CONTROLLER_KEYS = frozenset(
    {
        "broker.session.timeout.ms",
        "num.partitions",
        "default.replication.factor",
        "controller.quorum.election.timeout.ms",
        "controller.quorum.heartbeat.interval.ms",
        "metadata.snapshot.every.entries",
    }
)


IDENTITY_CONVERTERS = {
    "node_id": int, "listen": listen_address, "controllers": str, "voters": str, "data_dir": one_dir,
    "rack": str,
}  # fmt: skip
REQUIRED_FLAGS = ("node_id", "listen", "controllers", "data_dir")
METRICS_OFF = -1  # proto.metrics.METRICS_OFF (not imported: prometheus-client is slow to import)


class BrokerConfigError(ValueError):
    """A bad ``--override`` or flag; the message names it."""


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    replica_lag_time_max_ms: int = 30_000
    broker_heartbeat_interval_ms: int = 2_000
    replica_fetch_max_wait_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_backoff_ms: int = 100
    request_timeout_ms: int = 30_000
    high_watermark_checkpoint_interval_ms: int = 5_000
    controlled_shutdown_timeout_ms: int = 30_000
    log_retention_check_interval_ms: int = 300_000
    log_flush_scheduler_interval_ms: int = 1_000
    log_cleaner_backoff_ms: int = 15_000
    log_cleaner_enable: bool = True
    producer_id_expiration_ms: int = 86_400_000  # Kafka's default: 1 day
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3_000
    group_max_size: int = 2**31 - 1
    offsets_topic_num_partitions: int = 10  # Kafka: 50; fewer suit small clusters
    offsets_topic_replication_factor: int = -1  # -1: min(3, live brokers)
    # Kafka's default: small segments so that the cleaner can compact the offsets topic (it never
    # touches the active segment).
    offsets_topic_segment_bytes: int = 104_857_600
    offsets_commit_timeout_ms: int = 5_000
    offset_metadata_max_bytes: int = 4_096
    # Broker defaults of topic configs, as strings (Kafka's names), e.g. {"min.insync.replicas": "2"}.
    topic_defaults: tuple[tuple[str, str], ...] = ()
    advertised_listeners: str = ""  # HOST:PORT; "" = the listen address

    def topic_default(self, name: str) -> str | None:
        return dict(self.topic_defaults).get(name)


def parse_overrides(items: list[str], base: BrokerSettings | None = None) -> BrokerSettings:
    """``KEY=VALUE`` items -> settings; unknown keys (not controller keys either) are refused."""
    values: dict[str, object] = {}
    topic_defaults = dict((base or BrokerSettings()).topic_defaults)
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise BrokerConfigError(
                f"--override {item!r}: expected KEY=VALUE, e.g. replica.lag.time.max.ms=10000"
            )
        if key in CONTROLLER_KEYS:
            continue
        if key in TOPIC_DEFAULT_KEYS:
            topic_defaults[key] = value.strip()
            continue
        if key in BROKER_FLAGS:
            if value.strip().lower() not in ("true", "false"):
                raise BrokerConfigError(f"setting {key}={value}: must be true or false")
            values[BROKER_FLAGS[key]] = value.strip().lower() == "true"
            continue
        if key == ADVERTISED_LISTENERS:
            _listener(value, f"setting {key}")
            values["advertised_listeners"] = value.strip()
            continue
        if key not in BROKER_OVERRIDES:
            known = sorted({*BROKER_OVERRIDES, *BROKER_FLAGS, *TOPIC_DEFAULT_KEYS, ADVERTISED_LISTENERS})
            raise BrokerConfigError(f"setting {key}: unknown broker setting; known: {', '.join(known)}")
        field, minimum = BROKER_OVERRIDES[key]
        text = value.strip()
        if not text.lstrip("-").isdigit() or int(text) < minimum:
            raise BrokerConfigError(f"setting {key}={value}: must be an integer >= {minimum}")
        values[field] = int(text)
    values["topic_defaults"] = tuple(sorted(topic_defaults.items()))
    return dataclasses.replace(base or BrokerSettings(), **values)


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    node_id: int
    host: str
    port: int
    controllers: tuple[str, ...]
    data_dir: Path
    rack: str
    settings: BrokerSettings
    metrics_port: int = METRICS_OFF
    advertised_host: str = ""  # registered with the controller; "" = host
    advertised_port: int = 0  # 0 = port

    @property
    def listen(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def endpoint(self) -> tuple[str, int]:
        """The (host, port) other nodes and clients dial: the advertised listener."""
        return (self.advertised_host or self.host, self.advertised_port or self.port)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Required, unless given by their Kafka names (node.id, listeners, controller.quorum.bootstrap.servers
    # or controller.quorum.voters, log.dirs, broker.rack) in --config-file or PYKRAFT_* variables.
    parser.add_argument("--node-id", type=int, help="this broker's id (e.g. 101)")
    parser.add_argument("--listen", help="host:port to serve BrokerService/ReplicaService on")
    parser.add_argument("--controllers", help="host:port[,host:port...] of any controllers")
    parser.add_argument("--data-dir", type=Path, help="directory of the partition logs")
    parser.add_argument("--rack", help="rack id for replica placement")
    parser.add_argument(
        "--advertised-listener", "--advertised-listeners", dest="advertised_listener", default=None,
        metavar="HOST:PORT", help="address registered for clients and other brokers (default: --listen)",
    )  # fmt: skip
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--config-file", type=Path, default=None, help="Kafka-style key=value properties")
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument(
        "--metrics-port", type=int, default=0,
        help="Prometheus /metrics port on 127.0.0.1 (0: pick a free one and print it; -1: off)",
    )  # fmt: skip


def config_from(args: argparse.Namespace) -> BrokerConfig:
    known = {*BROKER_OVERRIDES, *BROKER_FLAGS, *TOPIC_DEFAULT_KEYS, ADVERTISED_LISTENERS, *IDENTITY_FLAGS}
    try:
        items = collect_overrides(args.override, known, os.environ, args.config_file)
        items = fill_identity(args, items, IDENTITY_CONVERTERS)
        if args.controllers is None and getattr(args, "voters", None):  # Kafka's brokers know the voters
            args.controllers = ",".join(v.partition("@")[2] for v in args.voters.split(","))
        require(args, *REQUIRED_FLAGS)
    except SettingsError as exc:
        raise BrokerConfigError(str(exc)) from None
    if args.node_id < 0:
        raise BrokerConfigError(f"--node-id {args.node_id}: must be >= 0")
    host, sep, port = args.listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:  # 0: the kernel picks
        raise BrokerConfigError(f"--listen {args.listen!r}: expected HOST:PORT, e.g. 127.0.0.1:9092")
    controllers = tuple(a.strip() for a in args.controllers.split(",") if a.strip())
    if not controllers or any(":" not in a for a in controllers):
        raise BrokerConfigError(f"--controllers {args.controllers!r}: expected HOST:PORT[,HOST:PORT...]")
    if args.metrics_port < METRICS_OFF or args.metrics_port > 65535:
        raise BrokerConfigError(f"--metrics-port {args.metrics_port}: must be 1..65535, 0 (any) or -1 (off)")
    settings = parse_overrides(items)
    if args.advertised_listener is not None:
        advertised = _listener(args.advertised_listener, "--advertised-listener")
    elif settings.advertised_listeners:
        advertised = _listener(settings.advertised_listeners, f"setting {ADVERTISED_LISTENERS}")
    elif host in NON_ROUTABLE_HOSTS:
        raise BrokerConfigError(
            f"--listen {args.listen}: other nodes cannot dial {host}; set --advertised-listener HOST:PORT "
            f"({ADVERTISED_LISTENERS}, PYKRAFT_ADVERTISED_LISTENERS) to the address clients should use"
        )
    else:
        advertised = (host, int(port))
    return BrokerConfig(
        args.node_id, host, int(port), controllers, args.data_dir, args.rack or "", settings,
        args.metrics_port, *advertised,
    )  # fmt: skip


def _listener(text: str, what: str) -> tuple[str, int]:
    try:
        return parse_listener(text, what)
    except SettingsError as exc:
        raise BrokerConfigError(str(exc)) from None
