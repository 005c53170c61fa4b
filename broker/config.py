"""Broker settings, with Kafka's names, and the ``pykraft broker`` command-line flags.

    pykraft broker --node-id 101 --listen 127.0.0.1:9092 --controllers 127.0.0.1:9093,... \\
        --data-dir DIR [--rack R] [--advertised-listener HOST:PORT] [--override KEY=VALUE] ...

Listeners, in Kafka's form. The gRPC services listen on ``--listen`` (listener name ``GRPC``); the
Kafka protocol (``broker.kafka.listener``) on every other entry of ``listeners`` (``--listeners
PLAINTEXT://127.0.0.1:9092``; default one ``PLAINTEXT`` listener on ``--listen``'s host, port 0 = any
free port). A ``GRPC://HOST:PORT`` entry of ``listeners`` stands for ``--listen``. Each Kafka listener's
name maps to a security protocol through ``listener.security.protocol.map`` (Kafka's default map);
only PLAINTEXT is served now, SSL and SASL_* are refused with "not supported yet".
``advertised.listeners`` (``--advertised-listener``) gives per listener the ``NAME://HOST:PORT`` clients
dial; a bare ``HOST:PORT`` is the GRPC one (the form used before Kafka listeners). Unadvertised
listeners register their own host (or, when binding every interface, the GRPC endpoint's host) and the
port they bound. The broker registers every endpoint with the controller, GRPC first (gRPC callers take
a broker's first endpoint); a Kafka Metadata answer lists each broker's endpoint of the listener the
request came through. A gRPC listen address of 0.0.0.0 must be paired with an advertised one.

``--override KEY=VALUE`` takes Kafka's broker config names (``BROKER_OVERRIDES``) plus the broker
defaults of topic configs (``min.insync.replicas``, ``max.message.bytes``, ...: used when the topic has
no override). The local launcher passes the same overrides to every process, so keys that belong to
the controllers (``metadata.server.OVERRIDES``, listed in ``CONTROLLER_KEYS``) are accepted and ignored;
any other key is refused with a message naming it (``BrokerConfigError``). The same settings come
from ``--config-file`` and ``PYKRAFT_<NAME>`` environment variables (``proto.runtime.settings``: flags >
environment > file > defaults). ``--metrics-port`` serves Prometheus metrics (``proto.runtime.metrics``).

This module is light (argparse and dataclasses only) so that ``pykraft --help`` stays fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proto.runtime.metrics import METRICS_HOST, METRICS_HOST_SETTING, METRICS_OFF
from proto.runtime.settings import (
    ADVERTISED_LISTENERS,
    IDENTITY_FLAGS,
    NON_ROUTABLE_HOSTS,
    SettingsError,
    collect_overrides,
    fill_identity,
    listen_address,
    one_dir,
    require,
)
from proto.topic_configs import BROKER_DEFAULT_KEYS

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
    # Consumer groups (broker.group.driver): Kafka's names; -1 replication factor = min(3, live brokers).
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", 1),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", 1),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", 0),
    "group.max.size": ("group_max_size", 1),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", 1),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", -1),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", 14),
    "offsets.commit.timeout.ms": ("offsets_commit_timeout_ms", 1),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", 0),
    # KIP-211 offset expiration (broker.group.metadata_manager). Kafka's minimum is 1 minute; 0 (expire at the
    # next check) lets tests see it happen.
    "offsets.retention.minutes": ("offsets_retention_minutes", 0),
    "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", 1),
    # KIP-854: idle producers' dedup state is dropped after this long (storage.producer_state).
    "producer.id.expiration.ms": ("producer_id_expiration_ms", 1),
    # The Kafka listener (broker.kafka.listener).
    "socket.request.max.bytes": ("socket_request_max_bytes", 1),
    "max.connections": ("max_connections", 1),
    "connections.max.idle.ms": ("connections_max_idle_ms", 1),
    # pykraft's own: the rate limit of the refused-request log lines (broker.kafka.handlers.refusals).
    "log.refused.requests.interval.ms": ("refused_requests_log_interval_ms", 1),
}
# Boolean broker settings: Kafka config name -> BrokerSettings field.
BROKER_FLAGS: dict[str, str] = {
    "log.cleaner.enable": "log_cleaner_enable",
    # Zero-copy fetch (broker.kafka.listener): Fetch answers' records go from the segment files to the socket
    # with sendfile; false reads them into memory (to measure the difference, or to rule it out).
    "kafka.sendfile.enable": "sendfile_enable",
}
# Broker-wide defaults of topic configs (a topic's own setting wins): the catalog's broker defaults.
TOPIC_DEFAULT_KEYS = BROKER_DEFAULT_KEYS
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


IDENTITY_CONVERTERS: dict[str, Callable[[str], object]] = {
    "node_id": int, "listen": listen_address, "controllers": str, "voters": str, "data_dir": one_dir,
    "rack": str,
}  # fmt: skip
REQUIRED_FLAGS = ("node_id", "listen", "controllers", "data_dir")
LISTENERS = "listeners"
SECURITY_PROTOCOL_MAP = "listener.security.protocol.map"
LISTENER_KEYS = frozenset({ADVERTISED_LISTENERS, LISTENERS, SECURITY_PROTOCOL_MAP})
# The broker's gRPC services (--listen) as a listener name: registered first among its endpoints, so
# gRPC callers that take a broker's first endpoint keep reaching them; Kafka clients use the others.
GRPC_LISTENER = "GRPC"
DEFAULT_KAFKA_LISTENER = "PLAINTEXT"
DEFAULT_SECURITY_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
SUPPORTED_SECURITY_PROTOCOLS = frozenset({"PLAINTEXT"})


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
    offsets_retention_minutes: int = 10_080  # Kafka's default: 7 days
    offsets_retention_check_interval_ms: int = 600_000
    # Broker defaults of topic configs, as strings (Kafka's names), e.g. {"min.insync.replicas": "2"}.
    topic_defaults: tuple[tuple[str, str], ...] = ()
    advertised_listeners: str = ""  # Kafka's form (see listener_endpoints); "" = the listen addresses
    listeners: str = ""  # Kafka's form, NAME://HOST:PORT,...; "" = DEFAULT_KAFKA_LISTENER on --listen's host
    listener_security_protocol_map: str = DEFAULT_SECURITY_PROTOCOL_MAP
    socket_request_max_bytes: int = 104_857_600
    max_connections: int = 2**31 - 1
    connections_max_idle_ms: int = 600_000
    sendfile_enable: bool = True
    refused_requests_log_interval_ms: int = 60_000

    def topic_default(self, name: str) -> str | None:
        return dict(self.topic_defaults).get(name)


def parse_overrides(items: list[str], base: BrokerSettings | None = None) -> BrokerSettings:
    """``KEY=VALUE`` items -> settings; unknown keys (not controller keys either) are refused."""
    values: dict[str, Any] = {}  # BrokerSettings field -> its value
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
            _advertised(value.strip())  # validated here, combined with the listeners in config_from
            values["advertised_listeners"] = value.strip()
            continue
        if key in (LISTENERS, SECURITY_PROTOCOL_MAP):
            values[key.replace(".", "_")] = value.strip()
            continue
        if key not in BROKER_OVERRIDES:
            known = sorted({*BROKER_OVERRIDES, *BROKER_FLAGS, *TOPIC_DEFAULT_KEYS, *LISTENER_KEYS})
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
    kafka_listeners: tuple[KafkaListenerSpec, ...] = ()
    metrics_host: str = METRICS_HOST  # --metrics-host: where /metrics listens

    @property
    def listen(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def endpoint(self) -> tuple[str, int]:
        """The (host, port) other nodes and clients dial: the advertised listener."""
        return (self.advertised_host or self.host, self.advertised_port or self.port)


@dataclass(frozen=True, slots=True)
class KafkaListenerSpec:
    """One Kafka listener: where it binds and what it registers (``advertised_port`` 0 = the bound
    port, so ``port`` 0 lets the kernel pick and the broker registers what it got)."""

    name: str
    host: str
    port: int
    advertised_host: str
    advertised_port: int = 0


def parse_listener_list(text: str, what: str) -> dict[str, tuple[str, int]]:
    """Kafka's ``NAME://HOST:PORT,...`` -> {name: (host, port)}. A bare ``HOST:PORT`` entry is the
    gRPC listener (``GRPC_LISTENER``: what ``--listen`` gave before Kafka listeners existed)."""
    entries: dict[str, tuple[str, int]] = {}
    for raw in (part.strip() for part in text.split(",")):
        if not raw:
            continue
        name, sep, address = raw.partition("://")
        if not sep:
            name, address = GRPC_LISTENER, raw
        name = name.strip().upper()
        if not name or not all(c.isalnum() or c == "_" for c in name):
            raise BrokerConfigError(f"{what}={text}: listener name {name!r} must be letters, digits or _")
        host, sep, port = address.rpartition(":")
        host = host.strip("[]")
        if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
            raise BrokerConfigError(
                f"{what}={text}: {raw!r} is not NAME://HOST:PORT, e.g. PLAINTEXT://127.0.0.1:9092"
            )
        if name in entries:
            raise BrokerConfigError(f"{what}={text}: listener {name} appears twice")
        entries[name] = (host, int(port))
    return entries


def _advertised(text: str, what: str = f"setting {ADVERTISED_LISTENERS}") -> dict[str, tuple[str, int]]:
    entries = parse_listener_list(text, what)
    for name, (host, port) in entries.items():
        if host in NON_ROUTABLE_HOSTS or port == 0:
            raise BrokerConfigError(
                f"{what}={text}: {name}://{host}:{port} cannot be dialled by clients; "
                "advertise a routable name or IP address and a port"
            )
    return entries


def _security_protocols(text: str) -> dict[str, str]:
    mapping = {}
    for raw in (part.strip() for part in text.split(",")):
        if not raw:
            continue
        name, sep, protocol = raw.partition(":")
        if not sep or not name.strip() or not protocol.strip():
            raise BrokerConfigError(f"{SECURITY_PROTOCOL_MAP}={text}: {raw!r} is not NAME:PROTOCOL")
        mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping


def kafka_listeners(
    settings: BrokerSettings, grpc_host: str, advertised: dict[str, tuple[str, int]], node_host: str
) -> tuple[KafkaListenerSpec, ...]:
    """The Kafka listeners to serve: ``listeners`` minus its GRPC entry (default: one
    ``PLAINTEXT://<grpc host>:0``); each must map to a supported security protocol, and each
    registers its ``advertised.listeners`` entry (default: its own host, or ``node_host`` — the host
    the gRPC endpoint advertises — when it binds every interface, and its bound port)."""
    entries = parse_listener_list(settings.listeners, LISTENERS) if settings.listeners else {}
    entries.pop(GRPC_LISTENER, None)
    if not entries:
        entries = {DEFAULT_KAFKA_LISTENER: (grpc_host, 0)}
    protocols = _security_protocols(settings.listener_security_protocol_map)
    specs = []
    for name, (host, port) in entries.items():
        protocol = protocols.get(name)
        if protocol is None:
            raise BrokerConfigError(
                f"{LISTENERS}: listener {name} has no security protocol in {SECURITY_PROTOCOL_MAP}="
                f"{settings.listener_security_protocol_map}; add {name}:PLAINTEXT"
            )
        if protocol not in SUPPORTED_SECURITY_PROTOCOLS:
            raise BrokerConfigError(
                f"{LISTENERS}: listener {name} uses {protocol}, which pykraft does not support yet "
                f"(only {', '.join(sorted(SUPPORTED_SECURITY_PROTOCOLS))}); SSL and SASL come later"
            )
        default_host = node_host if host in NON_ROUTABLE_HOSTS else host
        advertised_host, advertised_port = advertised.get(name, (default_host, 0))
        specs.append(KafkaListenerSpec(name, host, port, advertised_host, advertised_port))
    unknown = set(advertised) - set(entries) - {GRPC_LISTENER}
    if unknown:
        raise BrokerConfigError(
            f"{ADVERTISED_LISTENERS}: {', '.join(sorted(unknown))} is not in {LISTENERS} "
            f"(listeners: {', '.join(sorted(entries))})"
        )
    return tuple(specs)


def _take_listeners(items: list[str], args: argparse.Namespace) -> tuple[list[str], str | None]:
    """Take Kafka's ``listeners`` out of the merged items (the shared identity rule would read it as
    the gRPC address): its GRPC entry fills ``--listen`` when not given; the rest stays a setting."""
    rest, from_items = [], None
    for item in items:
        key, _, text = item.partition("=")
        if key.strip() == LISTENERS:
            from_items = text.strip()  # the last one wins, as for every setting
        else:
            rest.append(item)
    value = getattr(args, "listeners", None) or from_items  # the flag wins
    if value is None:
        return rest, None
    entries = parse_listener_list(value, LISTENERS)
    if args.listen is None and GRPC_LISTENER in entries:
        host, port = entries[GRPC_LISTENER]
        args.listen = f"{host}:{port}"
    elif args.listen is None:
        raise SettingsError(
            f"{LISTENERS}={value}: no {GRPC_LISTENER}://HOST:PORT entry and no --listen; a broker serves its "
            f"gRPC services there and Kafka clients on the other entries, e.g. "
            f"{LISTENERS}={GRPC_LISTENER}://0.0.0.0:9091,PLAINTEXT://0.0.0.0:9092"
        )
    return rest, value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Required, unless given by their Kafka names (node.id, listeners, controller.quorum.bootstrap.servers
    # or controller.quorum.voters, log.dirs, broker.rack) in --config-file or PYKRAFT_* variables.
    parser.add_argument("--node-id", type=int, help="this broker's id (e.g. 101)")
    parser.add_argument("--listen", help="host:port of the gRPC admin API and health")
    parser.add_argument("--controllers", help="host:port[,host:port...] of any controllers")
    parser.add_argument("--data-dir", type=Path, help="directory of the partition logs")
    parser.add_argument("--rack", help="rack id for replica placement")
    parser.add_argument(
        "--advertised-listener", "--advertised-listeners", dest="advertised_listener", default=None,
        metavar="HOST:PORT", help="address registered for clients and other brokers (default: --listen)",
    )  # fmt: skip
    parser.add_argument(
        "--listeners", default=None, metavar="NAME://HOST:PORT,...",
        help="Kafka listeners, e.g. PLAINTEXT://127.0.0.1:9092 (port 0: any free port); a GRPC://HOST:PORT "
        "entry stands for --listen (default: PLAINTEXT on --listen's host, any free port)",
    )  # fmt: skip
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--config-file", type=Path, default=None, help="Kafka-style key=value properties")
    parser.add_argument("--log-level", default="INFO", help="log level (default: %(default)s, as Kafka's)")
    parser.add_argument(
        "--metrics-port", type=int, default=0,
        help="Prometheus /metrics port on --metrics-host (0: a free one, named in the ready file; -1: off)",
    )  # fmt: skip
    parser.add_argument(
        METRICS_HOST_SETTING, default=METRICS_HOST, metavar="HOST",
        help="address /metrics listens on (default: %(default)s; 0.0.0.0 in a container, for Prometheus)",
    )  # fmt: skip


def config_from(args: argparse.Namespace) -> BrokerConfig:
    known = {*BROKER_OVERRIDES, *BROKER_FLAGS, *TOPIC_DEFAULT_KEYS, *LISTENER_KEYS, *IDENTITY_FLAGS}
    try:
        items = collect_overrides(args.override, known, os.environ, args.config_file)
        items, listeners_value = _take_listeners(items, args)
        items = fill_identity(args, items, IDENTITY_CONVERTERS)
        if listeners_value is not None:
            items.append(f"{LISTENERS}={listeners_value}")
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
        advertised_all = _advertised(args.advertised_listener, "--advertised-listener")
    else:
        advertised_all = _advertised(settings.advertised_listeners) if settings.advertised_listeners else {}
    if GRPC_LISTENER in advertised_all:
        advertised = advertised_all[GRPC_LISTENER]
    elif host in NON_ROUTABLE_HOSTS:
        raise BrokerConfigError(
            f"--listen {args.listen}: other nodes cannot dial {host}; set --advertised-listener HOST:PORT "
            f"({ADVERTISED_LISTENERS}, PYKRAFT_ADVERTISED_LISTENERS) to the address clients should use"
        )
    else:
        advertised = (host, int(port))
    listeners = kafka_listeners(settings, host, advertised_all, advertised[0])
    return BrokerConfig(
        args.node_id, host, int(port), controllers, args.data_dir, args.rack or "", settings,
        args.metrics_port, *advertised, kafka_listeners=listeners, metrics_host=args.metrics_host,
    )  # fmt: skip


